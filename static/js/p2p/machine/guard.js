// @ts-check
// The sync guard's state (docs/PROTOCOL.md, "Sync guard"): every peer's published hash of every
// recent attempt, and the reference kernel probe every device must publish. Mirror of
// server/daisychain/p2p/machine/guard.py.

import { HISTORY_STEPS, syncGuard } from '../run.js';
import { keyOf } from './attempt.js';

/** The guard fired: `message` and `hashes` (a Map) go into `stop fork`. */
export class Fork extends Error {
  /**
   * @param {string} message
   * @param {ReadonlyMap<string, string>} hashes
   */
  constructor(message, hashes) {
    super(message);
    this.name = 'Fork';
    this.hashes = hashes;
  }
}

/**
 * The hashes of one attempt: `have` peer -> hash, `backends` peer -> the backend it named.
 * @typedef {{step: number, have: Map<string, string>, backends: Map<string, string>}} Heard
 * What tally answers.
 * @typedef {{step: number, round: number, hash: string, same: string[], differ: string[],
 *   missing: string[], backends: Map<string, number>, byPeer: Map<string, string>}} Tally
 */

export class SyncGuard {
  /**
   * @param {string} me
   * @param {string} referenceProbe
   */
  constructor(me, referenceProbe) {
    this.me = me;
    this.referenceProbe = referenceProbe;
    /** @type {Map<string, Heard>} */
    this.hashes = new Map(); // keyOf(step, round) -> {step, have: Map peer -> hash, backends}
  }

  /**
   * A copy of the hashes of attempt (step, round) heard so far (Map peer -> hash).
   * @param {number} step
   * @param {number} round
   */
  have(step, round) {
    return new Map(this.hashes.get(keyOf(step, round))?.have ?? []);
  }

  /**
   * Every device's kernel probe equals the reference's: a device whose kernel computes other
   * bits is named with its backend (its weights would fork next).
   * @param {string} peer
   * @param {number} step
   * @param {string} probe
   * @param {string} backend
   */
  checkProbe(peer, step, probe, backend) {
    if (probe === this.referenceProbe) return;
    const who = peer === this.me ? 'this peer' : 'peer';
    throw new Fork(
      `kernel probe mismatch after step ${step}: ${who} ${peer} (backend ${backend}) ` +
      `published ${probe.slice(0, 16)}..., every device must publish ` +
      `${this.referenceProbe.slice(0, 16)}...; restart ${peer} with --backend numpy`,
      new Map([[peer, probe]]));
  }

  /**
   * A hash of attempt (step, round), with the backend its `hash` message named (kept for the
   * page's read-out only, see tally); throws Fork once ours is in and any differs.
   * @param {string} peer
   * @param {number} step
   * @param {number} round
   * @param {string} digest
   * @param {string} [backend]
   */
  record(peer, step, round, digest, backend = '') {
    const key = keyOf(step, round);
    const heard = this.hashes.get(key) ?? { step, have: new Map(), backends: new Map() };
    this.hashes.set(key, heard);
    heard.have.set(peer, digest);
    heard.backends.set(peer, backend);
    for (const [k, entry] of [...this.hashes]) {
      if (entry.step <= step - HISTORY_STEPS) this.hashes.delete(k);
    }
    const have = this.hashes.get(key)?.have ?? new Map();
    if (!have.has(this.me)) return;
    const report = syncGuard(step, have);
    if (report !== null) throw new Fork(report.message, report.hashes);
  }

  /**
   * [peers whose hash of `step` equals ours, peers that reported one].
   * @param {number} step
   * @returns {[number, number]}
   */
  agreement(step) {
    for (const { step: s, have } of this.hashes.values()) {
      if (s === step && have.has(this.me)) {
        const mine = have.get(this.me);
        let same = 0;
        for (const h of have.values()) if (h === mine) same++;
        return [same, have.size];
      }
    }
    return [0, 0];
  }

  /**
   * Read-only, for the page's hash read-out (static/js/page/live.js): of `roster`, the peers
   * whose published hash of attempt (step, round) equals ours (`same`, ours included), differs
   * (`differ`) or is not in yet (`missing`), and the backend each of those that published one
   * named in its `hash` message (`byPeer`: Map peer -> backend; `backends`: Map backend ->
   * count). null when our own hash of that attempt is not in (not applied yet, or older than
   * the history kept).
   * Changes nothing: no effect, no trace depends on it.
   * @param {number} step
   * @param {number} round
   * @param {Iterable<string>} roster
   * @returns {Tally | null}
   */
  tally(step, round, roster) {
    const entry = this.hashes.get(keyOf(step, round));
    if (entry === undefined || !entry.have.has(this.me)) return null;
    const hash = /** @type {string} */ (entry.have.get(this.me)); // has it: checked above
    /** @type {Tally} */
    const out = { step, round, hash, same: [], differ: [], missing: [], backends: new Map(),
      byPeer: new Map() };
    for (const peer of roster) {
      if (!entry.have.has(peer)) {
        out.missing.push(peer);
        continue;
      }
      (entry.have.get(peer) === hash ? out.same : out.differ).push(peer);
      const b = entry.backends.get(peer) || 'unknown';
      out.byPeer.set(peer, b);
      out.backends.set(b, (out.backends.get(b) ?? 0) + 1);
    }
    return out;
  }
}
