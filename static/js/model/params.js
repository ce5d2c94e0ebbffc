// Parameter layout and seeded initialization (docs/MODEL.md sections 2 and 3). Mirrors
// server/daisychain/model/params.py.
//
// Parameters (and gradients, and the optimizer moments) are a Map name -> Float32Array whose
// insertion order is the canonical order (hash, optimizer, checkpoint, wire). Matrices are
// row-major (in, out): y = x @ W.

import { key, uniform } from '../numerics/prng.js';

const f32 = Math.fround;

export const INIT_STREAM = 0; // key(seed, INIT_STREAM, tensorIndex)
export const BASE_STD = f32(0.02);
export const WPE_STD = f32(0.01);

/** Map name -> shape (array of ints) in the canonical order. */
export function paramShapes(cfg) {
  const { width: c, vocabSize: v, seqLen: t, hidden } = cfg;
  const shapes = new Map([
    ['wte', [v, c]],
    ['wpe', [t, c]],
  ]);
  for (let l = 0; l < cfg.layers; l++) {
    const p = `h.${l}.`;
    shapes.set(p + 'g1', [c]);
    shapes.set(p + 'wqkv', [c, 3 * c]);
    shapes.set(p + 'wo', [c, c]);
    shapes.set(p + 'g2', [c]);
    shapes.set(p + 'w1', [c, hidden]);
    shapes.set(p + 'w2', [hidden, c]);
  }
  shapes.set('gf', [c]);
  return shapes;
}

export const numel = (shape) => shape.reduce((a, b) => a * b, 1);

/** Parameter names in the canonical order. */
export function paramNames(cfg) {
  return [...paramShapes(cfg).keys()];
}

/** Number of scalar parameters (the tied wte counted once). */
export function countParams(cfg) {
  let n = 0;
  for (const s of paramShapes(cfg).values()) n += numel(s);
  return n;
}

export function isGain(name) {
  return name === 'gf' || name.endsWith('.g1') || name.endsWith('.g2');
}

/** Standard deviation of a weight's uniform init, as a float32. */
export function initStd(cfg, name) {
  if (name === 'wpe') return WPE_STD;
  if (name.endsWith('.wo') || name.endsWith('.w2')) {
    return f32(BASE_STD / f32(Math.sqrt(2 * cfg.layers))); // one float32 sqrt, one division
  }
  return BASE_STD;
}

/** Zero-filled arrays of every parameter's size, in the canonical order. */
export function zerosLike(cfg) {
  const out = new Map();
  for (const [name, shape] of paramShapes(cfg)) out.set(name, new Float32Array(numel(shape)));
  return out;
}

/**
 * Seeded init: tensor i draws uniform(key(seed, 0, i), numel) in C order;
 * w = ((u * 2) - 1) * a with a = f32(std * sqrt(f32(3))), each op a float32 rounding.
 * Gains are 1 (their stream is not drawn from).
 */
export function initParams(cfg, seed) {
  const params = new Map();
  const sqrt3 = f32(Math.sqrt(3));
  let index = 0;
  for (const [name, shape] of paramShapes(cfg)) {
    const n = numel(shape);
    if (isGain(name)) {
      params.set(name, new Float32Array(n).fill(1));
    } else {
      const amp = f32(initStd(cfg, name) * sqrt3);
      const w = uniform(key(seed, INIT_STREAM, index), n);
      for (let i = 0; i < n; i++) w[i] = f32(f32(f32(w[i] * 2) - 1) * amp);
      params.set(name, w);
    }
    index++;
  }
  return params;
}
