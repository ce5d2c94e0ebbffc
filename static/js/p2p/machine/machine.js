// @ts-check
// The protocol machine: one peer's whole data-channel protocol, without I/O. Mirror of
// server/daisychain/p2p/machine/machine.py, rule for rule and in the same order (normative:
// docs/PROTOCOL.md "The protocol machine"; proven by replaying tests/vectors/protocol/).
//
// In the spirit of aioquic's QuicConnection and h11: the machine owns every piece of protocol
// state and changes it only in `handle(event)`, which resolves to the effects the shell must
// carry out, in order; `nextDeadline()` says when the shell must feed a `timer` event. It reads
// no clock (`now` comes with every event), opens no socket and starts no timer.
//
// One difference from Python, and why: `handle` is async, because the replica's hashing
// (crypto.subtle, or numerics/sha256.js behind the same async API) and inflating a compressed
// frame (DecompressionStream) are asynchronous on the web platform. The machine awaits them exactly where Python calls them synchronously, so the
// decisions and their order are the same; the shell feeds one event at a time and awaits each
// (a second `handle` while one is in flight is refused, never interleaved).
//
// The state lives in one object per concept: PeerTable, Leadership, RepairStore (each attempt an
// Attempt with its phase), SyncGuard, StateSync and Stopping; the run's phase is run.RunPhase.
// This module holds the rules that tie them together.

import { paramShapes } from '../../model/params.js';
import { BLOCK, CodecError, decode, nBlocks } from '../codec.js';
import { ChecksumError, FrameError, FrameKind } from '../frames.js';
import {
  AUDIT_PIECES, AUDIT_TYPES, MessageError, SYNC_OUTER, SYNC_STEP, encode as encodeMessage,
  errorFrom, message, parse as parseMessage,
} from '../messages.js';
import { CommittedRoster, Phase, RunPhase, makeRoster } from '../run.js';
import { Incompatible, parse as parseRunConfig } from '../runconfig.js';
import { allot, check as checkShares } from '../shares.js';
import { CONTRACT_VERSION, DATA_PROTOCOL_VERSION } from '../versions.js';
import * as fx from './effects.js';
import { Attempt, AttemptPhase, keyOf } from './attempt.js';
import { Fork, SyncGuard } from './guard.js';
import { Leadership } from './leadership.js';
import { PeerState, PeerTable } from './peers.js';
import { RepairStore, requests } from './repair.js';
import { ReplicaRefused, checkReplica, trainsOuterRuns } from './replica.js';
import { StateSync, SyncState } from './statesync.js';
import { Stopped, Stopping } from './stopping.js';

/**
 * @typedef {import('../messages.js').Config} Config
 * @typedef {import('../messages.js').Message} Message
 * @typedef {import('../messages.js').Stop} Stop
 * @typedef {import('../messages.js').Hash} StepHash
 * @typedef {import('../frames.js').Kind} FrameKindValue
 * @typedef {import('../frames.js').Header} Header
 * @typedef {import('../frames.js').Payload} Payload
 * @typedef {import('./events.js').Event} Event
 * @typedef {import('./events.js').ComputeDone} ComputeDone
 * @typedef {import('./events.js').ComputePartial} ComputePartial
 * @typedef {import('./effects.js').Effect} Effect
 * @typedef {import('./effects.js').Outcome} Outcome
 * @typedef {import('./settings.js').Settings} Settings
 * @typedef {import('./replica.js').Replica} Replica
 * @typedef {import('../run.js').Log} Log
 * @typedef {ReturnType<typeof parseRunConfig>} RunConfig
 */

export const MAX_ROUNDS = 256; // a step re-committed this often ends the run
// The data-channel version whose messages commit, then audit (docs/TRUST.md, "Config and
// versions"): this machine speaks DATA_PROTOCOL_VERSION (6) and refuses them.
export const AUDITS_VERSION = 7;
const STOP_ANNOUNCED = ['done', 'fork', 'leader-request'];

/**
 * Two `config` records describe the same run: their canonical encodings (messages.js `encode`,
 * byte for byte the Python peer's `messages.encode`) are equal, as machine.py compares them.
 * Derived from the message's declaration, never from a list of fields kept here, so a field the
 * config gains is compared as soon as it is written. 0.003 and 3e-3 are one run, 0.0 and -0.0
 * two (tests/vectors/config_equality.json).
 * @param {Config} a
 * @param {Config} b
 */
export function sameConfig(a, b) {
  return encodeMessage(a) === encodeMessage(b);
}

/**
 * machine.py's `assert`: a rule that holds by construction; a bug when it does not.
 * @param {unknown} ok
 * @param {string} what
 * @returns {asserts ok}
 */
function invariant(ok, what) {
  if (!ok) throw new Error(`protocol machine: broken invariant: ${what}`);
}

const size = (/** @type {readonly number[]} */ shape) => shape.reduce((n, d) => n * d, 1);

/**
 * Whether two Uint8Arrays hold the same bytes.
 * @param {Uint8Array} a
 * @param {Uint8Array} b
 */
function bytesEqual(a, b) {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** One peer's data-channel protocol (docs/PROTOCOL.md, "Data channels"). */
export class Machine {
  /**
   * `settings` from settings.js, `replica` with the interface of replica.js; `log(level, text)`
   * hears every state transition (silent by default).
   * @param {Settings} settings
   * @param {Replica} replica
   * @param {{log?: Log}} [options]
   */
  constructor(settings, replica, { log = () => {} } = {}) {
    this.settings = settings;
    this.id = settings.id;
    this.replica = checkReplica(replica);
    this.log = log;
    this.phase = new RunPhase(settings.name || settings.id, log);
    this.peers = new PeerTable(settings.id, (kind) => this.limit(kind), log);
    this.leadership = new Leadership(settings.id, log);
    this.store = new RepairStore();
    this.guard = new SyncGuard(settings.id, settings.reference_probe);
    this.sync = new StateSync(log);
    this.stopping = new Stopping(log);
    /** @type {Config | null} */
    this.config = null;
    this.hasState = false;
    /** @type {Map<string, number[]>} */
    this.shapes = new Map();
    this.totalBlocks = 0;
    this.transfer = 0;
    /** @type {Set<number>} */
    this.saveAt = new Set();
    this.savedStep = -1;
    /** @type {Effect[]} */
    this.out = [];
    this.now = 0;
    this.busy = false;
    // Our gradients are of text only this device holds (user-private-data); fixed once a run is
    // configured, and said in our `ready` or `sync-request`.
    this.privateData = false;
  }

  // ------------------------------------------------------------------------------------------
  // the interface

  get isLeader() {
    return this.leadership.isLeader;
  }

  get leader() {
    return this.leadership.leader;
  }

  get roster() {
    return this.leadership.roster;
  }

  get finished() {
    return this.stopping.finished;
  }

  /**
   * Feed one event; resolves to the effects to carry out, in order. One event at a time.
   * @param {Event} event
   * @returns {Promise<Effect[]>}
   */
  async handle(event) {
    if (this.busy) {
      throw new Error('Machine.handle: an event is still being handled; await each handle() ' +
        'before feeding the next (events are processed in order, one at a time)');
    }
    // The shell stamps every event; JS has no type checker to say so, so the machine does.
    if (typeof event?.type !== 'string' || !Number.isFinite(event.now)) {
      throw new TypeError('Machine.handle takes an event of events.js: a type and a finite `now`');
    }
    this.busy = true;
    try {
      this.now = event.now;
      if (this.stopping.finished) return [];
      try {
        if (this.stopping.stopped) {
          this.whileStopped(event);
        } else {
          await this.dispatch(event);
          await this.advance();
        }
      } catch (exc) {
        if (exc instanceof Stopped) await this.beginStopping(exc);
        else if (exc instanceof Fork) await this.beginStopping(this.forkStop(exc));
        else throw exc;
      }
      if (this.stopping.stopped && this.stopping.done(this.now)) {
        invariant(this.stopping.outcome !== null, 'a stopped run has an outcome');
        this.out.push(fx.finished(this.finalOutcome(this.stopping.outcome)));
      }
      const out = this.out;
      this.out = [];
      return out;
    } finally {
      this.busy = false;
    }
  }

  /** When the shell must feed `timer` (null: no timer is running). */
  nextDeadline() {
    if (this.stopping.finished) return null;
    if (this.stopping.stopped) return this.stopping.waiting.size > 0 ? this.stopping.lingerUntil : null;
    const t = this.settings.timers;
    let soon = this.peers.nextHelloDeadline(t.hello_timeout_s);
    const a = this.current();
    if (a !== null && a.live) soon = soon === null ? a.repairAt : Math.min(soon, a.repairAt);
    if (a !== null && this.isLeader && this.phase.phase === Phase.TRAINING) {
      soon = soon === null ? a.deadline : Math.min(soon, a.deadline);
    }
    return soon;
  }

  /** @param {number} step */
  agreement(step) {
    return this.guard.agreement(step);
  }

  /**
   * Read-only: the guard's tally of attempt (step, round) over `roster` (guard.js tally).
   * @param {number} step
   * @param {number} round
   * @param {Iterable<string>} roster
   */
  tally(step, round, roster) {
    return this.guard.tally(step, round, roster);
  }

  /**
   * Read-only: the peers of this run known to train on private data (a new Set): those whose
   * `ready` or `sync-request` said so (the leader hears them), and this one.
   */
  get privateDataPeers() {
    const out = new Set(this.leadership.privateData);
    if (this.privateData && this.config !== null) out.add(this.id);
    return out;
  }

  // ------------------------------------------------------------------------------------------
  // effects

  /**
   * @param {string} peer
   * @param {Message} m
   */
  send(peer, m) {
    this.out.push(fx.sendMessage(peer, m));
  }

  /** @param {Message} m */
  broadcast(m) {
    for (const peer of this.peers.live()) this.send(peer, m);
  }

  /**
   * @param {string} peer
   * @param {FrameKindValue} kind
   * @param {Uint8Array} payload
   * @param {number} step
   * @param {number} [round]
   * @param {number} [chunk]
   */
  sendPayload(peer, kind, payload, step, round = 0, chunk = 0) {
    this.transfer = (this.transfer + 1) >>> 0;
    const deflate = kind !== FrameKind.CHECKPOINT; // checkpoints go uncompressed
    this.out.push(fx.sendPayload(peer, kind, step, round, chunk, this.transfer, deflate, payload));
  }

  /**
   * The run ends here (throw the result). `done`, `fork` and `leader-request` are announced with
   * `stop`; an `error` is this peer's own failure.
   * @param {string} reason
   * @param {string} text
   * @param {ReadonlyMap<string, string>} [hashes]
   * @param {string} [code]
   */
  stop(reason, text, hashes = new Map(), code = '') {
    const step = this.hasState ? this.replica.step : 0;
    let announce = null;
    if (this.config !== null && STOP_ANNOUNCED.includes(reason)) {
      announce = message('stop', {
        run: this.config.run, reason, step, message: text, hashes: new Map(hashes),
      });
    }
    return new Stopped(fx.outcome(reason, step, this.hash(), text, hashes, code), announce);
  }

  /** @param {Fork} fork */
  forkStop(fork) {
    this.log('error', `${this.id}: SYNC GUARD: ${fork.message}`);
    return this.stop('fork', fork.message, fork.hashes);
  }

  hash() {
    return this.hasState ? this.replica.hash : '';
  }

  // ------------------------------------------------------------------------------------------
  // events

  /** @param {Event} e */
  async dispatch(e) {
    switch (e.type) {
      case 'channel-open':
        if (this.peers.state(e.peer) === null) {
          this.peers.opened(e.peer, e.now);
          this.send(e.peer, message('hello', {
            version: DATA_PROTOCOL_VERSION, name: sliceName(this.settings.name),
            contract: CONTRACT_VERSION,
          }));
        }
        return;
      case 'channel-closed':
        this.peers.channelClosed(e.peer);
        await this.peerGone(e.peer, 'closed');
        return;
      case 'peer-left':
        await this.peerGone(e.peer, 'left');
        return;
      case 'message':
        await this.onText(e.peer, e.text);
        return;
      case 'frame':
        await this.onFrame(e.peer, e.data);
        return;
      case 'compute-done':
        await this.onComputed(e);
        return;
      case 'compute-partial':
        await this.onPartial(e);
        return;
      case 'compute-failed':
        throw this.stop('error', `step ${e.step}: compute failed: ${e.error}`);
      case 'timer':
        await this.onTimer(e.now);
        return;
      case 'lead':
        this.lead(e.config, e.minPeers);
        return;
      case 'user-stop':
        if (this.isLeader && this.config !== null) {
          this.log('info', `${this.id}: ending the run at the next boundary: ${e.reason}`);
          this.leadership.endRequested = e.reason || 'the leader ended the run';
        } else {
          this.log('warning', `${this.id}: only the leader can end the run`);
        }
        return;
      case 'user-leave':
        this.broadcast(message('leave', { reason: e.reason }));
        throw new Stopped(fx.outcome('left', this.hasState ? this.replica.step : 0, this.hash(),
          e.reason));
      case 'user-save':
        if (this.isLeader && this.config !== null && this.hasState) {
          this.broadcast(message('save', { run: this.config.run, step: this.replica.step }));
        }
        if (this.settings.can_save && this.hasState) this.save();
        return;
      case 'user-private-data':
        if (this.config === null) {
          this.privateData = e.on;
        } else { // the leader was told already: this run keeps what it said
          this.log('warning', `${this.id}: private data changes only between runs`);
        }
        return;
      case 'signaling-lost':
        throw this.stop('error', `lost the signaling server: ${e.reason}`);
      default:
        // (from an untyped caller: every Event type has its case above)
        throw new TypeError(
          `unknown machine event ${String(/** @type {{type?: unknown}} */ (e).type)}`);
    }
  }

  /**
   * @param {string} peer
   * @param {string} text
   */
  async onText(peer, text) {
    const state = this.peers.state(peer);
    if (state === null) {
      this.log('warning', `${this.id}: message from ${peer} without a channel ignored`);
      return;
    }
    if (state === PeerState.GONE) {
      this.fromGone(peer, text);
      return;
    }
    let m;
    try {
      m = parseMessage(text);
    } catch (exc) {
      if (!(exc instanceof MessageError)) throw exc;
      if (exc.code === 'version-mismatch') {
        this.send(peer, errorFrom(exc));
        await this.otherVersion(peer, exc.message, exc.hint);
        return;
      }
      await this.reject(peer, exc.code, exc.message, exc.hint);
      return;
    }
    if (m.type === 'hello') {
      this.peers.greet(peer);
      this.onGreeted(peer);
      return;
    }
    if (state !== PeerState.GREETED) {
      await this.reject(peer, 'bad-message', `${m.type} before hello`);
      return;
    }
    await this.onMessage(peer, m);
  }

  /**
   * @param {string} peer
   * @param {Uint8Array} data
   */
  async onFrame(peer, data) {
    const entry = this.peers.get(peer);
    if (entry === null || entry.state === PeerState.GONE) return; // only a stop is heard from a gone peer, and a stop is text
    if (entry.state !== PeerState.GREETED) {
      await this.reject(peer, 'bad-frame', 'binary frame before hello');
      return;
    }
    let payload;
    try {
      payload = await entry.reassembler.feed(data);
    } catch (exc) {
      if (exc instanceof ChecksumError) {
        this.log('warning', `${this.id}: ${exc.message} from ${peer}; asking again`);
        this.askAgain(peer, exc.head);
        return;
      }
      if (exc instanceof FrameError) {
        await this.reject(peer, 'bad-frame', exc.message);
        return;
      }
      throw exc;
    }
    if (payload === null) return;
    if (payload.kind === FrameKind.CHECKPOINT) await this.onCheckpoint(peer, payload);
    else await this.onPiece(peer, payload);
  }

  /**
   * @param {string} peer
   * @param {Message} m
   */
  async onMessage(peer, m) {
    const cfg = this.config;
    if (/** @type {readonly string[]} */ (AUDIT_TYPES).includes(m.type) ||
      (m.type === 'repair' && AUDIT_PIECES.includes(m.piece))) {
      await this.refuseAuditMessage(peer, m);
      return;
    }
    if (m.type === 'config') {
      await this.onConfig(peer, m);
      return;
    }
    if (m.type === 'leave') {
      await this.peerGone(peer, `leave: ${m.reason}`);
      return;
    }
    if (m.type === 'error') {
      if (m.code === 'version-mismatch') await this.otherVersion(peer, m.message, m.hint);
      this.log('warning', `${this.id}: ${peer} says ${m.code}: ${m.message}`);
      return;
    }
    if (cfg === null) {
      // In the lobby. Peers of a running group send their run's messages (`hash` after every
      // step, `save`, `stop`) to every greeted channel, and one can overtake the leader's
      // `config` to a newcomer; it tells this peer nothing it needs (the config and the state
      // sync do), so it is dropped, not refused: closing that channel would leave the newcomer
      // without a link to a roster member when the config arrives.
      this.log('debug', `${this.id}: ${m.type} from ${peer} before any config: ignored`);
      return;
    }
    if (('run' in m ? m.run : cfg.run) !== cfg.run) {
      await this.reject(peer, 'wrong-run', `${m.type} for a run this peer is not in`);
      return;
    }
    const lead = this.leadership;
    if ((m.type === 'ready' || m.type === 'sync-request') && m.private_data) {
      if (!lead.privateData.has(peer)) this.log('info', `${this.id}: ${peer} trains on private data`);
      lead.privateData.add(peer);
    }
    switch (m.type) {
      case 'ready':
        lead.ready.set(peer, m);
        lead.speeds.set(peer, m.seq_s);
        break;
      case 'sync-request':
        lead.syncWanted.add(peer);
        break;
      case 'roster': {
        const wrong = checkShares(m.shares, m.peers.length, cfg.global_batch);
        if (wrong !== null) {
          await this.reject(peer, 'bad-message', `roster of step ${m.step}: ${wrong}`);
          return;
        }
        const r = new CommittedRoster(m.step, m.round, m.peers, m.shares);
        if (peer !== lead.leader) {
          // Our view of who left may lag behind the sender's: hold it; if the successor rule
          // later names the sender, it is applied then.
          lead.hold(peer, r);
        } else {
          await this.acceptRoster(r);
        }
        break;
      }
      case 'hash':
        lead.speeds.set(peer, m.seq_s);
        this.guard.checkProbe(peer, m.step, m.probe, m.backend);
        this.guard.record(peer, m.step, m.round, m.hash, m.backend);
        break;
      case 'missing': {
        const key = keyOf(m.step, m.round);
        const reported = lead.missingReports.get(key) ?? new Set();
        lead.missingReports.set(key, reported);
        for (const p of m.peers) reported.add(p);
        break;
      }
      case 'repair': {
        const served = this.store.serve(peer, m);
        if (served !== null) {
          this.sendPayload(peer, served.kind, served.payload, m.step, m.round, m.chunk);
        }
        break;
      }
      case 'save':
        this.saveAt.add(m.step);
        this.maybeSave();
        break;
      case 'stop':
        this.onStop(peer, m);
        break;
      default:
        break;
    }
  }

  /**
   * Commit, then audit (docs/TRUST.md) is declared in messages.js (version 7) but this machine
   * does not audit: its messages and repair pieces are what an unknown type or piece was before
   * they were declared, a peer that breaks the protocol it greeted with (error, then close), in
   * the lobby and in a run alike.
   * @param {string} peer
   * @param {Message} m
   */
  async refuseAuditMessage(peer, m) {
    const [code, what] = m.type === 'repair' ? ['bad-message', `repair of a ${m.piece}`] :
      ['unknown-type', `control message ${m.type}`];
    await this.reject(peer, code,
      `${what} belongs to commit, then audit (data-channel version ${AUDITS_VERSION}); this ` +
      `peer speaks version ${DATA_PROTOCOL_VERSION}`,
      'every peer of a run must run the same DaisyChain version; upgrade the older one');
  }

  /**
   * A hostile or broken peer: say why, close its channel, drop it from the run.
   * @param {string} peer
   * @param {string} code
   * @param {string} why
   * @param {string} [hint]
   */
  async reject(peer, code, why, hint = '') {
    this.log('warning', `${this.id}: closing channel to ${peer}: ${code}: ${why}`);
    this.send(peer, message('error', {
      code, message: sliceChars(why, 200), hint: hint || 'see docs/PROTOCOL.md, Data channels',
    }));
    await this.peerGone(peer, `rejected (${code})`);
    this.out.push(fx.close(peer));
  }

  /**
   * The other side speaks another protocol version. A peer already in a run keeps training
   * without it; a peer still in the lobby cannot join this group and stops.
   * @param {string} peer
   * @param {string} text
   * @param {string} hint
   */
  async otherVersion(peer, text, hint) {
    if (this.phase.phase === Phase.LOBBY && !this.leadership.leadsOwnRun) {
      throw this.stop('error', `${text} (peer ${peer}); ${hint}`, new Map(), 'version-mismatch');
    }
    await this.peerGone(peer, 'protocol version mismatch');
    this.out.push(fx.close(peer));
  }

  /**
   * The largest payload of `kind` accepted now (0: not expected).
   * @param {FrameKindValue} kind
   */
  limit(kind) {
    if (this.shapes.size === 0) return 0;
    if (kind === FrameKind.CHECKPOINT) {
      let n = 0;
      for (const s of this.shapes.values()) n += size(s);
      return this.sync.awaiting ? 12 * n + 1024 * 1024 : 0;
    }
    return this.totalBlocks * (BLOCK + 1);
  }

  /**
   * The attempt this peer works on: the committed roster's, or, while that roster waits for
   * this peer to apply the step before it (a follower one step behind, "Rosters"), the live
   * attempt of that step.
   */
  current() {
    const r = this.leadership.roster;
    if (r === null) return null;
    return this.store.get(r.step, r.round) ?? this.store.live(r.step - 1);
  }

  // ------------------------------------------------------------------------------------------
  // membership: leading, config, greeting, peers gone, failover

  /**
   * Validate once (runconfig.parse): the run, or Incompatible.
   * @param {Config} cfg
   */
  parseConfig(cfg) {
    const s = this.settings;
    const accepted = parseRunConfig(cfg, {
      tokenizerSha256: s.tokenizer_sha256, vocabSize: s.vocab_size, caps: s.limits,
      dataSources: s.data_sources, outerRuns: trainsOuterRuns(this.replica),
      privateData: this.privateData,
    });
    if (cfg.audit != null) {
      // Last: the protocol's rules above are answered as a version-7 peer answers them; only
      // then does this peer say what it cannot do (as it would refuse a v7 run).
      throw new Incompatible('audit-version',
        `this peer cannot audit contributions yet (data-channel version ${DATA_PROTOCOL_VERSION})`,
        'ask the leader to start without --audit');
    }
    return accepted;
  }

  /**
   * @param {Config} config
   * @param {number} minPeers
   */
  lead(config, minPeers) {
    let accepted;
    try { // the leader trains its run too: the followers' rules and its own caps apply
      accepted = this.parseConfig(config);
    } catch (exc) {
      if (!(exc instanceof Incompatible)) throw exc;
      throw this.stop('error', `cannot lead this run: ${exc.message}; ${exc.hint}`, new Map(),
        exc.code);
    }
    const model = accepted.model;
    this.tellOuter(accepted);
    this.leadership.lead(minPeers);
    this.config = config;
    this.hasState = true;
    this.setShapes(model);
    this.phase.transition(Phase.CONFIGURED, 'leading');
    this.broadcast(config);
  }

  /**
   * @param {string} peer
   * @param {Config} cfg
   */
  async onConfig(peer, cfg) {
    if (this.leadership.leadsOwnRun) {
      await this.reject(peer, 'wrong-run', 'this peer leads its own run');
      return;
    }
    if (this.config !== null) {
      if (!sameConfig(cfg, this.config)) {
        await this.reject(peer, 'wrong-run', 'a second, different run configuration');
      }
      return;
    }
    let accepted;
    try {
      accepted = this.parseConfig(cfg);
    } catch (exc) {
      if (!(exc instanceof Incompatible)) throw exc;
      // Refused, not fatal: this peer stays in the lobby for the next run.
      await this.reject(peer, exc.code, exc.message, exc.hint);
      return;
    }
    this.config = cfg;
    this.leadership.leader = peer;
    this.tellOuter(accepted); // before start or restore: the sync mode
    this.setShapes(accepted.model);
    this.phase.transition(Phase.CONFIGURED, `config from ${peer}`);
    if (cfg.resume_step === 0) {
      await this.replica.start(accepted.model, accepted.optim, cfg.seed);
      this.hasState = true;
      this.send(peer, this.ready());
    } else {
      this.requestSync();
    }
  }

  /**
   * The run's outer loop (null: per-step) to a replica that trains outer runs (replica.js).
   * @param {RunConfig} accepted
   */
  tellOuter(accepted) {
    if (trainsOuterRuns(this.replica)) this.replica.setOuter(accepted.outer);
  }

  /** Whether the configured run is an outer run (one roster step is one outer round). */
  get outerRun() {
    return this.config !== null && (this.config.sync ?? SYNC_STEP) === SYNC_OUTER;
  }

  /**
   * Parameter shapes fix every frame size limit (known from the config alone).
   * @param {RunConfig['model']} model
   */
  setShapes(model) {
    this.shapes = paramShapes(model);
    let n = 0;
    for (const s of this.shapes.values()) n += size(s);
    this.totalBlocks = nBlocks(n);
  }

  ready() {
    invariant(this.config !== null, 'ready() in a configured run');
    return message('ready', {
      run: this.config.run, step: this.replica.step, hash: this.replica.hash,
      peers: this.peers.liveOpen(), seq_s: this.seqS(), private_data: this.privateData,
    });
  }

  /** This peer's seconds per sequence as last measured by its shell (0: never). */
  seqS() {
    return this.leadership.speeds.get(this.id) ?? 0.0;
  }

  /** @param {string} peer */
  onGreeted(peer) {
    if (this.isLeader && this.config !== null) {
      // A late peer learns the run from the leader: config, then the current roster (a peer not
      // in it asks for the state and enters the roster after the checkpoint).
      this.send(peer, this.config);
      const r = this.leadership.roster;
      if (r !== null) {
        this.send(peer, message('roster', {
          run: this.config.run, step: r.step, round: r.round, peers: [...r.peers],
          shares: [...r.shares],
        }));
      }
    }
  }

  /**
   * Marks `peer` gone; true when it was the leader (a failover is then due).
   * @param {string} peer
   * @param {string} why
   */
  markGone(peer, why) {
    if (!this.peers.gone(peer)) return false;
    this.leadership.forget(peer);
    this.log('info', `${this.id}: peer ${peer} gone (${why})`);
    const a = this.current();
    if (a !== null && a.roster.peers.includes(peer) && a.live) {
      a.repairAt = Math.min(a.repairAt, this.now);
      a.deadline = Math.min(a.deadline, this.now + this.settings.timers.repair_after_s);
    }
    return peer === this.leadership.leader;
  }

  /**
   * @param {string} peer
   * @param {string} why
   */
  async peerGone(peer, why) {
    if (this.markGone(peer, why)) await this.leaderGone();
  }

  async leaderGone() {
    const lead = this.leadership;
    if (lead.roster === null) {
      throw this.stop('error', 'the leader left before the first step; start the run again');
    }
    const next = lead.failOver(this.peers.goneSet);
    if (next === null) throw this.stop('error', 'every peer of the last roster left');
    if (this.isLeader) {
      const a = this.current();
      if (a !== null) a.deadline = Math.min(a.deadline, this.now + this.settings.timers.repair_after_s);
      return;
    }
    if (this.sync.awaiting) {
      this.sync.done();
      this.requestSync(); // ask the successor
    }
    const held = lead.takeHeld();
    if (held !== null) await this.acceptRoster(held);
  }

  // ------------------------------------------------------------------------------------------
  // rosters

  /** @param {CommittedRoster} r */
  async acceptRoster(r) {
    this.leadership.roster = r;
    if (this.phase.phase === Phase.CONFIGURED) {
      this.phase.transition(Phase.TRAINING, `roster of step ${r.step}`);
    }
    if (!this.hasState) {
      this.requestSync();
      return;
    }
    const step = this.replica.step;
    if (!r.peers.includes(this.id)) {
      if (step !== r.step - 1 || !this.isLeader) this.requestSync();
      return;
    }
    if (step === r.step - 2 && this.store.live(step + 1) !== null) {
      // The leader committed the next step before this peer applied the current one (it waits
      // for hashes one step late): it starts once that step is applied.
      this.log('debug', `${this.id}: roster of step ${r.step} waits for step ${step + 1}`);
      return;
    }
    if (step !== r.step - 1) {
      if (step < r.step - 1 || !this.store.has(r.step, r.round)) this.requestSync();
      return;
    }
    const t = this.settings.timers;
    const outer = this.outerRun;
    const a = new Attempt(r, r.rank(this.id), this.totalBlocks, this.now, this.log, outer);
    a.repairAt = this.now + t.repair_after_s;
    // An outer round is H inner steps of compute: its timeout is H step timeouts.
    const rounds = outer && this.config && this.config.outer ? this.config.outer.steps : 1;
    a.deadline = this.now + t.step_timeout_s * rounds;
    if (r.peers.some((p) => this.peers.goneSet.has(p))) {
      // A roster peer left before this attempt began (the roster waited here for the step
      // before it): its pieces never come, so repair as if it had left now, not after the
      // whole step timer (H of them in an outer round, longer than a test or a user waits).
      a.deadline = Math.min(a.deadline, this.now + t.repair_after_s);
    }
    this.store.add(a);
    this.store.abandonBefore(r.step, r.round);
    this.out.push(fx.compute(r.step, r.round, a.rank, r.shares));
    for (const [sender, payload] of this.store.takeEarly(r.step, r.round)) {
      await this.onPiece(sender, payload);
    }
  }

  /** The leader's decisions, re-evaluated after every event. */
  async advance() {
    this.followerSync();
    if (!this.isLeader || !this.hasState || this.config === null) return;
    if (this.phase.phase === Phase.CONFIGURED) {
      await this.leaderStart();
      return;
    }
    let r = this.leadership.roster;
    if (this.phase.phase !== Phase.TRAINING || r === null) return;
    const a = this.current();
    const gone = this.peers.goneSet;
    const alive = r.peers.filter((p) => !gone.has(p));
    if (a !== null && a.applied) {
      // Pipelined boundary: the next step is committed once every peer still present is known
      // to hold the state of the step before this one (its hash of that step is in and equal,
      // the guard saw to that), so a slow peer applies this step while the others compute the
      // next. The last step (and a requested end) waits for every hash of this step: the run
      // ends with every replica at it.
      const last = r.step >= this.config.steps || Boolean(this.leadership.endRequested);
      const holding = alive.filter((p) => this.holds(p, a, last));
      if (holding.length < alive.length && this.now < a.deadline) return;
      await this.boundary(holding);
      return;
    }
    if (a !== null && this.now < a.deadline) return;
    // A successor one step behind: the step before the committed roster never completed here.
    // Re-commit that step (peers that applied it sync back).
    if (a !== null && a.roster.step < r.step) r = a.roster;
    // The attempt cannot complete: re-commit the step without the peers that vanished or whose
    // pieces never arrived (at the leader or at any peer that reported). A roster peer that went
    // gone explains every missing piece (an owner cannot reduce its chunk without the gone
    // peer's contribution), so then only the gone peers are dropped: a present peer is not
    // pushed out to a checkpoint resync for a departure, and one that is really stuck meets the
    // new round's full step timer.
    const drop = new Set(r.peers.filter((p) => gone.has(p)));
    if (drop.size === 0) {
      for (const p of this.leadership.missingReports.get(keyOf(r.step, r.round)) ?? []) drop.add(p);
      if (a !== null) for (const p of a.missingFrom()) drop.add(p);
    }
    drop.delete(this.id);
    const peers = makeRoster([...r.peers.filter((p) => !drop.has(p)), this.id]);
    this.log('warning', `${this.id}: step ${r.step} round ${r.round} incomplete; dropping ` +
      `${r.peers.filter((p) => drop.has(p)).sort().join(', ')}`);
    await this.commit(r.step, r.round + 1, peers);
  }

  /**
   * Leader, attempt a applied: may peer enter the next roster? With last it must hold this
   * step's state (its hash of a equals ours); otherwise the state of the step before: its hash
   * of the attempt we applied there equals ours, or it was not in that attempt (it entered a's
   * roster with that state, by ready or the checkpoint).
   * @param {string} peer
   * @param {Attempt} a
   * @param {boolean} last
   */
  holds(peer, a, last) {
    if (last) return this.guard.have(a.step, a.round).get(peer) === this.replica.hash;
    const before = this.store.applied(a.roster.step - 1);
    if (before === null || !before.roster.peers.includes(peer)) return true;
    const have = this.guard.have(before.step, before.round);
    return have.has(peer) && have.get(peer) === have.get(this.id);
  }

  async leaderStart() {
    invariant(this.config !== null, 'a leader starts a configured run');
    for (const peer of await this.serveSyncs()) {
      this.leadership.ready.set(peer, message('ready', {
        run: this.config.run, step: this.replica.step, hash: this.replica.hash, peers: [],
        seq_s: 0.0,
      }));
    }
    const candidates = [this.id, ...this.eligible()];
    if (candidates.length < this.leadership.minPeers) return;
    await this.commit(this.replica.step + 1, 0, makeRoster(candidates));
  }

  eligible() {
    return this.leadership.eligible(this.peers.goneSet, this.replica.step, this.replica.hash);
  }

  /**
   * Step replica.step is complete: stop, or commit the next roster.
   * @param {readonly string[]} continuing
   */
  async boundary(continuing) {
    invariant(this.config !== null, 'a step boundary of a configured run');
    const step = this.replica.step;
    if (step >= this.config.steps) throw this.stop('done', `reached step ${step}`);
    if (this.leadership.endRequested) {
      throw this.stop('leader-request', `${this.leadership.endRequested} at step ${step}`);
    }
    const joiners = [...(await this.serveSyncs()), ...this.eligible()];
    this.leadership.ready.clear();
    await this.commit(step + 1, 0, makeRoster([...continuing, ...joiners, this.id]));
  }

  /**
   * @param {number} step
   * @param {number} round
   * @param {readonly string[]} peers
   */
  async commit(step, round, peers) {
    invariant(this.config !== null, 'a roster of a configured run');
    if (round >= MAX_ROUNDS) throw this.stop('error', `step ${step} failed ${MAX_ROUNDS} times`);
    // Faster peers take more of the step's sequences, so that everyone finishes together;
    // "equal" splits as if no one were measured (allot's equal weights).
    const speeds = this.config.shares_by === 'speed' ? this.leadership.speeds : new Map();
    const split = allot(peers.map((p) => speeds.get(p) ?? 0.0), this.config.global_batch);
    this.broadcast(message('roster', {
      run: this.config.run, step, round, peers: [...peers], shares: [...split],
    }));
    this.log('info', `${this.id}: roster step ${step} round ${round}: ` +
      `${peers.map((p, k) => `${p} x${split[k]}`).join(', ')}`);
    await this.acceptRoster(new CommittedRoster(step, round, peers, split));
  }

  // ------------------------------------------------------------------------------------------
  // the exchange

  /** @param {ComputeDone} e */
  async onComputed(e) {
    const a = this.store.get(e.step, e.round);
    if (a === null || a.phase !== AttemptPhase.COMPUTING) return; // abandoned meanwhile
    if (e.payloads.length !== a.n) {
      throw this.stop('error',
        `step ${e.step}: compute returned ${e.payloads.length} chunks for ${a.n} peers`);
    }
    for (const k of a.contributes ? a.chunks : []) {
      const want = a.chunkBlocks(k) * (BLOCK + 1);
      if (e.payloads[k].length !== want) { // a shell that computed other shares than committed
        throw this.stop('error',
          `step ${e.step}: compute returned ${e.payloads[k].length} bytes for chunk ${k} of ${want}`);
      }
    }
    for (const [k, early] of a.early) { // what left early must be what the gradient is
      if (!bytesEqual(e.payloads[k], early)) {
        throw this.stop('error',
          `step ${e.step}: compute returned other bytes for chunk ${k} than it sent early`);
      }
    }
    if (e.seq_s > 0) this.leadership.speeds.set(this.id, e.seq_s);
    a.computedWith(e.loss, e.payloads, e.probe);
    // The repair timer counts from our own gradient: the others' pieces were shaped to come
    // about when ours is ready, so a step longer than repair_after_s must not ask a slow peer to
    // send again what it is still sending (a duplicate costs it most).
    a.repairAt = Math.max(a.repairAt, this.now + this.settings.timers.repair_after_s);
    if (a.contributes) {
      for (const k of a.chunks) {
        if (k !== a.rank && !a.early.has(k)) {
          this.sendPayload(a.roster.peers[k], FrameKind.CONTRIBUTION, e.payloads[k], e.step, e.round, k);
        }
      }
    }
    await this.tryReduce(a);
    // A peer whose own chunk is empty (a share of 0, or B s / G < 1) reduces nothing, so
    // tryReduce never reaches tryApply: when every reduced chunk arrived while it computed (a
    // slow device following), nothing else would ever apply the step. A no-op in every other
    // case (Python's _on_computed makes the same call; trace follower-share-zero).
    await this.tryApply(a);
  }

  /**
   * A chunk of our gradient is final before the rest (docs/PROTOCOL.md, "Early chunks"): a
   * contribution leaves now, our own chunk lets the reduction start.
   * @param {ComputePartial} e
   */
  async onPartial(e) {
    const a = this.store.get(e.step, e.round);
    if (a === null || a.phase !== AttemptPhase.COMPUTING) return; // abandoned meanwhile
    if (!a.contributes || !a.chunks.includes(e.chunk) || a.early.has(e.chunk)) {
      throw this.stop('error', `step ${e.step}: compute sent chunk ${e.chunk} early, ` +
        'which is not one of its chunks or was sent already');
    }
    const want = a.chunkBlocks(e.chunk) * (BLOCK + 1);
    if (e.payload.length !== want) {
      throw this.stop('error',
        `step ${e.step}: compute sent ${e.payload.length} bytes early for chunk ${e.chunk} of ${want}`);
    }
    a.sentEarly(e.chunk, e.payload);
    if (e.chunk !== a.rank) {
      this.sendPayload(a.roster.peers[e.chunk], FrameKind.CONTRIBUTION, e.payload, e.step, e.round,
        e.chunk);
    } else {
      await this.tryReduce(a);
    }
  }

  /**
   * A contribution or a reduced chunk (a checkpoint is never a piece).
   * @param {string} peer
   * @param {Payload} p
   */
  async onPiece(peer, p) {
    const a = this.store.get(p.step, p.round);
    if (a === null) {
      if (this.hasState) this.store.holdEarly(peer, p, this.replica.step);
      return;
    }
    if (!a.roster.peers.includes(peer) || !(p.chunk >= 0 && p.chunk < a.n)) {
      await this.reject(peer, 'bad-frame', `piece of step ${p.step} from a non-roster peer`);
      return;
    }
    if (!a.chunks.includes(p.chunk)) {
      await this.reject(peer, 'bad-frame', `piece of step ${p.step} for empty chunk ${p.chunk}`);
      return;
    }
    if (p.kind === FrameKind.CONTRIBUTION && a.roster.share(peer) === 0) {
      await this.reject(peer, 'bad-frame', `contribution of step ${p.step} from a share of 0`);
      return;
    }
    let values;
    try {
      values = decode(p.data, a.chunkBlocks(p.chunk));
    } catch (exc) {
      if (!(exc instanceof CodecError)) throw exc;
      await this.reject(peer, 'bad-frame', exc.message);
      return;
    }
    if (!a.live) return; // applied already (a repaired duplicate) or abandoned
    if (p.kind === FrameKind.CONTRIBUTION) {
      if (p.chunk !== a.rank) {
        await this.reject(peer, 'bad-frame', `contribution for chunk ${p.chunk} sent to me`);
        return;
      }
      const rank = a.roster.rank(peer);
      if (!a.contributions.has(rank)) a.contributions.set(rank, values);
      await this.tryReduce(a);
    } else {
      if (!a.reduced.has(p.chunk)) {
        a.reduced.set(p.chunk, values);
        a.reducedPayload.set(p.chunk, p.data);
      }
      await this.tryApply(a);
    }
  }

  /** @param {Attempt} a */
  async tryReduce(a) {
    if (!a.live) return; // computing too: our own chunk may have come early
    const payload = a.reduce();
    if (payload === null) return;
    a.roster.peers.forEach((peer, k) => {
      if (k !== a.rank) this.sendPayload(peer, FrameKind.REDUCED, payload, a.step, a.round, a.rank);
    });
    await this.tryApply(a);
  }

  /** @param {Attempt} a */
  async tryApply(a) {
    if (!a.complete() || !this.hasState || this.replica.step !== a.roster.step - 1) return;
    invariant(this.config !== null, 'a step applied in a configured run');
    await this.replica.apply(a.meanGradient());
    a.transition(AttemptPhase.APPLIED);
    const { step, round } = a;
    const digest = this.replica.hash;
    this.broadcast(message('hash', {
      run: this.config.run, step, round, hash: digest, loss: a.loss, probe: a.probe,
      backend: this.settings.backend, seq_s: this.seqS(),
    }));
    this.out.push(fx.stepApplied(step, round, a.loss, digest, a.roster.peers, a.roster.shares, a.probe,
      this.settings.backend, this.leadership.leader ?? ''));
    this.guard.checkProbe(this.id, step, a.probe, this.settings.backend);
    this.guard.record(this.id, step, round, digest, this.settings.backend);
    this.maybeSave();
    const r = this.leadership.roster;
    const waiting = r !== null && r.step === step + 1 && r.peers.includes(this.id);
    if (waiting && !this.store.has(r.step, r.round)) {
      await this.acceptRoster(r); // the roster that waited for this step (a follower behind)
    }
  }

  // ------------------------------------------------------------------------------------------
  // repair and timers

  /**
   * @param {string} peer
   * @param {Header} head
   */
  askAgain(peer, head) {
    if (this.config === null) return;
    if (head.kind === FrameKind.CHECKPOINT) {
      this.sync.done();
      this.requestSync();
      return;
    }
    const piece = head.kind === FrameKind.CONTRIBUTION ? 'contribution' : 'reduced';
    this.send(peer, message('repair', {
      run: this.config.run, step: head.step, round: head.round, piece, chunk: head.chunk,
    }));
  }

  /** @param {number} now */
  async onTimer(now) {
    const t = this.settings.timers;
    for (const peer of this.peers.helloOverdue(now, t.hello_timeout_s)) {
      await this.reject(peer, 'bad-message', 'no hello in time');
    }
    const a = this.current();
    if (a === null || !a.live || now < a.repairAt) return;
    // Still incomplete past repairAt: ask for what is missing, and tell the leader whose pieces
    // never arrived.
    a.repairAt = now + t.repair_after_s;
    if (!a.computed || this.config === null) return; // our own gradient is not ready yet
    for (const [peer, m] of requests(a, this.id, this.peers.goneSet, this.config.run)) {
      this.send(peer, m);
    }
    const leader = this.leadership.leader;
    if (!this.isLeader && leader !== null) {
      this.send(leader, message('missing', {
        run: this.config.run, step: a.step, round: a.round, peers: [...a.missingFrom()].sort(),
      }));
    }
  }

  // ------------------------------------------------------------------------------------------
  // state sync and saves

  requestSync() {
    if (this.config === null || this.leadership.leader === null || this.isLeader) return;
    this.sync.want();
    this.followerSync();
  }

  followerSync() {
    const lead = this.leadership;
    if (this.sync.state !== SyncState.WANTED || this.config === null) return;
    if (lead.leader === null || this.isLeader) return;
    const needed = new Set(lead.roster !== null ? lead.roster.peers : [lead.leader]);
    for (const p of this.peers.goneSet) needed.delete(p);
    needed.delete(this.id);
    for (const p of needed) if (this.peers.state(p) !== PeerState.GREETED) return;
    this.log('info', `${this.id}: asking ${lead.leader} for the state`);
    this.sync.sent();
    this.send(lead.leader, message('sync-request', { run: this.config.run,
      private_data: this.privateData }));
  }

  /**
   * @param {string} peer
   * @param {Payload} p
   */
  async onCheckpoint(peer, p) {
    if (peer !== this.leadership.leader || !this.sync.awaiting) return;
    try {
      await this.replica.restore(p.data, `checkpoint from ${peer}`);
    } catch (exc) {
      if (!(exc instanceof ReplicaRefused)) throw exc;
      throw this.stop('error', `the leader's checkpoint was refused: ${exc.message}`);
    }
    this.sync.done();
    this.hasState = true;
    this.log('info', `${this.id}: synced to step ${this.replica.step} (${this.replica.hash.slice(0, 12)})`);
    // The leader commits the next roster right after the checkpoint (same ordered channel).
  }

  /**
   * Leader at a step boundary: send the state to every peer that asked; they may enter the next
   * roster. Resolves to the peers served.
   */
  async serveSyncs() {
    const lead = this.leadership;
    if (lead.syncWanted.size === 0) return [];
    const blob = await this.replica.checkpoint();
    const served = [];
    for (const peer of [...lead.syncWanted].sort()) {
      if (this.peers.state(peer) === PeerState.GREETED) {
        this.sendPayload(peer, FrameKind.CHECKPOINT, blob, this.replica.step);
        served.push(peer);
      }
    }
    lead.syncWanted.clear();
    return served;
  }

  save() {
    this.out.push(fx.save(this.replica.step));
    this.savedStep = this.replica.step;
  }

  maybeSave() {
    if (!this.hasState || !this.settings.can_save) return;
    const step = this.replica.step;
    const asked = this.saveAt.has(step);
    this.saveAt.delete(step);
    const every = this.settings.save_every;
    if (asked || (every > 0 && step % every === 0)) this.save();
  }

  // ------------------------------------------------------------------------------------------
  // stopping

  /**
   * @param {string} peer
   * @param {Stop} m
   * @returns {never}
   */
  onStop(peer, m) {
    this.stopping.stopFrom.add(peer);
    throw new Stopped(fx.outcome(m.reason, m.step, this.hash(), m.message, m.hashes), m);
  }

  /**
   * A peer this one already dropped can still have messages in flight. Only one is acted on: a
   * `stop` of this run is final and wins over the failover its sender's departure started.
   * @param {string} peer
   * @param {string} text
   */
  fromGone(peer, text) {
    if (!this.peers.wasGreeted(peer) || this.config === null) return;
    let m;
    try {
      m = parseMessage(text);
    } catch (exc) {
      if (exc instanceof MessageError) return;
      throw exc;
    }
    if (m.type === 'stop' && m.run === this.config.run) {
      this.log('info', `${this.id}: stop from ${peer}, which already left: the run is over`);
      this.onStop(peer, m);
    }
  }

  /** @param {Stopped} stopped */
  async beginStopping(stopped) {
    const { outcome, stop } = stopped;
    if (this.phase.phase !== Phase.STOPPED) this.phase.transition(Phase.STOPPED, outcome.reason);
    if (stop !== null) {
      // Every peer that stops repeats the stop on every open channel, the sender's included:
      // that is its acknowledgement, and it reaches a peer whose channel to the original sender
      // is already gone.
      for (const peer of this.peers.greetedOpen()) this.send(peer, stop);
    }
    // A forked state is never saved; any other ending keeps the last applied step.
    const unsaved = this.hasState && this.replica.step !== this.savedStep;
    if (this.settings.can_save && unsaved && outcome.reason !== 'fork') this.save();
    this.stopping.begin(outcome, stop, new Set(this.peers.live()), this.now + this.settings.timers.linger_s);
  }

  /**
   * Stopped: acknowledgements (a stop or leave, a channel closing, the server's peer-left),
   * until none is missing or the linger deadline passes, and the hashes still on their way. A
   * peer sends its hash of a step before it can acknowledge a stop that came after that step,
   * on the same ordered channel, so by the time every greeted peer has acknowledged, every hash
   * of the last step is in (docs/PROTOCOL.md, "Stopping").
   * @param {Event} e
   */
  whileStopped(e) {
    if (e.type === 'channel-closed' || e.type === 'peer-left') {
      this.stopping.acknowledged(e.peer);
    } else if (e.type === 'message') {
      let m;
      try {
        m = parseMessage(e.text);
      } catch (exc) {
        if (exc instanceof MessageError) return;
        throw exc;
      }
      if (m.type === 'stop' || m.type === 'leave') this.stopping.acknowledged(e.peer);
      else if (m.type === 'hash') this.lateHash(e.peer, m);
    }
  }

  /**
   * A `hash` that reached this peer after the stop: recorded for the final agreement and the
   * tally. The stop is already announced, so a hash that differs from ours no longer stops
   * anything; it is counted as differing (never as agreement) and logged.
   * @param {string} peer
   * @param {StepHash} m
   */
  lateHash(peer, m) {
    if (this.config === null || m.run !== this.config.run || !this.peers.wasGreeted(peer)) return;
    try {
      this.guard.record(peer, m.step, m.round, m.hash, m.backend);
    } catch (exc) {
      if (!(exc instanceof Fork)) throw exc;
      this.log('error', `${this.id}: after the stop: ${exc.message}`);
    }
  }

  /**
   * A run that ended well (`done`, `leader-request`) reports its final agreement: every peer's
   * hash of this peer's last applied attempt that reached it, its own included. A differing
   * hash stays in it as published; a peer whose hash never came is absent.
   * @param {Outcome} o
   * @returns {Outcome}
   */
  finalOutcome(o) {
    if ((o.reason !== 'done' && o.reason !== 'leader-request') || !this.hasState) return o;
    const last = this.store.applied(this.replica.step);
    if (last === null) return o;
    return fx.outcome(o.reason, o.step, o.hash, o.message, this.guard.have(last.step, last.round),
      o.code);
  }
}

/**
 * Python's s[:n] of the name sent in hello and of a refusal's reason (code points, not units).
 * @param {string} s
 * @param {number} n
 */
function sliceChars(s, n) {
  let out = '';
  let k = 0;
  for (const ch of s) {
    if (k++ >= n) break;
    out += ch;
  }
  return out;
}

const sliceName = (/** @type {string} */ name) => sliceChars(name, 40);
