// @ts-check
// Validate once: a leader's `config` message becomes this peer's run, or one typed refusal.
// Mirror of server/daisychain/p2p/runconfig.py: the same rules in the same order, the same rule
// names, messages and hints (normative: docs/PROTOCOL.md "Config validation").
//
// messages.parse checks that a `config` is well formed; `parse` here decides whether this peer
// can and will train it: the invariants the model, the optimizer and the wire need, then the caps
// a follower puts on what a leader may impose on it (Limits). Anything else throws Incompatible
// (a MessageError with code `incompatible`, plus `rule`), which the receiver answers with
// `error incompatible` and survives. Pure: no I/O, no clock, no allocation of the model.

import { describe as describeDataName, parse as parseDataName } from '../datanames.js';
import { ConfigError, PRESETS, modelConfig } from '../model/config.js';
import { OptimizerError, adamwConfig } from '../model/optim.js';
import { MIB, estimate } from './footprint.js';
import {
  AUDIT_PRIVATE_DEFAULT, MessageError, SYNC_OUTER, SYNC_STEP, U32_MAX, errorFrom,
} from './messages.js';
import { floatRepr, pySlice, strRepr } from './pyrepr.js';
import { CUTS, CUT_SHARE, MAX_GLOBAL_BATCH } from './shares.js';

/**
 * @typedef {import('./messages.js').Config} Config
 * @typedef {import('./messages.js').ModelSpec} ModelSpec
 * @typedef {import('./messages.js').OptimSpec} OptimSpec
 * @typedef {ReturnType<typeof modelConfig>} ModelConfig
 * @typedef {ReturnType<typeof estimate>} Footprint
 * @typedef {keyof typeof LIMIT_DEFAULTS} LimitName
 * @typedef {Readonly<Record<LimitName, number>>} Limits
 */

export const MAX_EXACT_STEPS = 2 ** 24 - 1; // step counts enter float32 arithmetic
export const MAX_TRANSFER_BYTES = 2 ** 32 - 1; // a checkpoint is one transfer: u32 total
// Protocol-v1 size ranges: every size and every count derived from them stays far below 2^53.
export const SIZE_RANGES = Object.freeze({
  vocab_size: [1, 2 ** 24 - 1],
  width: [1, 8192],
  layers: [1, 256],
  heads: [1, 256],
  seq_len: [1, 65536],
  batch: [1, 4096],
  mlp_mult: [1, 16],
});
export const MAX_WEIGHT_DECAY = 1.0;
export const MAX_CLIP = 1e6;
// Outer runs (docs/PROTOCOL.md, "Outer runs"): the sync modes a peer of this version may know.
/** @type {readonly string[]} */
export const SYNC_MODES = Object.freeze([SYNC_STEP, SYNC_OUTER]);
export const MAX_OUTER_LR = 10.0;
// An outer run's extra state, bytes a parameter (Python's OUTER_STATE_BYTES_PER_PARAM).
export const OUTER_STATE_BYTES_PER_PARAM = 24n;
// With overlap, 8 more (Python's OVERLAP_STATE_BYTES_PER_PARAM).
export const OVERLAP_STATE_BYTES_PER_PARAM = 8n;
// Commit, then audit (docs/TRUST.md, "Config and versions"): 1 audits every attempt; the cap
// keeps the draw's modulo bias below 2^-16 (Python's MAX_AUDIT_ONE_IN, AUDIT_PRIVATE).
export const MAX_AUDIT_ONE_IN = 65536;
export const AUDIT_PRIVATE = Object.freeze(['refuse', 'unaudited']);

/** A well-formed config this peer will not train; `rule` names the check that failed. */
export class Incompatible extends MessageError {
  /**
   * @param {string} rule
   * @param {string} reason
   * @param {string} hint
   */
  constructor(rule, reason, hint) {
    super('incompatible', reason, hint);
    this.name = 'Incompatible';
    this.rule = rule;
  }
}

const LIMIT_DEFAULTS = Object.freeze({
  max_memory_mb: 4096, max_seq_len: 1024, max_batch: 64, max_steps: 1_000_000,
});

/**
 * What a follower accepts from a leader (Python's runconfig.Limits; snake_case fields).
 * @param {Partial<Record<LimitName, any>>} [fields]  each checked here (a RangeError names it)
 * @returns {Limits}
 */
export function limits(fields = {}) {
  /** @type {Record<LimitName, number>} */
  const out = { ...LIMIT_DEFAULTS };
  for (const name of /** @type {LimitName[]} */ (Object.keys(LIMIT_DEFAULTS))) {
    if (!(name in fields)) continue;
    const value = fields[name];
    if (!Number.isSafeInteger(value) || value < 1) {
      throw new RangeError(`${name} must be a positive integer, got ${value}`);
    }
    out[name] = value;
  }
  return Object.freeze(out);
}

// Hints for the model's own invariants (ConfigError.rule -> what the leader should change).
/** @type {Readonly<Record<string, string>>} */
const MODEL_HINTS = {
  'heads-divide-width': 'the leader must choose heads so that width / heads is a power of 4 ' +
    '(16, 64, 256); for example width 64 with 4 heads',
  'head-dim': 'the leader must choose width and heads so that width / heads is 16, 64 or 256',
  'vocab-range': 'the vocabulary must be below 2^24',
  'tokens-range': 'the leader must lower batch or seq_len: batch * seq_len must be below 2^24',
};

/**
 * `cfg` (a parsed `config` record) as this peer's run, or Incompatible. `tokenizerSha256` and
 * `vocabSize` describe this peer's tokenizer; `caps` are its Limits (defaults: limits());
 * `dataSources` the config.data names it can read ('builtin', and 'fineweb@REV' when its server
 * reads FineWeb-Edu at that revision); `outerRuns` says this peer trains outer runs (a machine
 * whose replica can: the conformance traces' replica and the page's WorkerReplica have
 * setOuter; a machine whose replica has none keeps the default and refuses them with rule
 * `page-outer`); `privateData` says this peer trains on text only it holds; `minAudit` is the
 * rarest audit rate it accepts (m: at least one attempt in m; 0: any, audits off included).
 * Returns {message, model (camelCase model config), optim, footprint, run, steps, seed, ...,
 * outer: {innerSteps, lr, momentum} for an outer run, else null}.
 * @param {import('./messages.js').Config} cfg
 * @param {{tokenizerSha256: string, vocabSize: number, caps?: ReturnType<typeof limits>,
 *   dataSources?: readonly string[], outerRuns?: boolean, privateData?: boolean,
 *   minAudit?: number}} options
 */
export function parse(cfg, {
  tokenizerSha256, vocabSize, caps = limits(), dataSources = ['builtin'], outerRuns = false,
  privateData = false, minAudit = 0,
}) {
  if (!(Number.isSafeInteger(minAudit) && minAudit >= 0 && minAudit <= MAX_AUDIT_ONE_IN)) {
    throw new RangeError(`minAudit must be an integer in [0, ${MAX_AUDIT_ONE_IN}], got ${minAudit}`);
  }
  checkData(cfg, tokenizerSha256, vocabSize, dataSources);
  const model = buildModel(cfg.model);
  checkGlobalBatch(cfg);
  checkPreset(cfg.preset, model);
  checkRun(cfg);
  checkSync(cfg, model.batch);
  checkAudit(cfg, privateData, minAudit);
  const optim = buildOptim(cfg.optim, cfg.steps);
  const footprint = withOuterState(estimate(model), cfg);
  checkTransfer(footprint);
  checkLimits(model, cfg.steps, footprint, caps);
  // Last: every rule above is the protocol's, answered as Python answers it; only then does the
  // page say what it cannot do itself.
  if (!outerRuns) checkPageSync(cfg);
  return Object.freeze({
    message: cfg, model, optim, footprint, run: cfg.run, steps: cfg.steps, seed: cfg.seed,
    resumeStep: cfg.resume_step, resumeHash: cfg.resume_hash, globalBatch: cfg.global_batch,
    outer: outerOf(cfg),
  });
}

/**
 * The outer loop of a `sync: "outer"` run (Python's RunConfig.outer), or null.
 * @param {Config} cfg
 */
function outerOf(cfg) {
  const spec = cfg.outer;
  if ((cfg.sync ?? SYNC_STEP) !== SYNC_OUTER || spec == null) return null;
  return Object.freeze({ innerSteps: spec.steps, lr: spec.lr, momentum: spec.momentum,
    overlap: spec.overlap ?? 0, cut: spec.cut ?? CUT_SHARE });
}

/**
 * The `error incompatible` reply to the leader.
 * @param {Incompatible} exc
 */
export function error(exc) {
  return errorFrom(exc);
}

// ---------------------------------------------------------------------------------------------
// Python's number formats: `{n:,}` of an int and `{x:,.0f}` of a float (ties to even).

/**
 * Digits with thousands separators (`{n:,}`) of an integer Number or BigInt.
 * @param {number | bigint} n
 */
export function grouped(n) {
  const s = BigInt(n).toString();
  const neg = s.startsWith('-');
  const digits = neg ? s.slice(1) : s;
  return (neg ? '-' : '') + digits.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/**
 * `{x:,.0f}` for a finite x >= 0: rounded to an integer, ties to even (not toFixed's up).
 * @param {number} x
 */
export function groupedFixed0(x) {
  const r = x < 2 ** 52 ? (x + 2 ** 52) - 2 ** 52 : x; // rint, ties to even
  return grouped(BigInt(r));
}

// ---------------------------------------------------------------------------------------------
// The rules, in the order they are checked (the first failure is reported).

/** @param {Config} cfg */
function checkGlobalBatch(cfg) {
  if (!(cfg.global_batch >= 1 && cfg.global_batch <= MAX_GLOBAL_BATCH)) {
    throw new Incompatible('global-batch',
      `global batch ${cfg.global_batch} outside [1, ${MAX_GLOBAL_BATCH}]`,
      `the leader must choose between 1 and ${MAX_GLOBAL_BATCH} sequences per step (shares ` +
      'multiply int8 values exactly only up to there)');
  }
}

/**
 * @param {Config} cfg
 * @param {string} tokenizerSha256
 * @param {number} vocabSize
 * @param {readonly string[]} dataSources
 */
function checkData(cfg, tokenizerSha256, vocabSize, dataSources) {
  try {
    parseDataName(cfg.data);
  } catch {
    throw new Incompatible('data',
      `data source ${strRepr(pySlice(cfg.data, 64))} is not one this version knows`,
      'lead with data "builtin" or the dataset a DaisyChain server reads (docs/PROTOCOL.md, ' +
      '"Training data")');
  }
  if (!dataSources.includes(cfg.data)) {
    // Training on other text than the run's would fork it, or worse, go unnoticed.
    throw new Incompatible('data',
      `this peer cannot read ${describeDataName(cfg.data)} (it reads: ${dataSources.join(', ')})`,
      'start this peer against a DaisyChain server that reads that text at that revision ' +
      '(not --offline; --dataset/--data-revision/--text), or lead with data builtin');
  }
  if (cfg.tokenizer_sha256 !== tokenizerSha256 || cfg.model.vocab_size !== vocabSize) {
    throw new Incompatible('tokenizer',
      `the leader's tokenizer is ${cfg.tokenizer_sha256.slice(0, 12)}... with ` +
      `${cfg.model.vocab_size} tokens; this peer has ${pySlice(tokenizerSha256, 12)}... with ` +
      `${vocabSize}`,
      'every peer of a run needs the same tokenizer: the same DaisyChain version, and the ' +
      'same --tokenizer file where the run names one of its own');
  }
}

/**
 * @param {ModelSpec} spec
 * @returns {ModelConfig}
 */
function buildModel(spec) {
  for (const [name, [lo, hi]] of Object.entries(SIZE_RANGES)) {
    const value = spec[/** @type {keyof ModelSpec} */ (name)];
    if (!(lo <= value && value <= hi)) {
      throw new Incompatible('size-range', `model ${name} ${value} outside [${lo}, ${hi}]`,
        'protocol version 1 sizes: ' +
        Object.entries(SIZE_RANGES).map(([k, [a, b]]) => `${k} ${a}-${b}`).join(', '));
    }
  }
  try {
    return modelConfig({
      vocab_size: spec.vocab_size, width: spec.width, layers: spec.layers, heads: spec.heads,
      seq_len: spec.seq_len, batch: spec.batch, mlp_mult: spec.mlp_mult,
    });
  } catch (exc) {
    if (!(exc instanceof ConfigError)) throw exc;
    throw new Incompatible(exc.rule, `model: ${exc.message}`,
      MODEL_HINTS[exc.rule] ?? 'see docs/MODEL.md, Configuration');
  }
}

// The preset fields that name an architecture, as (Python name, JS model field).
/** @type {readonly (readonly [string, 'width' | 'layers' | 'heads' | 'mlpMult'])[]} */
const PRESET_FIELDS = [['width', 'width'], ['layers', 'layers'], ['heads', 'heads'],
  ['mlp_mult', 'mlpMult']];

/**
 * @param {string | null} name
 * @param {ModelConfig} model
 */
function checkPreset(name, model) {
  if (name === null) return;
  const known = Object.hasOwn(PRESETS, name) ? PRESETS[/** @type {keyof typeof PRESETS} */ (name)] : undefined;
  if (known === undefined) {
    throw new Incompatible('preset', `unknown preset ${strRepr(pySlice(name, 32))}`,
      `presets are ${Object.keys(PRESETS).join(', ')}; a custom model is sent with preset null`);
  }
  for (const [field, js] of PRESET_FIELDS) {
    if (model[js] !== known[js]) {
      throw new Incompatible('preset',
        `preset ${strRepr(name)} has ${field} ${known[js]}, the config says ${model[js]}`,
        "send the preset's architecture, or preset null for a custom model");
    }
  }
}

/** @param {Config} cfg */
function checkRun(cfg) {
  if (!(cfg.steps >= 1 && cfg.steps <= MAX_EXACT_STEPS)) {
    throw new Incompatible('steps-range', `steps ${cfg.steps} outside [1, ${MAX_EXACT_STEPS}]`,
      'step counts must be exact in float32 (below 2^24)');
  }
  if (!(cfg.seed >= 0 && cfg.seed <= U32_MAX)) {
    throw new Incompatible('seed', `seed ${cfg.seed} is not a u32`, 'choose a seed in [0, 2^32)');
  }
  if (cfg.resume_step < 0 || cfg.resume_step >= cfg.steps) {
    throw new Incompatible('resume',
      `resume step ${cfg.resume_step} with ${cfg.steps} steps: nothing left to train`,
      'resume from a checkpoint taken before the last step, or lead with more --steps');
  }
  if ((cfg.resume_step > 0) !== (cfg.resume_hash !== null)) {
    throw new Incompatible('resume', 'resume_hash must be given exactly when resume_step > 0',
      'a resumed run names the hash of its checkpoint');
  }
}

/**
 * `sync` and, for an outer run, `outer`: the same rules, messages and hints as Python's; `batch`
 * the model's sequences per inner step.
 * @param {Config} cfg
 * @param {number} batch
 */
function checkSync(cfg, batch) {
  const sync = cfg.sync ?? SYNC_STEP;
  if (!SYNC_MODES.includes(sync)) {
    throw new Incompatible('sync', `sync mode ${strRepr(pySlice(sync, 16))} is not one this version trains`,
      `lead with sync ${SYNC_MODES.join(' or ')}, or upgrade this peer`);
  }
  const spec = cfg.outer;
  if (sync !== SYNC_OUTER || spec == null) return;
  // A peer's round: at most H * ceil(global batch / batch) inner steps; every inner step
  // counter must stay exact in float32.
  const lanes = Math.ceil(cfg.global_batch / batch);
  const most = Math.floor(MAX_EXACT_STEPS / (Math.max(cfg.steps, 1) * lanes));
  if (!(spec.steps >= 1 && spec.steps <= most)) {
    throw new Incompatible('outer-steps',
      `outer.steps (inner steps per round) ${spec.steps} outside [1, ${most}] for a run of ` +
      `${cfg.steps} rounds of ${cfg.global_batch} sequences at a batch of ${batch}`,
      'lead with --outer-steps of at least 1, and rounds x inner steps x (global batch / ' +
      'batch) below 2^24');
  }
  const lr = spec.lr;
  if (!(Number.isFinite(lr) && lr > 0 && lr <= MAX_OUTER_LR && Math.fround(lr) > 0)) {
    throw new Incompatible('outer-lr',
      `outer learning rate ${floatRepr(lr)} outside (0, 10] (or zero as a float32)`,
      'lead with --outer-lr in (0, 10], for example 0.7 (DiLoCo) or 1 (plain averaging)');
  }
  const mu = spec.momentum;
  if (!(Number.isFinite(mu) && mu >= 0 && mu < 1)) {
    throw new Incompatible('outer-momentum', `outer momentum ${floatRepr(mu)} outside [0, 1)`,
      'lead with --outer-momentum in [0, 1), for example 0.9 (DiLoCo) or 0');
  }
  const overlap = spec.overlap ?? 0;
  if (!(Number.isFinite(overlap) && overlap >= 0 && overlap <= 1)) {
    throw new Incompatible('outer-overlap',
      `outer overlap ${floatRepr(overlap)} outside [0, 1] (the fraction of a round's inner ` +
      'steps that run beside its exchange)',
      'lead with --outer-overlap in [0, 1], for example 0.5, or 0 for none');
  }
  const cut = spec.cut ?? CUT_SHARE;
  if (!CUTS.includes(cut)) {
    throw new Incompatible('outer-cut', `outer cut ${strRepr(pySlice(cut, 16))} is not one this version takes`,
      `lead with --outer-cut ${CUTS.join(' or ')}`);
  }
}

/**
 * `audit` (docs/TRUST.md, "Config and versions"): its shape, what it cannot audit, and what
 * this peer needs of it; the same rules, messages and hints as Python's.
 * @param {Config} cfg
 * @param {boolean} privateData
 * @param {number} minAudit
 */
function checkAudit(cfg, privateData, minAudit) {
  const spec = cfg.audit ?? null;
  if (spec !== null) {
    if (!(spec.one_in >= 1 && spec.one_in <= MAX_AUDIT_ONE_IN)) {
      throw new Incompatible('audit-rate', `audit.one_in ${spec.one_in} outside [1, ${MAX_AUDIT_ONE_IN}]`,
        `the leader audits one attempt in n, n from 1 (every attempt) to ${MAX_AUDIT_ONE_IN}; 16 ` +
        'is the default, and a run without audits has no audit');
    }
    const priv = spec.private ?? AUDIT_PRIVATE_DEFAULT;
    if (!AUDIT_PRIVATE.includes(priv)) {
      throw new Incompatible('audit-private',
        `audit.private ${strRepr(pySlice(priv, 16))} is not one of ${AUDIT_PRIVATE.join(', ')}`,
        'the leader either refuses peers with private text ("refuse", the default) or takes ' +
        'their contributions unaudited ("unaudited")');
    }
    if ((cfg.sync ?? SYNC_STEP) === SYNC_OUTER) {
      // An outer round depends on the contributor's own inner optimizer state, which no other
      // peer holds: nobody could recompute it.
      throw new Incompatible('audit-outer',
        'this run audits outer rounds, which no other peer can recompute (a round depends on ' +
        'its contributor\'s own inner optimizer state)',
        'the leader can lead an outer run without audits, or a per-step run with them');
    }
    if (privateData && priv === 'refuse') {
      throw new Incompatible('private-data',
        'this peer trains on private text and the run refuses private data (its contributions ' +
        'could not be audited)',
        'turn Private text off, or ask the leader to accept private data unaudited');
    }
  }
  if (minAudit > 0 && (spec === null || spec.one_in > minAudit)) {
    const audits = spec === null ? 'no attempt' : `one attempt in ${spec.one_in}`;
    throw new Incompatible('min-audit',
      `the run audits ${audits}; this peer needs at least one in ${minAudit}`,
      `the leader can audit one attempt in ${minAudit} or more often; this peer's user can ` +
      'accept rarer audits');
  }
}

/**
 * An outer run holds the momentum and a round's working copies beside the state (Python's
 * runconfig.parse adds the same bytes to its estimate's state term).
 * @param {Footprint} footprint
 * @param {Config} cfg
 * @returns {Footprint}
 */
function withOuterState(footprint, cfg) {
  if ((cfg.sync ?? SYNC_STEP) !== SYNC_OUTER) return footprint;
  const perParam = OUTER_STATE_BYTES_PER_PARAM + (cfg.outer?.overlap ? OVERLAP_STATE_BYTES_PER_PARAM : 0n);
  const extra = perParam * footprint.params;
  const total = footprint.total + extra;
  return Object.freeze({
    ...footprint, state: footprint.state + extra, total, totalMb: Number(total) / MIB,
  });
}

// What a page whose replica has no setOuter cannot do (the rules above are the protocol's,
// shared with Python): it computes one gradient per step, not H inner steps, so it stays out of
// an outer run rather than fork it. The page's WorkerReplica has setOuter (its machine passes
// outerRuns); the rule stays for any replica without it.
export const PAGE_OUTER_HINT = 'this page cannot train outer runs yet; join with the headless ' +
  'peer (python -m daisychain.peer --server URL), or lead a per-step run';

/** @param {Config} cfg */
function checkPageSync(cfg) {
  if ((cfg.sync ?? SYNC_STEP) === SYNC_OUTER) {
    // (messages.parse gives a sync "outer" config its outer)
    throw new Incompatible('page-outer',
      `this run trains outer rounds of ${cfg.outer?.steps} inner steps (sync outer)`,
      PAGE_OUTER_HINT);
  }
}

/**
 * @param {OptimSpec} spec
 * @param {number} steps
 */
function buildOptim(spec, steps) {
  const lr = spec.lr;
  // A learning rate is one float32 constant (docs/MODEL.md): it must stay positive there.
  if (!(Number.isFinite(lr) && lr > 0 && lr <= 1 && Math.fround(lr) > 0)) {
    throw new Incompatible('lr',
      `learning rate ${floatRepr(lr)} outside (0, 1] (or zero as a float32)`,
      'lead with --lr in (0, 1], for example 3e-3');
  }
  if (!(spec.warmup_steps >= 0 && spec.warmup_steps <= steps)) {
    throw new Incompatible('warmup', `warm-up of ${spec.warmup_steps} steps in a run of ${steps}`,
      "warm-up must be between 0 and the run's steps");
  }
  const wd = spec.weight_decay;
  if (!(Number.isFinite(wd) && wd >= 0 && wd <= MAX_WEIGHT_DECAY)) {
    throw new Incompatible('weight-decay',
      `weight decay ${floatRepr(wd)} outside [0, ${floatRepr(MAX_WEIGHT_DECAY)}]`,
      'lead with a weight decay in [0, 1] (0.1 is the default)');
  }
  if (!(Number.isFinite(spec.clip) && spec.clip >= 0 && spec.clip <= MAX_CLIP)) {
    throw new Incompatible('clip', `gradient clip ${floatRepr(spec.clip)} outside [0, 1e+06]`,
      'lead with a clip threshold in [0, 1e6] (0 disables clipping)');
  }
  try {
    return adamwConfig({
      lr, warmup_steps: spec.warmup_steps, weight_decay: wd, clip: spec.clip,
    });
  } catch (exc) { // every rule above should have caught it first
    if (!(exc instanceof OptimizerError)) throw exc;
    throw new Incompatible('optimizer', `optimizer: ${exc.message}`, 'see docs/MODEL.md');
  }
}

/** @param {Footprint} footprint */
function checkTransfer(footprint) {
  const need = 12n * footprint.params + BigInt(MIB);
  if (need > BigInt(MAX_TRANSFER_BYTES)) {
    throw new Incompatible('checkpoint-size',
      `${grouped(footprint.params)} parameters: a checkpoint of ${grouped(need)} bytes does not ` +
      'fit one frame transfer (u32 total)',
      'the leader must choose a smaller model (below about 357 million parameters)');
  }
}

/**
 * @param {ModelConfig} model
 * @param {number} steps
 * @param {Footprint} footprint
 * @param {Limits} caps
 */
function checkLimits(model, steps, footprint, caps) {
  if (model.seqLen > caps.max_seq_len) {
    throw new Incompatible('max-seq-len',
      `seq_len ${model.seqLen} above this peer's cap of ${caps.max_seq_len}`,
      'the leader can lower --seq-len; this peer\'s user can raise --max-seq-len');
  }
  if (model.batch > caps.max_batch) {
    throw new Incompatible('max-batch',
      `batch ${model.batch} above this peer's cap of ${caps.max_batch}`,
      'the leader can lower --batch; this peer\'s user can raise --max-batch');
  }
  if (steps > caps.max_steps) {
    throw new Incompatible('max-steps', `${steps} steps above this peer's cap of ${caps.max_steps}`,
      'the leader can lower --steps; this peer\'s user can raise --max-steps');
  }
  if (footprint.total > BigInt(caps.max_memory_mb) * BigInt(MIB)) {
    throw new Incompatible('max-memory',
      `this run would take about ${groupedFixed0(footprint.totalMb)} MiB on this peer ` +
      `(${grouped(footprint.params)} parameters), above its cap of ${caps.max_memory_mb} MiB`,
      'the leader can choose a smaller model, batch or seq_len; this peer\'s user can ' +
      'raise --max-memory-mb');
  }
}
