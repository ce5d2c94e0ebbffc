// @ts-check
// The run this tab was in, remembered so that when the tab comes back into it by itself (after
// a reload, a freeze, a lost connection) the page can say so. The protocol needs no memory for
// that: a page follows the first run of its group, and a newcomer asks the leader for the state
// (docs/PROTOCOL.md "Join, leave, failover"). What the person needs is to know that this is the
// run they were in, not a new one, and why the tab had left it.
//
// Kept in sessionStorage: it belongs to this tab (another tab of the same site is another
// device), survives a reload of it and goes with it. A tab leaves a run in one of three ways the
// page sees coming, each noted before it happens: it is reloaded or closed ('pagehide'), the
// browser freezes it ('freeze', as a phone does to a background tab; Chromium then closes its
// signaling connection), or its session ends in an error (the signaling connection came back
// under a new id). A run that ended for good (done, stopped by its leader, forked) is forgotten:
// a later run with another id is simply followed.

export const RUN_KEY = 'daisychain.run';
export const WHY = /** @type {const} */ (['reloaded', 'frozen', 'disconnected']);
/** @typedef {typeof WHY[number]} Why */

/** What the tab remembers: the run's id and, once it left it, why. */
/** @typedef {{run: string, why: Why | null}} Memory */

/** @typedef {{getItem(key: string): string | null, setItem(key: string, value: string): void,
 *   removeItem(key: string): void}} StorageLike */

const RUN_ID = /^[0-9a-f]{16}$/;

/** The words for each way of leaving, after "Rejoined NAME’s run by itself: ". */
const REASONS = {
  reloaded: 'this tab was reloaded',
  frozen: 'the browser had paused this tab',
  disconnected: 'this tab had lost its connection',
};

export class RunMemory {
  /** @param {StorageLike | null} storage  sessionStorage, or null where the browser refuses it */
  constructor(storage) {
    this.storage = storage;
  }

  /** The remembered run, or null (nothing kept, or what is kept is not a memory of ours). */
  read() {
    let text = null;
    try {
      text = this.storage?.getItem(RUN_KEY) ?? null;
    } catch {
      return null; // storage refused
    }
    if (text === null) return null;
    let v;
    try {
      v = JSON.parse(text);
    } catch {
      return null;
    }
    if (typeof v !== 'object' || v === null || typeof v.run !== 'string' || !RUN_ID.test(v.run)) return null;
    if (v.why !== null && !WHY.includes(v.why)) return null;
    return /** @type {Memory} */ ({ run: v.run, why: v.why });
  }

  /** @param {Memory | null} m */
  write(m) {
    try {
      if (m === null) this.storage?.removeItem(RUN_KEY);
      else this.storage?.setItem(RUN_KEY, JSON.stringify(m));
    } catch {
      // storage refused: the page still rejoins, it only cannot say so
    }
  }

  /**
   * This tab is in run `run` now. Returns why it had left it when it was in it before (it came
   * back), else null (a run it was not in).
   * @param {string} run
   * @returns {Why | null}
   */
  entered(run) {
    if (!RUN_ID.test(run)) throw new Error(`not a run id: ${JSON.stringify(run)}`);
    const before = this.read();
    this.write({ run, why: null });
    return before !== null && before.run === run ? (before.why ?? 'disconnected') : null;
  }

  /**
   * The tab is leaving its run for `why`; a first reason is kept (a freeze that ends in a lost
   * connection was a freeze). Nothing to do outside a run.
   * @param {Why} why
   */
  leaving(why) {
    if (!WHY.includes(why)) throw new Error(`not a way of leaving a run: ${JSON.stringify(why)}`);
    const m = this.read();
    if (m !== null && m.why === null) this.write({ run: m.run, why });
  }

  /** The run `run` is over for good (done, stopped by its leader, forked): forget it. */
  ended(/** @type {string} */ run) {
    const m = this.read();
    if (m !== null && m.run === run) this.write(null);
  }
}

/**
 * The line the page shows when this tab came back into its run.
 * @param {Why} why
 * @param {string} leaderName
 */
export function rejoinedText(why, leaderName) {
  return `Rejoined ${leaderName}’s run by itself: ${REASONS[why]}. ` +
    'It took the current state from the group and trains on.';
}
