// @ts-check
// A follower's state sync (docs/PROTOCOL.md, "Join, leave, failover"): it asks the leader for its
// state once it has channels to every roster peer (it enters the roster that follows the
// checkpoint and must reach every member), then waits for the checkpoint frame. Mirror of
// server/daisychain/p2p/machine/statesync.py.
//
//   idle --want--> wanted --sent--> awaiting --done--> idle

export const SyncState = Object.freeze({
  IDLE: 'idle',
  WANTED: 'wanted', // sync-request not sent yet: waiting for channels to the roster
  AWAITING: 'awaiting', // sync-request sent; a checkpoint frame is expected
});
/** @typedef {typeof SyncState[keyof typeof SyncState]} SyncStateName */

export class StateSync {
  /** @param {import('../run.js').Log} [log] */
  constructor(log = () => {}) {
    /** @type {SyncStateName} */
    this.state = SyncState.IDLE;
    this.log = log;
  }

  get awaiting() {
    return this.state === SyncState.AWAITING;
  }

  want() {
    if (this.state === SyncState.IDLE) this.set(SyncState.WANTED);
  }

  sent() {
    this.set(SyncState.AWAITING);
  }

  done() {
    this.set(SyncState.IDLE);
  }

  /** @param {SyncStateName} next */
  set(next) {
    const old = this.state;
    this.state = next;
    if (old !== next) this.log('debug', `state sync ${old} -> ${next}`);
  }
}
