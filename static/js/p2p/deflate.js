// deflate-raw (RFC 1951) through the platform's CompressionStream / DecompressionStream, with
// the bounds of daisychain/p2p/frames.py: inflating stops as soon as the output passes the
// receiver's limit (a deflate bomb costs at most one input slice's expansion), and the stream
// must end exactly at the end of the data (no truncation, no trailing bytes).
//
// Engines differ in what DecompressionStream checks: Chromium refuses trailing bytes itself,
// Node 20 ignores them. So trailing bytes are detected here when the engine does not: a deflate
// stream's last byte always holds at least one of its bits, so data[0:n-1] inflates completely
// if and only if data has bytes after the end of its stream.
//
// Node 18 (Debian 12's) has no 'deflate-raw' in its CompressionStream (Node 20.12 and 21.2 added
// it; every current browser has it). There, and only there, the same bounds are applied through
// node:zlib (imported on first use, so a browser never loads it): the 'deflate' format cannot
// stand in, because Node drops the output of a stream that ends without its Adler-32.

const SLICE = 4096; // input bytes handed to the decompressor at a time (bounds a bomb's burst)

/** Why an inflate was refused; frames.js turns it into a FrameError with the same message. */
export class InflateError extends Error {}

function hasRaw() {
  try {
    new DecompressionStream('deflate-raw'); // eslint-disable-line no-new
    new CompressionStream('deflate-raw'); // eslint-disable-line no-new
    return true;
  } catch {
    return false;
  }
}

// Which path this engine takes; tests force Node 18's with setRawSupport(false).
let RAW = hasRaw();
let nativeTrailing = null; // Promise<boolean>: does the engine refuse trailing bytes itself?
let nodeZlib = null; // Promise of the node:zlib module (Node 18 path only)

/** Tests only: take Node 18's path (node:zlib) even where 'deflate-raw' exists. */
export function setRawSupport(raw) {
  RAW = raw && hasRaw();
}

export function usesRawFormat() {
  return RAW;
}

function zlibModule() {
  nodeZlib ??= import('node:zlib');
  return nodeZlib;
}

async function collect(readable) {
  const chunks = [];
  const reader = readable.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
  }
  return concat(chunks);
}

export function concat(chunks) {
  let n = 0;
  for (const c of chunks) n += c.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/** deflate-raw of `bytes` (the engine's default level; any valid stream inflates the same). */
export async function deflateRaw(bytes) {
  if (!RAW) return new Uint8Array((await zlibModule()).deflateRawSync(bytes));
  const cs = new CompressionStream('deflate-raw');
  const writer = cs.writable.getWriter();
  writer.write(bytes).catch(() => {});
  writer.close().catch(() => {});
  return collect(cs.readable);
}

/**
 * One bounded pass: inflate the concatenation of `parts` with `format`. Resolves to
 * {out, over, error}: `over` when the output passed `limit` (reading stopped there), `error`
 * the engine's error if the stream failed (`out` is then what came before it).
 */
async function pass(format, parts, limit) {
  const ds = new DecompressionStream(format);
  const writer = ds.writable.getWriter();
  const reader = ds.readable.getReader();
  const feeding = (async () => {
    for (const part of parts) {
      for (let i = 0; i < part.length; i += SLICE) {
        await writer.ready;
        await writer.write(part.subarray(i, Math.min(part.length, i + SLICE)));
      }
    }
    await writer.close();
  })();
  feeding.catch(() => {}); // a failure also errors the readable side, which reports it
  const chunks = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.length;
      if (total > limit) {
        await reader.cancel().catch(() => {});
        return { out: null, over: true, error: null };
      }
      chunks.push(value);
    }
    await feeding;
  } catch (error) {
    return { out: concat(chunks), over: false, error };
  }
  return { out: concat(chunks), over: false, error: null };
}

const TRUNCATED = /end of (file|stream|input|data)|truncat|junk|trailing|after the end/i;

function refuse(limit, error) {
  if (error === 'over') throw new InflateError(`payload inflates beyond the limit of ${limit} bytes`);
  if (error === 'end' || TRUNCATED.test(String(error && error.message))) {
    throw new InflateError('deflate-raw payload is truncated or has trailing bytes');
  }
  const detail = error && error.message ? error.message : String(error);
  throw new InflateError(`payload is not valid deflate-raw data (${detail})`);
}

function refusesTrailing() {
  if (!RAW) return Promise.resolve(false);
  if (nativeTrailing === null) {
    nativeTrailing = (async () => {
      const good = await deflateRaw(new Uint8Array([1, 2, 3]));
      const junk = concat([good, new Uint8Array([0])]);
      const r = await pass('deflate-raw', [junk], 16);
      return r.error !== null;
    })();
  }
  return nativeTrailing;
}

/** One bounded inflate by this engine's path: {out, over, error} as `pass` answers. */
async function inflateOnce(data, limit) {
  if (RAW) return pass('deflate-raw', [data], limit);
  const zlib = await zlibModule();
  try {
    const out = zlib.inflateRawSync(data, { maxOutputLength: limit + 1 });
    return out.length > limit ?
      { out: null, over: true, error: null } : { out: new Uint8Array(out), over: false, error: null };
  } catch (error) {
    if (error.code === 'ERR_BUFFER_TOO_LARGE') return { out: null, over: true, error: null };
    return { out: null, over: false, error };
  }
}

/**
 * Inflate deflate-raw `data` (Uint8Array), refusing (InflateError) output beyond `limit` bytes,
 * invalid data, a truncated stream and bytes after the end of the stream.
 */
export async function inflateRaw(data, limit) {
  const first = await inflateOnce(data, limit);
  if (first.over) refuse(limit, 'over');
  if (first.error) refuse(limit, first.error);
  if (!(await refusesTrailing()) && data.length > 0) {
    const shorter = await inflateOnce(data.subarray(0, data.length - 1), limit);
    if (!shorter.error && !shorter.over) refuse(limit, 'end');
  }
  return first.out;
}
