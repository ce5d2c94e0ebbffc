// The sync guard's state (docs/PROTOCOL.md, "Sync guard"): every peer's published hash of every
// recent attempt, and the reference kernel probe every device must publish. Mirror of
// server/daisychain/p2p/machine/guard.py.

import { HISTORY_STEPS, syncGuard } from '../run.js';
import { keyOf } from './attempt.js';

/** The guard fired: `message` and `hashes` (a Map) go into `stop fork`. */
export class Fork extends Error {
  constructor(message, hashes) {
    super(message);
    this.name = 'Fork';
    this.hashes = hashes;
  }
}

export class SyncGuard {
  constructor(me, referenceProbe) {
    this.me = me;
    this.referenceProbe = referenceProbe;
    this.hashes = new Map(); // keyOf(step, round) -> {step, have: Map peer -> hash}
  }

  /** A copy of the hashes of attempt (step, round) heard so far (Map peer -> hash). */
  have(step, round) {
    return new Map(this.hashes.get(keyOf(step, round))?.have ?? []);
  }

  /**
   * Every device's kernel probe equals the reference's: a device whose kernel computes other
   * bits is named with its backend (its weights would fork next).
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

  /** A hash of attempt (step, round); throws Fork once ours is in and any differs. */
  record(peer, step, round, digest) {
    const key = keyOf(step, round);
    if (!this.hashes.has(key)) this.hashes.set(key, { step, have: new Map() });
    this.hashes.get(key).have.set(peer, digest);
    for (const [k, entry] of [...this.hashes]) {
      if (entry.step <= step - HISTORY_STEPS) this.hashes.delete(k);
    }
    const have = this.hashes.get(key)?.have ?? new Map();
    if (!have.has(this.me)) return;
    const report = syncGuard(step, have);
    if (report !== null) throw new Fork(report.message, report.hashes);
  }

  /** [peers whose hash of `step` equals ours, peers that reported one]. */
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
}
