// The bandwidth-optimal gradient exchange: who reduces what, and the pinned arithmetic. Mirror
// of server/daisychain/p2p/allreduce.py (docs/PROTOCOL.md "Gradient chunks and the exchange
// arithmetic").
//
// With a roster of N peers the flat gradient's B blocks are cut into N contiguous chunks, chunk
// k = blocks [floor(k B / N), floor((k + 1) B / N)), owned by roster[k]. The owner sums the N
// dequantized contributions in roster order with float32 adds (acc = d[0]; acc = acc + d[1];
// ...), divides once by float32(N) and quantizes the result once (codec.encode). A store into a
// Float32Array is the single round-to-nearest-even of each add and of the division.

import { BLOCK, encode } from './codec.js';

/** [first, end) block indices of chunk `k` of `n`. */
export function chunkBlocks(totalBlocks, n, k) {
  if (!(Number.isInteger(k) && k >= 0 && k < n)) throw new RangeError(`chunk ${k} of ${n}`);
  return [Math.floor((totalBlocks * k) / n), Math.floor((totalBlocks * (k + 1)) / n)];
}

/** [start, end) of chunk `k`'s values in the flat gradient. */
export function chunkSlice(totalBlocks, n, k) {
  const [first, end] = chunkBlocks(totalBlocks, n, k);
  return [first * BLOCK, end * BLOCK];
}

/** Mean of dequantized contributions (Float32Arrays) in roster order (pinned float32 sequence). */
export function reduceChunk(contributions) {
  if (contributions.length === 0) throw new RangeError('a roster has at least one peer');
  const acc = Float32Array.from(contributions[0]);
  for (let j = 1; j < contributions.length; j++) {
    const d = contributions[j];
    for (let i = 0; i < acc.length; i++) acc[i] = acc[i] + d[i]; // one float32 add per peer
  }
  const n = Math.fround(contributions.length);
  for (let i = 0; i < acc.length; i++) acc[i] = acc[i] / n; // one correctly rounded division
  return acc;
}

/**
 * The whole exchange in one process (tests, benchmarks): the mean gradient every peer applies,
 * and the payload bytes one peer sends (the largest over peers).
 */
export function exchangeLocally(flatGrads) {
  const n = flatGrads.length;
  const totalBlocks = flatGrads[0].length / BLOCK;
  const sent = new Array(n).fill(0);
  const out = new Float32Array(flatGrads[0].length);
  for (let k = 0; k < n; k++) {
    const [start, end] = chunkSlice(totalBlocks, n, k);
    const parts = flatGrads.map((g, j) => {
      const { payload, values } = encode(g.subarray(start, end));
      if (j !== k) sent[j] += payload.length;
      return values;
    });
    const { payload, values } = encode(reduceChunk(parts));
    out.set(values, start);
    sent[k] += payload.length * (n - 1);
  }
  return { mean: out, sent: Math.max(...sent) };
}
