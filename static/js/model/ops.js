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

// Besides products, the forward yields one `request('plan', {...})` before its first product
// (model/gpt.js forwardPlan): what the whole forward depends on, for a provider that records it
// in one submit (gpu/forward_chain.js). The CPU mirror and any provider without `plan` skip it.

/** A product request yielded by the model's generators. */
export function request(op, ...args) {
  return { op, args };
}

/**
 * Two independent product requests (neither reads the other's result: a layer's weight and
 * input gradients), yielded together; the generator receives both results, in order. The bits
 * are those of the two requests one after the other. An asynchronous provider computes them
 * concurrently: on a GPU both are submitted before either is read back, so the pair costs one
 * round trip's wait instead of two (gpu.py's backward pairs, docs/KERNELS.md).
 */
export function pair(first, second) {
  return { op: 'pair', args: [first, second] };
}

/** Drives a model generator to completion with the CPU mirror; returns its result. */
export function runSync(steps) {
  let r = steps.next();
  while (!r.done) {
    const { op, args } = r.value;
    if (op === 'plan') {
      r = steps.next(null);
      continue;
    }
    r = steps.next(op === 'pair'
      ? args.map((q) => CPU_OPS[q.op](...q.args))
      : CPU_OPS[op](...args));
  }
  return r.value;
}

function call(ops, { op, args }) {
  const fn = ops[op];
  if (typeof fn !== 'function') throw new TypeError(`product provider lacks ${op}()`);
  return fn.apply(ops, args);
}

/** Drives a model generator with `ops` (a provider, sync or async); resolves to its result. */
export async function runAsync(steps, ops = CPU_OPS) {
  let r = steps.next();
  while (!r.done) {
    const { op, args } = r.value;
    if (op === 'plan') {
      // A provider without a forward chain (the CPU mirror) has nothing to do with a plan.
      r = steps.next(typeof ops.plan === 'function' ? await ops.plan(...args) : null);
    } else if (op === 'pair') {
      // Both started before either is awaited; every one settles before a failure is thrown
      // (a product left running after its pair failed would reject unheard).
      const settled = await Promise.allSettled(args.map(async (q) => call(ops, q)));
      const failed = settled.find((s) => s.status === 'rejected');
      if (failed) throw failed.reason;
      r = steps.next(settled.map((s) => s.value));
    } else {
      r = steps.next(await call(ops, r.value));
    }
  }
  return r.value;
}
