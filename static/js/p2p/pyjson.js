// @ts-check
// JSON exactly as Python's json.loads reads it, for the data-channel control messages.
//
// messages.js must accept and refuse what daisychain/p2p/messages.py does, and JSON.parse
// differs from json.loads where it matters: `1.0` and `1e2` are floats to Python (not
// integers: a field that wants an integer refuses them) but indistinguishable from 1 and 100
// after JSON.parse; Python reads NaN, Infinity and -Infinity (a field check then refuses them:
// `bad-message`), where JSON.parse throws (`bad-json`); Python refuses integer literals of more
// than 4300 digits (its int/str conversion limit). So this parser keeps the distinction:
// integer literals become numbers, float literals become `PyFloat`s, objects become `Map`s (in
// key order, a repeated key keeping its first position and last value, like a dict), and it
// throws JsonError wherever json.loads raises. Nesting deeper than MAX_DEPTH is refused, as
// Python's recursion limit does (Python's exact depth varies with its stack; no control
// message nests more than two levels).

export const MAX_DEPTH = 900;
const MAX_INT_DIGITS = 4300; // sys.int_info.default_max_str_digits

/** A JSON number written with a fraction or an exponent (or NaN/Infinity): Python's float. */
export class PyFloat {
  /** @param {number} value */
  constructor(value) {
    this.value = value;
  }
}

export class JsonError extends Error {
  /**
   * @param {string} message
   * @param {number} at  the character it stopped at
   */
  constructor(message, at) {
    super(`${message} at character ${at}`);
    this.name = 'JsonError';
  }
}

const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;
/**
 * A value as json.loads reads it: an object is a Map (key order kept), a float a PyFloat;
 * what an array or object holds is a JsonValue too (a JSDoc type cannot say so: unknown).
 * @typedef {null | boolean | number | string | PyFloat | unknown[] |
 *   Map<string, unknown>} JsonValue
 */

/** @type {Readonly<Record<string, string>>} */
const ESCAPES = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };

/**
 * @param {string} text
 * @returns {JsonValue}
 */
export function parse(text) {
  let i = 0;
  const ws = () => {
    for (;;) {
      const c = text.charCodeAt(i);
      if (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) i++;
      else return;
    }
  };
  /** @type {(what: string) => never} */
  const fail = (what) => {
    throw new JsonError(what, i);
  };

  const string = () => {
    i++; // opening quote
    let out = '';
    let start = i;
    for (;;) {
      if (i >= text.length) fail('unterminated string');
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        out += text.slice(start, i);
        i++;
        return out;
      }
      if (c < 0x20) fail('invalid control character in string');
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += text.slice(start, i);
      const e = text[i + 1];
      if (e === 'u') {
        const hex = text.slice(i + 2, i + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('invalid \\uXXXX escape');
        out += String.fromCharCode(parseInt(hex, 16));
        i += 6;
      } else if (e !== undefined && e in ESCAPES) {
        out += ESCAPES[e];
        i += 2;
      } else {
        fail('invalid escape');
      }
      start = i;
    }
  };

  /**
   * `depth`: how many arrays and objects enclose this value.
   * @type {(depth: number) => JsonValue}
   */
  const value = (depth) => {
    ws();
    const c = text[i];
    if ((c === '{' || c === '[') && depth >= MAX_DEPTH) fail('nesting too deep');
    if (c === '{') {
      i++;
      /** @type {Map<string, JsonValue>} */
      const obj = new Map();
      ws();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail('expecting property name enclosed in double quotes');
        const key = string();
        ws();
        if (text[i] !== ':') fail("expecting ':' delimiter");
        i++;
        obj.set(key, value(depth + 1));
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === '}') {
          i++;
          return obj;
        }
        fail("expecting ',' delimiter");
      }
    }
    if (c === '[') {
      i++;
      /** @type {JsonValue[]} */
      const arr = [];
      ws();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(depth + 1));
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === ']') {
          i++;
          return arr;
        }
        fail("expecting ',' delimiter");
      }
    }
    if (c === '"') return string();
    for (const [word, v] of /** @type {[string, JsonValue][]} */ ([['null', null], ['true', true],
      ['false', false], ['NaN', new PyFloat(NaN)], ['Infinity', new PyFloat(Infinity)],
      ['-Infinity', new PyFloat(-Infinity)]])) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (m === null) fail('expecting value');
    i += m[0].length;
    if (m[1] === undefined && m[2] === undefined) {
      const digits = m[0].length - (m[0][0] === '-' ? 1 : 0);
      if (digits > MAX_INT_DIGITS) fail(`integer of ${digits} digits exceeds ${MAX_INT_DIGITS}`);
      return Number(m[0]) + 0; // + 0: Python's int has no -0
    }
    return new PyFloat(Number(m[0]));
  };

  const result = value(0);
  ws();
  if (i !== text.length) fail('extra data');
  return result;
}
