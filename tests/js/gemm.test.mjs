// Exact int8 GEMM and its single-rounding dequantization (NUMERICS.md sections 3 and 6),
// against a naive plain-number reference (exact: every sum stays far below 2^53) and BigInt.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  intMatmul, qmatmul, qmatmulGradLeft, qmatmulGradRight, gradMatmulLeft, gradMatmulRight,
  quantize2Rows, quantize2Cols, quantizeRows, quantizeCols,
} from '../../static/js/numerics/index.js';
import { assertBitsEqual, randomFloat32, randomInt8, testRng } from './helpers.mjs';

// Element (r, c) of a (R x C) matrix stored at offset o, as stored or transposed.
const at = (x, o, R, C, trans, r, c) => (trans ? x[o + c * R + r] : x[o + r * C + c]);

// Naive exact product sum_k A[i,k] * B[k,j] for every layout and batch; A and B may hold any
// integers (int8 or 16-bit two-limb values given as functions).
function naive(A, B, M, K, N, { transA = false, transB = false, batch = 1 } = {}) {
  const out = new Float64Array(batch * M * N);
  for (let t = 0; t < batch; t++) {
    for (let i = 0; i < M; i++) {
      for (let j = 0; j < N; j++) {
        let s = 0;
        for (let k = 0; k < K; k++) {
          s += at(A, t * M * K, M, K, transA, i, k) * at(B, t * K * N, K, N, transB, k, j);
        }
        out[(t * M + i) * N + j] = s;
      }
    }
  }
  return out;
}

const SHAPES = [
  [1, 1, 1, 1], [1, 1, 5, 1], [1, 3, 1, 2], [1, 5, 7, 3], [1, 2, 3, 8], [1, 7, 9, 9],
  [1, 33, 64, 17], [2, 9, 31, 10], [3, 4, 16, 5], [1, 2, 1030, 3], [2, 3, 2100, 5],
];
const LAYOUTS = [{}, { transA: true }, { transB: true }, { transA: true, transB: true }];

test('intMatmul is exact on random int8 data: every shape, layout and batch', () => {
  const rng = testRng(21);
  for (const [batch, M, K, N] of SHAPES) {
    for (const layout of LAYOUTS) {
      const a = randomInt8(rng, batch * M * K, -128, 127);
      const b = randomInt8(rng, batch * K * N, -128, 127);
      const opts = { ...layout, batch };
      assertBitsEqual(intMatmul(a, b, M, K, N, opts), naive(a, b, M, K, N, opts),
        `${batch}x${M}x${K}x${N} ${JSON.stringify(layout)}`);
    }
  }
});

test('worst case all -128 with K > 1024 is exact (BigInt reference)', () => {
  for (const K of [1024, 1025, 2048, 4099]) {
    const M = 3;
    const N = 5;
    const a = new Int8Array(M * K).fill(-128);
    const b = new Int8Array(K * N).fill(-128);
    const want = BigInt(K) * 16384n;
    const got = intMatmul(a, b, M, K, N);
    for (const v of got) assert.equal(BigInt(v), want, `K = ${K}`);
    // mixed signs: +127 against -128 everywhere, and alternating worst products
    b.fill(127);
    for (const v of intMatmul(a, b, M, K, N)) assert.equal(BigInt(v), BigInt(K) * -16256n);
    for (let k = 0; k < K; k++) for (let j = 0; j < N; j++) b[k * N + j] = k % 2 ? 127 : -128;
    const alt = intMatmul(a, b, M, K, N);
    let ref = 0n;
    for (let k = 0; k < K; k++) ref += -128n * BigInt(k % 2 ? 127 : -128);
    for (const v of alt) assert.equal(BigInt(v), ref);
  }
});

test('qmatmul rounds acc * 2^(ea + eb) once to float32', () => {
  const rng = testRng(22);
  for (const [batch, M, K, N] of SHAPES) {
    for (const layout of [{}, { transB: true }, { transA: true }]) {
      const a = randomInt8(rng, batch * M * K, -128, 127);
      const b = randomInt8(rng, batch * K * N, -128, 127);
      const ea = Int32Array.from({ length: batch * M }, () => rng.int(-110, 100));
      const eb = Int32Array.from({ length: batch * N }, () => rng.int(-110, 100));
      const opts = { ...layout, batch };
      const acc = naive(a, b, M, K, N, opts);
      const want = new Float32Array(acc.length);
      for (let t = 0; t < batch; t++) {
        for (let i = 0; i < M; i++) {
          for (let j = 0; j < N; j++) {
            const o = (t * M + i) * N + j;
            want[o] = Math.fround(acc[o] * 2 ** (ea[t * M + i] + eb[t * N + j]));
          }
        }
      }
      assertBitsEqual(qmatmul(a, ea, b, eb, M, K, N, opts), want, `${batch}x${M}x${K}x${N}`);
    }
  }
});

test('dequantization rounds to nearest even, into subnormals, and overflows to infinity', () => {
  // 1 x K @ K x 1 with acc = 2^24 + 1 (needs rounding: tie -> even 2^24) and 2^24 + 3.
  const K = 1025;
  const a = new Int8Array(K).fill(-128);
  const b = new Int8Array(K).fill(-128);
  b[K - 1] = 0;
  a[K - 1] = 1;
  b[K - 1] = 1; // acc = 1024 * 16384 + 1 = 2^24 + 1
  const y = qmatmul(a, new Int32Array([0]), b, new Int32Array([0]), 1, K, 1);
  assert.equal(y[0], 2 ** 24);
  b[K - 1] = 3;
  assert.equal(qmatmul(a, new Int32Array([0]), b, new Int32Array([0]), 1, K, 1)[0], 2 ** 24 + 4);
  // acc = 3 at scale 2^-150: 3 * 2^-150 = 1.5 * 2^-149 rounds to the even 2 * 2^-149
  const one = new Int8Array([3]);
  const e75 = new Int32Array([-75]);
  const sub = qmatmul(one, e75, new Int8Array([1]), e75, 1, 1, 1);
  assert.equal(sub[0], 2 * 2 ** -149);
  const big = qmatmul(new Int8Array([127]), new Int32Array([99]), new Int8Array([127]),
    new Int32Array([99]), 1, 1, 1);
  assert.equal(big[0], Infinity);
  // -0 never comes out of an exact zero sum: acc = 0 gives +0
  const zero = qmatmul(new Int8Array([5, 5]), new Int32Array([0]), new Int8Array([3, -3]),
    new Int32Array([0]), 1, 2, 1);
  assert.ok(Object.is(zero[0], 0));
});

// (256 * hi + lo) as plain integers, for the naive reference.
const limbs = (hi, lo) => Float64Array.from(hi, (h, i) => 256 * h + lo[i]);

test('two-limb gradient products: one rounding of (256 acc_hi + acc_lo) * 2^(e - 8)', () => {
  const rng = testRng(23);
  for (const [batch, M, K, N] of SHAPES) {
    // left: G (M x K) per row, B int8 (K x N) or stored (N x K)
    for (const transB of [false, true]) {
      const g = randomFloat32(rng, batch * M * K, 1e-4);
      const { hi, lo, e } = quantize2Rows(g, batch * M, K);
      const b = randomInt8(rng, batch * K * N, -128, 127);
      const acc = naive(limbs(hi, lo), b, M, K, N, { transB, batch });
      const want = Float32Array.from(acc, (v, o) => v * 2 ** (e[Math.floor(o / N)] - 8));
      assertBitsEqual(qmatmulGradLeft(hi, lo, e, b, M, K, N, { transB, batch }), want,
        `left ${batch}x${M}x${K}x${N} transB=${transB}`);
    }
    // right: A int8 (M x K) or stored (K x M), G (K x N) per column
    for (const transA of [false, true]) {
      const g = randomFloat32(rng, batch * K * N, 3e5);
      const { hi, lo, e } = quantize2Cols(g, K, N, {}, batch);
      const a = randomInt8(rng, batch * M * K, -128, 127);
      const acc = naive(a, limbs(hi, lo), M, K, N, { transA, batch });
      const want = Float32Array.from(acc, (v, o) => {
        const t = Math.floor(o / (M * N));
        return v * 2 ** (e[t * N + (o % N)] - 8);
      });
      assertBitsEqual(qmatmulGradRight(a, hi, lo, e, M, K, N, { transA, batch }), want,
        `right ${batch}x${M}x${K}x${N} transA=${transA}`);
    }
  }
});

test('two-limb extremes: limbs of +-127 / -128 against -128 with K > 1024 stay exact', () => {
  const M = 2;
  const K = 3000;
  const N = 3;
  const hi = new Int8Array(M * K).fill(127);
  const lo = new Int8Array(M * K).fill(127);
  const b = new Int8Array(K * N).fill(-128);
  const y = qmatmulGradLeft(hi, lo, new Int32Array([8, 8]), b, M, K, N);
  const exact = Number(BigInt(K) * (256n * 127n + 127n) * -128n); // * 2^(8 - 8)
  assert.equal(y[0], Math.fround(exact));
});

test('gradMatmulLeft folds the forward scales into G before quantizing (dA = dY @ Bq^T)', () => {
  const rng = testRng(24);
  const M = 6; // tokens
  const Kf = 10; // forward inner dimension
  const Nf = 7; // forward outputs
  const w = randomFloat32(rng, Kf * Nf, 0.3);
  const { q: bq, e: eb } = quantizeCols(w, Kf, Nf);
  const dy = randomFloat32(rng, M * Nf, 1e-3);
  // Reference by the spec's steps: G = dY * 2^eb (per column), two limbs per row, exact sum.
  const G = Float32Array.from(dy, (v, o) => v * 2 ** eb[o % Nf]);
  const { hi, lo, e } = quantize2Rows(G, M, Nf);
  const want = qmatmulGradLeft(hi, lo, e, bq, M, Nf, Kf, { transB: true });
  assertBitsEqual(gradMatmulLeft(dy, eb, bq, M, Nf, Kf, { transB: true }), want, 'dA');
});

test('gradMatmulRight folds the forward scales into G before quantizing (dB = Aq^T @ dY)', () => {
  const rng = testRng(25);
  const Mf = 12;
  const Kf = 5;
  const Nf = 9;
  const x = randomFloat32(rng, Mf * Kf, 2);
  const { q: aq, e: ea } = quantizeRows(x, Mf, Kf);
  const dy = randomFloat32(rng, Mf * Nf, 1e-2);
  const G = Float32Array.from(dy, (v, o) => v * 2 ** ea[Math.floor(o / Nf)]);
  const { hi, lo, e } = quantize2Cols(G, Mf, Nf);
  const want = qmatmulGradRight(aq, hi, lo, e, Kf, Mf, Nf, { transA: true });
  assertBitsEqual(gradMatmulRight(aq, ea, dy, Kf, Mf, Nf, { transA: true }), want, 'dB');
});

test('shape mismatches are refused', () => {
  const a = new Int8Array(6);
  assert.throws(() => intMatmul(a, new Int8Array(5), 2, 3, 2), RangeError);
  assert.throws(() => qmatmul(a, new Int32Array(1), new Int8Array(6), new Int32Array(2), 2, 3, 2),
    RangeError);
});
