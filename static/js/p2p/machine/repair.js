// @ts-check
// The repair store: the attempts this peer still holds (the last HISTORY_STEPS steps) and the
// pieces that arrived before their attempt (docs/PROTOCOL.md, "Gradient repair"). Mirror of
// server/daisychain/p2p/machine/repair.py.
//
// Anyone who applied an attempt holds every reduced chunk of it, and every peer holds the
// contributions it sent: a request for either is answered from here.

import { FrameKind } from '../frames.js';
import { message } from '../messages.js';
import { HISTORY_STEPS } from '../run.js';
import { AttemptPhase, keyOf } from './attempt.js';

export const MAX_EARLY = 256; // pieces buffered for attempts this peer has not started yet

/**
 * @typedef {import('./attempt.js').Attempt} Attempt
 * @typedef {import('../frames.js').Payload} Payload
 */

export class RepairStore {
  constructor() {
    /** @type {Map<string, Attempt>} */
    this.attempts = new Map(); // keyOf(step, round) -> Attempt
    /** @type {Map<string, {step: number, pieces: [string, Payload][]}>} */
    this.early = new Map(); // keyOf(step, round) -> {step, pieces: [[peer, payload], ...]}
  }

  /**
   * @param {number} step
   * @param {number} round
   */
  get(step, round) {
    return this.attempts.get(keyOf(step, round)) ?? null;
  }

  /**
   * @param {number} step
   * @param {number} round
   */
  has(step, round) {
    return this.attempts.has(keyOf(step, round));
  }

  /** @param {Attempt} attempt */
  add(attempt) {
    const step = attempt.step;
    this.attempts.set(attempt.key, attempt);
    for (const [k, a] of [...this.attempts]) {
      if (a.step <= step - HISTORY_STEPS) this.attempts.delete(k);
    }
    for (const [k, e] of [...this.early]) {
      if (e.step < step) this.early.delete(k);
    }
  }

  /**
   * The attempt of step still working towards applying, if any.
   * @param {number} step
   */
  live(step) {
    for (const a of this.attempts.values()) if (a.step === step && a.live) return a;
    return null;
  }

  /**
   * The attempt of step this peer applied, if it still holds it.
   * @param {number} step
   */
  applied(step) {
    for (const a of this.attempts.values()) {
      if (a.step === step && a.phase === AttemptPhase.APPLIED) return a;
    }
    return null;
  }

  /**
   * A later round of the same step was committed: earlier ones never apply.
   * @param {number} step
   * @param {number} round
   */
  abandonBefore(step, round) {
    for (const a of this.attempts.values()) {
      if (a.step === step && a.round < round && a.live) a.transition(AttemptPhase.ABANDONED);
    }
  }

  /**
   * A piece of an attempt not started yet (its roster is still on the way): kept, up to two
   * steps ahead and MAX_EARLY pieces.
   * @param {string} peer
   * @param {Payload} p
   * @param {number} myStep
   */
  holdEarly(peer, p, myStep) {
    let buffered = 0;
    for (const e of this.early.values()) buffered += e.pieces.length;
    if (myStep < p.step && p.step <= myStep + 2 && buffered < MAX_EARLY) {
      const k = keyOf(p.step, p.round);
      const held = this.early.get(k) ?? { step: p.step, pieces: [] };
      this.early.set(k, held);
      held.pieces.push([peer, p]);
    }
  }

  /**
   * @param {number} step
   * @param {number} round
   */
  takeEarly(step, round) {
    const k = keyOf(step, round);
    const e = this.early.get(k);
    this.early.delete(k);
    return e === undefined ? [] : e.pieces;
  }

  /**
   * The piece `peer` asks for in a `repair` record, when held ({kind, payload}; null: ignore).
   * @param {string} peer
   * @param {import('../messages.js').Repair} m
   * @returns {{kind: import('../frames.js').Kind, payload: Uint8Array} | null}
   */
  serve(peer, m) {
    const a = this.get(m.step, m.round);
    if (a === null || !(m.chunk >= 0 && m.chunk < a.n)) return null;
    if (m.piece === 'contribution') {
      // Only the chunk's owner may ask for our contribution to it (and only if we made one).
      const sent = a.sentPiece(m.chunk);
      if (sent !== null && a.roster.peers[m.chunk] === peer) {
        return { kind: FrameKind.CONTRIBUTION, payload: sent };
      }
      return null;
    }
    const reduced = a.reducedPayload.get(m.chunk);
    if (reduced !== undefined) {
      return { kind: FrameKind.REDUCED, payload: reduced };
    }
    return null;
  }
}

/**
 * What to ask for again ([peer, repair record] pairs): a missing contribution from its sender, a
 * missing reduced chunk from every roster peer (anyone who applied the attempt can serve it).
 * @param {Attempt} a
 * @param {string} me
 * @param {ReadonlySet<string>} gone
 * @param {string} run
 */
export function requests(a, me, gone, run) {
  const { step, round } = a;
  /** @type {[string, import('../messages.js').Repair][]} */
  const out = [];
  if (a.ownsChunk && !a.reduced.has(a.rank)) {
    for (const j of a.contributors) {
      const peer = a.roster.peers[j];
      if (!a.contributions.has(j) && !gone.has(peer)) {
        out.push([peer, message('repair', { run, step, round, piece: 'contribution', chunk: a.rank })]);
      }
    }
  }
  for (const k of a.chunks) {
    if (a.reduced.has(k)) continue;
    for (const peer of a.roster.peers) {
      if (peer !== me && !gone.has(peer)) {
        out.push([peer, message('repair', { run, step, round, piece: 'reduced', chunk: k })]);
      }
    }
  }
  return out;
}
