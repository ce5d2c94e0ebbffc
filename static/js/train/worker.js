// @ts-check
// The training worker: a dedicated module Worker that owns one replica (trainer.js) and serves
// the page's requests (messages.js) one at a time, in the order they arrive (serve.js). Started
// by client.js:
//   new Worker(new URL('./worker.js', import.meta.url), {type: 'module'})
// WebGPU is requested here, inside the worker (navigator.gpu exists in dedicated workers), so
// neither the products nor the CPU tier's arithmetic ever block the page. A dedicated worker is
// not throttled when its tab is hidden: a hidden tab keeps training (docs/JS_MIRROR.md).

import { Trainer } from './trainer.js';
import { serveTrainer } from './serve.js';

// This module runs as a dedicated worker (tests/jscheck/tsconfig.worker.json: the WebWorker lib).
const scope = /** @type {DedicatedWorkerGlobalScope} */ (/** @type {unknown} */ (self));

serveTrainer(scope, (emit) => new Trainer(emit));
