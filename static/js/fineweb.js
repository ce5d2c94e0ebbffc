// Deterministic addressing of parquet datasets (FineWeb-Edu, and any other a server reads:
// datanames.js) for training runs: mirror of
// server/daisychain/fineweb.py (docs/PROTOCOL.md, "Training data"). Pure: no I/O.
//
// A run whose config.data is "fineweb@REV" gives rank r at step s (completed steps) the window of
// text that shardOf/window name in the revision's shard table; the server's addressed /data form
// answers it (the page asks with windowQuery), the peer joins its documents with the end-of-text
// token, encodes the text with the shipped tokenizer (static/js/tokenizer.js) and cuts the ids
// into a batch (batchFromIds). tests/vectors/fineweb/cases.json pins the chain; character counts
// are Unicode code points, as in Python, not UTF-16 units.

import { parse as parseDataName } from './datanames.js';
import { key, bitsAt } from './numerics/prng.js';

export const FINEWEB_STREAM = 2;
export const STEPS_PER_ROW_GROUP = 32;
export const CHARS_PER_TOKEN = 8;
export const MAX_WINDOW_CHARS = 1_000_000;
export const DOCUMENT_SEPARATOR = '<|endoftext|>';
export const BUILTIN = 'builtin';
export const FINEWEB_PREFIX = 'fineweb@';
const REVISION_RE = /^[0-9a-f]{40}$/;

/** The table cannot hold an address (no training row group, an empty row group). */
export class AddressError extends Error {
  constructor(message) {
    super(message);
    this.name = 'AddressError';
  }
}

/** config.data for FineWeb-Edu at `revision` (a 40-hex commit). */
export function dataName(revision) {
  if (!REVISION_RE.test(revision)) throw new RangeError(`revision ${revision} is not a 40-hex commit`);
  return FINEWEB_PREFIX + revision;
}

/** The revision of a dataset's name (datanames.js: FineWeb-Edu, a Hub dataset or a server's own
 * text files), null for "builtin"; RangeError for anything else. */
export function revisionOf(data) {
  const name = parseDataName(data);
  return name === null ? null : name.revision;
}

/** Characters of text a batch x seqLen window asks for. */
export function windowChars(batch, seqLen) {
  return Math.min(MAX_WINDOW_CHARS, CHARS_PER_TOKEN * batch * (seqLen + 1));
}

/** Index of the shard the window of (seed, step, rank) lives in. */
export function shardOf(seed, step, rank, split, nShards) {
  if (nShards < 1) throw new AddressError('the shard table is empty');
  if (split === 'validation') return nShards - 1;
  return bitsAt(key(seed, FINEWEB_STREAM, 0, Math.floor(step / STEPS_PER_ROW_GROUP), rank), 0) % nShards;
}

/** The window {shard, rowGroup, firstRow, chars} of (seed, step, rank) in `shard`, whose row
 * groups hold rows[i] rows each. */
export function window(seed, step, rank, split, { shard, nShards, rows, chars }) {
  let rowGroup;
  let k;
  if (split === 'validation') {
    if (rows.length === 0) throw new AddressError('the last shard has no row group to hold out');
    rowGroup = rows.length - 1;
    k = key(seed, FINEWEB_STREAM, 2, step, rank);
  } else {
    const usable = shard === nShards - 1 ? rows.length - 1 : rows.length;
    if (usable < 1) throw new AddressError(`shard ${shard} has no training row group (only the held-out one)`);
    const groupKey = key(seed, FINEWEB_STREAM, 0, Math.floor(step / STEPS_PER_ROW_GROUP), rank);
    rowGroup = bitsAt(groupKey, 1) % usable;
    k = key(seed, FINEWEB_STREAM, 1, step, rank);
  }
  if (rows[rowGroup] < 1) throw new AddressError(`row group ${rowGroup} of shard ${shard} has no rows`);
  return { shard, rowGroup, firstRow: bitsAt(k, 0) % rows[rowGroup], chars };
}

/** The addressed /data query of a window (docs/SERVER.md, "Addressed windows"). */
export function windowQuery({ split = 'train', revision, seed, step, rank, batch, seqLen }) {
  const q = new URLSearchParams({
    split, revision, seed: String(seed), step: String(step), rank: String(rank),
    max_chars: String(windowChars(batch, seqLen)),
  });
  return `/data?${q}`;
}

/** Length of a string in Unicode code points (Python's len). */
export function codePoints(text) {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** The text a peer encodes: the window's documents separated by the end-of-text token. */
export function join(texts) {
  return texts.join(DOCUMENT_SEPARATOR);
}

/** {x, y}, each batch rows of seqLen ids (Int32Array, row-major), from the first
 * batch * (seqLen + 1) ids (repeated from the start when fewer). */
export function batchFromIds(ids, batch, seqLen) {
  if (ids.length === 0) throw new AddressError('the window encoded to no tokens');
  const x = new Int32Array(batch * seqLen);
  const y = new Int32Array(batch * seqLen);
  for (let i = 0; i < batch; i++) {
    for (let t = 0; t < seqLen; t++) {
      const at = i * (seqLen + 1) + t;
      x[i * seqLen + t] = ids[at % ids.length];
      y[i * seqLen + t] = ids[(at + 1) % ids.length];
    }
  }
  return { x, y };
}
