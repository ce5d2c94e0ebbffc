// @ts-check
// Events and effects as JSON: the body of a conformance trace (tests/vectors/README.md, "Protocol
// traces"). Mirror of tests/protocol_traces/jsonform.py. Binary data is base64; a payload
// an effect sends is named by its length and SHA-256 (its bytes are the machine's output; the
// framing around them, deflate included, is the shell's).

import { sha256Hex } from '../../../static/js/numerics/hash.js';
import { encode, parse as parseMessage } from '../../../static/js/p2p/messages.js';
import * as ev from '../../../static/js/p2p/machine/events.js';

/**
 * @typedef {import('../../../static/js/p2p/machine/events.js').Event} Event
 * @typedef {import('../../../static/js/p2p/machine/effects.js').Effect} Effect
 */

/** @param {Uint8Array} bytes */
export function b64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

/** @param {string} text */
export function unb64(text) {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

/**
 * A message record as the JSON value Python's `json.loads(messages.encode(m))` gives.
 * @param {import('../../../static/js/p2p/messages.js').Message} m
 * @returns {Record<string, unknown>}
 */
export function messageJson(m) {
  return JSON.parse(encode(m));
}

/**
 * The machine event a trace step's `event` object describes.
 * @param {Record<string, any>} obj  a trace step's `event` (a TypeError when it is no event)
 * @returns {Event}
 */
export function eventFromJson(obj) {
  const now = Number(obj.at);
  switch (obj.event) {
    case 'channel-open': return ev.channelOpened(now, obj.peer);
    case 'channel-closed': return ev.channelClosed(now, obj.peer);
    case 'peer-left': return ev.peerLeft(now, obj.peer);
    case 'message': return ev.messageReceived(now, obj.peer, obj.text);
    case 'frame': return ev.frameReceived(now, obj.peer, unb64(obj.data));
    case 'compute-done':
      return ev.computeDone(now, obj.step, obj.round, Number(obj.loss), obj.payloads.map(unb64),
        obj.probe, Number(obj.seq_s));
    case 'compute-partial':
      return ev.computePartial(now, obj.step, obj.round, obj.chunk, unb64(obj.payload));
    case 'compute-failed': return ev.computeFailed(now, obj.step, obj.round, obj.error);
    case 'timer': return ev.timer(now);
    case 'lead': {
      const config = parseMessage(JSON.stringify(obj.config));
      if (config.type !== 'config') throw new TypeError('a lead event carries a config message');
      return ev.userLead(now, config, obj.min_peers);
    }
    case 'user-stop': return ev.userStop(now, obj.reason);
    case 'user-leave': return ev.userLeave(now, obj.reason);
    case 'user-save': return ev.userSave(now);
    case 'user-private-data': return ev.userPrivateData(now, Boolean(obj.on));
    case 'signaling-lost': return ev.signalingLost(now, obj.reason);
    default: throw new TypeError(`unknown trace event ${JSON.stringify(obj.event)}`);
  }
}

/**
 * The trace's JSON form of an event (the inverse of eventFromJson).
 * @param {Event} e
 * @returns {Record<string, unknown>}
 */
export function eventToJson(e) {
  const at = { at: e.now, event: e.type };
  switch (e.type) {
    case 'channel-open': case 'channel-closed': case 'peer-left': return { ...at, peer: e.peer };
    case 'message': return { ...at, peer: e.peer, text: e.text };
    case 'frame': return { ...at, peer: e.peer, data: b64(e.data) };
    case 'compute-done':
      return { ...at, step: e.step, round: e.round, loss: e.loss, probe: e.probe,
        payloads: e.payloads.map(b64), seq_s: e.seq_s };
    case 'compute-partial':
      return { ...at, step: e.step, round: e.round, chunk: e.chunk, payload: b64(e.payload) };
    case 'compute-failed': return { ...at, step: e.step, round: e.round, error: e.error };
    case 'timer': case 'user-save': return at;
    case 'lead': return { ...at, config: messageJson(e.config), min_peers: e.minPeers };
    case 'user-private-data': return { ...at, on: e.on };
    default: return { ...at, reason: e.reason }; // user-stop, user-leave, signaling-lost
  }
}

/**
 * The trace's JSON form of an effect (async: a payload is named by its SHA-256).
 * @param {Effect} f
 * @returns {Promise<Record<string, unknown>>}
 */
export async function effectToJson(f) {
  switch (f.type) {
    case 'send-message':
      return { effect: 'send-message', peer: f.peer, message: messageJson(f.message) };
    case 'send-payload':
      return {
        effect: 'send-payload', peer: f.peer, kind: f.kind, step: f.step, round: f.round,
        chunk: f.chunk, transfer: f.transfer, deflate: f.deflate, bytes: f.payload.length,
        sha256: await sha256Hex(f.payload),
      };
    case 'close': return { effect: 'close', peer: f.peer };
    case 'compute':
      return { effect: 'compute', step: f.step, round: f.round, rank: f.rank, shares: [...f.shares] };
    case 'save': return { effect: 'save', step: f.step };
    case 'step-applied':
      return {
        effect: 'step-applied', step: f.step, round: f.round, loss: f.loss, hash: f.hash,
        roster: [...f.roster], shares: [...f.shares], probe: f.probe, backend: f.backend,
        leader: f.leader,
      };
    case 'finished': {
      const o = f.outcome;
      return {
        effect: 'finished', reason: o.reason, step: o.step, hash: o.hash, message: o.message,
        hashes: Object.fromEntries(o.hashes), code: o.code,
      };
    }
    // (from an untyped caller: every Effect type has its case above)
    default: throw new TypeError(`unknown machine effect ${String(/** @type {{type?: unknown}} */ (f).type)}`);
  }
}
