// Training checkpoints as bytes: the browser's twin of daisychain/checkpoint.py (format) and
// daisychain/safetensors_io.py (container). A leader in a tab serves these bytes to a joiner; a
// tab joining a run restores the bytes a Python or browser leader sent. Normative: the Python
// modules (docs/PROTOCOL.md, "Checkpoints"): a safetensors file whose tensors are every parameter,
// then `m.<name>` and `v.<name>` (float32, parameter order), and whose string metadata carries
// the format and contract versions, the model and optimizer configs (JSON, sorted keys), step,
// seed, the bias-correction products p1/p2 as float32 bit patterns, the tokenizer and the weight
// hash. `encodeCheckpoint` writes exactly the bytes Python's `checkpoint.encode` writes for the
// same state; `decodeCheckpoint` checks everything `checkpoint.from_parts` checks, in the same
// order, and refuses with ReplicaRefused (the machine turns it into a stopped run with the text).
//
// A state here is the training worker's export: {step, p1, p2, params, m, v} with tensor lists
// {names, arrays} (static/js/train/messages.js), plus the model config (camelCase,
// model/config.js), the AdamW config (model/optim.js) and the seed.
//
// An outer run's checkpoint (Python's `checkpoint.encode_outer`, docs/PROTOCOL.md "Outer runs"):
// the outer weights, then `outer_m.<name>` (the outer momentum), no AdamW moments; metadata adds
// `sync` "outer" and the outer loop (JSON), `step` counts outer steps, p1/p2 are a fresh inner
// optimizer's and `weight_hash` is the outer hash. `encodeOuterCheckpoint` writes those bytes;
// `decodeCheckpoint` reads both kinds (`outer` in its result: null for a per-step checkpoint).

import { CONTRACT_VERSION } from '../numerics/index.js';
import { sha256Arrays } from '../numerics/hash.js';
import { modelConfig, ConfigError } from '../model/config.js';
import { adamwConfig, OptimizerError } from '../model/optim.js';
import { paramShapes, numel } from '../model/params.js';
import { floatRepr } from './pyrepr.js';
import { ReplicaRefused } from './machine/replica.js';
import { OuterError, outerConfig } from '../outer/nesterov.js';

export const OUTER_PREFIX = 'outer_m.';

export const FORMAT = 'daisychain-checkpoint';
export const FORMAT_VERSION = 1;
export const MAX_HEADER_BYTES = 16 * 1024 * 1024;
const HINT = 'the file is damaged or not a safetensors checkpoint; download or save it again';

// safetensors dtypes Python's reader knows (safetensors_io._DTYPES): name -> [bytes, numpy name]
const DTYPES = {
  F32: [4, 'float32'], F64: [8, 'float64'], I8: [1, 'int8'], U8: [1, 'uint8'], I16: [2, 'int16'],
  U16: [2, 'uint16'], I32: [4, 'int32'], U32: [4, 'uint32'], I64: [8, 'int64'],
};
const pyTuple = (dims) => (dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`);

const f32Bits = (x) => new Uint32Array(Float32Array.of(x).buffer)[0].toString(16).padStart(8, '0');

function fromBits(text) {
  if (!/^[0-9a-fA-F]{1,8}$/.test(text)) throw new TypeError(`not a float32 bit pattern: ${text}`);
  return new Float32Array(Uint32Array.of(parseInt(text, 16)).buffer)[0];
}

// json.dumps(obj, sort_keys=True) with Python's default separators; `floats` names the fields
// that are Python floats (written with repr), everything else is an int or a string.
function pyJsonSorted(obj, floats) {
  const keys = Object.keys(obj).sort();
  const parts = keys.map((k) => {
    const v = obj[k];
    const text = typeof v === 'string' ? JSON.stringify(v) : floats.has(k) ? floatRepr(v) : String(v);
    return `${JSON.stringify(k)}: ${text}`;
  });
  return `{${parts.join(', ')}}`;
}

function modelJson(cfg) {
  return pyJsonSorted({
    vocab_size: cfg.vocabSize, width: cfg.width, layers: cfg.layers, heads: cfg.heads,
    seq_len: cfg.seqLen, batch: cfg.batch, mlp_mult: cfg.mlpMult, norm_eps: f32Bits(cfg.normEps),
  }, new Set());
}

function optimJson(o) {
  return pyJsonSorted({
    lr: o.lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weightDecay,
    clip: o.clip, warmup_steps: o.warmupSteps, schedule: o.schedule, total_steps: o.totalSteps,
    final_lr: o.finalLr,
  }, new Set(['lr', 'beta1', 'beta2', 'eps', 'weight_decay', 'clip', 'final_lr']));
}

/**
 * The checkpoint bytes of `state` (a worker export) for `model`, `optim`, `seed`: Python's
 * `checkpoint.encode`. Resolves to a Uint8Array (the weight hash is hash.js's, asynchronous).
 */
export async function encodeCheckpoint(state, run) {
  const tensors = prefixed([['', state.params], ['m.', state.m], ['v.', state.v]]);
  const shapes = paramShapes(run.model);
  const meta = {
    ...commonMeta(run, state.step, state.p1, state.p2),
    weight_hash: await sha256Arrays(tensors.map(([, a]) => a)),
  };
  return container(tensors, meta, (name) => shapes.get(name.startsWith('m.') ||
    name.startsWith('v.') ? name.slice(2) : name));
}

/**
 * An outer run's checkpoint bytes (Python's `checkpoint.encode_outer`): `shared` {step, params,
 * momentum} (tensor lists: the outer weights and momentum), the run's `outer` loop
 * {innerSteps, lr, momentum}.
 */
export async function encodeOuterCheckpoint(shared, run) {
  const { model, outer } = run;
  const tensors = prefixed([['', shared.params], [OUTER_PREFIX, shared.momentum]]);
  const shapes = paramShapes(model);
  const outerJson = pyJsonSorted({ inner_steps: outer.innerSteps, lr: outer.lr,
    momentum: outer.momentum }, new Set(['lr', 'momentum']));
  const meta = {
    // p1 = p2 = 1: a fresh inner optimizer's bias products (each peer's own is never shared).
    ...commonMeta(run, shared.step, 1, 1),
    sync: 'outer',
    outer: outerJson,
    weight_hash: await sha256Arrays(tensors.map(([, a]) => a)),
  };
  return container(tensors, meta, (name) => shapes.get(name.startsWith(OUTER_PREFIX)
    ? name.slice(OUTER_PREFIX.length) : name));
}

/** [prefix + name, array] of every tensor of each [prefix, {names, arrays}], in order. */
function prefixed(lists) {
  const tensors = [];
  for (const [prefix, list] of lists) {
    list.names.forEach((name, i) => tensors.push([prefix + name, list.arrays[i]]));
  }
  return tensors;
}

/** The metadata every checkpoint begins with, in Python's key order (up to `vocab_size`). */
function commonMeta({ model, optim, seed, tokenizerSha256 }, step, p1, p2) {
  return {
    format: FORMAT,
    format_version: String(FORMAT_VERSION),
    contract_version: String(CONTRACT_VERSION),
    model: modelJson(model),
    optim: optimJson(optim),
    step: String(step),
    seed: String(seed),
    p1: f32Bits(p1),
    p2: f32Bits(p2),
    tokenizer_sha256: tokenizerSha256,
    vocab_size: String(model.vocabSize),
  };
}

/** safetensors_io.encode: [name, Float32Array] in order, string metadata, each tensor's shape. */
function container(tensors, meta, shapeOf) {
  let header = `{"__metadata__":${JSON.stringify(meta)}`;
  let offset = 0;
  for (const [name, array] of tensors) {
    const shape = shapeOf(name);
    if (shape === undefined || numel(shape) !== array.length) {
      throw new TypeError(`tensor ${name} does not fit the model config`);
    }
    const bytes = array.length * 4;
    header += `,${JSON.stringify(name)}:{"dtype":"F32","shape":[${shape.join(',')}],` +
      `"data_offsets":[${offset},${offset + bytes}]}`;
    offset += bytes;
  }
  header += '}';
  header += ' '.repeat((8 - (header.length % 8)) % 8); // ASCII only: chars are bytes
  const headBytes = new TextEncoder().encode(header);
  const out = new Uint8Array(8 + headBytes.length + offset);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(headBytes.length), true);
  out.set(headBytes, 8);
  let pos = 8 + headBytes.length;
  for (const [, array] of tensors) {
    // little-endian float32: every platform that runs this page stores Float32Array that way
    out.set(new Uint8Array(array.buffer, array.byteOffset, array.length * 4), pos);
    pos += array.length * 4;
  }
  return out;
}

// A step or seed as the writer spells it (checkpoint.py _count): decimal, no sign, space or
// leading zero, and a safe integer.
const COUNT = /^(0|[1-9][0-9]{0,15})$/;

function count(text) {
  const n = Number(text);
  if (!COUNT.test(text) || !Number.isSafeInteger(n)) {
    throw new TypeError(`step and seed must be non-negative integers in decimal, not '${text}'`);
  }
  return n;
}

function refuse(message) {
  throw new ReplicaRefused(message);
}

/**
 * safetensors_io.decode: {tensors: Map name -> {dtype, shape, data}, meta}; `data` is a
 * Float32Array for F32 tensors, the raw bytes otherwise (refused later, as Python does).
 */
/** The JSON header of safetensors bytes and its length; refuses a short, truncated or unreadable one. */
function readHeader(blob, source) {
  if (blob.length < 8) refuse(`${source}: file is ${blob.length} bytes, too short; ${HINT}`);
  const view = new DataView(blob.buffer, blob.byteOffset, blob.length);
  const n = view.getBigUint64(0, true);
  if (n > BigInt(MAX_HEADER_BYTES) || 8n + n > BigInt(blob.length)) {
    refuse(`${source}: header length ${n} exceeds the file (${blob.length} bytes); ` +
      `the file is truncated; ${HINT}`);
  }
  const headerLength = Number(n);
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(blob.subarray(8, 8 + headerLength));
    return { header: JSON.parse(text), headerLength };
  } catch (exc) {
    return refuse(`${source}: header is not valid JSON (${exc.message}); ${HINT}`);
  }
}

function decodeContainer(blob, source) {
  const { header, headerLength } = readHeader(blob, source);
  if (header === null || typeof header !== 'object' || Array.isArray(header)) {
    refuse(`${source}: header is not a JSON object; ${HINT}`);
  }
  const meta = header.__metadata__ ?? {};
  delete header.__metadata__;
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta) ||
      !Object.values(meta).every((v) => typeof v === 'string')) {
    refuse(`${source}: __metadata__ must map strings to strings`);
  }
  const data = blob.subarray(8 + headerLength);
  const spans = [];
  const tensors = new Map();
  for (const [name, info] of Object.entries(header)) {
    if (info === null || typeof info !== 'object' ||
        Object.keys(info).sort().join() !== 'data_offsets,dtype,shape') {
      refuse(`${source}: tensor '${name}': malformed entry`);
    }
    const { dtype, shape, data_offsets: offs } = info;
    if (typeof dtype !== 'string' || !Object.hasOwn(DTYPES, dtype)) {
      refuse(`${source}: tensor '${name}': unsupported dtype '${dtype}'`);
    }
    const itemSize = DTYPES[dtype][0];
    if (!(Array.isArray(shape) && shape.every((d) => Number.isSafeInteger(d) && d >= 0) &&
          Array.isArray(offs) && offs.length === 2 && offs.every(Number.isSafeInteger))) {
      refuse(`${source}: tensor '${name}': malformed shape or offsets`);
    }
    const [begin, end] = offs;
    if (!(begin >= 0 && begin <= end && end <= data.length)) {
      refuse(`${source}: tensor '${name}': data [${begin}, ${end}) lies outside the ` +
        `${data.length}-byte data section; the file is truncated; ${HINT}`);
    }
    if (end - begin !== numel(shape) * itemSize) {
      refuse(`${source}: tensor '${name}': ${end - begin} bytes for shape [${shape.join(', ')}] ` +
        `${dtype} (needs ${numel(shape) * itemSize})`);
    }
    spans.push([begin, end, name]);
    let values = data.slice(begin, end);
    if (dtype === 'F32') {
      values = new Float32Array(numel(shape));
      new Uint8Array(values.buffer).set(data.subarray(begin, end));
    }
    tensors.set(name, { dtype, shape, data: values });
  }
  spans.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let cursor = 0;
  for (const [begin, end, name] of spans) {
    if (begin !== cursor) refuse(`${source}: tensor '${name}' overlaps or leaves a gap in the data section`);
    cursor = end;
  }
  if (cursor !== data.length) {
    refuse(`${source}: ${data.length - cursor} trailing bytes after the last tensor; ${HINT}`);
  }
  return { tensors, meta };
}

/**
 * The step recorded in the header of checkpoint bytes (the `step` metadata), read without
 * decoding the tensors: a page names an export by the step its bytes hold, which can be later
 * than the step it last saw (the worker answers an export only after every step sent before
 * it). Throws ReplicaRefused for bytes with no readable step.
 */
export function stepOf(blob, source = 'checkpoint') {
  const bytes = blob instanceof Uint8Array ? blob : new Uint8Array(blob);
  const step = readHeader(bytes, source).header?.__metadata__?.step;
  if (typeof step !== 'string' || !COUNT.test(step)) {
    refuse(`${source}: metadata field 'step' is missing or not a count of steps; ${HINT}`);
  }
  return Number(step);
}

/**
 * What decodeCheckpoint resolves to: `model` is model/config.js's record, `optim` optim.js's,
 * `state` the worker's export form (train/messages.js TrainState); `outer` an outer run's loop,
 * rounds and momentum (null: a per-step run).
 * @typedef {{state: import('../train/messages.js').TrainState,
 *   model: ReturnType<typeof modelConfig>, optim: ReturnType<typeof adamwConfig>, seed: number,
 *   weightHash: string, outer: {config: ReturnType<typeof outerConfig>, step: number,
 *   momentum: import('../train/messages.js').Tensors} | null}} DecodedCheckpoint
 */

/**
 * Validate checkpoint bytes as `checkpoint.from_parts` does; resolves to {state, model, optim,
 * seed, weightHash} (state in the worker's export form). Throws ReplicaRefused saying why.
 * @param {Uint8Array | ArrayBuffer} blob
 * @param {string} source  names the bytes in errors
 * @param {{tokenizerSha256?: string, vocabSize?: number}} expected
 * @returns {Promise<DecodedCheckpoint>}
 */
export async function decodeCheckpoint(blob, source, { tokenizerSha256, vocabSize }) {
  const bytes = blob instanceof Uint8Array ? blob : new Uint8Array(blob);
  const { tensors, meta } = decodeContainer(bytes, source);
  const need = (key) => {
    if (!(key in meta)) {
      refuse(`${source}: metadata field '${key}' is missing; this is not a DaisyChain ` +
        'checkpoint (or it was written by an incompatible version)');
    }
    return meta[key];
  };
  if (need('format') !== FORMAT) refuse(`${source}: format is '${meta.format}', expected '${FORMAT}'`);
  if (need('format_version') !== String(FORMAT_VERSION)) {
    refuse(`${source}: checkpoint format version ${meta.format_version}, this DaisyChain reads ` +
      `version ${FORMAT_VERSION}; use the DaisyChain version that wrote it`);
  }
  if (need('contract_version') !== String(CONTRACT_VERSION)) {
    refuse(`${source}: numerical contract version ${meta.contract_version}, this DaisyChain ` +
      `implements version ${CONTRACT_VERSION}; its weights would not stay bit-identical here. ` +
      'Use the DaisyChain version that wrote it');
  }
  let model;
  let optim;
  let step;
  let seed;
  let p1;
  let p2;
  try {
    const m = JSON.parse(need('model'));
    model = modelConfig({ ...m, norm_eps: undefined, norm_eps_bits: parseInt(m.norm_eps, 16) });
    if (f32Bits(model.normEps) !== m.norm_eps.toLowerCase().padStart(8, '0')) throw new TypeError('norm_eps');
    optim = adamwConfig(JSON.parse(need('optim')));
    step = count(need('step'));
    seed = count(need('seed'));
    p1 = fromBits(need('p1'));
    p2 = fromBits(need('p2'));
  } catch (exc) {
    if (exc instanceof ReplicaRefused) throw exc;
    if (!(exc instanceof ConfigError || exc instanceof OptimizerError || exc instanceof TypeError ||
          exc instanceof SyntaxError)) throw exc;
    refuse(`${source}: invalid configuration in metadata: ${exc.message}`);
  }
  if (vocabSize !== undefined && model.vocabSize !== vocabSize) {
    refuse(`${source}: the checkpoint's vocabulary has ${model.vocabSize} tokens but this run's ` +
      `tokenizer has ${vocabSize}; load it with the tokenizer it was trained with`);
  }
  const tok = need('tokenizer_sha256');
  if (tokenizerSha256 !== undefined && tok !== tokenizerSha256) {
    refuse(`${source}: trained with tokenizer ${tok.slice(0, 12)}..., this run uses ` +
      `${tokenizerSha256.slice(0, 12)}... (a different vocabulary); load it with the tokenizer ` +
      'it was trained with');
  }
  const shapes = paramShapes(model);
  const names = [...shapes.keys()];
  const sync = meta.sync ?? 'step';
  if (sync !== 'step' && sync !== 'outer') {
    refuse(`${source}: sync mode '${sync.slice(0, 16)}' is not one this version reads; use the ` +
      'DaisyChain version that wrote it');
  }
  let outer = null;
  if (sync === 'outer') {
    try {
      const spec = JSON.parse(meta.outer ?? '');
      outer = outerConfig({ innerSteps: spec.inner_steps, lr: spec.lr, momentum: spec.momentum });
    } catch (exc) {
      if (!(exc instanceof SyntaxError || exc instanceof OuterError || exc instanceof TypeError)) throw exc;
      refuse(`${source}: invalid outer configuration in metadata: ${exc.message}`);
    }
  }
  const prefixes = outer === null ? ['m.', 'v.'] : [OUTER_PREFIX];
  const expected = [...names, ...prefixes.flatMap((pre) => names.map((k) => pre + k))];
  const missing = expected.filter((k) => !tensors.has(k));
  const extra = [...tensors.keys()].filter((k) => !expected.includes(k));
  if (missing.length > 0 || extra.length > 0) {
    refuse(`${source}: tensors do not match the model configuration (missing: ` +
      `[${missing.slice(0, 4)}], unexpected: [${extra.slice(0, 4)}])`);
  }
  for (const name of expected) {
    const pre = prefixes.find((x) => name.startsWith(x));
    const base = pre === undefined ? name : name.slice(pre.length);
    const want = shapes.get(base);
    const { dtype, shape: got } = tensors.get(name);
    if (dtype !== 'F32' || got.length !== want.length || got.some((d, i) => d !== want[i])) {
      refuse(`${source}: tensor '${name}' is ${DTYPES[dtype][1]} ${pyTuple(got)}, the ` +
        `configuration (width ${model.width}, layers ${model.layers}, vocab ${model.vocabSize}) ` +
        `needs float32 ${pyTuple(want)}; the dims are wrong for this model`);
    }
  }
  const list = (prefix) => ({ names: [...names], arrays: names.map((k) => tensors.get(prefix + k).data) });
  const digest = await sha256Arrays(expected.map((k) => tensors.get(k).data));
  if (digest !== need('weight_hash')) {
    refuse(`${source}: ${outer === null ? 'weight' : 'outer'} hash ${digest.slice(0, 12)}... ` +
      `does not match the recorded ${meta.weight_hash.slice(0, 12)}...; the file is corrupted`);
  }
  if (outer !== null) {
    // The inner optimizer starts fresh on the outer weights (each peer's own; never shared).
    const zeros = () => ({ names: [...names],
      arrays: names.map((k) => new Float32Array(numel(shapes.get(k)))) });
    const state = { step: 0, p1, p2, params: list(''), m: zeros(), v: zeros() };
    return { state, model, optim, seed, weightHash: digest,
      outer: { config: outer, step, momentum: list(OUTER_PREFIX) } };
  }
  const state = { step, p1, p2, params: list(''), m: list('m.'), v: list('v.') };
  return { state, model, optim, seed, weightHash: digest, outer: null };
}
