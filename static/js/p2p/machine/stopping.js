// How a run ends at this peer (docs/PROTOCOL.md, "Stopping"). Mirror of
// server/daisychain/p2p/machine/stopping.py.
//
// A stop is final: the peer that stops announces it on every open channel, every receiver
// repeats it (its acknowledgement), and a stopping peer keeps its channels until every peer it
// greeted has acknowledged, at most linger_s. Here that is state, not a timer task: the machine
// stays stopped, counts acknowledgements as events arrive, and finishes when none is missing or
// the linger deadline passes.

/** Thrown inside the machine when the run ends; the machine turns it into stopping. */
export class Stopped extends Error {
  constructor(outcome, stop = null) {
    super(outcome.message);
    this.name = 'Stopped';
    this.outcome = outcome;
    this.stop = stop; // the `stop` record to repeat, or null
  }
}

export class Stopping {
  constructor(log = () => {}) {
    this.outcome = null;
    this.stop = null; // the stop this peer sent or received
    this.stopFrom = new Set(); // peers that announced the stop to this peer
    this.waiting = new Set();
    this.lingerUntil = 0;
    this.finished = false;
    this.log = log;
  }

  get stopped() {
    return this.outcome !== null;
  }

  begin(outcome, stop, waitFor, until) {
    this.outcome = outcome;
    this.stop = stop;
    this.waiting = stop !== null ? new Set([...waitFor].filter((p) => !this.stopFrom.has(p))) : new Set();
    this.lingerUntil = until;
  }

  acknowledged(peer) {
    this.waiting.delete(peer);
  }

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
