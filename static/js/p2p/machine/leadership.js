// Who leads, what was committed, and what the leader has heard (docs/PROTOCOL.md, "Rosters" and
// "Join, leave, failover"). Mirror of server/daisychain/p2p/machine/leadership.py.
//
// The leader is a role: the peer that leads commits rosters; when it is gone every peer computes
// the same successor from the last committed roster (run.successor), so no election is needed. A
// roster from a peer that is not (yet) this peer's leader is held, and applied if the successor
// rule later names its sender.

import { successor } from '../run.js';

export class Leadership {
  constructor(me, log = () => {}) {
    this.me = me;
    this.log = log;
    this.leader = null;
    this.leadsOwnRun = false; // started to lead (refuses any other config)
    this.minPeers = 1;
    this.roster = null; // the last committed roster accepted (CommittedRoster)
    this.held = new Map(); // sender -> CommittedRoster
    // What the leader has heard (kept by every peer: a successor leads with it).
    this.ready = new Map(); // peer -> `ready` record
    this.syncWanted = new Set();
    this.missingReports = new Map(); // keyOf(step, round) -> Set of peers
    // Seconds per sequence each peer last reported (ready, hash; ours from compute-done): what
    // the leader's shares are made of (shares.allot). 0: not measured.
    this.speeds = new Map(); // peer -> seq_s
    // Peers whose ready or sync-request said they train on private data: the run's record of it
    // (kept when a peer leaves: it trained on it while it was there).
    this.privateData = new Set();
    this.endRequested = ''; // leader: end the run at the next boundary (the reason)
  }

  get isLeader() {
    return this.leader !== null && this.leader === this.me;
  }

  lead(minPeers) {
    this.leader = this.me;
    this.leadsOwnRun = true;
    this.minPeers = minPeers;
  }

  hold(sender, roster) {
    this.log('info', `${this.me}: roster from ${sender} held (leader is ${this.leader})`);
    this.held.set(sender, roster);
  }

  /** The leader is gone: the successor of the last committed roster (null: nobody). */
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
    let held = null;
    if (this.leader !== null && this.held.has(this.leader)) {
      held = this.held.get(this.leader);
      this.held.delete(this.leader);
    }
    if (held !== null && (this.roster === null || held.step >= this.roster.step)) return held;
    return null;
  }

  forget(peer) {
    this.ready.delete(peer);
    this.speeds.delete(peer);
    this.syncWanted.delete(peer);
  }

  /** Peers whose `ready` state equals the leader's: they may enter the next roster. */
  eligible(gone, step, digest) {
    return [...this.ready]
      .filter(([p, rd]) => !gone.has(p) && rd.step === step && rd.hash === digest)
      .map(([p]) => p);
  }
}
