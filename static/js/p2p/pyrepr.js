// @ts-check
// Python's text forms, where a mirrored message must read exactly as the Python peer's:
// repr() of a float (json.dumps writes floats with it) and of a str (error messages quote
// offending values with it). Used by messages.js; checked against Python by the golden vectors.

/**
 * repr(float) of a JS number: shortest round-trip digits, Python's layout ('1e-05', '3.0').
 * @param {number} x
 */
export function floatRepr(x) {
  if (Number.isNaN(x)) return 'nan';
  if (x === Infinity) return 'inf';
  if (x === -Infinity) return '-inf';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const sign = x < 0 ? '-' : '';
  // toExponential() without digits gives the shortest digits that round-trip, like Python.
  const [mantissa, exp] = Math.abs(x).toExponential().split('e');
  const digits = mantissa.replace('.', '');
  const decpt = Number(exp) + 1; // value = 0.DIGITS * 10^decpt
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return `${sign}0.${'0'.repeat(-decpt)}${digits}`;
    if (decpt >= digits.length) return `${sign}${digits}${'0'.repeat(decpt - digits.length)}.0`;
    return `${sign}${digits.slice(0, decpt)}.${digits.slice(decpt)}`;
  }
  const e = decpt - 1;
  const tail = digits.length > 1 ? `.${digits.slice(1)}` : '';
  return `${sign}${digits[0]}${tail}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
}

// Python's str.isprintable() is false for these general categories (space excepted). Unicode
// versions of Python and the JS engine may differ on newly assigned characters.
const NOT_PRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

/**
 * repr(str) as Python 3 writes it.
 * @param {string} s
 */
export function strRepr(s) {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = '';
  for (const ch of s) {
    const c = /** @type {number} */ (ch.codePointAt(0)); // one code point: never undefined
    if (ch === '\\') out += '\\\\';
    else if (ch === quote) out += `\\${quote}`;
    else if (ch === '\t') out += '\\t';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (c < 0x20 || c === 0x7f) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else if (c < 0x7f || ch === ' ' || !NOT_PRINTABLE.test(ch)) out += ch;
    else if (c < 0x100) out += `\\x${c.toString(16).padStart(2, '0')}`;
    else if (c < 0x10000) out += `\\u${c.toString(16).padStart(4, '0')}`;
    else out += `\\U${c.toString(16).padStart(8, '0')}`;
  }
  return quote + out + quote;
}

/**
 * Number of code points (Python's len of a str).
 * @param {string} s
 */
export function pyLen(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d < 0xe000) i++;
    }
    n++;
  }
  return n;
}

/**
 * The first `n` code points of `s` (Python's s[:n]).
 * @param {string} s
 * @param {number} n
 */
export function pySlice(s, n) {
  let out = '';
  let k = 0;
  for (const ch of s) {
    if (k++ >= n) break;
    out += ch;
  }
  return out;
}

/**
 * UTF-8 length of a string (lone surrogates counted as the 3 bytes of U+FFFD).
 * @param {string} s
 */
export function utf8Length(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length &&
      s.charCodeAt(i + 1) >= 0xdc00 && s.charCodeAt(i + 1) < 0xe000) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}
