// The forward chain's gate on the page (docs/KERNELS.md "On the page"): before training uses a
// forward chain, whole forwards of small models run through it on a poisoned pool, every
// product answered from one chain run, every operand the GPU made equal to the CPU mirror's
// (gpu/replay.js checks each), every product audited, and the logits equal to the CPU mirror's
// bit for bit. A chain that fails is not used; the GEMM stays in use, one product at a time.
//
// The cases: odd token counts and sequence lengths (a partial last 4-row group and tile), one
// token, one and two layers, head dims 16 and 64, vocabularies that are not multiples of 4, and
// gains that are not all 1 (so the norms' products with the gain show).

import {
  initParams, modelConfig, forwardLogits, forwardLogitsAsync, forwardBackward,
  forwardBackwardAsync,
} from '../model/index.js';
import { Workspace } from '../model/gpt.js';
import { productOps } from './gemm.js';
import { Auditor } from './audit.js';
import { key, bits } from '../numerics/prng.js';

export const GATE_CASES = Object.freeze([
  { name: '2 layers, 3 x 5 tokens, head dim 16, vocab 37',
    cfg: { vocabSize: 37, width: 32, layers: 2, heads: 2, seqLen: 8, batch: 3, mlpMult: 4 },
    seq: 5, seed: 11 },
  { name: '1 layer, 2 x 9 tokens, one head of 16, vocab 131',
    cfg: { vocabSize: 131, width: 16, layers: 1, heads: 1, seqLen: 9, batch: 2, mlpMult: 3 },
    seq: 9, seed: 12 },
  { name: '1 layer, one token, 4 heads of 16, vocab 8',
    cfg: { vocabSize: 8, width: 64, layers: 1, heads: 4, seqLen: 4, batch: 1, mlpMult: 2 },
    seq: 1, seed: 13 },
]);

/** A gate case's parameters (the contract's init, gains moved off 1) and tokens. */
export function gateInputs({ cfg: fields, seq, seed }) {
  const cfg = modelConfig(fields);
  const params = initParams(cfg, seed);
  for (const [name, g] of params) {
    if (!/(^|\.)g[12f]?$/.test(name)) continue;
    for (let i = 0; i < g.length; i++) g[i] = Math.fround(1 + ((i * 5 + seed) % 9) / 8 - 0.5);
  }
  const words = bits(key(0x6a7e, seed), 2 * cfg.batch * seq);
  const x = Int32Array.from(words.subarray(0, cfg.batch * seq), (w) => w % cfg.vocabSize);
  const y = Int32Array.from(words.subarray(cfg.batch * seq), (w) => w % cfg.vocabSize);
  return { cfg, params, x, y };
}

/**
 * Every case through `chain` on a poisoned pool: {passed, failure: null | {case, reason}}. A
 * case fails when the chain throws, when the replay ends before the last product (the chain
 * made a product the model did not ask for), when an operand or product differs, or when the
 * logits differ from the CPU mirror's in one bit.
 */
export async function runForwardChainGate(chain, cases = GATE_CASES) {
  let passed = 0;
  for (const c of cases) {
    const { cfg, params, x } = gateInputs(c);
    const want = forwardLogits(params, cfg, x, { workspace: new Workspace() });
    const auditor = new Auditor();
    const ops = productOps(chain.gemm, { chain, audit: (p, acc) => auditor.check(p, acc) });
    let got;
    const runs = chain.runs;
    try {
      got = await chain.gemm.pool.poisoned(() => forwardLogitsAsync(params, cfg, x,
        { workspace: new Workspace(), ops }));
    } catch (exc) {
      return { passed, failure: { case: c.name, reason: `${exc.name}: ${exc.message}` } };
    }
    const replay = ops.replay;
    const reason =
      chain.runs !== runs + 1 ? `${chain.runs - runs} chain runs, not 1` :
      replay === null || replay.answered !== replay.expected.length ?
        `the chain answered ${replay?.answered ?? 0} of ${replay?.expected.length ?? '?'} ` +
          `products${replay?.dropped ? ` (${replay.dropped})` : ''}` :
      firstBitDiff(want, got);
    if (reason) return { passed, failure: { case: c.name, reason } };
    passed += 1;
  }
  return { passed, failure: null };
}

function firstBitDiff(want, got) {
  const a = new Uint32Array(want.buffer, want.byteOffset, want.length);
  const b = new Uint32Array(got.buffer, got.byteOffset, got.length);
  if (a.length !== b.length) return `${b.length} logits, not ${a.length}`;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) {
      return `logit ${i}: 0x${b[i].toString(16)}, the CPU mirror's 0x${a[i].toString(16)}`;
    }
  }
  return null;
}

/**
 * Every case's training step through `step` (a StepChain, with its ForwardChain) on a poisoned
 * pool: {passed, failure}. A case fails when the chain throws, when it does not run exactly
 * once, when a replay ends before its last product (the forward's 6 L + 1, the backward's two
 * per pair), when a limb, operand or product differs, or when the loss or a gradient differs
 * from the CPU mirror's in one bit.
 */
export async function runStepChainGate(step, cases = GATE_CASES) {
  let passed = 0;
  const { forward } = step;
  for (const c of cases) {
    const { cfg, params, x, y } = gateInputs(c);
    const want = forwardBackward(params, cfg, x, y, { workspace: new Workspace() });
    const auditor = new Auditor();
    const ops = productOps(step.gemm, { chain: forward, stepChain: step,
      audit: (p, acc) => auditor.check(p, acc) });
    const runs = step.runs;
    let got;
    try {
      got = await step.gemm.pool.poisoned(() => forwardBackwardAsync(params, cfg, x, y,
        { workspace: new Workspace(), ops }));
    } catch (exc) {
      return { passed, failure: { case: c.name, reason: `${exc.name}: ${exc.message}` } };
    } finally {
      step.gemm.pendingProbe = null;
    }
    const fw = ops.replay;
    const back = ops.backReplay;
    const unanswered = (r, what) => (r === null || r.answered !== r.expected.length ?
      `the chain answered ${r?.answered ?? 0} of the ${what}'s ${r?.expected.length ?? '?'} ` +
      `products${r?.dropped ? ` (${r.dropped})` : ''}` : null);
    let reason = step.runs !== runs + 1 ? `${step.runs - runs} step chain runs, not 1` :
      unanswered(fw, 'forward') ?? unanswered(back, 'backward') ??
      (Object.is(want.loss, got.loss) ? null : `loss ${got.loss}, the CPU mirror's ${want.loss}`);
    for (const [name, g] of want.grads) {
      if (reason) break;
      const d = firstBitDiff(g, got.grads.get(name));
      if (d) reason = `gradient ${name}: ${d}`;
    }
    if (reason) return { passed, failure: { case: c.name, reason } };
    passed += 1;
  }
  return { passed, failure: null };
}
