// The contract's counter-based 32-bit PRNG (docs/NUMERICS.md section 7).
//
// Mirrors server/daisychain/numerics/prng.py. All arithmetic is mod 2^32: Math.imul for the
// multiplies, `>>> 0` to read results as unsigned.
//
//   mix32(x)       murmur3 fmix32
//   key(seed, ids) k = mix32(seed ^ 0x6A09E667); for id: k = mix32(k ^ mix32(id + 0x9E3779B9))
//   bits(k, i)     mix32(mix32(i ^ k) + 0x9E3779B9)
//   uniform(k, i)  (bits(k, i) >>> 8) * 2^-24, an exact float32 in [0, 1)
//   below(k, i, n) bits(k, i) mod n

export const GOLDEN = 0x9e3779b9;
export const KEY_SALT = 0x6a09e667;
const TWO_POW_MINUS_24 = 1 / 16777216;

/** murmur3's 32-bit finalizer; returns an unsigned 32-bit integer. */
export function mix32(x) {
  x = x >>> 0;
  x ^= x >>> 16;
  x = Math.imul(x, 0x85ebca6b);
  x ^= x >>> 13;
  x = Math.imul(x, 0xc2b2ae35);
  x ^= x >>> 16;
  return x >>> 0;
}

function checkU32(v, what) {
  if (!(Number.isInteger(v) && v >= 0 && v < 4294967296)) {
    throw new RangeError(`${what} must be an integer in [0, 2^32), got ${v}`);
  }
}

/** Stream key for (seed, ...ids): every purpose draws from its own stream. */
export function key(seed, ...ids) {
  checkU32(seed, 'seed');
  let k = mix32(seed ^ KEY_SALT);
  for (const id of ids) {
    checkU32(id, 'stream id');
    k = mix32(k ^ mix32(id + GOLDEN));
  }
  return k;
}

/** The 32-bit value of stream `k` at counter `i` (i taken mod 2^32). */
export function bitsAt(k, i) {
  return mix32(mix32((i ^ k) >>> 0) + GOLDEN);
}

/** `n` values of stream `k` for counters start .. start + n - 1, as a Uint32Array. */
export function bits(k, n, start = 0, out = new Uint32Array(n)) {
  for (let t = 0; t < n; t++) out[t] = bitsAt(k, (start + t) % 4294967296);
  return out;
}

/** `n` float32 values in [0, 1) with 24 random bits each (exact), as a Float32Array. */
export function uniform(k, n, start = 0, out = new Float32Array(n)) {
  for (let t = 0; t < n; t++) {
    out[t] = (bitsAt(k, (start + t) % 4294967296) >>> 8) * TWO_POW_MINUS_24;
  }
  return out;
}

/** `n` integers in [0, bound) as bits mod bound (bias below bound / 2^32), as a Float64Array. */
export function below(k, n, bound, start = 0, out = new Float64Array(n)) {
  if (!(Number.isInteger(bound) && bound > 0 && bound <= 4294967296)) {
    throw new RangeError(`bound must be an integer in (0, 2^32], got ${bound}`);
  }
  for (let t = 0; t < n; t++) out[t] = bitsAt(k, (start + t) % 4294967296) % bound;
  return out;
}
