// The kernel probe: a fixed seeded int8 GEMM through the live kernel, hashed.
//
// Mirrors server/daisychain/gpu/probe.py. Every device computes acc = A @ B for the same
// A (64 x 96) and B (96 x 80), drawn from the contract PRNG (streams (2, 0) and (2, 1) under
// PROBE_SEED, the top byte of each 32-bit word as int8), and publishes SHA-256 over the int32
// little-endian bytes of acc in row-major order. A device whose live kernel disagrees with
// REFERENCE_PROBE_HASH computes different bits and must not train.

import { bits, key } from '../numerics/prng.js';
import { sha256Arrays } from '../numerics/hash.js';

export const PROBE_SEED = 0x9b0be;
export const PROBE_SHAPE = [64, 96, 80]; // M, K, N
export const REFERENCE_PROBE_HASH =
  'fd4bd82715373741b0a6c82113567db8e5b86980ea9a296ea228cc901f4677cb';

function draw(stream, n) {
  const words = bits(key(PROBE_SEED, 2, stream), n);
  const out = new Int8Array(n);
  for (let i = 0; i < n; i++) out[i] = words[i] >>> 24; // wraps to the int8 of the top byte
  return out;
}

/** The probe's A (M x K) and B (K x N), row-major Int8Arrays. */
export function probeOperands() {
  const [m, k, n] = PROBE_SHAPE;
  return { a: draw(0, m * k), b: draw(1, k * n) };
}

/** Runs the probe through `gemm.matmulInt` (the live kernel) and resolves to its hash. */
export async function probeHash(gemm) {
  const [m, k, n] = PROBE_SHAPE;
  const { a, b } = probeOperands();
  return sha256Arrays([await gemm.matmulInt(a, b, m, k, n)]);
}
