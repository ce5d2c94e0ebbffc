// AdamW in float32 with a pinned operation sequence (docs/MODEL.md section 7). Mirrors
// server/daisychain/optim.py line by line: hyper-parameters are float32 constants, bias
// corrections are running products (no pow), the global gradient norm is a tree sum per tensor
// then a left-to-right sum in parameter order, and the schedule uses float32 operations on
// exactly representable step counts.

import { treeSum, sequentialSum } from '../numerics/reduce.js';

const f32 = Math.fround;

export class OptimizerError extends Error {
  constructor(message) {
    super(message);
    this.name = 'OptimizerError';
  }
}

/** Weight decay applies to the 2-D matrices (wte, wqkv, wo, w1, w2), not wpe nor the gains. */
export function decays(name) {
  return name === 'wte' || /\.(wqkv|wo|w1|w2)$/.test(name);
}

const DEFAULTS = {
  lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, clip: 1.0,
  warmupSteps: 0, schedule: 'constant', totalSteps: 0, finalLr: 0.0,
};
const SNAKE = {
  weight_decay: 'weightDecay', warmup_steps: 'warmupSteps', total_steps: 'totalSteps',
  final_lr: 'finalLr',
};

/**
 * Validated, frozen AdamW hyper-parameters. Accepts camelCase or the Python snake_case names.
 * The floats stay as given (doubles); they are rounded to float32 once where used, as Python does.
 */
export function adamwConfig(fields = {}) {
  const c = { ...DEFAULTS };
  for (const [k, v] of Object.entries(fields)) c[SNAKE[k] ?? k] = v;
  if (!(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1)) {
    throw new OptimizerError(`betas must lie in [0, 1), got ${c.beta1}, ${c.beta2}`);
  }
  if (c.lr < 0 || !(c.eps > 0) || c.weightDecay < 0 || c.clip < 0) {
    throw new OptimizerError('lr, weight_decay and clip must be >= 0 and eps > 0');
  }
  if (!(Number.isInteger(c.warmupSteps) && c.warmupSteps >= 0 &&
        Number.isInteger(c.totalSteps) && c.totalSteps >= 0)) {
    throw new OptimizerError('warmup_steps and total_steps must be integers >= 0');
  }
  if (c.schedule !== 'constant' && c.schedule !== 'linear') {
    throw new OptimizerError(`schedule must be 'constant' or 'linear', got ${c.schedule}`);
  }
  if (c.schedule === 'linear' && c.totalSteps <= c.warmupSteps) {
    throw new OptimizerError(
      `linear schedule needs total_steps (${c.totalSteps}) > warmup_steps (${c.warmupSteps}); ` +
        'set total_steps to the run length',
    );
  }
  if (Math.max(c.warmupSteps, c.totalSteps) >= 2 ** 24) {
    throw new OptimizerError('step counts must be below 2^24 (exact in float32)');
  }
  return Object.freeze(c);
}

/**
 * Learning rate of the 1-based `step`, as a float32 number:
 * warmup (step <= W): lr * (f32(step) / f32(W)); constant after W: lr;
 * linear after W: final + (lr - final) * (f32(S - min(step, S)) / f32(S - W)).
 */
export function learningRate(cfg, step) {
  if (!(Number.isInteger(step) && step >= 1)) {
    throw new OptimizerError(`steps are counted from 1, got ${step}`);
  }
  const lr = f32(cfg.lr);
  const w = cfg.warmupSteps;
  if (step <= w) return f32(lr * f32(f32(step) / f32(w)));
  if (cfg.schedule === 'constant') return lr;
  const total = cfg.totalSteps;
  const final = f32(cfg.finalLr);
  const frac = f32(f32(total - Math.min(step, total)) / f32(total - w));
  return f32(final + f32(f32(lr - final) * frac));
}

/** sqrt of the left-to-right sum over tensors (parameter order) of tree_sum(g * g). */
export function globalNorm(grads, scratch = null) {
  const partial = [];
  for (const g of grads.values()) {
    const sq = scratch && scratch.length >= g.length ? scratch.subarray(0, g.length)
      : new Float32Array(g.length);
    for (let i = 0; i < g.length; i++) sq[i] = g[i] * g[i];
    partial.push(treeSum(sq));
  }
  return f32(Math.sqrt(sequentialSum(partial)));
}

/** Fresh optimizer state: zero moments per parameter (same order and sizes), step 0. */
export function initOptState(params) {
  const m = new Map();
  const v = new Map();
  for (const [name, p] of params) {
    m.set(name, new Float32Array(p.length));
    v.set(name, new Float32Array(p.length));
  }
  return { m, v, step: 0, p1: 1, p2: 1 };
}

/**
 * AdamW with the pinned float32 sequence. `step(params, grads, state)` updates params and state
 * in place (grads are read, never modified) and returns {step, lr, gradNorm, clipped}.
 */
export class AdamW {
  constructor(config) {
    this.config = adamwConfig(config); // idempotent on a validated config
    const c = this.config;
    this.b1 = f32(c.beta1);
    this.b2 = f32(c.beta2);
    this.omb1 = f32(1 - this.b1);
    this.omb2 = f32(1 - this.b2);
    this.eps = f32(c.eps);
    this.wd = f32(c.weightDecay);
    this.clip = f32(c.clip);
    this.scratch = null;
  }

  initState(params) {
    return initOptState(params);
  }

  step(params, grads, state) {
    const names = [...params.keys()];
    const same = (m) => m.size === names.length && [...m.keys()].every((k, i) => k === names[i]);
    if (!same(grads) || !same(state.m) || !same(state.v)) {
      throw new OptimizerError('params, grads and optimizer state must list the same names');
    }
    const t = state.step + 1;
    const lr = learningRate(this.config, t);
    state.p1 = f32(state.p1 * this.b1);
    state.p2 = f32(state.p2 * this.b2);
    const bc1 = f32(1 - state.p1);
    const bc2 = f32(1 - state.p2);
    const stepSize = f32(lr / bc1);
    const sqrtBc2 = f32(Math.sqrt(bc2));
    const decay = f32(1 - f32(lr * this.wd));

    let largest = 0;
    for (const g of grads.values()) largest = Math.max(largest, g.length);
    if (!this.scratch || this.scratch.length < largest) this.scratch = new Float32Array(largest);
    const norm = globalNorm(grads, this.scratch);
    const clipped = this.clip > 0 && norm > this.clip;
    const scale = clipped ? f32(this.clip / norm) : 1;

    const { b1, b2, omb1, omb2, eps } = this;
    for (const [name, w] of params) {
      const g = grads.get(name);
      if (!(g instanceof Float32Array) || g.length !== w.length) {
        throw new OptimizerError(`gradient ${name}: expected a Float32Array of ${w.length}`);
      }
      const m = state.m.get(name);
      const v = state.v.get(name);
      const decayed = decays(name);
      for (let i = 0; i < w.length; i++) {
        const gi = clipped ? f32(g[i] * scale) : g[i];
        const mi = f32(f32(m[i] * b1) + f32(gi * omb1)); // m = m * b1 + g * (1 - b1)
        const vi = f32(f32(v[i] * b2) + f32(f32(gi * gi) * omb2)); // v = v * b2 + (g*g) * (1 - b2)
        m[i] = mi;
        v[i] = vi;
        const den = f32(f32(f32(Math.sqrt(vi)) / sqrtBc2) + eps); // sqrt(v) / sqrt(bc2) + eps
        const upd = f32(f32(mi / den) * stepSize); // (m / den) * (lr / bc1)
        const wi = decayed ? f32(w[i] * decay) : w[i]; // w * (1 - lr * wd)
        w[i] = wi - upd;
      }
    }
    state.step = t;
    return { step: t, lr, gradNorm: norm, clipped };
  }
}
