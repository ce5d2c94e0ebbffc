// @ts-check
// Binary frames on a data channel: the 28-byte header, fragmentation, bounded reassembly.
// Mirror of server/daisychain/p2p/frames.py, normative in docs/PROTOCOL.md "Binary frames";
// every check, its order and its message are the Python module's, proven by the golden
// vectors in tests/vectors/p2p_wire/ (tests/js/p2p_frames.test.mjs).
//
//   0  magic    2 bytes  "DC"
//   2  version  u8       FRAME_VERSION
//   3  kind     u8       1 contribution, 2 reduced, 3 checkpoint
//   4  flags    u8       bit 0: the reassembled payload is deflate-raw (RFC 1951)
//   5  round    u8       attempt of the step (gradients), 0 otherwise
//   6  chunk    u16      chunk index (gradients), 0 otherwise
//   8  transfer u32      sender-chosen id, unique among the sender's open transfers
//   12 step     u32      step the payload belongs to
//   16 total    u32      length of the whole payload as sent (compressed if flagged)
//   20 offset   u32      where this fragment's bytes start in the payload
//   24 crc32    u32      CRC-32 (zlib/IEEE) of the whole payload, checked after reassembly
//   28 bytes             1 .. MAX_FRAME_BYTES - 28 bytes of the payload
//
// Nothing in a header is trusted: sizes are checked against the receiver's limit for the kind
// before anything is buffered, fragments must arrive in order (a gap on a reliable ordered
// channel is a violation, not loss) and the number of open transfers is capped.

import { crc32 } from './crc32.js';
import { deflateRaw, inflateRaw, InflateError } from './deflate.js';

export const MAGIC = [0x44, 0x43]; // "DC"
export const FRAME_VERSION = 1;
export const HEADER_BYTES = 28;
export const MAX_FRAME_BYTES = 48 * 1024;
export const MAX_FRAGMENT_BYTES = MAX_FRAME_BYTES - HEADER_BYTES;
export const MAX_OPEN_TRANSFERS = 8;
export const FLAG_DEFLATE = 0x01;
export const KNOWN_FLAGS = FLAG_DEFLATE;
export const U32_MAX = 2 ** 32 - 1;

/** Frame kinds (FrameKind in Python); `KIND_NAMES[k]` is Python's `kind.name.lower()`. */
export const FrameKind = Object.freeze({ CONTRIBUTION: 1, REDUCED: 2, CHECKPOINT: 3 });
/** @typedef {typeof FrameKind[keyof typeof FrameKind]} Kind  1, 2 or 3 */
export const KIND_NAMES = Object.freeze({ 1: 'contribution', 2: 'reduced', 3: 'checkpoint' });

/**
 * A fragment's header (parseHeader, packHeader).
 * @typedef {{kind: Kind, flags: number, round: number, chunk: number, transfer: number,
 *   step: number, total: number, offset: number, crc: number}} Header
 * A reassembled payload (Reassembler.feed; Python's Payload).
 * @typedef {{kind: Kind, round: number, chunk: number, step: number, data: Uint8Array}} Payload
 * What fragmentBody and fragment take besides the kind and the bytes.
 * @typedef {{transfer: number, step: number, round?: number, chunk?: number}} Address
 * Bytes in any of their forms (a Uint8Array, an ArrayBuffer, another view).
 * @typedef {ArrayBuffer | ArrayBufferView} Bytes
 */

/** A binary frame that violates the protocol; the channel is closed with this reason. */
export class FrameError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'FrameError';
  }
}

/**
 * A complete payload whose CRC-32 does not match: damaged, not malformed. The receiver drops
 * it and asks for it again (gradient repair) instead of closing the channel.
 */
export class ChecksumError extends FrameError {
  /** @param {Header} head */
  constructor(head) {
    super(`${KIND_NAMES[head.kind]} step ${head.step} chunk ${head.chunk}: CRC-32 mismatch`);
    this.name = 'ChecksumError';
    this.head = head;
  }
}

/**
 * @param {unknown} data  bytes in any of their forms; anything else is a TypeError
 * @returns {Uint8Array}
 */
function bytesOf(data) {
  if (data instanceof Uint8Array) return data;
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError('a frame or payload must be bytes (Uint8Array, ArrayBuffer or a view)');
}

/**
 * @param {string} name
 * @param {number} value
 * @param {number} bound
 */
function checkRange(name, value, bound) {
  if (!Number.isInteger(value) || value < 0 || value > bound) {
    throw new RangeError(`${name} ${value} out of range 0..${bound}`);
  }
}

/**
 * The 28-byte header of one fragment (fields as in parseHeader's result).
 * @param {Header} head
 */
export function packHeader({ kind, flags, round, chunk, transfer, step, total, offset, crc }) {
  const head = new Uint8Array(HEADER_BYTES);
  const view = new DataView(head.buffer);
  head[0] = MAGIC[0];
  head[1] = MAGIC[1];
  view.setUint8(2, FRAME_VERSION);
  view.setUint8(3, kind);
  view.setUint8(4, flags);
  view.setUint8(5, round);
  view.setUint16(6, chunk, true);
  view.setUint32(8, transfer, true);
  view.setUint32(12, step, true);
  view.setUint32(16, total, true);
  view.setUint32(20, offset, true);
  view.setUint32(24, crc, true);
  return head;
}

/**
 * Frames of an already prepared body (compressed or not, `flags` saying which), produced one
 * at a time: a checkpoint is cut into frames only as fast as the channel drains.
 * @param {Kind} kind
 * @param {Bytes} bytes  the body
 * @param {Address & {flags?: number}} address
 * @returns {Generator<Uint8Array, void, void>}
 */
export function* fragmentBody(kind, bytes, { transfer, step, round = 0, chunk = 0, flags = 0 }) {
  const body = bytesOf(bytes);
  if (!(body.length > 0 && body.length <= U32_MAX)) {
    throw new RangeError(`payload of ${body.length} bytes cannot be framed`);
  }
  if (!(kind in KIND_NAMES)) throw new RangeError(`unknown frame kind ${kind}`);
  checkRange('round', round, 0xff);
  checkRange('chunk', chunk, 0xffff);
  checkRange('transfer', transfer, U32_MAX);
  checkRange('step', step, U32_MAX);
  const crc = crc32(body);
  for (let offset = 0; offset < body.length; offset += MAX_FRAGMENT_BYTES) {
    const part = body.subarray(offset, Math.min(body.length, offset + MAX_FRAGMENT_BYTES));
    const frame = new Uint8Array(HEADER_BYTES + part.length);
    frame.set(packHeader({ kind, flags, round, chunk, transfer, step, total: body.length, offset, crc }));
    frame.set(part, HEADER_BYTES);
    yield frame;
  }
}

/**
 * The body a payload travels as: deflate-raw when `deflate`, else the payload itself.
 * @param {Bytes} payload
 * @param {{deflate?: boolean}} [options]
 * @returns {Promise<{body: Uint8Array, flags: number}>}
 */
export async function prepareBody(payload, { deflate = false } = {}) {
  const bytes = bytesOf(payload);
  return { body: deflate ? await deflateRaw(bytes) : bytes, flags: deflate ? FLAG_DEFLATE : 0 };
}

/**
 * Split `payload` into frames of at most MAX_FRAME_BYTES (compressed first if asked).
 * @param {Kind} kind
 * @param {Bytes} payload
 * @param {Address & {deflate?: boolean}} address
 */
export async function fragment(kind, payload, { transfer, step, round = 0, chunk = 0, deflate = false }) {
  const { body, flags } = await prepareBody(payload, { deflate });
  return [...fragmentBody(kind, body, { transfer, step, round, chunk, flags })];
}

/**
 * Inflate deflate-raw data, refusing (FrameError) anything that expands beyond `limit`.
 * @param {Bytes} data
 * @param {number} limit
 * @returns {Promise<Uint8Array>}
 */
export async function inflate(data, limit) {
  try {
    // deflate.js answers bytes or throws (its `out` is null only with a refusal)
    return /** @type {Uint8Array} */ (await inflateRaw(bytesOf(data), limit));
  } catch (exc) {
    if (exc instanceof InflateError) throw new FrameError(exc.message);
    throw exc;
  }
}

/**
 * Header and fragment bytes of one frame, validated on their own (no transfer context).
 * @param {Bytes} bytes  the frame
 * @returns {{head: Header, data: Uint8Array}}
 */
export function parseHeader(bytes) {
  const frame = bytesOf(bytes);
  if (frame.length > MAX_FRAME_BYTES) {
    throw new FrameError(`frame of ${frame.length} bytes exceeds ${MAX_FRAME_BYTES}`);
  }
  if (frame.length <= HEADER_BYTES) {
    throw new FrameError(`frame of ${frame.length} bytes is too short for header and data`);
  }
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  if (frame[0] !== MAGIC[0] || frame[1] !== MAGIC[1]) {
    throw new FrameError(`bad magic ${pyBytesRepr(frame.subarray(0, 2))}, expected b'DC'`);
  }
  const version = view.getUint8(2);
  if (version !== FRAME_VERSION) {
    throw new FrameError(`frame version ${version}, this peer speaks ${FRAME_VERSION}`);
  }
  const kind = view.getUint8(3);
  if (!(kind in KIND_NAMES)) throw new FrameError(`unknown frame kind ${kind}`);
  const flags = view.getUint8(4);
  if (flags & ~KNOWN_FLAGS) {
    throw new FrameError(`unknown flags 0x${flags.toString(16).padStart(2, '0')}`);
  }
  /** @type {Header} */
  const head = {
    kind: /** @type {Kind} */ (kind), // one of KIND_NAMES: checked above
    flags,
    round: view.getUint8(5),
    chunk: view.getUint16(6, true),
    transfer: view.getUint32(8, true),
    step: view.getUint32(12, true),
    total: view.getUint32(16, true),
    offset: view.getUint32(20, true),
    crc: view.getUint32(24, true),
  };
  const data = frame.subarray(HEADER_BYTES);
  if (head.offset + data.length > head.total) {
    throw new FrameError(
      `fragment [${head.offset}, ${head.offset + data.length}) exceeds total ${head.total}`);
  }
  return { head, data };
}

/**
 * Python's repr of a few bytes (only the bad-magic message uses it, to match it exactly).
 * @param {Uint8Array} bytes
 */
function pyBytesRepr(bytes) {
  const quote = bytes.includes(0x27) && !bytes.includes(0x22) ? '"' : "'";
  let s = '';
  for (const b of bytes) {
    if (b === 0x5c) s += '\\\\';
    else if (b === quote.charCodeAt(0)) s += `\\${quote}`;
    else if (b === 0x09) s += '\\t';
    else if (b === 0x0a) s += '\\n';
    else if (b === 0x0d) s += '\\r';
    else if (b >= 0x20 && b < 0x7f) s += String.fromCharCode(b);
    else s += `\\x${b.toString(16).padStart(2, '0')}`;
  }
  return `b${quote}${s}${quote}`;
}

/**
 * Per-channel reassembly of fragmented payloads with size limits. `limit(kind)` is the largest
 * payload (decompressed) this receiver accepts now; 0 means the kind is not accepted now.
 *
 * `feedSync(frame)` does every check up to and including the CRC and returns null while a
 * payload is incomplete, else `{kind, round, chunk, step, body, deflated, limit}` (the body as
 * sent). `feed(frame)` also inflates a compressed body and resolves to a Payload
 * `{kind, round, chunk, step, data}` (Python's Reassembler.feed). Both throw FrameError for
 * any violation (close the channel) and ChecksumError for a damaged payload (ask again). The
 * state changes before `feed` awaits anything, so frames fed in arrival order are checked in
 * that order; but a compressed payload resolves only after its inflate, so a caller that must
 * see payloads in arrival order awaits each `feed` before the next (or uses `feedSync`).
 */
export class Reassembler {
  /** @param {(kind: Kind) => number} limit */
  constructor(limit) {
    this.limit = limit;
    /** @type {Map<number, {head: Header, parts: Uint8Array[], length: number}>} */
    this.open = new Map(); // transfer id -> {head, parts: Uint8Array[], length}
  }

  get buffered() {
    let n = 0;
    for (const t of this.open.values()) n += t.length;
    return n;
  }

  /**
   * @param {Bytes} frame
   * @returns {{kind: Kind, round: number, chunk: number, step: number, body: Uint8Array,
   *   deflated: boolean, limit: number} | null}
   */
  feedSync(frame) {
    const { head, data } = parseHeader(frame);
    const limit = this.limit(head.kind);
    if (!(limit > 0)) throw new FrameError(`${KIND_NAMES[head.kind]} frames are not expected now`);
    // A compressed payload is never larger than the limit plus deflate's worst-case overhead
    // (5 bytes per 16 KiB stored block, plus a little).
    const wireLimit = head.flags & FLAG_DEFLATE ? limit + Math.floor(limit / 16384) * 5 + 64 : limit;
    if (head.total > wireLimit) {
      throw new FrameError(
        `${KIND_NAMES[head.kind]} payload of ${head.total} bytes exceeds the limit of ${wireLimit}`);
    }
    let t = this.open.get(head.transfer);
    if (t === undefined) {
      if (head.offset !== 0) {
        throw new FrameError(`transfer ${head.transfer} starts at offset ${head.offset}, not 0`);
      }
      if (this.open.size >= MAX_OPEN_TRANSFERS) {
        throw new FrameError(`more than ${MAX_OPEN_TRANSFERS} transfers open at once`);
      }
      t = { head, parts: [], length: 0 };
      this.open.set(head.transfer, t);
    } else {
      const first = t.head;
      const fields = /** @type {const} */ (['kind', 'flags', 'round', 'chunk', 'step', 'total']);
      for (const field of fields) {
        if (first[field] !== head[field]) {
          throw new FrameError(`transfer ${head.transfer}: header changed between fragments`);
        }
      }
      if (head.crc !== first.crc) {
        throw new FrameError(`transfer ${head.transfer}: crc changed between fragments`);
      }
      if (head.offset !== t.length) {
        throw new FrameError(
          `transfer ${head.transfer}: fragment at offset ${head.offset}, expected ${t.length} ` +
          '(fragments arrive in order on a reliable channel)');
      }
    }
    t.parts.push(data.slice()); // a copy: the caller's frame buffer may be reused
    t.length += data.length;
    if (t.length < head.total) return null;
    this.open.delete(head.transfer);
    const body = concatParts(t.parts, t.length);
    if (crc32(body) !== head.crc) throw new ChecksumError(head);
    return {
      kind: head.kind, round: head.round, chunk: head.chunk, step: head.step, body,
      deflated: Boolean(head.flags & FLAG_DEFLATE), limit,
    };
  }

  /**
   * @param {Bytes} frame
   * @returns {Promise<Payload | null>}
   */
  async feed(frame) {
    const done = this.feedSync(frame);
    if (done === null) return null;
    const data = done.deflated ? await inflate(done.body, done.limit) : done.body;
    return { kind: done.kind, round: done.round, chunk: done.chunk, step: done.step, data };
  }
}

/**
 * @param {Uint8Array[]} parts
 * @param {number} length
 */
function concatParts(parts, length) {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(length);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
