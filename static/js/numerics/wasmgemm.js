// The exact int8 GEMM in WebAssembly SIMD: the driver of kernels/gemm_i8.wat (docs/KERNELS.md,
// "WebAssembly SIMD GEMM"; built into static/wasm/gemm_i8.wasm by `python tests/wasm_build.py`).
//
// The module multiplies packed int8 blocks into exact int32 cells (`gemm`), lays operands out
// (`pack`) and turns cells into exact integers as float64 (`combine`); this driver instantiates
// it (fetch in a page, the file system under Node), grows its memory, copies in the operands of
// every layout the contract's GEMM entry points use (transA / transB as in gemm.js), stacks the
// limbs of two- and three-limb gradient operands, splits K where int32 could overflow, and hands
// back the exact integers the JS GEMM accumulates directly. The float64 arithmetic of `combine`
// only ever holds integers below 2^53 (exact); the one rounding of the contract stays with
// gemm.js's epilogues, the same code on every tier.
//
// It is used only through wasmgate.js, which gates it (exact products, random layouts against the
// JS GEMM, the kernel probe) before installing it as gemm.js's integer kernel.

import { GemmPool, SHARED_MAX_PAGES, SHARED_WASM_URL } from './wasmpool.js';

export const WASM_URL = new URL('../../wasm/gemm_i8.wasm', import.meta.url);
// K per kernel call: |acc| <= 128 * 128 * K must stay below 2^31 (the largest multiple of 8
// below 2^17). A longer K is cut into chunks whose exact sums are added in doubles.
export const MAX_K = 131064;
// The largest single product matmulInt accepts (its Int32Array result must hold the exact sum).
export const MAX_INT_K = (1 << 17) - 1;
const PAGE = 65536;
// m2 n4 k8 of a kernel call below which it is not split across a pool (WasmGemm.splitMin).
const SPLIT_MIN = 1 << 15;
// Bytes of packed B one kernel call streams per row pair: B is cut into column panels of about
// this size so a panel stays in the core's L2 cache while every row pair passes over it.
const PANEL_BYTES = 1 << 17;
const POISON = 0xdeadbeef;

/** The module's bytes: fetched in a page, read from disk under Node (a file: URL). */
export async function wasmBytes(url = WASM_URL) {
  if (url.protocol === 'file:') {
    const [{ readFile }, { fileURLToPath }] = await Promise.all([
      import('node:fs/promises'), import('node:url')]);
    return new Uint8Array(await readFile(fileURLToPath(url)));
  }
  const response = await fetch(url, { cache: 'no-cache' });
  if (!response.ok) {
    // (the elementwise kernel's driver reads its binary through here too: name the file asked for)
    throw new Error(`GET ${url} answered ${response.status}; reinstall daisychain ` +
      `(the page ships static/wasm/${url.pathname.split('/').at(-1)})`);
  }
  return new Uint8Array(await response.arrayBuffer());
}

const NO_SIMD = 'this engine lacks fixed-width SIMD (Chrome 91+, Firefox 89+, Safari 16.4+, ' +
  'Node 16.4+), or the binary is damaged';

/**
 * Compiles and instantiates the kernel from `bytes` (default: WASM_URL's) into a WasmGemm. With
 * `threads` > 1: the shared-memory build (`sharedBytes`, default SHARED_WASM_URL's) on a shared
 * memory, with threads - 1 helper workers (`spawn`: wasmpool.js GemmPool.start) that share every
 * kernel call's rows (only where poolSupport() allows it: a cross-origin isolated worker).
 */
export async function loadWasmGemm({
  bytes = null, url = WASM_URL, threads = 1, sharedBytes = null, sharedUrl = SHARED_WASM_URL,
  spawn = undefined,
} = {}) {
  if (typeof WebAssembly !== 'object') throw new Error('this JavaScript engine has no WebAssembly');
  if (threads > 1) {
    const code = sharedBytes ?? (await wasmBytes(sharedUrl));
    if (!WebAssembly.validate(code)) {
      throw new Error(`the shared-memory WebAssembly GEMM does not validate here: ${NO_SIMD}`);
    }
    const module = await WebAssembly.compile(code);
    const memory = new WebAssembly.Memory({ initial: 1, maximum: SHARED_MAX_PAGES, shared: true });
    const instance = await WebAssembly.instantiate(module, { env: { memory } });
    return new WasmGemm(instance, await GemmPool.start(module, memory, threads - 1, spawn));
  }
  const code = bytes ?? (await wasmBytes(url));
  if (!WebAssembly.validate(code)) {
    throw new Error(`the WebAssembly GEMM does not validate here: ${NO_SIMD}`);
  }
  const { instance } = await WebAssembly.instantiate(code, {});
  return new WasmGemm(instance);
}

const isInt8 = (x) => x instanceof Int8Array;
const align16 = (n) => (n + 15) & ~15;
const limbsOf = (x) => (Array.isArray(x) ? x : [x]);

/**
 * One instance of the kernel with its memory, driven from one thread; with a `pool`
 * (wasmpool.js), its kernel calls' rows are shared with the pool's helpers.
 */
export class WasmGemm {
  constructor(instance, pool = null) {
    const { gemm, memory } = instance.exports;
    if (typeof gemm !== 'function' || !(memory instanceof WebAssembly.Memory)) {
      throw new Error('the WebAssembly GEMM module lacks its exports gemm and memory');
    }
    this.kernel = gemm;
    this.exports = instance.exports;
    this.memory = memory;
    this.pool = pool;
    // A kernel call of fewer multiply-adds than this (in 4 x 8 x 8 blocks: m2 n4 k8) stays on
    // this thread: waking the helpers costs more. The gates set it to 0, so that every product
    // they check is split.
    this.splitMin = SPLIT_MIN;
    this.products = 0; // kernel calls, for tests and benchmarks
    this.refresh();
  }

  get name() {
    return this.pool === null ? 'wasm-simd' : `wasm-simd x${this.pool.threads}`;
  }

  /** Threads a kernel call may use. */
  get threads() {
    return this.pool === null ? 1 : this.pool.threads;
  }

  /** One call of the kernel: on this thread, or split across the pool. */
  call(a, b, c, m2, n4, k8, ldc) {
    if (this.pool !== null && m2 > 1 && m2 * n4 * k8 >= this.splitMin) {
      this.pool.run(this.kernel, a, b, c, m2, n4, k8, ldc);
    } else {
      this.kernel(a, b, c, m2, n4, k8, ldc);
    }
  }

  /** Ends the pool's helpers (the kernel works on alone). */
  close() {
    this.pool?.close();
    this.pool = null;
  }

  // The gates' tile: the same inputs every backend is gated on (gates.js gemmCases); the
  // kernel's own edges (row pairs, column quads, K steps of 8) are crossed by every odd case.
  get tile() {
    return [32, 32];
  }

  refresh() {
    this.buffer = this.memory.buffer;
    this.bytes = new Int8Array(this.buffer);
  }

  reserve(n) {
    const have = this.memory.buffer.byteLength;
    if (n > have) this.memory.grow(Math.ceil((n - have) / PAGE));
    if (this.buffer !== this.memory.buffer) this.refresh();
  }

  /** Fills the whole memory with 0xDEADBEEF: a kernel that relies on zeroed memory shows it. */
  poison() {
    this.refresh();
    new Int32Array(this.buffer).fill(POISON | 0);
  }

  /** Whether the kernel can take these operands (int8 typed arrays; limbs as arrays of them). */
  accepts(a, b) {
    return limbsOf(a).every(isInt8) && limbsOf(b).every(isInt8);
  }

  /**
   * The exact integers sum_k A[i,k] B[k,j] of one matrix of the contract's products, as a
   * Float64Array view (M x N, row-major) into this kernel's memory, valid until its next call:
   * A at offset ao of `a` (M x K, stored K x M when transA), B at offset bo of `b` (K x N, stored
   * N x K when transB). Either operand may instead be its limbs [hi, lo] or [hi, mid, lo] (each
   * stored like the operand, each limb weighing 256 times the next): the value is then
   * 256 acc_hi + acc_lo, or (256 acc_hi + acc_mid) * 256 + acc_lo, exact (|value| < 2^53).
   */
  accumulate(a, ao, transA, b, bo, transB, M, K, N) {
    const la = limbsOf(a);
    const lb = limbsOf(b);
    if (la.length > 1 && lb.length > 1) throw new RangeError('only one operand may have limbs');
    if (M === 0 || N === 0) return new Float64Array(0);
    // Memory: [values (f64) | A and B as stored | A packed | B packed | int32 cells].
    const R = la.length * M; // stacked rows: [hi; (mid;) lo]
    const C = lb.length * N; // stacked columns: [hi | (mid |) lo]
    const m2 = (R + 1) >> 1;
    const n4 = (C + 3) >> 2;
    const k8 = (Math.min(K, MAX_K) + 7) >> 3;
    const ldc = 16 * n4;
    const rawA = align16(8 * M * N);
    const rawB = align16(rawA + R * K);
    const packA = align16(rawB + C * K);
    const packB = align16(packA + 16 * m2 * k8);
    const cells = align16(packB + 32 * n4 * k8);
    this.reserve(cells + 2 * m2 * ldc);
    const values = new Float64Array(this.buffer, 0, M * N);
    if (K === 0) return values.fill(0);
    const mem = this.bytes;
    la.forEach((x, l) => mem.set(x.subarray(ao, ao + M * K), rawA + l * M * K));
    lb.forEach((x, l) => mem.set(x.subarray(bo, bo + K * N), rawB + l * K * N));
    const { pack, combine } = this.exports;
    const [lsA, ksA] = transA ? [1, M] : [K, 1]; // where A[i, k] and B[k, j] are stored
    const [lsB, ksB] = transB ? [K, 1] : [1, N];
    for (let k0 = 0; k0 < K; k0 += MAX_K) {
      const kc = Math.min(MAX_K, K - k0);
      const kc8 = (kc + 7) >> 3;
      mem.fill(0, packA, cells); // the packed operands' zero padding
      for (let l = 0; l < la.length; l++) {
        pack(packA, rawA + l * M * K + k0 * ksA, l * M, M, kc, kc8, lsA, ksA, 1);
      }
      for (let l = 0; l < lb.length; l++) {
        pack(packB, rawB + l * K * N + k0 * ksB, l * N, N, kc, kc8, lsB, ksB, 2);
      }
      const panel = Math.max(1, Math.floor(PANEL_BYTES / (32 * kc8)));
      for (let q0 = 0; q0 < n4; q0 += panel) {
        this.call(packA, packB + 32 * kc8 * q0, cells + 16 * q0, m2, Math.min(panel, n4 - q0),
          kc8, ldc);
      }
      // Limbs: [hi; lo] rows are M rows apart, [hi | lo] columns N cells.
      const limbs = la.length * lb.length;
      combine(0, cells, ldc, limbs, la.length > 1 ? M * ldc : 4 * N, M, N, k0 > 0 ? 1 : 0);
    }
    this.products += 1;
    return values;
  }

  /**
   * Exact int32 accumulators of `batch` products (M x K) @ (K x N) of int8 operands stacked at
   * strides M*K and K*N (stored transposed when transA / transB): an Int32Array (batch x M x N).
   * The interface of GpuGemm / CpuGemm (static/js/gpu/gemm.js), synchronous.
   */
  matmulIntSync(a, b, M, K, N, { transA = false, transB = false, batch = 1 } = {}) {
    for (const [v, what] of [[M, 'M'], [K, 'K'], [N, 'N'], [batch, 'batch']]) {
      if (!Number.isInteger(v) || v < 0) throw new RangeError(`matmulInt: ${what} = ${v}`);
    }
    if (!isInt8(a) || !isInt8(b)) throw new TypeError('matmulInt expects Int8Array operands');
    if (a.length !== batch * M * K || b.length !== batch * K * N) {
      throw new RangeError(`matmulInt: operand lengths ${a.length}, ${b.length} do not fit ` +
        `${batch} x (${M} x ${K}) @ (${K} x ${N})`);
    }
    if (K > MAX_INT_K) {
      throw new RangeError(`matmulInt: K = ${K} exceeds ${MAX_INT_K}, where int32 ` +
        'accumulation could overflow; split K');
    }
    const out = new Int32Array(batch * M * N);
    for (let t = 0; t < batch; t++) {
      out.set(this.accumulate(a, t * M * K, transA, b, t * K * N, transB, M, K, N), t * M * N);
    }
    return out;
  }

  async matmulInt(a, b, M, K, N, opts = {}) {
    return this.matmulIntSync(a, b, M, K, N, opts);
  }
}
