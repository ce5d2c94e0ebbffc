// @ts-check
// A device's audit key: Ed25519 (RFC 8032, pure) from a 32-byte secret (docs/TRUST.md, "Keys
// and statements"). Mirror of server/daisychain/p2p/auditkey.py.
//
// The signing key's seed is SHA-256("daisychain key" || secret); the public key travels as
// `device.audit_key` (64 lowercase hex digits). Signing and verifying use Web Crypto's Ed25519
// where this context has it (a secure context in a browser that implements it; Node 20), else
// numerics/ed25519.js: a page opened over plain http at a LAN address has no `crypto.subtle`.
// Both give the same bits (Ed25519 signatures are deterministic) and the same verdicts: keys
// outside the prime-order group are refused before any implementation sees them
// (`checkPublicKey`; the Python module says why).

import { sha256 } from '../numerics/sha256.js';
import * as ed25519 from '../numerics/ed25519.js';

export const SECRET_BYTES = 32;
const KEY_LABEL = Uint8Array.from('daisychain key', (c) => c.charCodeAt(0));
const KEY_HEX_RE = /^[0-9a-f]{64}$/;
// PKCS #8 (RFC 8410) around a 32-byte Ed25519 private key: Web Crypto imports no raw private key.
const PKCS8_PREFIX = Uint8Array.of(0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65,
  0x70, 0x04, 0x22, 0x04, 0x20);

/** A key that is not an acceptable audit key; the message says why. */
export class BadKey extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'BadKey';
  }
}

/** @param {Uint8Array} b */
export function toHex(b) {
  let s = '';
  for (const v of b) s += v.toString(16).padStart(2, '0');
  return s;
}

/**
 * A copy in an ArrayBuffer of its own: Web Crypto takes no view of a SharedArrayBuffer.
 * @param {Uint8Array} b
 */
const own = (b) => new Uint8Array(b);

/** @param {string} s */
function fromHex(s) {
  return Uint8Array.from({ length: s.length / 2 }, (_, i) => parseInt(s.slice(2 * i, 2 * i + 2), 16));
}

/** @param {string} s */
function fromBase64Url(s) {
  const bin = atob(s.replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

/**
 * Web Crypto when it exists and implements Ed25519, else null. Probed once per SubtleCrypto
 * object (importing a fixed key), so the answer follows the context and a test can take Web
 * Crypto away.
 * @type {WeakMap<SubtleCrypto, Promise<boolean>>}
 */
const probed = new WeakMap();

/** @returns {Promise<SubtleCrypto | null>} */
async function subtleEd25519() {
  const s = globalThis.crypto?.subtle;
  if (!s) return null;
  let ok = probed.get(s);
  if (ok === undefined) {
    ok = s.importKey('raw', ed25519Base(), { name: 'Ed25519' }, false, ['verify']).then(() => true, () => false);
    probed.set(s, ok);
  }
  return (await ok) ? s : null;
}

/** The encoding of the base point: a valid public key to probe with. */
function ed25519Base() {
  const b = new Uint8Array(32);
  b[0] = 0x58;
  b.fill(0x66, 1);
  return b;
}

/**
 * Which Ed25519 this context uses: 'web-crypto' or 'javascript' (numerics/ed25519.js).
 * @returns {Promise<'web-crypto' | 'javascript'>}
 */
export async function ed25519Implementation() {
  return (await subtleEd25519()) ? 'web-crypto' : 'javascript';
}

/**
 * The RFC 8032 private key (32-byte seed) of a device's secret.
 * @param {Uint8Array} secret
 */
export function signingSeed(secret) {
  if (!(secret instanceof Uint8Array) || secret.length !== SECRET_BYTES) {
    throw new BadKey(`the secret must be ${SECRET_BYTES} bytes from crypto.getRandomValues`);
  }
  const both = new Uint8Array(KEY_LABEL.length + SECRET_BYTES);
  both.set(KEY_LABEL);
  both.set(secret, KEY_LABEL.length);
  return sha256(both);
}

/** A device's key pair, made from its secret: `await SigningKey.fromSecret(secret)`. */
export class SigningKey {
  /**
   * @param {Uint8Array} seed
   * @param {Uint8Array} publicKey
   * @param {CryptoKey | null} webKey
   */
  constructor(seed, publicKey, webKey) {
    this._seed = seed;
    this.public = publicKey;
    this._webKey = webKey;
  }

  /** @param {Uint8Array} secret */
  static async fromSecret(secret) {
    const seed = signingSeed(secret);
    const s = await subtleEd25519();
    if (!s) return new SigningKey(seed, ed25519.publicKey(seed), null);
    const pkcs8 = new Uint8Array(PKCS8_PREFIX.length + 32);
    pkcs8.set(PKCS8_PREFIX);
    pkcs8.set(seed, PKCS8_PREFIX.length);
    const key = await s.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, true, ['sign']);
    const jwk = await s.exportKey('jwk', key);
    return new SigningKey(seed, fromBase64Url(/** @type {string} */ (jwk.x)), key);
  }

  /** The key as `device.audit_key` states it. */
  get publicHex() {
    return toHex(this.public);
  }

  /**
   * The 64-byte signature of `statement`.
   * @param {Uint8Array} statement
   * @returns {Promise<Uint8Array>}
   */
  async sign(statement) {
    const s = this._webKey ? globalThis.crypto?.subtle : null;
    if (s && this._webKey) return new Uint8Array(await s.sign({ name: 'Ed25519' }, this._webKey, own(statement)));
    return ed25519.sign(this._seed, statement);
  }
}

/** @type {Map<string, string>} why a key is refused ('' if it is not), by its hex */
const refusals = new Map();

/**
 * Refuses a key that is not the canonical encoding of a point of order L (BadKey).
 * @param {Uint8Array} key
 */
export function checkPublicKey(key) {
  if (!(key instanceof Uint8Array) || key.length !== 32) {
    throw new BadKey('an audit key is 32 bytes (64 hex digits)');
  }
  const hex = toHex(key);
  let why = refusals.get(hex);
  if (why === undefined) {
    const point = ed25519.decode(key);
    if (point === null) why = 'is not the canonical encoding of a curve point (RFC 8032 5.1.3)';
    else if (!ed25519.inPrimeOrderGroup(point)) {
      why = 'is not a point of the prime-order group (the neutral point, or a small-order part)';
    } else why = '';
    if (refusals.size >= 256) refusals.clear(); // a run has at most 64 keys
    refusals.set(hex, why);
  }
  if (why) throw new BadKey(`audit key ${hex} ${why}`);
}

/**
 * `device.audit_key` as bytes, checked.
 * @param {unknown} text
 */
export function parsePublicKey(text) {
  if (typeof text !== 'string' || !KEY_HEX_RE.test(text)) {
    throw new BadKey(`an audit key is 64 lowercase hex digits, not ${JSON.stringify(String(text).slice(0, 80))}`);
  }
  const key = fromHex(text);
  checkPublicKey(key);
  return key;
}

/**
 * Whether `signature` is `key`'s over `statement`: false for a key checkPublicKey refuses, a
 * signature that is not 64 bytes or has S >= L, or any other failure.
 * @param {Uint8Array} key
 * @param {Uint8Array} statement
 * @param {Uint8Array} signature
 * @returns {Promise<boolean>}
 */
export async function verify(key, statement, signature) {
  try {
    checkPublicKey(key);
  } catch {
    return false;
  }
  if (!(signature instanceof Uint8Array) || signature.length !== 64) return false;
  let S = 0n;
  for (let i = 63; i >= 32; i--) S = (S << 8n) | BigInt(signature[i]);
  if (S >= ed25519.L) return false;
  const s = await subtleEd25519();
  if (!s) return ed25519.verify(key, statement, signature);
  const pub = await s.importKey('raw', own(key), { name: 'Ed25519' }, false, ['verify']);
  return s.verify({ name: 'Ed25519' }, pub, own(signature), own(statement));
}
