// The validation loss (docs/MODEL.md section 8), the browser twin of
// daisychain.training.eval_loss:
// the mean, in float64 over VAL_BATCHES batches, of the contract loss of
// sample_batch(val_tokens, B, T, seed ^ 0x5EED, i) for i = 0 .. 3 at the current weights; no
// gradient, no state change. The batches are built here (the page holds the validation ids);
// the worker's `eval` request computes each batch's loss through the same tier as training
// (trainer.js), so the bits are the contract's.

import { sampleBatch } from '../model/batches.js';

export const VAL_BATCHES = 4;
export const VAL_SEED_XOR = 0x5eed;

/** The validation batches' seed: Python's `seed ^ 0x5EED` on a uint32 (JS `^` is signed). */
export function validationSeed(seed) {
  return (seed ^ VAL_SEED_XOR) >>> 0;
}

/** The VAL_BATCHES batches [{x, y}] of run seed `seed` from the validation ids `valTokens`. */
export function validationBatches(valTokens, batch, seqLen, seed) {
  const s = validationSeed(seed);
  return Array.from({ length: VAL_BATCHES }, (_, i) => sampleBatch(valTokens, batch, seqLen, s, i));
}

/** numpy's mean of a few float32 losses: summed in order in float64, divided by the count. */
export function meanLoss(losses) {
  let sum = 0;
  for (const l of losses) sum += l;
  return sum / losses.length;
}
