// @ts-check
// The browser peer: the I/O shell around the protocol machine (machine/), the browser twin of
// daisychain/p2p/node.py (docs/PROTOCOL.md, "The browser peer").
//
// The machine decides everything the protocol says; this shell does what it cannot. It owns
// the mesh's events (mesh.js), the replica (modelreplica.js: the model in the training worker), the
// clock and the user's requests. Every input -- a mesh event, a compute result, a user request
// -- goes on one queue and is fed to the machine in arrival order, one at a time (handle() is
// async and refuses a second call in flight), stamped with `now` = performance.now() / 1000 at
// the moment it is fed. The effects that come back are carried out in order: messages and
// payloads go to the mesh (which keeps their order per channel), `compute` goes to the worker
// (its answer comes back as an input), `step-applied` is reported, `finished` ends the run.
//
// Time: after every input the shell arms one timer for `machine.nextDeadline()`; when it fires
// it feeds `timer`. A hidden tab's timers are throttled (to once a second, later once a
// minute), so before feeding any input the shell also feeds `timer` first when the deadline has
// already passed (as node.py does): data-channel traffic keeps the deadlines honest even when
// the page's timers are late. A deadline that did not move after its timer was fed is retried
// no sooner than 10 ms later (never spin).
//
// Sessions: one BrowserPeer is one run. When it finishes it closes its peer connections but not
// the mesh's signaling connection (mesh.closeLinks()), and stops listening to the mesh; the page
// starts the next run with a new BrowserPeer (and a new replica) on the same mesh, which starts
// the mesh's next session (mesh.relink()) and builds its machine at once when the mesh was
// admitted already. The page leaving for good closes the mesh itself (mesh.close()).
//
// Checkpoints: the machine may save (`can_save`): the leader's user asked (`save`, userSave),
// the run ended, or every `saveEvery` steps (a property the page may change at any time). When
// `keep` is true (the page keeps checkpoints: its keep panel) each save exports the replica as
// checkpoint bytes (checkpoint.js, the same bytes as daisychain.checkpoint) and emits `save`;
// otherwise a save is only logged. `checkpoint()` exports the state now; `leadResumed(bytes)`
// leads a run that continues a checkpoint (config resume_step/resume_hash; followers sync).
//
// Events out (DetailEvent): `ready` {id} (the machine exists: the mesh was admitted), `phase`
// {phase}, `step` {step, round, loss, hash, roster, shares (the roster's, in roster order),
// share (this device's; 0: it followed without computing), probe, backend, leader, computeMs,
// gradMs (the gradients alone), seqS (this device's smoothed seconds per sequence, exchange
// work included), exchangeWorkS (this step's: feeds from our gradients' end to the apply), computedOn,
// gpuProducts, bytesSent, bytesReceived (both cumulative), computedAtMs, appliedAtMs
// (performance.now() when our gradient was ready and when the step was applied)},
// `finished` {outcome}, `error` {message, hint} (also console.warn), `save` {run, step, hash,
// why ('asked' | 'every' | 'end'), bytes, at (Date.now())}, `private-data` {peer} (a peer of
// this run trains on private data: this one, or, at the leader, one whose `ready` or
// `sync-request` said so; each once). A step record also names its roster's `privateData`.
//
// Private data (privatedata.js; docs/PROTOCOL.md, "Private data"): `usePrivateText(text)` makes
// this page compute its share from text only it holds, whatever the run's `data`. The machine is
// told (`user-private-data`) and says so in its `ready`/`sync-request`; both take the choice
// only before a run is configured, so the lanes this page computes on are always the ones it
// declared.

import { DetailEvent } from './signaling.js';
import { Machine, settings as makeSettings, events as E } from './machine/index.js';
import { message } from './messages.js';
import { Incompatible, parse as parseRunConfig } from './runconfig.js';
import { PRESETS } from '../model/config.js';
import { REFERENCE_STEP_PROBE } from '../gpu/probe.js';
import { revisionOf } from '../fineweb.js';
import { DataUnavailable } from './datafeed.js';
import { decodeCheckpoint } from './checkpoint.js';
import { PrivateDataError } from './privatedata.js';
import { trainsOuterRuns } from './machine/replica.js';

/**
 * @typedef {import('./messages.js').Config} Config
 * @typedef {import('./machine/events.js').Event} Event
 * @typedef {import('./machine/effects.js').Effect} Effect
 * @typedef {import('./machine/effects.js').Compute} Compute
 * @typedef {import('./machine/effects.js').StepApplied} StepApplied
 * @typedef {import('./machine/effects.js').Outcome} Outcome
 * @typedef {import('./checkpoint.js').DecodedCheckpoint} DecodedCheckpoint
 * @typedef {import('./modelreplica.js').ComputeResult} ComputeResult
 * @typedef {import('./modelreplica.js').LaneBatch} LaneBatch
 */
/**
 * An outer run's loop as the page chooses it (leadConfig `outer`).
 * @typedef {{innerSteps: number, lr: number, momentum: number, overlap?: number,
 *   cut?: string}} OuterChoice
 * The page's choices for a run it leads (leadConfig).
 * @typedef {{preset?: string, steps: number, lr?: number, warmup?: number, seed?: number,
 *   batch?: number, seqLen?: number, width?: number, layers?: number, heads?: number,
 *   data?: string, globalBatch?: number, sharesBy?: string,
 *   outer?: OuterChoice | null}} LeadChoices
 * A step as the page reads it (the `step` event; `records`).
 * @typedef {{step: number, round: number, loss: number, hash: string, roster: string[],
 *   shares: number[], share: number, probe: string, backend: string, leader: string,
 *   privateData: string[], bytesSent: number, bytesReceived: number, appliedAtMs: number,
 *   exchangeWorkS: number, computeMs?: number, gradMs?: number, computedOn?: string,
 *   gpuProducts?: number, computedAtMs?: number, seqS?: number,
 *   busyAtMs?: number | null}} StepRecord
 * A checkpoint this page exported (the `save` event; `lastSave`, checkpoint()).
 * @typedef {{run: string, step: number, hash: string | null, why?: string, bytes: Uint8Array,
 *   at: number}} SaveRecord
 * An Error of this project: what went wrong and what to do (anything thrown is read as one).
 * @typedef {{name?: string, message?: string, hint?: string}} Hinted
 */

const CLOSE_DRAIN_MS = 1000; // a refusal's `error` leaves before its channel closes
const MIN_RETRY_MS = 10;

const monotonic = () => performance.now() / 1000;

function runId() {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * The `config` a leader sends, from the page's choices: a preset, its steps and optionally
 * batch (sequences per device: the lane size), sequence length, a custom size (width, layers,
 * heads: the config then names no preset), learning rate, warm-up, seed,
 * data source ('builtin' or the page's 'fineweb@REV') and global batch (sequences per step of
 * the whole group, shared out by the leader; default: the batch x max(1, minPeers), what that
 * many equal devices computed in protocol version 1), and `outer` {innerSteps, lr, momentum} for
 * an outer run (docs/PROTOCOL.md, "Outer runs"; null: per-step). The same record node.py's
 * `_prepare_lead` builds (warm-up capped at steps - 1, AdamW's other defaults).
 * @param {LeadChoices & {vocabSize: number, tokenizerSha256: string, minPeers?: number}} choices
 * @returns {Config}
 */
export function leadConfig({ preset = 'tiny', steps, lr = 3e-3, warmup = 0, seed = 1, batch, seqLen,
  width, layers, heads, data = 'builtin', vocabSize, tokenizerSha256, globalBatch, minPeers = 1,
  sharesBy = 'speed', outer = null }) {
  /** @type {Record<string, (typeof PRESETS)[keyof typeof PRESETS] | undefined>} */
  const presets = PRESETS;
  const p = presets[preset];
  if (p === undefined) {
    throw new Incompatible('preset', `unknown preset ${JSON.stringify(preset)}`,
      `choose one of ${Object.keys(PRESETS).join(', ')}`);
  }
  // A custom size (any of width, layers, heads): the config names no preset, as node.py does.
  const custom = [width, layers, heads].some((v) => v !== undefined);
  return message('config', {
    run: runId(),
    preset: custom ? null : preset,
    model: {
      vocab_size: vocabSize, width: width ?? p.width, layers: layers ?? p.layers,
      heads: heads ?? p.heads, seq_len: seqLen ?? p.seqLen, batch: batch ?? p.batch,
      mlp_mult: p.mlpMult,
    },
    optim: { lr, warmup_steps: Math.min(warmup, Math.max(steps - 1, 0)), weight_decay: 0.1, clip: 1.0 },
    steps,
    seed,
    data,
    tokenizer_sha256: tokenizerSha256,
    resume_step: 0,
    resume_hash: null,
    global_batch: globalBatch ?? (batch ?? p.batch) * Math.max(1, minPeers),
    shares_by: sharesBy,
    ...outerFields(outer),
  });
}

/**
 * An outer run's `sync` and `outer` fields (docs/PROTOCOL.md, "Outer runs"; written after
 * `shares_by`, as node.py does) from {innerSteps, lr, momentum, overlap?}; none for a per-step
 * run (null), whose config keeps its bytes (and an outer run without overlap, its own).
 */
/**
 * @param {OuterChoice | null} outer
 * @returns {{sync?: string, outer?: import('./messages.js').OuterSpec}}
 */
function outerFields(outer) {
  if (outer === null) return {};
  return { sync: 'outer', outer: { steps: outer.innerSteps, lr: outer.lr,
    momentum: outer.momentum, overlap: outer.overlap ?? 0, cut: outer.cut ?? 'share' } };
}

/**
 * The `config` of a run that continues a decoded checkpoint `ck` (checkpoint.js
 * decodeCheckpoint) to `steps`: node.py's `_prepare_lead` with `--resume` (preset null, the
 * checkpoint's model, optimizer and seed, resume_step/resume_hash of its state).
 * @param {DecodedCheckpoint} ck
 * @param {{steps: number, tokenizerSha256: string, data?: string, globalBatch?: number,
 *   minPeers?: number, sharesBy?: string}} options
 * @returns {Config}
 */
export function resumeConfig(ck, { steps, tokenizerSha256, data = 'builtin', globalBatch,
  minPeers = 1, sharesBy = 'speed' }) {
  const m = ck.model;
  const step = checkpointStep(ck);
  return message('config', {
    run: runId(),
    preset: null,
    model: {
      vocab_size: m.vocabSize, width: m.width, layers: m.layers, heads: m.heads,
      seq_len: m.seqLen, batch: m.batch, mlp_mult: m.mlpMult,
    },
    optim: { lr: ck.optim.lr, warmup_steps: ck.optim.warmupSteps, weight_decay: ck.optim.weightDecay,
      clip: ck.optim.clip },
    steps,
    seed: ck.seed,
    data,
    tokenizer_sha256: tokenizerSha256,
    resume_step: step,
    resume_hash: step > 0 ? ck.weightHash : null,
    global_batch: globalBatch ?? m.batch * Math.max(1, minPeers),
    shares_by: sharesBy,
    ...outerFields(ck.outer?.config ?? null), // an outer run continues as one
  });
}

/**
 * The steps a decoded checkpoint holds: an outer run's rounds, or a per-step run's steps.
 * @param {DecodedCheckpoint} ck
 * @returns {number}
 */
function checkpointStep(ck) {
  return ck.outer?.step ?? ck.state.step;
}

/**
 * The steps a resumed run trains to unless the user says: the checkpoint's schedule, or +100.
 * @param {DecodedCheckpoint} ck
 */
export function defaultResumeSteps(ck) {
  const total = ck.optim.totalSteps;
  const step = checkpointStep(ck);
  return total > step ? total : step + 100;
}

export class BrowserPeer extends EventTarget {
  /**
   * @param {object} o
   * @param {import('./mesh.js').Mesh} o.mesh  not started yet, or started: the machine is
   *   built when the mesh is admitted (its id is the machine's)
   * @param {import('./modelreplica.js').WorkerReplica} o.replica
   * @param {Uint16Array|Uint32Array} o.tokens  the built-in corpus's training ids
   * @param {string} o.tokenizerSha256
   * @param {number} o.vocabSize
   * @param {string} [o.name]  said in `hello` on every channel (the mesh's name)
   * @param {object} [o.timers]  machine timers in seconds (settings.js names)
   * @param {object} [o.limits]  caps on what a leader may impose (runconfig.limits names)
   * @param {() => number} [o.clock]  seconds, monotonic
   * @param {import('./datafeed.js').FineWebFeed|null} [o.data]  FineWeb-Edu windows from the
   *   page's server (datafeed.fineWebFeed); null: this page reads the built-in corpus only and
   *   refuses a "fineweb@REV" run as incompatible
   * @param {boolean} [o.keep]  export a checkpoint on every save and emit `save` (see above)
   * @param {number} [o.saveEvery]  also save every that many steps (0: never)
   * @param {import('./privatedata.js').PrivateText|null} [o.privateText]  train on this text of
   *   the device's own (usePrivateText)
   * @param {import('./run.js').Log | null} [o.log]  hears the machine (default: console.debug)
   */
  constructor({ mesh, replica, tokens, tokenizerSha256, vocabSize, name = '', timers = {},
    limits = {}, clock = monotonic, log = null, data = null, keep = false, saveEvery = 0,
    privateText = null }) {
    super();
    this.name = name;
    this.mesh = mesh;
    this.replica = replica;
    this.tokens = tokens;
    this.tokenizerSha256 = tokenizerSha256;
    this.vocabSize = vocabSize;
    this.timers = timers;
    this.limits = limits;
    this.clock = clock;
    this.data = data;
    /** @type {DataUnavailable | null} */
    this.dataError = null; // the DataUnavailable that made this page leave its run
    /** @type {import('./run.js').Log} */
    this.log = log ?? ((level, text) => console.debug(`daisychain peer: ${level}: ${text}`));
    /** @type {Machine | null} */
    this.machine = null;
    /** @type {{make: (now: number) => Event, prepare: (() => Promise<void>) | null}[]} */
    this.inbox = []; // {prepare?: async () => void, make: (now) => event}
    this.feeding = false;
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.timer = null;
    /** @type {number | null} */
    this.lastDeadline = null;
    /** @type {string | undefined} */
    this.lastPhase = undefined; // the phase last emitted
    /** @type {Outcome | null} */
    this.outcome = null;
    // True once finish() is done (links closed, saves out) and `finished` was dispatched: the
    // outcome is set first, the page's listeners run only at the end of the drain.
    this.ended = false;
    /** @type {StepRecord[]} */
    this.records = [];
    /** @type {{message: string, hint: string}[]} */
    this.errors = [];
    /** @type {Map<string, Partial<StepRecord>>} */
    this.computed = new Map(); // step/round -> how our gradient was computed
    this.seqS = 0; // smoothed seconds per sequence of our steps (measured(); 0: never)
    // The exchange's work on this page: milliseconds spent feeding the machine (decoding,
    // reducing, the worker's apply); the transport itself runs in the browser, off this thread.
    this.busyMs = 0;
    /** @type {number | null} */
    this.feedT0 = null; // performance.now() when the feed in progress started
    this.exchangeWorkS = 0; // smoothed seconds of it per contributing step (0: never)
    this.bytesSent = 0;
    this.bytesReceived = 0; // frames in, headers included (the mesh bench reads it)
    this.disposed = false;
    this.keep = keep;
    this.saveEvery = saveEvery;
    /** @type {Set<Promise<void>>} */
    this.saves = new Set(); // exports in flight (finish waits for them before ending the worker)
    this.savedStep = -1;
    /** @type {SaveRecord | null} */
    this.lastSave = null; // the latest `save` detail: what a finished run leaves to download
    this.listening = new AbortController(); // ends this peer's mesh listeners when it finishes
    // The private text this peer trains on: set when the machine takes the choice (in the lobby),
    // so it always matches what the machine declares (usePrivateText).
    /** @type {import('./privatedata.js').PrivateText | null} */
    this.privateText = null;
    /** @type {Set<string>} */
    this.privateSeen = new Set(); // peers `private-data` was emitted for
    // Queued first: fed as soon as the machine exists, before any message of the mesh.
    if (privateText !== null) this.usePrivateText(privateText);
    mesh.sessions = true; // a new identity ends the run; the next peer starts the next session
    this.listen();
    if (mesh.id) {
      // A mesh admitted already (a previous run's): start its next session and build the
      // machine now; a link already open (relinked before this peer existed) is met at once.
      mesh.relink();
      this.onWelcome({ id: mesh.id });
      for (const peer of mesh.openPeers()) this.push((now) => E.channelOpened(now, peer));
    }
  }

  /**
   * @param {string} type
   * @param {object} detail
   */
  emit(type, detail) {
    this.dispatchEvent(new DetailEvent(type, detail));
  }

  /**
   * An error the page shows (and the console).
   * @param {string} message
   * @param {string} hint
   */
  fail(message, hint) {
    console.warn(`daisychain peer: ${message} (${hint})`);
    this.errors.push({ message, hint });
    this.emit('error', { message, hint });
  }

  // -- the facade: what the page reads (the twin of node.py's Node properties) ----------------
  //
  // Every panel (static/js/page/) reads the run through these and the plain fields above
  // (`outcome`, `records`, `lastSave`, `errors`, `replica`, `mesh`), never `machine` itself.
  // Each is one read of the machine's state, with the answer before the machine exists (the
  // mesh not admitted yet); none keeps a copy.

  /** This device's id in its group ('' until the mesh is admitted). Node.id. */
  get id() {
    return this.machine?.id ?? '';
  }

  /** Whether the mesh was admitted and the machine exists (the `ready` event said so). */
  get admitted() {
    return this.machine !== null;
  }

  /** 'lobby' | 'configured' | 'training' | 'stopped' (p2p/run.js Phase). Node.phase. */
  get phase() {
    return this.machine?.phase.phase ?? 'lobby';
  }

  /**
   * Whether this page is in a run: a run is configured or training and this peer has not
   * finished. The one answer for every panel (a run that is stopping is no longer "in").
   */
  get inRun() {
    return this.outcome === null && (this.phase === 'configured' || this.phase === 'training');
  }

  /** Whether this page may lead a run now: admitted, in the lobby, not finished (lead()). */
  get canLead() {
    return this.admitted && this.phase === 'lobby' && this.outcome === null;
  }

  /** The run's `config` message (messages.js) once one is led or accepted, else null. Node.config. */
  get config() {
    return this.machine?.config ?? null;
  }

  /** The id of the run's leader (this one's when it leads), null before a run. */
  get leader() {
    return this.machine?.leader ?? null;
  }

  /** Whether this peer leads the run. Node.is_leader. */
  get isLeader() {
    return this.machine?.isLeader ?? false;
  }

  /**
   * Whether the replica holds a state of the run: a leader's from the start, a follower's once
   * it started the run's seed or restored the state it was sent. Node.state is not None.
   */
  get hasState() {
    return this.machine?.hasState ?? false;
  }

  /** The peers this one has seen leave or fail (a Set of ids). Node.gone. */
  get gone() {
    return this.machine?.peers.goneSet ?? new Set();
  }

  /**
   * [peers whose hash of `step` equals ours, peers that reported one]. Node.agreement.
   * @param {number} step
   * @returns {[number, number]}
   */
  agreement(step) {
    return this.machine?.agreement(step) ?? [0, 0];
  }

  /**
   * The sync guard's read-only tally of attempt (step, round) over `roster` (machine/guard.js
   * tally: same, differ, missing, backends, byPeer), or null when ours is not in.
   * @param {number} step
   * @param {number} round
   * @param {Iterable<string>} roster
   */
  tally(step, round, roster) {
    return this.machine?.tally(step, round, roster) ?? null;
  }

  /**
   * Seconds per sequence each peer last reported (a Map id -> seq_s, from `ready` and `hash`
   * messages, this device's own from its gradients; 0: not measured): what the leader shares
   * the step by. Read-only: the machine's own map (empty before the machine exists).
   */
  get speeds() {
    return this.machine?.leadership.speeds ?? new Map();
  }

  /**
   * The peers of this run known to train on private data (a Set): this page when it does, and,
   * at the leader, every peer whose `ready` or `sync-request` said so. Node.private_data_peers.
   */
  get privateDataPeers() {
    return this.machine?.privateDataPeers ?? new Set();
  }

  // -- inputs ---------------------------------------------------------------------------------

  listen() {
    const opts = { signal: this.listening.signal };
    /** @type {(type: string, handler: (e: DetailEvent) => void) => void} */
    const on = (type, handler) =>
      this.mesh.addEventListener(type, /** @type {EventListener} */ (handler), opts);
    on('welcome', (e) => this.onWelcome(e.detail));
    on('channel-open', (e) => this.push((now) => E.channelOpened(now, e.detail.peer)));
    on('channel-closed', (e) => this.push((now) => E.channelClosed(now, e.detail.peer)));
    on('peer-left', (e) => this.push((now) => E.peerLeft(now, e.detail.peer)));
    on('message', (e) => {
      this.push((now) => E.messageReceived(now, e.detail.peer, e.detail.data));
    });
    on('frame', (e) => {
      this.bytesReceived += e.detail.data.byteLength;
      this.push((now) => E.frameReceived(now, e.detail.peer, e.detail.data));
    });
    on('signaling', (e) => {
      if (e.detail.state === 'failed') {
        this.push((now) => E.signalingLost(now, `the signaling server refused this page: ${e.detail.reason}`));
      }
    });
  }

  /** @param {{id: string}} welcome */
  onWelcome({ id }) {
    if (this.machine === null) {
      this.machine = new Machine(makeSettings({
        id, name: this.name, tokenizer_sha256: this.tokenizerSha256,
        vocab_size: this.vocabSize, backend: this.replica.backend,
        reference_probe: REFERENCE_STEP_PROBE, timers: this.timers, can_save: true,
        limits: this.limits,
        data_sources: ['builtin', ...(this.data === null ? [] : [this.data.dataName])],
      }), this.replica, { log: this.log });
      this.emit('ready', { id });
      this.pump();
    } else if (id !== this.machine.id) {
      // The signaling socket came back under a new id: the others saw this id leave and every
      // channel of it is closed. The run cannot continue under the old identity.
      const old = this.machine.id;
      this.push((now) => E.signalingLost(now, `the signaling connection was lost and came back ` +
        `as a new device (${id}); this run cannot continue under the old id ${old}`));
    }
  }

  /**
   * Queue an input; `make(now)` builds its event when it is fed; `prepare` runs just before.
   * @param {(now: number) => Event} make
   * @param {(() => Promise<void>) | null} [prepare]
   */
  push(make, prepare = null) {
    if (this.disposed) return;
    this.inbox.push({ make, prepare });
    this.pump();
  }

  // -- the user's requests --------------------------------------------------------------------

  /**
   * Lead a run: {preset, steps, lr?, warmup?, seed?, batch?, seqLen?, width?, layers?, heads?,
   * globalBatch?, sharesBy?, outer? ({innerSteps, lr, momentum}: an outer run),
   * minPeers}. Rejects with an
   * Incompatible (message, hint) when this peer could not train it itself.
   * @param {LeadChoices & {minPeers?: number}} choices
   * @returns {Promise<Config>}
   */
  async lead({ minPeers = 2, ...choices }) {
    this.mayLead();
    const config = leadConfig({ ...choices, minPeers, vocabSize: this.vocabSize,
      tokenizerSha256: this.tokenizerSha256 });
    const accepted = parseRunConfig(config, { tokenizerSha256: this.tokenizerSha256,
      vocabSize: this.vocabSize, caps: this.machine.settings.limits,
      dataSources: this.machine.settings.data_sources, outerRuns: trainsOuterRuns(this.replica) });
    await /** @type {Promise<void>} */ (new Promise((resolve, reject) => {
      this.push((now) => E.userLead(now, config, minPeers), async () => {
        try {
          this.privateText?.checkFits(accepted.model.seqLen); // fed before this: it is current
          // The sync mode before the state, as node.py's _prepare_lead (the machine tells it
          // again when it takes the lead, after this).
          if (trainsOuterRuns(this.replica)) this.replica.setOuter(accepted.outer);
          await this.replica.start(accepted.model, accepted.optim, config.seed);
          resolve();
        } catch (exc) {
          reject(exc);
          throw exc;
        }
      });
    }));
    return config;
  }

  /**
   * Throws (with a hint) unless this page may lead a run now: admitted, in the lobby.
   * @returns {asserts this is {machine: Machine}}
   */
  mayLead() {
    if (!this.admitted) throw Object.assign(new Error('not connected yet'), { hint: 'wait for the page to join its group' });
    if (!this.canLead) {
      throw Object.assign(new Error(`this device is already in a run (${this.phase})`),
        { hint: 'wait for the run to end, then lead the next one' });
    }
  }

  /**
   * Lead a run that continues the checkpoint `bytes` (a Uint8Array: a file the user chose, a
   * saved state) to `steps` (default: defaultResumeSteps), as node.py `--resume`: the replica
   * restores it, then `config` goes out with resume_step/resume_hash and every follower asks for
   * the state (sync-request). Rejects with a ReplicaRefused (a bad file: the reason) or an
   * Incompatible (the run rules' message and hint); resolves to the config.
   * @param {Uint8Array} bytes
   * @param {{steps?: number, minPeers?: number, source?: string, globalBatch?: number}} [options]
   * @returns {Promise<Config>}
   */
  async leadResumed(bytes, { steps, minPeers = 2, source = 'the checkpoint', globalBatch } = {}) {
    this.mayLead();
    const ck = await decodeCheckpoint(bytes, source, { tokenizerSha256: this.tokenizerSha256,
      vocabSize: this.vocabSize });
    const config = resumeConfig(ck, { steps: steps ?? defaultResumeSteps(ck),
      tokenizerSha256: this.tokenizerSha256, globalBatch, minPeers });
    const accepted = parseRunConfig(config, { tokenizerSha256: this.tokenizerSha256,
      vocabSize: this.vocabSize, caps: this.machine.settings.limits,
      dataSources: this.machine.settings.data_sources, outerRuns: trainsOuterRuns(this.replica) });
    await /** @type {Promise<void>} */ (new Promise((resolve, reject) => {
      this.push((now) => E.userLead(now, config, minPeers), async () => {
        try {
          this.privateText?.checkFits(ck.model.seqLen); // fed before this: it is current
          if (trainsOuterRuns(this.replica)) this.replica.setOuter(accepted.outer);
          await this.replica.restore(bytes, source);
          resolve();
        } catch (exc) {
          reject(exc);
          throw exc;
        }
      });
    }));
    return config;
  }

  /**
   * Train on `text` (a privatedata.js PrivateText; null: on the run's text) in the next run this
   * peer enters. Taken when it is fed, only while no run is configured (the machine's rule too):
   * a run keeps what it declared, and the page offers the choice again for its next run.
   * @param {import('./privatedata.js').PrivateText | null} text
   */
  usePrivateText(text) {
    this.push((now) => {
      this.assertMachine();
      if (this.machine.config === null) this.privateText = text;
      return E.userPrivateData(now, text !== null);
    });
  }

  /** Save now (userSave): a leader also asks every peer to save this step. */
  saveGroup() {
    this.push((now) => E.userSave(now));
  }

  /**
   * This page's state now as checkpoint bytes: {run, step, hash, bytes, at}; after the run
   * ended, the state it saved last. Rejects with a hint when this page holds no state.
   * @returns {Promise<SaveRecord>}
   */
  async checkpoint() {
    if (this.outcome === null && this.replica.worker !== null && this.machine?.config != null) {
      const run = this.machine.config.run;
      const bytes = await this.replica.checkpoint();
      // A step already sent to the worker is applied before the export: the bytes can hold a
      // later step than the replica showed when asked, so they name their own step.
      const step = this.replica.stepOf(bytes);
      const hash = step === this.replica.step ? this.replica.hash
        : this.records.findLast((r) => r.step === step)?.hash ?? null;
      return { run, step, hash, bytes, at: Date.now() };
    }
    if (this.lastSave !== null) return this.lastSave;
    throw Object.assign(new Error('this page holds no trained state yet'),
      { hint: 'join or lead a run first; a finished run keeps its last state when the page keeps checkpoints' });
  }

  /** Leader: end the whole run at the next step boundary. */
  endRun(reason = "the leader's user ended the run") {
    this.push((now) => E.userStop(now, reason));
  }

  /** Leave the run cleanly: `leave` to every peer, then finish. */
  leave(reason = 'the page was closed') {
    this.push((now) => E.userLeave(now, reason));
  }

  // -- the loop -------------------------------------------------------------------------------

  async pump() {
    if (this.feeding || this.machine === null) return;
    this.feeding = true;
    try {
      while (this.inbox.length > 0 && this.outcome === null) {
        const item = /** @type {BrowserPeer['inbox'][number]} */ (this.inbox.shift()); // not empty
        await this.feedDueTimer();
        if (this.outcome !== null) break;
        if (item.prepare !== null) {
          try {
            await item.prepare();
          } catch (/** @type {any} */ exc) { // anything thrown: its message and hint are shown
            this.fail(`could not prepare the run: ${exc.message}`, exc.hint ?? 'see the message');
            continue;
          }
        }
        await this.feed(item.make(this.clock()));
      }
    } finally {
      this.feeding = false;
    }
    this.arm();
  }

  async feedDueTimer() {
    this.assertMachine();
    const deadline = this.machine.nextDeadline();
    if (deadline !== null && deadline <= this.clock()) await this.feed(E.timer(this.clock()));
  }

  arm() {
    clearTimeout(this.timer ?? undefined);
    this.timer = null;
    if (this.outcome !== null || this.machine === null || this.disposed) return;
    const deadline = this.machine.nextDeadline();
    if (deadline === null) return;
    let ms = Math.max(0, (deadline - this.clock()) * 1000);
    if (deadline === this.lastDeadline) ms = Math.max(ms, MIN_RETRY_MS);
    this.timer = setTimeout(() => {
      this.lastDeadline = deadline;
      this.push((now) => E.timer(now));
    }, ms);
  }

  /** Milliseconds this page has spent feeding the machine, the feed in progress included. */
  busyNow() {
    return this.busyMs + (this.feedT0 === null ? 0 : performance.now() - this.feedT0);
  }

  /** @param {Event} event */
  async feed(event) {
    const t0 = performance.now();
    this.feedT0 = t0;
    try {
      await this.feedTimed(event);
    } finally {
      this.busyMs += performance.now() - t0;
      this.feedT0 = null;
    }
  }

  /** @param {Event} event */
  async feedTimed(event) {
    this.assertMachine();
    let effects;
    try {
      effects = await this.machine.handle(event);
    } catch (/** @type {any} */ exc) { // anything thrown: its message and hint are shown
      // A bug or a replica failure the machine does not expect: this peer cannot go on.
      this.fail(`the protocol machine failed on ${event.type}: ${exc.message}`,
        exc.hint ?? 'this device stays in its group for the next run; report this if it repeats');
      this.finish({ reason: 'error', step: this.replica.step, hash: this.replica.hash,
        message: exc.message, hashes: new Map(), code: 'internal' });
      return;
    }
    const phase = this.phase;
    if (phase !== this.lastPhase) {
      this.lastPhase = phase;
      if (phase === 'configured') this.checkPrivateText();
      this.emit('phase', { phase });
    }
    this.notePrivateData();
    for (const effect of effects) {
      if (effect.type === 'finished') this.finish(effect.outcome);
      else this.execute(effect);
    }
  }

  /** @param {Effect} effect */
  execute(effect) {
    switch (effect.type) {
      case 'send-message':
        this.mesh.apply(effect);
        break;
      case 'send-payload':
        if (this.mesh.apply(effect)) this.bytesSent += effect.payload.length;
        break;
      case 'close':
        this.closeSoon(effect.peer);
        break;
      case 'compute':
        this.startCompute(effect);
        break;
      case 'step-applied':
        this.record(effect);
        break;
      case 'save':
        this.save(effect.step, this.outcome === null && this.phase !== 'stopped' ? 'asked' : 'end');
        break;
      default:
        this.fail(`unknown effect ${effect.type}`, 'a bug: report it');
    }
  }

  /**
   * Close a channel once what is queued to it (the refusal's `error`) has left, or after 1 s.
   * @param {string} peer
   */
  async closeSoon(peer) {
    const until = this.clock() + CLOSE_DRAIN_MS / 1000;
    while (this.mesh.buffered(peer) > 0 && this.clock() < until) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    this.mesh.closePeer(peer);
  }

  /** A FineWeb-Edu run's gradient: on the lanes its feed prefetched (the window addressed by
   * (seed, step, lane): the address's rank is the lane); null when a window cannot be read
   * (this page then leaves the run with the reason, as node.py). * @param {Compute} c
   * @returns {Promise<ComputeResult | null>}
   */
  async computeOnFineWeb(c) {
    const feed = this.data;
    try {
      if (feed === null) { // the data rule admits no FineWeb-Edu run without a feed
        throw new DataUnavailable('this page has no FineWeb-Edu feed', 'reload the page');
      }
      // Every lane of ours is asked at once (fetched, or taken from the prefetch, in parallel)
      // before any gradient is computed.
      // An outer round's inner steps name their batch index (modelreplica.js computeRound).
      return await this.replica.compute(c,
        (lane, index) => feed.batch(this.replica.address(lane, index)), this.earlyChunks(c));
    } catch (exc) {
      if (!(exc instanceof DataUnavailable)) throw exc;
      // Never train on other text: leave the run cleanly and say why.
      this.dataError = exc;
      this.fail(`cannot read the run's training data: ${exc.message}`, exc.hint);
      this.push((now) => E.userLeave(now, `cannot read the run's training data: ${exc.message}`));
      return null;
    }
  }

  /**
   * A run this page follows with private text needs sequences its text can fill: otherwise it
   * leaves at once (before any step) and says why, as a page that cannot read the run's data.
   */
  checkPrivateText() {
    const text = this.privateText;
    if (text === null || this.isLeader) return; // a leader checked in lead()
    try {
      // (configured: feedTimed checks this on the phase's change)
      text.checkFits(/** @type {Config} */ (this.config).model.seq_len);
    } catch (exc) {
      if (!(exc instanceof PrivateDataError)) throw exc;
      this.fail(`cannot train this run on the private text: ${exc.message}`, exc.hint);
      this.push((now) => E.userLeave(now, `its private text is too short for this run: ${exc.message}`));
    }
  }

  /** Emit `private-data` (and log) once for each peer newly known to train on private data. */
  notePrivateData() {
    for (const peer of this.privateDataPeers) {
      if (this.privateSeen.has(peer)) continue;
      this.privateSeen.add(peer);
      this.log('info', `${peer} trains on private data: only its gradients reach this run`);
      this.emit('private-data', { peer });
    }
  }

  /**
   * A gradient on this page's private text: lane l of step s is the batch of (seed, s, l) drawn
   * from its own ids (privatedata.js), whatever the run's data is. Nothing is fetched.
   * @param {Compute} c
   */
  computeOnPrivate(c) {
    // (startCompute calls this only with private text)
    const text = /** @type {import('./privatedata.js').PrivateText} */ (this.privateText);
    const { seed, step } = this.replica;
    // (a compute effect comes after start or restore: the replica has its model)
    const model = /** @type {import('./modelreplica.js').ModelConfig} */ (this.replica.model);
    return this.replica.compute(c, (lane, index = step) => text.lane(model, seed, index, lane),
      this.earlyChunks(c));
  }

  /**
   * A builtin run's gradient: lane l of step s is the batch of (seed, s, l).
   * @param {Compute} c
   */
  computeOnBuiltin(c) {
    return this.replica.compute(c,
      (lane, index) => this.replica.builtinLane(this.tokens, lane, index), this.earlyChunks(c));
  }

  /**
   * Each chunk of our gradient goes to the machine as soon as the backward produced it
   * (compute-partial; docs/PROTOCOL.md "Early chunks"): its contribution leaves while the rest
   * is computed.
   * @param {Compute} c
   * @returns {(k: number, payload: Uint8Array) => void}
   */
  earlyChunks(c) {
    return (k, payload) => this.push((now) => E.computePartial(now, c.step, c.round, k, payload));
  }

  /**
   * Seconds per sequence of this device's steps, smoothed (exponential average, the newest step
   * weighted 1/2, as p2p/pace.py): the gradients plus the exchange's work of the last
   * contributing step (`exchangeWorkS`), over the share. What the leader shares the step's
   * sequences by, so a device whose exchange is slow gets fewer. A step with a share of 0
   * measures nothing, so the last value stays (and is reported again). 0: never.
   * @param {ComputeResult} r
   */
  measured(r) {
    if (r.count > 0) {
      const newest = (r.gradMs / 1000 + this.exchangeWorkS) / r.count;
      this.seqS = this.seqS === 0 ? newest : (this.seqS + newest) / 2;
    }
    return this.seqS;
  }

  /** @param {Compute} c */
  startCompute(c) {
    this.assertMachine();
    // The text we declared: private (our `ready` said so) or the run's. A builtin run's gradient
    // starts at once, as before FineWeb-Edu (the worker's requests keep their order with the
    // checkpoint exports the machine asks for next).
    if ((this.privateText !== null) !== this.machine.privateData) { // a bug: never guess
      const text = 'the private text and what this page declared differ';
      this.fail(`computing step ${c.step} failed: ${text}`, 'report this; the device stays in its group');
      this.push((now) => E.computeFailed(now, c.step, c.round, text));
      return;
    }
    let computing;
    if (this.privateText !== null) computing = this.computeOnPrivate(c);
    // (a compute effect comes only in a configured run)
    else if (revisionOf(/** @type {Config} */ (this.machine.config).data) === null) {
      computing = this.computeOnBuiltin(c);
    }
    else computing = this.computeOnFineWeb(c);
    computing.then((r) => {
      if (r === null) return;
      const seqS = this.measured(r);
      this.computed.set(`${c.step}/${c.round}`, { computeMs: r.ms, gradMs: r.gradMs,
        computedOn: r.backend, gpuProducts: r.products, computedAtMs: performance.now(),
        seqS, busyAtMs: r.count > 0 ? this.busyNow() : null });
      this.push((now) => E.computeDone(now, c.step, c.round, r.loss, r.payloads, r.probe, seqS));
    }, (exc) => {
      const text = `${exc.name ?? 'Error'}: ${exc.message}`;
      this.fail(`computing step ${c.step} failed: ${exc.message}`,
        exc.hint ?? 'the run stops for this device; it stays in its group for the next run');
      this.push((now) => E.computeFailed(now, c.step, c.round, text));
    });
  }

  /** @param {StepApplied} a */
  record(a) {
    const key = `${a.step}/${a.round}`;
    const ours = this.computed.get(key);
    // Our share's exchange work: the feeds from our gradients' end to this apply (waiting for
    // the others' frames is not work, and runs no feed).
    let exchangeWorkS = 0;
    if (ours?.busyAtMs !== undefined && ours.busyAtMs !== null) {
      exchangeWorkS = (this.busyNow() - ours.busyAtMs) / 1000;
      this.exchangeWorkS = this.exchangeWorkS === 0 ? exchangeWorkS : (this.exchangeWorkS + exchangeWorkS) / 2;
    }
    const r = {
      step: a.step, round: a.round, loss: a.loss, hash: a.hash, roster: [...a.roster],
      shares: [...a.shares], share: a.roster.includes(this.id) ? a.shares[a.roster.indexOf(this.id)] : 0,
      probe: a.probe, backend: a.backend, leader: a.leader,
      privateData: a.roster.filter((p) => this.privateDataPeers.has(p)),
      bytesSent: this.bytesSent, bytesReceived: this.bytesReceived, appliedAtMs: performance.now(),
      ...(ours ?? {}), exchangeWorkS,
    };
    this.computed.delete(key);
    this.records.push(r);
    this.emit('step', r);
    if (this.saveEvery > 0 && a.step % this.saveEvery === 0) this.save(a.step, 'every');
  }

  /**
   * Export the replica (at `step`) as checkpoint bytes and emit `save` (when `keep`).
   * @param {number} step
   * @param {'asked' | 'every' | 'end'} why
   */
  save(step, why) {
    this.assertMachine();
    if (!this.keep) {
      this.log('info', `save of step ${step} (${why}): this page keeps no checkpoint`);
      return;
    }
    if (step === this.savedStep || this.replica.worker === null) return;
    this.savedStep = step;
    const run = this.machine.config?.run ?? '';
    const hash = this.replica.hash;
    // Asked now, before anything else reaches the worker: the export is of this step.
    const exporting = new Promise((resolve) => resolve(this.replica.checkpoint())).then((bytes) => {
      this.lastSave = { run, step, hash, why, bytes, at: Date.now() };
      this.emit('save', this.lastSave);
    }, (exc) => {
      this.fail(`saving step ${step} failed: ${exc.message}`, exc.hint ?? 'the run goes on; try Save again');
    });
    this.saves.add(exporting);
    exporting.finally(() => this.saves.delete(exporting));
  }

  /**
   * The machine exists: inputs are fed (pump) and effects executed only once it does.
   * @returns {asserts this is {machine: Machine}}
   */
  assertMachine() {
    if (this.machine === null) throw new Error('daisychain peer: no protocol machine yet (a bug)');
  }

  /** Stop feeding the machine and release the timer (the page is going away; tests). */
  dispose() {
    this.disposed = true;
    this.listening.abort();
    clearTimeout(this.timer ?? undefined);
    this.timer = null;
    this.inbox.length = 0;
  }

  /** @param {Outcome} outcome */
  async finish(outcome) {
    if (this.outcome !== null) return;
    this.outcome = outcome;
    clearTimeout(this.timer ?? undefined);
    this.timer = null;
    // Drain: a stop and its acknowledgements must leave before the channels close.
    const linger = this.machine?.settings.timers.linger_s ?? 10;
    const until = this.clock() + linger;
    while (this.mesh.openPeers().some((p) => this.mesh.buffered(p) > 0) && this.clock() < until) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    // The next run is a new BrowserPeer on this mesh: close the links, keep the signaling.
    this.listening.abort();
    this.mesh.closeLinks();
    await Promise.allSettled([...this.saves]); // the worker ends only once its exports are out
    this.replica.close();
    this.data?.close();
    this.ended = true; // the dispatch below is synchronous: nothing reads `ended` in between
    this.emit('finished', { outcome });
  }
}
