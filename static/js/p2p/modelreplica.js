// @ts-check
// The browser peer's model replica: the protocol machine's replica interface
// (machine/replica.js: step, hash, start, restore, checkpoint, apply) backed by the training
// worker (static/js/train/), plus the gradient the shell computes for a `compute` effect. The
// browser twin of daisychain/p2p/modelreplica.py and of node.py's `_start_compute`.
//
// The weights live in the worker; this object keeps only the step and hash the worker last
// reported, the run's model and optimizer configs and its seed. One worker serves one run
// (its `init` fixes the model): `start` and `restore` of another model start a new worker.
//
// Backend: chosen once per page, before any run, by the training worker's rule (correct first,
// then measured fastest) on the `tiny` preset, as the Python peer's `--backend auto` chooses
// before it knows the run (docs/KERNELS.md, "Backend choice"); every run's worker is then
// started on that backend (gated and probed again on its own device, not timed again). The
// protocol machine publishes the backend's name with every hash, so it must be known before the
// machine is born.
//
// Outer runs (docs/PROTOCOL.md, "Outer runs"): `setOuter` (Python's set_outer) makes every run
// this replica starts or restores an outer run: the worker then holds the outer weights W, the
// momentum M and this peer's own inner AdamW state (train/outer.js); `compute` is a round (H
// inner steps on a copy, the pseudo-gradient's chunks: Python's p2p/inner.py), `apply` the outer
// step, `hash` the outer hash, checkpoints carry W and M (checkpoint.js encodeOuterCheckpoint).
// The inner state a round produced is kept when that round is applied: the round the last
// `compute` of the step computed (a re-committed roster computes the step again from the same
// copy; a share of 0 computes nothing and keeps the inner state as it was).

import { TrainWorker } from '../train/client.js';
import { fromTensors, toTensors } from '../train/messages.js';
import { sampleBatch } from '../model/batches.js';
import { paramShapes } from '../model/params.js';
import { BLOCK, encode, flatten, nBlocks, unflatten } from './codec.js';
import { chunkSlice } from './allreduce.js';
import { ChunkWatch } from './early.js';
import { offsets, pieces, roundSteps } from './shares.js';
import { decodeCheckpoint, encodeCheckpoint, encodeOuterCheckpoint, stepOf } from './checkpoint.js';
import { ReplicaRefused } from './machine/replica.js';
import { PieceMean } from '../train/piecemean.js';

/**
 * The token ids a contribution's data digest covers (statements.js dataDigest; docs/TRUST.md
 * "Keys and statements"): every row of its pieces in position order, T + 1 ids a row (the
 * row's inputs and its last target: the text it read). Python's p2p/contribution.py token_rows.
 * @param {{x: Int32Array, y: Int32Array, rows: number}[]} pieces  rowsOf's, in position order
 * @param {number} seqLen
 * @returns {Int32Array[]}
 */
export function tokenRows(pieces, seqLen) {
  const out = [];
  for (const { x, y, rows } of pieces) {
    for (let r = 0; r < rows; r++) {
      const row = new Int32Array(seqLen + 1);
      row.set(x.subarray(r * seqLen, (r + 1) * seqLen));
      row[seqLen] = y[(r + 1) * seqLen - 1];
      out.push(row);
    }
  }
  return out;
}

const plain = (/** @type {object} */ o) => JSON.parse(JSON.stringify(o)); // a frozen config as a cloneable object

/**
 * A lane's batch of one step: (rows, seqLen) token ids and their targets, row-major.
 * @typedef {{x: Int32Array, y: Int32Array}} LaneBatch
 * What `compute` resolves to (see there).
 * @typedef {{loss: number, payloads: Uint8Array[], probe: string, backend: string,
 *   products: number, ms: number, gradMs: number, count: number,
 *   mean?: Float32Array | null}} ComputeResult
 * The part of a `compute` effect (machine/effects.js) compute reads.
 * @typedef {{step: number, rank: number, shares: readonly number[]}} ComputeOrder
 * Lane `lane` of batch index `index` (by default the next step's), or a promise of it.
 * @typedef {(lane: number, index?: number) => LaneBatch | Promise<LaneBatch>} LaneOf
 * A run's model and optimizer (model/config.js modelConfig, model/optim.js adamwConfig) and
 * outer loop (runconfig.js's `outer`, outer/nesterov.js outerConfig).
 * @typedef {ReturnType<typeof import('../model/config.js').modelConfig>} ModelConfig
 * @typedef {ReturnType<typeof import('../model/optim.js').adamwConfig>} OptimConfig
 * @typedef {{innerSteps: number, lr: number, momentum: number, overlap?: number,
 *   cut?: string}} OuterLoop
 * What a worker event listener hears (client.js WorkerEvent).
 * @typedef {(event: import('../train/client.js').WorkerEvent) => void} OnEvent
 */

/**
 * Choose this page's backend (docs/KERNELS.md, "Backend choice"): `backend` 'auto' measures
 * every correct backend on one `tiny` step; a named one ('webgpu-dp4a', 'webgpu-lut', 'js-cpu')
 * must pass its gates or this rejects with a hint. Resolves to the worker's selection record.
 * @param {{backend?: string, makeWorker?: () => TrainWorker, onEvent?: OnEvent}} [options]
 */
export async function chooseBackend({ backend = 'auto', makeWorker = () => new TrainWorker(),
  onEvent = () => {} } = {}) {
  const worker = makeWorker();
  const forward = (/** @type {Event} */ e) => onEvent(/** @type {CustomEvent} */ (e).detail);
  for (const kind of ['progress', 'error']) worker.addEventListener(kind, forward);
  try {
    return await worker.init({ model: { preset: 'tiny' }, seed: 1, backend,
      measure: backend === 'auto' });
  } finally {
    worker.terminate();
  }
}

export class WorkerReplica {
  /**
   * @param {object} o
   * @param {string} o.tokenizerSha256  of the tokenizer the tokens were made with
   * @param {number} o.vocabSize
   * @param {string} o.backend  the backend every run's worker trains on (chooseBackend)
   * @param {() => TrainWorker} [o.makeWorker]
   * @param {OnEvent} [o.onEvent]  every worker event ({kind, ...}: fallback, device-lost,
   *   device-rebuilt, error, ...), for the page to show
   */
  constructor({ tokenizerSha256, vocabSize, backend, makeWorker = () => new TrainWorker(),
    onEvent = () => {} }) {
    this.tokenizerSha256 = tokenizerSha256;
    this.vocabSize = vocabSize;
    this.backend = backend;
    this.makeWorker = makeWorker;
    this.onEvent = onEvent;
    /** @type {TrainWorker | null} */
    this.worker = null;
    /** @type {ModelConfig | null} */
    this.model = null;
    /** @type {OptimConfig | null} */
    this.optim = null;
    this.seed = 0;
    /** @type {Record<string, any> | null} */
    this.selection = null;
    this._step = 0;
    this._hash = '';
    /** @type {Required<OuterLoop> | null} */
    this.outer = null; // the run's outer loop {innerSteps, lr, momentum} (null: per-step)
    /** @type {{step: number, token: number | null} | null} */
    this.round = null; // an outer run: {step, token} of the last round computed (token null: none)
    this.tokens = 0; // the last round token handed to the worker
  }

  /**
   * The run's outer loop ({innerSteps, lr, momentum, overlap, cut}; null: a per-step run), told by
   * the machine before start or restore (machine/replica.js). Its presence is what lets the
   * page's machine accept outer runs (runconfig `outerRuns`).
   * @param {OuterLoop | null} outer
   */
  setOuter(outer) {
    this.outer = outer === null ? null : { innerSteps: outer.innerSteps, lr: outer.lr,
      momentum: outer.momentum, overlap: outer.overlap ?? 0, cut: outer.cut ?? 'share' };
  }

  get step() {
    return this._step;
  }

  get hash() {
    return this._hash;
  }

  /**
   * A new worker for `model` (the old one, if any, is ended only once this one is ready).
   * @param {ModelConfig} model
   * @param {OptimConfig} optim
   * @param {number} seed
   * @param {import('../train/messages.js').TrainState} [state]  start from it
   * @param {{step: number, momentum: import('../train/messages.js').Tensors}} [shared]  an
   *   outer run's rounds and momentum
   */
  async newWorker(model, optim, seed, state = undefined, shared = undefined) {
    const worker = this.makeWorker();
    const forward = (/** @type {Event} */ e) => this.onEvent(/** @type {CustomEvent} */ (e).detail);
    for (const kind of ['fallback', 'device-lost', 'device-rebuilt', 'error']) {
      worker.addEventListener(kind, forward);
    }
    /** @type {Parameters<TrainWorker['init']>[0]} */
    const init = { model: plain(model), optim: plain(optim), seed, backend: this.backend,
      measure: false };
    if (state !== undefined) init.state = state;
    let selection;
    try {
      selection = await worker.init(init);
    } catch (exc) {
      worker.terminate();
      throw exc;
    }
    let identity = selection;
    if (this.outer !== null) {
      try {
        identity = await worker.outer(this.outer, shared);
      } catch (exc) {
        worker.terminate();
        throw exc;
      }
    }
    this.worker?.terminate();
    this.worker = worker;
    this.selection = selection;
    this.model = model;
    this.optim = optim;
    this.seed = seed;
    this._step = identity.step;
    this._hash = identity.hash;
    this.round = null;
  }

  /**
   * @param {ModelConfig} model
   * @param {OptimConfig} optim
   * @param {number} seed
   */
  async start(model, optim, seed) {
    await this.newWorker(model, optim, seed);
  }

  /**
   * @param {Uint8Array} blob
   * @param {string} source
   */
  async restore(blob, source) {
    const ck = await decodeCheckpoint(blob, source, {
      tokenizerSha256: this.tokenizerSha256, vocabSize: this.vocabSize,
    });
    if ((ck.outer === null) !== (this.outer === null)) {
      const kind = (/** @type {object | null} */ o) => (o === null ? 'a per-step run' : 'an outer run');
      throw new ReplicaRefused(`${source}: a checkpoint of ${kind(ck.outer)}, but this is ` +
        `${kind(this.outer)}`);
    }
    if (ck.outer !== null) {
      // A new worker: its inner optimizer starts fresh on the outer weights, as Python's does.
      await this.newWorker(ck.model, ck.optim, ck.seed, ck.state,
        { step: ck.outer.step, momentum: ck.outer.momentum });
      if (this._hash !== ck.weightHash) {
        throw new ReplicaRefused(`${source}: the worker holds ${this._hash.slice(0, 12)}... after ` +
          `loading a checkpoint of ${ck.weightHash.slice(0, 12)}...`);
      }
      return;
    }
    const worker = this.worker;
    const same = worker !== null && this.model !== null && this.optim !== null &&
      JSON.stringify(plain(ck.model)) === JSON.stringify(plain(this.model)) &&
      JSON.stringify(plain(ck.optim)) === JSON.stringify(plain(this.optim)) && ck.seed === this.seed;
    if (same) {
      const r = await worker.loadState(ck.state);
      if (r.hash !== ck.weightHash) {
        // decodeCheckpoint verified the bytes; a worker that hashes them otherwise is broken.
        throw new ReplicaRefused(`${source}: the worker holds ${r.hash.slice(0, 12)}... after ` +
          `loading a checkpoint of ${ck.weightHash.slice(0, 12)}...`);
      }
      this._step = r.step;
      this._hash = r.hash;
    } else {
      await this.newWorker(ck.model, ck.optim, ck.seed, ck.state);
    }
  }

  /** @returns {Promise<Uint8Array>} */
  async checkpoint() {
    this.assertStarted();
    if (this.outer !== null) {
      const { state, outer } = await this.worker.exportOuter();
      return encodeOuterCheckpoint({ step: outer.step, params: state.params,
        momentum: outer.momentum }, { model: this.model, optim: this.optim, seed: this.seed,
        outer: this.outer, tokenizerSha256: this.tokenizerSha256 });
    }
    const state = await this.worker.exportState();
    return encodeCheckpoint(state, { model: this.model, optim: this.optim, seed: this.seed,
      tokenizerSha256: this.tokenizerSha256 });
  }

  /**
   * The step checkpoint bytes hold (the `step` in their header).
   * @param {Uint8Array} bytes
   */
  stepOf(bytes) {
    return stepOf(bytes);
  }

  /** @param {Float32Array} flat */
  async apply(flat) {
    this.assertStarted();
    if (this.outer !== null) {
      // The round this step computed last gives this peer its inner state (none: share 0).
      const token = this.round?.step === this._step + 1 ? this.round.token : null;
      const r = await this.worker.applyOuter(flat, token);
      this._step = r.step;
      this._hash = r.hash;
      this.round = null;
      return;
    }
    const grads = toTensors(unflatten(flat, paramShapes(this.model)));
    const r = await this.worker.apply(grads, { transfer: true });
    this._step = r.step;
    this._hash = r.hash;
  }

  /**
   * This replica's positions of the step as lane pieces (docs/PROTOCOL.md, "Gradient chunks":
   * positions [o[rank], o[rank] + shares[rank]) cut at lane boundaries, `{lane, row, rows}`).
   * @param {{rank: number, shares: readonly number[]}} order
   */
  piecesOf({ rank, shares }) {
    this.assertStarted();
    return pieces(offsets(shares)[rank], shares[rank], this.model.batch);
  }

  /**
   * Lane `lane` of batch index `index` in the built-in corpus (the batch version 1 gave that
   * rank): by default the next step's; an outer round's inner step names its own (compute).
   */
  /**
   * @param {Uint16Array | Uint32Array} tokens
   * @param {number} lane
   * @param {number} [index]
   * @returns {LaneBatch}
   */
  builtinLane(tokens, lane, index = this._step) {
    this.assertStarted();
    const { batch, seqLen } = this.model;
    return sampleBatch(tokens, batch, seqLen, this.seed, index, lane);
  }

  /**
   * The `compute` effect: this replica's mean gradient of step `step` (the state is at
   * step - 1) over its positions as roster rank `rank` of a roster with `shares`, quantized
   * into the roster's chunks (empty bytes for an empty chunk, and for every chunk with a share
   * of 0, when only the kernel probe is computed); and the kernel probe through the live
   * kernel. `laneOf(lane)` gives (or resolves to) lane `lane`'s batch {x, y} of the step (a
   * FineWeb-Edu run's window from datafeed.js, or builtinLane); every lane is read before any
   * gradient is computed, and each piece takes its rows of its lane. Each piece's gradient is
   * the model's mean over its rows; more than one
   * combine as g = g0 * f32(r0); g = g + g1 * f32(r1); ...; g = g / f32(share) in float32, the
   * loss the same way (training.mean_gradient). Resolves to {loss, payloads, probe, backend
   * (the tier that computed it), products (how many products ran on the GPU), ms (the whole
   * compute), gradMs (the gradients alone: what seconds per sequence are measured on), count,
   * mean (the float32 mean before quantization, pinned by NUMERICS.md section 9; null for a
   * share of 0)}.
   * With `onPartial(k, payload)`, each chunk final before the last piece's backward ends is
   * handed over as soon as it is (early.js; docs/PROTOCOL.md "Early chunks"): the same bytes
   * `payloads[k]` then holds.
   */
  /**
   * @param {ComputeOrder} order
   * @param {LaneOf} laneOf
   * @param {((k: number, payload: Uint8Array) => void) | null} [onPartial]
   * @returns {Promise<ComputeResult>}
   */
  async compute({ step, rank, shares }, laneOf, onPartial = null) {
    this.assertStarted();
    if (this.outer !== null) return this.computeRound({ step, rank, shares }, laneOf, onPartial);
    const parts = this.piecesOf({ rank, shares });
    const lanes = await Promise.all(parts.map((p) => laneOf(p.lane)));
    const rowsOf = parts.map((p, i) => this.rowsOf(lanes[i], p));
    const t0 = performance.now();
    const count = shares[rank];
    let flat = null;
    let loss = 0;
    let backend = this.selection?.backend ?? this.backend;
    let products = 0;
    const watch = new ChunkWatch(this.model, shares, count, onPartial ?? (() => {}));
    if (count > 0) {
      const mean = new PieceMean(count, rowsOf.length);
      for (const [i, { x, y, rows }] of rowsOf.entries()) {
        const last = onPartial !== null && i === rowsOf.length - 1;
        // The early chunks of the last piece add its values to the weighted sum of the others.
        const onGrad = last ? watch.hook(rowsOf.length === 1 ? null : mean.sum, rows) : undefined;
        const r = await this.worker.grads(x, y, { batch: rows, onGrad });
        backend = r.backend;
        products += r.products ?? 0;
        mean.add(r.loss, flatten(fromTensors(r.grads)), rows);
      }
      ({ loss, values: flat } = mean.result());
    }
    const gradMs = performance.now() - t0;
    const { probe } = await this.worker.probe();
    const payloads = flat === null ? shares.map(() => new Uint8Array(0))
      : watch.chunkPayloads(shares.length, flat);
    return { loss, payloads, probe, backend, products, ms: performance.now() - t0, gradMs, count,
      mean: flat };
  }

  /**
   * An outer run's `compute` (docs/PROTOCOL.md, "Outer runs"; Python's node.py
   * _start_outer_compute and p2p/inner.py): for protocol step `step`, the round trains this
   * replica's positions of batch indices (step - 1) * H + j, j = 0 .. H-1 (the lanes
   * `laneOf(lane, index)` gives, each read once), in inner steps cut as the run's `cut` says
   * (shares.js roundSteps), one AdamW step each, on a copy of the outer weights with this peer's
   * inner state; the pseudo-gradient W - w is cut into the roster's chunks, each quantized with
   * the exchange codec. Resolves to compute's record; `count` is the sequences of the whole round
   * (what seconds per sequence are measured on). A share of 0 takes no inner steps and sends
   * nothing (the probe only). With overlap and `onPartial(k, payload)`, every non-empty chunk is
   * handed over as soon as the worker has measured the round (its sync step; docs/OUTER.md
   * "Overlap"), while the remaining inner steps run: the same bytes `payloads[k]` then holds.
   */
  /**
   * @param {ComputeOrder} order
   * @param {LaneOf} laneOf
   * @param {((k: number, payload: Uint8Array) => void) | null} [onPartial]
   * @returns {Promise<ComputeResult>}
   */
  async computeRound({ step, rank, shares }, laneOf, onPartial = null) {
    this.assertStarted();
    if (this.outer === null) throw new Error('computeRound outside an outer run (a bug)');
    const H = this.outer.innerSteps;
    const count = shares[rank];
    const token = count > 0 ? ++this.tokens : null;
    this.round = { step, token };
    const t0 = performance.now();
    let loss = 0;
    /** @type {Uint8Array[]} */
    let payloads = shares.map(() => new Uint8Array(0));
    let backend = this.selection?.backend ?? this.backend;
    let products = 0;
    if (count > 0) {
      const indices = Array.from({ length: H }, (_, j) => (step - 1) * H + j);
      const plan = roundSteps(indices, offsets(shares)[rank], count, this.model.batch, this.outer.cut);
      /** @type {Map<string, LaneBatch | Promise<LaneBatch>>} */
      const lanes = new Map(); // `${index}:${lane}` -> its batch, read once
      for (const pieces of plan) {
        for (const p of pieces) {
          const key = `${p.index}:${p.lane}`;
          if (!lanes.has(key)) lanes.set(key, laneOf(p.lane, p.index));
        }
      }
      const read = new Map(await Promise.all([...lanes].map(async ([k, v]) => /** @type {const} */ ([k, await v]))));
      // (every piece's lane was read just above)
      const batchOf = (/** @type {{index: number, lane: number}} */ p) =>
        /** @type {LaneBatch} */ (read.get(`${p.index}:${p.lane}`));
      const steps = plan.map((pieces) => pieces.map((p) => this.rowsOf(batchOf(p), p)));
      // Without overlap the round is measured after its last step: nothing to send early.
      const early = onPartial !== null && this.outer.overlap > 0 ? (/** @type {Float32Array} */ delta) => {
        this.chunkPayloads(delta, shares).forEach((p, k) => {
          if (p.length > 0) onPartial(k, p);
        });
      } : undefined;
      const r = await this.worker.round(steps, count * H, token, early);
      ({ loss, backend } = r);
      products = r.products ?? 0;
      payloads = this.chunkPayloads(r.delta, shares);
    }
    const gradMs = performance.now() - t0;
    const { probe } = await this.worker.probe();
    return { loss, payloads, probe, backend, products, ms: performance.now() - t0, gradMs,
      count: count * H };
  }

  /**
   * Every roster chunk of `flat` quantized (codec encode); empty bytes for an empty chunk
   * (Python's inner.chunk_payloads).
   * @param {Float32Array} flat
   * @param {readonly number[]} shares
   */
  chunkPayloads(flat, shares) {
    const total = flat.length / BLOCK;
    return shares.map((_, k) => {
      const [start, end] = chunkSlice(total, shares, k);
      return start === end ? new Uint8Array(0) : encode(flat.subarray(start, end)).payload;
    });
  }

  /** Blocks of the flat gradient of this replica's model. */
  totalBlocks() {
    this.assertStarted();
    let n = 0;
    for (const shape of paramShapes(this.model).values()) n += shape.reduce((a, b) => a * b, 1);
    return nBlocks(n);
  }

  /**
   * Rows [row, row + rows) of a lane's batch {x, y} (row-major, seqLen ids per row).
   * @param {LaneBatch} batch
   * @param {{row: number, rows: number}} piece
   */
  rowsOf({ x, y }, piece) {
    this.assertStarted();
    const T = this.model.seqLen;
    const from = piece.row * T;
    const to = (piece.row + piece.rows) * T;
    return { x: x.slice(from, to), y: y.slice(from, to), rows: piece.rows };
  }

  /** Where lane `lane` of batch index `index` (by default this replica's next step: the
   * completed steps, as in sampleBatch) is in a FineWeb-Edu run (datafeed.js; the address's
   * `rank` is the lane). */
  /**
   * @param {number} lane
   * @param {number} [index]
   */
  address(lane, index = this._step) {
    this.assertStarted();
    return { seed: this.seed, step: index, rank: lane, batch: this.model.batch,
      seqLen: this.model.seqLen };
  }

  /**
   * A run's worker and configs exist: start or restore came first (the machine's order).
   * @returns {asserts this is {worker: TrainWorker, model: ModelConfig, optim: OptimConfig}}
   */
  assertStarted() {
    if (this.worker === null || this.model === null || this.optim === null) {
      throw new Error('the replica has no run yet: start or restore it first (a bug)');
    }
  }

  close() {
    this.worker?.terminate();
    this.worker = null;
  }
}
