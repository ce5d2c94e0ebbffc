// The weight hash (docs/NUMERICS.md section 8): SHA-256 over the canonical little-endian bytes
// of typed arrays in the order given, lowercase hex. Mirrors server/daisychain/numerics/
// hashing.py. Uses Web Crypto (`globalThis.crypto.subtle`: browsers in a secure context, Node
// 19+) when it exists, and the project's own SHA-256 (sha256.js) when it does not: a page served
// over plain http from a LAN address is not a secure context and has no `crypto.subtle`. Both
// give the same digests (tests/js/sha256.test.mjs, against hashlib on tests/vectors/sha256.json).

import { Sha256 } from './sha256.js';

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

// The canonical bytes of one typed array: a view when the platform is little-endian (all
// current browsers and Node targets), a byte-swapped copy otherwise.
function canonicalBytes(a) {
  const bytes = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
  const width = a.BYTES_PER_ELEMENT ?? 1;
  if (LITTLE_ENDIAN || width === 1) return bytes;
  const swapped = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i += width) {
    for (let b = 0; b < width; b++) swapped[i + b] = bytes[i + width - 1 - b];
  }
  return swapped;
}

// Web Crypto's digest when this context has it, else null. Looked up on every call (cheap), so
// the answer follows the context and a test can take Web Crypto away.
function subtle() {
  const s = globalThis.crypto?.subtle;
  return s && typeof s.digest === 'function' ? s : null;
}

function hex(digest) {
  const b = new Uint8Array(digest);
  let s = '';
  for (let i = 0; i < b.length; i++) s += b[i].toString(16).padStart(2, '0');
  return s;
}

/**
 * Which SHA-256 the hashes use here: 'web-crypto' (`crypto.subtle`) or 'javascript'
 * (sha256.js: the page is not a secure context). The digests are the same; the page shows it.
 */
export function hashImplementation() {
  return subtle() ? 'web-crypto' : 'javascript';
}

/** SHA-256 of a byte array (any BufferSource) as a 32-byte Uint8Array. */
export async function sha256Bytes(bytes) {
  const s = subtle();
  if (s) return new Uint8Array(await s.digest('SHA-256', bytes));
  return new Sha256().update(bytes).digest();
}

/** Hex SHA-256 of a byte array. */
export async function sha256Hex(bytes) {
  return hex(await sha256Bytes(bytes));
}

/** Hex SHA-256 of the concatenated canonical bytes of `arrays` (typed arrays) in order. */
export async function sha256Arrays(arrays) {
  const parts = Array.from(arrays, canonicalBytes);
  const s = subtle();
  if (!s) {
    // The JavaScript hasher takes the parts one after another: no concatenated copy.
    const h = new Sha256();
    for (const p of parts) h.update(p);
    return hex(h.digest());
  }
  let total = 0;
  for (const p of parts) total += p.length;
  const all = new Uint8Array(total);
  let o = 0;
  for (const p of parts) {
    all.set(p, o);
    o += p.length;
  }
  return hex(await s.digest('SHA-256', all));
}
