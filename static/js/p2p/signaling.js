// @ts-check
// The browser's signaling connection: one WebSocket to the server's /ws (docs/PROTOCOL.md,
// "Signaling"), its messages parsed and validated here, and reconnection with backoff.
//
// Every server message is parsed by `parseServer` into a plain record (the server's
// declarations in daisychain/wire/signaling.py; the Python peer's parser is
// daisychain/p2p/signaling.py) or refused with SignalingError (what, and a hint): an unknown
// type or a malformed field is reported as an `error` event, never dropped in silence. The
// `data` another peer relays (SDP, ICE candidates) is peer-controlled: `parseSignalData`.
//
// States (one transition function, `setState`, logs "old -> new" and emits `state`):
//   idle -> connecting -> open (hello sent) -> joined | pending -> joined
//   any -> reconnecting (after an unexpected close; a timer, then connecting)
//   any -> failed (a close the server means as final: refused hello, denied, expired)
//   any -> closed (close() was called)
// A new connection gets a new id from the server: whoever owns this client (mesh.js) treats
// each `welcome` as a fresh membership.

import { DeviceInfoError, checkDevice, checkName, shownName } from './deviceinfo.js';
import { ICE_POLICIES, iceServersFrom } from './ice.js';

export const SIGNALING_VERSION = 1;
export const MAX_SDP = 60_000;
export const MAX_CANDIDATE = 1024;
const PEER_ID_RE = /^[A-Za-z0-9_-]{1,32}$/;
const ROOM_CODE_RE = /^[A-Za-z0-9_-]{6,32}$/;
// An invite token (daisychain/wire/signaling.py INVITE_TOKEN_RE; docs/PROTOCOL.md "Invite links").
export const INVITE_TOKEN_RE = /^[A-Za-z0-9_-]{16,64}$/;
export const INVITE_STATUSES = Object.freeze(['open', 'revoked', 'expired', 'used-up']);
export const MAX_INVITE_USES = 256;
export const SERVER_TYPES = Object.freeze([
  'welcome', 'pending', 'denied', 'join-request', 'join-request-closed', 'join-requests-refused',
  'invite', 'peer-joined', 'peer-left', 'host-changed', 'signal', 'broadcast', 'pong', 'error',
]);
// Close codes after which reconnecting cannot help (docs/PROTOCOL.md, "Close codes"): the hello
// was refused (version, room code, full group), its invite link was refused, the host denied us
// or never answered, or the room's requests were closed. Every other close (server restart
// 1001, network loss 1006, a slow reader 4503, out of strikes 4429) is retried with backoff.
export const FINAL_CLOSE_CODES = Object.freeze([4400, 4401, 4403, 4408, 4410]);

// The records parseServer builds, one per server message type (the server's declarations).
/**
 * @typedef {Readonly<{id: string, name: string,
 *   device: Readonly<Record<string, string | number | boolean | null>>}>} PeerInfo
 * @typedef {Readonly<{type: 'welcome', version: number, id: string,
 *   group: Readonly<{kind: 'local' | 'network' | 'room', id: string}>, role: 'host' | 'member',
 *   host: string | null, members: readonly PeerInfo[], ice_servers: readonly RTCIceServer[],
 *   ice_transport_policy: 'all' | 'relay'}>} Welcome
 * @typedef {Readonly<{type: 'pending', id: string, room: string, timeout_s: number,
 *   message: string}>} Pending
 * @typedef {Readonly<{type: 'denied', reason: 'denied' | 'timeout' | 'closed', message: string,
 *   hint: string}>} Denied
 * @typedef {Readonly<{type: 'join-request', peer: PeerInfo, expires_in_s: number}>} JoinRequest
 * @typedef {Readonly<{type: 'join-request-closed', peer: string,
 *   reason: 'approved' | 'denied' | 'timeout' | 'left' | 'dropped'}>} JoinRequestClosed
 * @typedef {Readonly<{type: 'join-requests-refused', count: number}>} JoinRequestsRefused
 * @typedef {Readonly<{type: 'invite', token: string | null, uses: number, used: number,
 *   expires_in_s: number, status: 'open' | 'revoked' | 'expired' | 'used-up'}>} Invite
 * @typedef {Readonly<{type: 'peer-joined', peer: PeerInfo}>} PeerJoined
 * @typedef {Readonly<{type: 'peer-left', peer: string}>} PeerLeft
 * @typedef {Readonly<{type: 'host-changed', host: string}>} HostChanged
 * @typedef {Readonly<{type: 'signal' | 'broadcast', from: string,
 *   data: Readonly<Record<string, unknown>>}>} Signal  relayed from another peer (parseSignalData)
 * @typedef {Readonly<{type: 'pong', nonce: string | number | null}>} Pong
 * @typedef {Readonly<{type: 'error', code: string, message: string, hint: string,
 *   ref: string | null}>} ServerError
 * @typedef {Welcome | Pending | Denied | JoinRequest | JoinRequestClosed | JoinRequestsRefused | Invite |
 *   PeerJoined | PeerLeft | HostChanged | Signal | Pong | ServerError} ServerMessage
 * @typedef {'idle' | 'connecting' | 'open' | 'pending' | 'joined' | 'reconnecting' | 'failed' |
 *   'closed'} ClientState  SignalingClient's (the states above)
 * @typedef {Readonly<{kind: 'offer' | 'answer', sdp: string}> |
 *   Readonly<{kind: 'candidate', candidate: string, sdpMid: string | null,
 *   sdpMLineIndex: number | null}>} SignalData  a relayed description or candidate
 */

/** An event with a `detail` (CustomEvent's shape; Node 18 has Event but no CustomEvent). */
export class DetailEvent extends Event {
  /**
   * @param {string} type
   * @param {any} detail  what listeners of `type` read (each emitter documents its events)
   */
  constructor(type, detail) {
    super(type);
    this.detail = detail;
  }
}

/** A server message or relayed signal this peer cannot act on. */
export class SignalingError extends Error {
  /**
   * @param {string} message
   * @param {string} hint
   */
  constructor(message, hint) {
    super(message);
    this.name = 'SignalingError';
    this.hint = hint;
  }
}

const SERVER_HINT = 'is this page served by a DaisyChain server of this version? (docs/PROTOCOL.md, Signaling)';
const PEER_HINT = 'the sending peer does not speak this version (docs/PROTOCOL.md, Peer connections)';

/**
 * @param {unknown} ok
 * @param {string} where
 * @param {string} expected
 * @param {string} [hint]
 * @returns {asserts ok}
 */
function check(ok, where, expected, hint = SERVER_HINT) {
  if (!ok) throw new SignalingError(`server message ${where} must be ${expected}`, hint);
}

/**
 * A JSON object (its fields are anything: each is checked where it is read).
 * @param {unknown} v
 * @returns {v is Record<string, any>}
 */
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
/**
 * @param {unknown} v
 * @param {number} max
 * @returns {v is string}
 */
const isText = (v, max) => typeof v === 'string' && v.length <= max;
/**
 * @param {unknown} v
 * @returns {v is string}
 */
const isId = (v) => typeof v === 'string' && PEER_ID_RE.test(v);

/**
 * @template {string} T
 * @template {object} F
 * @param {T} type
 * @param {F} fields
 * @returns {Readonly<{type: T} & F>}
 */
const record = (type, fields) => Object.freeze({ type, ...fields });

/**
 * A member or requester as this page shows it: the server's own rules for names and device
 * summaries (deviceinfo.js) hold here too, so an old or hostile server cannot show what a
 * current one refuses, and a name with nothing visible in it becomes `device-XXXX`.
 * @param {unknown} value
 * @param {string} where
 * @returns {PeerInfo}
 */
function peerInfo(value, where) {
  check(isObject(value), where, 'a peer {id, name, device}');
  check(isId(value.id), `${where}.id`, 'a peer id');
  let name;
  let device;
  try {
    name = checkName(value.name);
    device = checkDevice(value.device);
  } catch (exc) {
    if (!(exc instanceof DeviceInfoError)) throw exc;
    check(false, `${where}.${exc.field}`, exc.expected);
  }
  return Object.freeze({ id: value.id, name: shownName(name, value.id), device });
}

/**
 * One text frame from the server as a record `{type, ...}`, or SignalingError.
 * @param {unknown} raw
 * @returns {ServerMessage}
 */
export function parseServer(raw) {
  if (typeof raw !== 'string') throw new SignalingError('the server sent a binary frame', SERVER_HINT);
  if (raw.length > 1024 * 1024) throw new SignalingError('server message larger than 1 MiB', SERVER_HINT);
  let m;
  try {
    m = JSON.parse(raw);
  } catch {
    throw new SignalingError('the server sent a message that is not JSON', SERVER_HINT);
  }
  if (!isObject(m)) throw new SignalingError('the server sent a message that is not a JSON object', SERVER_HINT);
  const type = m.type;
  if (typeof type !== 'string' || !SERVER_TYPES.includes(type)) {
    throw new SignalingError(`unknown server message type ${JSON.stringify(typeof type === 'string' ? type.slice(0, 32) : null)}`,
      `a DaisyChain server sends: ${SERVER_TYPES.join(', ')} (docs/PROTOCOL.md)`);
  }
  /** @type {(name: string, max?: number) => string} */
  const text = (name, max = 1000) => {
    check(isText(m[name], max), `${type}.${name}`, `a string of at most ${max} characters`);
    return m[name];
  };
  /** @type {(name: string) => string} */
  const id = (name) => {
    check(isId(m[name]), `${type}.${name}`, 'a peer id');
    return m[name];
  };
  /** @type {<C extends string>(name: string, options: readonly C[]) => C} */
  const choice = (name, options) => {
    check(options.includes(m[name]), `${type}.${name}`, `one of ${options.join(', ')}`);
    return m[name];
  };
  /** @type {(name: string) => number} */
  const seconds = (name) => {
    check(typeof m[name] === 'number' && m[name] >= 0 && m[name] <= 86_400, `${type}.${name}`,
      'a finite number in [0.0, 86400.0]');
    return m[name];
  };
  // Each case builds its record with its own literal type (`type` is that literal there).
  /** @type {<T extends string, F extends object>(type: T, fields: F) => Readonly<{type: T} & F>} */
  const r = record;
  switch (type) {
    case 'welcome': {
      check(Number.isInteger(m.version), 'welcome.version', 'an integer in [0, 4294967295]');
      if (m.version !== SIGNALING_VERSION) {
        throw new SignalingError(
          `the server speaks signaling version ${m.version}, this page ${SIGNALING_VERSION}`,
          'reload the page: the server was updated');
      }
      check(isObject(m.group) && ['local', 'network', 'room'].includes(m.group.kind) &&
        isText(m.group.id, 64), 'welcome.group', 'a group {kind, id}');
      check(Array.isArray(m.members) && m.members.length <= 1024, 'welcome.members',
        'a list of at most 1024 peers');
      return r('welcome', {
        version: m.version, id: id('id'),
        group: /** @type {Welcome['group']} */ (Object.freeze({ ...m.group })), // checked above
        role: choice('role', ['host', 'member']), host: m.host == null ? null : id('host'),
        members: Object.freeze(m.members.map((p) => peerInfo(p, 'welcome.members[]'))),
        ice_servers: Object.freeze(iceServersFrom(m.ice_servers, (/** @type {string} */ where,
          /** @type {string} */ expected) => check(false, where, expected))),
        ice_transport_policy: m.ice_transport_policy === undefined ? 'all' : choice('ice_transport_policy', ICE_POLICIES),
      });
    }
    case 'pending':
      check(typeof m.room === 'string' && ROOM_CODE_RE.test(m.room), 'pending.room', 'a room code');
      return r('pending', { id: id('id'), room: m.room, timeout_s: seconds('timeout_s'), message: text('message') });
    case 'denied':
      return r('denied', { reason: choice('reason', ['denied', 'timeout', 'closed']), message: text('message'), hint: text('hint') });
    case 'join-request':
      return r('join-request', { peer: peerInfo(m.peer, 'join-request.peer'), expires_in_s: seconds('expires_in_s') });
    case 'join-request-closed':
      return r('join-request-closed', { peer: id('peer'), reason: choice('reason', ['approved', 'denied', 'timeout', 'left', 'dropped']) });
    case 'join-requests-refused':
      check(Number.isSafeInteger(m.count) && m.count >= 1, 'join-requests-refused.count',
        'an integer in [1, 9007199254740991]');
      return r('join-requests-refused', { count: m.count });
    case 'invite': {
      check(m.token === null || (typeof m.token === 'string' && INVITE_TOKEN_RE.test(m.token)),
        'invite.token', 'an invite token or null');
      check(Number.isInteger(m.uses) && m.uses >= 1 && m.uses <= MAX_INVITE_USES, 'invite.uses',
        `an integer in [1, ${MAX_INVITE_USES}]`);
      check(Number.isInteger(m.used) && m.used >= 0 && m.used <= MAX_INVITE_USES, 'invite.used',
        `an integer in [0, ${MAX_INVITE_USES}]`);
      check(typeof m.expires_in_s === 'number' && m.expires_in_s >= 0 && m.expires_in_s <= 366 * 86_400,
        'invite.expires_in_s', 'a finite number in [0.0, 31622400.0]');
      return r('invite', { token: /** @type {string | null} */ (m.token), uses: /** @type {number} */ (m.uses),
        used: /** @type {number} */ (m.used), expires_in_s: /** @type {number} */ (m.expires_in_s),
        status: /** @type {Invite['status']} */ (choice('status', INVITE_STATUSES)) });
    }
    case 'peer-joined':
      return r('peer-joined', { peer: peerInfo(m.peer, 'peer-joined.peer') });
    case 'peer-left':
      return r('peer-left', { peer: id('peer') });
    case 'host-changed':
      return r('host-changed', { host: id('host') });
    case 'signal':
    case 'broadcast':
      check(isObject(m.data), `${type}.data`, 'a JSON object');
      return r(type, { from: id('from'), data: m.data });
    case 'pong':
      check(m.nonce == null || typeof m.nonce === 'string' || Number.isInteger(m.nonce), 'pong.nonce',
        'a string, an integer or null');
      return r('pong', { nonce: m.nonce ?? null });
    default: // 'error'
      check(m.ref == null || isText(m.ref, 32), 'error.ref', 'a message type or null');
      return r('error', { code: text('code', 32), message: text('message'), hint: text('hint'), ref: m.ref ?? null });
  }
}

/**
 * The `data` of a relayed signal (docs/PROTOCOL.md, "Peer connections"): a description
 * `{kind: 'offer'|'answer', sdp}` or a trickled candidate `{kind: 'candidate', candidate,
 * sdpMid, sdpMLineIndex}`; SignalingError otherwise.
 * @param {unknown} data
 * @returns {SignalData}
 */
export function parseSignalData(data) {
  const bad = (/** @type {string} */ name, /** @type {string} */ expected) =>
    new SignalingError(`relayed signal.data.${name} must be ${expected}`, PEER_HINT);
  if (!isObject(data)) throw bad('', 'a JSON object');
  if (data.kind === 'offer' || data.kind === 'answer') {
    if (!isText(data.sdp, MAX_SDP)) throw bad('sdp', `a string of at most ${MAX_SDP} characters`);
    return Object.freeze({ kind: data.kind, sdp: data.sdp });
  }
  if (data.kind === 'candidate') {
    if (!isText(data.candidate, MAX_CANDIDATE)) throw bad('candidate', `a string of at most ${MAX_CANDIDATE} characters`);
    if (!(data.sdpMid == null || isText(data.sdpMid, 64))) throw bad('sdpMid', 'a string or null');
    if (!(data.sdpMLineIndex == null || (Number.isInteger(data.sdpMLineIndex) && data.sdpMLineIndex >= 0 &&
      data.sdpMLineIndex < 65536))) throw bad('sdpMLineIndex', 'an integer in [0, 65535] or null');
    return Object.freeze({
      kind: 'candidate', candidate: data.candidate, sdpMid: data.sdpMid ?? null,
      sdpMLineIndex: data.sdpMLineIndex ?? null,
    });
  }
  throw bad('kind', 'one of offer, answer, candidate');
}

/**
 * A [0, 1) generator from an explicit seed (xorshift32), for reproducible backoff jitter.
 * @param {number} seed
 * @returns {() => number}
 */
export function seededRandom(seed) {
  let s = seed >>> 0 || 0x9e3779b9;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 2 ** 32;
  };
}

/**
 * Reconnect delays: attempt n (0-based) waits a uniformly jittered share of
 * min(maxMs, initialMs * factor^n), between half of it and all of it ("equal jitter"), so many
 * pages that lost the same server do not all come back in the same millisecond.
 */
export class Backoff {
  /**
   * @param {{initialMs?: number, maxMs?: number, factor?: number, random?: () => number}} [options]
   */
  constructor({ initialMs = 500, maxMs = 15_000, factor = 2, random = Math.random } = {}) {
    if (!(initialMs > 0 && maxMs >= initialMs && factor >= 1)) {
      throw new RangeError(`backoff needs 0 < initialMs <= maxMs and factor >= 1, got ${initialMs}, ${maxMs}, ${factor}`);
    }
    this.initialMs = initialMs;
    this.maxMs = maxMs;
    this.factor = factor;
    this.random = random;
    this.attempt = 0;
  }

  next() {
    const cap = Math.min(this.maxMs, this.initialMs * this.factor ** this.attempt);
    this.attempt++;
    return cap / 2 + (cap / 2) * this.random();
  }

  reset() {
    this.attempt = 0;
  }
}

/**
 * The URL of the server's /ws for a page or server URL, with the room code if any.
 * @param {string | URL} server
 * @param {string | null} [room]
 */
export function wsUrl(server, room = null) {
  const url = new URL(server);
  url.protocol = url.protocol === 'https:' || url.protocol === 'wss:' ? 'wss:' : 'ws:';
  if (!url.pathname.endsWith('/ws')) url.pathname = `${url.pathname.replace(/\/$/, '')}/ws`;
  url.search = room ? `?room=${encodeURIComponent(room)}` : '';
  url.hash = '';
  return url.href;
}

/**
 * The signaling connection. Events (DetailEvent, `detail`):
 *   state   {state, old, ...}   every transition (reconnecting adds {delayMs, attempt, reason})
 *   message {message}           a parsed server record (after the socket says hello)
 *   error   {message, hint}     a server message this page cannot parse, or a refused hello
 */
export class SignalingClient extends EventTarget {
  /**
   * @param {object} o
   * @param {string | URL} o.server  the page's or the server's URL
   * @param {string | null} [o.room]  the room code to join (null: the address group)
   * @param {string | null} [o.invite]  an invite token of that room (its link's #invite=):
   *   admitted without the host's click; sent again by a reconnect's hello, which spends a use
   * @param {string} [o.name]  said in hello (at most 40 characters are sent)
   * @param {Record<string, unknown>} [o.device]  the device summary said in hello
   * @param {Backoff | ConstructorParameters<typeof Backoff>[0]} [o.backoff]
   * @param {typeof WebSocket} [o.WebSocketImpl]
   * @param {(text: string) => void} [o.log]
   */
  constructor({ server, room = null, invite = null, name = '', device = { kind: 'browser' }, backoff = {},
    WebSocketImpl = globalThis.WebSocket, log = () => {} }) {
    super();
    this.url = wsUrl(server, room);
    // 40 code points, as the server counts: a cut in UTF-16 units could leave half an emoji, a
    // lone surrogate the server refuses.
    this.hello = { type: 'hello', version: SIGNALING_VERSION, name: [...name].slice(0, 40).join(''), device,
      ...(invite === null ? {} : { invite }) };
    this.backoff = backoff instanceof Backoff ? backoff : new Backoff(backoff);
    this.WebSocketImpl = WebSocketImpl;
    this.log = log;
    /** @type {ClientState} */
    this.state = 'idle';
    /** @type {WebSocket | null} */
    this.ws = null;
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.timer = null;
    this.connections = 0; // sockets opened so far (the first is not a reconnect)
  }

  /**
   * @param {ClientState} state
   * @param {object} [detail]
   */
  setState(state, detail = {}) {
    const old = this.state;
    if (old === state || old === 'closed') return;
    this.state = state;
    this.log(`signaling ${old} -> ${state}`);
    this.dispatchEvent(new DetailEvent('state', { state, old, ...detail }));
  }

  start() {
    if (this.state !== 'idle') throw new Error(`start() in state ${this.state}`);
    this.connect();
  }

  connect() {
    this.timer = null;
    this.setState('connecting', { attempt: this.backoff.attempt });
    let ws;
    try {
      ws = new this.WebSocketImpl(this.url);
    } catch (/** @type {any} */ exc) { // the constructor's SyntaxError (a bad URL), or any error
      this.lost(`cannot open ${this.url}: ${exc.message}`, null);
      return;
    }
    this.ws = ws;
    this.connections++;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      ws.send(JSON.stringify(this.hello));
      this.setState('open');
    };
    ws.onmessage = (e) => {
      if (this.ws !== ws) return;
      let msg;
      try {
        msg = parseServer(e.data);
      } catch (/** @type {any} */ exc) { // a SignalingError, or a bug: shown either way
        this.emitError(exc.message, exc.hint);
        return;
      }
      if (msg.type === 'welcome') {
        this.backoff.reset();
        this.setState('joined', { id: msg.id });
      } else if (msg.type === 'pending') {
        this.setState('pending', { room: msg.room });
      } else if (msg.type === 'denied') {
        this.emitError(msg.message, msg.hint);
      } else if (msg.type === 'error' && (this.state === 'open' || this.state === 'pending')) {
        this.emitError(`the server refused this page: ${msg.code}: ${msg.message}`, msg.hint);
      }
      this.dispatchEvent(new DetailEvent('message', { message: msg }));
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.lost(`the server closed the connection (code ${e.code}${e.reason ? `: ${e.reason}` : ''})`, e.code);
    };
    // A failed connect fires error then close; close decides what happens next.
    ws.onerror = () => {};
  }

  /**
   * @param {string} reason
   * @param {number | null} code  the close code (null: the socket never opened)
   */
  lost(reason, code) {
    if (this.state === 'closed') return;
    if (code !== null && FINAL_CLOSE_CODES.includes(code)) {
      this.emitError(reason, 'reload the page to try again; a room host may have to approve you');
      this.setState('failed', { reason, code });
      return;
    }
    const delayMs = this.backoff.next();
    this.setState('reconnecting', { reason, code, delayMs, attempt: this.backoff.attempt });
    this.timer = setTimeout(() => this.connect(), delayMs);
  }

  /**
   * @param {string} message
   * @param {string} hint
   */
  emitError(message, hint) {
    this.dispatchEvent(new DetailEvent('error', { message, hint }));
  }

  /**
   * Send a client message (an object); false when the socket is not open.
   * @param {object} message
   */
  send(message) {
    if (this.ws === null || this.ws.readyState !== 1) return false;
    this.ws.send(JSON.stringify(message));
    return true;
  }

  close() {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const ws = this.ws;
    this.ws = null;
    this.setState('closed');
    if (ws !== null) ws.close(1000, 'page closed');
  }
}
