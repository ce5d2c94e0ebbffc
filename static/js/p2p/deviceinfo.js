// @ts-check
// What a person is shown of another device: the `name` and `device` of its signaling `hello`
// (docs/PROTOCOL.md, "Signaling"). The mirror of server/daisychain/wire/deviceinfo.py, rule for
// rule; tests/vectors/signaling/device.json holds the cases both must agree on.
//
// A name is shown only when one of its characters can be seen: a name of blanks only (white
// space, format and control characters, combining marks alone, the Hangul fillers, the blank
// Braille pattern) is no name, and the device is shown as `device-XXXX`, as the server names it.
// A name that can be seen holds no character that hides or reorders it (Unicode categories
// Other and Separator except U+0020: control, format -- bidi overrides above all -- and
// separator characters; Python's str.isprintable). `device.backend` is a backend a DaisyChain
// peer computes on, `device.tokens_per_s` a speed that can be real, `device.kind` a short word,
// `device.audit_key` an Ed25519 public key's 64 lowercase hex digits (docs/TRUST.md; its shape
// only: whether audits accept the key is p2p/auditkey.js's checkPublicKey, at the peers); the
// other keys keep the summary's size rules.
//
// Lengths count code points, as Python's len does (not UTF-16 units: an emoji is one
// character). Python 3.11 knows Unicode 14, this browser a newer version: the server judges
// first, so a character assigned later is no name alone and refused beside a visible one before
// any page sees it.

export const MAX_NAME_CHARS = 40;
export const MAX_DEVICE_KEYS = 16;
export const MAX_DEVICE_KEY_CHARS = 32;
export const MAX_DEVICE_VALUE_CHARS = 128;
export const MAX_TOKENS_PER_S = 1e9;

// Every device.backend a DaisyChain peer sends (where each comes from: wire/deviceinfo.py):
// the Python peer's, then the page's (train/messages.js BACKEND_CHOICES without 'auto').
export const BACKENDS = Object.freeze([
  'numpy', 'cpu-int8', 'cpu-madd', 'wgpu-dp4a', 'wgpu-lut', 'webgpu-dp4a', 'webgpu-lut', 'js-cpu',
]);
const KIND_RE = /^[a-z][a-z0-9-]{0,23}$/;
const AUDIT_KEY_RE = /^[0-9a-f]{64}$/; // an Ed25519 public key (32 bytes) in hex

// What Python's str.strip() removes (str.isspace). String.prototype.trim differs: it also
// takes U+FEFF and leaves U+001C-U+001F and U+0085.
export const SPACE = '\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003' +
  '\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000';
// Letters and symbols that render as nothing (the list and its names: wire/deviceinfo.py).
export const BLANKS = '\u115f\u1160\u3164\uffa0\u2800\u{1d159}\u180e';
const UNPRINTABLE = /^[\p{C}\p{Z}]$/u; // \p{C} includes unassigned (Cn) and lone surrogates
const UNSEEN = /^[\p{C}\p{Z}\p{Mn}\p{Me}]$/u;

export const NAME_EXPECTED =
  `at most ${MAX_NAME_CHARS} printable characters (no control, format or bidi characters)`;
export const BACKEND_EXPECTED = `one of ${BACKENDS.join(', ')}`;
export const TOKENS_EXPECTED = 'a number above 0 and at most 1e9 (tokens per second)';
export const KIND_EXPECTED = 'a lowercase word: a-z, then up to 23 of a-z 0-9 -';
export const AUDIT_KEY_EXPECTED = '64 lowercase hex digits (an Ed25519 public key)';
export const DEVICE_EXPECTED =
  `an object of at most ${MAX_DEVICE_KEYS} keys (<= ${MAX_DEVICE_KEY_CHARS} chars) with ` +
  `string (<= ${MAX_DEVICE_VALUE_CHARS} chars), number, boolean or null values`;

/** A name or device summary that is not shown: which `field`, and what it must be. */
export class DeviceInfoError extends Error {
  /**
   * @param {string} field
   * @param {string} expected
   */
  constructor(field, expected) {
    super(`${field} must be ${expected}`);
    this.name = 'DeviceInfoError';
    this.field = field; // 'name', 'device' or 'device.<key>'
    this.expected = expected;
  }
}

const chars = (/** @type {string} */ text) => [...text]; // code points
const printable = (/** @type {string} */ c) => c === ' ' || !UNPRINTABLE.test(c);

/** @param {string} text */
function strip(text) {
  const cs = chars(text);
  let start = 0;
  let end = cs.length;
  while (start < end && SPACE.includes(cs[start])) start++;
  while (end > start && SPACE.includes(cs[end - 1])) end--;
  return cs.slice(start, end).join('');
}

/**
 * Whether at least one character of `name` can be seen.
 * @param {string} name
 */
export function isVisible(name) {
  return chars(name).some((c) => !BLANKS.includes(c) && !UNSEEN.test(c));
}

/**
 * How a device without a visible name is shown (the server names it so).
 * @param {string} peerId
 */
export function fallbackName(peerId) {
  return `device-${chars(peerId).slice(0, 4).join('')}`;
}

/**
 * The name to show for peer `peerId`: its own when visible, else `device-XXXX`.
 * @param {unknown} name  as the peer sent it (anything)
 * @param {string} peerId
 */
export function shownName(name, peerId) {
  return typeof name === 'string' && isVisible(name) ? name : fallbackName(peerId);
}

/**
 * The name as it is shown, stripped of surrounding white space; '' when no character of it can
 * be seen (show fallbackName instead); DeviceInfoError when it is not a string, is too long, or
 * holds a character that is not printable beside one that can be seen.
 * @param {unknown} value
 * @returns {string}
 */
export function checkName(value) {
  if (typeof value !== 'string') throw new DeviceInfoError('name', 'a string');
  const name = strip(value);
  const cs = chars(name);
  if (cs.length > MAX_NAME_CHARS) throw new DeviceInfoError('name', NAME_EXPECTED);
  if (!isVisible(name)) return ''; // shows nothing, hides nothing: no name, whatever it is made of
  if (!cs.every(printable)) throw new DeviceInfoError('name', NAME_EXPECTED); // would hide or reorder
  return name;
}

/** @param {unknown} value */
function isScalar(value) {
  if (value === null || typeof value === 'boolean') return true;
  if (typeof value === 'number') return Number.isFinite(value);
  return typeof value === 'string' && chars(value).length <= MAX_DEVICE_VALUE_CHARS;
}

const isSpeed = (/** @type {unknown} */ v) =>
  typeof v === 'number' && v > 0 && v <= MAX_TOKENS_PER_S;

/**
 * A frozen copy of the `device` summary, or DeviceInfoError naming the first wrong key.
 * @param {unknown} device  as the peer sent it (anything)
 * @returns {Readonly<Record<string, string | number | boolean | null>>}
 */
export function checkDevice(device) {
  if (device === null || typeof device !== 'object' || Array.isArray(device)) {
    throw new DeviceInfoError('device', DEVICE_EXPECTED);
  }
  const value = /** @type {Readonly<Record<string, unknown>>} */ (device); // a plain object
  const keys = Object.keys(value);
  if (keys.length > MAX_DEVICE_KEYS) throw new DeviceInfoError('device', DEVICE_EXPECTED);
  for (const key of keys) {
    if (chars(key).length > MAX_DEVICE_KEY_CHARS || !isScalar(value[key])) {
      throw new DeviceInfoError('device', DEVICE_EXPECTED);
    }
  }
  const has = (/** @type {string} */ key) => Object.hasOwn(value, key);
  if (has('backend') && !(typeof value.backend === 'string' && BACKENDS.includes(value.backend))) {
    throw new DeviceInfoError('device.backend', BACKEND_EXPECTED);
  }
  if (has('tokens_per_s') && !isSpeed(value.tokens_per_s)) {
    throw new DeviceInfoError('device.tokens_per_s', TOKENS_EXPECTED);
  }
  if (has('kind') && !(typeof value.kind === 'string' && KIND_RE.test(value.kind))) {
    throw new DeviceInfoError('device.kind', KIND_EXPECTED);
  }
  if (has('audit_key') && !(typeof value.audit_key === 'string' && AUDIT_KEY_RE.test(value.audit_key))) {
    throw new DeviceInfoError('device.audit_key', AUDIT_KEY_EXPECTED);
  }
  // every value is a scalar (isScalar, above)
  const copy = /** @type {Record<string, string | number | boolean | null>} */ ({ ...value });
  return Object.freeze(copy);
}
