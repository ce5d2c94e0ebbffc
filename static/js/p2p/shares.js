// @ts-check
// Shares: how many of the step's G sequences each roster peer computes (protocol v2). Mirror of
// server/daisychain/p2p/shares.py (docs/PROTOCOL.md "Gradient chunks and the exchange
// arithmetic"). The leader calls `allot` at every commit with the peers' latest measured seconds
// per sequence; everyone else only reads the committed shares. Python computes in float64 in a
// fixed order, which is what JavaScript numbers are, so the same operations in the same order
// give the same integers (the protocol traces pin both).
//
// Positions: peer k computes positions [offset(k), offset(k) + shares[k]); position p is row
// p % laneSize of lane floor(p / laneSize), and lane l is the batch version 1 gave rank l.

export const MAX_GLOBAL_BATCH = 4096; // shares multiply int8 values exactly in float32: 127 * 4096 < 2^24

/**
 * Shares for peers whose seconds per sequence are `speeds` (roster order; 0 = not measured),
 * summing to `globalBatch`: proportional to 1 / seconds, largest remainders, ties to the lower
 * rank.
 * @param {readonly number[]} speeds
 * @param {number} globalBatch
 * @returns {number[]}
 */
export function allot(speeds, globalBatch) {
  const n = speeds.length;
  if (!(n >= 1 && globalBatch >= 1)) throw new RangeError(`allot(${n} speeds, ${globalBatch})`);
  const measured = [];
  for (const s of speeds) if (s > 0) measured.push(1.0 / s);
  /** @type {number[]} */
  let weights;
  if (measured.length > 0) {
    let total = 0.0;
    for (const w of measured) total += w;
    const unknown = total / measured.length;
    weights = speeds.map((s) => (s > 0 ? 1.0 / s : unknown));
  } else {
    weights = new Array(n).fill(1.0);
  }
  let whole = 0.0;
  for (const w of weights) whole += w;
  const quotas = weights.map((w) => (globalBatch * w) / whole);
  const out = quotas.map((q) => Math.floor(q));
  let left = globalBatch;
  for (const s of out) left -= s;
  // Largest remainder first; equal remainders go to the lower rank (Array.prototype.sort is
  // stable, as Python's sorted() is).
  const rem = quotas.map((q, k) => q - out[k]);
  const order = [...Array(n).keys()].sort((a, b) => (rem[a] > rem[b] ? -1 : rem[a] < rem[b] ? 1 : 0));
  for (const k of order.slice(0, left)) out[k] += 1;
  return out;
}

/**
 * Cumulative shares c[0..N]: peer k computes positions [c[k], c[k + 1]).
 * @param {readonly number[]} shares
 */
export function offsets(shares) {
  const out = [0];
  for (const s of shares) out.push(out[out.length - 1] + s);
  return out;
}

/**
 * Positions [first, first + count) cut at lane boundaries: pieces `{lane, row, rows}` of at most
 * `laneSize` rows each (a peer never holds more than one lane's activations).
 * @param {number} first
 * @param {number} count
 * @param {number} laneSize
 */
export function pieces(first, count, laneSize) {
  /** @type {Readonly<{lane: number, row: number, rows: number}>[]} */
  const out = [];
  let p = first;
  const end = first + count;
  while (p < end) {
    const lane = Math.floor(p / laneSize);
    const row = p - lane * laneSize;
    const rows = Math.min(laneSize - row, end - p);
    out.push(Object.freeze({ lane, row, rows }));
    p += rows;
  }
  return out;
}

/** @typedef {Readonly<{index: number, lane: number, row: number, rows: number}>} RoundPiece */

export const CUT_SHARE = 'share'; // one inner step per batch index, of the peer's share
export const CUT_BATCH = 'batch'; // inner steps of the run's batch: a bigger share takes more
/** @type {readonly string[]} */
export const CUTS = Object.freeze([CUT_SHARE, CUT_BATCH]);

/**
 * An outer round's inner steps at one peer (Python's shares.round_steps; docs/PROTOCOL.md, "A
 * round at a peer"): its positions [first, first + count) of every batch index in `indices`, in
 * that order, as a list of steps, each a list of pieces {index, lane, row, rows}. `cut` 'share':
 * one step per index, cut at lane boundaries; 'batch': steps of `batch` sequences (the last takes
 * what is left), cut within a step at lane and batch-index boundaries.
 * @param {Iterable<number>} indices
 * @param {number} first
 * @param {number} count
 * @param {number} batch
 * @param {string} [cut]
 * @returns {RoundPiece[][]}
 */
export function roundSteps(indices, first, count, batch, cut = CUT_SHARE) {
  if (!(batch >= 1 && count >= 0 && CUTS.includes(cut))) {
    throw new RangeError(`roundSteps(batch ${batch}, count ${count}, cut ${cut})`);
  }
  if (cut === CUT_SHARE) {
    if (count === 0) return [];
    return [...indices].map((index) => pieces(first, count, batch).map((p) =>
      Object.freeze({ index, lane: p.lane, row: p.row, rows: p.rows })));
  }
  /** @type {RoundPiece[][]} */
  const out = [];
  /** @type {RoundPiece[]} */
  let step = [];
  let filled = 0;
  for (const index of indices) {
    for (const p of pieces(first, count, batch)) {
      let { row, rows: left } = p;
      while (left > 0) {
        const take = Math.min(left, batch - filled);
        step.push(Object.freeze({ index, lane: p.lane, row, rows: take }));
        row += take;
        left -= take;
        filled += take;
        if (filled === batch) {
          out.push(step);
          step = [];
          filled = 0;
        }
      }
    }
  }
  if (step.length > 0) out.push(step);
  return out;
}

/**
 * Why a roster's shares are not acceptable for the run, or null.
 * @param {readonly number[]} shares
 * @param {number} peers
 * @param {number} globalBatch
 */
export function check(shares, peers, globalBatch) {
  if (shares.length !== peers) return `${shares.length} shares for ${peers} roster peers`;
  if (shares.some((s) => s < 0)) return 'a share is negative';
  let sum = 0;
  for (const s of shares) sum += s;
  if (sum !== globalBatch) return `shares sum to ${sum}, the run's global batch is ${globalBatch}`;
  return null;
}
