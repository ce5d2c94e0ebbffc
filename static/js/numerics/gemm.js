// Exact int8 x int8 matrix products and their dequantization (docs/NUMERICS.md sections 3, 6).
//
// Mirrors server/daisychain/numerics/gemm.py. Every product is the exact integer sum
// acc = sum_k a[k] * b[k], then ONE rounding: y = f32(acc * 2^s). In JS that is literal: the
// integer accumulates exactly in doubles (all partial sums are integers far below 2^53), the
// multiply by 2^s (a table entry built from exponent bits) is exact, and the store into a
// Float32Array rounds to nearest even once. Two-limb gradient operands enter as the 16-bit
// integer 256 * hi + lo, so (256 * acc_hi + acc_lo) is accumulated directly.
//
// Operands: integer typed arrays (Int8Array in the model) holding values with |x| <= 128, the
// reference's domain (gemm.py); the bounds below hold for 128 * 128 = 2^14 per product.
//
// Layout: row-major typed arrays. A product is (M x K) @ (K x N); `transA` / `transB` say the
// operand is stored transposed ((K x M) / (N x K)), which is how the backward reuses the forward
// operands. `batch` stacks independent products (attention) at strides M*K, K*N, M*N; scale
// arrays are stacked the same way.
//
// Speed (forward): two int8 columns of B travel in one double, b0 + b1 * 2^26. One multiply-add
// a * (b0 + b1 * 2^26) then accumulates both columns: each lane's sum stays below 2^24 in
// magnitude for K-chunks of at most 1024 (128 * 128 * 1024 = 2^24), the packed sum below 2^51,
// so every partial sum is an exact integer; after each chunk the lanes are separated exactly.
// Four rows of A share each packed row of B (register tile). About twice the plain loop.

import {
  LO_SHIFT, quantize2Cols, quantize2Rows, quantize3Cols, quantize3Rows, quantKernelFor,
} from './quant.js';
import { POW2_SPAN, POW2_TABLE } from './fmath.js';

const LANE = 67108864; // 2^26: lane offset of the packed forward operand
const HALF_LANE = 33554432; // 2^25
const INV_LANE = 1 / LANE; // exact
const K_CHUNK = 1024; // largest K-chunk for which a lane sum stays within +-2^24

// Growable scratch buffers, reused across calls (no allocation per product once warm).
const scratch = new Map();
function buffer(name, Type, n) {
  const id = `${name}:${Type.name}`;
  let b = scratch.get(id);
  if (!b || b.length < n) {
    b = new Type(Math.max(n, b ? 2 * b.length : 0));
    scratch.set(id, b);
  }
  return b;
}

function checkLength(x, n, what) {
  if (x.length !== n) throw new RangeError(`${what}: length ${x.length}, expected ${n}`);
}

// The tier's exact integer kernel: null (the JS kernels below), or one that passed its gates and
// was installed by them (wasmgate.js: the WebAssembly SIMD GEMM). It computes the very integers
// the JS kernels compute, so only the speed changes; every product asks it first
// (`kernel.accumulate`, wasmgemm.js) and keeps the JS kernels for operands it does not take.
let intKernel = null;

/** Installs the integer kernel (null: the JS kernels); returns the previous one. */
export function setIntKernel(kernel) {
  const previous = intKernel;
  intKernel = kernel;
  return previous;
}

/** The installed integer kernel, or null. */
export function activeIntKernel() {
  return intKernel;
}

const kernelFor = (a, b) => (intKernel !== null && intKernel.accepts(a, b) ? intKernel : null);

// PT[jp * K + k] = b(k, 2 jp) + b(k, 2 jp + 1) * 2^26 for the (K x N) operand b at offset bo
// (stored (N x K) when transB). Rows jp >= ceil(N / 2), up to a multiple of 4, are zero.
function packPairs(b, bo, K, N, transB, PT) {
  const NP = (N + 1) >> 1;
  const NP4 = (NP + 3) & ~3;
  for (let jp = 0; jp < NP; jp++) {
    const j = 2 * jp;
    const po = jp * K;
    const twin = j + 1 < N;
    if (transB) {
      const r0 = bo + j * K;
      const r1 = r0 + K;
      for (let k = 0; k < K; k++) PT[po + k] = b[r0 + k] + (twin ? b[r1 + k] * LANE : 0);
    } else {
      for (let k = 0; k < K; k++) {
        const ro = bo + k * N + j;
        PT[po + k] = b[ro] + (twin ? b[ro + 1] * LANE : 0);
      }
    }
  }
  PT.fill(0, NP * K, NP4 * K);
}

// Adds the two exact integers packed in v (columns 2 jp and 2 jp + 1 of row offset ro).
function addLanes(acc, ro, jp, N, v) {
  const j = 2 * jp;
  if (j >= N) return;
  const hi = Math.floor((v + HALF_LANE) * INV_LANE); // |low lane| <= 2^24 < 2^25: exact split
  acc[ro + j] += v - hi * LANE;
  if (j + 1 < N) acc[ro + j + 1] += hi;
}

// acc[0 .. M*N) = exact integer A @ B for int8 A (M x K at offset a0) and B packed in PT. Each
// step of the k loop loads 2 values of A and 4 packed values (8 columns) of B and does 8
// multiply-adds for 16 outputs, all in registers.
function packedProduct(A, a0, PT, M, K, N, acc) {
  const NP4 = (((N + 1) >> 1) + 3) & ~3;
  acc.fill(0, 0, M * N);
  for (let i = 0; i < M; i += 2) {
    const x0 = a0 + i * K;
    const pair = i + 1 < M;
    const x1 = pair ? x0 + K : x0; // an odd last row is computed twice, stored once
    const c0 = i * N;
    const c1 = c0 + N;
    for (let jp = 0; jp < NP4; jp += 4) {
      const y0 = jp * K;
      const y1 = y0 + K;
      const y2 = y1 + K;
      const y3 = y2 + K;
      for (let k0 = 0; k0 < K; k0 += K_CHUNK) {
        const k1 = Math.min(K, k0 + K_CHUNK);
        let s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
        for (let k = k0; k < k1; k++) {
          const u = A[x0 + k];
          const v = A[x1 + k];
          let p = PT[y0 + k];
          s00 += u * p;
          s10 += v * p;
          p = PT[y1 + k];
          s01 += u * p;
          s11 += v * p;
          p = PT[y2 + k];
          s02 += u * p;
          s12 += v * p;
          p = PT[y3 + k];
          s03 += u * p;
          s13 += v * p;
        }
        addLanes(acc, c0, jp, N, s00);
        addLanes(acc, c0, jp + 1, N, s01);
        addLanes(acc, c0, jp + 2, N, s02);
        addLanes(acc, c0, jp + 3, N, s03);
        if (pair) {
          addLanes(acc, c1, jp, N, s10);
          addLanes(acc, c1, jp + 1, N, s11);
          addLanes(acc, c1, jp + 2, N, s12);
          addLanes(acc, c1, jp + 3, N, s13);
        }
      }
    }
  }
}

// acc[0 .. M*N) = exact sum_k X[i*K + k] * Y[j*K + k] (X: M x K, Y: N4 x K with N4 >= N a
// multiple of 4, rows past N zero). Entries are integers whose products stay below 2^23 (int8
// times a two-limb int16), so double sums are exact for any K < 2^30. Same 2 x 4 register tile
// as the forward kernel, without lanes.
function dotProduct(X, Y, M, K, N, acc) {
  const N4 = (N + 3) & ~3;
  for (let i = 0; i < M; i += 2) {
    const x0 = i * K;
    const pair = i + 1 < M;
    const x1 = pair ? x0 + K : x0;
    const c0 = i * N;
    const c1 = c0 + N;
    for (let j = 0; j < N4; j += 4) {
      const y0 = j * K;
      const y1 = y0 + K;
      const y2 = y1 + K;
      const y3 = y2 + K;
      let s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
      for (let k = 0; k < K; k++) {
        const u = X[x0 + k];
        const v = X[x1 + k];
        let p = Y[y0 + k];
        s00 += u * p;
        s10 += v * p;
        p = Y[y1 + k];
        s01 += u * p;
        s11 += v * p;
        p = Y[y2 + k];
        s02 += u * p;
        s12 += v * p;
        p = Y[y3 + k];
        s03 += u * p;
        s13 += v * p;
      }
      const n = N - j; // columns of this tile that exist
      acc[c0 + j] = s00;
      if (n > 1) acc[c0 + j + 1] = s01;
      if (n > 2) acc[c0 + j + 2] = s02;
      if (n > 3) acc[c0 + j + 3] = s03;
      if (pair) {
        acc[c1 + j] = s10;
        if (n > 1) acc[c1 + j + 1] = s11;
        if (n > 2) acc[c1 + j + 2] = s12;
        if (n > 3) acc[c1 + j + 3] = s13;
      }
    }
  }
}

// dst (R x C) = transpose of src (C x R at offset so).
function transposeInto(src, so, C, R, dst) {
  for (let r = 0; r < R; r++) {
    for (let c = 0; c < C; c++) dst[r * C + c] = src[so + c * R + r];
  }
  return dst;
}

// dst (rows x C, Float64) = the (R x C) matrix at offset so of src (stored (C x R) when trans),
// or of 256 * src + low when `low` is given (two limbs); rows R .. rows are zero.
function rowsF64(src, low, so, R, C, trans, rows, dst) {
  for (let r = 0; r < R; r++) {
    const o = r * C;
    for (let c = 0; c < C; c++) {
      const at = trans ? so + c * R + r : so + o + c;
      dst[o + c] = low ? src[at] * 256 + low[at] : src[at];
    }
  }
  dst.fill(0, R * C, rows * C);
  return dst;
}

/**
 * Exact integer product of int8 operands as a Float64Array (batch x M x N) of integers (the
 * reference the tests compare against; also usable on its own).
 */
export function intMatmul(a, b, M, K, N, { transA = false, transB = false, batch = 1 } = {}) {
  checkLength(a, batch * M * K, 'intMatmul a');
  checkLength(b, batch * K * N, 'intMatmul b');
  const out = new Float64Array(batch * M * N);
  const acc = buffer('acc', Float64Array, M * N);
  const P = buffer('P', Float64Array, K * ((((N + 1) >> 1) + 3) & ~3));
  const kernel = kernelFor(a, b);
  for (let t = 0; t < batch; t++) {
    const c = int8Product(a, b, t, M, K, N, transA, transB, kernel, acc, P);
    out.set(c.subarray(0, M * N), t * M * N);
  }
  return out;
}

/**
 * The exact int32 sums of batch `t` of two int8 operands: through the installed integer kernel
 * (its own buffer), else the JS kernels into `acc` (`P` the packed right operand's scratch).
 */
function int8Product(a, b, t, M, K, N, transA, transB, kernel, acc, P) {
  if (kernel) return kernel.accumulate(a, t * M * K, transA, b, t * K * N, transB, M, K, N);
  let A = a;
  let a0 = t * M * K;
  if (transA) {
    A = transposeInto(a, a0, K, M, buffer('tA', a.constructor, M * K));
    a0 = 0;
  }
  packPairs(b, t * K * N, K, N, transB, P);
  packedProduct(A, a0, P, M, K, N, acc);
  return acc;
}

/**
 * Forward product of two quantized operands: y = f32(acc * 2^(ae[i] + be[j])).
 * aq: Int8Array (M x K), ae: Int32Array(M) per row; bq: Int8Array (K x N), be: Int32Array(N)
 * per column (times `batch`). Returns Float32Array (batch x M x N), or fills `out`.
 */
export function qmatmul(aq, ae, bq, be, M, K, N, opts = {}) {
  const { transA = false, transB = false, batch = 1 } = opts;
  checkLength(aq, batch * M * K, 'qmatmul a');
  checkLength(bq, batch * K * N, 'qmatmul b');
  checkLength(ae, batch * M, 'qmatmul a exponents');
  checkLength(be, batch * N, 'qmatmul b exponents');
  const out = opts.out ?? new Float32Array(batch * M * N);
  const acc = buffer('acc', Float64Array, M * N);
  const P = buffer('P', Float64Array, K * ((((N + 1) >> 1) + 3) & ~3));
  const kernel = kernelFor(aq, bq);
  for (let t = 0; t < batch; t++) {
    const c = int8Product(aq, bq, t, M, K, N, transA, transB, kernel, acc, P);
    dequantizeProduct(c, ae, be, M, N, t, out);
  }
  return out;
}

/**
 * The forward epilogue of product `t` of a batch: out[t] (M x N) = f32(acc * 2^(ae[i] + be[j])).
 * `acc` holds the exact integer accumulators (M x N, any typed array whose values are exact:
 * Float64Array from the CPU kernel, Int32Array from a GPU kernel). Shared by every backend so
 * the one rounding is the same code everywhere.
 */
export function dequantizeProduct(acc, ae, be, M, N, t, out) {
  const o = t * M * N;
  for (let i = 0; i < M; i++) {
    const ei = ae[t * M + i] + POW2_SPAN;
    for (let j = 0; j < N; j++) {
      // Float32Array store: the one round-to-nearest-even of the exact acc * 2^s.
      out[o + i * N + j] = acc[i * N + j] * POW2_TABLE[ei + be[t * N + j]];
    }
  }
}

/**
 * Two-limb left epilogue of product `t`: out[t] = f32(acc * 2^(ge[i] - 8)), acc = 256 hi + lo.
 * Three limbs pass shift = 16 (acc = 65536 hi + 256 mid + lo).
 */
export function dequantizeGradLeft(acc, ge, M, N, t, out, shift = LO_SHIFT) {
  const o = t * M * N;
  for (let i = 0; i < M; i++) {
    const s = POW2_TABLE[ge[t * M + i] - shift + POW2_SPAN];
    for (let j = 0; j < N; j++) out[o + i * N + j] = acc[i * N + j] * s;
  }
}

/** Two-limb right epilogue of product `t`: out[t] = f32(acc * 2^(ge[j] - shift)). */
export function dequantizeGradRight(acc, ge, M, N, t, out, shift = LO_SHIFT) {
  const o = t * M * N;
  for (let i = 0; i < M; i++) {
    for (let j = 0; j < N; j++) {
      out[o + i * N + j] = acc[i * N + j] * POW2_TABLE[ge[t * N + j] - shift + POW2_SPAN];
    }
  }
}

/**
 * Two-limb gradient on the left: f32((256 * (hi @ b) + (lo @ b)) * 2^(ge[i] - 8)).
 * ghi, glo: Int8Array (M x K), ge: Int32Array(M); bq: Int8Array (K x N), carrying no scale
 * (its scales were folded into the gradient). Returns Float32Array (batch x M x N).
 */
export function qmatmulGradLeft(ghi, glo, ge, bq, M, K, N, opts = {}) {
  const { transB = false, batch = 1 } = opts;
  checkLength(ghi, batch * M * K, 'qmatmulGradLeft hi');
  checkLength(glo, batch * M * K, 'qmatmulGradLeft lo');
  checkLength(ge, batch * M, 'qmatmulGradLeft exponents');
  checkLength(bq, batch * K * N, 'qmatmulGradLeft b');
  const out = opts.out ?? new Float32Array(batch * M * N);
  const acc = buffer('acc', Float64Array, M * N);
  const X = buffer('X', Float64Array, M * K);
  const Y = buffer('Y', Float64Array, ((N + 3) & ~3) * K);
  const kernel = kernelFor([ghi, glo], bq);
  for (let t = 0; t < batch; t++) {
    let c = acc;
    if (kernel) {
      c = kernel.accumulate([ghi, glo], t * M * K, false, bq, t * K * N, transB, M, K, N);
    } else {
      rowsF64(ghi, glo, t * M * K, M, K, false, M, X); // 256 * hi + lo
      rowsF64(bq, null, t * K * N, N, K, !transB, (N + 3) & ~3, Y); // B^T (N x K)
      dotProduct(X, Y, M, K, N, acc);
    }
    dequantizeGradLeft(c, ge, M, N, t, out);
  }
  return out;
}

/**
 * Two-limb gradient on the right: f32((256 * (a @ hi) + (a @ lo)) * 2^(ge[j] - 8)).
 * aq: Int8Array (M x K) carrying no scale; ghi, glo: Int8Array (K x N), ge: Int32Array(N).
 */
export function qmatmulGradRight(aq, ghi, glo, ge, M, K, N, opts = {}) {
  const { transA = false, batch = 1 } = opts;
  checkLength(aq, batch * M * K, 'qmatmulGradRight a');
  checkLength(ghi, batch * K * N, 'qmatmulGradRight hi');
  checkLength(glo, batch * K * N, 'qmatmulGradRight lo');
  checkLength(ge, batch * N, 'qmatmulGradRight exponents');
  const out = opts.out ?? new Float32Array(batch * M * N);
  const acc = buffer('acc', Float64Array, M * N);
  const X = buffer('X', Float64Array, M * K);
  const Y = buffer('Y', Float64Array, ((N + 3) & ~3) * K);
  const kernel = kernelFor(aq, [ghi, glo]);
  for (let t = 0; t < batch; t++) {
    let c = acc;
    if (kernel) {
      c = kernel.accumulate(aq, t * M * K, transA, [ghi, glo], t * K * N, false, M, K, N);
    } else {
      rowsF64(aq, null, t * M * K, M, K, transA, M, X); // A (M x K)
      rowsF64(ghi, glo, t * K * N, N, K, true, (N + 3) & ~3, Y); // (256 * hi + lo)^T (N x K)
      dotProduct(X, Y, M, K, N, acc);
    }
    dequantizeGradRight(c, ge, M, N, t, out);
  }
  return out;
}

/** The 24-bit integers 65536 * hi + 256 * mid + lo of a three-limb operand (exact). */
export function combineLimbs3(hi, mid, lo) {
  const out = new Int32Array(hi.length);
  for (let i = 0; i < hi.length; i++) out[i] = (hi[i] * 256 + mid[i]) * 256 + lo[i];
  return out;
}

/**
 * Three-limb gradient on the left (contract v2, the logits gradient):
 * f32((65536 * (hi @ b) + 256 * (mid @ b) + (lo @ b)) * 2^(ge[i] - 16)), accumulated as one
 * exact integer (|products| < 2^31, sums below 2^53 for K < 2^22).
 */
export function qmatmulGrad3Left(ghi, gmid, glo, ge, bq, M, K, N, opts = {}) {
  const { transB = false, batch = 1 } = opts;
  checkLength(ghi, batch * M * K, 'qmatmulGrad3Left hi');
  checkLength(gmid, batch * M * K, 'qmatmulGrad3Left mid');
  checkLength(glo, batch * M * K, 'qmatmulGrad3Left lo');
  checkLength(ge, batch * M, 'qmatmulGrad3Left exponents');
  checkLength(bq, batch * K * N, 'qmatmulGrad3Left b');
  const kernel = kernelFor([ghi, gmid, glo], bq);
  const g = kernel ? null : combineLimbs3(ghi, gmid, glo);
  const out = opts.out ?? new Float32Array(batch * M * N);
  const acc = buffer('acc', Float64Array, M * N);
  const X = buffer('X', Float64Array, M * K);
  const Y = buffer('Y', Float64Array, ((N + 3) & ~3) * K);
  for (let t = 0; t < batch; t++) {
    let c = acc;
    if (kernel) {
      c = kernel.accumulate([ghi, gmid, glo], t * M * K, false, bq, t * K * N, transB, M, K, N);
    } else {
      rowsF64(g, null, t * M * K, M, K, false, M, X);
      rowsF64(bq, null, t * K * N, N, K, !transB, (N + 3) & ~3, Y);
      dotProduct(X, Y, M, K, N, acc);
    }
    dequantizeGradLeft(c, ge, M, N, t, out, 2 * LO_SHIFT);
  }
  return out;
}

/** Three-limb gradient on the right: f32((65536 a@hi + 256 a@mid + a@lo) * 2^(ge[j] - 16)). */
export function qmatmulGrad3Right(aq, ghi, gmid, glo, ge, M, K, N, opts = {}) {
  const { transA = false, batch = 1 } = opts;
  checkLength(aq, batch * M * K, 'qmatmulGrad3Right a');
  checkLength(ghi, batch * K * N, 'qmatmulGrad3Right hi');
  checkLength(gmid, batch * K * N, 'qmatmulGrad3Right mid');
  checkLength(glo, batch * K * N, 'qmatmulGrad3Right lo');
  checkLength(ge, batch * N, 'qmatmulGrad3Right exponents');
  const kernel = kernelFor(aq, [ghi, gmid, glo]);
  const g = kernel ? null : combineLimbs3(ghi, gmid, glo);
  const out = opts.out ?? new Float32Array(batch * M * N);
  const acc = buffer('acc', Float64Array, M * N);
  const X = buffer('X', Float64Array, M * K);
  const Y = buffer('Y', Float64Array, ((N + 3) & ~3) * K);
  for (let t = 0; t < batch; t++) {
    let c = acc;
    if (kernel) {
      c = kernel.accumulate(aq, t * M * K, transA, [ghi, gmid, glo], t * K * N, false, M, K, N);
    } else {
      rowsF64(aq, null, t * M * K, M, K, transA, M, X);
      rowsF64(g, null, t * K * N, N, K, true, (N + 3) & ~3, Y);
      dotProduct(X, Y, M, K, N, acc);
    }
    dequantizeGradRight(c, ge, M, N, t, out, 2 * LO_SHIFT);
  }
  return out;
}

function checkLimbCount(n) {
  if (n !== 2 && n !== 3) throw new RangeError(`a gradient operand has 2 or 3 limbs, got ${n}`);
}

// g * 2^fold per column (foldE: K or batch * K entries), rounded to float32 like numpy.
function foldColumns(g, foldE, batch, rows, cols) {
  const shared = foldE.length === cols;
  if (!shared) checkLength(foldE, batch * cols, 'fold exponents');
  const f = buffer('fold', Float32Array, g.length).subarray(0, g.length);
  for (let t = 0; t < batch; t++) {
    const eo = shared ? 0 : t * cols;
    for (let r = 0; r < rows; r++) {
      const o = (t * rows + r) * cols;
      for (let c = 0; c < cols; c++) f[o + c] = g[o + c] * POW2_TABLE[foldE[eo + c] + POW2_SPAN];
    }
  }
  return f;
}

// g * 2^fold per row (foldE: rows or batch * rows entries), rounded to float32 like numpy.
function foldRows(g, foldE, batch, rows, cols) {
  const shared = foldE.length === rows;
  if (!shared) checkLength(foldE, batch * rows, 'fold exponents');
  const f = buffer('fold', Float32Array, g.length).subarray(0, g.length);
  for (let t = 0; t < batch; t++) {
    for (let r = 0; r < rows; r++) {
      const s = POW2_TABLE[foldE[(shared ? 0 : t * rows) + r] + POW2_SPAN];
      const o = (t * rows + r) * cols;
      for (let c = 0; c < cols; c++) f[o + c] = g[o + c] * s;
    }
  }
  return f;
}

function checkFold(foldE) {
  for (let i = 0; i < foldE.length; i++) {
    if (!(foldE[i] >= -126 && foldE[i] <= 127)) {
      throw new RangeError(`fold exponent ${foldE[i]} outside the normal float32 range`);
    }
  }
}

/**
 * dA = G @ B for a forward product whose right operand B was quantized on its rows (its scales
 * sit on the summed axis): fold 2^foldE into G's columns (exact), two-limb quantize G per row,
 * reuse B's int8 values. g: Float32Array (M x K); foldE: Int32Array(K) (or batch * K);
 * bq: Int8Array (K x N), or (N x K) with transB (dA = dY @ Bq^T reuses the forward Bq as stored).
 * `opts.limbs`, if given an object, receives the gradient's {hi, lo, e} ({hi, mid, lo, e} with
 * three limbs). `opts.limbCount` = 3 quantizes the gradient in three limbs (the logits gradient,
 * contract v2); the default is 2.
 */
export function gradMatmulLeft(g, foldE, bq, M, K, N, opts = {}) {
  const n = opts.limbCount ?? 2;
  checkLimbCount(n);
  if (n === 3) {
    const l3 = gradLeftLimbs(g, foldE, M, K, opts.batch ?? 1, 3);
    if (opts.limbs) Object.assign(opts.limbs, l3);
    return qmatmulGrad3Left(l3.hi, l3.mid, l3.lo, l3.e, bq, M, K, N, opts);
  }
  const { hi, lo, e } = gradLeftLimbs(g, foldE, M, K, opts.batch ?? 1);
  if (opts.limbs) Object.assign(opts.limbs, { hi, lo, e });
  return qmatmulGradLeft(hi, lo, e, bq, M, K, N, opts);
}

/**
 * The gradient operand of gradMatmulLeft: 2^foldE folded into g's columns, then two-limb
 * quantized per row: {hi, lo: Int8Array (batch * M * K), e: Int32Array (batch * M)}.
 */
export function gradLeftLimbs(g, foldE, M, K, batch = 1, limbCount = 2) {
  checkLength(g, batch * M * K, 'gradMatmulLeft g');
  checkFold(foldE);
  const kernel = quantKernelFor(K);
  if (kernel) { // the fold and the limbs in one pass over kernel memory (quant.js's kernel)
    if (foldE.length !== K) checkLength(foldE, batch * K, 'fold exponents');
    const r = kernel.quantize(g, batch, M, K, true, limbCount, {},
      { e: foldE, byRows: false });
    return limbCount === 3 ? r : { hi: r.hi, lo: r.mid, e: r.e };
  }
  const f = foldColumns(g, foldE, batch, M, K);
  return limbCount === 3 ? quantize3Rows(f, batch * M, K) : quantize2Rows(f, batch * M, K);
}

/**
 * dB = A @ G for a forward product whose left operand A was quantized on its columns: fold
 * 2^foldE into G's rows, two-limb quantize G per column, reuse A's int8 values. aq: Int8Array
 * (M x K), or (K x M) with transA (dB = Aq^T @ dY); foldE: Int32Array(K) (or batch * K);
 * g: Float32Array (K x N). `opts.limbs`, if given an object, receives the gradient's {hi, lo, e}
 * ({hi, mid, lo, e} with three limbs); `opts.limbCount` as in gradMatmulLeft.
 */
export function gradMatmulRight(aq, foldE, g, M, K, N, opts = {}) {
  const n = opts.limbCount ?? 2;
  checkLimbCount(n);
  if (n === 3) {
    const l3 = gradRightLimbs(g, foldE, K, N, opts.batch ?? 1, 3);
    if (opts.limbs) Object.assign(opts.limbs, l3);
    return qmatmulGrad3Right(aq, l3.hi, l3.mid, l3.lo, l3.e, M, K, N, opts);
  }
  const { hi, lo, e } = gradRightLimbs(g, foldE, K, N, opts.batch ?? 1);
  if (opts.limbs) Object.assign(opts.limbs, { hi, lo, e });
  return qmatmulGradRight(aq, hi, lo, e, M, K, N, opts);
}

/**
 * The gradient operand of gradMatmulRight: 2^foldE folded into g's rows, then two-limb
 * quantized per column: {hi, lo: Int8Array (batch * K * N), e: Int32Array (batch * N)}.
 */
export function gradRightLimbs(g, foldE, K, N, batch = 1, limbCount = 2) {
  checkLength(g, batch * K * N, 'gradMatmulRight g');
  checkFold(foldE);
  const kernel = quantKernelFor(N);
  if (kernel) {
    if (foldE.length !== K) checkLength(foldE, batch * K, 'fold exponents');
    const r = kernel.quantize(g, batch, K, N, false, limbCount, {}, { e: foldE, byRows: true });
    return limbCount === 3 ? r : { hi: r.hi, lo: r.mid, e: r.e };
  }
  const f = foldRows(g, foldE, batch, K, N);
  return limbCount === 3 ? quantize3Cols(f, K, N, batch) : quantize2Cols(f, K, N, {}, batch);
}
