// The start-up measurement behind the backend choice (docs/KERNELS.md, "Backend choice"): how
// long one training step's gradient computation takes on each backend that passed its gates,
// on the run's own model configuration (the actual product shapes, every GPU product audited as
// in training), so the choice reflects the step that will really run.
//
// Bounded: the CPU tier first runs one untimed batch-1 step (it compiles the JavaScript that
// every tier shares: norms, softmax, quantization, dequantization; otherwise whichever backend
// is timed first pays for it), then each candidate is timed on one full step and stopped between
// two products once it has run longer than the best so far (it cannot win). Timing inputs are a
// fixed token pattern, never part of the contract; the parameters are only read.

import { forwardBackwardAsync, Workspace } from '../model/gpt.js';
import { CPU_OPS } from '../model/ops.js';
import { productOps } from '../gpu/gemm.js';
import { Auditor } from '../gpu/audit.js';

/** Thrown inside a timed step once it has passed its limit. */
class Cutoff extends Error {}

/** x and y of B * T tokens in a fixed pattern (timing input only). */
export function timingBatch(cfg, batch = cfg.batch) {
  const n = batch * cfg.seqLen;
  const x = new Int32Array(n);
  const y = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    x[i] = (i * 7919 + 13) % cfg.vocabSize;
    y[i] = (i * 104729 + 7) % cfg.vocabSize;
  }
  return { x, y };
}

// `ops` with a check of the clock before and after every product.
function withDeadline(ops, t0, limitMs) {
  const wrapped = {};
  for (const op of ['qmatmul', 'gradMatmulLeft', 'gradMatmulRight']) {
    wrapped[op] = async (...args) => {
      if (performance.now() - t0 > limitMs) throw new Cutoff();
      const out = await ops[op](...args);
      if (performance.now() - t0 > limitMs) throw new Cutoff();
      return out;
    };
  }
  return wrapped;
}

/**
 * A `timeStep(candidate, limitMs)` for selectBackend: resolves to {ms, complete} for one
 * forward-backward of `cfg` on `params` with the candidate's products (audited with `audit`
 * cells when on a GPU, as training does).
 */
export function stepTimer(cfg, params, { audit = 16 } = {}) {
  const { x, y } = timingBatch(cfg);
  const workspace = new Workspace();
  let warmed = false;
  return async (candidate, limitMs) => {
    if (!warmed) {
      const one = timingBatch(cfg, 1);
      await forwardBackwardAsync(params, cfg, one.x, one.y, { batch: 1, workspace, ops: CPU_OPS });
      warmed = true;
    }
    const base = candidate.onGpu
      ? productOps(candidate.gemm, { audit: auditorFor(audit).check })
      : CPU_OPS;
    const t0 = performance.now();
    try {
      await forwardBackwardAsync(params, cfg, x, y, {
        batch: cfg.batch, workspace, ops: withDeadline(base, t0, limitMs),
      });
    } catch (exc) {
      if (exc instanceof Cutoff) return { ms: performance.now() - t0, complete: false };
      throw exc;
    }
    return { ms: performance.now() - t0, complete: true };
  };
}

function auditorFor(samples) {
  const auditor = new Auditor({ samples });
  return { check: (p, acc) => auditor.check(p, acc) };
}

/**
 * [with, without]: the best of `rounds` interleaved timings of one forward-backward of `cfg` on
 * `params` through `gemm` with the chains (`chain`, `step`) and without them, in ms. What the
 * training worker keeps the chains by (trainer.js attachChain): a real GPU gains a readback per
 * product from them, an emulated one loses the epilogues' soft-float work.
 */
export async function timeChains(gemm, cfg, params, chain, step, rounds = 2) {
  const { x, y } = timingBatch(cfg);
  const time = async (ops) => {
    const t0 = performance.now();
    await forwardBackwardAsync(params, cfg, x, y, { batch: cfg.batch, workspace: new Workspace(),
      ops });
    return performance.now() - t0;
  };
  const best = [Infinity, Infinity];
  for (let r = 0; r < rounds; r++) {
    best[0] = Math.min(best[0], await time(productOps(gemm, { chain, stepChain: step })));
    best[1] = Math.min(best[1], await time(productOps(gemm)));
  }
  gemm.pendingProbe = null; // the timed steps' probe products are nobody's
  return best;
}
