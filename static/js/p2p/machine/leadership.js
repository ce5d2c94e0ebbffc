// @ts-check
// Who leads, what was committed, and what the leader has heard (docs/PROTOCOL.md, "Rosters" and
// "Join, leave, failover"). Mirror of server/daisychain/p2p/machine/leadership.py.
//
// The leader is a role: the peer that leads commits rosters; when it is gone every peer computes
// the same successor from the last committed roster (run.successor), so no election is needed. A
// roster from a peer that is not (yet) this peer's leader is held, and applied if the successor
// rule later names its sender.

import { successor } from '../run.js';

/** @typedef {import('../run.js').CommittedRoster} CommittedRoster */

export class Leadership {
  /**
   * @param {string} me
   * @param {import('../run.js').Log} [log]
   */
  constructor(me, log = () => {}) {
    this.me = me;
    this.log = log;
    /** @type {string | null} */
    this.leader = null;
    this.leadsOwnRun = false; // started to lead (refuses any other config)
    this.minPeers = 1;
    /** @type {CommittedRoster | null} */
    this.roster = null; // the last committed roster accepted (CommittedRoster)
    /** @type {Map<string, CommittedRoster>} */
    this.held = new Map(); // sender -> CommittedRoster
    // What the leader has heard (kept by every peer: a successor leads with it).
    /** @type {Map<string, import('../messages.js').Ready>} */
    this.ready = new Map(); // peer -> `ready` record
    /** @type {Set<string>} */
    this.syncWanted = new Set();
    /** @type {Map<string, Set<string>>} */
    this.missingReports = new Map(); // keyOf(step, round) -> Set of peers
    // Seconds per sequence each peer last reported (ready, hash; ours from compute-done): what
    // the leader's shares are made of (shares.allot). 0: not measured.
    /** @type {Map<string, number>} */
    this.speeds = new Map(); // peer -> seq_s
    // Peers whose ready or sync-request said they train on private data: the run's record of it
    // (kept when a peer leaves: it trained on it while it was there).
    /** @type {Set<string>} */
    this.privateData = new Set();
    this.endRequested = ''; // leader: end the run at the next boundary (the reason)
  }

  get isLeader() {
    return this.leader !== null && this.leader === this.me;
  }

  /** @param {number} minPeers */
  lead(minPeers) {
    this.leader = this.me;
    this.leadsOwnRun = true;
    this.minPeers = minPeers;
  }

  /**
   * @param {string} sender
   * @param {CommittedRoster} roster
   */
  hold(sender, roster) {
    this.log('info', `${this.me}: roster from ${sender} held (leader is ${this.leader})`);
    this.held.set(sender, roster);
  }

  /**
   * The leader is gone: the successor of the last committed roster (null: nobody).
   * @param {ReadonlySet<string>} gone
   */
  failOver(gone) {
    if (this.roster === null) throw new Error('failover before any roster');
    const old = this.leader;
    this.leader = successor(this.roster.peers, gone);
    this.log('info', `${this.me}: leader ${old} gone; successor ${this.leader}`);
    return this.leader;
  }

  /**
   * The roster the new leader committed before this peer saw the old one go, if it is not older
   * than the one this peer holds.
   */
  takeHeld() {
    /** @type {CommittedRoster | null} */
    let held = null;
    if (this.leader !== null && this.held.has(this.leader)) {
      held = /** @type {CommittedRoster} */ (this.held.get(this.leader)); // has it
      this.held.delete(this.leader);
    }
    if (held !== null && (this.roster === null || held.step >= this.roster.step)) return held;
    return null;
  }

  /** @param {string} peer */
  forget(peer) {
    this.ready.delete(peer);
    this.speeds.delete(peer);
    this.syncWanted.delete(peer);
  }

  /**
   * Peers whose `ready` state equals the leader's: they may enter the next roster.
   * @param {ReadonlySet<string>} gone
   * @param {number} step
   * @param {string} digest
   */
  eligible(gone, step, digest) {
    return [...this.ready]
      .filter(([p, rd]) => !gone.has(p) && rd.step === step && rd.hash === digest)
      .map(([p]) => p);
  }
}
