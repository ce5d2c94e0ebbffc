// The outer optimizer and the shared outer state (docs/OUTER.md, "The outer step", "Identity").
// Mirror of server/daisychain/outer/nesterov.py, operation for operation; golden vectors:
// tests/vectors/outer/nesterov.json (tests/js/outer.test.mjs).
//
// DiLoCo's Nesterov momentum (PyTorch SGD(nesterov=True), dampening 0), every operation one
// correctly rounded float32 operation (Math.fround) in the order written, element by element:
//
//   delta = outer - local                      a peer's pseudo-gradient (then compressed)
//   m     = (m * mu) + g                       g: the reduced mean of the deltas
//   u     = g + (m * mu)                       the Nesterov look-ahead, with the new m
//   w     = w - (u * lr)
//
// `lr` and `mu` are rounded to float32 once. The state every replica shares is the outer weights
// and the momentum (Maps name -> Float32Array in parameter order); `outerHash` is its identity:
// SHA-256 over the weights in parameter order, then the momentum in that order.

import { sha256Arrays } from '../numerics/hash.js';
import { BLOCK, flatten } from '../p2p/codec.js';

/** An outer configuration, state or pseudo-gradient that cannot be used (Python's OuterError). */
export class OuterError extends RangeError {
  constructor(message) {
    super(message);
    this.name = 'OuterError';
  }
}

/**
 * The outer loop: `innerSteps` (H) per round, Nesterov `lr` and `momentum`, `overlap` (the
 * fraction of a round's inner steps that run beside its exchange) and `cut` (how a round is cut
 * into inner steps: shares.js roundSteps) (Python's OuterConfig).
 */
export function outerConfig({ innerSteps = 50, lr = 0.7, momentum = 0.9, overlap = 0,
  cut = 'share' } = {}) {
  if (!Number.isSafeInteger(innerSteps) || innerSteps < 1) {
    throw new OuterError(`H (inner steps per outer step) must be an integer >= 1, got ${innerSteps}` +
      '; H = 1 with lr 1 and momentum 0 is per-step averaging of the updates');
  }
  if (!(Number.isFinite(lr) && lr > 0)) {
    throw new OuterError(`outer lr must be finite and > 0, got ${lr} (DiLoCo: 0.7)`);
  }
  if (!(momentum >= 0 && momentum < 1)) {
    throw new OuterError(`outer momentum must lie in [0, 1), got ${momentum} (DiLoCo: 0.9)`);
  }
  if (!(overlap >= 0 && overlap <= 1)) {
    throw new OuterError(`overlap must lie in [0, 1], got ${overlap} (0: none)`);
  }
  if (cut !== 'share' && cut !== 'batch') throw new OuterError(`cut must be share or batch, got ${cut}`);
  return Object.freeze({ innerSteps, lr, momentum, overlap, cut });
}

/**
 * The shared state {params, momentum, step}: two Maps name -> Float32Array listing the same
 * names in the same (parameter) order, each pair of one length.
 */
export function outerState(params, momentum, step = 0) {
  const names = [...params.keys()];
  const mNames = [...momentum.keys()];
  if (names.length !== mNames.length || names.some((n, i) => n !== mNames[i])) {
    throw new OuterError('outer weights and momentum must list the same names in order');
  }
  for (const [name, w] of params) {
    const m = momentum.get(name);
    if (!(w instanceof Float32Array) || !(m instanceof Float32Array) || w.length !== m.length) {
      throw new OuterError(`${name}: weights and momentum must be Float32Arrays of one length`);
    }
  }
  return { params, momentum, step };
}

/** The outer state at the start of a run: a copy of the weights, zero momentum. */
export function initOuter(params) {
  const w = new Map();
  const m = new Map();
  for (const [name, a] of params) {
    w.set(name, Float32Array.from(a));
    m.set(name, new Float32Array(a.length));
  }
  return outerState(w, m);
}

/**
 * `outer - local` per element, flattened (codec.flatten's layout: parameter order, padded with
 * +0 to whole blocks). Positive where the inner steps lowered a weight, like a gradient.
 */
export function pseudoGradient(outer, local) {
  const names = [...outer.keys()];
  const mine = [...local.keys()];
  if (names.length !== mine.length || names.some((n, i) => n !== mine[i])) {
    throw new OuterError(`local weights list ${mine.slice(0, 3)}..., the outer state ` +
      `${names.slice(0, 3)}...: a peer's weights must be the same model in the same parameter order`);
  }
  const delta = new Map();
  for (const [name, w] of outer) {
    const l = local.get(name);
    if (!(l instanceof Float32Array) || l.length !== w.length) {
      throw new OuterError(`${name}: local weights of ${l?.length} values, outer ${w.length}`);
    }
    const d = new Float32Array(w.length);
    for (let i = 0; i < d.length; i++) d[i] = Math.fround(w[i] - l[i]);
    delta.set(name, d);
  }
  return flatten(delta);
}

/** One Nesterov step with the reduced mean pseudo-gradient (flat, padded), in place. */
export function applyOuter(state, cfg, mean) {
  let size = 0;
  for (const w of state.params.values()) size += w.length;
  if (!(mean instanceof Float32Array) || !(size <= mean.length && mean.length < size + BLOCK)) {
    throw new OuterError(`mean pseudo-gradient of ${mean?.length} values: expected a flat ` +
      `Float32Array of ${size} values padded to whole blocks of ${BLOCK}`);
  }
  for (let i = 0; i < mean.length; i++) {
    if (!Number.isFinite(mean[i])) {
      throw new OuterError('non-finite pseudo-gradient: the inner steps diverged (lower the lr)');
    }
  }
  const mu = Math.fround(cfg.momentum);
  const lr = Math.fround(cfg.lr);
  let pos = 0;
  for (const [name, w] of state.params) {
    const m = state.momentum.get(name);
    for (let i = 0; i < w.length; i++) {
      const g = mean[pos + i];
      m[i] = Math.fround(Math.fround(m[i] * mu) + g);
      const u = Math.fround(g + Math.fround(m[i] * mu));
      w[i] = Math.fround(w[i] - Math.fround(u * lr));
    }
    pos += w.length;
  }
  state.step += 1;
}

/** SHA-256 over the outer weights in parameter order, then the momentum in that order (async). */
export function outerHash(state) {
  return sha256Arrays([...state.params.values(), ...state.momentum.values()]);
}
