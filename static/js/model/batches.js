// Seeded batch sampling from a token stream (docs/MODEL.md section 8). Mirrors
// server/daisychain/batches.py: every peer derives its batch for a step from (seed, step, rank).

import { key, below } from '../numerics/prng.js';

export const BATCH_STREAM = 1; // key(seed, BATCH_STREAM, step, rank)

/** Offsets below(key(seed, 1, step, rank), batch, nTokens - seqLen - 1) as a Float64Array. */
export function sampleOffsets(nTokens, batch, seqLen, seed, step, rank = 0) {
  const bound = nTokens - seqLen - 1;
  if (bound < 1) {
    throw new RangeError(
      `token stream of ${nTokens} tokens is too short for sequences of ${seqLen} ` +
        `(needs at least ${seqLen + 2}); load more text or lower seq_len`,
    );
  }
  return below(key(seed, BATCH_STREAM, step, rank), batch, bound);
}

/**
 * {x, y}: Int32Arrays of batch * seqLen ids in (b, t) order, x[b] = tokens[o_b : o_b + T],
 * y[b] = tokens[o_b + 1 : o_b + T + 1]. `tokens` is any integer array-like (1-D).
 */
export function sampleBatch(tokens, batch, seqLen, seed, step, rank = 0) {
  const offsets = sampleOffsets(tokens.length, batch, seqLen, seed, step, rank);
  const x = new Int32Array(batch * seqLen);
  const y = new Int32Array(batch * seqLen);
  for (let b = 0; b < batch; b++) {
    const o = offsets[b];
    for (let t = 0; t < seqLen; t++) {
      x[b * seqLen + t] = tokens[o + t];
      y[b * seqLen + t] = tokens[o + t + 1];
    }
  }
  return { x, y };
}
