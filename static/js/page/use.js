// The "Use the model" panel of the page at `/` (docs/USAGE.md, "On the page: Use the model"): a
// prompt box that continues a prompt from this page's weights, and "Download inference kit".
//
// Weights come from one of two sources, chosen with a radio pair:
//   - this page's run: a copy of the training worker's parameters (WorkerReplica.worker
//     .exportState), taken after each applied step while the run goes on and once more when
//     Generate is pressed, so the last weights stay usable after the run ended (the peer ends its
//     worker then). A copy is one message in the training worker's queue; it is skipped while the
//     previous one is still on its way and spaced out by its own cost (at most ~5% of the time),
//     so a larger model is copied less often rather than slowing its steps. A checkpoint the peer
//     saves (`save` events and `lastSave`, when the keep panel keeps them) is used instead when it
//     is newer, e.g. the end-of-run save;
//   - a checkpoint file the person picks (validated by p2p/checkpoint.js decodeCheckpoint, the
//     same checks as the Python loader), so a downloaded model is usable without training.
// Generation runs in its own module worker (model/genworker.js): the tokens of the pinned
// sampling rule (model/generate.js), equal to `daisychain generate` for the same weights, prompt,
// settings and seed. They appear as they are made (an aria-live region); Stop ends it after the
// current token. The settings are checked by generate.js's `settings` field by field, and each
// refusal is shown under its field with the rule's own words.
//
// States (root's data-state): idle -> generating -> idle; `busy` while a file, the weights or the
// kit are being read or built. `panels` lists the mounted panels (tests read `last`, the last
// result: {origin, step, hash, prompt, promptIds, ids, text, stop, settings}).

import { decodeCheckpoint } from '../p2p/checkpoint.js';
import { sha256Hex, sha256Arrays } from '../numerics/hash.js';
import { Tokenizer } from '../tokenizer.js';
import { settings, topKFor, GenerateError } from '../model/generate.js';
import { buildKit, downloadKit, kitFileName } from '../kit/build.js';
import { fill, h } from './dom.js';

const TOKENIZER_URL = '/luts/tokenizer.json';
const WORKER_URL = new URL('../model/genworker.js', import.meta.url);
const SNAPSHOT_SHARE = 20; // a run's copy waits 20x its own cost since the last one (~5%)
const FILE_HINT = 'pick a .safetensors checkpoint saved by DaisyChain (the page\'s "Download ' +
  'checkpoint", or the file `daisychain train` writes), trained with this page\'s tokenizer';

/** Every mounted panel, for tests and the console. */
export const panels = [];

const short = (hash) => (hash ? `${hash.slice(0, 12)}…` : '?');

// The settings fields: input id, settings() key, label, hint, default, inputmode. Plain text
// inputs (not type=number, which hides what was typed): generate.js's rules judge the text.
const FIELDS = [
  ['temperature', 'temperature', 'Temperature', '0 = always the likeliest token; 0.8 is a good start',
    '0.8', 'decimal'],
  ['top-k', 'topK', 'Top-k', 'choose among the k likeliest; empty = all', '40', 'numeric'],
  ['seed', 'seed', 'Seed', 'the same seed gives the same text', '1', 'numeric'],
  ['max-tokens', 'maxTokens', 'Max tokens', '1 to 1024', '100', 'numeric'],
];

/** Mount the panel in `root` (its <section>) with the page's shared context. */
export function mount(root, page) {
  let run = null; // the run's last copy: {model, state: {step, params}, step, hash, ended}
  let saved = null; // the newest checkpoint the run's peer saved: {step, hash, bytes}
  let file = null; // the picked checkpoint: {model, state: {step, params}, step, hash, name}
  let last = null; // the last result {origin, step, hash, promptIds, ids, text, stop, output}
  let copying = null; // the copy in flight (a Promise)
  let nextCopyAt = 0; // performance.now() before which a step's copy is skipped
  let listening = null; // AbortController of the current session's listeners
  let sessionNo = 0; // counts sessions: a saved checkpoint belongs to one
  let worker = null;
  let jobId = 0;
  let job = null; // {id, resolve, prompt, weights}
  let tokenizerLoad = null; // Promise of {bytes, tokenizer}
  const ui = {}; // the panel's elements (build)

  // ---- DOM

  function build() {
    const $ = (id) => root.querySelector(`#${id}`);
    const fields = FIELDS.map(([id, , label, hint, value, inputmode]) => h('div', { class: 'use-field' },
      h('label', { for: `use-${id}`, text: label }),
      h('input', { id: `use-${id}`, name: id, type: 'text', value, inputmode, autocomplete: 'off',
        'aria-describedby': `use-${id}-hint use-${id}-error` }),
      h('small', { id: `use-${id}-hint`, class: 'use-hint', text: hint }),
      h('small', { id: `use-${id}-error`, class: 'use-field-error', role: 'alert' })));
    const form = h('form', { id: 'use-form', novalidate: true },
      h('fieldset', { class: 'use-source' },
        h('legend', { text: 'Weights' }),
        h('label', { class: 'use-choice' },
          h('input', { type: 'radio', name: 'use-source', value: 'run', id: 'use-source-run', checked: true }),
          h('span', {}, 'This page\'s run: ', h('span', { id: 'use-run-info' }))),
        h('label', { class: 'use-choice' },
          h('input', { type: 'radio', name: 'use-source', value: 'file', id: 'use-source-file' }),
          h('span', {}, 'A checkpoint file: ', h('span', { id: 'use-file-info' }))),
        h('label', { class: 'use-file', for: 'use-file' }, 'Checkpoint file (.safetensors)'),
        h('input', { id: 'use-file', type: 'file', accept: '.safetensors,application/octet-stream',
          'aria-describedby': 'use-file-error' }),
        h('p', { id: 'use-file-error', class: 'use-error', role: 'alert', hidden: true })),
      h('label', { for: 'use-prompt', class: 'use-prompt-label', text: 'Prompt' }),
      h('textarea', { id: 'use-prompt', rows: '3', placeholder: 'Empty: start a new document',
        spellcheck: 'false', 'aria-keyshortcuts': 'Control+Enter' }),
      h('div', { class: 'use-fields' }, ...fields),
      h('div', { class: 'use-actions' },
        h('button', { id: 'use-generate', type: 'submit', text: 'Generate' }),
        h('button', { id: 'use-stop', type: 'button', disabled: true, text: 'Stop' }),
        h('button', { id: 'use-kit', type: 'button', text: 'Download inference kit' })));
    root.replaceChildren(
      h('h2', { text: 'Use the model' }),
      h('p', { class: 'use-intro', text: 'Continue a prompt with the weights of this page\'s run ' +
        'or of a checkpoint file; the same seed always gives the same text. The inference kit ' +
        'is one HTML file that does the same offline.' }),
      form,
      h('p', { id: 'use-status', class: 'use-status', role: 'status', 'aria-live': 'polite' }),
      h('p', { id: 'use-error', class: 'use-error', role: 'alert', hidden: true }),
      h('div', { id: 'use-output', class: 'use-output', 'aria-live': 'polite', 'aria-label': 'Generated text',
        tabindex: '0', hidden: true },
      h('span', { class: 'use-output-prompt' }), h('span', { class: 'use-output-text' })));
    Object.assign(ui, {
      form, runInfo: $('use-run-info'), fileInfo: $('use-file-info'), file: $('use-file'),
      fileError: $('use-file-error'), sourceRun: $('use-source-run'), sourceFile: $('use-source-file'),
      prompt: $('use-prompt'), generate: $('use-generate'), stop: $('use-stop'), kit: $('use-kit'),
      status: $('use-status'), error: $('use-error'), output: $('use-output'),
      outPrompt: root.querySelector('.use-output-prompt'),
      outText: root.querySelector('.use-output-text'),
    });
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      generate();
    });
    ui.prompt.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { // Enter alone is a new line
        e.preventDefault();
        form.requestSubmit(ui.generate);
      }
    });
    ui.stop.addEventListener('click', () => stop());
    ui.kit.addEventListener('click', () => makeKit());
    ui.file.addEventListener('change', () => pickFile());
    for (const r of [ui.sourceRun, ui.sourceFile]) {
      r.addEventListener('change', () => renderSource());
    }
    for (const [id] of FIELDS) {
      root.querySelector(`#use-${id}`).addEventListener('input', () => fieldError(id, ''));
    }
  }

  function setState(state) {
    root.dataset.state = state;
    const generating = state === 'generating';
    ui.generate.disabled = state !== 'idle';
    ui.kit.disabled = state !== 'idle';
    ui.file.disabled = state !== 'idle';
    ui.stop.disabled = !generating;
  }

  function status(text) {
    ui.status.textContent = text;
  }

  /** Show a problem with its hint in the panel (empty message: clear it). */
  function showError(message, hint = '', target = ui.error) {
    fill(target, ...(message ? [h('span', { class: 'use-error-message', text: message }),
      hint ? h('span', { class: 'use-error-hint', text: hint }) : null] : []));
    target.hidden = !message;
  }

  function fieldError(id, message) {
    const input = root.querySelector(`#use-${id}`);
    root.querySelector(`#use-${id}-error`).textContent = message;
    if (message) input.setAttribute('aria-invalid', 'true');
    else input.removeAttribute('aria-invalid');
  }

  function source() {
    return ui.sourceFile.checked ? 'file' : 'run';
  }

  function renderSource() {
    const r = saved !== null && (run === null || saved.step > run.step)
      ? { step: saved.step, hash: saved.hash, ended: run?.ended ?? false } : run;
    ui.runInfo.textContent = r === null
      ? (liveReplica() ? 'training' : 'no weights yet (lead or join a run)')
      : `step ${r.step}, weights ${short(r.hash)}${r.ended ? ' (the run ended)' : ''}`;
    const f = file;
    ui.fileInfo.textContent = f === null ? 'none picked' : `${f.name}, step ${f.step}, weights ${short(f.hash)}`;
  }

  // ---- the run's weights

  /**
   * A new session (a new peer and replica): copy its weights after each step, and keep the
   * checkpoints its peer saves (`save` events, `lastSave`: the keep panel's), the newest of which
   * may be later than the last copy when the run ended.
   */
  function attach({ peer, replica }) {
    listening?.abort();
    listening = new AbortController();
    const { signal } = listening;
    const session = ++sessionNo;
    if (run) run = { ...run, ended: true };
    peer?.addEventListener('step', (e) => copyRun(replica, e.detail, session), { signal });
    peer?.addEventListener('save', (e) => keepSaved(e.detail, session), { signal });
    peer?.addEventListener('finished', () => {
      if (peer.lastSave) keepSaved(peer.lastSave, session);
      if (run) run = { ...run, ended: true };
      renderSource();
    }, { signal });
    renderSource();
  }

  /** A checkpoint the peer saved ({step, hash, bytes}): used when it is newer than the copy. */
  function keepSaved(save, session) {
    if (save?.bytes && (saved === null || saved.session !== session || save.step >= saved.step)) {
      saved = { step: save.step, hash: save.hash, bytes: save.bytes, session };
    }
    renderSource();
  }

  /** The run's newest weights: the copy, or the saved checkpoint when it is newer (decoded). */
  async function newestRun() {
    const newest = saved;
    if (newest === null || (run !== null && run.step >= newest.step)) return run;
    const { tokenizer } = await loadTokenizer();
    const ck = await decodeCheckpoint(newest.bytes, `the run's checkpoint of step ${newest.step}`,
      { tokenizerSha256: tokenizer.sha256, vocabSize: tokenizer.vocabSize });
    // A copy of the same or a later step may have landed while the checkpoint was decoded:
    // the newer weights stay.
    if (run !== null && run.step >= ck.state.step) return run;
    run = { model: ck.model, state: { step: ck.state.step, params: ck.state.params },
      step: ck.state.step, hash: ck.weightHash, ended: !liveReplica() };
    renderSource();
    return run;
  }

  function liveReplica() {
    const replica = page.replica;
    return replica?.worker && !page.peer?.outcome ? replica : null;
  }

  /**
   * Copy `replica`'s weights. After a step (`record` given) the copy is skipped while another is
   * in flight or the last one was too recent for its cost; on Generate (`record` null) it is
   * always taken. Resolves to the copy, or null when the worker is gone (the run ended).
   */
  function copyRun(replica, record = null, session = sessionNo) {
    if (record !== null && (copying !== null || performance.now() < nextCopyAt)) {
      return copying;
    }
    const copy = (async () => {
      const t0 = performance.now();
      try {
        const state = await replica.worker.exportState();
        const cost = performance.now() - t0;
        nextCopyAt = performance.now() + SNAPSHOT_SHARE * cost;
        if (run !== null && !run.ended && run.step > state.step) return run;
        const hash = record?.step === state.step ? record.hash
          : replica.step === state.step && replica.hash ? replica.hash
            : await sha256Arrays([...state.params.arrays, ...state.m.arrays, ...state.v.arrays]);
        // Checked again after the awaits: a newer session attached meanwhile (its run is the
        // page's now), or another copy of a later step landed first.
        if (session !== sessionNo) return run;
        if (run !== null && !run.ended && run.step > state.step) return run;
        // Only the parameters are kept: generation and the kit need nothing else (a third of
        // the state's memory; the optimizer moments are the keep panel's business).
        run = { model: replica.model, state: { step: state.step, params: state.params },
          step: state.step, hash, ended: false };
        if (saved?.session !== session) saved = null; // an earlier run's
        renderSource();
        return run;
      } catch {
        return null; // the worker ended with its run: the last copy stays
      }
    })();
    copying = copy;
    copy.finally(() => {
      if (copying === copy) copying = null;
    });
    return copy;
  }

  /** The weights to use now: {origin, ...} or throws {message, hint}. */
  async function weights() {
    if (source() === 'file') {
      if (file === null) {
        throw Object.assign(new Error('no checkpoint file is picked'),
          { hint: 'choose one with "Checkpoint file", or switch to this page\'s run' });
      }
      return { origin: 'file', ...file };
    }
    const live = liveReplica();
    if (live) {
      status('Copying the weights of the run (after the step in progress)…');
      await copyRun(live);
    }
    const run = await newestRun();
    if (run === null) {
      throw Object.assign(new Error('this page has no weights yet'),
        { hint: 'lead or join a run first, or pick a checkpoint file' });
    }
    return { origin: 'run', ...run };
  }

  // ---- tokenizer and checkpoint file

  /** {bytes, tokenizer} of the tokenizer the page trains with (fetched once). */
  function loadTokenizer() {
    tokenizerLoad ??= (async () => {
      const response = await fetch(TOKENIZER_URL);
      if (!response.ok) {
        throw Object.assign(new Error(`the tokenizer could not be loaded: HTTP ${response.status}`),
          { hint: 'reload the page' });
      }
      const bytes = new Uint8Array(await response.arrayBuffer());
      const mine = page.tokenizer;
      if (mine && mine.sha256 !== await sha256Hex(bytes)) {
        throw Object.assign(new Error('the tokenizer changed on the server since this page loaded'),
          { hint: 'reload the page' });
      }
      return { bytes, tokenizer: mine ?? await Tokenizer.fromBytes(bytes, TOKENIZER_URL) };
    })();
    tokenizerLoad.catch(() => {
      tokenizerLoad = null; // try again next time
    });
    return tokenizerLoad;
  }

  async function pickFile() {
    const picked = ui.file.files?.[0];
    showError('', '', ui.fileError);
    if (!picked) return;
    setState('busy');
    status(`Checking ${picked.name}…`);
    try {
      const { tokenizer } = await loadTokenizer();
      const ck = await decodeCheckpoint(new Uint8Array(await picked.arrayBuffer()), picked.name,
        { tokenizerSha256: tokenizer.sha256, vocabSize: tokenizer.vocabSize });
      file = { model: ck.model, state: { step: ck.state.step, params: ck.state.params },
        step: ck.state.step, hash: ck.weightHash, name: picked.name };
      ui.sourceFile.checked = true;
      status(`${picked.name} is a valid checkpoint (step ${ck.state.step}); press Generate.`);
    } catch (exc) {
      file = null;
      ui.file.value = '';
      showError(exc.message, exc.hint ?? FILE_HINT, ui.fileError);
      status(`${picked.name} was refused.`);
    } finally {
      setState('idle');
      renderSource();
    }
  }

  // ---- generation

  /** The form's settings, or null after showing each refused field's reason. */
  function readSettings() {
    const values = {};
    let ok = true;
    for (const [id, key] of FIELDS) {
      const text = root.querySelector(`#use-${id}`).value.trim();
      const value = key === 'topK' && text === '' ? null : text === '' ? NaN : Number(text);
      values[key] = value;
      try {
        settings({ [key]: value });
        fieldError(id, '');
      } catch (exc) {
        if (!(exc instanceof GenerateError)) throw exc;
        fieldError(id, exc.message);
        ok = false;
      }
    }
    return ok ? settings(values) : null;
  }

  /** Whether top-k fits the weights' vocabulary (else its field says so). */
  function topKFits(s, vocabSize) {
    try {
      topKFor(s, vocabSize);
      return true;
    } catch (exc) {
      if (!(exc instanceof GenerateError)) throw exc;
      fieldError('top-k', exc.message);
      return false;
    }
  }

  function ensureWorker(bytes) {
    if (worker) return worker;
    worker = new Worker(WORKER_URL, { type: 'module' });
    worker.addEventListener('message', (e) => onWorker(e.data));
    worker.addEventListener('error', (e) => {
      e.preventDefault();
      worker?.terminate();
      worker = null;
      job?.resolve({ type: 'failed', message: `the generation worker failed: ${e.message ?? 'unknown'}` });
    });
    worker.postMessage({ type: 'tokenizer', bytes });
    return worker;
  }

  function onWorker(m) {
    if (m.type === 'refused') {
      page.error(m.message, 'reload the page; report this if it repeats', 'use');
      return;
    }
    if (m.type === 'ready' || job === null || m.id !== job.id) return;
    if (m.type === 'token') {
      ui.outText.textContent = m.text;
      status(`Generating: ${m.count} of ${job.maxTokens} tokens…`);
    } else {
      job.resolve(m);
    }
  }

  async function generate() {
    if (root.dataset.state !== 'idle') return;
    showError('');
    setState('busy');
    let s = readSettings(); // every field first: a person fixes them all at once
    let w = null;
    let tok;
    try {
      tok = await loadTokenizer();
      w = await weights();
    } catch (exc) {
      showError(exc.message, exc.hint ?? '');
    }
    if (s !== null && w !== null && !topKFits(s, w.model.vocabSize)) s = null;
    if (s === null) status('Some settings were refused: see the messages under them.');
    else if (w === null) status('Nothing was generated.');
    if (s === null || w === null) {
      setState('idle');
      return;
    }
    const prompt = ui.prompt.value;
    const gen = ensureWorker(tok.bytes);
    const id = ++jobId;
    const done = new Promise((resolve) => {
      job = { id, resolve, maxTokens: s.maxTokens };
    });
    ui.outPrompt.textContent = prompt;
    ui.outText.textContent = '';
    ui.output.hidden = false;
    setState('generating');
    const from = w.origin === 'file' ? w.name : 'this page\'s run';
    status(`Generating from ${from} (step ${w.step})…`);
    const t0 = performance.now();
    gen.postMessage({ type: 'generate', id, model: { ...w.model }, params: w.state.params, prompt,
      settings: { temperature: s.temperature, topK: s.topK, seed: s.seed, maxTokens: s.maxTokens } });
    const m = await done;
    job = null;
    setState('idle');
    if (m.type === 'failed') {
      ui.outText.textContent = '';
      showError(m.message, m.settings ? '' : 'try again; reload the page if it repeats');
      status('Nothing was generated.');
      return;
    }
    const seconds = (performance.now() - t0) / 1000;
    ui.outText.textContent = m.text;
    last = { origin: w.origin, step: w.step, hash: w.hash, prompt, promptIds: m.promptIds,
      ids: m.ids, text: m.text, stop: m.stop, settings: { ...s } };
    const why = { length: 'max tokens reached', eot: 'the model ended the document', aborted: 'stopped' }[m.stop];
    status(`${m.ids.length} tokens from ${from} (step ${w.step}, weights ${short(w.hash)}), ` +
      `seed ${s.seed}, in ${seconds.toFixed(1)} s: ${why}.`);
  }

  function stop() {
    if (job !== null) worker?.postMessage({ type: 'stop', id: job.id });
  }

  // ---- the inference kit

  async function makeKit() {
    if (root.dataset.state !== 'idle') return;
    showError('');
    setState('busy');
    status('Building the inference kit…');
    try {
      const { bytes } = await loadTokenizer();
      const w = await weights();
      const info = { step: w.step, weight_hash: w.hash };
      const html = await buildKit({ model: w.model, params: w.state.params, tokenizerBytes: bytes, info });
      const name = kitFileName(info);
      downloadKit(html, name);
      const mb = new TextEncoder().encode(html).length / 1e6;
      status(`Saved ${name} (${mb.toFixed(1)} MB): open it in any browser, even offline.`);
    } catch (exc) {
      showError(`the inference kit could not be built: ${exc.message}`, exc.hint ?? 'reload the page and try again');
      status('No kit was saved.');
    } finally {
      setState('idle');
    }
  }

  build();
  page.addEventListener('session', (e) => attach(e.detail));
  if (page.peer) attach(page);
  setState('idle');
  renderSource();
  panels.push({ get last() { return last; } });
}
