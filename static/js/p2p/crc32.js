// @ts-check
// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF): the
// checksum of zlib.crc32 that every binary frame carries over its whole payload
// (docs/PROTOCOL.md, "Binary frames"). Table-driven, one byte at a time; exact by construction
// (integer arithmetic only), checked against zlib's answers in tests/vectors/p2p_wire/.

const TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

/**
 * CRC-32 of `bytes` (a Uint8Array), continuing from `crc` (the result of a previous call over
 * the bytes before these; 0 to start), as an unsigned 32-bit number.
 * @param {Uint8Array} bytes
 * @param {number} [crc]
 */
export function crc32(bytes, crc = 0) {
  let c = ~crc >>> 0;
  for (let i = 0; i < bytes.length; i++) c = TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}
