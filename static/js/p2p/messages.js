// @ts-check
// Every JSON control message on a data channel, declared once, parsed and validated here.
// Mirror of server/daisychain/p2p/messages.py (with the field checks of
// daisychain/wire/fields.py),
// normative in docs/PROTOCOL.md "Control messages": the same records, the same checks in the
// same order, the same error codes and texts, proven by tests/vectors/p2p_wire/.
//
// A text message on a channel is one JSON object with a `type`; `parse` turns it into a record
// (a plain frozen object with `type` and the declared fields) or throws MessageError (code,
// message, hint), which the receiver answers with an `error` message before closing. Unknown
// fields are ignored; an unknown type or a missing or mistyped field is an error, never a
// silent drop. No message names its sender: the sender is the channel it arrived on.
//
// JSON is read by pyjson.js (Python's json.loads: integers and floats stay apart; objects are
// Maps) and written by `encode` exactly as Python's json.dumps(asdict(m), separators=(",", ":"),
// allow_nan=False) writes it: fields in declaration order with `type` last, ASCII only, floats
// in Python's repr. So a message encodes to the same bytes on both sides.

import { MAX_LENGTH as DATA_NAME_MAX_LENGTH } from '../datanames.js';
import { CONTRACT_VERSION } from '../numerics/index.js';
import { parse as parseJson, PyFloat } from './pyjson.js';
import { floatRepr, pyLen, pySlice, strRepr, utf8Length } from './pyrepr.js';
import { MAX_GLOBAL_BATCH } from './shares.js';

// The records `parse` builds and `message` checks, one per message type (the declarations
// below say how each is written). Optional fields are the ones a record may be built without:
// `encode` writes their defaults.
/**
 * @typedef {Readonly<{type: 'hello', version: number, name: string, contract: number}>} Hello
 * @typedef {'vocab_size' | 'width' | 'layers' | 'heads' | 'seq_len' | 'batch' |
 *   'mlp_mult'} ModelField
 * @typedef {Readonly<Record<ModelField, number>>} ModelSpec
 * @typedef {Readonly<{lr: number, warmup_steps: number, weight_decay: number,
 *   clip: number}>} OptimSpec
 * @typedef {Readonly<{steps: number, lr: number, momentum: number, overlap?: number,
 *   cut?: string}>} OuterSpec  config.outer
 * @typedef {Readonly<{type: 'config', run: string, preset: string | null, model: ModelSpec,
 *   optim: OptimSpec, steps: number, seed: number, data: string, tokenizer_sha256: string,
 *   resume_step: number, resume_hash: string | null, global_batch: number, shares_by: string,
 *   sync?: string, outer?: OuterSpec | null}>} Config
 * @typedef {Readonly<{type: 'ready', run: string, step: number, hash: string,
 *   peers: readonly string[], seq_s: number, private_data?: boolean}>} Ready
 * @typedef {Readonly<{type: 'sync-request', run: string, private_data?: boolean}>} SyncRequest
 * @typedef {Readonly<{type: 'roster', run: string, step: number, round: number,
 *   peers: readonly string[], shares: readonly number[]}>} Roster
 * @typedef {Readonly<{type: 'hash', run: string, step: number, round: number, hash: string,
 *   loss: number, probe: string, backend: string, seq_s: number}>} Hash
 * @typedef {Readonly<{type: 'missing', run: string, step: number, round: number,
 *   peers: readonly string[]}>} Missing
 * @typedef {Readonly<{type: 'repair', run: string, step: number, round: number,
 *   piece: 'contribution' | 'reduced', chunk: number}>} Repair
 * @typedef {Readonly<{type: 'save', run: string, step: number}>} Save
 * @typedef {Readonly<{type: 'leave', reason: string}>} Leave
 * @typedef {Readonly<{type: 'stop', run: string, reason: string, step: number, message: string,
 *   hashes: ReadonlyMap<string, string>}>} Stop
 * @typedef {Readonly<{type: 'error', code: string, message: string, hint: string}>} ErrorMessage
 * @typedef {Hello | Config | Ready | SyncRequest | Roster | Hash | Missing | Repair | Save |
 *   Leave | Stop | ErrorMessage} Message
 * @typedef {Message['type']} MessageType
 */
/**
 * The record of message type T.
 * @template {MessageType} T
 * @typedef {Extract<Message, {type: T}>} MessageOf
 */
/**
 * How a field is written: a JSON type ('int', 'float', 'str', 'ids', ...) or, for a nested
 * object, its own declaration.
 * @typedef {string | Declaration} FieldKind
 * @typedef {ReadonlyArray<readonly [string, FieldKind]>} Declaration
 */

export { MAX_GLOBAL_BATCH };
// The versions a peer states in `hello` (daisychain/p2p/versions.py; docs/PROTOCOL.md
// "Version handshake"): the data-channel protocol's and the numerical contract's.
export const DATA_PROTOCOL_VERSION = 6;
export { CONTRACT_VERSION };
export const MAX_MESSAGE_BYTES = 16 * 1024;
export const MAX_ROSTER = 64;
export const U32_MAX = 2 ** 32 - 1;
export const MAX_SEQ_S = 1e6; // seconds per sequence a peer may report (about 11 days: anything is allowed)
export const PEER_ID_RE = /^[A-Za-z0-9_-]{1,32}$/;
export const RUN_ID_RE = /^[0-9a-f]{16}$/;
export const HASH_RE = /^[0-9a-f]{64}$/;

export const ERROR_CODES = Object.freeze([
  'bad-json', 'bad-message', 'unknown-type', 'too-large', 'version-mismatch', 'bad-frame',
  'wrong-run', 'incompatible',
]);
export const STOP_REASONS = Object.freeze(['done', 'fork', 'error', 'leader-request']);
// config.shares_by: split the global batch by measured speed, or equally (docs/PROTOCOL.md).
export const SHARES_BY = Object.freeze(['speed', 'equal']);
/** @type {readonly ('contribution' | 'reduced')[]} */
export const PIECES = Object.freeze(['contribution', 'reduced']);
// config.sync (docs/PROTOCOL.md, "Outer runs"): any short string is well formed; whether this
// peer trains that mode is runconfig's decision. "step" is the default and is never written.
export const SYNC_STEP = 'step';
export const SYNC_OUTER = 'outer';
export const MAX_SYNC_CHARS = 16;
// `overlap` is written only when not 0, `cut` only when not 'share' (Python's encode): a config
// without them keeps its bytes.
export const OUTER_CUT_DEFAULT = 'share';
/** @type {Declaration} */
const OUTER = [['steps', 'int'], ['lr', 'float'], ['momentum', 'float'], ['overlap', 'float0?'],
  ['cut', 'cut?']];
/** @type {readonly ModelField[]} */
export const MODEL_FIELDS = Object.freeze(
  ['vocab_size', 'width', 'layers', 'heads', 'seq_len', 'batch', 'mlp_mult']);
/** @type {Declaration} */
const OPTIM = [['lr', 'float'], ['warmup_steps', 'int'], ['weight_decay', 'float'], ['clip', 'float']];

// The declarations: each record's fields in Python's dataclass order (`type` comes last) with
// their JSON types. `encode` writes them in this order; `parse` below builds them. A 'flag?' is
// an optional boolean written only when true (Python's OMITTED_WHEN_FALSE): absent reads as
// false, so a peer without it writes the bytes it wrote before the flag existed.
/** @type {Readonly<Record<MessageType, Declaration>>} */
export const DECLARATIONS = Object.freeze({
  hello: [['version', 'int'], ['name', 'str'], ['contract', 'int']],
  config: [['run', 'str'], ['preset', 'str?'],
    ['model', MODEL_FIELDS.map((f) => /** @type {const} */ ([f, 'int']))],
    ['optim', OPTIM], ['steps', 'int'], ['seed', 'int'], ['data', 'str'],
    ['tokenizer_sha256', 'str'], ['resume_step', 'int'], ['resume_hash', 'str?'],
    ['global_batch', 'int'], ['shares_by', 'str'], ['sync', 'sync?'], ['outer', 'outer?']],
  ready: [['run', 'str'], ['step', 'int'], ['hash', 'str'], ['peers', 'ids'], ['seq_s', 'float'],
    ['private_data', 'flag?']],
  'sync-request': [['run', 'str'], ['private_data', 'flag?']],
  roster: [['run', 'str'], ['step', 'int'], ['round', 'int'], ['peers', 'ids'], ['shares', 'ints']],
  hash: [['run', 'str'], ['step', 'int'], ['round', 'int'], ['hash', 'str'], ['loss', 'float'],
    ['probe', 'str'], ['backend', 'str'], ['seq_s', 'float']],
  missing: [['run', 'str'], ['step', 'int'], ['round', 'int'], ['peers', 'ids']],
  repair: [['run', 'str'], ['step', 'int'], ['round', 'int'], ['piece', 'str'], ['chunk', 'int']],
  save: [['run', 'str'], ['step', 'int']],
  leave: [['reason', 'str']],
  stop: [['run', 'str'], ['reason', 'str'], ['step', 'int'], ['message', 'str'],
    ['hashes', 'map']],
  error: [['code', 'str'], ['message', 'str'], ['hint', 'str']],
});
export const TYPES = /** @type {readonly MessageType[]} */ (
  Object.freeze(Object.keys(DECLARATIONS)));

/** A control message that cannot be accepted; becomes an `error` reply. */
export class MessageError extends Error {
  /**
   * @param {string} code  one of ERROR_CODES
   * @param {string} message
   * @param {string} hint  what the sender should do instead
   */
  constructor(code, message, hint) {
    super(message);
    this.name = 'MessageError';
    this.code = code;
    this.hint = hint;
  }
}

/**
 * The `error` record answering a refused message (Python's error_from).
 * @param {{code: string, message: string, hint: string}} exc  a MessageError (or runconfig's
 *   Incompatible)
 * @returns {ErrorMessage}
 */
export function errorFrom(exc) {
  return record('error', { code: exc.code, message: pySlice(exc.message, 200), hint: exc.hint });
}

/**
 * @template {string} T
 * @template {object} F
 * @param {T} type
 * @param {F} fields
 * @returns {Readonly<{type: T} & F>}
 */
function record(type, fields) {
  return Object.freeze({ type, ...fields });
}

/**
 * A message record of `type` from its fields (checked as `encode` will need them).
 * @template {MessageType} T
 * @param {T} type
 * @param {Omit<MessageOf<T>, 'type'>} fields
 * @returns {MessageOf<T>}
 */
export function message(type, fields) {
  const m = /** @type {MessageOf<T>} */ (record(type, fields));
  encode(m); // throws TypeError on a missing or mistyped field
  return m;
}

// ---------------------------------------------------------------------------------------------
// Writing: json.dumps(asdict(m), separators=(",", ":"), allow_nan=False), ensure_ascii.

/** @param {string} s */
function jsonString(s) {
  return JSON.stringify(s).replace(/[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * @param {any} value  anything: this is where a record's fields are checked
 * @param {FieldKind} kind
 * @param {string} where  the field's name in an error
 * @returns {string}
 */
function encodeValue(value, kind, where) {
  const wrong = () => {
    throw new TypeError(`${where} is not a valid ${Array.isArray(kind) ? 'object' : kind}`);
  };
  if (Array.isArray(kind)) {
    if (value === null || typeof value !== 'object') wrong();
    const written = kind.filter(([f, k]) => !(k === 'float0?' && (value[f] ?? 0) === 0) &&
      !(k === 'cut?' && (value[f] ?? OUTER_CUT_DEFAULT) === OUTER_CUT_DEFAULT));
    return `{${written.map(([f, k]) => `${jsonString(f)}:${encodeValue(value[f], k, `${where}.${f}`)}`).join(',')}}`;
  }
  switch (kind) {
    case 'int':
      if (!Number.isSafeInteger(value)) wrong();
      return String(value);
    case 'float':
    case 'float0?':
      // allow_nan=False: Python refuses to write NaN or an infinity.
      if (typeof value !== 'number' || !Number.isFinite(value)) wrong();
      return floatRepr(value);
    case 'str':
    case 'cut?':
      if (typeof value !== 'string') wrong();
      return jsonString(value);
    case 'str?':
      if (value === null || value === undefined) return 'null';
      if (typeof value !== 'string') wrong();
      return jsonString(value);
    case 'ids':
      if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) wrong();
      return `[${value.map(jsonString).join(',')}]`;
    case 'ints':
      if (!Array.isArray(value) || !value.every((v) => Number.isSafeInteger(v))) wrong();
      return `[${value.map(String).join(',')}]`;
    case 'map': {
      const entries = value instanceof Map ? [...value] : Object.entries(value ?? wrong());
      if (!entries.every(([k, v]) => typeof k === 'string' && typeof v === 'string')) wrong();
      return `{${entries.map(([k, v]) => `${jsonString(k)}:${jsonString(v)}`).join(',')}}`;
    }
    default:
      throw new TypeError(`unknown field kind ${kind}`);
  }
}

/**
 * The JSON text of a message record, byte for byte what the Python peer writes for it.
 * @param {Message} message
 * @returns {string}
 */
export function encode(message) {
  // Read field by field, by name: a record of any type (and, from JavaScript callers, anything).
  const m = /** @type {Readonly<Record<string, any>> & {type: MessageType}} */ (message);
  const fields = DECLARATIONS[m.type];
  if (fields === undefined) throw new TypeError(`unknown control message type ${m.type}`);
  const body = [];
  for (const [f, k] of fields) {
    if (k === 'flag?') {
      if (![undefined, false, true].includes(m[f])) throw new TypeError(`${m.type}.${f} is not a valid flag`);
      if (m[f] === true) body.push(`${jsonString(f)}:true`);
      continue;
    }
    if (k === 'sync?' || k === 'outer?') {
      // Written only for a run that is not per-step (Python's encode): a per-step config is the
      // bytes it was before outer runs existed.
      const sync = m.sync ?? SYNC_STEP;
      if (sync === SYNC_STEP) continue;
      if (k === 'sync?') body.push(`"sync":${encodeValue(sync, 'str', `${m.type}.sync`)}`);
      else body.push(`"outer":${m.outer == null ? 'null' : encodeValue(m.outer, OUTER, `${m.type}.outer`)}`);
      continue;
    }
    body.push(`${jsonString(f)}:${encodeValue(m[f], k, `${m.type}.${f}`)}`);
  }
  body.push(`"type":${jsonString(m.type)}`);
  return `{${body.join(',')}}`;
}

// ---------------------------------------------------------------------------------------------
// Parsing: the one place where control JSON from a peer is trusted to have a shape.

/**
 * Parse one text message from a channel into a record; MessageError when refused.
 * @param {string} raw
 * @returns {Message}
 */
export function parse(raw) {
  if (typeof raw !== 'string') throw new TypeError('a control message is a string');
  if (utf8Length(raw) > MAX_MESSAGE_BYTES) {
    throw new MessageError('too-large', `control message larger than ${MAX_MESSAGE_BYTES} bytes`,
      'send bulk data as binary frames');
  }
  let obj;
  try {
    obj = parseJson(raw);
  } catch {
    throw new MessageError('bad-json', 'control message is not valid JSON', 'send one JSON object');
  }
  if (!(obj instanceof Map)) {
    throw new MessageError('bad-message', 'control message is not a JSON object', 'see PROTOCOL.md');
  }
  const kind = obj.get('type');
  if (typeof kind !== 'string' || !/** @type {readonly string[]} */ (TYPES).includes(kind)) {
    const shown = typeof kind === 'string' ? strRepr(pySlice(kind, 32)) : 'None';
    throw new MessageError('unknown-type', `unknown control message type ${shown}`,
      `control messages are: ${TYPES.join(', ')} (docs/PROTOCOL.md)`);
  }
  const f = new Fields(obj, kind);
  if (kind === 'hello') {
    const version = f.integer('version', 0, U32_MAX);
    if (version !== DATA_PROTOCOL_VERSION) {
      throw new MessageError('version-mismatch',
        `data-channel protocol version ${version}, this peer speaks ${DATA_PROTOCOL_VERSION}`,
        'every peer of a run must run the same DaisyChain version; upgrade the older one');
    }
    const contract = f.integer('contract', 0, U32_MAX);
    if (contract !== CONTRACT_VERSION) {
      throw new MessageError('version-mismatch',
        `numerical contract version ${contract}, this peer implements ${CONTRACT_VERSION}`,
        'every peer of a run must run the same DaisyChain version; upgrade the older one');
    }
    return record('hello', { version, name: f.text('name', 40), contract });
  }
  if (kind === 'config') {
    // Shape only: every field present, of its JSON type, integers within 32 bits, numbers
    // finite. Whether this peer can and will train it is runconfig's decision (`incompatible`).
    const m = new Fields(f.obj('model'), 'config.model');
    const o = new Fields(f.obj('optim'), 'config.optim');
    let preset = obj.get('preset');
    if (preset === undefined) preset = null;
    if (preset !== null && !(typeof preset === 'string' && pyLen(preset) <= 32)) {
      throw f.bad('preset', 'a string of at most 32 characters or null');
    }
    const resumeStep = f.integer('resume_step', 0, U32_MAX);
    const resumeHash = resumeStep > 0 ? f.hash('resume_hash') : null;
    const sync = obj.has('sync') ? f.text('sync', MAX_SYNC_CHARS) : SYNC_STEP;
    const run = f.run();
    const model = /** @type {Record<ModelField, number>} */ ({});
    for (const name of MODEL_FIELDS) model[name] = m.integer(name, 0, U32_MAX);
    const optim = {
      lr: o.number('lr', -Infinity, Infinity),
      warmup_steps: o.integer('warmup_steps', 0, U32_MAX),
      weight_decay: o.number('weight_decay', -Infinity, Infinity),
      clip: o.number('clip', -Infinity, Infinity),
    };
    return record('config', {
      run, preset, model: Object.freeze(model), optim: Object.freeze(optim),
      steps: f.integer('steps', 0, U32_MAX), seed: f.integer('seed', 0, U32_MAX),
      data: f.text('data', DATA_NAME_MAX_LENGTH), tokenizer_sha256: f.hash('tokenizer_sha256'),
      resume_step: resumeStep, resume_hash: resumeHash,
      global_batch: f.integer('global_batch', 0, U32_MAX),
      shares_by: f.choice('shares_by', SHARES_BY),
      sync, outer: sync === SYNC_OUTER ? outerSpec(f) : null,
    });
  }
  if (kind === 'ready') {
    return record('ready', {
      run: f.run(), step: f.integer('step', 0, U32_MAX), hash: f.hash('hash'),
      peers: f.ids('peers', MAX_ROSTER), seq_s: f.number('seq_s', 0.0, MAX_SEQ_S),
      private_data: f.optionalFlag('private_data'),
    });
  }
  if (kind === 'sync-request') {
    return record('sync-request', { run: f.run(), private_data: f.optionalFlag('private_data') });
  }
  if (kind === 'roster') {
    const peers = f.ids('peers', MAX_ROSTER);
    if (peers.length === 0) throw f.bad('peers', 'a non-empty list of peer ids');
    return record('roster', {
      run: f.run(), step: f.integer('step', 1, U32_MAX), round: f.integer('round', 0, 255), peers,
      shares: f.shares('shares', peers.length),
    });
  }
  if (kind === 'hash') {
    return record('hash', {
      run: f.run(), step: f.integer('step', 1, U32_MAX), round: f.integer('round', 0, 255),
      hash: f.hash('hash'), loss: f.number('loss', -Infinity, Infinity), probe: f.hash('probe'),
      backend: f.text('backend', 32), seq_s: f.number('seq_s', 0.0, MAX_SEQ_S),
    });
  }
  if (kind === 'missing') {
    return record('missing', {
      run: f.run(), step: f.integer('step', 1, U32_MAX), round: f.integer('round', 0, 255),
      peers: f.ids('peers', MAX_ROSTER),
    });
  }
  if (kind === 'repair') {
    const piece = f.choice('piece', PIECES);
    return record('repair', {
      run: f.run(), step: f.integer('step', 1, U32_MAX), round: f.integer('round', 0, 255),
      piece, chunk: f.integer('chunk', 0, MAX_ROSTER - 1),
    });
  }
  if (kind === 'save') return record('save', { run: f.run(), step: f.integer('step', 0, U32_MAX) });
  if (kind === 'leave') return record('leave', { reason: f.text('reason', 200) });
  if (kind === 'stop') {
    const reason = f.choice('reason', STOP_REASONS);
    const hashes = f.obj('hashes');
    let ok = hashes.size <= MAX_ROSTER;
    for (const [k, v] of hashes) {
      ok &&= PEER_ID_RE.test(k) && typeof v === 'string' && pyLen(v) <= 64;
    }
    if (!ok) throw f.bad('hashes', 'an object mapping peer ids to hashes');
    return record('stop', {
      run: f.run(), reason, step: f.integer('step', 0, U32_MAX), message: f.text('message', 1000),
      hashes: /** @type {Map<string, string>} */ (new Map(hashes)), // checked above
    });
  }
  // kind === 'error'. A code this version does not know is still an error: "bad-message".
  const code = f.text('code', 32);
  return record('error', {
    code: ERROR_CODES.includes(code) ? code : 'bad-message',
    message: f.text('message', 1000), hint: f.text('hint', 1000),
  });
}

/**
 * config.outer's shape (present exactly when sync is "outer"); its ranges are runconfig's.
 * @param {Fields} f
 * @returns {OuterSpec}
 */
function outerSpec(f) {
  const o = new Fields(f.obj('outer'), 'config.outer');
  return Object.freeze({
    steps: o.integer('steps', 0, U32_MAX),
    lr: o.number('lr', -Infinity, Infinity),
    momentum: o.number('momentum', -Infinity, Infinity),
    overlap: o.fields.has('overlap') ? o.number('overlap', -Infinity, Infinity) : 0,
    cut: o.fields.has('cut') ? o.text('cut', 16) : OUTER_CUT_DEFAULT,
  });
}

/** Typed access to the fields of one JSON object (daisychain/wire/fields.py's Fields). */
class Fields {
  /**
   * @param {Map<string, unknown>} fields  a JSON object as pyjson.js reads it
   * @param {string} kind  the record's name in errors
   */
  constructor(fields, kind) {
    this.fields = fields; // a Map (pyjson.js)
    this.kind = kind;
  }

  /**
   * @param {string} name
   * @param {string} expected
   */
  bad(name, expected) {
    return new MessageError('bad-message', `${this.kind}.${name} must be ${expected}`,
      'see the control message declarations in docs/PROTOCOL.md');
  }

  /**
   * @param {string} name
   * @param {number} lo
   * @param {number} hi
   * @returns {number}
   */
  integer(name, lo, hi) {
    const value = this.fields.get(name);
    // Only integer literals arrive as numbers (pyjson.js): 1.0 is a PyFloat, as in Python.
    if (typeof value !== 'number' || !Number.isInteger(value) || value < lo || value > hi) {
      throw this.bad(name, `an integer in [${lo}, ${hi}]`);
    }
    return value;
  }

  /**
   * @param {string} name
   * @param {number} lo
   * @param {number} hi
   * @returns {number}
   */
  number(name, lo, hi) {
    const raw = this.fields.get(name);
    let value;
    if (typeof raw === 'number') {
      // An integer literal beyond float range: Python's float() overflows.
      if (!Number.isFinite(raw)) throw this.bad(name, 'a finite number');
      value = raw;
    } else if (raw instanceof PyFloat) {
      value = raw.value;
    } else {
      throw this.bad(name, 'a number');
    }
    if (!(Number.isFinite(value) && lo <= value && value <= hi)) {
      const bounded = Number.isFinite(lo) || Number.isFinite(hi);
      throw this.bad(name, bounded ?
        `a finite number in [${floatRepr(lo)}, ${floatRepr(hi)}]` : 'a finite number');
    }
    return value;
  }

  /**
   * @param {string} name
   * @param {number} maxChars
   * @returns {string}
   */
  text(name, maxChars) {
    const value = this.fields.get(name);
    if (typeof value !== 'string' || pyLen(value) > maxChars) {
      throw this.bad(name, `a string of at most ${maxChars} characters`);
    }
    return value;
  }

  /**
   * A JSON boolean, or absent (false). Only true/false: 1 or "yes" is refused.
   * @param {string} name
   * @returns {boolean}
   */
  optionalFlag(name) {
    const value = this.fields.has(name) ? this.fields.get(name) : false;
    if (typeof value !== 'boolean') throw this.bad(name, 'true, false or absent');
    return value;
  }

  /**
   * @template {string} C
   * @param {string} name
   * @param {readonly C[]} options
   * @returns {C}
   */
  choice(name, options) {
    const value = this.fields.get(name);
    if (typeof value !== 'string' || !isOneOf(value, options)) {
      throw this.bad(name, `one of ${options.join(', ')}`);
    }
    return value;
  }

  /**
   * @param {string} name
   * @returns {Map<string, unknown>}
   */
  obj(name) {
    const value = this.fields.get(name);
    if (!(value instanceof Map)) throw this.bad(name, 'a JSON object');
    return value;
  }

  /**
   * @param {string} name
   * @param {RegExp} pattern
   * @param {string} expected
   * @returns {string}
   */
  matching(name, pattern, expected) {
    const value = this.fields.get(name);
    if (typeof value !== 'string' || !pattern.test(value)) throw this.bad(name, expected);
    return value;
  }

  /**
   * @param {string} name
   * @param {number} maxCount
   * @returns {readonly string[]}
   */
  ids(name, maxCount) {
    const value = this.fields.get(name);
    if (!Array.isArray(value) || value.length > maxCount ||
      !value.every((v) => typeof v === 'string' && PEER_ID_RE.test(v)) ||
      new Set(value).size !== value.length) {
      throw this.bad(name, `a list of at most ${maxCount} distinct peer ids`);
    }
    return Object.freeze([...value]);
  }

  run() {
    return this.matching('run', RUN_ID_RE, '16 lowercase hex digits');
  }

  /**
   * One share per roster peer, each an integer in [0, MAX_GLOBAL_BATCH] (whether they sum to
   * the run's global batch is the machine's check: it knows the config).
   * @param {string} name
   * @param {number} count
   * @returns {readonly number[]}
   */
  shares(name, count) {
    const value = this.fields.get(name);
    if (!Array.isArray(value) || value.length !== count ||
      !value.every((v) => typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_GLOBAL_BATCH)) {
      throw this.bad(name, `a list of ${count} integers in [0, ${MAX_GLOBAL_BATCH}]`);
    }
    return Object.freeze([...value]);
  }

  /** @param {string} name */
  hash(name) {
    return this.matching(name, HASH_RE, '64 lowercase hex digits (SHA-256)');
  }
}

/**
 * Whether `value` is one of `options` (and, to the checker, of their type).
 * @template {string} C
 * @param {string} value
 * @param {readonly C[]} options
 * @returns {value is C}
 */
function isOneOf(value, options) {
  return /** @type {readonly string[]} */ (options).includes(value);
}
