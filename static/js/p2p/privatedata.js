// Private data (docs/PROTOCOL.md, "Private data"): a text file of this device's own that it
// trains on instead of the run's text. The file is read and tokenized here, on the device, and
// never sent anywhere: only the gradients computed from it leave, mixed into the run's mean like
// every other device's. The replicas stay identical because every peer applies the same reduced
// gradient; nobody needs another's batches.
//
// Lanes: the built-in corpus's addressing over the private ids. Lane `l` of the step after
// `step` completed steps is sampleBatch(ids, batch, seqLen, seed, step, l), exactly what
// replica.js builtinLane does over the built-in corpus (docs/MODEL.md, "Batches"). So a page
// with private text computes its share's positions from its own text whatever the run's `data`
// is (builtin or FineWeb-Edu), and the rest of the exchange does not change.

import { sampleBatch } from '../model/batches.js';

// 50 MiB: tokenized here in about 5-15 s (the page's encoder reads 3-14 MB/s) and held as 16-bit
// ids (about 25 MB for 50 MiB of English); a larger file would keep a phone busy for minutes.
export const MAX_PRIVATE_BYTES = 50 * 1024 * 1024;
// Each piece encoded between two yields to the page (cut at a line end): the page stays
// responsive and can say how far it got.
const PIECE_BYTES = 1 << 20;
const NEWLINE = 0x0a;

/** A private text this page cannot use: `message` says what, `hint` what to do instead. */
export class PrivateDataError extends Error {
  constructor(message, hint) {
    super(message);
    this.name = 'PrivateDataError';
    this.hint = hint;
  }
}

const mib = (bytes) => `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;

/** Refuse a file of `size` bytes above MAX_PRIVATE_BYTES (before reading it). */
export function checkSize(size, name) {
  if (size > MAX_PRIVATE_BYTES) {
    throw new PrivateDataError(`${name} is ${mib(size)}: private text is limited to ` +
      `${mib(MAX_PRIVATE_BYTES)}`, 'choose a smaller file, or cut this one into parts');
  }
}

/**
 * The text of a file's `bytes` (a Uint8Array), refusing what is not plain UTF-8 text: a NUL
 * byte (no text file holds one; every binary format does) or an invalid UTF-8 sequence.
 * File.text() would replace both with U+FFFD and train on the noise, so the bytes are decoded
 * strictly.
 */
export function decodeText(bytes, name) {
  checkSize(bytes.length, name);
  const notText = (why) => new PrivateDataError(`${name} is not a plain text file (${why})`,
    'choose a .txt (or .md, .csv) file saved as UTF-8; a document from a word processor or a ' +
    'PDF must be saved as plain text first');
  if (bytes.includes(0)) throw notText('it holds NUL bytes, as binary files do');
  let text;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw notText('it is not valid UTF-8');
  }
  if (text.trim() === '') {
    throw new PrivateDataError(`${name} holds no text`, 'choose a file with the text to train on');
  }
  return text;
}

/** The fewest ids a text needs for sequences of `seqLen`: one window and a second start. */
export function minTokens(seqLen) {
  return seqLen + 2; // sampleBatch draws offsets in [0, n - seqLen - 1), which must not be empty
}

export class PrivateText {
  /**
   * @param {object} o
   * @param {string} o.name  the file's name (shown; never sent)
   * @param {number} o.bytes  the file's size
   * @param {Uint16Array|Uint32Array} o.ids  its token ids, in order
   */
  constructor({ name, bytes, ids }) {
    this.name = name;
    this.bytes = bytes;
    this.ids = ids;
  }

  get count() {
    return this.ids.length;
  }

  /** Throws a PrivateDataError when the text is too short for sequences of `seqLen`. */
  checkFits(seqLen) {
    if (this.count < minTokens(seqLen)) {
      throw new PrivateDataError(`${this.name} has ${this.count} tokens; sequences of ${seqLen} ` +
        `need at least ${minTokens(seqLen)}`, 'choose a longer text file (a few pages at least)');
    }
  }

  /**
   * Lane `lane` of the step after `step` completed steps, from this text: {x, y} of `batch`
   * rows of `seqLen` ids, addressed by (seed, step, lane) as the built-in corpus's lanes are.
   */
  lane({ batch, seqLen }, seed, step, lane) {
    this.checkFits(seqLen);
    return sampleBatch(this.ids, batch, seqLen, seed, step, lane);
  }

  /** What the page says about it. */
  describe() {
    return `Private text: ${this.name}, ${this.count.toLocaleString('en')} tokens — trains ` +
      'here; only gradients leave this device';
  }
}

/**
 * Read `file` (a File or Blob with a `name`) on this device and tokenize it with `tokenizer`
 * (tokenizer.js): a PrivateText, or a PrivateDataError (too large, not text, too short for
 * sequences of `seqLen`). `onProgress(fraction)` is called between pieces.
 */
export async function readPrivateText(file, tokenizer, { seqLen = 1, onProgress = () => {} } = {}) {
  const name = file.name || 'the file';
  checkSize(file.size, name); // refused unread
  const bytes = new Uint8Array(await file.arrayBuffer());
  decodeText(bytes, name); // the whole file is checked before any work
  const Ids = tokenizer.vocabSize <= 65536 ? Uint16Array : Uint32Array;
  const parts = [];
  let count = 0;
  for (let start = 0; start < bytes.length;) {
    let end = Math.min(bytes.length, start + PIECE_BYTES);
    // Cut after a line end (never inside a character, a word or "<|endoftext|>").
    const nl = end < bytes.length ? bytes.lastIndexOf(NEWLINE, end - 1) : -1;
    if (nl >= start) end = nl + 1;
    const part = Ids.from(tokenizer.encodeBytes(bytes.subarray(start, end)));
    parts.push(part);
    count += part.length;
    start = end;
    onProgress(start / bytes.length);
    await new Promise((resolve) => setTimeout(resolve, 0)); // let the page draw
  }
  const ids = new Ids(count);
  let at = 0;
  for (const part of parts) {
    ids.set(part, at);
    at += part.length;
  }
  const text = new PrivateText({ name, bytes: bytes.length, ids });
  text.checkFits(seqLen);
  return text;
}
