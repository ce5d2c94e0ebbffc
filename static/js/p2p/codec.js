// @ts-check
// Quantized gradient chunks: the bytes of a contribution or a reduced chunk. Mirror of
// server/daisychain/p2p/codec.py (normative: docs/PROTOCOL.md "Gradient chunks and the exchange
// arithmetic").
//
// The flat gradient (every parameter's gradient, parameter order, row-major, concatenated) is
// cut into blocks of BLOCK = 256 values, the last padded with zeros. Each block is quantized with
// one power-of-two scale exactly as docs/NUMERICS.md section 2 (quantizeRows of the (n, 256)
// block matrix: Python's `quantize(blocks, axis=1)`), so x ~= q * 2^e is recovered exactly on
// every platform. A chunk of n blocks is n int8 exponents followed by n * 256 int8 values:
//
//   payload = e[0] .. e[n-1] | q[0][0..255] .. q[n-1][0..255]        (n * 257 bytes)

import { dequantizeRows, quantizeRows } from '../numerics/quant.js';

export const BLOCK = 256;
export const E_MIN = -126; // smallest exponent a dequantized value is a normal float32 at
export const E_MAX = 100;

/** Chunk bytes that do not decode (wrong length, out-of-range exponent or value). */
export class CodecError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'CodecError';
  }
}

/**
 * Blocks of BLOCK values that hold `nValues` values.
 * @param {number} nValues
 */
export function nBlocks(nValues) {
  return Math.ceil(nValues / BLOCK);
}

/**
 * All gradients (a Map name -> Float32Array, parameter order) padded to whole blocks.
 * @param {ReadonlyMap<string, Float32Array>} grads
 */
export function flatten(grads) {
  let total = 0;
  for (const g of grads.values()) total += g.length;
  const flat = new Float32Array(nBlocks(total) * BLOCK);
  let pos = 0;
  for (const g of grads.values()) {
    flat.set(g, pos);
    pos += g.length;
  }
  return flat;
}

/**
 * The inverse of `flatten`: a Map name -> Float32Array (copies) for `shapes` (name -> dims).
 * @param {Float32Array} flat
 * @param {Iterable<[string, readonly number[]]>} shapes
 */
export function unflatten(flat, shapes) {
  /** @type {Map<string, Float32Array>} */
  const out = new Map();
  let pos = 0;
  for (const [name, shape] of shapes) {
    const size = shape.reduce((a, b) => a * b, 1);
    out.set(name, flat.slice(pos, pos + size));
    pos += size;
  }
  if (!(flat.length - pos < BLOCK)) throw new Error('flat gradient does not match the parameter shapes');
  return out;
}

/**
 * Quantize whole blocks: {payload: Uint8Array, values: the dequantized Float32Array}.
 * @param {Float32Array} values
 * @returns {{payload: Uint8Array, values: Float32Array}}
 */
export function encode(values) {
  if (values.length % BLOCK !== 0) throw new RangeError('chunks are whole blocks');
  const n = values.length / BLOCK;
  const { q, e } = quantizeRows(values, n, BLOCK); // q (n, BLOCK) Int8Array, e (n) Int32Array
  const payload = new Uint8Array(n * (BLOCK + 1));
  for (let b = 0; b < n; b++) payload[b] = e[b] & 0xff;
  payload.set(new Uint8Array(q.buffer, q.byteOffset, q.length), n);
  return { payload, values: dequantizeRows(q, e, n, BLOCK) };
}

/**
 * Dequantized values of a chunk of `blocks` blocks; every byte is checked (CodecError).
 * @param {Uint8Array} payload
 * @param {number} blocks
 * @returns {Float32Array}
 */
export function decode(payload, blocks) {
  if (payload.length !== blocks * (BLOCK + 1)) {
    throw new CodecError(
      `chunk of ${blocks} blocks must be ${blocks * (BLOCK + 1)} bytes, got ${payload.length}`);
  }
  const raw = new Int8Array(payload.buffer, payload.byteOffset, payload.length);
  const e = raw.subarray(0, blocks);
  const q = raw.subarray(blocks);
  for (let b = 0; b < blocks; b++) {
    if (e[b] < E_MIN || e[b] > E_MAX) {
      throw new CodecError(`block exponent out of range [${E_MIN}, ${E_MAX}]`);
    }
  }
  for (let i = 0; i < q.length; i++) {
    if (q[i] < -127) throw new CodecError('quantized value -128 never occurs (|q| <= 127)');
  }
  return dequantizeRows(q, e, blocks, BLOCK);
}
