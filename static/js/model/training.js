// The training core: one replica's state and its step (docs/MODEL.md section 9). Mirrors
// server/daisychain/training.py (contract backend). A step is the contract model's gradients on
// a batch (computeGrads), then the pinned AdamW update (applyGrads); peers that combine
// gradients across devices call the two halves with their combination in between. The identity
// of a replica is stateHash: SHA-256 over every parameter, then every m, then every v, in
// parameter order (canonical little-endian float32 bytes).

import { sha256Arrays } from '../numerics/hash.js';
import { initParams } from './params.js';
import { forwardBackward, Workspace } from './gpt.js';
import { AdamW, adamwConfig } from './optim.js';
import { sampleBatch } from './batches.js';

/**
 * Fresh state: seeded parameters, zero moments, step 0.
 * {cfg, optCfg, params, optState: {m, v, step, p1, p2}, seed, optimizer, workspace}.
 */
export function init(cfg, optCfg, seed) {
  const config = adamwConfig(optCfg);
  const optimizer = new AdamW(config);
  const params = initParams(cfg, seed);
  return {
    cfg,
    optCfg: config,
    params,
    optState: optimizer.initState(params),
    seed,
    optimizer,
    workspace: new Workspace(),
  };
}

/** Number of completed steps. */
export const stepOf = (state) => state.optState.step;

/** Hex SHA-256 over all params, then all m, then all v, each in parameter order. */
export function stateHash(state) {
  return sha256Arrays([
    ...state.params.values(),
    ...state.optState.m.values(),
    ...state.optState.v.values(),
  ]);
}

/** The batch of the coming step for `rank` (seeded by the state's seed and step). */
export function nextBatch(state, tokens, rank = 0) {
  const { batch, seqLen } = state.cfg;
  return sampleBatch(tokens, batch, seqLen, state.seed, state.optState.step, rank);
}

/** {loss, grads} of the state's model on one batch; the state is not modified. */
export function computeGrads(state, x, y, batch = state.cfg.batch) {
  return forwardBackward(state.params, state.cfg, x, y, { batch, workspace: state.workspace });
}

/** The pinned AdamW update, in place; returns {step, lr, gradNorm, clipped}. */
export function applyGrads(state, grads) {
  return state.optimizer.step(state.params, grads, state.optState);
}

/**
 * computeGrads, then applyGrads; resolves to {step, loss, gradNorm, lr, hash} (hash '' when
 * `withHash` is false).
 */
export async function trainStep(state, x, y, { withHash = true, batch } = {}) {
  const { loss, grads } = computeGrads(state, x, y, batch);
  const stats = applyGrads(state, grads);
  const hash = withHash ? await stateHash(state) : '';
  return { step: stats.step, loss, gradNorm: stats.gradNorm, lr: stats.lr, hash };
}
