// @ts-check
// How much memory a training peer needs for a run configuration. Mirror of
// server/daisychain/p2p/footprint.py (docs/PROTOCOL.md "Config validation"), in BigInt: a hostile
// config may ask for more than 2^53 bytes (attention alone reaches 2^59 at the size ranges'
// corners), and a rounded estimate must not slip under a cap or print other digits than Python.
//
// With P parameters, N = B * T, F = mlp_mult * C, A = B * H * T^2 (bytes): state 12 P; step 12 P;
// activations 12 N V + 24 C V + L (44 N C + 8 N F + 12 A) + 16 N C + 16 N F + 16 A (the logits
// gradient has three limbs, contract v2); exchange
// 8 P + HISTORY_STEPS * 2 * ceil(257 P / 256); checkpoint 12 P + 1 MiB.

import { paramShapes } from '../model/params.js';
import { HISTORY_STEPS } from './run.js';

export const MIB = 1024 * 1024;

/**
 * @typedef {ReturnType<typeof import('../model/config.js').modelConfig>} ModelConfig
 */

/**
 * Scalar parameters of a model config (camelCase, static/js/model/config.js) as a BigInt.
 * @param {ModelConfig} cfg
 */
export function countParams(cfg) {
  let n = 0n;
  for (const shape of paramShapes(cfg).values()) n += shape.reduce((a, d) => a * BigInt(d), 1n);
  return n;
}

/**
 * Estimated bytes by what holds them (BigInts), with `total` and `totalMb` (a Number).
 * @param {ModelConfig} cfg
 */
export function estimate(cfg) {
  const p = countParams(cfg);
  const [b, t, c, v, h] = [cfg.batch, cfg.seqLen, cfg.width, cfg.vocabSize, cfg.heads].map(BigInt);
  const n = b * t;
  const attention = b * h * t * t; // (B, H, T, T) elements of one layer's probabilities
  const f = BigInt(cfg.hidden);
  const perLayer = 44n * n * c + 8n * n * f + 12n * attention;
  const logits = 12n * n * v + 24n * c * v; // three-limb logits gradient (contract v2)
  const activations = logits + BigInt(cfg.layers) * perLayer + 16n * n * c + 16n * n * f +
    16n * attention;
  const pieceBytes = (p * 257n + 255n) / 256n; // int8 values plus one exponent per 256
  const parts = {
    params: p,
    state: 12n * p,
    step: 12n * p,
    activations,
    exchange: 8n * p + BigInt(HISTORY_STEPS) * 2n * pieceBytes,
    checkpoint: 12n * p + BigInt(MIB),
  };
  const total = parts.state + parts.step + parts.activations + parts.exchange + parts.checkpoint;
  // Python's total / MIB: int / int is correctly rounded, and so is Number(total) / 2^20.
  return Object.freeze({ ...parts, total, totalMb: Number(total) / MIB });
}
