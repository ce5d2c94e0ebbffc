// @ts-check
// One attempt (step, round) of the gradient exchange at this peer. Mirror of
// server/daisychain/p2p/machine/attempt.py.
//
//   computing --compute done--> exchanging --all reduced chunks in--> applied
//   computing/exchanging --a later round of the step committed--> abandoned
//
// The attempt holds the pieces of the exchange (docs/PROTOCOL.md, "Gradient chunks and the
// exchange arithmetic"): the contributions to this peer's own chunk, the reduced chunks, and the
// bytes it sent (served again on `repair`). The arithmetic is the pure functions of allreduce.js
// and codec.js, called here: exact integer and pinned float32 rules, part of the machine's
// contract (a trace pins the bytes they produce).

import { weightedMean } from '../../outer/mean.js';
import { chunkBlocks, chunkSlice, reduceChunk } from '../allreduce.js';
import { BLOCK, decode, encode } from '../codec.js';

export const AttemptPhase = Object.freeze({
  COMPUTING: 'computing', // the compute effect is out
  EXCHANGING: 'exchanging', // contributions sent; waiting for pieces
  APPLIED: 'applied',
  ABANDONED: 'abandoned', // superseded by a later round: never applied (its pieces are still
  // served on request, to peers that have not seen the new roster yet)
});
/** @typedef {typeof AttemptPhase[keyof typeof AttemptPhase]} AttemptPhaseName */

/** @type {Readonly<Record<AttemptPhaseName, readonly AttemptPhaseName[]>>} */
const ALLOWED = {
  computing: ['exchanging', 'abandoned'],
  exchanging: ['applied', 'abandoned'],
  applied: [],
  abandoned: [],
};

/**
 * The Map key of an attempt (step, round).
 * @param {number} step
 * @param {number} round
 */
export const keyOf = (step, round) => `${step}/${round}`;

export class Attempt {
  /**
   * @param {import('../run.js').CommittedRoster} roster
   * @param {number} rank  this peer's in the roster
   * @param {number} totalBlocks  of the flat gradient
   * @param {number} now
   * @param {import('../run.js').Log} [log]
   * @param {boolean} [outer]
   */
  constructor(roster, rank, totalBlocks, now, log = () => {}, outer = false) {
    this.roster = roster; // CommittedRoster
    // An outer run's round (docs/PROTOCOL.md, "Outer runs"): the contributions are
    // pseudo-gradients and the chunk's mean is outer/mean.js's token-weighted mean.
    this.outer = outer;
    this.rank = rank;
    this.n = roster.peers.length;
    this.totalBlocks = totalBlocks;
    // Shares (protocol v2): who contributes, and which chunks are not empty.
    this.shares = roster.shares;
    this.globalBatch = roster.shares.reduce((a, b) => a + b, 0);
    /** @type {number[]} */
    this.contributors = [];
    for (let j = 0; j < this.n; j++) if (roster.shares[j] > 0) this.contributors.push(j);
    /** @type {number[]} */
    this.chunks = [];
    for (let k = 0; k < this.n; k++) if (this.chunkBlocks(k) > 0) this.chunks.push(k);
    /** @type {AttemptPhaseName} */
    this.phase = AttemptPhase.COMPUTING;
    /** @type {Map<number, Float32Array>} */
    this.contributions = new Map(); // for my chunk: rank -> Float32Array
    /** @type {Map<number, Float32Array>} */
    this.reduced = new Map(); // chunk -> Float32Array
    /** @type {Map<number, Uint8Array>} */
    this.reducedPayload = new Map(); // chunk -> Uint8Array (served for repair)
    /** @type {readonly Uint8Array[]} */
    this.sent = []; // chunk -> my contribution bytes (served for repair)
    /** @type {Map<number, Uint8Array>} */
    this.early = new Map(); // chunk -> bytes sent before the compute was done
    this.loss = 0;
    this.probe = '';
    this.repairAt = now;
    this.deadline = now;
    this.log = log;
  }

  get step() {
    return this.roster.step;
  }

  get round() {
    return this.roster.round;
  }

  get key() {
    return keyOf(this.roster.step, this.roster.round);
  }

  get computed() {
    return this.sent.length > 0;
  }

  /** Still working towards applying (not applied, not abandoned). */
  get live() {
    return this.phase === AttemptPhase.COMPUTING || this.phase === AttemptPhase.EXCHANGING;
  }

  get applied() {
    return this.phase === AttemptPhase.APPLIED;
  }

  /** @param {AttemptPhaseName} next */
  transition(next) {
    const old = this.phase;
    if (!ALLOWED[old].includes(next)) {
      throw new Error(`attempt ${this.key} is ${old}: cannot become ${next}`);
    }
    this.phase = next;
    this.log('debug', `attempt ${this.key}: ${old} -> ${next}`);
    if (!this.live) {
      // A finished attempt takes no more pieces and serves repairs from the bytes: its float32
      // values would be dead weight. The keys stay: they say which pieces arrived.
      const empty = new Float32Array(0);
      for (const k of this.contributions.keys()) this.contributions.set(k, empty);
      for (const k of this.reduced.keys()) this.reduced.set(k, empty);
    }
  }

  /** @param {number} k */
  chunkBlocks(k) {
    const [first, end] = chunkBlocks(this.totalBlocks, this.shares, k);
    return end - first;
  }

  /** This peer computes a gradient (its share is not 0). */
  get contributes() {
    return this.shares[this.rank] > 0;
  }

  /** This peer reduces a chunk (its chunk is not empty). */
  get ownsChunk() {
    return this.chunks.includes(this.rank);
  }

  /**
   * Chunk `chunk` of our gradient is final while the rest is still being computed; our own
   * chunk's contribution is its dequantized bytes, as in computedWith.
   * @param {number} chunk
   * @param {Uint8Array} payload
   */
  sentEarly(chunk, payload) {
    this.early.set(chunk, payload);
    if (chunk === this.rank) {
      this.contributions.set(this.rank, decode(payload, this.chunkBlocks(this.rank)));
    }
  }

  /**
   * Our contribution to `chunk` once it left (null before, or when we made none).
   * @param {number} chunk
   * @returns {Uint8Array | null}
   */
  sentPiece(chunk) {
    if (!this.contributes || !this.chunks.includes(chunk)) return null;
    if (this.computed) return chunk < this.sent.length ? this.sent[chunk] : null;
    return this.early.get(chunk) ?? null;
  }

  /**
   * Our gradient is in (or, with a share of 0, only the probe): keep what we send, and our own
   * chunk's contribution as the dequantized values of what we encoded (never the float
   * gradient).
   * @param {number} loss
   * @param {readonly Uint8Array[]} payloads
   * @param {string} probe
   */
  computedWith(loss, payloads, probe) {
    this.transition(AttemptPhase.EXCHANGING);
    this.loss = loss;
    this.sent = [...payloads];
    this.probe = probe;
    if (this.contributes && this.ownsChunk && !this.early.has(this.rank)) {
      this.contributions.set(this.rank, decode(payloads[this.rank], this.chunkBlocks(this.rank)));
    }
  }

  /**
   * Our reduced chunk once every contributor's part is in (roster order: the pinned sum order,
   * each weighted by its share); null before, when already reduced, or when our chunk is empty.
   */
  reduce() {
    if (!this.ownsChunk || this.reduced.has(this.rank)) return null;
    if (this.contributors.some((j) => !this.contributions.has(j))) return null;
    // (every contributor's part is in: checked on the line above)
    const parts = this.contributors.map((j) => /** @type {Float32Array} */ (this.contributions.get(j)));
    const weights = this.contributors.map((j) => this.shares[j]);
    // Shares are sequences of every inner step, so weighting by shares is weighting by tokens;
    // the outer mean divides them by their gcd first (docs/OUTER.md, "The mean"), which the
    // per-step rule does not (its bits stay what they were).
    const reduced = this.outer ? weightedMean(parts, weights)
      : reduceChunk(parts, weights, this.globalBatch);
    const { payload, values } = encode(reduced);
    this.reduced.set(this.rank, values);
    this.reducedPayload.set(this.rank, payload);
    return payload;
  }

  complete() {
    return this.phase === AttemptPhase.EXCHANGING && this.chunks.every((k) => this.reduced.has(k));
  }

  /** The flat mean gradient, once complete() (every chunk reduced). */
  meanGradient() {
    const flat = new Float32Array(this.totalBlocks * BLOCK);
    for (const k of this.chunks) {
      const reduced = /** @type {Float32Array} */ (this.reduced.get(k)); // complete(): all in
      flat.set(reduced, chunkSlice(this.totalBlocks, this.shares, k)[0]);
    }
    return flat;
  }

  /** Roster peers whose pieces this peer still waits for (a Set). */
  missingFrom() {
    /** @type {Set<string>} */
    const out = new Set();
    if (this.applied) return out;
    const peers = this.roster.peers;
    if (this.ownsChunk && !this.reduced.has(this.rank)) {
      for (const j of this.contributors) if (!this.contributions.has(j)) out.add(peers[j]);
    }
    for (const k of this.chunks) if (!this.reduced.has(k)) out.add(peers[k]);
    out.delete(peers[this.rank]);
    return out;
  }
}
