// The run: its phases, the committed rosters, leader succession and the sync guard's report.
// Mirror of server/daisychain/p2p/run.py (docs/PROTOCOL.md "Run lifecycle", "Rosters").
//
//   lobby --config--> configured --first roster--> training --stop/done/fork--> stopped
//   lobby/configured --stop--> stopped
//
// Everything here is pure and deterministic: every peer applying the same rules to the same
// committed roster reaches the same answer, which is why failover needs no election.

export const HISTORY_STEPS = 8; // steps of gradient pieces every peer keeps for repair

export const Phase = Object.freeze({
  LOBBY: 'lobby', CONFIGURED: 'configured', TRAINING: 'training', STOPPED: 'stopped',
});

const ALLOWED = {
  lobby: ['configured', 'stopped'],
  configured: ['training', 'stopped'],
  training: ['stopped'],
  stopped: [],
};

/** An action that the current phase does not allow. */
export class InvalidStateError extends Error {
  constructor(message) {
    super(message);
    this.name = 'InvalidStateError';
  }
}

/** The phase of one peer's view of the run; `transition` is the one place it changes. */
export class RunPhase {
  constructor(name, log = () => {}) {
    this.name = name;
    this.phase = Phase.LOBBY;
    this.log = log;
  }

  transition(next, why) {
    const old = this.phase;
    if (next === old) return;
    if (!ALLOWED[old].includes(next)) {
      throw new InvalidStateError(`run is ${old}: cannot become ${next} (${why})`);
    }
    this.phase = next;
    this.log('info', `${this.name}: run ${old} -> ${next} (${why})`);
  }
}

/**
 * A committed roster: the step it computes (1-based), its round, its peers in rank order (= the
 * summation order) and their shares (sequences each computes, summing to the global batch).
 */
export class CommittedRoster {
  constructor(step, round, peers, shares) {
    this.step = step;
    this.round = round;
    this.peers = Object.freeze([...peers]);
    this.shares = Object.freeze([...shares]);
    Object.freeze(this);
  }

  rank(peer) {
    const i = this.peers.indexOf(peer);
    if (i < 0) throw new RangeError(`${peer} is not in the roster of step ${this.step}`);
    return i;
  }

  share(peer) {
    return this.shares[this.rank(peer)];
  }
}

/** Roster order is ascending peer id (ids are ASCII, so code-unit order is Python's). */
export function makeRoster(candidates) {
  return [...new Set(candidates)].sort();
}

/** The leader after the current one vanished: the first peer of the roster still present. */
export function successor(roster, gone) {
  for (const peer of roster) if (!gone.has(peer)) return peer;
  return null;
}

/** "replicas diverged after step S: HASH on ids; HASH on ids" (peers sorted, hashes grouped). */
export function describeFork(step, hashes) {
  const groups = new Map();
  for (const peer of [...hashes.keys()].sort()) {
    const digest = hashes.get(peer);
    if (!groups.has(digest)) groups.set(digest, []);
    groups.get(digest).push(peer);
  }
  const parts = [...groups].map(([digest, peers]) => `${digest.slice(0, 16)} on ${peers.join(', ')}`);
  return `replicas diverged after step ${step}: ${parts.join('; ')}`;
}

/** null when every reported hash (a Map peer -> hash) is the same, else {step, hashes, message}. */
export function syncGuard(step, hashes) {
  if (new Set(hashes.values()).size <= 1) return null;
  return { step, hashes: new Map(hashes), message: describeFork(step, hashes) };
}
