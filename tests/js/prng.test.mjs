// The counter-based PRNG (NUMERICS.md section 7): known answers from the Python reference.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { key, bits, bitsAt, uniform, below, mix32 } from '../../static/js/numerics/index.js';
import { bitsOf } from './helpers.mjs';

test('mix32 is murmur3 fmix32', () => {
  assert.equal(mix32(0), 0);
  assert.equal(mix32(1), 0x514e28b7);
  assert.equal(mix32(0xffffffff), 0x81f16f39);
});

test('keys match the reference', () => {
  assert.equal(key(0), 0x09f45f69);
  assert.equal(key(42, 0, 3), 0x835c8f98);
  assert.equal(key(123, 1, 5, 2), 0xdd2ee264);
  assert.throws(() => key(-1), RangeError);
  assert.throws(() => key(2 ** 32), RangeError);
  assert.throws(() => key(1, 1.5), RangeError);
});

test('bits, uniform and below match the reference', () => {
  const k = key(42, 0, 3);
  assert.deepEqual([...bits(k, 4)], [0x21fa1291, 0x958f7a50, 0xc6e09202, 0x667990a2]);
  assert.deepEqual([...uniform(k, 3)].map(bitsOf), [1040705608, 1058377594, 1061609618]);
  assert.deepEqual([...below(k, 4, 10)], [1, 4, 0, 4]);
  assert.equal(bitsAt(k, 2), 0xc6e09202);
  // counters wrap mod 2^32, and a start offset addresses any element directly
  const last = 2 ** 32 - 1;
  assert.deepEqual([...bits(k, 3, last)], [bitsAt(k, last), bitsAt(k, 0), bitsAt(k, 1)]);
  assert.deepEqual([...bits(k, 2, 2)], [0xc6e09202, 0x667990a2]);
});

test('uniform values are exact multiples of 2^-24 in [0, 1)', () => {
  const u = uniform(key(7), 10000);
  for (const v of u) {
    assert.ok(v >= 0 && v < 1);
    assert.equal(v * 2 ** 24, Math.floor(v * 2 ** 24));
  }
  const b = below(key(7), 1000, 2 ** 32);
  assert.deepEqual([...b], [...bits(key(7), 1000)]);
  assert.throws(() => below(key(7), 1, 0), RangeError);
});
