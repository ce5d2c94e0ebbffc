// Known answers from the Python reference, as SHA-256 digests of whole output sweeps.
//
// Inputs are generated on both sides from the contract's own PRNG (exact float32 arithmetic
// only), so no data file is needed; each digest below was computed by the reference
// (daisychain.numerics) with the numpy mirror of `data()` / the sweeps written here:
//   data(t, n) = (uniform(key(2024, 9, t), n) - 0.5) * 2^((bits(key(2024, 10, t), n) >> 27) - 16)
//   exp sweep  = exp(f32(f32(180 * u) - 90)),  u = uniform(key(2024, 1), 2^18)
//   log sweep  = log(bits-as-float32(bits(key(2024, 2), 2^18) % 0x7F800001))   (0 .. +inf)
// Digests hash the outputs' little-endian bytes in the order listed in each test. These
// complement the golden vectors in tests/vectors/ (vectors.test.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as N from '../../static/js/numerics/index.js';

function data(t, n) {
  const u = N.uniform(N.key(2024, 9, t), n);
  const s = N.bits(N.key(2024, 10, t), n);
  return Float32Array.from(u, (v, i) => (v - 0.5) * 2 ** ((s[i] >>> 27) - 16));
}

const digest = (...arrays) => N.sha256Arrays(arrays);

test('exp over 2^18 points of [-90, 90] matches the reference bit for bit', async () => {
  const u = N.uniform(N.key(2024, 1), 1 << 18);
  const x = u.map((v) => Math.fround(Math.fround(180 * v) - 90));
  assert.equal(await digest(N.expArray(x)),
    '083d8c2b65636dd9b5024db38a04bc637bf07abe3b77e90f0d42e5d734afeb1b');
});

test('log over 2^18 bit patterns from +0 to +inf matches the reference bit for bit', async () => {
  const b = N.bits(N.key(2024, 2), 1 << 18).map((v) => v % 0x7f800001);
  const x = new Float32Array(b.buffer);
  assert.equal(await digest(N.logArray(x)),
    '248bb8d7bbcfee2978609e3f1627f963d6a25bcac5648e02fb9df5d528cfa542');
});

test('quantization (rows, columns, one and two limbs) matches the reference', async () => {
  const R = 37;
  const C = 53;
  const x = data(0, R * C);
  const r1 = N.quantizeRows(x, R, C);
  const r2 = N.quantize2Rows(x, R, C);
  const c1 = N.quantizeCols(x, R, C);
  const c2 = N.quantize2Cols(x, R, C);
  assert.equal(await digest(r1.q, r1.e, r2.hi, r2.lo, r2.e, c1.q, c1.e, c2.hi, c2.lo, c2.e),
    'c18e7ebb2519026e6a69ff0a12d823d3a1fc5786afd6e733224c80f54d95f28b');
});

test('tree sums per row and per column match the reference', async () => {
  const x = data(0, 37 * 53);
  assert.equal(await digest(N.treeSumLast(x, 37, 53), N.treeSumRows(x, 37, 53)),
    '7f891d4d8e3edccbe9e6412d0f86faaa5d1577548d8a2ebaad6c3328b4c60f84');
});

test('forward product and both gradient products match the reference', async () => {
  const [M, K, Nn] = [19, 70, 23];
  const a = N.quantizeRows(data(1, M * K), M, K);
  const b = N.quantizeCols(data(2, K * Nn), K, Nn);
  const dy = data(3, M * Nn);
  const y = N.qmatmul(a.q, a.e, b.q, b.e, M, K, Nn);
  const dA = N.gradMatmulLeft(dy, b.e, b.q, M, Nn, K, { transB: true }); // dY @ Bq^T
  const dB = N.gradMatmulRight(a.q, a.e, dy, K, M, Nn, { transA: true }); // Aq^T @ dY
  assert.equal(await digest(y, dA, dB),
    '3bdd8cf61af71ef10aab5bc96f74ece172ef86ade217af8872f5c3167f5552b6');
});
