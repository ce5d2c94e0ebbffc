// @ts-check
// The bytes an audit signature covers (docs/TRUST.md, "Keys and statements"), and the digests
// they carry. Mirror of server/daisychain/p2p/statements.py; tests/vectors/audit/ pins both.
//
// A statement is one signed claim of a peer about one attempt (step, round) of a run: kind 1
// its contribution commit, kind 2 its reduced commit, kind 3 its reveal, kind 4 an audit result.
// Fixed sizes, integers little-endian:
//   0 magic "DCS1"   4 kind (u8)   5 run (8: its 16 hex digits)   13 step (u32)   17 round (u8)
//   18 author (12: ASCII id, zero-padded)   30 roster digest (32)   62 body (per kind, below)
// An absent digest (an empty chunk, a share of 0, no data digest) is 32 zero bytes.
//
// Digests are Uint8Arrays of 32 bytes. Small hashes (roster digest, nonce, seen) use sha256.js
// synchronously; chunk and data digests, which cover megabytes, go through hash.js (Web Crypto
// when present).

import { Sha256, sha256 } from '../numerics/sha256.js';
import { sha256Bytes } from '../numerics/hash.js';

export const DIGEST = 32;
export const ABSENT = new Uint8Array(DIGEST);
export const HEADER = 62;
export const ID_BYTES = 12; // the server's peer ids are 12 characters
export const MAX_ROSTER = 64;
export const MAX_SHARE = 4096;
const RUN_RE = /^[0-9a-f]{16}$/;
const ID_RE = /^[A-Za-z0-9_-]{1,12}$/;
const ascii = (/** @type {string} */ s) => Uint8Array.from(s, (c) => c.charCodeAt(0));
const MAGIC = ascii('DCS1');
const ROSTER_MAGIC = ascii('DCR1');
const SEEN_MAGIC = ascii('DCV1');
const NONCE_LABEL = ascii('daisychain nonce');

/** Statement kinds (byte 4). */
export const Kind = Object.freeze({ CONTRIBUTION: 1, REDUCED: 2, REVEAL: 3, AUDIT: 4 });
/** What an audit result recomputed. */
export const Item = Object.freeze({ CONTRIBUTION: 1, REDUCTION: 2 });

/** Bytes or fields that are not a statement; the message says which field and why. */
export class BadStatement extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'BadStatement';
  }
}

/**
 * @typedef {{run: string, step: number, round: number, author: string, roster: Uint8Array}} Head
 * @typedef {{kind: 1, head: Head, private: boolean, prev: Uint8Array, nonceHash: Uint8Array,
 *   data: Uint8Array, chunks: Uint8Array[]}} Contribution
 * @typedef {{kind: 2, head: Head, chunk: number, digest: Uint8Array}} Reduced
 * @typedef {{kind: 3, head: Head, nonce: Uint8Array, seen: Uint8Array}} Reveal
 * @typedef {{kind: 4, head: Head, item: number, index: number, of: Uint8Array, data: Uint8Array,
 *   digests: Uint8Array[]}} Audit
 * @typedef {Contribution | Reduced | Reveal | Audit} Statement
 */

/** @param {Uint8Array[]} parts */
function concat(parts) {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** @param {number} value @param {string} what */
function u8(value, what) {
  if (!(Number.isInteger(value) && value >= 0 && value <= 0xff)) {
    throw new BadStatement(`${what} must be an integer in [0, 255], not ${value}`);
  }
  return Uint8Array.of(value);
}

/** @param {number} value */
function u32(value) {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, value, true);
  return out;
}

/** @param {Uint8Array} value @param {string} what */
function digest(value, what) {
  if (!(value instanceof Uint8Array) || value.length !== DIGEST) {
    throw new BadStatement(`${what} must be ${DIGEST} bytes (a SHA-256 digest)`);
  }
  return value;
}

/**
 * A peer id as 12 bytes: its ASCII, zero-padded (no id holds a zero byte).
 * @param {string} peer
 * @param {string} what
 */
function id(peer, what) {
  if (typeof peer !== 'string' || !ID_RE.test(peer)) {
    throw new BadStatement(`${what} must be a peer id of 1 to ${ID_BYTES} characters of ` +
      `A-Z a-z 0-9 _ -, not ${JSON.stringify(String(peer).slice(0, 40))} (the server's ids are ` +
      `${ID_BYTES}; audits need ids that fit)`);
  }
  const out = new Uint8Array(ID_BYTES);
  out.set(ascii(peer));
  return out;
}

/**
 * A run id (16 lowercase hex digits) as the 8 bytes those digits write, in their order.
 * @param {string} run
 */
export function runBytes(run) {
  if (typeof run !== 'string' || !RUN_RE.test(run)) {
    throw new BadStatement(`run must be 16 lowercase hex digits, not ${JSON.stringify(String(run).slice(0, 40))}`);
  }
  return Uint8Array.from({ length: 8 }, (_, i) => parseInt(run.slice(2 * i, 2 * i + 2), 16));
}

/**
 * run (8), step (u32), round (u8): an attempt in statements, nonces and the draw's seed.
 * @param {string} run
 * @param {number} step
 * @param {number} round
 */
export function attemptBytes(run, step, round) {
  if (!(Number.isInteger(step) && step >= 0 && step <= 0xffffffff)) {
    throw new BadStatement(`step must be an integer in [0, 2^32), not ${step}`);
  }
  return concat([runBytes(run), u32(step), u8(round, 'round')]);
}

/**
 * SHA-256 of "DCR1", N (u8), then per rank the peer id (12 bytes) and its share (u16).
 * @param {readonly string[]} peers
 * @param {readonly number[]} shares
 */
export function rosterDigest(peers, shares) {
  if (!(peers.length >= 1 && peers.length <= MAX_ROSTER) || shares.length !== peers.length) {
    throw new BadStatement(`a roster is 1 to ${MAX_ROSTER} peers with one share each, not ` +
      `${peers.length} peers and ${shares.length} shares`);
  }
  if (new Set(peers).size !== peers.length) {
    throw new BadStatement(`a roster's peers must be distinct: ${JSON.stringify(peers)}`);
  }
  const h = new Sha256().update(ROSTER_MAGIC).update(Uint8Array.of(peers.length));
  for (let rank = 0; rank < peers.length; rank++) {
    const share = shares[rank];
    if (!(Number.isInteger(share) && share >= 0 && share <= MAX_SHARE)) {
      throw new BadStatement(`share ${rank} must be an integer in [0, ${MAX_SHARE}], not ${share}`);
    }
    h.update(id(peers[rank], `peer ${rank}`)).update(Uint8Array.of(share & 0xff, share >> 8));
  }
  return h.digest();
}

/**
 * The digest of one encoded chunk (codec.encode, before deflate); an empty chunk has none.
 * @param {Uint8Array} payload
 */
export async function chunkDigest(payload) {
  return payload.length ? sha256Bytes(payload) : ABSENT.slice();
}

/**
 * SHA-256 of the token ids of every row a contribution trained on: T + 1 ids a row as int32
 * little-endian, rows in position order.
 * @param {ArrayLike<number>[]} rows
 */
export async function dataDigest(rows) {
  if (rows.length < 1 || rows.some((r) => r.length < 2 || r.length !== rows[0].length)) {
    throw new BadStatement('rows must be at least one row of T + 1 >= 2 token ids, every row as long');
  }
  const width = rows[0].length;
  const bytes = new Uint8Array(rows.length * width * 4);
  const view = new DataView(bytes.buffer);
  rows.forEach((row, r) => {
    for (let i = 0; i < width; i++) {
      const v = row[i];
      if (!(Number.isInteger(v) && v >= 0 && v <= 0x7fffffff)) throw new BadStatement('token ids must be integers in [0, 2^31)');
      view.setInt32(4 * (r * width + i), v, true);
    }
  });
  return sha256Bytes(bytes);
}

/**
 * SHA-256("daisychain nonce" || secret || run || step || round).
 * @param {Uint8Array} secret 32 bytes
 * @param {string} run
 * @param {number} step
 * @param {number} round
 */
export function nonce(secret, run, step, round) {
  if (!(secret instanceof Uint8Array) || secret.length !== 32) throw new BadStatement('the secret must be 32 bytes');
  return new Sha256().update(NONCE_LABEL).update(secret).update(attemptBytes(run, step, round)).digest();
}

/** @param {Uint8Array} n */
export function nonceHash(n) {
  return sha256(digest(n, 'nonce'));
}

/** SHA-256 of a statement: what `seen` lists and an audit's `of` names. @param {Uint8Array} s */
export function statementHash(s) {
  return sha256(s);
}

/**
 * SHA-256("DCV1" || the hash of each contribution commit in rank order || of each reduced commit
 * in chunk order || of each carried statement in carry order).
 * @param {readonly Uint8Array[]} contributions
 * @param {readonly Uint8Array[]} reduced
 * @param {readonly Uint8Array[]} [carried]
 */
export function seen(contributions, reduced, carried = []) {
  const h = new Sha256().update(SEEN_MAGIC);
  for (const s of [...contributions, ...reduced, ...carried]) h.update(sha256(s));
  return h.digest();
}

/** @param {number} kind @param {Head} head */
function headBytes(kind, head) {
  return concat([MAGIC, Uint8Array.of(kind), attemptBytes(head.run, head.step, head.round),
    id(head.author, 'author'), digest(head.roster, 'roster')]);
}

/**
 * A statement's bytes, whatever its kind.
 * @param {Statement} s
 * @returns {Uint8Array}
 */
export function encode(s) {
  switch (s.kind) {
    case Kind.CONTRIBUTION:
      if (!(s.chunks.length >= 1 && s.chunks.length <= MAX_ROSTER)) {
        throw new BadStatement(`chunks must be 1 to ${MAX_ROSTER} digests, not ${s.chunks.length}`);
      }
      return concat([headBytes(s.kind, s.head), Uint8Array.of(s.private ? 1 : 0), digest(s.prev, 'prev'),
        digest(s.nonceHash, 'nonce_hash'), digest(s.data, 'data'),
        ...s.chunks.map((d, k) => digest(d, `chunks[${k}]`))]);
    case Kind.REDUCED:
      return concat([headBytes(s.kind, s.head), u8(s.chunk, 'chunk'), digest(s.digest, 'digest')]);
    case Kind.REVEAL:
      return concat([headBytes(s.kind, s.head), digest(s.nonce, 'nonce'), digest(s.seen, 'seen')]);
    case Kind.AUDIT:
      if (!(s.digests.length >= 1 && s.digests.length <= MAX_ROSTER)) {
        throw new BadStatement(`digests must be 1 to ${MAX_ROSTER}, not ${s.digests.length}`);
      }
      return concat([headBytes(s.kind, s.head), u8(s.item, 'item'), u8(s.index, 'index'),
        digest(s.of, 'of'), digest(s.data, 'data'), Uint8Array.of(s.digests.length),
        ...s.digests.map((d, k) => digest(d, `digests[${k}]`))]);
    default:
      throw new BadStatement(`unknown statement kind ${/** @type {{kind: unknown}} */ (s).kind}`);
  }
}

/** @param {Uint8Array} body @param {number} count */
function digests(body, count) {
  return Array.from({ length: count }, (_, k) => body.slice(DIGEST * k, DIGEST * (k + 1)));
}

/**
 * A statement's fields from its bytes; throws BadStatement naming what is wrong.
 * @param {Uint8Array} data
 * @returns {Statement}
 */
export function parse(data) {
  if (data.length < HEADER || MAGIC.some((b, i) => data[i] !== b)) {
    throw new BadStatement(`not a statement: ${data.length} bytes (expected "DCS1" and at least ${HEADER} bytes)`);
  }
  const idBytes = data.subarray(18, 30);
  let end = ID_BYTES;
  while (end > 0 && idBytes[end - 1] === 0) end--;
  const author = String.fromCharCode(...idBytes.subarray(0, end));
  if (!ID_RE.test(author)) {
    const shown = Array.from(idBytes, (b) => b.toString(16).padStart(2, '0')).join('');
    throw new BadStatement(`author must be a zero-padded peer id, not ${shown}`);
  }
  const dv = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const run = Array.from(data.subarray(5, 13), (b) => b.toString(16).padStart(2, '0')).join('');
  /** @type {Head} */
  const head = { run, step: dv.getUint32(13, true), round: data[17], author, roster: data.slice(30, 62) };
  const body = data.subarray(HEADER);
  switch (data[4]) {
    case Kind.CONTRIBUTION: {
      const n = (body.length - 97) / DIGEST;
      if (!(Number.isInteger(n) && n >= 1 && n <= MAX_ROSTER)) {
        throw new BadStatement(`a contribution commit's body is 97 bytes and 1 to ${MAX_ROSTER} chunk ` +
          `digests, not ${body.length} bytes`);
      }
      if (body[0] > 1) throw new BadStatement(`a contribution commit's flags are 0 or 1, not ${body[0]}`);
      return { kind: Kind.CONTRIBUTION, head, private: body[0] === 1, prev: body.slice(1, 33),
        nonceHash: body.slice(33, 65), data: body.slice(65, 97), chunks: digests(body.subarray(97), n) };
    }
    case Kind.REDUCED:
      if (body.length !== 1 + DIGEST) throw new BadStatement(`a reduced commit's body is ${1 + DIGEST} bytes, not ${body.length}`);
      return { kind: Kind.REDUCED, head, chunk: body[0], digest: body.slice(1) };
    case Kind.REVEAL:
      if (body.length !== 2 * DIGEST) throw new BadStatement(`a reveal's body is ${2 * DIGEST} bytes, not ${body.length}`);
      return { kind: Kind.REVEAL, head, nonce: body.slice(0, DIGEST), seen: body.slice(DIGEST) };
    case Kind.AUDIT:
      if (body.length < 67 || (body[0] !== 1 && body[0] !== 2) || !(body[66] >= 1 && body[66] <= MAX_ROSTER) ||
          body.length !== 67 + DIGEST * body[66]) {
        throw new BadStatement(`an audit result has item 1 or 2 and 1 to ${MAX_ROSTER} digests, its ` +
          `count saying how many; not ${body.length} body bytes`);
      }
      return { kind: Kind.AUDIT, head, item: body[0], index: body[1], of: body.slice(2, 34),
        data: body.slice(34, 66), digests: digests(body.subarray(67), body[66]) };
    default:
      throw new BadStatement(`unknown statement kind ${data[4]} (1 contribution, 2 reduced, 3 reveal, 4 audit)`);
  }
}
