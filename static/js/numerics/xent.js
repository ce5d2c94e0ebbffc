// The per-token cross-entropy of the contract GPT (docs/MODEL.md section 5; gpt.py's
// cross_entropy), with its kernel switch.
//
// Per row n of N rows of V logits: m = max; z = logits - m; p = exp(z) (fmath.js); s =
// tree_sum(p); loss_n = log(s) - z[y]; dlogits = ((p / s) - [v == y]) / N, written over the
// logits. Every float32 operation is a Float32Array store or Math.fround of an exact double, and
// the sum is the pinned tree (reduce.js). On the tiny preset (V = 2048 against a width of 64) the
// exp of these O(N V) values is a large share of a training step, so the browser CPU tier hands
// the rows to the WebAssembly SIMD elementwise kernel once its gate has seen it give these very
// bits (wasmeltgate.js, kernels/elementwise_f32.wat xent_rows / xent_grad); the mean over the
// rows stays here, the same code on both paths.

import { exp, log } from './fmath.js';
import { treeSumStrided } from './reduce.js';

const f32 = Math.fround;

// The kernel computing the rows: null (the JS loop below), or the one wasmeltgate.js installed
// after its gate passed. Same bits either way; only the speed changes.
let xentKernel = null;

/** Installs the cross-entropy kernel (null: the JS loop); returns the previous one. */
export function setCrossEntropyKernel(kernel) {
  const previous = xentKernel;
  xentKernel = kernel;
  return previous;
}

/** The installed cross-entropy kernel, or null. */
export function activeCrossEntropyKernel() {
  return xentKernel;
}

/**
 * Mean cross-entropy of N rows of V float32 logits (row-major, a Float32Array) against targets
 * `y` (N integer ids in [0, V)), as a float32 number; `logits` becomes dlogits in place and
 * `lossT` (Float32Array(N), scratch) the per-row losses.
 */
export function crossEntropy(logits, y, N, V, lossT = new Float32Array(N)) {
  for (let n = 0; n < N; n++) {
    if (!(y[n] >= 0 && y[n] < V && Number.isInteger(y[n]))) {
      throw new RangeError(`crossEntropy: target ${y[n]} of row ${n} is not an id in [0, ${V})`);
    }
  }
  if (xentKernel !== null) xentKernel.crossEntropy(logits, y, N, V, lossT);
  else crossEntropyRows(logits, y, N, V, lossT);
  return f32(treeSumStrided(lossT, 0, N, 1) / f32(N));
}

/** The rows on the JS path: dlogits over `logits`, the per-row losses into lossT. */
function crossEntropyRows(logits, y, N, V, lossT) {
  const nf = f32(N);
  for (let n = 0; n < N; n++) {
    const o = n * V;
    let m = -Infinity;
    for (let v = 0; v < V; v++) if (logits[o + v] > m) m = logits[o + v];
    for (let v = 0; v < V; v++) logits[o + v] = logits[o + v] - m; // z
    const yo = o + y[n];
    const zy = logits[yo];
    for (let v = 0; v < V; v++) logits[o + v] = exp(logits[o + v]); // p
    const s = treeSumStrided(logits, o, V, 1);
    lossT[n] = log(s) - zy;
    for (let v = 0; v < V; v++) logits[o + v] = logits[o + v] / s;
    logits[yo] = logits[yo] - 1;
    for (let v = 0; v < V; v++) logits[o + v] = logits[o + v] / nf;
  }
}
