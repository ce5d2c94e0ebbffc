// A small line chart on a canvas, no library: the training loss per step (a line) and the
// validation loss (points), with axes and their labels. Used by the live panel (live.js).
//
// Responsive: the canvas takes its container's width (a ResizeObserver redraws it) and draws at
// devicePixelRatio, so lines stay sharp on a phone. Accessible: the canvas is role=img with an
// aria-label that says the latest values; the same numbers are in a text fallback (a table of
// the recent points in a <details>), and the canvas's own fallback content says so. Colors come
// from CSS (live.css: --chart-train, --chart-val, --chart-grid, and the canvas's `color` for
// text), so the chart follows the page's theme.
//
// Data: `chart.points` [{step, loss}] and `chart.valPoints` [{step, loss}], in the order added
// (tests read them).

import { h } from './dom.js';

const PAD = { top: 12, right: 14, bottom: 38, left: 52 };
const TABLE_ROWS = 8;

/** About `count` round tick values covering [lo, hi]. */
export function ticks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    out.push(Number(v.toPrecision(12)));
  }
  return out;
}

const fmtLoss = (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));

export class LossChart {
  /** Builds the chart inside `root` (an element); `title` names it for assistive technology. */
  constructor(root, { title = 'Loss' } = {}) {
    this.points = [];
    this.valPoints = [];
    this.totalSteps = 0;
    this.title = title;
    this.pending = false;

    this.canvas = h('canvas', { role: 'img', text: 'The loss chart; its values are in the table below.' });
    const legend = h('figcaption', { class: 'chart-legend' });
    legend.innerHTML = '<span class="key key-train" aria-hidden="true"></span> training loss ' +
      '<span class="key key-val" aria-hidden="true"></span> validation loss';
    this.figure = h('figure', { class: 'chart' }, this.canvas, legend);
    this.table = h('table');
    this.table.innerHTML = '<caption>The most recent steps</caption><thead><tr>' +
      '<th scope="col">step</th><th scope="col">training loss</th>' +
      '<th scope="col">validation loss</th></tr></thead><tbody></tbody>';
    this.details = h('details', { class: 'chart-text' }, h('summary', { text: 'Loss as text' }), this.table);
    root.append(this.figure, this.details);

    this.observer = new ResizeObserver(() => this.schedule());
    this.observer.observe(this.figure);
    this.describe();
    this.schedule();
  }

  /** Forget every point (a new run of `totalSteps` steps). */
  reset(totalSteps = 0) {
    this.points = [];
    this.valPoints = [];
    this.totalSteps = totalSteps;
    this.update();
  }

  addTrain(step, loss) {
    this.points.push({ step, loss });
    this.update();
  }

  addVal(step, loss) {
    this.valPoints.push({ step, loss });
    this.update();
  }

  update() {
    this.describe();
    this.renderTable();
    this.schedule();
  }

  /** The aria-label: what a sighted user reads off the chart. */
  describe() {
    const last = this.points.at(-1);
    const val = this.valPoints.at(-1);
    let text = `${this.title} chart: `;
    if (last === undefined) {
      text += 'no steps yet.';
    } else {
      const first = this.points[0];
      text += `training loss ${last.loss.toFixed(3)} at step ${last.step}` +
        (this.totalSteps ? ` of ${this.totalSteps}` : '') +
        (this.points.length > 1 ? ` (${first.loss.toFixed(3)} at step ${first.step})` : '') + '; ' +
        (val === undefined ? 'no validation loss yet.'
          : `validation loss ${val.loss.toFixed(3)} at step ${val.step}.`);
    }
    this.canvas.setAttribute('aria-label', text);
  }

  renderTable() {
    const val = new Map(this.valPoints.map((p) => [p.step, p.loss]));
    const steps = [...new Set([...this.points.map((p) => p.step), ...val.keys()])]
      .sort((a, b) => b - a).slice(0, TABLE_ROWS);
    const train = new Map(this.points.map((p) => [p.step, p.loss]));
    this.table.tBodies[0].replaceChildren(...steps.map((s) => h('tr', {},
      ...[String(s), train.has(s) ? train.get(s).toFixed(4) : '–', val.has(s) ? val.get(s).toFixed(4) : '–']
        .map((v) => h('td', { text: v })))));
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => {
      this.pending = false;
      this.draw();
    });
  }

  draw() {
    const cssWidth = Math.max(200, Math.floor(this.figure.clientWidth));
    const cssHeight = Math.round(Math.min(300, Math.max(220, cssWidth * 0.42)));
    const dpr = globalThis.devicePixelRatio || 1;
    const c = this.canvas;
    if (c.width !== Math.round(cssWidth * dpr) || c.height !== Math.round(cssHeight * dpr)) {
      c.width = Math.round(cssWidth * dpr);
      c.height = Math.round(cssHeight * dpr);
    }
    c.style.height = `${cssHeight}px`;
    const ctx = c.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, cssWidth, cssHeight);
    const style = getComputedStyle(c);
    const color = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
    const text = style.color || '#222';
    const grid = color('--chart-grid', 'rgba(127,127,127,0.25)');
    const trainColor = color('--chart-train', '#2563eb');
    const valColor = color('--chart-val', '#d97706');
    ctx.font = `12px ${style.fontFamily || 'system-ui, sans-serif'}`;

    const all = [...this.points, ...this.valPoints].filter((p) => Number.isFinite(p.loss));
    const maxStep = Math.max(this.totalSteps, ...all.map((p) => p.step), 1);
    let lo = Math.min(...all.map((p) => p.loss));
    let hi = Math.max(...all.map((p) => p.loss));
    if (!all.length) [lo, hi] = [0, 1];
    if (hi - lo < 1e-6) [lo, hi] = [lo - 0.5, hi + 0.5];
    const span = hi - lo;
    lo = Math.max(0, lo - span * 0.05);
    hi += span * 0.05;
    const w = cssWidth - PAD.left - PAD.right;
    const h = cssHeight - PAD.top - PAD.bottom;
    const X = (s) => PAD.left + (s / maxStep) * w;
    const Y = (v) => PAD.top + (1 - (v - lo) / (hi - lo)) * h;

    // Grid and tick labels.
    ctx.strokeStyle = grid;
    ctx.fillStyle = text;
    ctx.lineWidth = 1;
    ctx.textAlign = 'right';
    ctx.textBaseline = 'middle';
    for (const v of ticks(lo, hi, 5)) {
      const y = Math.round(Y(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(PAD.left, y);
      ctx.lineTo(PAD.left + w, y);
      ctx.stroke();
      ctx.fillText(fmtLoss(v), PAD.left - 6, y);
    }
    ctx.textAlign = 'center';
    ctx.textBaseline = 'top';
    for (const s of ticks(0, maxStep, w < 300 ? 3 : 6).filter((t) => Number.isInteger(t))) {
      ctx.fillText(String(s), X(s), PAD.top + h + 5);
    }
    // Axes and their labels.
    ctx.strokeStyle = text;
    ctx.beginPath();
    ctx.moveTo(PAD.left + 0.5, PAD.top);
    ctx.lineTo(PAD.left + 0.5, PAD.top + h + 0.5);
    ctx.lineTo(PAD.left + w, PAD.top + h + 0.5);
    ctx.stroke();
    ctx.fillText('step', PAD.left + w / 2, PAD.top + h + 21);
    ctx.save();
    ctx.translate(13, PAD.top + h / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = 'middle';
    ctx.fillText('loss', 0, 0);
    ctx.restore();

    // Training loss: a line (a dot while there is one point).
    const pts = this.points.filter((p) => Number.isFinite(p.loss));
    ctx.strokeStyle = trainColor;
    ctx.fillStyle = trainColor;
    ctx.lineWidth = 2;
    ctx.lineJoin = 'round';
    if (pts.length === 1) {
      ctx.beginPath();
      ctx.arc(X(pts[0].step), Y(pts[0].loss), 2.5, 0, 2 * Math.PI);
      ctx.fill();
    } else if (pts.length > 1) {
      ctx.beginPath();
      pts.forEach((p, i) => (i ? ctx.lineTo(X(p.step), Y(p.loss)) : ctx.moveTo(X(p.step), Y(p.loss))));
      ctx.stroke();
    }
    // Validation loss: points with an outline, so they read on the line too.
    ctx.fillStyle = valColor;
    ctx.strokeStyle = style.getPropertyValue('--chart-bg').trim() || '#fff';
    ctx.lineWidth = 1.5;
    for (const p of this.valPoints.filter((q) => Number.isFinite(q.loss))) {
      ctx.beginPath();
      ctx.arc(X(p.step), Y(p.loss), 4.5, 0, 2 * Math.PI);
      ctx.fill();
      ctx.stroke();
    }
  }

  /** Stop observing the container (the panel is going away). */
  dispose() {
    this.observer.disconnect();
  }
}
