// @ts-check
// The bandwidth-optimal gradient exchange: who reduces what, and the pinned arithmetic. Mirror
// of server/daisychain/p2p/allreduce.py (docs/PROTOCOL.md "Gradient chunks and the exchange
// arithmetic", data-channel version 2).
//
// With a roster of N peers and their shares s of the step's G sequences (shares.js), the flat
// gradient's B blocks are cut into N contiguous chunks in proportion to the ownership weights
// o[k] = s[k] when 2 s[k] >= max(s), else 0 (version 3; allreduce.py says why): with their
// cumulative sums c (c[N] = O), chunk k = blocks [floor(B c[k] / O), floor(B c[k+1] / O)), owned
// by roster[k]. A chunk may be empty (a share of less than half the largest always gives one);
// nothing is sent for it.
// The owner weights each contributor's (share > 0) dequantized values by its share and sums them
// in roster order, acc = d[j0] * f32(s[j0]); acc = fround(acc + fround(d[j1] * f32(s[j1]))); ...,
// divides once by f32(G) and quantizes the result once (codec.encode). Every product is exact
// (|q| * s <= 127 * 4096 < 2^24), every add and the division are one round-to-nearest-even
// (Math.fround, or the store into a Float32Array).

import { BLOCK, encode } from './codec.js';
import { offsets } from './shares.js';

/**
 * The ownership weights of a roster's shares: less than half the largest share owns nothing.
 * @param {readonly number[]} shares
 */
export function ownership(shares) {
  let top = 0;
  for (const s of shares) if (s > top) top = s;
  return shares.map((s) => (2 * s >= top ? s : 0));
}

/**
 * [first, end) block indices of chunk `k` of a roster with these shares.
 * @param {number} totalBlocks
 * @param {readonly number[]} shares
 * @param {number} k
 * @returns {[number, number]}
 */
export function chunkBlocks(totalBlocks, shares, k) {
  const c = offsets(ownership(shares));
  const g = c[c.length - 1];
  if (!(Number.isInteger(k) && k >= 0 && k < shares.length && g > 0)) {
    throw new RangeError(`chunk ${k} of shares [${shares.join(', ')}]`);
  }
  return [Math.floor((totalBlocks * c[k]) / g), Math.floor((totalBlocks * c[k + 1]) / g)];
}

/**
 * [start, end) of chunk `k`'s values in the flat gradient.
 * @param {number} totalBlocks
 * @param {readonly number[]} shares
 * @param {number} k
 * @returns {[number, number]}
 */
export function chunkSlice(totalBlocks, shares, k) {
  const [first, end] = chunkBlocks(totalBlocks, shares, k);
  return [first * BLOCK, end * BLOCK];
}

/**
 * The weighted mean sum(d * s) / G of the contributors' dequantized values (Float32Arrays), in
 * roster order (pinned float32 sequence); `weights` are their shares (each >= 1), `total` = G.
 * @param {readonly Float32Array[]} contributions
 * @param {readonly number[]} weights
 * @param {number} total
 */
export function reduceChunk(contributions, weights, total) {
  if (contributions.length === 0 || contributions.length !== weights.length) {
    throw new RangeError('one weight per contribution');
  }
  let sum = 0;
  for (const w of weights) {
    if (!(Number.isInteger(w) && w >= 1)) throw new RangeError(`weight ${w}`);
    sum += w;
  }
  if (sum !== total) throw new RangeError(`weights sum to ${sum}, not ${total}`);
  const d0 = contributions[0];
  const w0 = Math.fround(weights[0]);
  const acc = new Float32Array(d0.length);
  for (let i = 0; i < acc.length; i++) acc[i] = d0[i] * w0; // exact
  for (let j = 1; j < contributions.length; j++) {
    const d = contributions[j];
    const w = Math.fround(weights[j]);
    for (let i = 0; i < acc.length; i++) acc[i] = acc[i] + Math.fround(d[i] * w); // exact product, one rounded add
  }
  const g = Math.fround(total);
  for (let i = 0; i < acc.length; i++) acc[i] = acc[i] / g; // one correctly rounded division
  return acc;
}

/**
 * The whole exchange in one process (tests, benchmarks): the mean gradient every peer applies,
 * and the payload bytes one peer sends (the largest over peers). `flatGrads[k]` is roster peer
 * k's mean gradient (ignored for a share of 0).
 * @param {readonly Float32Array[]} flatGrads
 * @param {readonly number[]} shares
 */
export function exchangeLocally(flatGrads, shares) {
  const n = flatGrads.length;
  if (shares.length !== n) throw new RangeError(`${shares.length} shares for ${n} gradients`);
  const totalBlocks = flatGrads[0].length / BLOCK;
  let g = 0;
  for (const s of shares) g += s;
  const contributors = [];
  for (let j = 0; j < n; j++) if (shares[j] > 0) contributors.push(j);
  const sent = new Array(n).fill(0);
  const out = new Float32Array(flatGrads[0].length);
  for (let k = 0; k < n; k++) {
    const [start, end] = chunkSlice(totalBlocks, shares, k);
    if (start === end) continue;
    const parts = contributors.map((j) => {
      const { payload, values } = encode(flatGrads[j].subarray(start, end));
      if (j !== k) sent[j] += payload.length;
      return values;
    });
    const { payload, values } = encode(reduceChunk(parts, contributors.map((j) => shares[j]), g));
    out.set(values, start);
    sent[k] += payload.length * (n - 1);
  }
  return { mean: out, sent: Math.max(...sent) };
}
