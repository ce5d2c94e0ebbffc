// The training worker: a dedicated module Worker that owns one replica (trainer.js) and serves
// the page's requests (messages.js) one at a time, in the order they arrive, so a step never
// interleaves with an apply or an export. Started by client.js:
//   new Worker(new URL('./worker.js', import.meta.url), {type: 'module'})
// WebGPU is requested here, inside the worker (navigator.gpu exists in dedicated workers), so
// neither the products nor the CPU tier's arithmetic ever block the page. A dedicated worker is
// not throttled when its tab is hidden: a hidden tab keeps training (docs/JS_MIRROR.md).

import { Trainer } from './trainer.js';
import { parseRequest } from './messages.js';

// Errors that carry no hint of their own (a ConfigError, an audit failure) get one by request.
const HINTS = {
  init: 'fix the init fields (model, optim, seed) and send init again: the worker is back in ' +
    "state 'new'",
  other: 'the request did not change the weights; see the message, then retry, or start a new ' +
    "worker with backend 'js-cpu'",
};

function describe(exc, type) {
  return {
    name: exc?.name ?? 'Error',
    message: String(exc?.message ?? exc),
    hint: typeof exc?.hint === 'string' ? exc.hint : HINTS[type === 'init' ? 'init' : 'other'],
  };
}

const trainer = new Trainer((event) => self.postMessage({ type: 'event', event }));
let queue = Promise.resolve();

async function serve(data) {
  const id = Number.isSafeInteger(data?.id) && data.id >= 0 ? data.id : null;
  try {
    const request = parseRequest(data);
    const grad = ({ name, values }) => self.postMessage({ type: 'grad', id, name, values },
      [values.buffer]);
    const { result, transfer } = await trainer.handle(request, grad);
    self.postMessage({ type: 'result', id, result }, transfer);
  } catch (exc) {
    self.postMessage({ type: 'error', id, error: describe(exc, data?.type) });
  }
}

self.onmessage = (event) => {
  queue = queue.then(() => serve(event.data));
};

self.onmessageerror = () => {
  self.postMessage({ type: 'error', id: null, error: {
    name: 'MessageError', message: 'a request could not be deserialized',
    hint: 'send plain objects, typed arrays and strings only' } });
};
