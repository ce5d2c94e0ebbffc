// @ts-check
// The peer table: one entry per data channel this peer ever had, with an explicit state. Mirror
// of server/daisychain/p2p/machine/peers.py.
//
//   open --hello--> greeted --leave/closed/peer-left/rejected--> gone
//   open --closed/peer-left/rejected--> gone
//
// `gone` is final (docs/PROTOCOL.md, "Peer connections"). Whether the channel itself is still
// open is kept apart: a gone peer's channel can stay open (its `stop` may still arrive on it),
// and a stopping peer repeats its `stop` on every open channel.

import { Reassembler } from '../frames.js';

export const PeerState = Object.freeze({ OPEN: 'open', GREETED: 'greeted', GONE: 'gone' });
/**
 * @typedef {typeof PeerState[keyof typeof PeerState]} PeerStateName
 * @typedef {{state: PeerStateName, openedAt: number, reassembler: Reassembler, greeted: boolean,
 *   channelOpen: boolean}} PeerEntry
 */

export class PeerTable {
  /**
   * `limit(kind)`: the largest payload of a frame kind accepted now (frames.js Reassembler).
   * @param {string} me
   * @param {(kind: import('../frames.js').Kind) => number} limit
   * @param {import('../run.js').Log} [log]
   */
  constructor(me, limit, log = () => {}) {
    this.me = me;
    this.limit = limit;
    this.log = log;
    /** @type {Map<string, PeerEntry>} */
    this.peers = new Map(); // peer -> {state, openedAt, reassembler, greeted, channelOpen}
    /** @type {Set<string>} */
    this.goneSet = new Set(); // every gone peer (kept in step with the entries; read often)
  }

  /** @param {string} peer */
  get(peer) {
    return this.peers.get(peer) ?? null;
  }

  /** @param {string} peer */
  state(peer) {
    return this.peers.get(peer)?.state ?? null;
  }

  /**
   * @param {string} peer
   * @param {number} now
   */
  opened(peer, now) {
    if (this.peers.has(peer)) return; // never re-admitted on the same connection
    this.peers.set(peer, {
      state: PeerState.OPEN, openedAt: now, reassembler: new Reassembler(this.limit),
      greeted: false, channelOpen: true,
    });
  }

  /** @param {string} peer  one with a channel (state() is not null) */
  greet(peer) {
    const entry = /** @type {PeerEntry} */ (this.peers.get(peer));
    entry.greeted = true;
    this.set(peer, entry, PeerState.GREETED);
  }

  /**
   * Mark `peer` gone; true when it was not gone before.
   * @param {string} peer
   */
  gone(peer) {
    const entry = this.peers.get(peer);
    if (entry === undefined) {
      this.peers.set(peer, {
        state: PeerState.GONE, openedAt: 0, reassembler: new Reassembler(this.limit),
        greeted: false, channelOpen: false,
      });
      this.goneSet.add(peer);
      this.log('info', `${this.me}: peer ${peer}: -> gone`);
      return true;
    }
    if (entry.state === PeerState.GONE) return false;
    this.set(peer, entry, PeerState.GONE);
    return true;
  }

  /** @param {string} peer */
  channelClosed(peer) {
    const entry = this.peers.get(peer);
    if (entry !== undefined) entry.channelOpen = false;
  }

  /**
   * @param {string} peer
   * @param {PeerEntry} entry
   * @param {PeerStateName} next
   */
  set(peer, entry, next) {
    const old = entry.state;
    if (old === next || old === PeerState.GONE) return;
    entry.state = next;
    if (next === PeerState.GONE) this.goneSet.add(peer);
    this.log('info', `${this.me}: peer ${peer}: ${old} -> ${next}`);
  }

  /** @param {string} peer */
  isGone(peer) {
    return this.state(peer) === PeerState.GONE;
  }

  /** @param {string} peer */
  wasGreeted(peer) {
    return this.peers.get(peer)?.greeted ?? false;
  }

  /** Greeted peers that are not gone (sorted): who hears a broadcast. */
  live() {
    return [...this.peers].filter(([, e]) => e.state === PeerState.GREETED).map(([p]) => p).sort();
  }

  /** Greeted, not gone, channel open: what a `ready` reports. */
  liveOpen() {
    return this.live().filter((p) => /** @type {PeerEntry} */ (this.peers.get(p)).channelOpen);
  }

  /** Every peer that said hello and whose channel is open, gone or not (a stop goes to all). */
  greetedOpen() {
    return [...this.peers].filter(([, e]) => e.greeted && e.channelOpen).map(([p]) => p).sort();
  }

  /**
   * @param {number} now
   * @param {number} timeout
   */
  helloOverdue(now, timeout) {
    return [...this.peers]
      .filter(([, e]) => e.state === PeerState.OPEN && now - e.openedAt >= timeout)
      .map(([p]) => p).sort();
  }

  /** @param {number} timeout */
  nextHelloDeadline(timeout) {
    /** @type {number | null} */
    let soon = null;
    for (const e of this.peers.values()) {
      if (e.state !== PeerState.OPEN) continue;
      const at = e.openedAt + timeout;
      if (soon === null || at < soon) soon = at;
    }
    return soon;
  }
}
