// The kernel probe: a fixed seeded int8 GEMM through the live kernel, hashed.
//
// Mirrors server/daisychain/gpu/probe.py. Every device computes acc = A @ B for the same
// A (64 x 96) and B (96 x 80), drawn from the contract PRNG (streams (2, 0) and (2, 1) under
// PROBE_SEED, the top byte of each 32-bit word as int8), and publishes SHA-256 over the int32
// little-endian bytes of acc in row-major order. A device whose live kernel disagrees with
// REFERENCE_PROBE_HASH computes different bits and must not train.
//
// The step probe (stepProbeHash) is what a peer publishes after every step and the guard
// compares with REFERENCE_STEP_PROBE: that accumulator, then the block quantizations of a fixed
// float32 matrix (one-, two- and three-limb, by rows and by columns) through quant.js, and the
// cross-entropy of fixed logits through xent.js, that is through the WebAssembly SIMD kernels
// where they are installed, then the loss and every gradient of one training step of a fixed
// small model (the probe step, PROBE_MODEL) through the live products (a GPU tier's step chain
// computes it with every epilogue in the training step's own submit: gpu/step_chain.js), hashed
// together. A device whose elementwise kernel or chain epilogue drifted after its gate is named
// by it, as one whose GEMM drifted is.

import { bits, key } from '../numerics/prng.js';
import { sha256Arrays } from '../numerics/hash.js';
import {
  quantize2Cols, quantize2Rows, quantize3Cols, quantize3Rows, quantizeCols, quantizeRows,
} from '../numerics/quant.js';
import { crossEntropy } from '../numerics/xent.js';
import { modelConfig } from '../model/config.js';
import { initParams, isGain, paramNames } from '../model/params.js';
import { forwardBackwardAsync, stepPlan, Workspace } from '../model/gpt.js';
import { CPU_OPS } from '../model/ops.js';

export const PROBE_SEED = 0x9b0be;
export const PROBE_SHAPE = [64, 96, 80]; // M, K, N
export const REFERENCE_PROBE_HASH =
  'fd4bd82715373741b0a6c82113567db8e5b86980ea9a296ea228cc901f4677cb';
// The elementwise part's matrix: no gate case has this shape, and 64 columns (a multiple of 4)
// send every block through the SIMD kernel, not the JS fallback (quant.js quantKernelFor).
export const ELEMENTWISE_SHAPE = [24, 64];
// The cross-entropy part's logits: N rows of V, V odd so a SIMD kernel's padded lanes count.
export const XENT_SHAPE = [8, 131];
export const REFERENCE_STEP_PROBE =
  'a3cb5679bf27de938f3229024ecaed4620b060dc524e6e7de85e3c07b738aa19';

function draw(stream, n) {
  const words = bits(key(PROBE_SEED, 2, stream), n);
  const out = new Int8Array(n);
  for (let i = 0; i < n; i++) out[i] = words[i] >>> 24; // wraps to the int8 of the top byte
  return out;
}

/** The probe's A (M x K) and B (K x N), row-major Int8Arrays. */
export function probeOperands() {
  const [m, k, n] = PROBE_SHAPE;
  return { a: draw(0, m * k), b: draw(1, k * n) };
}

/** Runs the probe through `gemm.matmulInt` (the live kernel) and resolves to its hash. */
export async function probeHash(gemm) {
  const [m, k, n] = PROBE_SHAPE;
  const { a, b } = probeOperands();
  return sha256Arrays([await gemm.matmulInt(a, b, m, k, n)]);
}

/**
 * The step probe's float32 matrix (row-major), built from PRNG words in integer arithmetic as
 * probe.py's elementwise_operand: row 0 zeros, row 1 subnormals, then normals of either sign
 * whose exponents move with the row.
 */
export function elementwiseOperand() {
  const [rows, cols] = ELEMENTWISE_SHAPE;
  const words = bits(key(PROBE_SEED, 2, 2), rows * cols);
  const out = new Uint32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const i = r * cols + c;
      const w = words[i];
      const sign = (w & 0x80000000) >>> 0;
      const mantissa = w & 0x007fffff;
      const biased = 100 + ((w >>> 23) & 15) + (r % 8) * 3;
      if (r === 0) out[i] = 0;
      else if (r === 1) out[i] = (sign | (mantissa >>> 3)) >>> 0;
      else out[i] = (sign | (biased << 23) | mantissa) >>> 0;
    }
  }
  return new Float32Array(out.buffer);
}

/**
 * The cross-entropy part's logits (Float32Array, row-major: either sign, magnitudes in [0.5, 8),
 * built from PRNG words in integer arithmetic) and targets (one per row, a word modulo V), as
 * probe.py's xent_operands.
 */
export function xentOperands() {
  const [rows, v] = XENT_SHAPE;
  const words = bits(key(PROBE_SEED, 2, 3), rows * v);
  const out = new Uint32Array(rows * v);
  for (let i = 0; i < out.length; i++) {
    const w = words[i];
    out[i] = ((w & 0x80000000) | ((126 + ((w >>> 23) & 3)) << 23) | (w & 0x7fffff)) >>> 0;
  }
  const targets = Array.from(bits(key(PROBE_SEED, 2, 4), rows), (w) => (w >>> 0) % v);
  return { logits: new Float32Array(out.buffer), targets };
}

/**
 * What the step probe hashes after the product, in probe.py's order: for 1, 2 and 3 limbs, rows
 * then columns, each limb (Int8Array) then its exponents (Int32Array); then the cross-entropy of
 * xentOperands(): its mean loss (one float32) and its dlogits. Copies: a kernel may hand back
 * views of its own memory, which its next call overwrites.
 */
export function elementwiseParts(x) {
  const [rows, cols] = ELEMENTWISE_SHAPE;
  const parts = [];
  const r1 = quantizeRows(x, rows, cols);
  parts.push(r1.q.slice(), r1.e.slice());
  const c1 = quantizeCols(x, rows, cols);
  parts.push(c1.q.slice(), c1.e.slice());
  const r2 = quantize2Rows(x, rows, cols);
  parts.push(r2.hi.slice(), r2.lo.slice(), r2.e.slice());
  const c2 = quantize2Cols(x, rows, cols);
  parts.push(c2.hi.slice(), c2.lo.slice(), c2.e.slice());
  const r3 = quantize3Rows(x, rows, cols);
  parts.push(r3.hi.slice(), r3.mid.slice(), r3.lo.slice(), r3.e.slice());
  const c3 = quantize3Cols(x, rows, cols);
  parts.push(c3.hi.slice(), c3.mid.slice(), c3.lo.slice(), c3.e.slice());
  const [n, v] = XENT_SHAPE;
  const { logits, targets } = xentOperands();
  const loss = crossEntropy(logits, targets, n, v); // logits become the dlogits
  parts.push(Float32Array.of(loss), logits.slice());
  return parts;
}

// The probe step's model (probe.py PROBE_MODEL): two blocks, a head of 16, an MLP of 32.
export const PROBE_MODEL = modelConfig({ vocabSize: 40, width: 16, layers: 2, heads: 1,
  seqLen: 6, batch: 2, mlpMult: 2 });

/**
 * The probe step's parameters and tokens, as probe.py's probe_step_inputs: the contract's init
 * under PROBE_SEED, gain k's element i set to 0.5 + ((5 i + 3 k) mod 9) / 8, and inputs and
 * targets from PRNG words (stream (2, 5)) modulo the vocabulary.
 */
export function probeStepInputs() {
  const cfg = PROBE_MODEL;
  const params = initParams(cfg, PROBE_SEED);
  let k = 0;
  for (const name of paramNames(cfg)) {
    if (!isGain(name)) continue;
    const g = params.get(name);
    for (let i = 0; i < g.length; i++) g[i] = 0.5 + ((5 * i + 3 * k) % 9) / 8;
    k += 1;
  }
  const count = cfg.batch * cfg.seqLen;
  const words = bits(key(PROBE_SEED, 2, 5), 2 * count);
  const token = (w) => (w >>> 0) % cfg.vocabSize;
  return {
    params,
    x: Int32Array.from(words.subarray(0, count), token),
    y: Int32Array.from(words.subarray(count), token),
  };
}

let probePlan = null;
/** The probe step's plan (gpt.js stepPlan), made once: what a step chain records beside every
 * training step (gpu/step_chain.js), and what the probe step's own plan must equal to be
 * answered from it. Its arrays are this module's: nothing else computes in its workspace. */
export function probeStepPlan() {
  if (probePlan === null) {
    const { params, x, y } = probeStepInputs();
    probePlan = stepPlan(params, PROBE_MODEL, x, y);
  }
  return probePlan;
}

/**
 * The probe step's loss (one float32) and every gradient in parameter order, through `ops` (a
 * product provider: the tier's own where a step chain computes the step, the CPU mirror
 * otherwise).
 */
export async function probeStepParts(ops = CPU_OPS) {
  const { params, x, y } = probeStepInputs();
  const r = await forwardBackwardAsync(params, PROBE_MODEL, x, y,
    { workspace: new Workspace(), ops });
  return [Float32Array.of(r.loss), ...paramNames(PROBE_MODEL).map((n) => r.grads.get(n))];
}

/**
 * What a peer publishes after every step: the probe product through `gemm.matmulInt` (the live
 * kernel), the elementwise part through quant.js's installed kernel and the probe step through
 * `ops` (the CPU mirror by default), hashed together.
 */
export async function stepProbeHash(gemm, { ops = CPU_OPS } = {}) {
  const [m, k, n] = PROBE_SHAPE;
  const { a, b } = probeOperands();
  // A step chain computed the product in the step's own submit (gpu/step_chain.js): taken once.
  const pending = gemm.pendingProbe ?? null;
  gemm.pendingProbe = null;
  const out = pending ?? (await gemm.matmulInt(a, b, m, k, n));
  const acc = out instanceof Int32Array ? out : Int32Array.from(out); // int32 bytes, as probe.py
  const parts = elementwiseParts(elementwiseOperand());
  return sha256Arrays([acc, ...parts, ...(await probeStepParts(ops))]);
}
