// @ts-check
// The training worker: a dedicated module Worker that owns one replica (trainer.js) and serves
// the page's requests (messages.js) one at a time, in the order they arrive, so a step never
// interleaves with an apply or an export. Started by client.js:
//   new Worker(new URL('./worker.js', import.meta.url), {type: 'module'})
// WebGPU is requested here, inside the worker (navigator.gpu exists in dedicated workers), so
// neither the products nor the CPU tier's arithmetic ever block the page. A dedicated worker is
// not throttled when its tab is hidden: a hidden tab keeps training (docs/JS_MIRROR.md).

import { Trainer } from './trainer.js';
import { parseRequest } from './messages.js';

/** @typedef {import('./messages.js').Reply} Reply */

// This module runs as a dedicated worker (tests/jscheck/tsconfig.worker.json: the WebWorker lib).
const scope = /** @type {DedicatedWorkerGlobalScope} */ (/** @type {unknown} */ (self));

/**
 * Every message to the page is a Reply (messages.js parseReply checks it there).
 * @param {Reply} message
 * @param {Transferable[]} [transfer]
 */
const reply = (message, transfer = []) => scope.postMessage(message, transfer);

// Errors that carry no hint of their own (a ConfigError, an audit failure) get one by request.
const HINTS = {
  init: 'fix the init fields (model, optim, seed) and send init again: the worker is back in ' +
    "state 'new'",
  other: 'the request did not change the weights; see the message, then retry, or start a new ' +
    "worker with backend 'js-cpu'",
};

/**
 * @param {any} exc  anything thrown: its name, message and hint, when it has them
 * @param {unknown} type  the request's type
 */
function describe(exc, type) {
  return {
    name: exc?.name ?? 'Error',
    message: String(exc?.message ?? exc),
    hint: typeof exc?.hint === 'string' ? exc.hint : HINTS[type === 'init' ? 'init' : 'other'],
  };
}

const trainer = new Trainer((event) => reply({ type: 'event', event }));
let queue = Promise.resolve();

/** @param {any} data  a request from the page, checked by parseRequest */
async function serve(data) {
  const id = Number.isSafeInteger(data?.id) && data.id >= 0 ? data.id : null;
  try {
    const request = parseRequest(data);
    /** @type {(grad: {name: string, values: Float32Array}) => void} */
    const grad = ({ name, values }) => reply({ type: 'grad', id, name, values },
      [values.buffer]);
    const { result, transfer } = await trainer.handle(request, grad);
    reply({ type: 'result', id, result }, transfer);
  } catch (exc) {
    reply({ type: 'error', id, error: describe(exc, data?.type) });
  }
}

scope.onmessage = (/** @type {MessageEvent} */ event) => {
  queue = queue.then(() => serve(event.data));
};

scope.onmessageerror = () => {
  reply({ type: 'error', id: null, error: {
    name: 'MessageError', message: 'a request could not be deserialized',
    hint: 'send plain objects, typed arrays and strings only' } });
};
