// The WebAssembly elementwise kernel is trusted only after it proves itself on this engine
// (docs/KERNELS.md, "WebAssembly SIMD elementwise kernel"): gated at start like the GEMM and
// installed as quant.js's quantization kernel (setQuantKernel) and xent.js's cross-entropy
// kernel (setCrossEntropyKernel) only when every case gives the JS mirror's bits.
//
// The gate runs each case twice, once on the JS loops (no kernel installed) and once through the
// kernel on POISONED memory (0x5EADBEEF everywhere), and compares every output array by bit
// pattern (any NaN matching any NaN: a NaN's payload is no contract value, and quant.js refuses
// it), or the error and its message where the JS refuses; it stops at the first difference:
// - every quantizer (one, two and three limbs; row and column blocks; batches) on contract-PRNG
//   inputs at magnitudes from 1e-30 to 1e30, shapes crossing the kernel's 4-lane chunks;
// - hand-made blocks: ties at .5 after scaling (both signs), the exponent bump at mantissa
//   0x7F0000, subnormals beside a normal maximum, all-subnormal and all-zero blocks (the floor),
//   -0, values near 2^99, limbs whose clamp fires (exactly at 127.5 and above), the fold's
//   extreme exponents (subnormal and infinite results);
// - diverged inputs: NaN, infinity and 2^100 must be refused with quant.js's message;
// - the gradient operands of gemm.js (fold + two or three limbs, per row and per column, shared
//   and per-batch fold exponents);
// - the cross-entropy (xent.js crossEntropy: dlogits, per-row losses, mean) on contract-PRNG rows
//   of V = 1 to 2048 (V not a multiple of 4 included) at several spreads, and hand-made rows:
//   ties for the maximum (+0 against -0 included), -inf entries, huge and subnormal logits,
//   exps at the -86 cut and dlogits that come out subnormal, the target at the maximum and
//   away from it, and NaN / +inf / all -inf rows (NaN results on both paths).
// A failure leaves the JS loops in place and says why (`wasmElementwiseStatus()`).

import { loadWasmElementwise } from './wasmelementwise.js';
import {
  activeQuantKernel, quantize2Cols, quantize2Rows, quantize3Cols, quantize3Rows, quantizeCols,
  quantizeRows, setQuantKernel,
} from './quant.js';
import { gradLeftLimbs, gradRightLimbs } from './gemm.js';
import { bits, key, uniform } from './prng.js';
import { fromBits } from './fmath.js';
import { activeCrossEntropyKernel, crossEntropy, setCrossEntropyKernel } from './xent.js';

// Stream ids of the gate's inputs (NUMERICS.md section 7: purposes 0-9 belong to gpu/gates.js,
// 20 to the GEMM's dispatch cases).
const SEED = 0x9a7e;
const PURPOSE = 21;

let status = { enabled: false, name: null, reason: 'not tried (call enableWasmElementwise)' };

/** Whether the WebAssembly elementwise kernel computes this tier's quantization, and why (not). */
export function wasmElementwiseStatus() {
  return { ...status };
}

function floats(stream, n, scale) {
  const u = uniform(key(SEED, PURPOSE, stream), n);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (Math.fround(u[i] * 2) - 1) * scale;
  return out;
}

function ints(stream, n, lo, hi) {
  const w = bits(key(SEED, PURPOSE, 1000 + stream), n);
  return Int32Array.from(w, (v) => lo + (v % (hi - lo + 1)));
}

// Hand-made rows of 16: each row is one block of quantize*Rows (and, transposed, of *Cols).
function edgeRows() {
  const sub = (k) => fromBits(k); // a subnormal from its bits
  const rows = [
    // ties at .5 (amax 126.5: e = 0, so every value is its own scaled value)
    [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 126.5, -126.5, 64, 0, -0, 0.25, -0.75, 125.5, 4.5],
    // the bump: amax 127.5 has mantissa 0x7F0000, e = 1; x / 2 ties at 0.5, 1.5, 2.5
    [127.5, -127.5, 1, 3, 5, -1, -3, -5, 7, 0.75, 126, -126, 2, -0, 0, 9],
    // just below the bump: mantissa 0x7EFFFF
    [fromBits(0x42feffff), -1.25, 0.5, 1.5, -2.5, 3, 100.25, -100.75, 7, 8, 9, 10, 11, 12, 13, 1],
    // subnormals beside a normal maximum
    [1, sub(1), -sub(1), sub(0x7fffff), -sub(0x400000), fromBits(0x00800000), 2 ** -120,
      -(2 ** -125), 0.5, -0.25, sub(3), 2 ** -100, -(2 ** -101), 0, -0, 0.75],
    // all subnormal, and all zero: below the floor, e = 0 and all-zero limbs
    [sub(5), -sub(7), sub(0x7fffff), 0, -0, sub(1), -sub(1), sub(2), 0, 0, 0, 0, 0, 0, -0, sub(9)],
    [0, -0, 0, -0, 0, 0, 0, 0, -0, -0, 0, 0, 0, 0, 0, 0],
    // just above the floor (2^-100) and just below the ceiling (2^99)
    [2 ** -100, -(2 ** -100), 2 ** -105, 2 ** -124, 0, 1e-31, -1e-31, 7e-31, 3 ** -63, 0, 0, 0, 0,
      0, 0, 2 ** -101],
    [2 ** 99, -(2 ** 99) * 1.5, 2 ** 90, 1, -1, 0, 2 ** 98 * 1.75, 12345, -(2 ** 60), 0, 0, 0, 0, 0,
      0, 1e29],
    // limbs that clamp: r * 2^8 = 127.5 exactly, and above; and their negatives
    [126.498046875, -126.498046875, 126.4990234375, -126.4990234375, 127.4, -127.4,
      126.49999237060547, -126.49999237060547, 0.498046875, 1.5, -0.5, 3, 64.25, -64.75, 5, 6],
    // the third limb's ties and clamp: r2 * 2^16 at .5 and beyond
    [100, 1 + 2 ** -17, -(1 + 2 ** -17), 1 + 3 * 2 ** -17, 2 + 2 ** -16, 0.5 + 2 ** -18,
      99.99804306030273, -99.99804306030273, 1 + 2 ** -9 + 2 ** -17, 3, -3, 7, 0, 0, 0, 1.25],
  ];
  return Float32Array.from(rows.flat());
}

/**
 * The gate's cases: {name, run()} where run() computes through quant.js / gemm.js's public
 * functions (the installed kernel, or the JS loops) and returns an array of typed arrays.
 */
export function elementwiseCases() {
  const cases = [];
  let stream = 0;
  const shapes = [[1, 4, 1], [3, 8, 1], [7, 20, 2], [16, 64, 3], [33, 132, 1], [5, 2048, 1]];
  const scales = [3, 1e-3, 1e30, 1e-30];
  shapes.forEach(([rows, cols, batch], i) => {
    const x = floats(stream++, batch * rows * cols, scales[i % scales.length]);
    quantizerCases(cases, `random ${batch}x${rows}x${cols}`, x, rows, cols, batch);
  });
  const edge = edgeRows();
  quantizerCases(cases, 'edge blocks', edge, edge.length / 16, 16, 1);
  // diverged inputs: refused with quant.js's message on both paths
  for (const [what, v] of [['NaN', NaN], ['infinity', -Infinity], ['2^100', 2 ** 100]]) {
    const x = floats(stream++, 32, 1);
    x[13] = v;
    quantizerCases(cases, `refuse ${what}`, x, 4, 8, 1);
  }
  // gradient operands: fold 2^f into columns then split per row (gradLeftLimbs), fold into rows
  // then split per column (gradRightLimbs); shared and per-batch exponents, extreme folds
  // (the last: 1e30 * 2^127 overflows to infinity, refused on both paths)
  for (const [batch, M, K, lo, hi, scale] of [[1, 6, 12, -20, 20, 1e-3],
    [3, 5, 8, -126, -100, 1e-3], [2, 9, 16, 60, 100, 1e-3], [1, 64, 256, -10, 10, 1],
    [1, 4, 8, 120, 127, 1e30]]) {
    const g = floats(stream++, batch * M * K, scale);
    for (const shared of [true, false]) {
      const fc = ints(stream++, shared ? K : batch * K, lo, hi);
      const fr = ints(stream++, shared ? M : batch * M, lo, hi);
      for (const limbs of [2, 3]) {
        const tag = `${batch}x${M}x${K} fold [${lo}, ${hi}] shared=${shared} limbs=${limbs}`;
        cases.push({ name: `gradLeftLimbs ${tag}`,
          run: () => Object.values(gradLeftLimbs(g, fc, M, K, batch, limbs)) });
        cases.push({ name: `gradRightLimbs ${tag}`,
          run: () => Object.values(gradRightLimbs(g, fr, M, K, batch, limbs)) });
      }
    }
  }
  crossEntropyCases(cases, stream);
  return cases;
}

// Hand-made cross-entropy rows of 9 (V not a multiple of 4): [row, target].
function edgeLogitRows() {
  const sub = (k) => fromBits(k);
  const inf = Infinity;
  return [
    // ties for the maximum, the target at one of them; +0 and -0 tied (either order)
    [[3, 1, 3, -2, 3, 0.5, 3, -7, 2], 2],
    [[-0, 0, -5, -1, -0, -3, -2, 0, -9], 0],
    [[0, -0, -5, -1, -0, -3, -2, 0, -9], 1],
    // -inf entries (their exp is +0), the target at the maximum and at an -inf
    [[-inf, 4, -inf, 1, -inf, 2, -inf, 3, -inf], 1],
    [[-inf, 4, -inf, 1, -inf, 2, -inf, 3, -inf], 8],
    // huge and subnormal logits
    [[3e38, -3e38, 1e38, 2.5e38, sub(1), -sub(5), 0, 3e38, 1], 3],
    [[sub(1), sub(0x7fffff), -sub(3), 0, -0, sub(7), sub(2), -sub(1), sub(9)], 4],
    // z around the -86 cut (exp +0 just below), and p / s / N subnormal just above it
    [[0, -85.9, -86, -86.00001, -87, -80, -85.99999, -86.5, -84], 5],
    [[10, 10, 10, 10, -75.99, -75.5, -76.001, 10, 10], 4],
    // a single spike: s = 1 + tiny, loss near 0
    [[100, 0, 1, 2, 3, 4, 5, 6, 7], 0],
    // diverged rows: NaN, +inf, all -inf (NaN on both paths)
    [[1, NaN, 2, 3, 4, 5, 6, 7, 8], 0],
    [[1, inf, 2, 3, 4, 5, 6, 7, 8], 1],
    [[-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf], 3],
  ];
}

function crossEntropyCases(cases, firstStream) {
  let stream = firstStream;
  // (N, V, spread): V from 1 to 2048, multiples of 4 and not; spreads from near-ties to exps
  // below the cut
  const shapes = [[1, 1, 3], [2, 2, 3], [3, 3, 30], [4, 4, 1], [3, 5, 100], [2, 7, 1e-3],
    [5, 8, 10], [2, 9, 300], [6, 33, 60], [3, 64, 5], [2, 1000, 40], [4, 2048, 8],
    [2, 2047, 1e30]];
  for (const [N, V, spread] of shapes) {
    const logits = floats(stream++, N * V, spread);
    const y = ints(stream++, N, 0, V - 1);
    // one row with its target at its maximum
    let at = 0;
    for (let v = 1; v < V; v++) if (logits[v] > logits[at]) at = v;
    y[0] = at;
    cases.push(crossEntropyCase(`crossEntropy random ${N}x${V} spread ${spread}`, logits, y,
      N, V));
  }
  const rows = edgeLogitRows();
  const V = rows[0][0].length;
  cases.push(crossEntropyCase('crossEntropy edge rows',
    Float32Array.from(rows.flatMap(([row]) => row)), Int32Array.from(rows, ([, t]) => t),
    rows.length, V));
}

// One case: a fresh copy of the logits each run (crossEntropy writes dlogits over them).
function crossEntropyCase(name, logits, y, N, V) {
  return { name, run: () => {
    const d = logits.slice();
    const lossT = new Float32Array(N);
    const loss = crossEntropy(d, y, N, V, lossT);
    return [d, lossT, Float32Array.of(loss)];
  } };
}

function quantizerCases(cases, tag, x, rows, cols, batch) {
  const R = batch * rows;
  cases.push({ name: `quantizeRows ${tag}`, run: () => Object.values(quantizeRows(x, R, cols)) });
  cases.push({ name: `quantize2Rows ${tag}`, run: () => Object.values(quantize2Rows(x, R, cols)) });
  cases.push({ name: `quantize3Rows ${tag}`, run: () => Object.values(quantize3Rows(x, R, cols)) });
  cases.push({ name: `quantizeCols ${tag}`,
    run: () => Object.values(quantizeCols(x, rows, cols, {}, batch)) });
  cases.push({ name: `quantize2Cols ${tag}`,
    run: () => Object.values(quantize2Cols(x, rows, cols, {}, batch)) });
  cases.push({ name: `quantize3Cols ${tag}`,
    run: () => Object.values(quantize3Cols(x, rows, cols, batch)) });
}

// What a case gives: its arrays, or its error (name and message).
function outcome(c) {
  try {
    return { arrays: c.run() };
  } catch (exc) {
    if (exc instanceof RangeError || exc?.name === 'QuantizationError') {
      return { error: `${exc.name}: ${exc.message}` };
    }
    throw exc;
  }
}

// -1 when the two outcomes agree bit for bit, else a description of the first difference.
function difference(got, want) {
  if (want.error || got.error) {
    return got.error === want.error ? null
      : `expected ${want.error ?? 'a result'}, got ${got.error ?? 'a result'}`;
  }
  if (got.arrays.length !== want.arrays.length) return 'a different number of outputs';
  for (let a = 0; a < want.arrays.length; a++) {
    const [x, y] = [got.arrays[a], want.arrays[a]];
    if (x.length !== y.length || x.constructor !== y.constructor) {
      return `output ${a}: ${x.constructor.name}(${x.length}), ` +
        `expected ${y.constructor.name}(${y.length})`;
    }
    const i = firstMismatch(x, y);
    if (i >= 0) return `output ${a}, first mismatch at ${i}: expected ${y[i]}, got ${x[i]}`;
  }
  return null;
}

// The first index where x and y differ, or -1: integers by value, floats by bit pattern (-0 is
// not +0), any NaN matching any NaN.
function firstMismatch(x, y) {
  if (x instanceof Float32Array) {
    const [xb, yb] = [bitsOf(x), bitsOf(y)];
    for (let i = 0; i < y.length; i++) {
      if (xb[i] !== yb[i] && !(x[i] !== x[i] && y[i] !== y[i])) return i;
    }
    return -1;
  }
  for (let i = 0; i < y.length; i++) if (x[i] !== y[i]) return i;
  return -1;
}

const bitsOf = (f) => new Uint32Array(f.buffer, f.byteOffset, f.length);

// Installs `kernel` (or null: the JS loops) for both the quantizers and the cross-entropy.
function install(kernel) {
  setQuantKernel(kernel);
  setCrossEntropyKernel(kernel);
}

/**
 * Runs the gate on `kernel` (a WasmElementwise) without installing it. Resolves to {passed,
 * cases, failure}: `failure` names the first failing case with its index and values.
 */
export async function gateWasmElementwise(kernel) {
  const previous = activeQuantKernel();
  const previousXent = activeCrossEntropyKernel();
  let cases = 0;
  try {
    for (const c of elementwiseCases()) {
      install(null);
      const want = outcome(c);
      install(kernel);
      kernel.poison();
      const at = difference(outcome(c), want);
      if (at !== null) {
        return { passed: false, cases, failure: `${kernel.name} failed case '${c.name}': ${at}` };
      }
      cases += 1;
    }
    return { passed: true, cases, failure: null };
  } catch (exc) {
    // a trap or a failed memory.grow is a failure of the kernel, not of the caller
    return { passed: false, cases,
      failure: `${kernel.name}: the gate stopped on ${exc.name}: ${exc.message}` };
  } finally {
    setQuantKernel(previous);
    setCrossEntropyKernel(previousXent);
  }
}

/**
 * Loads, gates and (when every case passes) installs the WebAssembly elementwise kernel as the
 * CPU tier's quantization kernel. Options: `bytes` (the module; default: fetched or read from
 * static/wasm/elementwise_f32.wasm), `url`. Never throws for a kernel that cannot be used:
 * resolves to the status ({enabled, name, reason, cases, ms}) with the reason, and the JS loops
 * stay. Calling it again re-gates (a new kernel replaces the old one only if it passes).
 */
export async function enableWasmElementwise(options = {}) {
  const t0 = performance.now();
  let kernel;
  try {
    kernel = await loadWasmElementwise(options);
  } catch (exc) {
    status = { enabled: activeQuantKernel() !== null, name: null,
      reason: `the WebAssembly elementwise kernel could not be loaded: ${exc.message}` };
    return wasmElementwiseStatus();
  }
  const gate = await gateWasmElementwise(kernel);
  const ms = Math.trunc(performance.now() - t0); // timing only, never contract arithmetic
  if (!gate.passed) {
    const kept = activeQuantKernel() ? 'the kernel installed before stays'
      : 'the JS quantizers stay, and the JS cross-entropy';
    status = { enabled: activeQuantKernel() !== null, name: kernel.name, cases: gate.cases, ms,
      reason: `${gate.failure}; ${kept}` };
    return wasmElementwiseStatus();
  }
  install(kernel);
  status = { enabled: true, name: kernel.name, cases: gate.cases, ms,
    reason: `${kernel.name}: ${gate.cases} gate cases pass; it computes the CPU tier's ` +
      'quantization, gradient limbs and cross-entropy' };
  return wasmElementwiseStatus();
}

/** Puts the JS quantizers and cross-entropy back. */
export function disableWasmElementwise() {
  install(null);
  status = { enabled: false, name: null, reason: 'disabled' };
  return wasmElementwiseStatus();
}
