// exp, log, rint and the float32 bit helpers against known answers and bounds (NUMERICS.md s5).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exp, log, rint, pow2, pow2d, f32Bits, expArray } from '../../static/js/numerics/index.js';
import { bitsOf, fromBits, testRng, ulpDistance } from './helpers.mjs';

test('rint rounds ties to even (Math.round would not)', () => {
  const cases = [
    [0.5, 0], [1.5, 2], [2.5, 2], [3.5, 4], [-0.5, -0], [-1.5, -2], [-2.5, -2], [126.5, 126],
    [127.5, 128], [-127.5, -128], [0.49999997, 0], [2.5000002, 3], [1e15 + 0.5, 1e15],
    [4503599627370497, 4503599627370497],
  ];
  for (const [x, want] of cases) assert.ok(Object.is(rint(x), want), `rint(${x}) = ${rint(x)}`);
});

test('rint keeps numpy signs: -0 for small negatives and -0, NaN passes through', () => {
  assert.ok(Object.is(rint(-0.3), -0));
  assert.ok(Object.is(rint(-0), -0));
  assert.ok(Object.is(rint(0.3), 0));
  assert.ok(Number.isNaN(rint(NaN)));
  assert.equal(rint(-Infinity), -Infinity);
});

test('pow2 builds exact powers of two from bits and refuses the subnormal range', () => {
  assert.equal(f32Bits(pow2(0)), 0x3f800000);
  assert.equal(f32Bits(pow2(-126)), 0x00800000);
  assert.equal(f32Bits(pow2(127)), 0x7f000000);
  assert.throws(() => pow2(-127), RangeError);
  assert.throws(() => pow2(128), RangeError);
  for (let s = -300; s <= 300; s++) assert.equal(pow2d(s), 2 ** s);
});

// Known answers computed by the Python reference (daisychain.numerics.fmath).
test('exp known answers (bit patterns from the reference)', () => {
  const xs = [0, 1, -1, 0.5, 10, -10, 88, -86, 1e-3, 3.3];
  const want = [0x3f800000, 0x402df854, 0x3ebc5ab2, 0x3fd3094c, 0x46ac14ee, 0x383e6bce,
    0x7ef882b7, 0x01739362, 0x3f8020c9, 0x41d8e6ae];
  xs.forEach((x, i) => assert.equal(bitsOf(exp(x)), want[i], `exp(${x})`));
});

test('log known answers (bit patterns from the reference)', () => {
  const xs = [1, 2, 0.5, 10, 1e-30, 3e38, 1.4142135, 0.7071068];
  const want = [0x0, 0x3f317218, 0xbf317218, 0x40135d8e, 0xc28a27b5, 0x42b13196, 0x3eb17217,
    0xbeb17216];
  xs.forEach((x, i) => assert.equal(bitsOf(log(x)), want[i], `log(${x})`));
});

test('exp special values', () => {
  assert.ok(Number.isNaN(exp(NaN)));
  assert.equal(exp(Infinity), Infinity);
  assert.ok(Object.is(exp(-Infinity), 0));
  assert.ok(Object.is(exp(Math.fround(-86.00001)), 0), 'below EXP_LO is +0');
  assert.equal(exp(Math.fround(88.00001)), Infinity, 'above EXP_HI is +inf');
  assert.equal(exp(-0), 1);
  assert.ok(exp(-86) > 0 && bitsOf(exp(-86)) >= 0x00800000, 'exp(-86) is a normal float32');
  assert.ok(Number.isFinite(exp(88)));
});

test('log special values', () => {
  assert.ok(Number.isNaN(log(NaN)));
  assert.ok(Number.isNaN(log(-1)));
  assert.ok(Number.isNaN(log(-Infinity)));
  assert.equal(log(Infinity), Infinity);
  assert.equal(log(0), -Infinity);
  assert.equal(log(-0), -Infinity);
  assert.equal(log(fromBits(1)), -Infinity, 'subnormal input');
  assert.equal(log(fromBits(0x007fffff)), -Infinity, 'largest subnormal');
  assert.ok(Number.isFinite(log(fromBits(0x00800000))), 'smallest normal');
  assert.ok(Object.is(log(1), 0));
});

// Math.exp/Math.log are allowed HERE only, as an outside yardstick: the spec's measured bounds.
test('exp stays within 3 ulp of the correctly rounded value over [-86, 88]', () => {
  const rng = testRng(11);
  let worst = 0;
  for (let i = 0; i < 200000; i++) {
    const x = Math.fround(-86 + 174 * rng.uniform());
    worst = Math.max(worst, ulpDistance(exp(x), Math.fround(Math.exp(x))));
  }
  assert.ok(worst <= 3, `worst ${worst} ulp`);
});

test('log stays within 2 ulp over the positive normal floats', () => {
  const rng = testRng(12);
  let worst = 0;
  for (let i = 0; i < 200000; i++) {
    const x = fromBits(rng.int(0x00800000, 0x7f7fffff));
    worst = Math.max(worst, ulpDistance(log(x), Math.fround(Math.log(x))));
  }
  assert.ok(worst <= 2, `worst ${worst} ulp`);
});

test('expArray equals exp elementwise and rounds to float32', () => {
  const xs = new Float32Array([0.1, -3.7, 42, -85.9]);
  const ys = expArray(xs);
  xs.forEach((x, i) => assert.equal(ys[i], exp(x)));
});
