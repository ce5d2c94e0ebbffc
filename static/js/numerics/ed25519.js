// @ts-check
// Ed25519 (pure, no context) in plain JavaScript with BigInt, written for this project from the
// standard: RFC 8032, "Edwards-Curve Digital Signature Algorithm (EdDSA)", sections 5.1 (the
// curve), 5.1.2-5.1.3 (encoding and decoding), 5.1.4 (point addition), 5.1.5 (keys), 5.1.6
// (sign) and 5.1.7 (verify): https://www.rfc-editor.org/rfc/rfc8032
//
// Why it exists: audit statements are signed (docs/TRUST.md, "Keys and statements") and Web
// Crypto's Ed25519 needs a secure context; a page opened over plain http at a LAN address has
// no `crypto.subtle`. p2p/auditkey.js prefers Web Crypto and falls back to this module.
// Checked on RFC 8032 section 7.1 and against Python's `cryptography` on random keys and
// messages by tests/js/ed25519.test.mjs (tests/vectors/audit/ed25519.json).
//
// Verification is cofactorless and compares encodings, as OpenSSL and BoringSSL (Node's and
// Chromium's Web Crypto) do: it accepts exactly when S < L, A decodes, and encode([S]B - [k]A)
// equals the R bytes. auditkey.js refuses keys outside the prime-order group first, so every
// implementation reaches the same verdict on every signature.
//
// Speed: see docs/TRUST.md ("Signing speed") and tests/js/ed25519.test.mjs ("speed"). How:
// points in extended coordinates (X:Y:Z:T) so no inversion happens before the final encoding;
// [s]B reads a table of j * 16^i * B (64 windows of 16 points, built on first use); [k]A uses
// 4-bit fixed windows. Not constant-time: a page's audit key signs statements that are public
// anyway, and timing is not observable by peers across a data channel at this resolution; the
// secret never leaves the device.

import { sha512 } from './sha512.js';

/** @typedef {[bigint, bigint, bigint, bigint]} Point extended coordinates X, Y, Z, T */

export const P = 2n ** 255n - 19n;
/** The prime order of the base point. */
export const L = 2n ** 252n + 27742317777372353535851937790883648493n;

/** @param {bigint} a */
function mod(a) {
  const r = a % P;
  return r < 0n ? r + P : r;
}

/**
 * a^e mod P by square and multiply.
 * @param {bigint} a
 * @param {bigint} e
 */
function pow(a, e) {
  let result = 1n;
  let base = mod(a);
  while (e > 0n) {
    if (e & 1n) result = (result * base) % P;
    base = (base * base) % P;
    e >>= 1n;
  }
  return result;
}

const D = mod(-121665n * pow(121666n, P - 2n));
const D2 = (2n * D) % P;
const SQRT_M1 = pow(2n, (P - 1n) / 4n);

/** @type {Point} */
const ZERO = [0n, 1n, 1n, 0n];

/**
 * Section 5.1.4: addition on -x^2 + y^2 = 1 + d x^2 y^2 (complete: doubling included).
 * @param {Point} p
 * @param {Point} q
 * @returns {Point}
 */
function add(p, q) {
  const [x1, y1, z1, t1] = p;
  const [x2, y2, z2, t2] = q;
  const a = ((y1 - x1) * (y2 - x2)) % P;
  const b = ((y1 + x1) * (y2 + x2)) % P;
  const c = (t1 * D2 % P) * t2 % P;
  const d = (2n * z1 * z2) % P;
  const e = b - a, f = d - c, g = d + c, h = b + a;
  return [mod(e * f), mod(g * h), mod(f * g), mod(e * h)];
}

/**
 * Section 5.1.4's doubling formulas (fewer multiplications than add(p, p)).
 * @param {Point} p
 * @returns {Point}
 */
function double(p) {
  const [x1, y1, z1] = p;
  const a = (x1 * x1) % P;
  const b = (y1 * y1) % P;
  const c = (2n * z1 * z1) % P;
  const h = a + b;
  const s = (x1 + y1) % P;
  const e = h - s * s;
  const g = a - b;
  const f = c + g;
  return [mod(e * f), mod(g * h), mod(f * g), mod(e * h)];
}

/** @param {Point} p @returns {Point} */
function negate(p) {
  return [mod(-p[0]), p[1], p[2], mod(-p[3])];
}

/**
 * [n] p with 4-bit fixed windows, n >= 0.
 * @param {Point} p
 * @param {bigint} n
 * @returns {Point}
 */
export function multiply(p, n) {
  /** @type {Point[]} */
  const table = [ZERO, p];
  for (let j = 2; j < 16; j++) table.push(add(table[j - 1], p));
  const digits = n.toString(16);
  let r = ZERO;
  for (const ch of digits) {
    r = double(double(double(double(r))));
    const j = parseInt(ch, 16);
    if (j) r = add(r, table[j]);
  }
  return r;
}

/**
 * Section 5.1.3, strictly: null unless y < P, x^2 has a square root, and x = 0 only with a sign
 * bit of 0.
 * @param {Uint8Array} bytes 32 bytes
 * @returns {Point | null}
 */
export function decode(bytes) {
  if (bytes.length !== 32) return null;
  const sign = bytes[31] >> 7;
  const y = littleEndian(bytes) & ((1n << 255n) - 1n);
  if (y >= P) return null;
  const u = mod(y * y - 1n);
  const v = mod(D * y * y + 1n);
  const v3 = (v * v % P) * v % P;
  let x = (u * v3 % P) * pow(u * (v3 * v3 % P) * v, (P - 5n) / 8n) % P;
  const vxx = (v * x % P) * x % P;
  if (vxx === mod(-u)) x = (x * SQRT_M1) % P;
  else if (vxx !== u) return null;
  if (x === 0n && sign === 1) return null;
  if (Number(x & 1n) !== sign) x = P - x;
  return [x, y, 1n, (x * y) % P];
}

/**
 * Section 5.1.2: y little-endian with the parity of x in the top bit.
 * @param {Point} p
 * @returns {Uint8Array}
 */
export function encode(p) {
  const zinv = pow(p[2], P - 2n);
  const x = (p[0] * zinv) % P;
  const y = (p[1] * zinv) % P;
  const out = toLittleEndian(y, 32);
  out[31] |= Number(x & 1n) << 7;
  return out;
}

/** @param {Uint8Array} bytes @returns {bigint} */
function littleEndian(bytes) {
  let n = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(bytes[i]);
  return n;
}

/** @param {bigint} n @param {number} size @returns {Uint8Array} */
function toLittleEndian(n, size) {
  const out = new Uint8Array(size);
  for (let i = 0; i < size; i++) {
    out[i] = Number(n & 0xffn);
    n >>= 8n;
  }
  return out;
}

// The base point B (section 5.1): y = 4/5, x positive (even).
const BASE = /** @type {Point} */ (decode(toLittleEndian((4n * pow(5n, P - 2n)) % P, 32)));

/** @type {Point[][] | null} windows[i][j] = j * 16^i * B, built on first use */
let baseWindows = null;

/**
 * [n] B for 0 <= n < 2^256 through the table: 64 additions, no doubling.
 * @param {bigint} n
 * @returns {Point}
 */
function multiplyBase(n) {
  if (baseWindows === null) {
    baseWindows = [];
    let w = BASE;
    for (let i = 0; i < 64; i++) {
      /** @type {Point[]} */
      const row = [ZERO, w];
      for (let j = 2; j < 16; j++) row.push(add(row[j - 1], w));
      baseWindows.push(row);
      w = double(double(double(double(w))));
    }
  }
  let r = ZERO;
  for (let i = 0; i < 64; i++) {
    const j = Number((n >> BigInt(4 * i)) & 15n);
    if (j) r = add(r, baseWindows[i][j]);
  }
  return r;
}

/** SHA-512 of the parts, read little-endian and reduced mod L (section 5.1.6 steps 2 and 4). */
function hashScalar(/** @type {Uint8Array[]} */ ...parts) {
  return littleEndian(sha512(...parts)) % L;
}

/**
 * Section 5.1.5: the secret scalar, the nonce prefix and the public key of a 32-byte private key.
 * @param {Uint8Array} seed
 */
function expand(seed) {
  if (!(seed instanceof Uint8Array) || seed.length !== 32) throw new TypeError('an Ed25519 private key is 32 bytes');
  const h = sha512(seed);
  const s = littleEndian(h.subarray(0, 32)) & ((1n << 254n) - 8n) | (1n << 254n); // pruned
  return { s, prefix: h.slice(32), publicKey: encode(multiplyBase(s)) };
}

/**
 * The 32-byte public key of a 32-byte private key (seed).
 * @param {Uint8Array} seed
 * @returns {Uint8Array}
 */
export function publicKey(seed) {
  return expand(seed).publicKey;
}

/**
 * Section 5.1.6: the 64-byte signature R || S of `message` under private key `seed`.
 * @param {Uint8Array} seed
 * @param {Uint8Array} message
 * @returns {Uint8Array}
 */
export function sign(seed, message) {
  const { s, prefix, publicKey: a } = expand(seed);
  const r = hashScalar(prefix, message);
  const R = encode(multiplyBase(r));
  const k = hashScalar(R, a, message);
  const S = (r + k * s) % L;
  const out = new Uint8Array(64);
  out.set(R, 0);
  out.set(toLittleEndian(S, 32), 32);
  return out;
}

/**
 * Section 5.1.7 without the cofactor: whether `signature` is valid for `message` under
 * `publicKey` (false for malformed input, never an exception).
 * @param {Uint8Array} publicKey
 * @param {Uint8Array} message
 * @param {Uint8Array} signature
 * @returns {boolean}
 */
export function verify(publicKey, message, signature) {
  if (publicKey.length !== 32 || signature.length !== 64) return false;
  const A = decode(publicKey);
  if (A === null) return false;
  const S = littleEndian(signature.subarray(32));
  if (S >= L) return false;
  const R = signature.subarray(0, 32);
  const k = hashScalar(R, publicKey, message);
  const check = encode(add(multiplyBase(S), negate(multiply(A, k))));
  let diff = 0;
  for (let i = 0; i < 32; i++) diff |= check[i] ^ R[i];
  return diff === 0;
}

/**
 * Whether `point` is of the prime order L and not the neutral point: [L] point = 0.
 * @param {Point} point
 */
export function inPrimeOrderGroup(point) {
  const isZero = (/** @type {Point} */ p) => p[0] === 0n && mod(p[1] - p[2]) === 0n;
  return !isZero(point) && isZero(multiply(point, L));
}
