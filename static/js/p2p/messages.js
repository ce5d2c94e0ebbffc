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
 * @typedef {Readonly<{one_in: number, private?: string}>} AuditSpec  config.audit
 * @typedef {Readonly<{type: 'config', run: string, preset: string | null, model: ModelSpec,
 *   optim: OptimSpec, steps: number, seed: number, data: string, tokenizer_sha256: string,
 *   resume_step: number, resume_hash: string | null, global_batch: number, shares_by: string,
 *   sync?: string, outer?: OuterSpec | null, audit?: AuditSpec | null}>} Config
 * @typedef {Readonly<{type: 'ready', run: string, step: number, hash: string,
 *   peers: readonly string[], seq_s: number, private_data?: boolean}>} Ready
 * @typedef {Readonly<{type: 'sync-request', run: string, private_data?: boolean}>} SyncRequest
 * @typedef {Readonly<{type: 'roster', run: string, step: number, round: number,
 *   peers: readonly string[], shares: readonly number[],
 *   carry?: ReadonlyArray<readonly [number, string]>}>} Roster
 * @typedef {Readonly<{type: 'hash', run: string, step: number, round: number, hash: string,
 *   loss: number, probe: string, backend: string, seq_s: number}>} Hash
 * @typedef {Readonly<{type: 'missing', run: string, step: number, round: number,
 *   peers: readonly string[]}>} Missing
 * @typedef {Readonly<{type: 'repair', run: string, step: number, round: number,
 *   piece: 'contribution' | 'reduced' | 'commit' | 'reduced-commit', chunk: number}>} Repair
 * @typedef {Readonly<{type: 'save', run: string, step: number}>} Save
 * @typedef {Readonly<{type: 'leave', reason: string}>} Leave
 * @typedef {Readonly<{type: 'stop', run: string, reason: string, step: number, message: string,
 *   hashes: ReadonlyMap<string, string>}>} Stop
 * @typedef {Readonly<{type: 'error', code: string, message: string, hint: string}>} ErrorMessage
 * @typedef {Readonly<{type: 'commit', run: string, step: number, round: number, peer: string,
 *   roster: string, piece: 'contribution', prev: string, chunks: readonly string[],
 *   data: string, nonce_hash: string, private_data?: boolean, sig: string}>} ContributionCommit
 * @typedef {Readonly<{type: 'commit', run: string, step: number, round: number, peer: string,
 *   roster: string, piece: 'reduced', chunk: number, digest: string, sig: string}>} ReducedCommit
 * @typedef {Readonly<{type: 'reveal', run: string, step: number, round: number, nonce: string,
 *   seen: string, sig: string}>} Reveal
 * @typedef {Readonly<{type: 'audit', run: string, step: number, round: number,
 *   item: 'contribution' | 'reduced', index: number, of: string, digests: readonly string[],
 *   data: string, statement?: string | null, statement_sig?: string | null,
 *   sig: string}>} AuditResult
 * @typedef {Readonly<{statement: string, sig: string}>} Signed
 * @typedef {Readonly<{type: 'proof', run: string, step: number, round: number,
 *   kind: 'equivocation' | 'bad-reveal', first: Signed, second: Signed}>} Proof
 * @typedef {Hello | Config | Ready | SyncRequest | Roster | Hash | Missing | Repair | Save |
 *   Leave | Stop | ErrorMessage | ContributionCommit | ReducedCommit | Reveal | AuditResult |
 *   Proof} Message
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
const STATEMENT_RE = /^[0-9a-f]*$/;

export const ERROR_CODES = Object.freeze([
  'bad-json', 'bad-message', 'unknown-type', 'too-large', 'version-mismatch', 'bad-frame',
  'wrong-run', 'incompatible',
]);
export const STOP_REASONS = Object.freeze(['done', 'fork', 'error', 'leader-request']);
// config.shares_by: split the global batch by measured speed, or equally (docs/PROTOCOL.md).
export const SHARES_BY = Object.freeze(['speed', 'equal']);
// "commit" and "reduced-commit" (version 7) ask for the commit statement of rank `chunk`, or the
// reduced commit of chunk `chunk`, as held (docs/TRUST.md, "One attempt, step by step").
/** @type {readonly ('contribution' | 'reduced' | 'commit' | 'reduced-commit')[]} */
export const PIECES = Object.freeze(['contribution', 'reduced', 'commit', 'reduced-commit']);
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
// config.audit (docs/TRUST.md, "Config and versions"): its shape here, its ranges runconfig's.
// Written after `outer` only when audits are on, `private` only when not "refuse".
export const AUDIT_PRIVATE_DEFAULT = 'refuse';
export const MAX_AUDIT_PRIVATE_CHARS = 16;
/** @type {Declaration} */
const AUDIT = [['one_in', 'int'], ['private', 'private?']];
// Commit, then audit (docs/TRUST.md, "Messages"; data-channel version 7: declared and checked
// here, not yet sent by any machine). Statements travel as lowercase hex, 95 bytes (a reduced
// commit) to 2207 (a contribution commit of a 64-peer roster): statements.js's layout (Python's
// MIN_STATEMENT_BYTES, MAX_STATEMENT_BYTES). A signature is Ed25519's 64 bytes.
export const SIG_RE = /^[0-9a-f]{128}$/;
export const MIN_STATEMENT_BYTES = 95;
export const MAX_STATEMENT_BYTES = 2207;
export const MAX_CARRY = 64;
/** @type {readonly ('contribution' | 'reduced')[]} */
export const COMMIT_PIECES = Object.freeze(['contribution', 'reduced']);
/** @type {readonly ('contribution' | 'reduced')[]} */
export const AUDIT_ITEMS = Object.freeze(['contribution', 'reduced']);
/** @type {readonly ('equivocation' | 'bad-reveal')[]} */
export const PROOF_KINDS = Object.freeze(['equivocation', 'bad-reveal']);
// The types and repair pieces of commit, then audit: a version-6 machine refuses them.
export const AUDIT_TYPES = Object.freeze(['commit', 'reveal', 'audit', 'proof']);
export const AUDIT_PIECES = Object.freeze(['commit', 'reduced-commit']);
/** @type {Declaration} */
const SIGNED = [['statement', 'str'], ['sig', 'str']];
const ATTEMPT = /** @type {const} */ ([['run', 'str'], ['step', 'int'], ['round', 'int']]);
// A commit's fields depend on its piece (Python's ContributionCommit and ReducedCommit).
/** @type {Readonly<Record<'contribution' | 'reduced', Declaration>>} */
export const COMMIT_DECLARATIONS = Object.freeze({
  contribution: [...ATTEMPT, ['peer', 'str'], ['roster', 'str'], ['piece', 'str'], ['prev', 'str'],
    ['chunks', 'strs'], ['data', 'str'], ['nonce_hash', 'str'], ['private_data', 'flag?'],
    ['sig', 'str']],
  reduced: [...ATTEMPT, ['peer', 'str'], ['roster', 'str'], ['piece', 'str'], ['chunk', 'int'],
    ['digest', 'str'], ['sig', 'str']],
});
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
    ['global_batch', 'int'], ['shares_by', 'str'], ['sync', 'sync?'], ['outer', 'outer?'],
    ['audit', 'audit?']],
  ready: [['run', 'str'], ['step', 'int'], ['hash', 'str'], ['peers', 'ids'], ['seq_s', 'float'],
    ['private_data', 'flag?']],
  'sync-request': [['run', 'str'], ['private_data', 'flag?']],
  roster: [['run', 'str'], ['step', 'int'], ['round', 'int'], ['peers', 'ids'], ['shares', 'ints'],
    ['carry', 'carry?']],
  hash: [['run', 'str'], ['step', 'int'], ['round', 'int'], ['hash', 'str'], ['loss', 'float'],
    ['probe', 'str'], ['backend', 'str'], ['seq_s', 'float']],
  missing: [['run', 'str'], ['step', 'int'], ['round', 'int'], ['peers', 'ids']],
  repair: [['run', 'str'], ['step', 'int'], ['round', 'int'], ['piece', 'str'], ['chunk', 'int']],
  save: [['run', 'str'], ['step', 'int']],
  leave: [['reason', 'str']],
  stop: [['run', 'str'], ['reason', 'str'], ['step', 'int'], ['message', 'str'],
    ['hashes', 'map']],
  error: [['code', 'str'], ['message', 'str'], ['hint', 'str']],
  commit: COMMIT_DECLARATIONS.contribution, // or .reduced, by piece (declarationOf)
  reveal: [...ATTEMPT, ['nonce', 'str'], ['seen', 'str'], ['sig', 'str']],
  audit: [...ATTEMPT, ['item', 'str'], ['index', 'int'], ['of', 'str'], ['digests', 'strs'],
    ['data', 'str'], ['statement', 'str-opt'], ['statement_sig', 'str-opt'], ['sig', 'str']],
  proof: [...ATTEMPT, ['kind', 'str'], ['first', SIGNED], ['second', SIGNED]],
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
      !(k === 'cut?' && (value[f] ?? OUTER_CUT_DEFAULT) === OUTER_CUT_DEFAULT) &&
      !(k === 'private?' && (value[f] ?? AUDIT_PRIVATE_DEFAULT) === AUDIT_PRIVATE_DEFAULT));
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
    case 'str-opt':
    case 'cut?':
    case 'private?':
      if (typeof value !== 'string') wrong();
      return jsonString(value);
    case 'str?':
      if (value === null || value === undefined) return 'null';
      if (typeof value !== 'string') wrong();
      return jsonString(value);
    case 'ids':
    case 'strs':
      if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) wrong();
      return `[${value.map(jsonString).join(',')}]`;
    case 'carry?':
      if (!Array.isArray(value) || !value.every((v) => Array.isArray(v) && v.length === 2 &&
        Number.isSafeInteger(v[0]) && typeof v[1] === 'string')) wrong();
      return `[${value.map((/** @type {[number, string]} */ [r, p]) => `[${r},${jsonString(p)}]`).join(',')}]`;
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
 * How a record is written: its type's declaration, a commit's by its piece.
 * @param {Readonly<Record<string, any>> & {type: MessageType}} m
 * @returns {Declaration}
 */
function declarationOf(m) {
  const fields = m.type === 'commit' ? COMMIT_DECLARATIONS[/** @type {'contribution' | 'reduced'} */ (m.piece)] :
    DECLARATIONS[m.type];
  if (fields === undefined) {
    throw new TypeError(m.type === 'commit' ? `unknown commit piece ${m.piece}` :
      `unknown control message type ${m.type}`);
  }
  return fields;
}

/**
 * The JSON text of a message record, byte for byte what the Python peer writes for it.
 * @param {Message} message
 * @returns {string}
 */
export function encode(message) {
  // Read field by field, by name: a record of any type (and, from JavaScript callers, anything).
  const m = /** @type {Readonly<Record<string, any>> & {type: MessageType}} */ (message);
  const fields = declarationOf(m);
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
    // Written only when there is something to say (Python's encode): audits on, an audited
    // statement quoted, audits carried. Without them a message keeps the bytes it had.
    if (k === 'audit?') {
      if (m[f] != null) body.push(`"audit":${encodeValue(m[f], AUDIT, `${m.type}.audit`)}`);
      continue;
    }
    if ((k === 'str-opt' && m[f] == null) || (k === 'carry?' && (m[f] == null || m[f].length === 0))) {
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
      audit: obj.has('audit') ? auditSpec(f) : null,
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
      shares: f.shares('shares', peers.length), carry: obj.has('carry') ? f.carry('carry') : [],
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
  if (/** @type {readonly string[]} */ (AUDIT_TYPES).includes(kind)) return auditMessage(f, kind);
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

/**
 * config.audit's shape (an object when present); its ranges are runconfig's.
 * @param {Fields} f
 * @returns {AuditSpec}
 */
function auditSpec(f) {
  const a = new Fields(f.obj('audit'), 'config.audit');
  return Object.freeze({
    one_in: a.integer('one_in', 0, U32_MAX),
    private: a.fields.has('private') ? a.text('private', MAX_AUDIT_PRIVATE_CHARS) : AUDIT_PRIVATE_DEFAULT,
  });
}

/**
 * commit, reveal, audit and proof (docs/TRUST.md, "Messages"): shapes and sizes only, checked
 * in Python's order. That a statement's fields match the roster, the state and the signature
 * is the machine's check.
 * @param {Fields} f
 * @param {string} kind
 * @returns {Message}
 */
function auditMessage(f, kind) {
  const run = f.run();
  const step = f.integer('step', 1, U32_MAX);
  const round = f.integer('round', 0, 255);
  if (kind === 'commit') {
    const peer = f.matching('peer', PEER_ID_RE, 'a peer id (1 to 32 of A-Z a-z 0-9 _ -)');
    const roster = f.hash('roster');
    const piece = f.choice('piece', COMMIT_PIECES);
    if (piece === 'reduced') {
      const chunk = f.integer('chunk', 0, MAX_ROSTER - 1);
      const digest = f.hash('digest');
      return record('commit', { run, step, round, peer, roster, piece, chunk, digest, sig: f.sig('sig') });
    }
    const prev = f.hash('prev');
    const chunks = f.digests('chunks');
    const data = f.digestOrNone('data');
    const nonceHash = f.hash('nonce_hash');
    const privateData = f.optionalFlag('private_data');
    return record('commit', {
      run, step, round, peer, roster, piece, prev, chunks, data, nonce_hash: nonceHash,
      private_data: privateData, sig: f.sig('sig'),
    });
  }
  if (kind === 'reveal') {
    const nonce = f.hash('nonce');
    const seen = f.hash('seen');
    return record('reveal', { run, step, round, nonce, seen, sig: f.sig('sig') });
  }
  if (kind === 'audit') {
    const item = f.choice('item', AUDIT_ITEMS);
    const index = f.integer('index', 0, MAX_ROSTER - 1);
    const of = f.hash('of');
    // A reduction's result is one digest (of a non-empty chunk: empty ones are no item).
    const digests = item === 'reduced' ? Object.freeze([f.hashList('digests')]) : f.digests('digests');
    const data = f.digestOrNone('data');
    const quoted = f.fields.has('statement') || f.fields.has('statement_sig');
    const statement = quoted ? f.statement('statement') : null;
    const statementSig = quoted ? f.sig('statement_sig') : null;
    return record('audit', {
      run, step, round, item, index, of, digests, data, statement, statement_sig: statementSig,
      sig: f.sig('sig'),
    });
  }
  invariant(kind === 'proof', `AUDIT_TYPES and auditMessage disagree on ${kind}`);
  const proofKind = f.choice('kind', PROOF_KINDS);
  const first = f.signed('first');
  return record('proof', { run, step, round, kind: proofKind, first, second: f.signed('second') });
}

/**
 * Python's `assert`: a rule that holds by construction.
 * @param {unknown} ok
 * @param {string} what
 * @returns {asserts ok}
 */
function invariant(ok, what) {
  if (!ok) throw new Error(`messages: broken invariant: ${what}`);
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

  /** @param {string} name */
  sig(name) {
    return this.matching(name, SIG_RE, '128 lowercase hex digits (an Ed25519 signature)');
  }

  /**
   * @param {string} name
   * @returns {string}
   */
  digestOrNone(name) {
    const value = this.fields.get(name);
    if (!(value === '' || (typeof value === 'string' && HASH_RE.test(value)))) {
      throw this.bad(name, 'a digest (64 lowercase hex digits) or "" for none');
    }
    return value;
  }

  /**
   * A commit's chunk digests: one per roster peer, each 64 hex digits or "" (none).
   * @param {string} name
   * @returns {readonly string[]}
   */
  digests(name) {
    const value = this.fields.get(name);
    if (!Array.isArray(value) || value.length < 1 || value.length > MAX_ROSTER ||
      !value.every((v) => v === '' || (typeof v === 'string' && HASH_RE.test(v)))) {
      throw this.bad(name,
        `a list of 1 to ${MAX_ROSTER} digests (64 lowercase hex digits, or "" for none)`);
    }
    return Object.freeze([...value]);
  }

  /**
   * A list holding exactly one digest (a reduction's result).
   * @param {string} name
   * @returns {string}
   */
  hashList(name) {
    const value = this.fields.get(name);
    if (!(Array.isArray(value) && value.length === 1 && typeof value[0] === 'string' &&
      HASH_RE.test(value[0]))) {
      throw this.bad(name, 'a list of one digest (64 lowercase hex digits)');
    }
    return value[0];
  }

  /**
   * @param {string} name
   * @returns {string}
   */
  statement(name) {
    const value = this.fields.get(name);
    const lo = 2 * MIN_STATEMENT_BYTES;
    const hi = 2 * MAX_STATEMENT_BYTES;
    if (!(typeof value === 'string' && pyLen(value) >= lo && pyLen(value) <= hi &&
      pyLen(value) % 2 === 0 && STATEMENT_RE.test(value))) {
      throw this.bad(name, `a statement: an even number of lowercase hex digits, ${lo} to ${hi} ` +
        `(${MIN_STATEMENT_BYTES} to ${MAX_STATEMENT_BYTES} bytes)`);
    }
    return value;
  }

  /**
   * @param {string} name
   * @returns {Signed}
   */
  signed(name) {
    const s = new Fields(this.obj(name), `${this.kind}.${name}`);
    const statement = s.statement('statement');
    return Object.freeze({ statement, sig: s.sig('sig') });
  }

  /**
   * @param {string} name
   * @returns {ReadonlyArray<readonly [number, string]>}
   */
  carry(name) {
    const value = this.fields.get(name);
    let ok = Array.isArray(value) && value.length <= MAX_CARRY;
    /** @type {(readonly [number, string])[]} */
    const pairs = [];
    for (const entry of ok && Array.isArray(value) ? value : []) {
      if (!(Array.isArray(entry) && entry.length === 2 && typeof entry[0] === 'number' &&
        Number.isInteger(entry[0]) && entry[0] >= 0 && entry[0] <= 255 &&
        typeof entry[1] === 'string' && PEER_ID_RE.test(entry[1]))) {
        ok = false;
        break;
      }
      pairs.push(Object.freeze([entry[0], entry[1]]));
    }
    if (!ok || new Set(pairs.map(([r, p]) => `${r} ${p}`)).size !== pairs.length) {
      throw this.bad(name,
        `a list of at most ${MAX_CARRY} distinct [round, peer] pairs (round 0 to 255)`);
    }
    return Object.freeze(pairs);
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
