// @ts-check
// The run: its phases, the committed rosters, leader succession and the sync guard's report.
// Mirror of server/daisychain/p2p/run.py (docs/PROTOCOL.md "Run lifecycle", "Rosters").
//
//   lobby --config--> configured --first roster--> training --stop/done/fork--> stopped
//   lobby/configured --stop--> stopped
//
// Everything here is pure and deterministic: every peer applying the same rules to the same
// committed roster reaches the same answer, which is why failover needs no election.

export const HISTORY_STEPS = 8; // steps of gradient pieces every peer keeps for repair

/**
 * Where the machine and its parts say what they do: `log(level, text)`.
 * @typedef {'debug' | 'info' | 'warning' | 'error'} LogLevel
 * @typedef {(level: LogLevel, text: string) => void} Log
 */

export const Phase = Object.freeze({
  LOBBY: 'lobby', CONFIGURED: 'configured', TRAINING: 'training', STOPPED: 'stopped',
});
/** @typedef {typeof Phase[keyof typeof Phase]} PhaseName */

/** @type {Readonly<Record<PhaseName, readonly PhaseName[]>>} */
const ALLOWED = {
  lobby: ['configured', 'stopped'],
  configured: ['training', 'stopped'],
  training: ['stopped'],
  stopped: [],
};

/** An action that the current phase does not allow. */
export class InvalidStateError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'InvalidStateError';
  }
}

/** The phase of one peer's view of the run; `transition` is the one place it changes. */
export class RunPhase {
  /**
   * @param {string} name  who logs
   * @param {Log} [log]
   */
  constructor(name, log = () => {}) {
    this.name = name;
    /** @type {PhaseName} */
    this.phase = Phase.LOBBY;
    this.log = log;
  }

  /**
   * @param {PhaseName} next
   * @param {string} why
   */
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
  /**
   * @param {number} step
   * @param {number} round
   * @param {readonly string[]} peers
   * @param {readonly number[]} shares
   */
  constructor(step, round, peers, shares) {
    this.step = step;
    this.round = round;
    this.peers = Object.freeze([...peers]);
    this.shares = Object.freeze([...shares]);
    Object.freeze(this);
  }

  /** @param {string} peer */
  rank(peer) {
    const i = this.peers.indexOf(peer);
    if (i < 0) throw new RangeError(`${peer} is not in the roster of step ${this.step}`);
    return i;
  }

  /** @param {string} peer */
  share(peer) {
    return this.shares[this.rank(peer)];
  }
}

/**
 * Roster order is ascending peer id (ids are ASCII, so code-unit order is Python's).
 * @param {Iterable<string>} candidates
 * @returns {string[]}
 */
export function makeRoster(candidates) {
  return [...new Set(candidates)].sort();
}

/**
 * The leader after the current one vanished: the first peer of the roster still present.
 * @param {readonly string[]} roster
 * @param {ReadonlySet<string>} gone
 * @returns {string | null}
 */
export function successor(roster, gone) {
  for (const peer of roster) if (!gone.has(peer)) return peer;
  return null;
}

/**
 * "replicas diverged after step S: HASH on ids; HASH on ids" (peers sorted, hashes grouped).
 * @param {number} step
 * @param {ReadonlyMap<string, string>} hashes  peer -> hash
 */
export function describeFork(step, hashes) {
  /** @type {Map<string, string[]>} */
  const groups = new Map();
  for (const peer of [...hashes.keys()].sort()) {
    const digest = /** @type {string} */ (hashes.get(peer)); // one of its keys
    const group = groups.get(digest) ?? [];
    groups.set(digest, group);
    group.push(peer);
  }
  const parts = [...groups].map(([digest, peers]) => `${digest.slice(0, 16)} on ${peers.join(', ')}`);
  return `replicas diverged after step ${step}: ${parts.join('; ')}`;
}

/**
 * null when every reported hash (a Map peer -> hash) is the same, else {step, hashes, message}.
 * @param {number} step
 * @param {ReadonlyMap<string, string>} hashes
 */
export function syncGuard(step, hashes) {
  if (new Set(hashes.values()).size <= 1) return null;
  return { step, hashes: new Map(hashes), message: describeFork(step, hashes) };
}
