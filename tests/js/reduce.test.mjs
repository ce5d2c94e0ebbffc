// The pinned reduction tree (NUMERICS.md section 4).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  treeSum, treeSumLast, treeSumRows, sequentialSum, nextPow2,
} from '../../static/js/numerics/index.js';
import { assertBitsEqual, randomFloat32, testRng } from './helpers.mjs';

// The spec's algorithm written out literally, one fround per add.
function literalTree(values) {
  const x = Array.from(values);
  let w = nextPow2(x.length);
  while (x.length < w) x.push(0);
  while (w > 1) {
    w /= 2;
    for (let i = 0; i < w; i++) x[i] = Math.fround(x[i] + x[i + w]);
  }
  return x[0];
}

test('the order is the halving tree, not left to right', () => {
  const x = new Float32Array([1, 2 ** 24, 1, -(2 ** 24), 3]);
  assert.equal(treeSum(x), 5); // (1 + 3) + 1 + (2^24 - 2^24); the reference gives 5 too
  assert.equal(sequentialSum(x), 3); // 1 + 2^24 rounds the 1 away
});

test('padding adds +0: a lone -0 stays -0, but -0 padded with +0 becomes +0', () => {
  assert.ok(Object.is(treeSum(new Float32Array([-0])), -0));
  assert.ok(Object.is(treeSum(new Float32Array([-0, -0])), -0));
  assert.ok(Object.is(treeSum(new Float32Array([-0, -0, -0])), 0));
  assert.throws(() => treeSum(new Float32Array(0)), RangeError);
  // the same per row and per column: 3 rows of -0 pad to 4, so +0; 2 rows stay -0
  const cols = treeSumRows(new Float32Array(6).fill(-0), 3, 2);
  assert.ok(Object.is(cols[0], 0) && Object.is(cols[1], 0));
  assert.ok(Object.is(treeSumRows(new Float32Array(4).fill(-0), 2, 2)[1], -0));
  assert.ok(Object.is(treeSumLast(new Float32Array(6).fill(-0), 2, 3)[1], 0));
});

test('every length up to 70 matches the literal algorithm bit for bit', () => {
  const rng = testRng(31);
  for (let n = 1; n <= 70; n++) {
    const x = randomFloat32(rng, n, 1);
    for (let i = 0; i < n; i++) x[i] *= 2 ** rng.int(-20, 20);
    assertBitsEqual(new Float32Array([treeSum(x)]), new Float32Array([literalTree(x)]), `n=${n}`);
  }
});

test('per-row and per-column sums equal the 1-D tree on each row / column', () => {
  const rng = testRng(32);
  for (const [R, C] of [[1, 1], [3, 5], [8, 8], [13, 17], [100, 3]]) {
    const x = randomFloat32(rng, R * C, 1);
    for (let i = 0; i < x.length; i++) x[i] *= 2 ** rng.int(-12, 12);
    x[0] = -0;
    const last = treeSumLast(x, R, C);
    const first = treeSumRows(x, R, C);
    for (let r = 0; r < R; r++) {
      const want = literalTree(x.subarray(r * C, (r + 1) * C));
      assertBitsEqual(last.subarray(r, r + 1), new Float32Array([want]), `row ${r}`);
    }
    for (let c = 0; c < C; c++) {
      const col = Float32Array.from({ length: R }, (_, r) => x[r * C + c]);
      assertBitsEqual(first.subarray(c, c + 1), new Float32Array([literalTree(col)]), `col ${c}`);
    }
  }
});

test('sequentialSum adds left to right from +0', () => {
  assert.ok(Object.is(sequentialSum([]), 0));
  assert.ok(Object.is(sequentialSum([-0]), 0));
  assert.equal(sequentialSum([0.1, 0.2, 0.3]), Math.fround(Math.fround(Math.fround(0.1) +
    Math.fround(0.2)) + Math.fround(0.3)));
});
