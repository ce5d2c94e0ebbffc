// The "live" panel of the page at `/` (see context.js): the run as it happens.
//
// - the loss chart (chart.js): one training-loss point per applied step (the peer's `step`
//   events, peer.js record()) and the validation loss every evalEvery(steps) steps and at the
//   last step;
// - progress (step N of M, ETA from the recent step rate), the group's tokens/s (the global
//   batch, the sum of the roster's shares, x seq_len per step of wall time) next to the fastest
//   device's alone (an estimate: seq_len / its seconds per sequence, its gradient time only),
//   and per device its share ("3 of 16"; "follows": a share of 0, the group panel says it in
//   full: "computes 3 of 16 sequences", "follows without computing") and
//   its tokens/s (seq_len / the seconds per sequence its `hash` messages report; before any,
//   this one from its own gradient time and the others from their mesh `device` record's
//   `tokens_per_s`, else "–");
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
// The line "The screen is kept on while this device trains" and its checkbox under the panel's
// head are awake.js's (mounted here: the run's own place on the page).
//
// Tests read `live` (this module's export): the chart (`live.chart.points`, `.valPoints`), the
// last read-outs (`live.view`) and the outcome the panel has shown (`live.finished`).

import { LossChart } from './chart.js';
import { h } from './dom.js';
import { rosterOf } from './roster.js';
import * as F from './livefigures.js';
import { FOLD_AT, ordered, summarize, summaryLines } from './crowd.js';
import { validationBatches } from '../train/validation.js';
import * as awake from './awake.js';

/** What the panel shows, for tests and the console. */
export const live = { chart: null, view: null, validations: [], finished: null,
  renderDeviceRows: null };

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

/** Mounts the live panel in `root` (its <section>); re-attaches on every session. */
export function mount(root, page) {
  let peer = null; // the session's peer
  let runPeer = null; // the peer of the run on the chart (a finished run stays shown)
  let replica = null; // that run's replica (its worker measures the validation loss)
  let cfg = null; // that run's config
  let run = null; // config.run of the run on the chart
  let records = [];
  let valTokens = null;
  let valLoading = null;
  let evaluating = 0;
  let finished = null; // the outcome of the run on the chart, once it ended
  const names = new Map(); // peer id -> name, kept after a device leaves the group

  // -- DOM ------------------------------------------------------------------------------------
  root.classList.add('live');
  root.setAttribute('aria-labelledby', 'live-title');
  const state = h('p', { class: 'live-state', role: 'status', 'aria-live': 'polite' },
    'No run yet: this device follows the first run a leader starts.');
  const awakeBox = h('div', { class: 'live-awake' }); // awake.js: is the screen kept on
  const head = h('div', { class: 'live-head' }, h('h2', { id: 'live-title' }, 'Live'), state, awakeBox);
  const progress = h('progress', { max: '1', value: '0', 'aria-label': 'run progress' });
  const progressText = h('p', { class: 'live-progress' });
  const chartBox = h('div', { class: 'live-chart' });
  root.append(head, progress, progressText, chartBox);
  awake.mount(awakeBox, page);
  const chart = new LossChart(chartBox, { title: 'Loss' });
  live.chart = chart;

  const dl = h('dl', { class: 'live-figures', 'aria-label': 'the run now' });
  const row = (label, cls) => {
    const dd = h('dd', { class: cls }, '–');
    dl.append(h('dt', {}, label), dd);
    return dd;
  };
  const lossOut = row('Loss', 'live-loss');
  const agreeOut = row('Replicas', 'live-agree');
  const unitsOut = row('Units', 'live-units');
  const rateOut = row('Group speed', 'live-rate');
  const splitOut = row('Step time', 'live-split');
  const valOut = row('Validation', 'live-val');
  const syncOut = row('Exchange', 'live-sync');
  const bytesOut = row('Bytes sent', 'live-bytes');
  const splitBar = h('div', { class: 'live-splitbar', 'aria-hidden': 'true' },
    h('span', { class: 'compute' }), h('span', { class: 'exchange' }));
  splitOut.after(splitBar);
  root.append(dl);

  const devices = h('table', { class: 'live-devices' });
  devices.innerHTML = '<caption>Devices in this run</caption><thead><tr>' +
    '<th scope="col">device</th><th scope="col"><abbr title="sequences of this step this device ' +
    'computes, of the whole group\'s">share</abbr></th><th scope="col">backend</th>' +
    '<th scope="col"><abbr title="tokens per second of gradient time">speed</abbr></th>' +
    '<th scope="col"><abbr title="the same weights hash as this device">hash</abbr></th>' +
    '</tr></thead><tbody></tbody>';
  // Past crowd.js's FOLD_AT devices: a summary above the table, the rows ordered problems (a
  // differing hash) and the slowest first, and only the first FOLD_AT shown until "Show all".
  const devicesSummary = h('div', { class: 'live-devices-summary', role: 'status', hidden: true });
  const restRows = h('tbody', { class: 'live-devices-rest', hidden: true });
  devices.append(restRows);
  const showAll = h('button', { type: 'button', class: 'live-devices-all', hidden: true,
    'aria-expanded': 'false', text: 'Show all devices' });
  showAll.addEventListener('click', () => {
    restRows.hidden = !restRows.hidden;
    showAll.setAttribute('aria-expanded', String(!restRows.hidden));
    showAll.textContent = restRows.hidden ? showAll.dataset.more : 'Show fewer devices';
  });
  root.append(devicesSummary, h('div', { class: 'live-devices-wrap' }, devices), showAll);

  const setState = (text) => {
    state.textContent = text;
  };

  // -- runs -----------------------------------------------------------------------------------

  function onPhase(p) {
    if (p.inRun && p.config && p.config.run !== run) newRun(p, p.config);
  }

  function newRun(p, c) {
    runPeer = p;
    cfg = c;
    replica = page.replica;
    run = c.run;
    records = [];
    finished = null;
    live.finished = null;
    live.validations = [];
    chart.reset(c.steps);
    setState(`A run of ${c.steps} steps (${c.preset ?? 'custom'} model) is starting: ` +
      'waiting for the first step.');
    if (c.data === 'builtin') ensureValTokens();
    render();
  }

  function ensureValTokens() {
    if (valTokens !== null || valLoading !== null) return;
    const sha = page.tokenizer?.sha256 ?? runPeer?.tokenizerSha256;
    valLoading = loadValTokens(sha).then((t) => {
      valTokens = t;
    }, (exc) => {
      valLoading = null;
      page.error(exc.message, exc.hint, 'live');
    });
  }

  // -- steps ----------------------------------------------------------------------------------

  function onStep(p, r) {
    const c = p.config;
    if (c && c.run !== run) newRun(p, c);
    // Ask for the validation loss first: nothing may reach the worker between the step's apply
    // and this request (the worker serves requests in order).
    if (c && F.evalDue(r.step, c.steps)) evaluate(r, c);
    records.push(r);
    chart.addTrain(r.step, r.loss);
    render();
  }

  function evaluate(r, c) {
    const worker = replica?.worker;
    if (c.data !== 'builtin') return;
    if (valTokens === null || !worker) return; // not loaded yet: the next one
    const { batch, seq_len: seqLen } = c.model;
    const batches = validationBatches(valTokens, batch, seqLen, c.seed);
    evaluating += 1;
    render();
    worker.evaluate(batches).then((v) => {
      if (v.step !== r.step || v.hash !== r.hash) return; // another state: not this step's
      live.validations.push({ step: v.step, hash: v.hash, loss: v.loss, losses: v.losses, ms: v.ms });
      if (run === c.run) chart.addVal(v.step, v.loss);
    }, (exc) => {
      // The worker went away with the run (a new session) or failed: training is unaffected.
      live.validations.push({ step: r.step, error: exc.message });
    }).finally(() => {
      evaluating -= 1;
      render();
    });
  }

  function onFinished(o) {
    const at = `at step ${o.step}`;
    if (o.reason === 'fork') {
      // app.js shows the outcome's message; this names every device's hash.
      const hashes = [...(o.hashes ?? new Map())].map(([id, hash]) =>
        `${nameOf(id)}: ${F.shortHash(hash)}`).join(', ');
      page.error(`the replicas forked ${at}${hashes ? ` (${hashes})` : ''}`,
        'the run stopped so no wrong weights spread; a device named in the message computes ' +
        'other bits: restart it on another backend (?backend=js-cpu, or --backend numpy)', 'live');
      setState(`The run stopped ${at}: the replicas forked.`);
    } else if (o.reason === 'error') {
      setState(`The run stopped ${at} with an error (see Problems).`);
    } else {
      const how = {
        done: `The run is done: ${o.step} steps.`,
        'leader-request': `The leader stopped the run at step ${o.step}.`,
        left: `This device left the run at step ${o.step}${o.message ? `: ${o.message}` : ''}.`,
      };
      setState(how[o.reason] ?? `The run ended ${at} (${o.reason}${o.message ? `: ${o.message}` : ''}).`);
    }
    finished = o;
    live.finished = o;
    render();
  }

  function nameOf(id) {
    if (id === runPeer?.id) return `${page.name || id.slice(0, 6)} (this device)`;
    const name = runPeer ? rosterOf(runPeer.mesh).nameOf(id) : id;
    if (name !== id) names.set(id, name);
    return names.get(id) ?? id.slice(0, 6);
  }

  // -- read-outs ------------------------------------------------------------------------------

  function render() {
    const recs = records;
    const last = recs.at(-1);
    const view = { step: last?.step ?? 0, steps: cfg?.steps ?? 0 };
    if (cfg && last) {
      const { batch, seq_len: seqLen } = cfg.model;
      const n = Math.min(5, recs.length - 1);
      const msPerStep = n > 0 ? (last.appliedAtMs - recs.at(-1 - n).appliedAtMs) / n : null;
      progress.max = cfg.steps;
      progress.value = last.step;
      const inner = F.innerStepsOf(cfg);
      const unit = cfg.sync === 'outer' ? 'round' : 'step';
      view.progress = finished ? `stopped at ${unit} ${last.step} of ${cfg.steps}`
        : F.progressLine(last.step, cfg.steps, msPerStep, unit);
      view.sync = F.syncLine(cfg, last.step);
      syncOut.textContent = view.sync;
      view.bytes = F.bytesPerTokenLine(F.bytesPerToken(recs, seqLen, inner));
      bytesOut.textContent = view.bytes;
      if (!finished && recs.length === 1) {
        setState(`Training with ${last.roster.length} devices` +
          `${runPeer?.isLeader ? ', led by this device' : ''}.`);
      }
      progressText.textContent = view.progress;

      const val = chart.valPoints.at(-1);
      view.loss = `training ${last.loss.toFixed(4)}` +
        (val ? ` · validation ${val.loss.toFixed(4)} (step ${val.step})` : '');
      lossOut.textContent = view.loss;

      const tally = runPeer?.tally(last.step, last.round, last.roster) ?? null;
      // The newest step's hashes may still be on their way: show the newest complete one.
      const prev = recs.length > 1 ? recs.at(-2) : null;
      let shown = tally;
      if (tally && tally.missing.length && prev) {
        const t2 = runPeer.tally(prev.step, prev.round, prev.roster);
        if (t2 && !t2.missing.length) shown = t2;
      }
      const line = F.agreementLine(shown);
      view.agreement = line;
      agreeOut.textContent = line.text;
      agreeOut.dataset.state = line.state;
      view.units = F.unitsLine(shown?.backends ?? new Map());
      unitsOut.textContent = view.units;

      view.rate = F.formatRate(F.groupRate(recs, batch, seqLen, 5, inner));
      view.fastest = F.fastestAlone(runPeer?.speeds, last.roster, seqLen);
      view.speedLine = F.groupSpeedLine(F.groupRate(recs, batch, seqLen, 5, inner), view.fastest);
      rateOut.textContent = `${view.speedLine} (${last.roster.length} device` +
        `${last.roster.length === 1 ? '' : 's'})`;

      const split = F.stepSplit(last, prev);
      view.split = split;
      const parts = [`compute ${F.formatDuration(split.compute)}`,
        `exchange ${F.formatDuration(split.exchange)}`];
      splitOut.textContent = split.wall === null ? parts.join(', ')
        : `${F.formatDuration(split.wall)}: ${parts.join(', ')}`;
      const total = (split.compute ?? 0) + (split.exchange ?? 0);
      const [c, x] = splitBar.children;
      c.style.flexGrow = String(total ? (split.compute ?? 0) / total : 0);
      x.style.flexGrow = String(total ? (split.exchange ?? 0) / total : 0);

      renderDevices(last, shown, batch * seqLen, seqLen);
    } else {
      progressText.textContent = cfg ? `0 of ${cfg.steps} steps` : '';
    }
    root.classList.toggle('idle', cfg === null);
    view.validation = validationText();
    valOut.textContent = view.validation;
    live.view = view;
  }

  function validationText() {
    if (!cfg) return '–';
    if (cfg.data !== 'builtin') return 'not measured: this run reads FineWeb-Edu, the page has ' +
      'a validation split of the built-in text only';
    const every = F.evalEvery(cfg.steps);
    const when = `every ${every} steps and at the last, on this device (4 batches, forward only)`;
    if (evaluating > 0) return `measuring now: the next step waits for it (${when})`;
    if (valTokens === null) return `loading the validation text (${when})`;
    return when;
  }

  function renderDevices(last, tally, tokensPerStep, seqLen) {
    const me = runPeer?.id;
    const order = [me, ...last.roster.filter((id) => id !== me)].filter((id) => last.roster.includes(id));
    const globalBatch = F.sequencesOf(last, cfg.model.batch);
    const rows = order.map((id) => {
      const device = runPeer?.mesh?.devices?.get(id) ?? {};
      // Its measured seconds per sequence (every `hash` carries them): seq_len / seq_s tokens
      // per second of gradient time; else what it measured alone (its hello), ours this step.
      const seqS = runPeer?.speeds.get(id);
      let rate = null;
      if (Number.isFinite(seqS) && seqS > 0) rate = seqLen / seqS;
      else if (id === me) rate = F.tokensPerSecond(tokensPerStep, last.computeMs);
      else if (Number.isFinite(device.tokens_per_s)) rate = device.tokens_per_s;
      const backend = id === me ? last.backend : tally?.byPeer.get(id) ?? device.backend ?? '–';
      const hash = !tally ? '…' : tally.same.includes(id) ? '✓'
        : tally.differ.includes(id) ? '✗ differs' : '…';
      const share = Array.isArray(last.shares) ? last.shares[last.roster.indexOf(id)] : undefined;
      return { id, name: nameOf(id), backend, tokensPerS: rate, self: id === me,
        problem: tally?.differ.includes(id) ? 'hash differs' : null,
        cells: [nameOf(id), F.shareCell(share, globalBatch), backend, F.formatRate(rate), hash] };
    });
    renderDeviceRows(rows);
  }

  /** The devices table's rows (entries of crowd.js with their `cells`), folded past FOLD_AT. */
  function renderDeviceRows(rows) {
    const tr = (row) => h('tr', {}, ...row.cells.map((c) => h('td', {}, c)));
    const fold = rows.length > FOLD_AT;
    const list = fold ? ordered(rows) : rows;
    devices.tBodies[0].replaceChildren(...list.slice(0, fold ? FOLD_AT : list.length).map(tr));
    restRows.replaceChildren(...(fold ? list.slice(FOLD_AT).map(tr) : []));
    devicesSummary.hidden = !fold;
    showAll.hidden = !fold;
    if (!fold) {
      restRows.hidden = true;
      return;
    }
    devicesSummary.replaceChildren(...summaryLines(summarize(rows)).slice(0, 2)
      .map((text) => h('p', { text })),
    h('p', { text: rows.some((r) => r.problem) ? `${rows.filter((r) => r.problem).length} with a ` +
      'differing hash, listed first; then the slowest.' : 'Every hash agrees; the slowest are listed first.' }));
    showAll.dataset.more = `Show all ${rows.length} devices`;
    if (restRows.hidden) showAll.textContent = showAll.dataset.more;
  }
  live.renderDeviceRows = renderDeviceRows; // for the page test that fills 64 rows

  // -- sessions -------------------------------------------------------------------------------

  function attach({ peer: p }) {
    peer = p;
    if (!p) return;
    const mine = (fn) => (e) => {
      if (peer === p) fn(e.detail);
    };
    p.addEventListener('phase', mine(() => onPhase(p)));
    p.addEventListener('step', mine((d) => onStep(p, d)));
    p.addEventListener('finished', mine((d) => onFinished(d.outcome)));
  }

  render();
  page.addEventListener('session', (e) => attach(e.detail));
  if (page.peer) attach({ peer: page.peer });
}
