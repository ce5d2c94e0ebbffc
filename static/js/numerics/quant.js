// Block quantization with power-of-two scales (docs/NUMERICS.md section 2).
//
// Mirrors server/daisychain/numerics/quant.py. Matrices are row-major Float32Arrays; a block is a
// row (quantize*Rows: activations, per token) or a column (quantize*Cols: weights, per output
// channel). For each block with amax = max |x|:
//
//   E = unbiased exponent of amax (float32 bits),  e = E - 6 + (mantissa >= 0x7F0000)
//   E < E_FLOOR: e = 0, block quantizes to all zeros;  E >= E_CEIL: QuantizationError
//   q = rint(x * 2^-e), ties to even, |q| <= 127 without a clamp
//
// Two limbs: r = x - hi * 2^e, lo = clamp(rint(r * 2^(8 - e)), -127, 127).
//
// q is stored as Int8Array (so -0 cannot exist), e as Int32Array. Every float32 operation that
// numpy performs is mirrored with Math.fround, even those the spec proves exact, so the mirror
// stays faithful to the reference without relying on the proofs.

import { f32Bits, pow2d } from './fmath.js';

// 1.5 * 2^52: (v + RINT_MAGIC) - RINT_MAGIC is rint(v), ties to even, for |v| < 2^51
// (see fmath.js).
const RINT_MAGIC = 6755399441055744;

export const E_FLOOR = -100;
export const E_CEIL = 100;
export const MANT_BUMP = 0x7f0000;
export const LO_SHIFT = 8;

const fround = Math.fround;

/** Non-finite or exploding values reached a quantizer (training has diverged). */
export class QuantizationError extends Error {
  constructor(message) {
    super(message);
    this.name = 'QuantizationError';
  }
}

/** Scale exponent of one block from its float32 absolute maximum (0 for negligible blocks). */
export function scaleExponent(amax) {
  const bits = f32Bits(amax);
  const bigE = ((bits >>> 23) & 0xff) - 127;
  if (bigE < E_FLOOR) return 0;
  return bigE - 6 + ((bits & 0x7fffff) >= MANT_BUMP ? 1 : 0);
}

// The tier's quantization kernel: null (the JS loops below), or one that passed its gate and was
// installed by it (wasmeltgate.js: the WebAssembly SIMD elementwise kernel). It computes the very
// limbs the JS loops compute, so only the speed changes; every quantizer (and gemm.js's gradient
// operands) asks it first and keeps the JS loops for shapes it does not take (`accepts`).
let quantKernel = null;

/** Installs the quantization kernel (null: the JS loops); returns the previous one. */
export function setQuantKernel(kernel) {
  const previous = quantKernel;
  quantKernel = kernel;
  return previous;
}

/** The installed quantization kernel, or null. */
export function activeQuantKernel() {
  return quantKernel;
}

/** The installed kernel if it takes blocks of this shape, else null. */
export function quantKernelFor(cols) {
  return quantKernel !== null && quantKernel.accepts(cols) ? quantKernel : null;
}

/**
 * Checks every block maximum (as quant.py does: first finiteness over all blocks, then the
 * ceiling) and turns the maxima in `amax` into exponents in `e`. Exported for the kernels that
 * find the maxima themselves, so a block's exponent and every refusal are this code's.
 */
export function blockExponents(amax, e) {
  let worst = 0;
  for (let b = 0; b < amax.length; b++) {
    const a = amax[b];
    if (!(a <= 3.4028234663852886e38)) {
      throw new QuantizationError(
        'non-finite value reached the quantizer; training has diverged ' +
          '(lower the learning rate or enable gradient clipping)',
      );
    }
    if (a > worst) worst = a;
  }
  const worstE = ((f32Bits(worst) >>> 23) & 0xff) - 127;
  if (amax.length > 0 && worstE >= E_CEIL) {
    throw new QuantizationError(
      `value of magnitude 2^${worstE} reached the quantizer; training has diverged ` +
        '(lower the learning rate)',
    );
  }
  for (let b = 0; b < amax.length; b++) e[b] = scaleExponent(amax[b]);
}

let scratchMax = new Float64Array(256);
function maxScratch(n) {
  if (scratchMax.length < n) scratchMax = new Float64Array(Math.max(n, 2 * scratchMax.length));
  return scratchMax.subarray(0, n);
}

// Row maxima of |x| (Math.max propagates NaN, so a NaN anywhere makes the maximum NaN).
function rowMaxima(x, rows, cols, amax) {
  for (let r = 0; r < rows; r++) {
    const o = r * cols;
    let m = 0;
    for (let c = 0; c < cols; c++) m = Math.max(m, Math.abs(x[o + c]));
    amax[r] = m;
  }
}

// Column maxima of |x| for `batch` stacked (rows x cols) matrices; amax has batch * cols entries.
function colMaxima(x, batch, rows, cols, amax) {
  amax.fill(0);
  for (let b = 0; b < batch; b++) {
    const mo = b * cols;
    for (let r = 0; r < rows; r++) {
      const o = (b * rows + r) * cols;
      for (let c = 0; c < cols; c++) amax[mo + c] = Math.max(amax[mo + c], Math.abs(x[o + c]));
    }
  }
}

function checkShape(x, count, what) {
  if (!(x instanceof Float32Array)) throw new TypeError(`${what} expects a Float32Array`);
  if (x.length !== count) {
    throw new RangeError(`${what}: length ${x.length} does not match the shape (${count})`);
  }
}

/**
 * Quantize each row of a row-major (rows x cols) matrix: returns {q: Int8Array(rows * cols),
 * e: Int32Array(rows)} with x ~= q * 2^e. `out` may supply the q and e arrays to reuse.
 */
export function quantizeRows(x, rows, cols, out = {}) {
  checkShape(x, rows * cols, 'quantizeRows');
  const kernel = quantKernelFor(cols);
  if (kernel) {
    const { hi: q, e } = kernel.quantize(x, 1, rows, cols, true, 1, { hi: out.q, e: out.e });
    return { q, e };
  }
  const q = out.q ?? new Int8Array(rows * cols);
  const e = out.e ?? new Int32Array(rows);
  const amax = maxScratch(rows);
  rowMaxima(x, rows, cols, amax);
  blockExponents(amax, e);
  for (let r = 0; r < rows; r++) {
    const o = r * cols;
    const s = pow2d(-e[r]);
    for (let c = 0; c < cols; c++) q[o + c] = fround(x[o + c] * s) + RINT_MAGIC - RINT_MAGIC;
  }
  return { q, e };
}

/**
 * Quantize each column of `batch` stacked row-major (rows x cols) matrices: returns
 * {q: Int8Array(batch * rows * cols), e: Int32Array(batch * cols)}.
 */
export function quantizeCols(x, rows, cols, out = {}, batch = 1) {
  checkShape(x, batch * rows * cols, 'quantizeCols');
  const kernel = quantKernelFor(cols);
  if (kernel) {
    const { hi: q, e } = kernel.quantize(x, batch, rows, cols, false, 1, { hi: out.q, e: out.e });
    return { q, e };
  }
  const q = out.q ?? new Int8Array(batch * rows * cols);
  const e = out.e ?? new Int32Array(batch * cols);
  const amax = maxScratch(batch * cols);
  colMaxima(x, batch, rows, cols, amax);
  blockExponents(amax, e);
  const scale = amax; // reuse the scratch: 2^-e per column
  for (let i = 0; i < scale.length; i++) scale[i] = pow2d(-e[i]);
  for (let b = 0; b < batch; b++) {
    const so = b * cols;
    for (let r = 0; r < rows; r++) {
      const o = (b * rows + r) * cols;
      for (let c = 0; c < cols; c++) {
        q[o + c] = fround(x[o + c] * scale[so + c]) + RINT_MAGIC - RINT_MAGIC;
      }
    }
  }
  return { q, e };
}

// The low limb of one element: clamp(rint(f32(f32(x - hi * 2^e) * 2^(8 - e))), -127, 127).
function lowLimb(x, hi, up, down) {
  const r = fround(x - hi * up); // hi * 2^e is exact in float32
  const l = fround(r * down) + RINT_MAGIC - RINT_MAGIC;
  return l > 127 ? 127 : l < -127 ? -127 : l;
}

/**
 * Two-limb quantization of each row: {hi, lo: Int8Array(rows * cols), e: Int32Array(rows)} with
 * x ~= (256 * hi + lo) * 2^(e - 8).
 */
export function quantize2Rows(x, rows, cols, out = {}) {
  const kernel = quantKernelFor(cols);
  if (kernel) {
    checkShape(x, rows * cols, 'quantize2Rows');
    const r = kernel.quantize(x, 1, rows, cols, true, 2, { hi: out.hi, mid: out.lo, e: out.e });
    return { hi: r.hi, lo: r.mid, e: r.e };
  }
  const lo = out.lo ?? new Int8Array(rows * cols);
  const { q: hi, e } = quantizeRows(x, rows, cols, { q: out.hi, e: out.e });
  for (let r = 0; r < rows; r++) {
    const o = r * cols;
    const up = pow2d(e[r]);
    const down = pow2d(LO_SHIFT - e[r]);
    for (let c = 0; c < cols; c++) lo[o + c] = lowLimb(x[o + c], hi[o + c], up, down);
  }
  return { hi, lo, e };
}

/** Two-limb quantization of each column of `batch` stacked (rows x cols) matrices. */
export function quantize2Cols(x, rows, cols, out = {}, batch = 1) {
  const kernel = quantKernelFor(cols);
  if (kernel) {
    checkShape(x, batch * rows * cols, 'quantize2Cols');
    const r = kernel.quantize(x, batch, rows, cols, false, 2,
      { hi: out.hi, mid: out.lo, e: out.e });
    return { hi: r.hi, lo: r.mid, e: r.e };
  }
  const lo = out.lo ?? new Int8Array(batch * rows * cols);
  const { q: hi, e } = quantizeCols(x, rows, cols, { q: out.hi, e: out.e }, batch);
  const up = new Float64Array(batch * cols);
  const down = new Float64Array(batch * cols);
  for (let i = 0; i < up.length; i++) {
    up[i] = pow2d(e[i]);
    down[i] = pow2d(LO_SHIFT - e[i]);
  }
  for (let b = 0; b < batch; b++) {
    const so = b * cols;
    for (let r = 0; r < rows; r++) {
      const o = (b * rows + r) * cols;
      for (let c = 0; c < cols; c++) {
        lo[o + c] = lowLimb(x[o + c], hi[o + c], up[so + c], down[so + c]);
      }
    }
  }
  return { hi, lo, e };
}

// The third limb of one element (contract v2, the logits gradient): with r = x - hi * 2^e and
// mid its clamped second limb, r2 = f32(r - mid * 2^(e - 8)) (exact) and
// lo = clamp(rint(f32(r2 * 2^(16 - e))), -127, 127).
function limbs3(x, hi, up, down, j, mid, lo) {
  const r = fround(x - hi * up);
  let m = fround(r * down) + RINT_MAGIC - RINT_MAGIC;
  m = m > 127 ? 127 : m < -127 ? -127 : m;
  const r2 = fround(r - m * (up / 256)); // m * 2^(e - 8) is exact
  const l = fround(r2 * (down * 256)) + RINT_MAGIC - RINT_MAGIC;
  mid[j] = m;
  lo[j] = l > 127 ? 127 : l < -127 ? -127 : l;
}

/**
 * Three-limb quantization of each row: {hi, mid, lo: Int8Array(rows * cols), e: Int32Array(rows)}
 * with x ~= (65536 * hi + 256 * mid + lo) * 2^(e - 16); hi and mid are quantize2Rows' hi and lo.
 */
export function quantize3Rows(x, rows, cols) {
  const kernel = quantKernelFor(cols);
  if (kernel) {
    checkShape(x, rows * cols, 'quantize3Rows');
    return kernel.quantize(x, 1, rows, cols, true, 3, {});
  }
  const mid = new Int8Array(rows * cols);
  const lo = new Int8Array(rows * cols);
  const { q: hi, e } = quantizeRows(x, rows, cols);
  for (let r = 0; r < rows; r++) {
    const o = r * cols;
    const up = pow2d(e[r]);
    const down = pow2d(LO_SHIFT - e[r]);
    for (let c = 0; c < cols; c++) limbs3(x[o + c], hi[o + c], up, down, o + c, mid, lo);
  }
  return { hi, mid, lo, e };
}

/** Three-limb quantization of each column of `batch` stacked (rows x cols) matrices. */
export function quantize3Cols(x, rows, cols, batch = 1) {
  const kernel = quantKernelFor(cols);
  if (kernel) {
    checkShape(x, batch * rows * cols, 'quantize3Cols');
    return kernel.quantize(x, batch, rows, cols, false, 3, {});
  }
  const mid = new Int8Array(batch * rows * cols);
  const lo = new Int8Array(batch * rows * cols);
  const { q: hi, e } = quantizeCols(x, rows, cols, {}, batch);
  for (let b = 0; b < batch; b++) {
    const so = b * cols;
    for (let r = 0; r < rows; r++) {
      const o = (b * rows + r) * cols;
      for (let c = 0; c < cols; c++) {
        const up = pow2d(e[so + c]);
        const down = pow2d(LO_SHIFT - e[so + c]);
        limbs3(x[o + c], hi[o + c], up, down, o + c, mid, lo);
      }
    }
  }
  return { hi, mid, lo, e };
}

/** q * 2^e per row (`e` has one entry per row), as float32 (exact for quantizer output). */
export function dequantizeRows(q, e, rows, cols, out = new Float32Array(rows * cols)) {
  for (let r = 0; r < rows; r++) {
    const s = pow2d(e[r]);
    const o = r * cols;
    for (let c = 0; c < cols; c++) out[o + c] = q[o + c] * s;
  }
  return out;
}

/** q * 2^e per column of `batch` stacked matrices (`e` has batch * cols entries). */
export function dequantizeCols(q, e, rows, cols, out = new Float32Array(q.length), batch = 1) {
  for (let b = 0; b < batch; b++) {
    for (let r = 0; r < rows; r++) {
      const o = (b * rows + r) * cols;
      for (let c = 0; c < cols; c++) out[o + c] = q[o + c] * pow2d(e[b * cols + c]);
    }
  }
  return out;
}
