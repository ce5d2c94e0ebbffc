// The weight hash (NUMERICS.md section 8): SHA-256 over little-endian bytes, in order.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { sha256Arrays, sha256Hex } from '../../static/js/numerics/index.js';

test('SHA-256 known answers', async () => {
  assert.equal(await sha256Hex(new Uint8Array(0)),
    'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
  assert.equal(await sha256Hex(new TextEncoder().encode('abc')),
    'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  assert.equal(await sha256Arrays([]),
    'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855');
});

test('float32 arrays hash like the reference (hashlib over numpy bytes)', async () => {
  // daisychain.numerics.sha256_arrays([np.float32([1, -0.0, 2.5]), np.float32([[3, 4]])])
  const want = 'a7dc1c60dcfa81d8d3c4265a545c1f77b6f8caf96a84b3161d78f4e2e261544b';
  const f = (...v) => new Float32Array(v);
  assert.equal(await sha256Arrays([f(1, -0, 2.5), f(3, 4)]), want);
  // subarrays hash only their own bytes; -0 and +0 differ; the order matters
  const big = new Float32Array([9, 1, -0, 2.5, 3, 4, 9]);
  assert.equal(await sha256Arrays([big.subarray(1, 4), big.subarray(4, 6)]), want);
  assert.notEqual(await sha256Arrays([f(1, 0, 2.5), f(3, 4)]), want);
  assert.notEqual(await sha256Arrays([f(3, 4), f(1, -0, 2.5)]), want);
});
