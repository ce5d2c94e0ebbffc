// Power-of-two block quantization (NUMERICS.md section 2): exponent rule, ties, zeros, limbs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  quantizeRows, quantizeCols, quantize2Rows, quantize2Cols, dequantizeRows, dequantizeCols,
  scaleExponent, QuantizationError, E_FLOOR,
} from '../../static/js/numerics/index.js';
import { fromBits, randomFloat32, testRng } from './helpers.mjs';

const row = (...v) => new Float32Array(v);

test('exponent: amax * 2^-e lands in [63.75, 127.5), bumped at mantissa 0x7F0000', () => {
  assert.equal(scaleExponent(1), -6); // 1 * 2^6 = 64
  assert.equal(scaleExponent(127), 0);
  assert.equal(scaleExponent(fromBits(0x42feffff)), 0); // 127.49999 -> q = 127
  assert.equal(scaleExponent(127.5), 1); // mantissa 0x7F0000: bumped, 127.5 / 2 = 63.75
  assert.equal(scaleExponent(fromBits(0x3fff0000)), -5);
  assert.equal(scaleExponent(fromBits(0x3ffeffff)), -6);
  const rng = testRng(3);
  for (let i = 0; i < 10000; i++) {
    const amax = fromBits(rng.int(0x0d800000, 0x71000000)); // 2^-100 .. 2^99
    const scaled = amax * 2 ** -scaleExponent(amax);
    assert.ok(scaled >= 63.75 && scaled < 127.5, `${amax} -> ${scaled}`);
  }
});

test('quantization rounds ties to even', () => {
  // amax 127 gives e = 0, so q = rint(x) exactly.
  const { q, e } = quantizeRows(row(127, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5), 1, 8);
  assert.deepEqual([...e], [0]);
  assert.deepEqual([...q], [127, 0, 2, 2, 0, -2, -2, 126]);
  // the same ties one binade down: amax 63.5 (e = -1) doubles everything: 0.25 -> 0.5 -> 0
  const r = quantizeRows(row(63.5, 0.25, 0.75, 1.25, -0.25, -0.75), 1, 6);
  assert.deepEqual([...r.e], [-1]);
  assert.deepEqual([...r.q], [127, 0, 2, 2, 0, -2]);
});

test('no value rounds to 128 and the primary limb needs no clamp', () => {
  const x = row(fromBits(0x42feffff), -fromBits(0x42feffff), 127.5, -127.5);
  const a = quantizeRows(x.subarray(0, 2), 1, 2);
  assert.deepEqual([...a.q], [127, -127]);
  const b = quantizeRows(x.subarray(2), 1, 2);
  assert.deepEqual([...b.e], [1]);
  assert.deepEqual([...b.q], [64, -64]); // 63.75 -> 64
});

test('-0 inputs and tiny negatives give q = 0 that dequantizes to +0', () => {
  const { q, e } = quantizeRows(row(-0, -1e-9, 1, -0.001), 1, 4);
  const back = dequantizeRows(q, e, 1, 4);
  assert.ok(Object.is(back[0], 0) && Object.is(back[1], 0) && Object.is(back[3], 0));
});

test('blocks below 2^E_FLOOR quantize to zero with e = 0; other blocks are unaffected', () => {
  const tiny = 2 ** (E_FLOOR - 1);
  const { q, e } = quantizeRows(row(tiny, -tiny, 0, 0, 3, 1), 2, 3);
  assert.deepEqual([...e], [0, -5]);
  assert.deepEqual([...q.subarray(0, 3)], [0, 0, 0]);
  const zeros = quantize2Cols(new Float32Array(6), 2, 3);
  assert.deepEqual([...zeros.e, ...zeros.hi, ...zeros.lo], new Array(15).fill(0));
});

test('non-finite values and exploding magnitudes are refused', () => {
  assert.throws(() => quantizeRows(row(1, NaN), 1, 2), QuantizationError);
  assert.throws(() => quantizeRows(row(NaN, 1), 1, 2), QuantizationError);
  assert.throws(() => quantizeCols(row(1, Infinity), 2, 1), QuantizationError);
  assert.throws(() => quantizeCols(row(NaN, 1), 2, 1), QuantizationError);
  assert.throws(() => quantize2Rows(row(2 ** 100), 1, 1), /diverged/);
  assert.doesNotThrow(() => quantizeRows(row(fromBits(0x717fffff)), 1, 1)); // just below 2^100
});

test('rows and columns agree through a transpose', () => {
  const rng = testRng(5);
  const R = 9;
  const C = 14;
  const x = randomFloat32(rng, R * C, 3);
  const xt = new Float32Array(R * C);
  for (let r = 0; r < R; r++) for (let c = 0; c < C; c++) xt[c * R + r] = x[r * C + c];
  const byRow = quantize2Rows(x, R, C);
  const byCol = quantize2Cols(xt, C, R);
  assert.deepEqual([...byCol.e], [...byRow.e]);
  for (let r = 0; r < R; r++) {
    for (let c = 0; c < C; c++) {
      assert.equal(byCol.hi[c * R + r], byRow.hi[r * C + c]);
      assert.equal(byCol.lo[c * R + r], byRow.lo[r * C + c]);
    }
  }
});

test('single limb: |x - q 2^e| <= 2^(e-1); dequantize is exact', () => {
  const rng = testRng(6);
  const x = randomFloat32(rng, 40 * 30, 1e-3);
  const { q, e } = quantizeCols(x, 40, 30);
  const back = dequantizeCols(q, e, 40, 30);
  for (let i = 0; i < x.length; i++) {
    const c = i % 30;
    assert.equal(back[i], q[i] * 2 ** e[c]);
    assert.ok(Math.abs(x[i] - back[i]) <= 2 ** (e[c] - 1));
  }
});

test('two limbs reconstruct within half a low step (one step when the low limb clamps)', () => {
  const rng = testRng(7);
  const x = randomFloat32(rng, 64 * 33, 0.02);
  const { hi, lo, e } = quantize2Rows(x, 64, 33);
  for (let i = 0; i < x.length; i++) {
    const s = e[Math.floor(i / 33)];
    const approx = (256 * hi[i] + lo[i]) * 2 ** (s - 8);
    const bound = Math.abs(lo[i]) === 127 ? 2 ** (s - 8) : 2 ** (s - 9);
    assert.ok(Math.abs(x[i] - approx) <= bound, `element ${i}`);
  }
});

test('the low limb clamps at +-127 on an exact tie of the high limb', () => {
  // amax 127 (e = 0); x = 0.5 is a tie: hi = 0, r = 0.5, lo = rint(0.5 * 256) = 128 -> 127
  const { hi, lo } = quantize2Rows(row(127, 0.5, -0.5, 1.5), 1, 4);
  assert.deepEqual([...hi], [127, 0, 0, 2]);
  assert.deepEqual([...lo], [0, 127, -127, -127]);
});

test('batched column quantization keeps one exponent per (batch, column)', () => {
  const x = row(1, 100, 2, 50, /* batch 2 */ 1000, 0.5, -3000, 0.25);
  const { e } = quantizeCols(x, 2, 2, {}, 2);
  assert.deepEqual([...e], [scaleExponent(2), scaleExponent(100), scaleExponent(3000),
    scaleExponent(0.5)]);
});

test('output arrays can be supplied and are reused', () => {
  const q = new Int8Array(4);
  const e = new Int32Array(2);
  const out = quantizeRows(row(1, 2, 3, 4), 2, 2, { q, e });
  assert.equal(out.q, q);
  assert.equal(out.e, e);
  assert.throws(() => quantizeRows(row(1, 2, 3), 2, 2), RangeError);
});
