// The contract model (v2) in JavaScript (docs/MODEL.md; reference: server/daisychain/model/,
// optim.py, batches.py, training.py). Bit-identical to the Python reference. See
// docs/JS_MIRROR.md.
export * from './config.js';
export * from './params.js';
export * from './gpt.js';
export * from './optim.js';
export * from './batches.js';
export * from './training.js';
