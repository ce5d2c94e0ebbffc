// @ts-check
// How a run ends at this peer (docs/PROTOCOL.md, "Stopping"). Mirror of
// server/daisychain/p2p/machine/stopping.py.
//
// A stop is final: the peer that stops announces it on every open channel, every receiver
// repeats it (its acknowledgement), and a stopping peer keeps its channels until every peer it
// greeted has acknowledged, at most linger_s. Here that is state, not a timer task: the machine
// stays stopped, counts acknowledgements as events arrive, and finishes when none is missing or
// the linger deadline passes.

/**
 * @typedef {import('./effects.js').Outcome} Outcome
 * @typedef {import('../messages.js').Stop} Stop
 */

/** Thrown inside the machine when the run ends; the machine turns it into stopping. */
export class Stopped extends Error {
  /**
   * @param {Outcome} outcome
   * @param {Stop | null} [stop]  the `stop` record to announce
   */
  constructor(outcome, stop = null) {
    super(outcome.message);
    this.name = 'Stopped';
    this.outcome = outcome;
    this.stop = stop; // the `stop` record to repeat, or null
  }
}

export class Stopping {
  /** @param {import('../run.js').Log} [log] */
  constructor(log = () => {}) {
    /** @type {Outcome | null} */
    this.outcome = null;
    /** @type {Stop | null} */
    this.stop = null; // the stop this peer sent or received
    /** @type {Set<string>} */
    this.stopFrom = new Set(); // peers that announced the stop to this peer
    /** @type {Set<string>} */
    this.waiting = new Set();
    this.lingerUntil = 0;
    this.finished = false;
    this.log = log;
  }

  get stopped() {
    return this.outcome !== null;
  }

  /**
   * @param {Outcome} outcome
   * @param {Stop | null} stop
   * @param {Iterable<string>} waitFor
   * @param {number} until
   */
  begin(outcome, stop, waitFor, until) {
    this.outcome = outcome;
    this.stop = stop;
    this.waiting = stop !== null ? new Set([...waitFor].filter((p) => !this.stopFrom.has(p))) : new Set();
    this.lingerUntil = until;
  }

  /** @param {string} peer */
  acknowledged(peer) {
    this.waiting.delete(peer);
  }

  /** @param {number} now */
  done(now) {
    if (this.finished) return false;
    if (this.waiting.size > 0 && now < this.lingerUntil) return false;
    if (this.waiting.size > 0) {
      this.log('warning', `no stop acknowledgement from ${[...this.waiting].sort().join(', ')}`);
    }
    this.finished = true;
    return true;
  }
}
