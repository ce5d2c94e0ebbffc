// SHA-256 in plain JavaScript, written for this project from the standard: FIPS 180-4, "Secure
// Hash Standard", sections 4.1.2 (functions), 4.2.2 (constants), 5.1.1 (padding), 5.3.3 (initial
// value) and 6.2.2 (computation): https://doi.org/10.6028/NIST.FIPS.180-4
//
// Why it exists: Web Crypto's `crypto.subtle` is only defined in a secure context (https://, or
// http://localhost). A page opened over plain http at a LAN address has none, and every weight,
// probe, checkpoint and gate hash (numerics/hash.js, docs/NUMERICS.md section 8) still has to be
// computed there, with the same digests as hashlib. hash.js prefers Web Crypto when it exists
// (native and off the main thread) and falls back to this module otherwise.
// Checked against Python's hashlib on tests/vectors/sha256.json by tests/js/sha256.test.mjs.
//
// API: `sha256(bytes)` -> Uint8Array(32); `new Sha256().update(a).update(b).digest()` hashes a
// concatenation without building it. Inputs are Uint8Arrays, other ArrayBuffer views (their bytes
// as they lie in memory, like `crypto.subtle.digest`) or ArrayBuffers.
//
// Speed, Node 20.20 on a shared 2-core AMD EPYC VM (noisy), 16 and 64 MiB buffers, best of 3 to
// 15 runs: about 150 MB/s (115-165 across runs), against 0.45-1.1 GB/s for Node's native
// `crypto.subtle.digest` on the same buffers. The `tiny` preset's state hash (params, m and v:
// 2.8 MB) takes about 20 ms (70 ms the first time, before V8 has optimized this code).
// tests/js/sha256.test.mjs prints both figures (its "speed" test).
// How: all arithmetic is int32 (`| 0` after additions, `>>>` inside rotations) so V8 keeps every
// value in a register as a small integer; the 64-word message schedule is one preallocated
// Int32Array shared by all hashers (JavaScript is single-threaded and compress never yields);
// whole 64-byte blocks are read straight from the caller's view, and only a partial block at the
// edge of an update is copied into the hasher's 64-byte buffer. Unrolling the rounds by eight or
// computing the schedule inside the rounds measured no faster in Node 20, so the loops stay plain.

// Round constants K (section 4.2.2): the first 32 bits of the fractional parts of the cube roots
// of the first 64 primes. Stored as int32 (the same bits).
const K = Int32Array.of(
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
);

// Initial hash value H(0) (section 5.3.3): the first 32 bits of the fractional parts of the square
// roots of the first 8 primes.
const IV = Int32Array.of(
  0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
);

// The message schedule W0..W63 (section 6.2.2 step 1), shared: see the header.
const W = new Int32Array(64);

/**
 * Runs the compression function over the 64-byte blocks bytes[pos, end) (end - pos a multiple
 * of 64), updating `state` (8 int32 words) in place. One call per update rather than per block,
 * so the eight working words stay in locals across blocks.
 */
function compress(state, bytes, pos, end) {
  let h0 = state[0], h1 = state[1], h2 = state[2], h3 = state[3];
  let h4 = state[4], h5 = state[5], h6 = state[6], h7 = state[7];
  const w = W;
  for (; pos < end; pos += 64) {
    // Step 1: the first 16 words are the block read big-endian; the other 48 are expanded with
    // sigma0(x) = ROTR7 ^ ROTR18 ^ SHR3 and sigma1(x) = ROTR17 ^ ROTR19 ^ SHR10 (4.1.2).
    for (let t = 0, j = pos; t < 16; t++, j += 4) {
      w[t] = (bytes[j] << 24) | (bytes[j + 1] << 16) | (bytes[j + 2] << 8) | bytes[j + 3];
    }
    for (let t = 16; t < 64; t++) {
      const x = w[t - 15];
      const y = w[t - 2];
      const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      w[t] = (s1 + w[t - 7] + s0 + w[t - 16]) | 0;
    }
    // Steps 2-3: 64 rounds. A sum of five int32 values is below 2^53, so it is exact as a double
    // and `| 0` reduces it modulo 2^32 exactly as the standard's addition does.
    let a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7;
    for (let t = 0; t < 64; t++) {
      const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = g ^ (e & (f ^ g)); // Ch(e, f, g) = (e & f) ^ (~e & g), one operation fewer
      const t1 = (h + S1 + ch + K[t] + w[t]) | 0;
      const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) | (c & (a | b)); // Maj(a, b, c) = (a & b) ^ (a & c) ^ (b & c)
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + S0 + maj) | 0;
    }
    // Step 4: the intermediate hash value.
    h0 = (h0 + a) | 0;
    h1 = (h1 + b) | 0;
    h2 = (h2 + c) | 0;
    h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0;
    h5 = (h5 + f) | 0;
    h6 = (h6 + g) | 0;
    h7 = (h7 + h) | 0;
  }
  state[0] = h0; state[1] = h1; state[2] = h2; state[3] = h3;
  state[4] = h4; state[5] = h5; state[6] = h6; state[7] = h7;
}

/** The bytes of a BufferSource (what `crypto.subtle.digest` accepts), as a view: never a copy. */
function asBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (typeof SharedArrayBuffer !== 'undefined' && data instanceof SharedArrayBuffer) return new Uint8Array(data);
  throw new TypeError(`SHA-256 input must be an ArrayBuffer or an ArrayBuffer view, not ${
    data === null ? 'null' : typeof data}`);
}

/** Incremental SHA-256: `update` any number of times, then `digest` once. */
export class Sha256 {
  constructor() {
    this._state = Int32Array.from(IV);
    this._block = new Uint8Array(64); // the bytes of a block not yet complete
    this._fill = 0; // how many of them are valid
    this._length = 0; // message length in bytes (a double: exact up to 2^53)
    this._digest = null; // set by digest(); the hasher is finished
  }

  /** Appends `data` (Uint8Array, other view, or ArrayBuffer) to the message. Returns this. */
  update(data) {
    if (this._digest !== null) throw new Error('Sha256: update() after digest()');
    const bytes = asBytes(data);
    const n = bytes.length;
    let pos = 0;
    this._length += n;
    if (this._fill > 0) {
      // Complete the pending block first; it is the only data ever copied.
      const take = Math.min(64 - this._fill, n);
      this._block.set(bytes.subarray(0, take), this._fill);
      this._fill += take;
      pos = take;
      if (this._fill < 64) return this;
      compress(this._state, this._block, 0, 64);
      this._fill = 0;
    }
    const whole = n - ((n - pos) % 64); // end of the last whole block of the rest
    if (whole > pos) compress(this._state, bytes, pos, whole);
    if (whole < n) {
      this._block.set(bytes.subarray(whole), 0);
      this._fill = n - whole;
    }
    return this;
  }

  /** The 32-byte digest of everything passed to update (section 5.1.1 padding, then 6.2.2). */
  digest() {
    if (this._digest === null) {
      const block = this._block;
      let fill = this._fill;
      block[fill++] = 0x80; // the single 1 bit after the message
      if (fill > 56) {
        // No room for the 8-byte length in this block: pad it out and start another.
        block.fill(0, fill);
        compress(this._state, block, 0, 64);
        fill = 0;
      }
      block.fill(0, fill, 56);
      // The message length in bits as a 64-bit big-endian integer. length * 8 can pass 2^32,
      // so the high word is taken from the byte count directly (exact: length < 2^53).
      const hi = Math.floor(this._length / 0x20000000);
      const lo = (this._length % 0x20000000) * 8;
      block[56] = hi >>> 24; block[57] = hi >>> 16; block[58] = hi >>> 8; block[59] = hi;
      block[60] = lo >>> 24; block[61] = lo >>> 16; block[62] = lo >>> 8; block[63] = lo;
      compress(this._state, block, 0, 64);
      const out = new Uint8Array(32);
      for (let i = 0; i < 8; i++) {
        const v = this._state[i];
        out[4 * i] = v >>> 24;
        out[4 * i + 1] = v >>> 16;
        out[4 * i + 2] = v >>> 8;
        out[4 * i + 3] = v;
      }
      this._digest = out;
    }
    return this._digest.slice(); // a copy: the caller may modify what it gets
  }
}

/** SHA-256 of `bytes` (Uint8Array, other view, or ArrayBuffer) as a 32-byte Uint8Array. */
export function sha256(bytes) {
  return new Sha256().update(bytes).digest();
}
