// @ts-check
// The page's side of the training worker: starts worker.js as a module Worker and turns its
// messages (messages.js) into promises and DOM events.
//
//   const w = new TrainWorker();
//   w.addEventListener('fallback', (e) => show(e.detail.reason));
//   const sel = await w.init({model: {preset: 'tiny'}, seed: 1});   // sel.choice.reason
//   const r = await w.step(x, y);                                     // {step, loss, hash, ...}
//
// Every reply is validated (parseReply) before it is used; a request that fails rejects with a
// WorkerError carrying the worker's name, message and hint. Events from the worker are
// dispatched under their kind ('selection', 'device-lost', 'device-rebuilt', 'fallback',
// 'progress', 'state') with the event as `detail`, and kept in `events`; the client adds its
// own 'error' (the worker failed to load or crashed, or sent a malformed message). The page's own
// `visibilitychange` is re-dispatched as 'visibility' ({hidden, busy}) so the page wiring can
// tell the mesh, rather than the tab vanishing from a run silently; the worker keeps computing
// while hidden (docs/JS_MIRROR.md, "The training worker").

import { buffersOf, parseReply } from './messages.js';

/**
 * @typedef {import('./messages.js').Request} Request
 * @typedef {import('./messages.js').Tensors} Tensors
 * @typedef {import('./messages.js').TrainState} TrainState
 * @typedef {import('./messages.js').OuterLoop} OuterLoop
 * A worker's result (the table in messages.js says each request's fields).
 * @typedef {Record<string, any>} Result
 * An event the client dispatches ({kind, ...}: messages.js EVENT_KINDS, and the client's own
 * 'error' and 'visibility').
 * @typedef {{kind: string} & Record<string, unknown>} WorkerEvent
 * @typedef {(name: string, values: Float32Array) => void} OnGrad
 */

export const WORKER_URL = new URL('./worker.js', import.meta.url);

/** A request the worker refused or could not serve. */
export class WorkerError extends Error {
  /** @param {{name: string, message: string, hint: string}} error  as the worker described it */
  constructor({ name, message, hint }) {
    super(message);
    this.name = 'WorkerError';
    this.remoteName = name;
    this.hint = hint;
  }
}

export class TrainWorker extends EventTarget {
  /** @param {{url?: string | URL}} [options] */
  constructor({ url = WORKER_URL } = {}) {
    super();
    this.worker = new Worker(url, { type: 'module', name: 'daisychain-train' });
    /**
     * @type {Map<number, {resolve: (result: Result) => void, reject: (error: WorkerError) => void,
     *   type: Request['type'], onGrad?: OnGrad}>}
     */
    this.pending = new Map(); // id -> {resolve, reject, type}
    this.nextId = 1;
    /** @type {WorkerEvent[]} */
    this.events = [];
    /** @type {WorkerError | null} */
    this.broken = null;
    this.worker.onmessage = (e) => this.receive(e.data);
    this.worker.onerror = (e) => {
      e.preventDefault?.();
      this.breakDown(`the training worker failed: ${e.message || 'it could not be loaded'}`,
        'reload the page; if it persists, the browser may not support module workers');
    };
    this.worker.onmessageerror = () => this.breakDown('a worker reply could not be deserialized',
      'reload the page');
    this.onVisibility = () => this.emit({ kind: 'visibility',
      hidden: document.visibilityState === 'hidden', busy: this.pending.size > 0 });
    globalThis.document?.addEventListener('visibilitychange', this.onVisibility);
  }

  /** @param {WorkerEvent} event */
  emit(event) {
    this.events.push(event);
    this.dispatchEvent(new CustomEvent(event.kind, { detail: event }));
  }

  /**
   * @param {string} message
   * @param {string} hint
   * @param {{event?: boolean}} [options]  event: also emit 'error'
   */
  breakDown(message, hint, { event = true } = {}) {
    this.broken = new WorkerError({ name: 'WorkerFailed', message, hint });
    for (const { reject } of this.pending.values()) reject(this.broken);
    this.pending.clear();
    if (event) this.emit({ kind: 'error', message, hint });
  }

  /** @param {unknown} data  a message from the worker, checked here */
  receive(data) {
    let msg;
    try {
      msg = parseReply(data);
    } catch (/** @type {any} */ exc) { // a MessageError (or a bug): shown either way
      this.emit({ kind: 'error', message: `malformed worker message: ${exc.message}`,
        hint: exc.hint });
      return;
    }
    if (msg.type === 'event') {
      this.emit(msg.event);
      return;
    }
    if (msg.type === 'grad') { // an early gradient of a pending `grads` request
      this.pending.get(msg.id)?.onGrad?.(msg.name, msg.values);
      return;
    }
    const id = msg.id ?? -1; // (ids start at 1: an error without one answers no request)
    const entry = this.pending.get(id);
    if (!entry) {
      // An error with no request id: the worker could not tell which request it answers.
      const error = msg.type === 'error' ? msg.error : undefined;
      this.emit({ kind: 'error', message: error?.message ?? `unexpected reply ${msg.id}`,
        hint: error?.hint ?? 'a worker bug: report it' });
      return;
    }
    this.pending.delete(id);
    if (msg.type === 'result') entry.resolve(msg.result);
    else entry.reject(new WorkerError(msg.error));
  }

  /**
   * Sends {type, ...fields}; resolves to the worker's result.
   * @param {Request['type']} type
   * @param {object} [fields]
   * @param {Transferable[]} [transfer]
   * @param {OnGrad} [onGrad]  hears the request's early gradients
   * @returns {Promise<Result>}
   */
  request(type, fields = {}, transfer = [], onGrad = undefined) {
    if (this.broken) return Promise.reject(this.broken);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject, type, onGrad });
      this.worker.postMessage({ id, type, ...fields }, transfer);
    });
  }

  /**
   * {model, optim?, seed, backend?, measure?, audit?, state?, ...}: the selection record.
   * @param {Omit<Partial<import('./messages.js').InitRequest>, 'id' | 'type'>} options
   */
  init(options) {
    return this.request('init', options);
  }

  /**
   * One training step on tokens x, y (Int32Array, copied unless `transfer`: then each must own
   * its whole buffer, which the page gives up).
   * @param {Int32Array} x
   * @param {Int32Array} y
   * @param {{batch?: number, hash?: boolean, transfer?: boolean}} [options]
   */
  step(x, y, { batch, hash, transfer = false } = {}) {
    /** @type {{x: Int32Array, y: Int32Array, batch?: number, hash?: boolean}} */
    const fields = { x, y };
    if (batch !== undefined) fields.batch = batch;
    if (hash !== undefined) fields.hash = hash;
    return this.request('step', fields, transfer ? [x.buffer, y.buffer] : []);
  }

  /**
   * Gradients without applying them: {loss, grads: {names, arrays}, ...}; with `onGrad(name,
   * values)`, each parameter's gradient also as soon as the backward made it final.
   * @param {Int32Array} x
   * @param {Int32Array} y
   * @param {{batch?: number, onGrad?: OnGrad}} [options]
   */
  grads(x, y, { batch, onGrad } = {}) {
    /** @type {{x: Int32Array, y: Int32Array, batch?: number, early?: boolean}} */
    const fields = batch === undefined ? { x, y } : { x, y, batch };
    if (onGrad) fields.early = true;
    return this.request('grads', fields, [], onGrad);
  }

  /**
   * Applies gradients {names, arrays} (e.g. combined across peers); `transfer` gives them up.
   * @param {Tensors} grads
   * @param {{transfer?: boolean}} [options]
   */
  apply(grads, { transfer = false } = {}) {
    return this.request('apply', { grads }, transfer ? buffersOf(grads) : []);
  }

  /**
   * The mean contract loss of `batches` ([{x, y}], validation.js) at the current weights, forward
   * only (no state change): {step, hash, losses, loss, backend, ms}. Requests are served in
   * order, so it measures the weights of every apply sent before it.
   * @param {import('./messages.js').Batch[]} batches
   * @param {{batch?: number}} [options]
   */
  evaluate(batches, { batch } = {}) {
    return this.request('eval', batch === undefined ? { batches } : { batches, batch });
  }

  probe() {
    return this.request('probe');
  }

  hash() {
    return this.request('hash');
  }

  /**
   * Resolves to the state {step, p1, p2, params, m, v} (copies: the worker keeps training).
   * @returns {Promise<TrainState>}
   */
  async exportState() {
    return (await this.request('export')).state;
  }

  /** @param {TrainState} state */
  loadState(state) {
    return this.request('load', { state });
  }

  /**
   * An outer run from now on (docs/PROTOCOL.md, "Outer runs"): resolves to {step, hash}.
   * @param {Omit<OuterLoop, 'cut'> & {cut?: string}} outer  (its cut is checked by the worker)
   * @param {{step: number, momentum: Tensors}} [shared]  a checkpoint's rounds and momentum
   */
  outer(outer, shared = undefined) {
    return this.request('outer', shared === undefined ? { outer } : { outer, shared });
  }

  /**
   * An outer round's inner steps (`steps[j]`: inner step j's pieces [{x, y, rows}], `count`
   * sequences in all): {loss, delta (the flat pseudo-gradient), backend, products, ms}; the
   * round's inner state is kept under `token`. With `onDelta(delta)`, the delta is also handed
   * over as soon as the round is measured (its sync step), before the remaining inner steps.
   * @param {import('./messages.js').RoundRequest['steps']} steps
   * @param {number} count
   * @param {number | null} token
   * @param {(delta: Float32Array) => void} [onDelta]
   */
  round(steps, count, token, onDelta = undefined) {
    /** @type {{steps: typeof steps, count: number, token: number | null, early?: boolean}} */
    const fields = { steps, count, token };
    if (onDelta) fields.early = true;
    return this.request('round', fields, [], onDelta && ((_name, values) => onDelta(values)));
  }

  /**
   * The outer step with the flat mean pseudo-gradient; round `token`'s inner state is kept.
   * @param {Float32Array} mean
   * @param {number | null} token
   * @param {{transfer?: boolean}} [options]
   */
  applyOuter(mean, token, { transfer = false } = {}) {
    return this.request('outer-apply', { mean, token }, transfer ? [mean.buffer] : []);
  }

  /** An outer run's export: {state (W and the inner state), outer: {step, momentum}}. */
  exportOuter() {
    return this.request('export');
  }

  terminate() {
    globalThis.document?.removeEventListener('visibilitychange', this.onVisibility);
    this.worker.terminate();
    this.breakDown('the training worker was terminated', 'start a new TrainWorker',
      { event: false });
  }
}
