// The WebAssembly GEMM pool's helpers as node:worker_threads workers (a page uses module Web
// Workers: wasmpool.js spawnWorker). Not a test file: tests/js/wasmpool.test.mjs and
// tests/js/wasm_enabled.mjs pass `nodeSpawn` to loadWasmGemm / enableWasmGemm. The real helper
// module runs in each (static/js/numerics/wasmhelper.js); unref'd, so a process whose helpers
// wait for work can still exit.
import { Worker } from 'node:worker_threads';

function wrap(worker) {
  worker.unref();
  return {
    post: (message) => worker.postMessage(message),
    once: (fn) => worker.once('message', fn),
    onError: (fn) => worker.once('error', fn),
    terminate: () => worker.terminate(),
    worker,
  };
}

export function nodeSpawn(url) {
  // execArgv: [] -- a worker inherits the process's by default, and under `node --import
  // wasm_enabled.mjs` each helper would run that preload and start a pool of its own
  return wrap(new Worker(url, { execArgv: [] }));
}

/** A helper that cannot instantiate the kernel: it answers {error} (a real worker thread). */
export function failingSpawn() {
  return wrap(new Worker(
    "require('node:worker_threads').parentPort.once('message', () => require('node:worker_threads')" +
    ".parentPort.postMessage({ error: 'planted: this helper has no instance' }));",
    { eval: true, execArgv: [] }));
}
