// A pool of workers that run the WebAssembly GEMM's kernel on one shared memory (docs/KERNELS.md,
// "A pool of workers").
//
// Where the page is cross-origin isolated (the server asks for it: COOP/COEP headers), a worker
// may share a WebAssembly memory with other workers. The training worker then instantiates the
// shared-memory build of the kernel (static/wasm/gemm_i8_shared.wasm: kernels/gemm_i8.wat with
// its memory imported and shared, `python tests/wasm_build.py`) on such a memory and starts helpers
// (wasmhelper.js), each with its own instance on the same memory. A kernel call's row pairs are
// then split between the calling thread and the helpers: every thread computes whole row pairs
// into its own rows of C with the same exact integer code, so the int32 cells do not depend on
// how the rows were split, nor on how many threads there are. The gates run with every product
// split (wasmgate.js), so a split that loses or repeats a row is refused before use.
//
// Synchronisation is a control block of int32 words per helper in a SharedArrayBuffer: the
// caller writes a call's arguments, bumps the slot's sequence number and wakes the helper
// (Atomics.notify); the helper runs the call and stores the sequence number as done. The caller
// blocks on that (Atomics.wait), which a worker may do and a page's main thread may not: the
// pool is only started in a worker (the training worker).

export const SHARED_WASM_URL = new URL('../../wasm/gemm_i8_shared.wasm', import.meta.url);
// The shared build's declared maximum, in 64 KiB pages (tests/wasm_build.py SHARED_MAX_PAGES):
// the memory made for it must declare the same.
export const SHARED_MAX_PAGES = 16384;
export const HELPER_URL = new URL('./wasmhelper.js', import.meta.url);
export const MAX_THREADS = 8;
// One helper's slot of the control block: 16 int32 words (64 bytes, a cache line of its own).
export const SLOT_WORDS = 16;
export const SEQ = 0; // the call to run (STOP: end)
export const DONE = 1; // the last call run
export const FAILED = 2; // 1 when that call threw
export const ARGS = 3; // the kernel's 7 arguments (a, b, c, m2, n4, k8, ldc)
export const STOP = -1;
// A helper that does not answer within this long is taken for dead (a crashed worker never
// would): the call throws instead of blocking the training forever.
const WAIT_MS = 60000;
const START_MS = 30000;

/**
 * How many threads a pool may use in this context, and why: {threads, reason}. One where the
 * context is not cross-origin isolated (no SharedArrayBuffer to share), or is not a worker (a
 * page's main thread may not block on Atomics.wait), or has one logical core.
 */
export function poolSupport(scope = globalThis) {
  if (typeof SharedArrayBuffer === 'undefined' || scope.crossOriginIsolated !== true) {
    return { threads: 1, reason: 'one thread: the page is not cross-origin isolated' };
  }
  const WorkerScope = scope.WorkerGlobalScope;
  if (typeof WorkerScope === 'undefined' || !(scope instanceof WorkerScope)) {
    return { threads: 1, reason: 'one thread: not in a worker (only a worker may wait on a pool)' };
  }
  const cores = scope.navigator?.hardwareConcurrency ?? 1;
  const threads = Math.max(1, Math.min(cores, MAX_THREADS));
  return { threads, reason: `${threads} thread${threads > 1 ? 's' : ''} (${cores} logical cores)` };
}

/** A browser worker running the helper module. */
function spawnWorker(url) {
  const worker = new Worker(url, { type: 'module', name: 'daisychain-gemm-helper' });
  return {
    post: (message) => worker.postMessage(message),
    once: (fn) => worker.addEventListener('message', (e) => fn(e.data), { once: true }),
    onError: (fn) => worker.addEventListener('error', (e) => fn(new Error(e.message ?? 'error'))),
    terminate: () => worker.terminate(),
  };
}

function started(worker, message) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('a GEMM helper did not start within ' +
      `${START_MS / 1000} s`)), START_MS);
    worker.once((reply) => {
      clearTimeout(timer);
      if (reply?.ready === true) resolve();
      else reject(new Error(`a GEMM helper could not start: ${reply?.error ?? 'no reason given'}`));
    });
    worker.onError((exc) => {
      clearTimeout(timer);
      reject(new Error(`a GEMM helper failed to load: ${exc.message}`));
    });
    worker.post(message);
  });
}

export class GemmPool {
  /**
   * Starts `helpers` helper workers, each instantiating `module` (the shared build) on
   * `memory`. `spawn(url)` makes one ({post, once, onError, terminate}); the default is a
   * browser module worker (tests under Node pass one of node:worker_threads).
   */
  static async start(module, memory, helpers, spawn = spawnWorker) {
    if (!Number.isInteger(helpers) || helpers < 1) throw new RangeError(`helpers = ${helpers}`);
    const control = new SharedArrayBuffer(helpers * SLOT_WORDS * 4);
    const workers = [];
    try {
      for (let slot = 0; slot < helpers; slot++) {
        const worker = spawn(HELPER_URL);
        workers.push(worker);
        await started(worker, { module, memory, control, slot });
      }
    } catch (exc) {
      for (const worker of workers) worker.terminate();
      throw exc;
    }
    return new GemmPool(workers, control);
  }

  constructor(workers, control) {
    this.workers = workers;
    this.words = new Int32Array(control);
    this.seq = 0;
    this.calls = 0; // kernel calls split, for tests and benchmarks
  }

  /** Threads that share a call: the helpers and the caller. */
  get threads() {
    return this.workers.length + 1;
  }

  /**
   * One kernel call, its m2 row pairs split in contiguous runs: the caller computes the first
   * run, helper h the (h + 1)-th. Row pair p reads A at a + 16 k8 p and writes rows 2p, 2p + 1
   * of C (c + 2 ldc p); B is read by every run. Returns when every run is done.
   */
  run(kernel, a, b, c, m2, n4, k8, ldc) {
    const T = this.threads;
    const bounds = (t) => Math.floor((t * m2) / T);
    this.seq = this.seq === 0x7fffffff ? 1 : this.seq + 1;
    const seq = this.seq;
    const sent = [];
    for (let h = 0; h < this.workers.length; h++) {
      const p0 = bounds(h + 1);
      const p1 = bounds(h + 2);
      if (p1 === p0) continue;
      const base = h * SLOT_WORDS;
      const w = this.words;
      w[base + ARGS] = a + 16 * k8 * p0;
      w[base + ARGS + 1] = b;
      w[base + ARGS + 2] = c + 2 * ldc * p0;
      w[base + ARGS + 3] = p1 - p0;
      w[base + ARGS + 4] = n4;
      w[base + ARGS + 5] = k8;
      w[base + ARGS + 6] = ldc;
      Atomics.store(w, base + SEQ, seq); // after the arguments: the helper reads them after it
      Atomics.notify(w, base + SEQ, 1);
      sent.push(h);
    }
    const own = bounds(1);
    let failure = null;
    try {
      if (own > 0) kernel(a, b, c, own, n4, k8, ldc);
    } catch (exc) {
      failure = exc;
    }
    for (const h of sent) this.wait(h, seq);
    if (failure !== null) throw failure;
    const failed = sent.filter((h) => this.words[h * SLOT_WORDS + FAILED] !== 0);
    if (failed.length > 0) {
      throw new Error(`GEMM helper${failed.length > 1 ? 's' : ''} ${failed.join(', ')} failed ` +
        'a kernel call (see the console)');
    }
    this.calls += 1;
  }

  wait(h, seq) {
    const at = h * SLOT_WORDS + DONE;
    for (;;) {
      const done = Atomics.load(this.words, at);
      if (done === seq) return;
      if (Atomics.wait(this.words, at, done, WAIT_MS) === 'timed-out') {
        throw new Error(`GEMM helper ${h} did not answer within ${WAIT_MS / 1000} s`);
      }
    }
  }

  /** Ends every helper. */
  close() {
    for (let h = 0; h < this.workers.length; h++) {
      Atomics.store(this.words, h * SLOT_WORDS + SEQ, STOP);
      Atomics.notify(this.words, h * SLOT_WORDS + SEQ, 1);
    }
    for (const worker of this.workers) worker.terminate();
    this.workers = [];
  }
}
