// The numerical contract in JavaScript (normative text: docs/NUMERICS.md; reference:
// server/daisychain/numerics/). Bit-identical to the Python reference; runs unchanged in the
// browser and under Node. See docs/JS_MIRROR.md.

export const CONTRACT_VERSION = 2; // 2: three-limb logits gradient (docs/NUMERICS.md section 6)

export * from './fmath.js';
export * from './quant.js';
export * from './gemm.js';
export * from './reduce.js';
export * from './xent.js';
export * from './prng.js';
export * from './hash.js';
