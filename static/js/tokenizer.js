// Byte-level BPE tokenizer with the ASCII-class pre-splitter (normative: docs/TOKENIZER.md).
//
// Mirrors server/daisychain/tokenizer/bpe.py and pretokenize.py: the same ids for every input,
// checked against tests/vectors/tokenizer.json. Runs unchanged in the browser and under Node:
// `Tokenizer.fromBytes(raw)` takes the bytes of luts/tokenizer.json (Hugging Face format),
// `loadTokenizer(url)` fetches them.
//
//   1. every literal "<|endoftext|>" becomes the end-of-text id; the text between is encoded by
//   2. the pre-splitter on UTF-8 bytes (ASCII classes; every byte >= 0x80 is a letter), then
//   3. BPE within each chunk: merge the adjacent pair of lowest rank everywhere, left to right,
//      until no adjacent pair has a merge.

export const EOT_TOKEN = '<|endoftext|>';

/** The split pattern as stored in tokenizer.json (checked, never executed here). */
export const SPLIT_PATTERN =
  '\\x20?[^\\x00-\\x40\\x5B-\\x60\\x7B-\\x7F]+|[0-9]{1,3}|' +
  '\\x20?[\\x00-\\x08\\x0E-\\x1F\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7F]+|' +
  '[\\x09-\\x0D\\x20]+(?=\\x20[^\\x09-\\x0D\\x200-9])|[\\x09-\\x0D\\x20]+';

// Byte classes (docs/TOKENIZER.md, step 2).
const L = 1; // letters: A-Z a-z and 0x80-0xFF
const D = 2; // digits
const W = 3; // whitespace: 0x09-0x0D and 0x20 only
const P = 4; // every other ASCII byte
const SPACE = 0x20;
const CLASS = (() => {
  const c = new Uint8Array(256);
  for (let b = 0; b < 256; b++) {
    if ((b >= 0x41 && b <= 0x5a) || (b >= 0x61 && b <= 0x7a) || b >= 0x80) c[b] = L;
    else if (b >= 0x30 && b <= 0x39) c[b] = D;
    else if ((b >= 0x09 && b <= 0x0d) || b === SPACE) c[b] = W;
    else c[b] = P;
  }
  return c;
})();

/**
 * The end offsets of the pre-split chunks of `bytes` (a Uint8Array): chunk t is
 * bytes[ends[t - 1] .. ends[t]). A hand-written scanner that takes exactly the leftmost match of
 * SPLIT_PATTERN's alternatives in order (see each case).
 */
export function splitBytes(bytes) {
  const n = bytes.length;
  const ends = [];
  let i = 0;
  while (i < n) {
    const c = CLASS[bytes[i]];
    const next = i + 1 < n ? CLASS[bytes[i + 1]] : 0;
    const lead = bytes[i] === SPACE ? 1 : 0;
    let j;
    if (c === L || (lead && next === L)) {
      // 1. ` ?L+`
      j = i + lead;
      while (j < n && CLASS[bytes[j]] === L) j++;
    } else if (c === D) {
      // 2. `D{1,3}`
      j = i + 1;
      while (j < n && j < i + 3 && CLASS[bytes[j]] === D) j++;
    } else if (c === P || (lead && next === P)) {
      // 3. ` ?P+`
      j = i + lead;
      while (j < n && CLASS[bytes[j]] === P) j++;
    } else {
      // c === W. Take the whole run; 4. `W+(?= [LP])` backtracks to the only place the
      // lookahead can hold: before the run's last byte, if that is a space followed by L or P
      // and the run keeps at least one byte. Otherwise 5. `W+` takes the run whole.
      j = i + 1;
      while (j < n && CLASS[bytes[j]] === W) j++;
      if (j - i >= 2 && bytes[j - 1] === SPACE && j < n) {
        const after = CLASS[bytes[j]];
        if (after === L || after === P) j--;
      }
    }
    ends.push(j);
    i = j;
  }
  return ends;
}

/** GPT-2's printable stand-in character for each byte (the ByteLevel alphabet). */
export function byteToUnicode() {
  const map = new Array(256);
  const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    map[b] = String.fromCharCode(printable(b) ? b : 256 + extra++);
  }
  return map;
}

/** tokenizer.json is not a tokenizer this encoder reproduces exactly. */
export class TokenizerFileError extends Error {
  constructor(message) {
    super(message);
    this.name = 'TokenizerFileError';
  }
}

function checkPipeline(spec, origin) {
  const model = spec.model ?? {};
  const pre = spec.pre_tokenizer ?? {};
  const steps = pre.type === 'Sequence' ? pre.pretokenizers ?? [] : [];
  const problems = [];
  if (model.type !== 'BPE') problems.push(`model type ${JSON.stringify(model.type)} is not BPE`);
  if (model.ignore_merges || model.byte_fallback || model.dropout) {
    problems.push('ignore_merges, byte_fallback and dropout must be off');
  }
  if (spec.normalizer != null) problems.push('a normalizer is set');
  const split = steps[0] ?? {};
  const bytes = steps[1] ?? {};
  if (
    steps.length !== 2 ||
    split.type !== 'Split' ||
    split.pattern?.Regex !== SPLIT_PATTERN ||
    Object.keys(split.pattern ?? {}).length !== 1 ||
    split.behavior !== 'Isolated' ||
    split.invert ||
    bytes.type !== 'ByteLevel' ||
    bytes.use_regex ||
    bytes.add_prefix_space
  ) {
    problems.push('the pre-tokenizer is not Split(SPLIT_PATTERN) + ByteLevel(no regex)');
  }
  if ((spec.added_tokens ?? []).some((t) => t.content !== EOT_TOKEN)) {
    problems.push(`added tokens other than ${EOT_TOKEN} are present`);
  }
  if (problems.length) {
    throw new TokenizerFileError(
      `${origin}: ${problems.join('; ')}. Retrain it with \`daisychain tokenizer\`.`,
    );
  }
}

// Index of the first lone surrogate in `text`, or -1 (such text has no UTF-8 form).
function loneSurrogate(text) {
  for (let i = 0; i < text.length; i++) {
    const u = text.charCodeAt(i);
    if (u >= 0xd800 && u <= 0xdbff) {
      const v = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
      if (v >= 0xdc00 && v <= 0xdfff) i++;
      else return i;
    } else if (u >= 0xdc00 && u <= 0xdfff) {
      return i;
    }
  }
  return -1;
}

const EOT_BYTES = new TextEncoder().encode(EOT_TOKEN);
const CACHE_LIMIT = 1000000;

export class Tokenizer {
  /**
   * @param {object} spec parsed tokenizer.json
   * @param {string} sha256 hex SHA-256 of the file's bytes ('' when unknown)
   */
  constructor(spec, sha256 = '', origin = '<json>') {
    checkPipeline(spec, origin);
    this.sha256 = sha256;
    this.origin = origin;
    const charToByte = new Map(byteToUnicode().map((ch, b) => [ch, b]));
    const vocab = spec.model.vocab;
    const added = new Map((spec.added_tokens ?? []).map((t) => [t.content, t.id]));
    const size = Math.max(...Object.values(vocab), ...added.values()) + 1;
    const tokenBytes = new Array(size).fill(null);
    for (const [text, id] of Object.entries(vocab)) {
      const bytes = new Uint8Array(text.length);
      for (let k = 0; k < text.length; k++) {
        const b = charToByte.get(text[k]);
        if (b === undefined) {
          throw new TokenizerFileError(
            `${origin}: vocab entry ${JSON.stringify(text)} is not in the ByteLevel alphabet`,
          );
        }
        bytes[k] = b;
      }
      tokenBytes[id] = bytes;
    }
    for (const [text, id] of added) tokenBytes[id] = new TextEncoder().encode(text);
    const missing = tokenBytes.flatMap((b, id) => (b === null ? [id] : []));
    if (missing.length) {
      throw new TokenizerFileError(`${origin}: ids ${missing.slice(0, 5)} have no token`);
    }
    this.vocabSize = size;
    this.eotId = added.get(EOT_TOKEN) ?? null;
    this._tokenBytes = tokenBytes;
    const b2u = byteToUnicode();
    this._byteIds = new Int32Array(256);
    for (let b = 0; b < 256; b++) {
      const id = vocab[b2u[b]];
      if (id === undefined) {
        throw new TokenizerFileError(
          `${origin}: byte 0x${b.toString(16).toUpperCase().padStart(2, '0')} has no token; ` +
            'train with initial_alphabet=ByteLevel.alphabet()',
        );
      }
      this._byteIds[b] = id;
    }
    // (left id, right id) -> rank and merged id, keyed left * size + right.
    this._mergeRank = new Map();
    this._mergeId = new Map();
    spec.model.merges.forEach((merge, rank) => {
      const [left, right] = typeof merge === 'string' ? merge.split(' ') : merge;
      const k = vocab[left] * size + vocab[right];
      this._mergeRank.set(k, rank);
      this._mergeId.set(k, vocab[left + right]);
    });
    this._cache = new Map();
  }

  /** A tokenizer from the raw bytes of a tokenizer.json (computes its SHA-256). */
  static async fromBytes(raw, origin = '<bytes>') {
    const bytes = raw instanceof Uint8Array ? raw : new Uint8Array(raw);
    const spec = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
    const { sha256Hex } = await import('./numerics/hash.js');
    return new Tokenizer(spec, await sha256Hex(bytes), origin);
  }

  // BPE of one chunk (bytes[start .. end)), cached per chunk.
  _bpe(bytes, start, end, out) {
    let key = '';
    for (let k = start; k < end; k++) key += String.fromCharCode(bytes[k]);
    const cached = this._cache.get(key);
    if (cached !== undefined) {
      for (const id of cached) out.push(id);
      return;
    }
    let ids = [];
    for (let k = start; k < end; k++) ids.push(this._byteIds[bytes[k]]);
    const size = this.vocabSize;
    while (ids.length > 1) {
      let bestRank = -1;
      let bestKey = 0;
      for (let k = 0; k + 1 < ids.length; k++) {
        const pair = ids[k] * size + ids[k + 1];
        const rank = this._mergeRank.get(pair);
        if (rank !== undefined && (bestRank < 0 || rank < bestRank)) {
          bestRank = rank;
          bestKey = pair;
        }
      }
      if (bestRank < 0) break;
      const left = Math.floor(bestKey / size);
      const right = bestKey - left * size;
      const merged = this._mergeId.get(bestKey);
      const next = [];
      for (let k = 0; k < ids.length; k++) {
        if (k + 1 < ids.length && ids[k] === left && ids[k + 1] === right) {
          next.push(merged);
          k++;
        } else {
          next.push(ids[k]);
        }
      }
      ids = next;
    }
    if (this._cache.size < CACHE_LIMIT) this._cache.set(key, ids);
    for (const id of ids) out.push(id);
  }

  _encodePlain(bytes, start, end, out) {
    const part = bytes.subarray(start, end);
    let from = 0;
    for (const to of splitBytes(part)) {
      this._bpe(part, from, to, out);
      from = to;
    }
  }

  /** Ids for UTF-8 `bytes` (a Uint8Array; any bytes are accepted). */
  encodeBytes(bytes) {
    const out = [];
    let start = 0;
    if (this.eotId !== null) {
      const m = EOT_BYTES.length;
      for (let i = 0; i + m <= bytes.length; ) {
        let hit = true;
        for (let k = 0; k < m; k++) {
          if (bytes[i + k] !== EOT_BYTES[k]) {
            hit = false;
            break;
          }
        }
        if (hit) {
          this._encodePlain(bytes, start, i, out);
          out.push(this.eotId);
          i += m;
          start = i;
        } else {
          i++;
        }
      }
    }
    this._encodePlain(bytes, start, bytes.length, out);
    return out;
  }

  /** Ids for `text`; a lone surrogate throws (it has no UTF-8 form). */
  encode(text) {
    const at = loneSurrogate(text);
    if (at >= 0) {
      const code = text.charCodeAt(at).toString(16).toUpperCase().padStart(4, '0');
      throw new RangeError(
        `text has a lone surrogate U+${code} at index ${at}; it has no UTF-8 encoding ` +
          '(Python and JavaScript would disagree on it): repair the text first',
      );
    }
    return this.encodeBytes(new TextEncoder().encode(text));
  }

  /** The bytes of `ids` concatenated (<|endoftext|> gives its literal text). */
  decodeBytes(ids) {
    let total = 0;
    for (const id of ids) {
      if (!(Number.isInteger(id) && id >= 0 && id < this.vocabSize)) {
        throw new RangeError(`id ${id} is outside 0..${this.vocabSize - 1}`);
      }
      total += this._tokenBytes[id].length;
    }
    const out = new Uint8Array(total);
    let o = 0;
    for (const id of ids) {
      out.set(this._tokenBytes[id], o);
      o += this._tokenBytes[id].length;
    }
    return out;
  }

  /** Text for `ids`; invalid UTF-8 becomes U+FFFD (a leading U+FEFF is kept). */
  decode(ids) {
    return new TextDecoder('utf-8', { ignoreBOM: true }).decode(this.decodeBytes(ids));
  }

  tokenBytes(id) {
    return this._tokenBytes[id];
  }
}

/** Fetch and build the tokenizer at `url` (browser; e.g. '/luts/tokenizer.json'). */
export async function loadTokenizer(url) {
  const response = await fetch(url);
  if (!response.ok) {
    throw new Error(`could not load the tokenizer from ${url}: HTTP ${response.status}`);
  }
  return Tokenizer.fromBytes(new Uint8Array(await response.arrayBuffer()), String(url));
}
