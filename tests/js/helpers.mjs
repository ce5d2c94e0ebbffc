// Shared helpers for the JS mirror's tests (not a test file itself).
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const F = new Float32Array(1);
const U = new Uint32Array(F.buffer);
/** uint32 bit pattern of a float32 value. */
export function bitsOf(x) {
  F[0] = x;
  return U[0];
}
export function fromBits(b) {
  U[0] = b;
  return F[0];
}

/** Asserts two typed arrays are equal bit for bit (floats compared as bit patterns). */
export function assertBitsEqual(actual, expected, what = 'arrays') {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const view = (a) =>
    a instanceof Float32Array ? new Uint32Array(a.buffer, a.byteOffset, a.length) : a;
  const A = view(actual);
  const E = view(expected);
  for (let i = 0; i < A.length; i++) {
    if (A[i] !== E[i]) {
      assert.fail(`${what}: first difference at index ${i}: got ${actual[i]} (bits ${A[i]}), ` +
        `expected ${expected[i]} (bits ${E[i]})`);
    }
  }
}

/** A small deterministic generator for test inputs (xorshift32; independent of prng.js). */
export function testRng(seed) {
  let s = seed >>> 0 || 1;
  const next = () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s;
  };
  return {
    u32: next,
    int: (lo, hi) => lo + (next() % (hi - lo + 1)), // inclusive
    uniform: () => next() / 4294967296,
    normal() {
      const u = (next() + 1) / 4294967297;
      const v = next() / 4294967296;
      return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v); // test data only
    },
  };
}

export function randomInt8(rng, n, lo = -127, hi = 127) {
  const a = new Int8Array(n);
  for (let i = 0; i < n; i++) a[i] = rng.int(lo, hi);
  return a;
}

export function randomFloat32(rng, n, scale = 1) {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = rng.normal() * scale;
  return a;
}

/** Units in the last place between two finite float32 values of the same sign. */
export function ulpDistance(a, b) {
  const ia = bitsOf(a) | 0;
  const ib = bitsOf(b) | 0;
  const ka = ia < 0 ? -(ia & 0x7fffffff) : ia;
  const kb = ib < 0 ? -(ib & 0x7fffffff) : ib;
  return Math.abs(ka - kb);
}
