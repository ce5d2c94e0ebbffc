// @ts-check
// The token-weighted mean of the peers' pseudo-gradients (docs/OUTER.md, "The mean"). Mirror of
// server/daisychain/outer/mean.py, operation for operation; golden vectors:
// tests/vectors/outer/mean.json (tests/js/outer.test.mjs).
//
// A peer's pseudo-gradient counts in proportion to the tokens it trained on. Element by element
// over the dense dequantized vectors, the peers taken in roster order (never the order their
// payloads arrived in):
//
//   w    = tokens / gcd(every positive count)          integers; a count of 0 is left out
//   acc  = d[j0] * f32(w[j0])                           then for each further contributor j:
//   acc  = acc + d[j] * f32(w[j])                       one rounded multiply, one rounded add
//   mean = acc / f32(sum w)                             one rounded division
//
// Each operation is done in float64 and rounded once with Math.fround (or the store into a
// Float32Array): a product of two float32 values is exact in float64 (24 + 24 bits), and a sum
// or quotient of two float32 values rounded to float64 and then to float32 is the correctly
// rounded float32 result (53 >= 2 * 24 + 2), so each step gives numpy's float32 bits.

export const MAX_WEIGHT_SUM = 2 ** 24; // f32(sum w) must be the exact integer

/** Contributions or weights that do not make a mean (Python's MeanError). */
export class MeanError extends RangeError {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'MeanError';
  }
}

/**
 * @param {number} a
 * @param {number} b
 */
function gcd(a, b) {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/**
 * The tokens divided by the gcd of the positive counts (0 stays 0); refuses bad counts.
 * @param {readonly number[]} tokens
 */
export function reducedWeights(tokens) {
  tokens.forEach((t, k) => {
    if (!Number.isSafeInteger(t)) {
      throw new MeanError(`peer ${k}: token count must be an integer, got ${t}`);
    }
    if (t < 0) {
      throw new MeanError(
        `peer ${k}: negative token count ${t}; a peer that did no inner work counts 0`);
    }
  });
  const positive = tokens.filter((t) => t > 0);
  if (positive.length === 0) {
    throw new MeanError('no peer trained on any tokens: there is no mean to take');
  }
  const g = positive.reduce(gcd);
  const out = tokens.map((t) => t / g); // exact: g divides every count
  const sum = out.reduce((a, b) => a + b, 0);
  if (sum >= MAX_WEIGHT_SUM) {
    throw new MeanError(`reduced token weights sum to ${sum}, not below 2^24 (float32's exact ` +
      'integers); count the inner work in coarser units (sequences, or whole inner steps)');
  }
  return out;
}

/**
 * sum(d * w) / sum(w) over the contributors in roster order (above). `values[k]` is roster peer
 * k's dequantized pseudo-gradient (a Float32Array), `tokens[k]` its inner tokens. Returns a new
 * Float32Array.
 * @param {readonly Float32Array[]} values
 * @param {readonly number[]} tokens
 * @returns {Float32Array}
 */
export function weightedMean(values, tokens) {
  if (values.length !== tokens.length) {
    throw new MeanError(`${values.length} pseudo-gradients but ${tokens.length} token counts`);
  }
  if (values.length === 0) throw new MeanError('a mean over no peers');
  const n = values[0].length;
  values.forEach((d, k) => {
    if (!(d instanceof Float32Array) || d.length !== n) {
      throw new MeanError(`peer ${k}: pseudo-gradient of ${d?.length} values, expected a ` +
        `Float32Array of ${n} like peer 0's (every peer trains the same model)`);
    }
  });
  const weights = reducedWeights(tokens);
  /** @type {Float32Array | null} */
  let acc = null;
  for (let j = 0; j < values.length; j++) {
    if (weights[j] === 0) continue;
    const d = values[j];
    const w = Math.fround(weights[j]);
    if (acc === null) {
      acc = new Float32Array(n);
      for (let i = 0; i < n; i++) acc[i] = Math.fround(d[i] * w);
    } else {
      for (let i = 0; i < n; i++) acc[i] = Math.fround(acc[i] + Math.fround(d[i] * w));
    }
  }
  // (mean.py's assert: reducedWeights refuses counts that are all 0)
  if (acc === null) throw new Error('outer mean: no contributor has a weight above 0');
  const total = Math.fround(weights.reduce((a, b) => a + b, 0));
  for (let i = 0; i < n; i++) acc[i] = Math.fround(acc[i] / total);
  return acc;
}
