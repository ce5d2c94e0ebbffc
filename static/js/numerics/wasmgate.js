// The WebAssembly GEMM is trusted only after it proves itself on this engine (docs/KERNELS.md,
// "WebAssembly SIMD GEMM"): gated at start like every backend, installed as the CPU tier's
// integer kernel (gemm.js setIntKernel) only when every check gives the JS GEMM's bits, and then
// part of the per-step probe, which the CPU tier computes through intMatmul, that is, through it.
//
// The gate, in order, stopping at the first failure:
// 1. every integer and float GEMM gate case of gpu/gates.js (the same 46 + 4 cases, from the
//    contract PRNG, that every GPU kernel and the JS mirror pass: exact against a plain triple
//    loop), each on POISONED memory (0xDEADBEEF everywhere), so a kernel that relies on zeroed
//    memory fails here rather than on a recycled buffer later;
// 2. the dispatch paths the gate cases do not take, against the JS GEMM: every layout (transA /
//    transB), batches, two- and three-limb gradient operands on either side (through
//    gradMatmulLeft / Right from float gradients), K not a multiple of 8, K above 1024 and 2^17
//    (the driver's K-split), full-range -128 operands; compared by bit pattern;
// 3. the kernel probe (gpu/probe.js): the reference hash fd4bd827... from this kernel.
// A failure leaves the JS GEMM in place and says why (`wasmGemmStatus()`).

import { loadWasmGemm } from './wasmgemm.js';
import { poolSupport } from './wasmpool.js';
import {
  activeIntKernel, gradMatmulLeft, gradMatmulRight, intMatmul, qmatmul, setIntKernel,
} from './gemm.js';
import { quantizeCols, quantizeRows } from './quant.js';
import { bits, key, uniform } from './prng.js';
import { runGemmGates, GATE_SEED } from '../gpu/gates.js';
import { probeHash, REFERENCE_PROBE_HASH } from '../gpu/probe.js';

// Stream ids of the dispatch cases' inputs (NUMERICS.md section 7: (3, ...) and (4, ...) are
// the gate inputs; purposes 0-9 belong to gates.js).
const PURPOSE = 20;

let status = { enabled: false, name: null, reason: 'not tried (call enableWasmGemm)' };

/** Whether the WebAssembly GEMM computes this tier's products, and why (not). */
export function wasmGemmStatus() {
  return { ...status };
}

function int8(stream, n) {
  const words = bits(key(GATE_SEED, 3, PURPOSE, stream), n);
  const out = new Int8Array(n);
  for (let i = 0; i < n; i++) out[i] = words[i] >>> 24;
  return out;
}

function float32(stream, n, scale) {
  const u = uniform(key(GATE_SEED, 4, PURPOSE, stream), n);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (Math.fround(u[i] * 2) - 1) * scale;
  return out;
}

/**
 * The dispatch cases: {name, run()} where run() computes one product through gemm.js's public
 * functions (the installed kernel, or the JS GEMM) and returns its typed array.
 */
export function dispatchCases() {
  const cases = [];
  let stream = 0;
  const layouts = [[false, false], [true, false], [false, true], [true, true]];
  // integer products: every layout, batches, ragged K
  for (const [batch, M, K, N] of [[1, 1, 1, 1], [1, 3, 17, 5], [3, 7, 33, 9], [2, 5, 1030, 6]]) {
    for (const [transA, transB] of layouts) {
      const a = int8(stream++, batch * M * K);
      const b = int8(stream++, batch * K * N);
      cases.push({ name: `intMatmul ${batch}x${M}x${K}x${N} transA=${transA} transB=${transB}`,
        run: () => intMatmul(a, b, M, K, N, { transA, transB, batch }) });
    }
  }
  // full range at the driver's K-split: 2^14 K > 2^31, summed over two chunks in doubles
  const K = (1 << 17) + 9;
  const full = new Int8Array(2 * K).fill(-128);
  cases.push({ name: `intMatmul all -128 K=${K}`,
    run: () => intMatmul(full, full.subarray(0, K), 2, K, 1) });
  // quantized products with their scales: forward, then two and three limbs on either side
  for (const [batch, M, K2, N] of [[1, 9, 45, 13], [2, 6, 130, 7]]) {
    const x = float32(stream++, batch * M * K2, 3);
    const w = float32(stream++, batch * K2 * N, 0.02);
    const { q: aq, e: ae } = quantizeRows(x, batch * M, K2);
    const { q: bq, e: be } = quantizeCols(w, K2, N, {}, batch);
    const dy = float32(stream++, batch * M * N, 1e-3);
    for (const transB of [false, true]) {
      const bs = transB ? transposeEach(bq, batch, K2, N) : bq;
      cases.push({ name: `qmatmul ${batch}x${M}x${K2}x${N} transB=${transB}`,
        run: () => qmatmul(aq, ae, bs, be, M, K2, N, { transB, batch }) });
    }
    for (const limbCount of [2, 3]) {
      // dX = dY @ W^T (W as stored), dW = X^T @ dY (X as stored)
      cases.push({ name: `gradMatmulLeft ${batch}x${M}x${N}x${K2} limbs=${limbCount}`,
        run: () => gradMatmulLeft(dy, be, bq, M, N, K2, { transB: true, batch, limbCount }) });
      cases.push({ name: `gradMatmulRight ${batch}x${K2}x${M}x${N} limbs=${limbCount}`,
        run: () => gradMatmulRight(aq, ae, dy, K2, M, N, { transA: true, batch, limbCount }) });
    }
  }
  return cases;
}

function transposeEach(x, batch, R, C) {
  const out = new Int8Array(x.length);
  for (let t = 0; t < batch; t++) {
    for (let r = 0; r < R; r++) {
      for (let c = 0; c < C; c++) out[t * R * C + c * R + r] = x[t * R * C + r * C + c];
    }
  }
  return out;
}

function sameBits(x, y) {
  if (x.length !== y.length) return -2;
  const view = (a) =>
    a instanceof Float32Array ? new Uint32Array(a.buffer, a.byteOffset, a.length) : a;
  const [u, v] = [view(x), view(y)];
  for (let i = 0; i < u.length; i++) if (u[i] !== v[i]) return i;
  return -1;
}

/**
 * Runs the gate on `gemm` (a WasmGemm) without installing it. Resolves to {passed, cases,
 * failure, probe_hash}: `failure` names the first failing check, with its index and values.
 */
export async function gateWasmGemm(gemm) {
  // The gate cases' float expectations come from gemm.js's qmatmul: the JS GEMM's, whatever
  // kernel is installed now.
  const previous = setIntKernel(null);
  // With a pool, every kernel call of the gate is split across it (however small): a split
  // that lost or repeated a row pair, or a helper that computed it otherwise, fails here.
  const splitMin = gemm.splitMin;
  gemm.splitMin = 0;
  try {
    return await gate(gemm);
  } catch (exc) {
    // a trap or a failed memory.grow is a failure of the kernel, not of the caller
    return { passed: false, cases: 0, probe_hash: null,
      failure: `${gemm.name}: the gate stopped on ${exc.name}: ${exc.message}` };
  } finally {
    gemm.splitMin = splitMin;
    setIntKernel(previous);
  }
}

async function gate(gemm) {
  const pool = { poisoned: (fn) => { gemm.poison(); return fn(); } };
  const gates = await runGemmGates(gemm, { pool, tile: gemm.tile });
  let cases = gates.casesPassed;
  const result = (failure, probe = null) => ({ passed: failure === null, cases, failure,
    probe_hash: probe });
  if (gates.failure) return result(gates.failure.describe());
  try {
    for (const c of dispatchCases()) {
      setIntKernel(null);
      const want = c.run();
      setIntKernel(gemm);
      gemm.poison();
      const got = c.run();
      const at = sameBits(got, want);
      if (at !== -1) {
        return result(`${gemm.name} failed dispatch case '${c.name}': ` +
          (at < 0 ? `length ${got.length}, expected ${want.length}`
            : `first mismatch at ${at}: expected ${want[at]}, got ${got[at]}`));
      }
      cases += 1;
    }
  } finally {
    setIntKernel(null);
  }
  const probe = await probeHash(gemm);
  if (probe !== REFERENCE_PROBE_HASH) {
    return result(`${gemm.name}: kernel probe hash ${probe.slice(0, 16)}... != reference ` +
      `${REFERENCE_PROBE_HASH.slice(0, 16)}...`, probe);
  }
  return result(null, probe);
}

/**
 * Loads, gates and (when every check passes) installs the WebAssembly GEMM as the CPU tier's
 * integer kernel. Options: `bytes` (the module; default: fetched or read from
 * static/wasm/gemm_i8.wasm), `url`; `threads` (default: what wasmpool.js poolSupport() allows
 * here: a pool of workers in a cross-origin isolated worker, else 1; a pool that cannot start
 * or fails its gates leaves one thread, and the status says why), `spawn` (the pool's workers).
 * Never throws for a kernel that cannot be used: resolves to the status ({enabled, name,
 * threads, reason, cases, probe_hash, ms}) with the reason, and the JS GEMM stays. Calling it
 * again re-gates (a new kernel replaces the old one only if it passes; the old one's helpers
 * are ended).
 */
export async function enableWasmGemm(options = {}) {
  const support = poolSupport();
  const { threads = support.threads, ...rest } = options;
  // why one thread, when this context decided it (not the caller)
  let pooled = options.threads === undefined && threads === 1 ? ` (${support.reason})` : '';
  if (threads > 1) {
    // A pool first; if it cannot start or fails its gates, one thread, saying why.
    const done = await enableOne({ ...rest, threads });
    if (done.enabled && done.threads === threads) return done;
    pooled = ` (a pool of ${threads} threads was refused: ${done.reason})`;
  }
  const done = await enableOne({ ...rest, threads: 1 });
  status = { ...done, reason: done.reason + pooled };
  return wasmGemmStatus();
}

async function enableOne(options) {
  const t0 = performance.now();
  let gemm;
  try {
    gemm = await loadWasmGemm(options);
  } catch (exc) {
    status = { enabled: activeIntKernel() !== null, name: null, threads: 1,
      reason: `the WebAssembly GEMM could not be loaded: ${exc.message}` };
    return wasmGemmStatus();
  }
  const gate = await gateWasmGemm(gemm);
  const ms = Math.trunc(performance.now() - t0); // timing only, never contract arithmetic
  if (!gate.passed) {
    gemm.close();
    const kept = activeIntKernel() ? 'the kernel installed before' : 'the JS GEMM';
    status = { enabled: activeIntKernel() !== null, name: gemm.name, threads: 1,
      cases: gate.cases, probe_hash: gate.probe_hash, ms,
      reason: `${gate.failure}; ${kept} stays` };
    return wasmGemmStatus();
  }
  const before = activeIntKernel();
  setIntKernel(gemm);
  if (before !== null && before !== gemm) before.close?.(); // its helpers, if it had any
  status = { enabled: true, name: gemm.name, threads: gemm.threads, cases: gate.cases,
    probe_hash: gate.probe_hash, ms,
    reason: `${gemm.name}: ${gate.cases} gate cases and the kernel probe pass` +
      `${gemm.threads > 1 ? ', every product split across the pool' : ''}; it computes ` +
      "the CPU tier's integer products" };
  return wasmGemmStatus();
}

/** Puts the JS GEMM back in gemm.js's integer kernel slot. */
export function disableWasmGemm() {
  setIntKernel(null)?.close?.();
  status = { enabled: false, name: null, reason: 'disabled' };
  return wasmGemmStatus();
}
