// One helper of the WebAssembly GEMM's pool (wasmpool.js; docs/KERNELS.md, "A pool of workers").
//
// Its first message brings the compiled shared build of the kernel, the shared memory, the
// control block and its slot; it instantiates the kernel on that memory, answers {ready: true}
// (or {error}), and from then on only runs the kernel calls its slot asks for, blocked on the
// slot's sequence number between them, until it reads STOP. It computes nothing else: the
// caller packs the operands and combines the cells.
//
// Runs as a browser module worker, or under node:worker_threads (the tests).

import { ARGS, DONE, FAILED, SEQ, SLOT_WORDS, STOP } from './wasmpool.js';

const inNode = typeof globalThis.WorkerGlobalScope === 'undefined';
const port = inNode ? (await import('node:worker_threads')).parentPort : globalThis;

function onFirstMessage(fn) {
  if (inNode) port.once('message', fn);
  else port.addEventListener('message', (e) => fn(e.data), { once: true });
}

function serve(gemm, words) {
  let seen = 0;
  for (;;) {
    Atomics.wait(words, SEQ, seen);
    const seq = Atomics.load(words, SEQ);
    if (seq === seen) continue; // woken without a new call
    if (seq === STOP) return;
    seen = seq;
    words[FAILED] = 0;
    try {
      gemm(words[ARGS], words[ARGS + 1], words[ARGS + 2], words[ARGS + 3], words[ARGS + 4],
        words[ARGS + 5], words[ARGS + 6]);
    } catch (exc) {
      words[FAILED] = 1;
      console.error(`daisychain GEMM helper: the kernel call failed: ${exc.message}`);
    }
    Atomics.store(words, DONE, seq); // after the cells: the caller reads them after it
    Atomics.notify(words, DONE, 1);
  }
}

onFirstMessage(({ module, memory, control, slot }) => {
  let gemm;
  let words;
  try {
    gemm = new WebAssembly.Instance(module, { env: { memory } }).exports.gemm;
    words = new Int32Array(control, slot * SLOT_WORDS * 4, SLOT_WORDS);
  } catch (exc) {
    port.postMessage({ error: `${exc.name}: ${exc.message}` });
    return;
  }
  port.postMessage({ ready: true });
  serve(gemm, words);
  if (!inNode) globalThis.close();
});
