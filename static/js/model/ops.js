// Where the model's matrix products run (docs/KERNELS.md, "Browser").
//
// The model (gpt.js) is written as generators that YIELD each matrix product as a request
// `{op, args}` and receive its result back, so the very same code runs synchronously on the CPU
// mirror (runSync: the default, Node tests) or asynchronously on a GPU provider whose products
// resolve after a readback (runAsync). A provider implements the three products of
// ../numerics/gemm.js with their exact signatures and float32 bits:
//
//   qmatmul(aq, ae, bq, be, M, K, N, opts)          forward, opts {transA, transB, batch, out}
//   gradMatmulLeft(g, foldE, bq, M, K, N, opts)     two-limb dA, opts {transB, batch, out}
//   gradMatmulRight(aq, foldE, g, M, K, N, opts)    two-limb dB, opts {transA, batch, out}
//
// each returning (or resolving to) the Float32Array it filled. static/js/gpu/backend.js builds a
// WebGPU provider: integer accumulators from the GPU, every float operation (limb quantization,
// dequantization) on the CPU through the same functions the mirror uses.

import { qmatmul, gradMatmulLeft, gradMatmulRight } from '../numerics/gemm.js';

/** The CPU mirror as a provider (synchronous; also accepted by runAsync). */
export const CPU_OPS = Object.freeze({ qmatmul, gradMatmulLeft, gradMatmulRight });

/** A product request yielded by the model's generators. */
export function request(op, ...args) {
  return { op, args };
}

/** Drives a model generator to completion with the CPU mirror; returns its result. */
export function runSync(steps) {
  let r = steps.next();
  while (!r.done) {
    const { op, args } = r.value;
    r = steps.next(CPU_OPS[op](...args));
  }
  return r.value;
}

/** Drives a model generator with `ops` (a provider, sync or async); resolves to its result. */
export async function runAsync(steps, ops = CPU_OPS) {
  let r = steps.next();
  while (!r.done) {
    const { op, args } = r.value;
    const fn = ops[op];
    if (typeof fn !== 'function') throw new TypeError(`product provider lacks ${op}()`);
    r = steps.next(await fn.apply(ops, args));
  }
  return r.value;
}
