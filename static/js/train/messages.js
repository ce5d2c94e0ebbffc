// @ts-check
// The messages between a page and its training worker (docs/JS_MIRROR.md, "The training
// worker"), declared and validated in this one module: the worker parses every request with
// parseRequest() and the page every reply and event with parseReply(); anything malformed is
// refused with a MessageError naming the field and saying what to send instead.
//
// Page -> worker: {id, type, ...fields}; `id` is the page's request number, echoed in the reply.
//   init          {model, optim?, seed, backend?, measure?, audit?, state?, sources?, kernelBase?,
//                  lutBase?, chains?}               -> {backend, adapter, onGpu, choice, rows,
//                                                       demotions, chain, step, hash}
//                 (chains: 'auto' (default: on a real GPU a GPU tier records a whole step in
//                 one submit where a measured step is faster so; not on an emulated one),
//                 'measure' (that measurement on any adapter), 'on', 'off'; gpu/step_chain.js)
//   grads         {x, y, batch?, early?}            -> {loss, grads, backend, products, ms}
//                 (early: each parameter's gradient also comes alone as soon as it is final,
//                 {type: 'grad', id, name, values}, before the result; p2p/early.js)
//   apply         {grads}                           -> {step, lr, gradNorm, clipped, hash}
//   step          {x, y, batch?, hash?}             -> {step, loss, gradNorm, lr, clipped, hash,
//                                                       probe, backend, products, ms}
//   probe         {}                                -> {probe, backend}
//   hash          {}                                -> {step, hash}
//   eval          {batches: [{x, y}], batch?}       -> {step, hash, losses, loss, backend, ms}
//                 (forward only, no state change: the validation loss, validation.js)
//   export        {}                                -> {state}
//   load          {state}                           -> {step, hash}
//   outer         {outer: {innerSteps, lr, momentum, overlap?, cut?}, shared?: {step, momentum}}
//                                                   -> {step, hash}  (an outer run from now on,
//                 docs/PROTOCOL.md "Outer runs"; `shared`: a checkpoint's rounds and momentum)
//   round         {steps: [[{x, y, rows}]], count, token, early?}  (early: the measured delta
//                 also goes out as {type: 'grad', id, name: 'delta', values} at the sync step)
//                                                   -> {loss, delta, backend, products, ms}
//                 (the inner steps on a copy of the outer weights, `count` sequences in all;
//                 delta: the flat W - w)
//   outer-apply   {mean, token}                     -> {step, hash}  (the outer step; the inner
//                 state of round `token` (null: none) becomes this peer's)
//   export        in an outer run also `outer` {step, momentum} beside `state`
// Worker -> page: {type: 'result', id, result} | {type: 'error', id, error: {name, message,
// hint}} | {type: 'event', event: {kind, ...}} with kind one of EVENT_KINDS | {type: 'grad',
// id, name, values: Float32Array} (an early gradient of a `grads` request).
//
// Tensors travel as {names: [string], arrays: [Float32Array]} in parameter order (a Map does not
// survive structured cloning in every browser, and the order is the hash's order); tokens as
// Int32Array. A state is {step, p1, p2, params, m, v} with three such tensor lists.

export const REQUEST_TYPES = Object.freeze([
  'init', 'grads', 'apply', 'step', 'probe', 'hash', 'export', 'load', 'eval', 'outer', 'round',
  'outer-apply',
]);
// A round's H: runconfig's rule `outer-steps` bounds rounds x H below 2^24; one request carries
// every inner step's tokens, so a page refuses more than this many.
export const MAX_INNER_STEPS = 4096;
// A round's sequences (H times a share of at most 4096), and so its inner steps.
const MAX_ROUND_SEQUENCES = MAX_INNER_STEPS * 4096;
export const BACKEND_CHOICES = Object.freeze(['auto', 'webgpu-dp4a', 'webgpu-lut', 'js-cpu']);
export const EVENT_KINDS = Object.freeze([
  'state', 'progress', 'selection', 'device-lost', 'device-rebuilt', 'fallback',
]);
export const MAX_AUDIT_SAMPLES = 4096;
export const MAX_EVAL_BATCHES = 16;
const U32 = 2 ** 32;

// What parseRequest answers, one record per request type (the table above), and what
// parseReply passes.
/**
 * @typedef {{names: string[], arrays: Float32Array[]}} Tensors  in parameter order
 * @typedef {{step: number, p1: number, p2: number, params: Tensors, m: Tensors,
 *   v: Tensors}} TrainState
 * @typedef {{x: Int32Array, y: Int32Array}} Batch
 * @typedef {{innerSteps: number, lr: number, momentum: number, overlap?: number,
 *   cut?: 'share' | 'batch'}} OuterLoop
 * @typedef {{id: number, type: 'init', model: Record<string, unknown>,
 *   optim: Record<string, unknown>, seed: number, backend: string, measure: boolean,
 *   audit: number, state?: TrainState, sources: Record<string, string>, kernelBase?: string,
 *   lutBase?: string, chains: string}} InitRequest
 * @typedef {{id: number, type: 'grads', x: Int32Array, y: Int32Array, batch?: number,
 *   early: boolean}} GradsRequest
 * @typedef {{id: number, type: 'apply', grads: Tensors}} ApplyRequest
 * @typedef {{id: number, type: 'step', x: Int32Array, y: Int32Array, batch?: number,
 *   hash: boolean}} StepRequest
 * @typedef {{id: number, type: 'probe' | 'hash' | 'export'}} PlainRequest
 * @typedef {{id: number, type: 'load', state: TrainState}} LoadRequest
 * @typedef {{id: number, type: 'eval', batches: Batch[], batch?: number}} EvalRequest
 * @typedef {{id: number, type: 'outer', outer: OuterLoop,
 *   shared?: {step: number, momentum: Tensors}}} OuterRequest
 * @typedef {{id: number, type: 'round', steps: (Batch & {rows: number})[][], count: number,
 *   token: number, early?: boolean}} RoundRequest
 * @typedef {{id: number, type: 'outer-apply', mean: Float32Array,
 *   token: number | null}} OuterApplyRequest
 * @typedef {InitRequest | GradsRequest | ApplyRequest | StepRequest | PlainRequest |
 *   LoadRequest | EvalRequest | OuterRequest | RoundRequest |
 *   OuterApplyRequest} Request
 * @typedef {{type: 'result', id: number, result: Record<string, any>}} ResultReply
 * @typedef {{type: 'error', id: number | null, error: {name: string, message: string,
 *   hint: string}}} ErrorReply
 * @typedef {{type: 'grad', id: number, name: string, values: Float32Array}} GradReply
 * @typedef {{type: 'event', event: {kind: string} & Record<string, unknown>}} EventReply
 * @typedef {ResultReply | ErrorReply | GradReply | EventReply} Reply
 */

/** A malformed message: `field` names what is wrong, `hint` what to send instead. */
export class MessageError extends Error {
  /**
   * @param {string} message
   * @param {string} hint
   */
  constructor(message, hint) {
    super(message);
    this.name = 'MessageError';
    this.hint = hint;
  }
}

/**
 * A plain object (not an array, not a typed array); its fields are checked where they are read.
 * @param {unknown} v
 * @returns {v is Record<string, any>}
 */
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) &&
  !ArrayBuffer.isView(v);

/**
 * @param {string} what
 * @param {string} hint
 * @returns {never}
 */
function refuse(what, hint) {
  throw new MessageError(what, hint);
}

/**
 * @param {object} msg
 * @param {readonly string[]} allowed
 * @param {string} what
 */
function onlyFields(msg, allowed, what) {
  for (const k of Object.keys(msg)) {
    if (!allowed.includes(k)) {
      refuse(`${what}: unknown field '${k}'`, `a ${what} message has only ${allowed.join(', ')}`);
    }
  }
}

/**
 * @param {any} v  anything: it is checked here
 * @param {string} name
 * @param {number} min
 * @param {number} max
 * @returns {number}
 */
function integer(v, name, min, max) {
  if (!Number.isSafeInteger(v) || v < min || v > max) {
    refuse(`${name} must be an integer in [${min}, ${max}], got ${String(v).slice(0, 40)}`,
      `send ${name} as a whole number`);
  }
  return v;
}

/**
 * @param {unknown} v
 * @param {string} name
 * @returns {Int32Array}
 */
function tokens(v, name) {
  if (!(v instanceof Int32Array) || v.length === 0) {
    refuse(`${name} must be a non-empty Int32Array of token ids`,
      'send x and y as Int32Arrays of B * T token ids in (b, t) order');
  }
  return v;
}

/**
 * @param {unknown} v
 * @param {string} name
 * @returns {Record<string, string>}
 */
function sources(v, name) {
  if (v === undefined) return {};
  if (!isObject(v)) refuse(`${name} must be an object {dp4a?, lut?} of WGSL text`, 'omit it');
  for (const [k, text] of Object.entries(v)) {
    if (!['dp4a', 'lut'].includes(k) || typeof text !== 'string') {
      refuse(`${name}.${k} is not replacement WGSL for dp4a or lut`, 'omit it');
    }
  }
  return v;
}

/**
 * {names, arrays} of Float32Arrays, names unique, as many arrays as names.
 * @param {unknown} v
 * @param {string} name
 * @returns {Tensors}
 */
export function parseTensors(v, name) {
  if (!isObject(v) || !Array.isArray(v.names) || !Array.isArray(v.arrays)) {
    refuse(`${name} must be {names: [string], arrays: [Float32Array]}`,
      'send tensors in parameter order as two parallel lists');
  }
  if (v.names.length !== v.arrays.length) {
    refuse(`${name}: ${v.names.length} names but ${v.arrays.length} arrays`,
      'send one Float32Array per name');
  }
  if (new Set(v.names).size !== v.names.length || v.names.some((n) => typeof n !== 'string')) {
    refuse(`${name}: names must be distinct strings`, 'send each parameter once');
  }
  v.arrays.forEach((/** @type {unknown} */ a, /** @type {number} */ i) => {
    if (!(a instanceof Float32Array)) {
      refuse(`${name}: ${v.names[i]} is not a Float32Array`, 'send float32 tensors');
    }
  });
  return /** @type {Tensors} */ (v); // checked above
}

/**
 * An exported training state (shapes are checked against the model by the trainer).
 * @param {unknown} v
 * @param {string} [name]
 * @returns {TrainState}
 */
export function parseState(v, name = 'state') {
  if (!isObject(v)) refuse(`${name} must be an object {step, p1, p2, params, m, v}`, 'send the ' +
    'result of an export request unchanged');
  onlyFields(v, ['step', 'p1', 'p2', 'params', 'm', 'v'], name);
  integer(v.step, `${name}.step`, 0, Number.MAX_SAFE_INTEGER);
  for (const k of ['p1', 'p2']) {
    if (typeof v[k] !== 'number' || !(v[k] >= 0 && v[k] <= 1) || Math.fround(v[k]) !== v[k]) {
      refuse(`${name}.${k} must be a float32 in [0, 1]`, 'send the exported value unchanged');
    }
  }
  for (const k of ['params', 'm', 'v']) parseTensors(v[k], `${name}.${k}`);
  return /** @type {TrainState} */ (v); // checked above
}

export const CHAIN_CHOICES = Object.freeze(['auto', 'on', 'off', 'measure']);

/** @type {Readonly<Record<Request['type'], readonly string[]>>} */
const FIELDS = {
  init: ['model', 'optim', 'seed', 'backend', 'measure', 'audit', 'state', 'sources',
    'kernelBase', 'lutBase', 'chains'],
  grads: ['x', 'y', 'batch', 'early'],
  apply: ['grads'],
  step: ['x', 'y', 'batch', 'hash'],
  probe: [],
  hash: [],
  export: [],
  load: ['state'],
  eval: ['batches', 'batch'],
  outer: ['outer', 'shared'],
  round: ['steps', 'count', 'token', 'early'],
  'outer-apply': ['mean', 'token'],
};

/** @param {Record<string, any>} msg */
function outerFields(msg) {
  const o = msg.outer;
  if (!isObject(o)) refuse('outer: outer must be {innerSteps, lr, momentum}', 'send the run\'s outer loop');
  onlyFields(o, ['innerSteps', 'lr', 'momentum', 'overlap', 'cut'], 'outer.outer');
  if (o.cut !== undefined && o.cut !== 'share' && o.cut !== 'batch') {
    refuse('outer: outer.cut must be share or batch', 'send the run config\'s value, or omit it');
  }
  if (o.overlap !== undefined && !(typeof o.overlap === 'number' && o.overlap >= 0 && o.overlap <= 1)) {
    refuse('outer: outer.overlap must be a number in [0, 1]', 'send the run config\'s value, or omit it');
  }
  integer(o.innerSteps, 'outer: outer.innerSteps', 1, MAX_INNER_STEPS);
  for (const k of ['lr', 'momentum']) {
    if (typeof o[k] !== 'number' || !Number.isFinite(o[k])) {
      refuse(`outer: outer.${k} must be a finite number`, 'send the run config\'s value');
    }
  }
  if (msg.shared !== undefined) {
    if (!isObject(msg.shared)) refuse('outer: shared must be {step, momentum}', 'omit it for a new run');
    onlyFields(msg.shared, ['step', 'momentum'], 'outer.shared');
    integer(msg.shared.step, 'outer: shared.step', 0, Number.MAX_SAFE_INTEGER);
    parseTensors(msg.shared.momentum, 'outer: shared.momentum');
  }
}

/** @param {Record<string, any>} msg */
function roundFields(msg) {
  integer(msg.count, 'round: count', 1, MAX_ROUND_SEQUENCES);
  integer(msg.token, 'round: token', 0, Number.MAX_SAFE_INTEGER);
  if (msg.early !== undefined && typeof msg.early !== 'boolean') {
    refuse('round: early must be true or false', 'omit it, or send true for the measured delta early');
  }
  if (!Array.isArray(msg.steps) || msg.steps.length === 0 || msg.steps.length > msg.count) {
    refuse(`round: steps must be a list of 1 to count (${msg.count}) inner steps`,
      'send each inner step\'s lane pieces [{x, y, rows}]');
  }
  let rows = 0;
  msg.steps.forEach((/** @type {unknown} */ pieces, /** @type {number} */ j) => {
    if (!Array.isArray(pieces) || pieces.length === 0) {
      refuse(`round: steps[${j}] must be a non-empty list of pieces`, 'send {x, y, rows} per piece');
    }
    pieces.forEach((/** @type {unknown} */ p, /** @type {number} */ i) => {
      const what = `round: steps[${j}][${i}]`;
      if (!isObject(p)) refuse(`${what} must be {x, y, rows}`, 'send {x, y, rows} per piece');
      onlyFields(p, ['x', 'y', 'rows'], what);
      tokens(p.x, `${what}.x`);
      tokens(p.y, `${what}.y`);
      integer(p.rows, `${what}.rows`, 1, p.x.length);
      if (p.x.length !== p.y.length || p.x.length % p.rows !== 0) {
        refuse(`${what}: ${p.x.length} inputs, ${p.y.length} targets for ${p.rows} rows`,
          'send rows whole sequences of inputs and their targets');
      }
      rows += p.rows;
    });
  });
  if (rows !== msg.count) {
    refuse(`round: the inner steps hold ${rows} sequences, count is ${msg.count}`,
      'send count as the round\'s sequences: every inner step\'s pieces together');
  }
}

/**
 * @param {unknown} v
 * @param {string} name
 * @returns {string | undefined}
 */
function base(v, name) {
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || !v.startsWith('/') || !v.endsWith('/')) {
    refuse(`${name} must be a same-origin path like '/kernels/'`, 'omit it for the default');
  }
  return v;
}

/**
 * Validates a page -> worker request; returns {id, type, ...fields} with defaults filled.
 * @param {unknown} msg
 * @returns {Request}
 */
export function parseRequest(msg) {
  if (!isObject(msg)) refuse('a request must be an object {id, type, ...}', 'see messages.js');
  integer(msg.id, 'id', 0, Number.MAX_SAFE_INTEGER);
  if (!REQUEST_TYPES.includes(msg.type)) {
    refuse(`unknown request type ${JSON.stringify(msg.type)?.slice(0, 40)}`,
      `send one of ${REQUEST_TYPES.join(', ')}`);
  }
  const { id, type, ...fields } = msg;
  onlyFields(fields, FIELDS[/** @type {Request['type']} */ (type)], type);
  /** @type {Record<string, any>} */
  const out = { id, type, ...fields };
  if (type === 'init') {
    if (!isObject(fields.model)) {
      refuse('init: model must be an object of model config fields', "e.g. {preset: 'tiny'}");
    }
    if (fields.optim !== undefined && !isObject(fields.optim)) {
      refuse('init: optim must be an object of AdamW fields', 'omit it for the defaults');
    }
    out.optim = fields.optim ?? {};
    integer(fields.seed, 'init: seed', 0, U32 - 1);
    out.backend = fields.backend ?? 'auto';
    if (!BACKEND_CHOICES.includes(out.backend)) {
      refuse(`init: backend ${JSON.stringify(out.backend)?.slice(0, 40)} is not one of ` +
        BACKEND_CHOICES.join(', '), "send 'auto' to pick the fastest correct backend");
    }
    out.measure = fields.measure ?? true;
    if (typeof out.measure !== 'boolean') refuse('init: measure must be a boolean', 'omit it');
    out.audit = integer(fields.audit ?? 16, 'init: audit', 0, MAX_AUDIT_SAMPLES);
    if (fields.state !== undefined) parseState(fields.state, 'init: state');
    out.sources = sources(fields.sources, 'init: sources');
    base(fields.kernelBase, 'init: kernelBase');
    base(fields.lutBase, 'init: lutBase');
    out.chains = fields.chains ?? 'auto';
    if (!CHAIN_CHOICES.includes(out.chains)) {
      refuse(`init: chains ${JSON.stringify(out.chains)?.slice(0, 40)} is not one of ` +
        CHAIN_CHOICES.join(', '), "omit it ('auto': the chains on a real GPU, if faster)");
    }
  } else if (type === 'grads' || type === 'step') {
    tokens(fields.x, `${type}: x`);
    tokens(fields.y, `${type}: y`);
    if (fields.x.length !== fields.y.length) {
      refuse(`${type}: x has ${fields.x.length} tokens, y ${fields.y.length}`,
        'send targets of the inputs\' shape');
    }
    if (fields.batch !== undefined) integer(fields.batch, `${type}: batch`, 1, fields.x.length);
    if (type === 'grads') {
      out.early = fields.early ?? false;
      if (typeof out.early !== 'boolean') refuse('grads: early must be a boolean', 'omit it');
    }
    if (type === 'step') {
      out.hash = fields.hash ?? true;
      if (typeof out.hash !== 'boolean') refuse('step: hash must be a boolean', 'omit it');
    }
  } else if (type === 'eval') {
    const b = fields.batches;
    if (!Array.isArray(b) || b.length === 0 || b.length > MAX_EVAL_BATCHES) {
      refuse(`eval: batches must be a list of 1 to ${MAX_EVAL_BATCHES} {x, y}`,
        'send the validation batches (validation.js validationBatches)');
    }
    b.forEach((/** @type {unknown} */ xy, /** @type {number} */ i) => {
      if (!isObject(xy)) refuse(`eval: batches[${i}] must be {x, y}`, 'send {x, y} per batch');
      onlyFields(xy, ['x', 'y'], `eval batches[${i}]`);
      tokens(xy.x, `eval: batches[${i}].x`);
      tokens(xy.y, `eval: batches[${i}].y`);
      if (xy.x.length !== xy.y.length || xy.x.length !== b[0].x.length) {
        refuse(`eval: batches[${i}] has ${xy.x.length} inputs and ${xy.y.length} targets, ` +
          `batches[0] ${b[0].x.length}`, 'send batches of one shape');
      }
    });
    if (fields.batch !== undefined) integer(fields.batch, 'eval: batch', 1, b[0].x.length);
  } else if (type === 'apply') {
    parseTensors(fields.grads, 'apply: grads');
  } else if (type === 'load') {
    parseState(fields.state, 'load: state');
  } else if (type === 'outer') {
    outerFields(fields);
  } else if (type === 'round') {
    roundFields(fields);
  } else if (type === 'outer-apply') {
    if (!(fields.mean instanceof Float32Array)) {
      refuse('outer-apply: mean must be a Float32Array (the flat mean pseudo-gradient)',
        'send the dequantized reduced mean');
    }
    if (fields.token !== null) integer(fields.token, 'outer-apply: token', 0, Number.MAX_SAFE_INTEGER);
  }
  return /** @type {Request} */ (out); // every field of its type checked above
}

/**
 * Validates a worker -> page message; returns it.
 * @param {unknown} msg
 * @returns {Reply}
 */
export function parseReply(msg) {
  if (!isObject(msg)) refuse('a worker message must be an object', 'a worker bug: report it');
  if (msg.type === 'result') {
    integer(msg.id, 'result id', 0, Number.MAX_SAFE_INTEGER);
    if (!isObject(msg.result)) refuse('result without a result object', 'a worker bug');
  } else if (msg.type === 'error') {
    if (msg.id !== null) integer(msg.id, 'error id', 0, Number.MAX_SAFE_INTEGER);
    const e = msg.error;
    if (!isObject(e) || typeof e.message !== 'string' || typeof e.name !== 'string' ||
        typeof e.hint !== 'string') {
      refuse('error without {name, message, hint}', 'a worker bug: report it');
    }
  } else if (msg.type === 'grad') {
    integer(msg.id, 'grad id', 0, Number.MAX_SAFE_INTEGER);
    if (typeof msg.name !== 'string' || !(msg.values instanceof Float32Array)) {
      refuse('grad without {name, values: Float32Array}', 'a worker bug: report it');
    }
  } else if (msg.type === 'event') {
    if (!isObject(msg.event) || !EVENT_KINDS.includes(msg.event.kind)) {
      refuse(`unknown event ${JSON.stringify(msg.event?.kind)?.slice(0, 40)}`, 'a worker bug');
    }
  } else {
    refuse(`unknown worker message type ${JSON.stringify(msg.type)?.slice(0, 40)}`,
      'a worker bug: report it');
  }
  return /** @type {Reply} */ (msg); // its type's fields checked above
}

/**
 * Map name -> Float32Array (in order) as a tensor list; `copy` detaches from the source.
 * @param {ReadonlyMap<string, Float32Array>} map
 * @param {{copy?: boolean}} [options]
 * @returns {Tensors}
 */
export function toTensors(map, { copy = false } = {}) {
  const names = [...map.keys()];
  // (each name is one of its keys)
  const at = (/** @type {string} */ n) => /** @type {Float32Array} */ (map.get(n));
  return { names, arrays: names.map((n) => (copy ? at(n).slice() : at(n))) };
}

/**
 * A tensor list as a Map, in its order.
 * @param {Tensors} tensors
 * @returns {Map<string, Float32Array>}
 */
export function fromTensors({ names, arrays }) {
  return new Map(names.map((n, i) => [n, arrays[i]]));
}

/**
 * The ArrayBuffers of tensor lists (to transfer rather than copy).
 * @param {...Tensors} lists
 * @returns {ArrayBufferLike[]}
 */
export function buffersOf(...lists) {
  return lists.flatMap((t) => t.arrays.map((a) => a.buffer));
}
