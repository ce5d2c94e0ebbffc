// The "live" panel of the page at `/` (see context.js): the run as it happens.
//
// - the loss chart (chart.js): one training-loss point per applied step (the peer's `step`
//   events, peer.js record()) and the validation loss every evalEvery(steps) steps and at the
//   last step;
// - progress (step N of M, ETA from the recent step rate), the group's tokens/s (roster size x
//   batch x seq_len per step of wall time) and each device's (this one from its own gradient
//   time; the others from what their mesh `device` record publishes, `tokens_per_s`, else "–");
// - the step time split into compute (this device's gradient) and exchange (gradient ready ->
//   step applied);
// - the per-step hash agreement from the sync guard's read-only tally (machine/guard.js):
//   "3 replicas identical at step 41, hash 9f3c…", and the units per backend the group's `hash`
//   messages name ("2 × webgpu-dp4a, 1 × numpy");
// - the errors of the run: a fork's report (which device published which hash), a lost
//   validation text, through page.error(message, hint, 'live'); the peer's `error` events, a
//   run that stopped, a lost device and a failed gate reach page.error from app.js already
//   (sources 'run' and 'worker'), so this panel does not repeat them (the problems list would
//   count each twice); it says in its own status line how the run ended.
//
// Validation loss (docs/MODEL.md section 8): the page fetches the validation split's ids
// (/api/corpus/builtin?split=val) and asks the training worker for the forward-only loss of the
// 4 validation batches (train/validation.js, the worker's `eval`). It is asked synchronously in
// the `step` listener, so it reaches the worker before the next step's weights can (requests
// are served in order); the worker answers with the step and hash it measured, and a value whose
// step or hash is not the step's own is not shown. It delays this device's next gradient by
// about four forward passes, which the panel says while it runs. FineWeb-Edu runs have no
// validation split on the page: the panel says so.
//
// Tests read `live` (this module's export): the chart (`live.chart.points`, `.valPoints`), the
// last read-outs (`live.view`) and the outcome the panel has shown (`live.finished`).

import { LossChart } from './chart.js';
import { rosterOf } from './roster.js';
import * as F from './livefigures.js';
import { validationBatches } from '../train/validation.js';

/** What the panel shows, for tests and the console. */
export const live = { chart: null, view: null, validations: [], finished: null };

function el(tag, attrs = {}, text = '') {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

/** The validation split's ids, checked against the page's tokenizer (as app.js checks the
 * training ids). Rejects with a hint. */
async function loadValTokens(tokenizerSha256) {
  const response = await fetch('/api/corpus/builtin?split=val');
  if (!response.ok) {
    throw Object.assign(new Error(`the validation text could not be loaded: HTTP ${response.status}`),
      { hint: 'training goes on; reload the page to see the validation loss' });
  }
  const made = response.headers.get('X-DaisyChain-Tokenizer-SHA256');
  if (made !== tokenizerSha256) {
    throw Object.assign(new Error('the validation tokens were made with another tokenizer'),
      { hint: 'reload the page (the server was updated)' });
  }
  const dtype = response.headers.get('X-DaisyChain-Token-Dtype');
  const bytes = await response.arrayBuffer();
  const Type = dtype === 'uint16' ? Uint16Array : dtype === 'uint32' ? Uint32Array : null;
  if (Type === null || bytes.byteLength % Type.BYTES_PER_ELEMENT !== 0) {
    throw Object.assign(new Error(`unexpected validation data (${dtype}, ${bytes.byteLength} bytes)`),
      { hint: 'reload the page' });
  }
  return new Type(bytes);
}

class LivePanel {
  constructor(root, page) {
    this.root = root;
    this.page = page;
    this.peer = null; // the session's peer
    this.mesh = null;
    this.runPeer = null; // the peer of the run on the chart (a finished run stays shown)
    this.cfg = null; // that run's config
    this.run = null; // config.run of the run on the chart
    this.records = [];
    this.valTokens = null;
    this.valLoading = null;
    this.evaluating = 0;
    this.finished = null; // the outcome of the run on the chart, once it ended
    this.names = new Map(); // peer id -> name, kept after a device leaves the group
    this.build();
  }

  build() {
    const r = this.root;
    r.classList.add('live');
    r.setAttribute('aria-labelledby', 'live-title');
    const head = el('div', { class: 'live-head' });
    head.append(el('h2', { id: 'live-title' }, 'Live'));
    this.state = el('p', { class: 'live-state', role: 'status', 'aria-live': 'polite' },
      'No run yet: this device follows the first run a leader starts.');
    this.progress = el('progress', { max: '1', value: '0', 'aria-label': 'run progress' });
    this.progressText = el('p', { class: 'live-progress' });
    head.append(this.state);
    const chartBox = el('div', { class: 'live-chart' });
    r.append(head, this.progress, this.progressText, chartBox);
    this.chart = new LossChart(chartBox, { title: 'Loss' });
    live.chart = this.chart;

    const dl = el('dl', { class: 'live-figures', 'aria-label': 'the run now' });
    const row = (label, cls) => {
      const dd = el('dd', { class: cls }, '–');
      dl.append(el('dt', {}, label), dd);
      return dd;
    };
    this.lossOut = row('Loss', 'live-loss');
    this.agreeOut = row('Replicas', 'live-agree');
    this.unitsOut = row('Units', 'live-units');
    this.rateOut = row('Group speed', 'live-rate');
    this.splitOut = row('Step time', 'live-split');
    this.valOut = row('Validation', 'live-val');
    this.splitBar = el('div', { class: 'live-splitbar', 'aria-hidden': 'true' });
    this.splitBar.append(el('span', { class: 'compute' }), el('span', { class: 'exchange' }));
    this.splitOut.after(this.splitBar);
    r.append(dl);

    this.devices = el('table', { class: 'live-devices' });
    this.devices.innerHTML = '<caption>Devices in this run</caption><thead><tr>' +
      '<th scope="col">device</th><th scope="col">backend</th><th scope="col">speed</th>' +
      '<th scope="col"><abbr title="the same weights hash as this device">hash</abbr></th>' +
      '</tr></thead><tbody></tbody>';
    const wrap = el('div', { class: 'live-devices-wrap' });
    wrap.append(this.devices);
    r.append(wrap);
    this.render();
  }

  // -- sessions -------------------------------------------------------------------------------

  attach({ mesh, peer }) {
    this.peer = peer;
    this.mesh = mesh;
    if (!peer) return;
    const mine = (fn) => (e) => {
      if (this.peer === peer) fn(e.detail);
    };
    peer.addEventListener('phase', mine((d) => this.onPhase(peer, d.phase)));
    peer.addEventListener('step', mine((d) => this.onStep(peer, d)));
    peer.addEventListener('finished', mine((d) => this.onFinished(d.outcome)));
  }

  get config() {
    return this.cfg;
  }

  onPhase(peer, phase) {
    const cfg = peer.machine?.config ?? null;
    if ((phase === 'configured' || phase === 'training') && cfg && cfg.run !== this.run) {
      this.newRun(peer, cfg);
    }
  }

  newRun(peer, cfg) {
    this.runPeer = peer;
    this.cfg = cfg;
    this.replica = this.page.replica;
    this.run = cfg.run;
    this.records = [];
    this.finished = null;
    live.finished = null;
    live.validations = [];
    this.chart.reset(cfg.steps);
    this.setState(`A run of ${cfg.steps} steps (${cfg.preset ?? 'custom'} model) is starting: ` +
      'waiting for the first step.');
    if (cfg.data === 'builtin') this.ensureValTokens();
    this.render();
  }

  ensureValTokens() {
    if (this.valTokens !== null || this.valLoading !== null) return;
    const sha = this.page.tokenizer?.sha256 ?? this.runPeer?.tokenizerSha256;
    this.valLoading = loadValTokens(sha).then((t) => {
      this.valTokens = t;
    }, (exc) => {
      this.valLoading = null;
      this.page.error(exc.message, exc.hint, 'live');
    });
  }

  // -- steps ----------------------------------------------------------------------------------

  onStep(peer, r) {
    const cfg = peer.machine?.config ?? null;
    if (cfg && cfg.run !== this.run) this.newRun(peer, cfg);
    // Ask for the validation loss first: nothing may reach the worker between the step's apply
    // and this request (the worker serves requests in order).
    if (cfg && F.evalDue(r.step, cfg.steps)) this.evaluate(r, cfg);
    this.records.push(r);
    this.chart.addTrain(r.step, r.loss);
    this.render();
  }

  evaluate(r, cfg) {
    const worker = this.replica?.worker;
    if (cfg.data !== 'builtin') return;
    if (this.valTokens === null || !worker) return; // not loaded yet: the next one
    const { batch, seq_len: seqLen } = cfg.model;
    const batches = validationBatches(this.valTokens, batch, seqLen, cfg.seed);
    this.evaluating += 1;
    this.render();
    worker.evaluate(batches).then((v) => {
      if (v.step !== r.step || v.hash !== r.hash) return; // another state: not this step's
      live.validations.push({ step: v.step, hash: v.hash, loss: v.loss, losses: v.losses, ms: v.ms });
      if (this.run === cfg.run) this.chart.addVal(v.step, v.loss);
    }, (exc) => {
      // The worker went away with the run (a new session) or failed: training is unaffected.
      live.validations.push({ step: r.step, error: exc.message });
    }).finally(() => {
      this.evaluating -= 1;
      this.render();
    });
  }

  onFinished(o) {
    const at = `at step ${o.step}`;
    if (o.reason === 'fork') {
      // app.js shows the outcome's message; this names every device's hash.
      const hashes = [...(o.hashes ?? new Map())].map(([p, h]) =>
        `${this.nameOf(p)}: ${F.shortHash(h)}`).join(', ');
      this.page.error(`the replicas forked ${at}${hashes ? ` (${hashes})` : ''}`,
        'the run stopped so no wrong weights spread; a device named in the message computes ' +
        'other bits: restart it on another backend (?backend=js-cpu, or --backend numpy)', 'live');
      this.setState(`The run stopped ${at}: the replicas forked.`);
    } else if (o.reason === 'error') {
      this.setState(`The run stopped ${at} with an error (see Problems).`);
    } else {
      const how = {
        done: `The run is done: ${o.step} steps.`,
        'leader-request': `The leader stopped the run at step ${o.step}.`,
        left: `This device left the run at step ${o.step}${o.message ? `: ${o.message}` : ''}.`,
      };
      this.setState(how[o.reason] ?? `The run ended ${at} (${o.reason}${o.message ? `: ${o.message}` : ''}).`);
    }
    this.finished = o;
    live.finished = o;
    this.render();
  }

  setState(text) {
    this.state.textContent = text;
  }

  nameOf(id) {
    if (id === this.runPeer?.id) return `${this.page.name || id.slice(0, 6)} (this device)`;
    const name = this.runPeer ? rosterOf(this.runPeer.mesh).nameOf(id) : id;
    if (name !== id) this.names.set(id, name);
    return this.names.get(id) ?? id.slice(0, 6);
  }

  // -- read-outs ------------------------------------------------------------------------------

  render() {
    const cfg = this.config;
    const recs = this.records;
    const last = recs.at(-1);
    const view = { step: last?.step ?? 0, steps: cfg?.steps ?? 0 };
    if (cfg && last) {
      const { batch, seq_len: seqLen } = cfg.model;
      const n = Math.min(5, recs.length - 1);
      const msPerStep = n > 0 ? (last.appliedAtMs - recs.at(-1 - n).appliedAtMs) / n : null;
      this.progress.max = cfg.steps;
      this.progress.value = last.step;
      view.progress = this.finished ? `stopped at step ${last.step} of ${cfg.steps}`
        : F.progressLine(last.step, cfg.steps, msPerStep);
      if (!this.finished && recs.length === 1) {
        this.setState(`Training with ${last.roster.length} devices` +
          `${this.runPeer?.isLeader ? ', led by this device' : ''}.`);
      }
      this.progressText.textContent = view.progress;

      const val = this.chart.valPoints.at(-1);
      view.loss = `training ${last.loss.toFixed(4)}` +
        (val ? ` · validation ${val.loss.toFixed(4)} (step ${val.step})` : '');
      this.lossOut.textContent = view.loss;

      const machine = this.runPeer?.machine;
      const tally = machine?.tally(last.step, last.round, last.roster) ?? null;
      // The newest step's hashes may still be on their way: show the newest complete one.
      const prev = recs.length > 1 ? recs.at(-2) : null;
      let shown = tally;
      if (tally && tally.missing.length && prev) {
        const t2 = machine.tally(prev.step, prev.round, prev.roster);
        if (t2 && !t2.missing.length) shown = t2;
      }
      const line = F.agreementLine(shown);
      view.agreement = line;
      this.agreeOut.textContent = line.text;
      this.agreeOut.dataset.state = line.state;
      view.units = F.unitsLine(shown?.backends ?? new Map());
      this.unitsOut.textContent = view.units;

      view.rate = F.formatRate(F.groupRate(recs, batch, seqLen));
      this.rateOut.textContent = `${view.rate} (${last.roster.length} devices)`;

      const split = F.stepSplit(last, prev);
      view.split = split;
      const parts = [`compute ${F.formatDuration(split.compute)}`,
        `exchange ${F.formatDuration(split.exchange)}`];
      this.splitOut.textContent = split.wall === null ? parts.join(', ')
        : `${F.formatDuration(split.wall)}: ${parts.join(', ')}`;
      const total = (split.compute ?? 0) + (split.exchange ?? 0);
      const [c, x] = this.splitBar.children;
      c.style.flexGrow = String(total ? (split.compute ?? 0) / total : 0);
      x.style.flexGrow = String(total ? (split.exchange ?? 0) / total : 0);

      this.renderDevices(last, shown, batch * seqLen);
    } else {
      this.progressText.textContent = cfg ? `0 of ${cfg.steps} steps` : '';
    }
    this.root.classList.toggle('idle', cfg === null);
    view.validation = this.validationText(cfg);
    this.valOut.textContent = view.validation;
    live.view = view;
  }

  validationText(cfg) {
    if (!cfg) return '–';
    if (cfg.data !== 'builtin') return 'not measured: this run reads FineWeb-Edu, the page has ' +
      'a validation split of the built-in text only';
    const every = F.evalEvery(cfg.steps);
    const when = `every ${every} steps and at the last, on this device (4 batches, forward only)`;
    if (this.evaluating > 0) return `measuring now: the next step waits for it (${when})`;
    if (this.valTokens === null) return `loading the validation text (${when})`;
    return when;
  }

  renderDevices(last, tally, tokensPerStep) {
    const me = this.runPeer?.id;
    const order = [me, ...last.roster.filter((id) => id !== me)].filter((id) => last.roster.includes(id));
    const rows = order.map((id) => {
      const device = this.runPeer?.mesh?.devices?.get(id) ?? {};
      let rate = null;
      if (id === me) rate = F.tokensPerSecond(tokensPerStep, last.computeMs);
      else if (Number.isFinite(device.tokens_per_s)) rate = device.tokens_per_s;
      const backend = id === me ? last.backend : tally?.byPeer.get(id) ?? device.backend ?? '–';
      const hash = !tally ? '…' : tally.same.includes(id) ? '✓'
        : tally.differ.includes(id) ? '✗ differs' : '…';
      return [this.nameOf(id), backend, F.formatRate(rate), hash];
    });
    this.devices.tBodies[0].replaceChildren(...rows.map((cells) => {
      const tr = el('tr');
      for (const c of cells) tr.append(el('td', {}, c));
      return tr;
    }));
  }
}

/** Mounts the live panel in `root` (its <section>); re-attaches on every session. */
export function mount(root, page) {
  const panel = new LivePanel(root, page);
  live.panel = panel;
  page.addEventListener('session', (e) => panel.attach(e.detail));
  if (page.peer) panel.attach({ mesh: page.mesh, peer: page.peer });
  return panel;
}
