// The weight hash (docs/NUMERICS.md section 8): SHA-256 over the canonical little-endian bytes
// of typed arrays in the order given, lowercase hex. Mirrors server/daisychain/numerics/
// hashing.py. Uses only `globalThis.crypto.subtle` (browsers, and Node 20's global Web Crypto).

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

function subtle() {
  const s = globalThis.crypto?.subtle;
  if (!s) {
    throw new Error(
      'Web Crypto (crypto.subtle) is unavailable: open the page over https:// or from ' +
        'localhost, or use Node 20 or newer',
    );
  }
  return s;
}

function hex(digest) {
  const b = new Uint8Array(digest);
  let s = '';
  for (let i = 0; i < b.length; i++) s += b[i].toString(16).padStart(2, '0');
  return s;
}

/** Hex SHA-256 of a byte array. */
export async function sha256Hex(bytes) {
  return hex(await subtle().digest('SHA-256', bytes));
}

/** Hex SHA-256 of the concatenated canonical bytes of `arrays` (typed arrays) in order. */
export async function sha256Arrays(arrays) {
  const parts = Array.from(arrays, canonicalBytes);
  let total = 0;
  for (const p of parts) total += p.length;
  const all = new Uint8Array(total);
  let o = 0;
  for (const p of parts) {
    all.set(p, o);
    o += p.length;
  }
  return sha256Hex(all);
}
