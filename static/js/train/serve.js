// @ts-check
// The training worker's request loop: every message from the page is parsed (messages.js
// parseRequest), served by the trainer one at a time in the order it arrived, so a step never
// interleaves with an apply or an export, and answered with a result or an error that carries a
// hint. worker.js runs it with the product's Trainer and parser; it takes them as arguments so a
// test-only worker (tests/pages/fault_worker.js) can run the same loop around a trainer with a
// test request of its own, which the product's parser never accepts.

import { parseRequest } from './messages.js';

/**
 * @typedef {import('./messages.js').Reply} Reply
 * @typedef {{kind: string} & Record<string, unknown>} WorkerEvent
 * @typedef {{id: number, type: string}} ParsedRequest
 * @typedef {(grad: {name: string, values: Float32Array}) => void} OnGrad
 * @typedef {{handle(request: any, progress: OnGrad):
 *   Promise<{result: Record<string, any>, transfer: Transferable[]}>}} Server
 * What the loop needs of a dedicated worker's global scope.
 * @typedef {{postMessage(message: Reply, transfer: Transferable[]): void,
 *   onmessage: ((event: MessageEvent) => void) | null,
 *   onmessageerror: ((event: MessageEvent) => void) | null}} Scope
 */

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

/**
 * Serves the page's requests on `scope` with the trainer `makeTrainer(emit)` returns (`emit`
 * sends a worker event to the page); `parse` validates each request (the product's parser by
 * default).
 * @param {Scope} scope
 * @param {(emit: (event: WorkerEvent) => void) => Server} makeTrainer
 * @param {(data: unknown) => ParsedRequest} [parse]
 */
export function serveTrainer(scope, makeTrainer, parse = parseRequest) {
  /**
   * Every message to the page is a Reply (messages.js parseReply checks it there).
   * @param {Reply} message
   * @param {Transferable[]} [transfer]
   */
  const reply = (message, transfer = []) => scope.postMessage(message, transfer);
  const trainer = makeTrainer((event) => reply({ type: 'event', event }));
  let queue = Promise.resolve();

  /** @param {any} data  a request from the page, checked by parse */
  async function serve(data) {
    const id = Number.isSafeInteger(data?.id) && data.id >= 0 ? data.id : null;
    try {
      const request = parse(data);
      /** @type {OnGrad} */
      const grad = ({ name, values }) => reply({ type: 'grad', id, name, values },
        [values.buffer]);
      const { result, transfer } = await trainer.handle(request, grad);
      reply({ type: 'result', id, result }, transfer);
    } catch (exc) {
      reply({ type: 'error', id, error: describe(exc, data?.type) });
    }
  }

  scope.onmessage = (event) => {
    queue = queue.then(() => serve(event.data));
  };

  scope.onmessageerror = () => {
    reply({ type: 'error', id: null, error: {
      name: 'MessageError', message: 'a request could not be deserialized',
      hint: 'send plain objects, typed arrays and strings only' } });
  };
}
