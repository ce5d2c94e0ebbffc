// @ts-check
// SHA-512 in plain JavaScript, written for this project from the standard: FIPS 180-4, "Secure
// Hash Standard", sections 4.1.3 (functions), 4.2.3 (constants), 5.1.2 (padding), 5.3.5
// (initial value) and 6.4.2 (computation): https://doi.org/10.6028/NIST.FIPS.180-4
//
// Why it exists: Ed25519 (numerics/ed25519.js, RFC 8032) hashes with SHA-512, and the page needs
// Ed25519 where Web Crypto is missing (a plain-http LAN page is not a secure context). Checked
// against Python's hashlib by tests/js/ed25519.test.mjs (tests/vectors/audit/sha512.json).
//
// How: a 64-bit word is a pair of uint32 halves (high, low). A sum of up to five words adds the
// low halves as doubles (below 2^35: exact), carries floor(sum / 2^32) into the high halves and
// reduces both with `>>> 0`. No BigInt: it is several times slower for this. Statements are at
// most a few KiB, so plain loops are enough.

// Round constants K (section 4.2.3): the first 64 bits of the fractional parts of the cube roots
// of the first 80 primes, as (high, low) pairs.
const K = Uint32Array.of(
  0x428a2f98, 0xd728ae22, 0x71374491, 0x23ef65cd, 0xb5c0fbcf, 0xec4d3b2f, 0xe9b5dba5, 0x8189dbbc,
  0x3956c25b, 0xf348b538, 0x59f111f1, 0xb605d019, 0x923f82a4, 0xaf194f9b, 0xab1c5ed5, 0xda6d8118,
  0xd807aa98, 0xa3030242, 0x12835b01, 0x45706fbe, 0x243185be, 0x4ee4b28c, 0x550c7dc3, 0xd5ffb4e2,
  0x72be5d74, 0xf27b896f, 0x80deb1fe, 0x3b1696b1, 0x9bdc06a7, 0x25c71235, 0xc19bf174, 0xcf692694,
  0xe49b69c1, 0x9ef14ad2, 0xefbe4786, 0x384f25e3, 0x0fc19dc6, 0x8b8cd5b5, 0x240ca1cc, 0x77ac9c65,
  0x2de92c6f, 0x592b0275, 0x4a7484aa, 0x6ea6e483, 0x5cb0a9dc, 0xbd41fbd4, 0x76f988da, 0x831153b5,
  0x983e5152, 0xee66dfab, 0xa831c66d, 0x2db43210, 0xb00327c8, 0x98fb213f, 0xbf597fc7, 0xbeef0ee4,
  0xc6e00bf3, 0x3da88fc2, 0xd5a79147, 0x930aa725, 0x06ca6351, 0xe003826f, 0x14292967, 0x0a0e6e70,
  0x27b70a85, 0x46d22ffc, 0x2e1b2138, 0x5c26c926, 0x4d2c6dfc, 0x5ac42aed, 0x53380d13, 0x9d95b3df,
  0x650a7354, 0x8baf63de, 0x766a0abb, 0x3c77b2a8, 0x81c2c92e, 0x47edaee6, 0x92722c85, 0x1482353b,
  0xa2bfe8a1, 0x4cf10364, 0xa81a664b, 0xbc423001, 0xc24b8b70, 0xd0f89791, 0xc76c51a3, 0x0654be30,
  0xd192e819, 0xd6ef5218, 0xd6990624, 0x5565a910, 0xf40e3585, 0x5771202a, 0x106aa070, 0x32bbd1b8,
  0x19a4c116, 0xb8d2d0c8, 0x1e376c08, 0x5141ab53, 0x2748774c, 0xdf8eeb99, 0x34b0bcb5, 0xe19b48a8,
  0x391c0cb3, 0xc5c95a63, 0x4ed8aa4a, 0xe3418acb, 0x5b9cca4f, 0x7763e373, 0x682e6ff3, 0xd6b2b8a3,
  0x748f82ee, 0x5defb2fc, 0x78a5636f, 0x43172f60, 0x84c87814, 0xa1f0ab72, 0x8cc70208, 0x1a6439ec,
  0x90befffa, 0x23631e28, 0xa4506ceb, 0xde82bde9, 0xbef9a3f7, 0xb2c67915, 0xc67178f2, 0xe372532b,
  0xca273ece, 0xea26619c, 0xd186b8c7, 0x21c0c207, 0xeada7dd6, 0xcde0eb1e, 0xf57d4f7f, 0xee6ed178,
  0x06f067aa, 0x72176fba, 0x0a637dc5, 0xa2c898a6, 0x113f9804, 0xbef90dae, 0x1b710b35, 0x131c471b,
  0x28db77f5, 0x23047d84, 0x32caab7b, 0x40c72493, 0x3c9ebe0a, 0x15c9bebc, 0x431d67c4, 0x9c100d4c,
  0x4cc5d4be, 0xcb3e42b6, 0x597f299c, 0xfc657e2a, 0x5fcb6fab, 0x3ad6faec, 0x6c44198c, 0x4a475817,
);

// Initial hash value H(0) (section 5.3.5): the first 64 bits of the fractional parts of the
// square roots of the first 8 primes, as (high, low) pairs.
const IV = Uint32Array.of(
  0x6a09e667, 0xf3bcc908, 0xbb67ae85, 0x84caa73b, 0x3c6ef372, 0xfe94f82b, 0xa54ff53a, 0x5f1d36f1,
  0x510e527f, 0xade682d1, 0x9b05688c, 0x2b3e6c1f, 0x1f83d9ab, 0xfb41bd6b, 0x5be0cd19, 0x137e2179,
);

const TWO32 = 0x100000000;

/**
 * The compression function over every 128-byte block of `bytes` (its length a multiple of 128),
 * updating `h` (8 words as 16 uint32 halves) in place.
 * @param {Uint32Array} h
 * @param {Uint8Array} bytes
 */
function compress(h, bytes) {
  const w = new Uint32Array(160); // W0..W79 as (high, low) pairs
  const v = new Uint32Array(16); // the working variables a..h
  for (let pos = 0; pos < bytes.length; pos += 128) {
    // Step 1: the first 16 words are the block read big-endian; the other 64 are expanded with
    // sigma0(x) = ROTR1 ^ ROTR8 ^ SHR7 and sigma1(x) = ROTR19 ^ ROTR61 ^ SHR6 (4.1.3).
    for (let t = 0; t < 32; t++) {
      const j = pos + 4 * t;
      w[t] = ((bytes[j] << 24) | (bytes[j + 1] << 16) | (bytes[j + 2] << 8) | bytes[j + 3]) >>> 0;
    }
    for (let t = 16; t < 80; t++) {
      const xh = w[2 * (t - 15)], xl = w[2 * (t - 15) + 1];
      const yh = w[2 * (t - 2)], yl = w[2 * (t - 2) + 1];
      // sigma0: ROTR1, ROTR8, SHR7
      const s0h = ((xh >>> 1) | (xl << 31)) ^ ((xh >>> 8) | (xl << 24)) ^ (xh >>> 7);
      const s0l = ((xl >>> 1) | (xh << 31)) ^ ((xl >>> 8) | (xh << 24)) ^ ((xl >>> 7) | (xh << 25));
      // sigma1: ROTR19, ROTR61 (= ROTR29 of the swapped halves), SHR6
      const s1h = ((yh >>> 19) | (yl << 13)) ^ ((yl >>> 29) | (yh << 3)) ^ (yh >>> 6);
      const s1l = ((yl >>> 19) | (yh << 13)) ^ ((yh >>> 29) | (yl << 3)) ^ ((yl >>> 6) | (yh << 26));
      const lo = (s1l >>> 0) + w[2 * (t - 7) + 1] + (s0l >>> 0) + w[2 * (t - 16) + 1];
      const hi = (s1h >>> 0) + w[2 * (t - 7)] + (s0h >>> 0) + w[2 * (t - 16)] + Math.floor(lo / TWO32);
      w[2 * t] = hi >>> 0;
      w[2 * t + 1] = lo >>> 0;
    }
    // Steps 2-3: 80 rounds over a..h (v[0..15]).
    v.set(h);
    for (let t = 0; t < 80; t++) {
      const ah = v[0], al = v[1], bh = v[2], bl = v[3], ch = v[4], cl = v[5];
      const eh = v[8], el = v[9], fh = v[10], fl = v[11], gh = v[12], gl = v[13];
      // Sigma1(e) = ROTR14 ^ ROTR18 ^ ROTR41 (= ROTR9 of the swapped halves)
      const S1h = ((eh >>> 14) | (el << 18)) ^ ((eh >>> 18) | (el << 14)) ^ ((el >>> 9) | (eh << 23));
      const S1l = ((el >>> 14) | (eh << 18)) ^ ((el >>> 18) | (eh << 14)) ^ ((eh >>> 9) | (el << 23));
      const chh = gh ^ (eh & (fh ^ gh)); // Ch(e, f, g) = (e & f) ^ (~e & g)
      const chl = gl ^ (el & (fl ^ gl));
      const t1l = v[15] + (S1l >>> 0) + (chl >>> 0) + K[2 * t + 1] + w[2 * t + 1];
      const t1h = v[14] + (S1h >>> 0) + (chh >>> 0) + K[2 * t] + w[2 * t] + Math.floor(t1l / TWO32);
      // Sigma0(a) = ROTR28 ^ ROTR34 (= ROTR2 swapped) ^ ROTR39 (= ROTR7 swapped)
      const S0h = ((ah >>> 28) | (al << 4)) ^ ((al >>> 2) | (ah << 30)) ^ ((al >>> 7) | (ah << 25));
      const S0l = ((al >>> 28) | (ah << 4)) ^ ((ah >>> 2) | (al << 30)) ^ ((ah >>> 7) | (al << 25));
      const majh = (ah & bh) | (ch & (ah | bh)); // Maj(a, b, c) = (a & b) ^ (a & c) ^ (b & c)
      const majl = (al & bl) | (cl & (al | bl));
      const t2l = (S0l >>> 0) + (majl >>> 0);
      const t2h = (S0h >>> 0) + (majh >>> 0) + Math.floor(t2l / TWO32);
      // h = g, g = f, f = e, e = d + T1, d = c, c = b, b = a, a = T1 + T2
      v.copyWithin(2, 0, 14);
      const el2 = v[9] + (t1l >>> 0); // v[8..9] now holds the old d
      v[8] = (v[8] + (t1h >>> 0) + Math.floor(el2 / TWO32)) >>> 0;
      v[9] = el2 >>> 0;
      const al2 = (t1l >>> 0) + (t2l >>> 0);
      v[0] = ((t1h >>> 0) + (t2h >>> 0) + Math.floor(al2 / TWO32)) >>> 0;
      v[1] = al2 >>> 0;
    }
    // Step 4: the intermediate hash value.
    for (let i = 0; i < 16; i += 2) {
      const lo = h[i + 1] + v[i + 1];
      h[i] = (h[i] + v[i] + Math.floor(lo / TWO32)) >>> 0;
      h[i + 1] = lo >>> 0;
    }
  }
}

/**
 * SHA-512 of the concatenation of `parts` as a 64-byte Uint8Array.
 * @param {...Uint8Array} parts
 * @returns {Uint8Array}
 */
export function sha512(...parts) {
  let n = 0;
  for (const p of parts) n += p.length;
  // Section 5.1.2: the message, a 1 bit, zeros, and the length in bits as a 128-bit big-endian
  // integer, to a multiple of 1024 bits.
  const padded = new Uint8Array(Math.ceil((n + 17) / 128) * 128);
  let o = 0;
  for (const p of parts) {
    padded.set(p, o);
    o += p.length;
  }
  padded[n] = 0x80;
  const bits = n * 8; // below 2^53: a statement is a few KiB
  const end = padded.length;
  padded[end - 5] = Math.floor(bits / TWO32) & 0xff; // bits 32..39 (n < 2^37 bytes)
  padded[end - 4] = (bits >>> 24) & 0xff;
  padded[end - 3] = (bits >>> 16) & 0xff;
  padded[end - 2] = (bits >>> 8) & 0xff;
  padded[end - 1] = bits & 0xff;
  const h = Uint32Array.from(IV);
  compress(h, padded);
  const out = new Uint8Array(64);
  for (let i = 0; i < 16; i++) {
    out[4 * i] = h[i] >>> 24;
    out[4 * i + 1] = h[i] >>> 16;
    out[4 * i + 2] = h[i] >>> 8;
    out[4 * i + 3] = h[i];
  }
  return out;
}
