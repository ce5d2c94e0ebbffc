// @ts-check
// What the protocol machine is fed (docs/PROTOCOL.md, "The protocol machine"). Mirror of
// server/daisychain/p2p/machine/events.py: one frozen record per event, `type` naming it as the
// conformance traces do, every one carrying `now` (seconds on the shell's monotonic clock). The
// machine never reads a clock, so the same events with the same `now` produce the same effects
// on every platform; tests/vectors/protocol/ holds exactly such sequences.

/** @typedef {import('../messages.js').Config} Config */

/**
 * @template {string} T
 * @template {object} F
 * @param {T} type
 * @param {F} fields
 * @returns {Readonly<{type: T} & F>}
 */
const ev = (type, fields) => Object.freeze({ type, ...fields });

export const EVENT_TYPES = Object.freeze([
  'channel-open', 'channel-closed', 'peer-left', 'message', 'frame', 'compute-done',
  'compute-partial', 'compute-failed', 'timer', 'lead', 'user-stop', 'user-leave', 'user-save',
  'user-private-data', 'signaling-lost',
]);

/**
 * The data channel to `peer` is open (this peer sends `hello` on it).
 * @param {number} now
 * @param {string} peer
 */
export const channelOpened = (now, peer) => ev('channel-open', { now, peer });
/**
 * The data channel to `peer` closed: the peer is gone.
 * @param {number} now
 * @param {string} peer
 */
export const channelClosed = (now, peer) => ev('channel-closed', { now, peer });
/**
 * The signaling server says `peer` left (after the shell's grace for its channel).
 * @param {number} now
 * @param {string} peer
 */
export const peerLeft = (now, peer) => ev('peer-left', { now, peer });
/**
 * A text (control) message from `peer`, exactly as received (parsed by the machine).
 * @param {number} now
 * @param {string} peer
 * @param {string} text
 */
export const messageReceived = (now, peer, text) => ev('message', { now, peer, text });
/**
 * A binary message (one frame, a Uint8Array) from `peer`, exactly as received.
 * @param {number} now
 * @param {string} peer
 * @param {Uint8Array} data
 */
export const frameReceived = (now, peer, data) => ev('frame', { now, peer, data });
/**
 * The gradient a `compute` effect asked for: one quantized chunk payload (Uint8Array) per
 * roster peer (`payloads[k]` goes to the owner of chunk k; ours stays; empty bytes for an empty
 * chunk, all of them with a share of 0), the batch loss, the kernel probe of the backend that
 * computed it, and the shell's smoothed seconds per sequence (0: never measured).
 * @param {number} now
 * @param {number} step
 * @param {number} round
 * @param {number} loss
 * @param {readonly Uint8Array[]} payloads
 * @param {string} probe
 * @param {number} [seqS]
 */
export const computeDone = (now, step, round, loss, payloads, probe, seqS = 0) =>
  ev('compute-done', {
    now, step, round, loss, payloads: Object.freeze([...payloads]), probe, seq_s: seqS,
  });
/**
 * Chunk `chunk` of the gradient a `compute` effect asked for is final before the rest (the
 * backward produces the last layers first): its payload (Uint8Array), exactly the bytes the
 * `compute-done` that follows carries for it. A contribution leaves at once; our own chunk lets
 * the reduction start while the backward goes on.
 * @param {number} now
 * @param {number} step
 * @param {number} round
 * @param {number} chunk
 * @param {Uint8Array} payload
 */
export const computePartial = (now, step, round, chunk, payload) =>
  ev('compute-partial', { now, step, round, chunk, payload });
/**
 * @param {number} now
 * @param {number} step
 * @param {number} round
 * @param {string} error
 */
export const computeFailed = (now, step, round, error) =>
  ev('compute-failed', { now, step, round, error });
/**
 * The deadline the machine last announced (nextDeadline()) has passed.
 * @param {number} now
 */
export const timer = (now) => ev('timer', { now });
/**
 * This peer leads the run `config` (a parsed `config` record); its replica is already at the
 * config's state (fresh or restored by the shell). The first roster needs `minPeers` peers.
 * @param {number} now
 * @param {Config} config
 * @param {number} minPeers
 */
export const userLead = (now, config, minPeers) => ev('lead', { now, config, minPeers });
/**
 * The leader's user ends the run at the next step boundary (`stop leader-request`).
 * @param {number} now
 * @param {string} reason
 */
export const userStop = (now, reason) => ev('user-stop', { now, reason });
/**
 * This peer's user leaves: `leave` to every peer, then finish.
 * @param {number} now
 * @param {string} reason
 */
export const userLeave = (now, reason) => ev('user-leave', { now, reason });
/**
 * Save now; a leader also asks every peer to save this step.
 * @param {number} now
 */
export const userSave = (now) => ev('user-save', { now });
/**
 * This peer's user trains on text only this device holds (`on`), or stops (docs/PROTOCOL.md,
 * "Private data"). Taken only before a run is configured: the `ready` or `sync-request` this
 * peer sends says it, and a run keeps what it was told.
 * @param {number} now
 * @param {unknown} on
 */
export const userPrivateData = (now, on) => ev('user-private-data', { now, on: Boolean(on) });
/**
 * @param {number} now
 * @param {string} reason
 */
export const signalingLost = (now, reason) => ev('signaling-lost', { now, reason });

/**
 * @typedef {ReturnType<typeof channelOpened>} ChannelOpened
 * @typedef {ReturnType<typeof channelClosed>} ChannelClosed
 * @typedef {ReturnType<typeof peerLeft>} PeerLeft
 * @typedef {ReturnType<typeof messageReceived>} MessageReceived
 * @typedef {ReturnType<typeof frameReceived>} FrameReceived
 * @typedef {ReturnType<typeof computeDone>} ComputeDone
 * @typedef {ReturnType<typeof computePartial>} ComputePartial
 * @typedef {ReturnType<typeof computeFailed>} ComputeFailed
 * @typedef {ReturnType<typeof timer>} Timer
 * @typedef {ReturnType<typeof userLead>} UserLead
 * @typedef {ReturnType<typeof userStop>} UserStop
 * @typedef {ReturnType<typeof userLeave>} UserLeave
 * @typedef {ReturnType<typeof userSave>} UserSave
 * @typedef {ReturnType<typeof userPrivateData>} UserPrivateData
 * @typedef {ReturnType<typeof signalingLost>} SignalingLost
 * @typedef {ChannelOpened | ChannelClosed | PeerLeft | MessageReceived | FrameReceived |
 *   ComputeDone | ComputePartial | ComputeFailed | Timer | UserLead | UserStop | UserLeave |
 *   UserSave | UserPrivateData | SignalingLost} Event  what Machine.handle takes
 */
