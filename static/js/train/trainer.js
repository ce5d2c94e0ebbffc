// One replica's training, behind the worker's messages (docs/JS_MIRROR.md, "The training
// worker"). Environment-agnostic: the worker (worker.js) drives it in a browser, the node tests
// drive it directly on the CPU tier.
//
// States: new -> selecting -> ready (a failed init goes back to new). The backend is chosen at
// init by the rule of gpu/backend.js (correct first, then measured fastest on this model's step)
// and lives in a `tier` {name, adapter, gemm, gpu, onGpu, ops}. A step's products run on the
// tier; if the WebGPU device fails (device.lost, an uncaptured error) the step is abandoned --
// nothing of it reached the weights, gradients are computed into fresh arrays -- a new device is
// acquired and the same kernel gated and probed on it again, then the step is recomputed from
// the same state. If the new device fails its gates (or there is none), the tier falls back to
// the CPU mirror and says so (a `fallback` event). Either way the bits are the contract's: the
// same loss and hash as if nothing had happened. An audit failure is not a device failure: it
// stops the step with an error and is never retried.
//
// An outer run (docs/PROTOCOL.md, "Outer runs"): after `outer` the state is the outer weights
// and momentum (outer.js): `round` takes a round's H inner steps on a copy, `outer-apply` makes
// the outer step, `hash` and `export` are of W and M. A per-step `step`, `apply` or `load` would
// change the outer weights outside the outer step, so they are refused then.

import * as M from '../model/index.js';
import { forwardBackwardAsync, lossAsync } from '../model/gpt.js';
import { CPU_OPS } from '../model/ops.js';
import { cpuAdapter, evaluateGemm, selectBackend } from '../gpu/backend.js';
import { enableWasmGemm, wasmGemmStatus } from '../numerics/wasmgate.js';
import { enableWasmElementwise, wasmElementwiseStatus } from '../numerics/wasmeltgate.js';
import { acquireGpu } from '../gpu/device.js';
import { CpuGemm, GpuGemm, productOps } from '../gpu/gemm.js';
import { ForwardChain } from '../gpu/forward_chain.js';
import { StepChain } from '../gpu/step_chain.js';
import { runForwardChainGate, runStepChainGate } from '../gpu/chain_gate.js';
import { timeChains } from './timing.js';

const fmtMs = (ms) => `${ms.toFixed(ms < 100 ? 1 : 0)} ms`;
import { Auditor } from '../gpu/audit.js';
import { stepProbeHash } from '../gpu/probe.js';
import { stepTimer } from './timing.js';
import { buffersOf, fromTensors, toTensors } from './messages.js';
import { meanLoss } from './validation.js';
import { OuterLoop } from './outer.js';

// A device that keeps getting lost is not worth rebuilding forever: after this many losses the
// trainer stays on the CPU tier.
export const MAX_DEVICE_REBUILDS = 3;

/** A request that cannot be served in this state or with these values; `hint` says what to do. */
export class TrainerError extends Error {
  constructor(message, hint) {
    super(message);
    this.name = 'TrainerError';
    this.hint = hint;
  }
}

const KINDS = { 'webgpu-dp4a': 'dp4a', 'webgpu-lut': 'lut' };
// Requests of a per-step run that would move an outer run's weights outside its outer step.
const PER_STEP_ONLY = ['apply', 'step', 'load'];

function configOf(model) {
  const { preset, ...fields } = model;
  return preset === undefined ? M.modelConfig(fields) : M.preset(preset, fields);
}

export class Trainer {
  /**
   * `emit(event)` hears every event ({kind, ...}, kinds in messages.js EVENT_KINDS).
   * @param {(event: {kind: string} & Record<string, unknown>) => void} [emit]
   */
  constructor(emit = () => {}) {
    this.emit = emit;
    this.state = 'new';
    this.run = null; // training.js state
    this.tier = null;
    this.options = null; // {sources, kernelBase, lutBase, audit} of init
    this.rebuilds = 0;
    this.gpuProducts = 0;
    this.outer = null; // an outer run's loop (outer.js), once `outer` was served
  }

  setState(next) {
    const from = this.state;
    if (from === next) return;
    this.state = next;
    this.emit({ kind: 'state', from, to: next });
  }

  /**
   * Serves one validated request (messages.parseRequest); resolves to {result, transfer}.
   * @param {import('./messages.js').Request} req
   * @param {(grad: {name: string, values: Float32Array}) => void} [progress]  hears a request's
   *   early gradients (grads with early, round with early)
   * @returns {Promise<{result: Record<string, any>, transfer: Transferable[]}>}
   */
  async handle(req, progress = () => {}) {
    if (req.type === 'init') return { result: await this.init(req), transfer: [] };
    if (this.state !== 'ready') {
      throw new TrainerError(`cannot ${req.type}: the trainer is ${this.state}`,
        this.state === 'new' ? 'send init first' : 'wait for init to finish');
    }
    if (this.outer !== null && PER_STEP_ONLY.includes(req.type)) {
      throw new TrainerError(`cannot ${req.type} in an outer run: it would change the outer ` +
        'weights outside the outer step', "use 'round' and 'outer-apply'");
    }
    switch (req.type) {
      case 'outer': return { result: await this.enterOuter(req), transfer: [] };
      case 'round': {
        // early: the delta goes out ('grad', name 'delta') as soon as the round is measured.
        const onDelta = req.early ? (delta) => progress({ name: 'delta', values: delta.slice() })
          : undefined;
        const r = await this.round(req, onDelta);
        return { result: r, transfer: [r.delta.buffer] };
      }
      case 'outer-apply': {
        if (this.outer === null) {
          throw new TrainerError('outer-apply: this is a per-step run', "send 'outer' first");
        }
        return { result: await this.outer.apply(req.mean, req.token), transfer: [] };
      }
      case 'grads': {
        // early: each parameter's gradient goes out ('grad') as soon as it is final.
        const onGrad = req.early ? (name, values) => progress({ name, values: values.slice() })
          : undefined;
        const r = await this.grads(req.x, req.y, req.batch, onGrad);
        const grads = toTensors(r.grads);
        return { result: { ...r, grads }, transfer: buffersOf(grads) };
      }
      case 'apply': return { result: await this.apply(fromTensors(req.grads)), transfer: [] };
      case 'step': return { result: await this.step(req), transfer: [] };
      case 'probe': return { result: { probe: await this.probe(), backend: this.tier.name },
        transfer: [] };
      case 'hash': return { result: await this.identity(), transfer: [] };
      case 'export': {
        const state = this.exportState();
        const transfer = buffersOf(state.params, state.m, state.v);
        if (this.outer === null) return { result: { state }, transfer };
        const outer = { step: this.outer.step,
          momentum: toTensors(this.outer.state.momentum, { copy: true }) };
        return { result: { state, outer }, transfer: [...transfer, ...buffersOf(outer.momentum)] };
      }
      case 'load': return { result: await this.load(req.state), transfer: [] };
      case 'eval': return { result: await this.evaluate(req.batches, req.batch), transfer: [] };
      default: throw new TrainerError(`unknown request ${req.type}`, 'see messages.js');
    }
  }

  async init(req) {
    if (this.state !== 'new') {
      throw new TrainerError(`init: the trainer is already ${this.state}`,
        'start a new worker for a new run (terminate this one)');
    }
    this.setState('selecting');
    try {
      const cfg = configOf(req.model);
      const run = M.init(cfg, req.optim, req.seed);
      if (req.state) this.loadInto(run, req.state);
      this.options = { sources: req.sources, kernelBase: req.kernelBase, lutBase: req.lutBase,
        audit: req.audit, chains: req.chains ?? 'auto' };
      // The CPU tier's integer products in WebAssembly SIMD where its gates pass on this engine
      // (the JS GEMM otherwise; the same bits either way): before the backends are gated and
      // timed, so the CPU row is measured as it will compute. `wasm: false` keeps the JS GEMM.
      if (req.wasm !== false && wasmGemmStatus().name === null) {
        this.emit({ kind: 'progress', message: 'gating the WebAssembly SIMD GEMM' });
        await enableWasmGemm();
      }
      // Its quantization and gradient limbs likewise (the JS quantizers otherwise; the same
      // bits either way): they serve every tier, the GPU tiers' limb work included.
      if (req.wasm !== false && wasmElementwiseStatus().name === null) {
        this.emit({ kind: 'progress', message: 'gating the WebAssembly SIMD elementwise kernel' });
        await enableWasmElementwise();
      }
      const sel = await this.select(cfg, run, req);
      this.run = run;
      this.tier = this.makeTier(sel.selected, sel.gemm, sel.gpu, sel.adapter);
      await this.attachChain(this.tier);
      const selection = {
        chain: this.tier.chainStatus,
        backend: sel.selected, adapter: sel.adapter, onGpu: sel.onGpu, choice: sel.choice,
        rows: sel.rows, demotions: sel.demotions, device: sel.device, wasm: wasmGemmStatus(),
        elementwise: wasmElementwiseStatus(),
      };
      this.emit({ kind: 'selection', ...selection });
      this.setState('ready');
      return { ...selection, step: M.stepOf(run), hash: await M.stateHash(run) };
    } catch (exc) {
      this.setState('new');
      throw exc;
    }
  }

  async select(cfg, run, req) {
    const common = {
      sources: req.sources, kernelBase: req.kernelBase, lutBase: req.lutBase,
      onProgress: (message) => this.emit({ kind: 'progress', message }),
    };
    if (req.backend === 'auto') {
      const timeStep = req.measure ? stepTimer(cfg, run.params, { audit: req.audit }) : null;
      return selectBackend({ ...common, timeStep });
    }
    const kind = KINDS[req.backend];
    const sel = await selectBackend({ ...common, order: kind ? [kind] : [] });
    if (sel.selected !== req.backend) {
      const why = sel.demotions.map((d) => `${d.name}: ${d.reason}`).join('; ');
      throw new TrainerError(`backend ${req.backend} was requested but is not usable here (${why})`,
        "send backend 'auto' to use the fastest backend that passes its gates");
    }
    return sel;
  }

  makeTier(name, gemm, gpu, adapter) {
    const tier = { name, adapter, gemm, gpu, onGpu: gpu !== null, ops: CPU_OPS };
    if (tier.onGpu) {
      const auditor = new Auditor({ samples: this.options.audit });
      tier.ops = productOps(gemm, {
        audit: (p, acc) => {
          auditor.check(p, acc);
          this.gpuProducts += 1;
          this.afterGpuProduct(tier);
        },
      });
    }
    return tier;
  }

  /**
   * The chains for a GPU tier (gpu/forward_chain.js, gpu/step_chain.js): compiled and gated on
   * this device, then used by the tier's products, per `chains`: 'auto' on a real GPU and
   * 'measure' anywhere keep them only where a measured step is faster with them ('auto' leaves
   * them off on an emulated adapter unmeasured: their soft-float epilogues cost more than the
   * round trips they save there, docs/BENCHMARKS.md); 'on' always, 'off' never.
   * `tier.chainStatus` says which and why: {used, name, reason}. The
   * planted-bug tests replace an epilogue through gpu/chain_gate.js, not here: `sources` only
   * carries GEMM kernels.
   */
  async attachChain(tier) {
    const mode = this.options.chains;
    const status = (used, reason) => { tier.chainStatus = { used, name: 'step', reason }; };
    if (!tier.onGpu) return status(false, 'the CPU tier has no chains');
    if (mode === 'off') return status(false, "turned off (chains: 'off')");
    if (mode === 'auto' && tier.gpu.emulated) {
      return status(false, `${tier.adapter} is emulated on the CPU, where a step in one trip ` +
        'is slower than one trip per product');
    }
    this.emit({ kind: 'progress', message: 'gating the step chain' });
    let why;
    try {
      const base = this.options.kernelBase;
      const chain = await ForwardChain.create(tier.gemm, { base });
      const step = await StepChain.create(chain, { base });
      const gates = [await runForwardChainGate(chain), await runStepChainGate(step)];
      const failed = gates.find((g) => g.failure !== null);
      const passed = `${gates[0].passed} + ${gates[1].passed} gate cases passed`;
      if (!failed && mode !== 'on') {
        // 'auto' on a real GPU and 'measure': kept only if a measured step is faster with them
        this.emit({ kind: 'progress', message: 'timing a step with and without the chains' });
        const [withChains, without] = await timeChains(tier.gemm, this.cfg, this.run.params,
          chain, step);
        const figures = `${fmtMs(withChains)} per step with them, ${fmtMs(without)} without`;
        if (withChains >= without) return status(false, `measured slower: ${figures}`);
        tier.ops.chain = chain;
        tier.ops.stepChain = step;
        return status(true, `every training step in one submit and one readback, ${figures} ` +
          `(${passed})`);
      }
      if (!failed) {
        tier.ops.chain = chain;
        tier.ops.stepChain = step;
        return status(true, 'every training step in one submit and one readback, every ' +
          `forward alone in one (${passed})`);
      }
      why = `its gate failed: ${failed.failure.case}: ${failed.failure.reason}`;
    } catch (exc) {
      why = `it could not be built: ${exc.message}`;
    }
    return status(false, why);
  }

  get cfg() {
    return this.run.cfg;
  }

  /**
   * Called after every product a GPU tier computed and audited; here it does nothing. It is the
   * seam where a test's trainer (tests/pages/fault_trainer.js, in a test-only worker) destroys the
   * device mid-step, as a real GPU can lose it at any product, to show that the rebuild and the
   * fallback below keep the contract's bits. The product's worker has no request that reaches it.
   * @param {object} _tier  the tier that computed the product
   */
  afterGpuProduct(_tier) {}

  /** Runs `fn(tier)`; on a device failure rebuilds (or falls back) and runs it again. */
  async onTier(fn) {
    for (;;) {
      const tier = this.tier;
      try {
        return await fn(tier);
      } catch (exc) {
        if (!tier.onGpu || !(await tier.gpu.failed(exc))) throw exc;
        await this.recover(tier, exc);
      }
    }
  }

  async recover(tier, exc) {
    const reason = tier.gpu.lost ?? tier.gpu.faults[0] ?? exc.message;
    this.rebuilds += 1;
    this.emit({ kind: 'device-lost', backend: tier.name, reason, step: M.stepOf(this.run) + 1 });
    const sources = this.options.sources;
    let why;
    if (this.rebuilds > MAX_DEVICE_REBUILDS) {
      why = `the device was lost ${this.rebuilds} times; not rebuilding it again`;
    } else {
      try {
        const gpu = await acquireGpu();
        const kind = tier.gemm.kind;
        const gemm = await GpuGemm.create(gpu, kind, { source: sources[kind],
          kernelBase: this.options.kernelBase, lutBase: this.options.lutBase });
        const row = await evaluateGemm(gemm, gpu.adapterName, { pool: gemm.pool });
        if (row.gates_passed) {
          this.tier = this.makeTier(tier.name, gemm, gpu, gpu.adapterName);
          await this.attachChain(this.tier);
          this.emit({ kind: 'device-rebuilt', backend: tier.name, adapter: gpu.adapterName,
            cases_passed: row.cases_passed, probe_hash: row.probe_hash, rebuilds: this.rebuilds });
          return;
        }
        why = `the rebuilt device failed its gates: ${row.failure}`;
      } catch (err) {
        why = `no device could be rebuilt: ${err.message}`;
      }
    }
    const cpu = new CpuGemm();
    const row = await evaluateGemm(cpu, cpuAdapter());
    if (!row.gates_passed) {
      throw new TrainerError(`${tier.name} was lost and the CPU tier fails its gates: ` +
        `${row.failure}`, 'this browser computes wrong bits; use another browser');
    }
    this.tier = this.makeTier('js-cpu', cpu, null, cpuAdapter());
    this.emit({ kind: 'fallback', from: tier.name, to: 'js-cpu', reason: `${reason}; ${why}`,
      probe_hash: row.probe_hash });
  }

  async grads(x, y, batch = this.run.cfg.batch, onGrad = undefined) {
    const { cfg, params, workspace } = this.run;
    const t0 = performance.now();
    const p0 = this.gpuProducts;
    // A tier lost mid-backward recomputes on the next one (the same bits): each parameter is
    // still reported once.
    const told = new Set();
    const once = onGrad && ((name, g) => {
      if (!told.has(name)) {
        told.add(name);
        onGrad(name, g);
      }
    });
    const { loss, grads } = await this.onTier((tier) =>
      forwardBackwardAsync(params, cfg, x, y, { batch, workspace, ops: tier.ops, onGrad: once }));
    return { loss, grads, backend: this.tier.name, products: this.gpuProducts - p0,
      ms: performance.now() - t0 };
  }

  /**
   * The validation loss (docs/MODEL.md section 8) of `batches` at the current weights: each
   * batch's contract loss, forward only, on the training tier (a lost device is rebuilt and the
   * batch recomputed, as for a step), and their float64 mean. The weights are not touched.
   */
  async evaluate(batches, batch = this.run.cfg.batch) {
    const { cfg, params, workspace } = this.run;
    const t0 = performance.now();
    const losses = [];
    for (const { x, y } of batches) {
      losses.push(await this.onTier((tier) =>
        lossAsync(params, cfg, x, y, { batch, workspace, ops: tier.ops })));
    }
    return { ...(await this.identity()), losses, loss: meanLoss(losses), backend: this.tier.name,
      ms: performance.now() - t0 };
  }

  /** {step, hash} of the state: a per-step run's, or an outer run's rounds and outer hash. */
  async identity() {
    if (this.outer !== null) return { step: this.outer.step, hash: await this.outer.hash() };
    return { step: M.stepOf(this.run), hash: await M.stateHash(this.run) };
  }

  /**
   * This run is an outer run from now on: `outer` {innerSteps, lr, momentum}; `shared` {step,
   * momentum} when it continues one (a checkpoint's outer state: the weights are the run's,
   * loaded at init), else M = +0 and no rounds done. The inner AdamW state starts as the run's.
   */
  async enterOuter({ outer, shared }) {
    if (this.outer !== null) {
      throw new TrainerError('outer: this worker already trains an outer run',
        'start a new worker for a new run');
    }
    const names = [...this.run.params.keys()];
    let state = null;
    if (shared !== undefined) {
      const t = shared.momentum;
      if (t.names.length !== names.length || t.names.some((n, i) => n !== names[i]) ||
          t.arrays.some((a, i) => a.length !== this.run.params.get(names[i]).length)) {
        throw new TrainerError('outer: the momentum does not list this model\'s tensors',
          'send the momentum of a checkpoint of this model');
      }
      state = { step: shared.step, momentum: fromTensors(t) };
    }
    this.outer = new OuterLoop(this.run, outer, state);
    return this.identity();
  }

  /**
   * An outer round (outer.js OuterLoop.round) on this worker's tier: resolves to {loss, delta,
   * backend, products, ms}; its inner state is kept under `token` until `outer-apply`.
   */
  async round({ steps, count, token }, onDelta = undefined) {
    if (this.outer === null) throw new TrainerError('round: this is a per-step run', "send 'outer' first");
    const t0 = performance.now();
    const p0 = this.gpuProducts;
    const gradsOf = (work, x, y, batch) => this.onTier((tier) => forwardBackwardAsync(work.params,
      work.cfg, x, y, { batch, workspace: work.workspace, ops: tier.ops }));
    const { loss, delta } = await this.outer.round(steps, count, token, gradsOf, onDelta);
    return { loss, delta, backend: this.tier.name, products: this.gpuProducts - p0,
      ms: performance.now() - t0 };
  }

  async apply(grads) {
    const stats = M.applyGrads(this.run, grads);
    return { ...stats, hash: await M.stateHash(this.run) };
  }

  async step(req) {
    const t0 = performance.now();
    const g = await this.grads(req.x, req.y, req.batch);
    const stats = M.applyGrads(this.run, g.grads);
    const hash = req.hash ? await M.stateHash(this.run) : '';
    const probe = await this.probe();
    return {
      step: stats.step, loss: g.loss, gradNorm: stats.gradNorm, lr: stats.lr,
      clipped: stats.clipped, hash, probe, backend: this.tier.name, products: g.products,
      ms: performance.now() - t0,
    };
  }

  /**
   * The step probe through the live kernels: the GEMM's (the CPU mirror's product on the CPU
   * tier) and the quantizer installed in this worker (gpu/probe.js stepProbeHash).
   */
  probe() {
    // With the chains in use, the probe step is the one the training step's submit computed
    // (every epilogue takes part); otherwise the CPU mirror computes it.
    return this.onTier((tier) => stepProbeHash(tier.gemm,
      { ops: tier.ops.stepChain ? tier.ops : CPU_OPS }));
  }

  exportState() {
    const { params, optState } = this.run;
    return {
      step: optState.step, p1: optState.p1, p2: optState.p2,
      params: toTensors(params, { copy: true }),
      m: toTensors(optState.m, { copy: true }),
      v: toTensors(optState.v, { copy: true }),
    };
  }

  async load(state) {
    this.loadInto(this.run, state);
    return { step: M.stepOf(this.run), hash: await M.stateHash(this.run) };
  }

  /** Replaces run's parameters and moments with `state` after checking every name and size. */
  loadInto(run, state) {
    const shapes = M.paramShapes(run.cfg);
    const names = [...shapes.keys()];
    for (const part of ['params', 'm', 'v']) {
      const t = state[part];
      if (t.names.length !== names.length || t.names.some((n, i) => n !== names[i])) {
        throw new TrainerError(`load: ${part} lists [${t.names.slice(0, 4).join(', ')}...], ` +
          `this model has [${names.slice(0, 4).join(', ')}...] (${names.length} tensors)`,
          'load a state exported by a worker with the same model config');
      }
      t.arrays.forEach((a, i) => {
        const want = M.numel(shapes.get(names[i]));
        if (a.length !== want) {
          throw new TrainerError(`load: ${part} ${names[i]} has ${a.length} values, the model ` +
            `needs ${want}`, 'load a state exported by a worker with the same model config');
        }
      });
    }
    run.params = fromTensors(state.params);
    run.optState = { m: fromTensors(state.m), v: fromTensors(state.v), step: state.step,
      p1: state.p1, p2: state.p2 };
  }
}
