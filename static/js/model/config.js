// Model configuration and presets (docs/MODEL.md section 1). Mirrors
// server/daisychain/model/config.py: the configuration is the whole architecture; it is
// validated up front so an impossible shape fails with a hint, not deep in a product.

export const DEFAULT_VOCAB = 2048; // the shipped tokenizer (luts/tokenizer.json); equal to Python's DEFAULT_VOCAB

/**
 * The model configuration cannot be built under the numerical contract. `rule` names the
 * invariant that failed, as Python's ConfigError.rule (a peer refusing a leader's config with
 * `error incompatible` reports it: static/js/p2p/runconfig.js).
 */
export class ConfigError extends Error {
  constructor(message, rule = 'model') {
    super(message);
    this.name = 'ConfigError';
    this.rule = rule;
  }
}

const INT_FIELDS = ['vocabSize', 'width', 'layers', 'heads', 'seqLen', 'batch', 'mlpMult'];

function isPowerOfFour(n) {
  if (!(n > 0) || (n & (n - 1)) !== 0) return false;
  return (31 - Math.clz32(n)) % 2 === 0;
}

/**
 * A validated, frozen configuration. Field names are camelCase (`vocabSize`, `seqLen`,
 * `mlpMult`, `normEps`); `modelConfig` also accepts the Python snake_case names, and
 * `norm_eps_bits` (the uint32 bit pattern of the float32 epsilon, as in the golden vectors).
 * Derived: `headDim` (C / H), `hidden` (mlpMult * C), `tokens` (B * T).
 */
export function modelConfig(fields) {
  const f = {
    vocabSize: fields.vocabSize ?? fields.vocab_size,
    width: fields.width,
    layers: fields.layers,
    heads: fields.heads,
    seqLen: fields.seqLen ?? fields.seq_len,
    batch: fields.batch,
    mlpMult: fields.mlpMult ?? fields.mlp_mult ?? 4,
  };
  for (const name of INT_FIELDS) {
    const v = f[name];
    if (!Number.isInteger(v) || v < 1) {
      throw new ConfigError(`${name} must be a positive integer, got ${v}`, 'positive');
    }
  }
  let eps = fields.normEps ?? fields.norm_eps;
  const epsBits = fields.normEpsBits ?? fields.norm_eps_bits;
  if (epsBits !== undefined) {
    const u = new Uint32Array([epsBits]);
    eps = new Float32Array(u.buffer)[0];
  }
  eps = Math.fround(eps ?? 1e-5);
  if (f.width % f.heads !== 0) {
    throw new ConfigError(
      `width ${f.width} is not divisible by heads ${f.heads}; choose heads so that ` +
        'width / heads is a power of 4 (16, 64, 256)',
      'heads-divide-width',
    );
  }
  const headDim = f.width / f.heads;
  if (!isPowerOfFour(headDim)) {
    throw new ConfigError(
      `head dim width/heads = ${headDim} must be a power of 4 (16, 64, 256) so the attention ` +
        'scale 1/sqrt(head dim) is an exact power of two; change width or heads',
      'head-dim',
    );
  }
  if (f.vocabSize >= 2 ** 24) throw new ConfigError(`vocab_size ${f.vocabSize} must be below 2^24`, 'vocab-range');
  if (f.batch * f.seqLen >= 2 ** 24) {
    throw new ConfigError('batch * seq_len must be below 2^24 (1/N is taken in float32)', 'tokens-range');
  }
  if (!(Number.isFinite(eps) && eps > 0)) {
    throw new ConfigError(`norm_eps must be a positive finite float32, got ${eps}`, 'norm-eps');
  }
  return Object.freeze({
    ...f,
    normEps: eps,
    headDim,
    hidden: f.mlpMult * f.width,
    tokens: f.batch * f.seqLen,
  });
}

/** A copy of `cfg` with some fields changed (validated again). */
export function replaceConfig(cfg, changes) {
  const { normEps, vocabSize, width, layers, heads, seqLen, batch, mlpMult } = cfg;
  return modelConfig({ normEps, vocabSize, width, layers, heads, seqLen, batch, mlpMult, ...changes });
}

export const PRESETS = Object.freeze({
  tiny: modelConfig({ vocabSize: DEFAULT_VOCAB, width: 64, layers: 2, heads: 4, seqLen: 64, batch: 4 }),
  small: modelConfig({ vocabSize: DEFAULT_VOCAB, width: 256, layers: 4, heads: 4, seqLen: 128, batch: 8 }),
  medium: modelConfig({ vocabSize: DEFAULT_VOCAB, width: 512, layers: 8, heads: 8, seqLen: 256, batch: 8 }),
});

/** A preset by name, optionally with fields changed (e.g. {vocabSize: 2048}). */
export function preset(name, changes = null) {
  const cfg = PRESETS[name];
  if (!cfg) {
    throw new ConfigError(
      `unknown model preset ${name}; choose one of ${Object.keys(PRESETS).join(', ')}`, 'preset');
  }
  return changes ? replaceConfig(cfg, changes) : cfg;
}
