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

const TOKENIZER_URL = '/luts/tokenizer.json';
const WORKER_URL = new URL('../model/genworker.js', import.meta.url);
const SNAPSHOT_SHARE = 20; // a run's copy waits 20x its own cost since the last one (~5%)
const FILE_HINT = 'pick a .safetensors checkpoint saved by DaisyChain (the page\'s "Download ' +
  'checkpoint", or the file `daisychain train` writes), trained with this page\'s tokenizer';

/** Every mounted panel, for tests and the console. */
export const panels = [];

/** An element with attributes (`text` sets its text) and children. */
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (v === true) e[k] = true;
    else e.setAttribute(k, String(v));
  }
  e.append(...children.filter((c) => c !== null && c !== undefined));
  return e;
}

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

class UsePanel {
  constructor(root, page) {
    this.root = root;
    this.page = page;
    this.run = null; // the run's last copy: {model, state: {step, params}, step, hash, ended}
    this.saved = null; // the newest checkpoint the run's peer saved: {step, hash, bytes}
    this.file = null; // the picked checkpoint: {model, state: {step, params}, step, hash, name}
    this.last = null; // the last result {origin, step, hash, promptIds, ids, text, stop, output}
    this.copying = null; // the copy in flight (a Promise)
    this.nextCopyAt = 0; // performance.now() before which a step's copy is skipped
    this.session = null; // AbortController of the current session's listeners
    this.sessionNo = 0; // counts sessions: a saved checkpoint belongs to one
    this.worker = null;
    this.jobId = 0;
    this.job = null; // {id, resolve, prompt, weights}
    this.tokenizer = null; // Promise of {bytes, tokenizer}
    this.build();
    page.addEventListener('session', (e) => this.attach(e.detail));
    if (page.peer) this.attach(page);
    this.setState('idle');
    this.renderSource();
  }

  // ---- DOM

  build() {
    const $ = (id) => this.root.querySelector(`#${id}`);
    const fields = FIELDS.map(([id, , label, hint, value, inputmode]) => el('div', { class: 'use-field' },
      el('label', { for: `use-${id}`, text: label }),
      el('input', { id: `use-${id}`, name: id, type: 'text', value, inputmode, autocomplete: 'off',
        'aria-describedby': `use-${id}-hint use-${id}-error` }),
      el('small', { id: `use-${id}-hint`, class: 'use-hint', text: hint }),
      el('small', { id: `use-${id}-error`, class: 'use-field-error', role: 'alert' })));
    const form = el('form', { id: 'use-form', novalidate: true },
      el('fieldset', { class: 'use-source' },
        el('legend', { text: 'Weights' }),
        el('label', { class: 'use-choice' },
          el('input', { type: 'radio', name: 'use-source', value: 'run', id: 'use-source-run', checked: true }),
          el('span', {}, 'This page\'s run: ', el('span', { id: 'use-run-info' }))),
        el('label', { class: 'use-choice' },
          el('input', { type: 'radio', name: 'use-source', value: 'file', id: 'use-source-file' }),
          el('span', {}, 'A checkpoint file: ', el('span', { id: 'use-file-info' }))),
        el('label', { class: 'use-file', for: 'use-file' }, 'Checkpoint file (.safetensors)'),
        el('input', { id: 'use-file', type: 'file', accept: '.safetensors,application/octet-stream',
          'aria-describedby': 'use-file-error' }),
        el('p', { id: 'use-file-error', class: 'use-error', role: 'alert', hidden: true })),
      el('label', { for: 'use-prompt', class: 'use-prompt-label', text: 'Prompt' }),
      el('textarea', { id: 'use-prompt', rows: '3', placeholder: 'Empty: start a new document',
        spellcheck: 'false', 'aria-keyshortcuts': 'Control+Enter' }),
      el('div', { class: 'use-fields' }, ...fields),
      el('div', { class: 'use-actions' },
        el('button', { id: 'use-generate', type: 'submit', text: 'Generate' }),
        el('button', { id: 'use-stop', type: 'button', disabled: true, text: 'Stop' }),
        el('button', { id: 'use-kit', type: 'button', text: 'Download inference kit' })));
    this.root.replaceChildren(
      el('h2', { text: 'Use the model' }),
      el('p', { class: 'use-intro', text: 'Continue a prompt with the weights of this page\'s run ' +
        'or of a checkpoint file; the same seed always gives the same text. The inference kit ' +
        'is one HTML file that does the same offline.' }),
      form,
      el('p', { id: 'use-status', class: 'use-status', role: 'status', 'aria-live': 'polite' }),
      el('p', { id: 'use-error', class: 'use-error', role: 'alert', hidden: true }),
      el('div', { id: 'use-output', class: 'use-output', 'aria-live': 'polite', 'aria-label': 'Generated text',
        tabindex: '0', hidden: true },
      el('span', { class: 'use-output-prompt' }), el('span', { class: 'use-output-text' })));
    this.el = {
      form, runInfo: $('use-run-info'), fileInfo: $('use-file-info'), file: $('use-file'),
      fileError: $('use-file-error'), sourceRun: $('use-source-run'), sourceFile: $('use-source-file'),
      prompt: $('use-prompt'), generate: $('use-generate'), stop: $('use-stop'), kit: $('use-kit'),
      status: $('use-status'), error: $('use-error'), output: $('use-output'),
      outPrompt: this.root.querySelector('.use-output-prompt'),
      outText: this.root.querySelector('.use-output-text'),
    };
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      this.generate();
    });
    this.el.prompt.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { // Enter alone is a new line
        e.preventDefault();
        form.requestSubmit(this.el.generate);
      }
    });
    this.el.stop.addEventListener('click', () => this.stop());
    this.el.kit.addEventListener('click', () => this.downloadKit());
    this.el.file.addEventListener('change', () => this.pickFile());
    for (const r of [this.el.sourceRun, this.el.sourceFile]) {
      r.addEventListener('change', () => this.renderSource());
    }
    for (const [id] of FIELDS) {
      this.root.querySelector(`#use-${id}`).addEventListener('input', () => this.fieldError(id, ''));
    }
  }

  setState(state) {
    this.root.dataset.state = state;
    const generating = state === 'generating';
    this.el.generate.disabled = state !== 'idle';
    this.el.kit.disabled = state !== 'idle';
    this.el.file.disabled = state !== 'idle';
    this.el.stop.disabled = !generating;
  }

  status(text) {
    this.el.status.textContent = text;
  }

  /** Show a problem with its hint in the panel (empty message: clear it). */
  showError(message, hint = '', target = this.el.error) {
    target.replaceChildren(...(message ? [el('span', { class: 'use-error-message', text: message }),
      hint ? el('span', { class: 'use-error-hint', text: hint }) : null] : []));
    target.hidden = !message;
  }

  fieldError(id, message) {
    const input = this.root.querySelector(`#use-${id}`);
    this.root.querySelector(`#use-${id}-error`).textContent = message;
    if (message) input.setAttribute('aria-invalid', 'true');
    else input.removeAttribute('aria-invalid');
  }

  source() {
    return this.el.sourceFile.checked ? 'file' : 'run';
  }

  renderSource() {
    const r = this.saved !== null && (this.run === null || this.saved.step > this.run.step)
      ? { step: this.saved.step, hash: this.saved.hash, ended: this.run?.ended ?? false } : this.run;
    this.el.runInfo.textContent = r === null
      ? (this.liveReplica() ? 'training' : 'no weights yet (lead or join a run)')
      : `step ${r.step}, weights ${short(r.hash)}${r.ended ? ' (the run ended)' : ''}`;
    const f = this.file;
    this.el.fileInfo.textContent = f === null ? 'none picked' : `${f.name}, step ${f.step}, weights ${short(f.hash)}`;
  }

  // ---- the run's weights

  /**
   * A new session (a new peer and replica): copy its weights after each step, and keep the
   * checkpoints its peer saves (`save` events, `lastSave`: the keep panel's), the newest of which
   * may be later than the last copy when the run ended.
   */
  attach({ peer, replica }) {
    this.session?.abort();
    this.session = new AbortController();
    const { signal } = this.session;
    const session = ++this.sessionNo;
    if (this.run) this.run = { ...this.run, ended: true };
    peer?.addEventListener('step', (e) => this.copyRun(replica, e.detail, session), { signal });
    peer?.addEventListener('save', (e) => this.keepSaved(e.detail, session), { signal });
    peer?.addEventListener('finished', () => {
      if (peer.lastSave) this.keepSaved(peer.lastSave, session);
      if (this.run) this.run = { ...this.run, ended: true };
      this.renderSource();
    }, { signal });
    this.renderSource();
  }

  /** A checkpoint the peer saved ({step, hash, bytes}): used when it is newer than the copy. */
  keepSaved(save, session) {
    if (save?.bytes && (this.saved === null || this.saved.session !== session || save.step >= this.saved.step)) {
      this.saved = { step: save.step, hash: save.hash, bytes: save.bytes, session };
    }
    this.renderSource();
  }

  /** The run's newest weights: the copy, or the saved checkpoint when it is newer (decoded). */
  async newestRun() {
    const saved = this.saved;
    if (saved === null || (this.run !== null && this.run.step >= saved.step)) return this.run;
    const { tokenizer } = await this.loadTokenizer();
    const ck = await decodeCheckpoint(saved.bytes, `the run's checkpoint of step ${saved.step}`,
      { tokenizerSha256: tokenizer.sha256, vocabSize: tokenizer.vocabSize });
    this.run = { model: ck.model, state: { step: ck.state.step, params: ck.state.params },
      step: ck.state.step, hash: ck.weightHash, ended: !this.liveReplica() };
    this.renderSource();
    return this.run;
  }

  liveReplica() {
    const replica = this.page.replica;
    return replica?.worker && !this.page.peer?.outcome ? replica : null;
  }

  /**
   * Copy `replica`'s weights. After a step (`record` given) the copy is skipped while another is
   * in flight or the last one was too recent for its cost; on Generate (`record` null) it is
   * always taken. Resolves to the copy, or null when the worker is gone (the run ended).
   */
  copyRun(replica, record = null, session = this.sessionNo) {
    if (record !== null && (this.copying !== null || performance.now() < this.nextCopyAt)) {
      return this.copying;
    }
    const copy = (async () => {
      const t0 = performance.now();
      try {
        const state = await replica.worker.exportState();
        const cost = performance.now() - t0;
        this.nextCopyAt = performance.now() + SNAPSHOT_SHARE * cost;
        if (this.run !== null && !this.run.ended && this.run.step > state.step) return this.run;
        const hash = record?.step === state.step ? record.hash
          : replica.step === state.step && replica.hash ? replica.hash
            : await sha256Arrays([...state.params.arrays, ...state.m.arrays, ...state.v.arrays]);
        // Only the parameters are kept: generation and the kit need nothing else (a third of
        // the state's memory; the optimizer moments are the keep panel's business).
        this.run = { model: replica.model, state: { step: state.step, params: state.params },
          step: state.step, hash, ended: false };
        if (this.saved?.session !== session) this.saved = null; // an earlier run's
        this.renderSource();
        return this.run;
      } catch {
        return null; // the worker ended with its run: the last copy stays
      }
    })();
    this.copying = copy;
    copy.finally(() => {
      if (this.copying === copy) this.copying = null;
    });
    return copy;
  }

  /** The weights to use now: {origin, ...} or throws {message, hint}. */
  async weights() {
    if (this.source() === 'file') {
      if (this.file === null) {
        throw Object.assign(new Error('no checkpoint file is picked'),
          { hint: 'choose one with "Checkpoint file", or switch to this page\'s run' });
      }
      return { origin: 'file', ...this.file };
    }
    const live = this.liveReplica();
    if (live) {
      this.status('Copying the weights of the run (after the step in progress)…');
      await this.copyRun(live);
    }
    const run = await this.newestRun();
    if (run === null) {
      throw Object.assign(new Error('this page has no weights yet'),
        { hint: 'lead or join a run first, or pick a checkpoint file' });
    }
    return { origin: 'run', ...run };
  }

  // ---- tokenizer and checkpoint file

  /** {bytes, tokenizer} of the tokenizer the page trains with (fetched once). */
  loadTokenizer() {
    this.tokenizer ??= (async () => {
      const response = await fetch(TOKENIZER_URL);
      if (!response.ok) {
        throw Object.assign(new Error(`the tokenizer could not be loaded: HTTP ${response.status}`),
          { hint: 'reload the page' });
      }
      const bytes = new Uint8Array(await response.arrayBuffer());
      const page = this.page.tokenizer;
      if (page && page.sha256 !== await sha256Hex(bytes)) {
        throw Object.assign(new Error('the tokenizer changed on the server since this page loaded'),
          { hint: 'reload the page' });
      }
      return { bytes, tokenizer: page ?? await Tokenizer.fromBytes(bytes, TOKENIZER_URL) };
    })();
    this.tokenizer.catch(() => {
      this.tokenizer = null; // try again next time
    });
    return this.tokenizer;
  }

  async pickFile() {
    const file = this.el.file.files?.[0];
    this.showError('', '', this.el.fileError);
    if (!file) return;
    this.setState('busy');
    this.status(`Checking ${file.name}…`);
    try {
      const { tokenizer } = await this.loadTokenizer();
      const ck = await decodeCheckpoint(new Uint8Array(await file.arrayBuffer()), file.name,
        { tokenizerSha256: tokenizer.sha256, vocabSize: tokenizer.vocabSize });
      this.file = { model: ck.model, state: { step: ck.state.step, params: ck.state.params },
        step: ck.state.step, hash: ck.weightHash, name: file.name };
      this.el.sourceFile.checked = true;
      this.status(`${file.name} is a valid checkpoint (step ${ck.state.step}); press Generate.`);
    } catch (exc) {
      this.file = null;
      this.el.file.value = '';
      this.showError(exc.message, exc.hint ?? FILE_HINT, this.el.fileError);
      this.status(`${file.name} was refused.`);
    } finally {
      this.setState('idle');
      this.renderSource();
    }
  }

  // ---- generation

  /** The form's settings, or null after showing each refused field's reason. */
  readSettings() {
    const values = {};
    let ok = true;
    for (const [id, key] of FIELDS) {
      const text = this.root.querySelector(`#use-${id}`).value.trim();
      const value = key === 'topK' && text === '' ? null : text === '' ? NaN : Number(text);
      values[key] = value;
      try {
        settings({ [key]: value });
        this.fieldError(id, '');
      } catch (exc) {
        if (!(exc instanceof GenerateError)) throw exc;
        this.fieldError(id, exc.message);
        ok = false;
      }
    }
    return ok ? settings(values) : null;
  }

  /** Whether top-k fits the weights' vocabulary (else its field says so). */
  topKFits(s, vocabSize) {
    try {
      topKFor(s, vocabSize);
      return true;
    } catch (exc) {
      if (!(exc instanceof GenerateError)) throw exc;
      this.fieldError('top-k', exc.message);
      return false;
    }
  }

  ensureWorker(bytes) {
    if (this.worker) return this.worker;
    this.worker = new Worker(WORKER_URL, { type: 'module' });
    this.worker.addEventListener('message', (e) => this.onWorker(e.data));
    this.worker.addEventListener('error', (e) => {
      e.preventDefault();
      this.worker?.terminate();
      this.worker = null;
      this.job?.resolve({ type: 'failed', message: `the generation worker failed: ${e.message ?? 'unknown'}` });
    });
    this.worker.postMessage({ type: 'tokenizer', bytes });
    return this.worker;
  }

  onWorker(m) {
    if (m.type === 'refused') {
      this.page.error(m.message, 'reload the page; report this if it repeats', 'use');
      return;
    }
    if (m.type === 'ready' || this.job === null || m.id !== this.job.id) return;
    if (m.type === 'token') {
      this.el.outText.textContent = m.text;
      this.status(`Generating: ${m.count} of ${this.job.maxTokens} tokens…`);
    } else {
      this.job.resolve(m);
    }
  }

  async generate() {
    if (this.root.dataset.state !== 'idle') return;
    this.showError('');
    this.setState('busy');
    let s = this.readSettings(); // every field first: a person fixes them all at once
    let w = null;
    let tok;
    try {
      tok = await this.loadTokenizer();
      w = await this.weights();
    } catch (exc) {
      this.showError(exc.message, exc.hint ?? '');
    }
    if (s !== null && w !== null && !this.topKFits(s, w.model.vocabSize)) s = null;
    if (s === null) this.status('Some settings were refused: see the messages under them.');
    else if (w === null) this.status('Nothing was generated.');
    if (s === null || w === null) {
      this.setState('idle');
      return;
    }
    const prompt = this.el.prompt.value;
    const worker = this.ensureWorker(tok.bytes);
    const id = ++this.jobId;
    const done = new Promise((resolve) => {
      this.job = { id, resolve, maxTokens: s.maxTokens };
    });
    this.el.outPrompt.textContent = prompt;
    this.el.outText.textContent = '';
    this.el.output.hidden = false;
    this.setState('generating');
    const from = w.origin === 'file' ? w.name : 'this page\'s run';
    this.status(`Generating from ${from} (step ${w.step})…`);
    const t0 = performance.now();
    worker.postMessage({ type: 'generate', id, model: { ...w.model }, params: w.state.params, prompt,
      settings: { temperature: s.temperature, topK: s.topK, seed: s.seed, maxTokens: s.maxTokens } });
    const m = await done;
    this.job = null;
    this.setState('idle');
    if (m.type === 'failed') {
      this.el.outText.textContent = '';
      this.showError(m.message, m.settings ? '' : 'try again; reload the page if it repeats');
      this.status('Nothing was generated.');
      return;
    }
    const seconds = (performance.now() - t0) / 1000;
    this.el.outText.textContent = m.text;
    this.last = { origin: w.origin, step: w.step, hash: w.hash, prompt, promptIds: m.promptIds,
      ids: m.ids, text: m.text, stop: m.stop, settings: { ...s } };
    const why = { length: 'max tokens reached', eot: 'the model ended the document', aborted: 'stopped' }[m.stop];
    this.status(`${m.ids.length} tokens from ${from} (step ${w.step}, weights ${short(w.hash)}), ` +
      `seed ${s.seed}, in ${seconds.toFixed(1)} s: ${why}.`);
  }

  stop() {
    if (this.job !== null) this.worker?.postMessage({ type: 'stop', id: this.job.id });
  }

  // ---- the inference kit

  async downloadKit() {
    if (this.root.dataset.state !== 'idle') return;
    this.showError('');
    this.setState('busy');
    this.status('Building the inference kit…');
    try {
      const { bytes } = await this.loadTokenizer();
      const w = await this.weights();
      const info = { step: w.step, weight_hash: w.hash };
      const html = await buildKit({ model: w.model, params: w.state.params, tokenizerBytes: bytes, info });
      const name = kitFileName(info);
      downloadKit(html, name);
      const mb = new TextEncoder().encode(html).length / 1e6;
      this.status(`Saved ${name} (${mb.toFixed(1)} MB): open it in any browser, even offline.`);
    } catch (exc) {
      this.showError(`the inference kit could not be built: ${exc.message}`, exc.hint ?? 'reload the page and try again');
      this.status('No kit was saved.');
    } finally {
      this.setState('idle');
    }
  }
}

/** Mount the panel in `root` (its <section>) with the page's shared context. */
export function mount(root, page) {
  const panel = new UsePanel(root, page);
  panels.push(panel);
  return panel;
}
