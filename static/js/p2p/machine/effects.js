// @ts-check
// What the protocol machine asks its shell to do (docs/PROTOCOL.md, "The protocol machine").
// Mirror of server/daisychain/p2p/machine/effects.py: one frozen record per effect, `type`
// naming it. The shell executes effects in the order the machine returned them: messages and
// payloads to one peer leave in that order (a checkpoint precedes the roster that follows it).
// `send-message`, `send-payload` and `close` have the shapes mesh.js's `apply(effect)` takes.

/**
 * @typedef {import('../messages.js').Message} Message
 * @typedef {import('../frames.js').Kind} FrameKind
 */

/**
 * @template {string} T
 * @template {object} F
 * @param {T} type
 * @param {F} fields
 * @returns {Readonly<{type: T} & F>}
 */
const fx = (type, fields) => Object.freeze({ type, ...fields });

/**
 * Encode `message` (messages.encode) and queue it on the channel to `peer`.
 * @param {string} peer
 * @param {Message} message
 */
export const sendMessage = (peer, message) => fx('send-message', { peer, message });

/**
 * Frame `payload` (frames.fragment, deflate-raw when `deflate`) with exactly these header
 * fields and queue it. Every header field but the per-fragment ones (total, offset, crc) is
 * chosen by the machine.
 * @param {string} peer
 * @param {FrameKind} kind
 * @param {number} step
 * @param {number} round
 * @param {number} chunk
 * @param {number} transfer
 * @param {boolean} deflate
 * @param {Uint8Array} payload
 */
export const sendPayload = (peer, kind, step, round, chunk, transfer, deflate, payload) =>
  fx('send-payload', { peer, kind, step, round, chunk, transfer, deflate, payload });

/**
 * Close the channel to `peer` (it was rejected or speaks another version).
 * @param {string} peer
 */
export const close = (peer) => fx('close', { peer });

/**
 * Compute this replica's mean gradient of step `step` (its state is at step - 1) over its
 * positions as roster rank `rank` of a roster with these `shares` (only the kernel probe for a
 * share of 0), cut into the roster's chunks, and answer with a `compute-done` or
 * `compute-failed` event. `peers` is the roster's size (Python's `Compute.peers` property).
 * @param {number} step
 * @param {number} round
 * @param {number} rank
 * @param {readonly number[]} shares
 */
export const compute = (step, round, rank, shares) =>
  fx('compute', { step, round, rank, shares: Object.freeze([...shares]), peers: shares.length });

/**
 * Save the replica (it is at `step`) to this peer's checkpoint path.
 * @param {number} step
 */
export const save = (step) => fx('save', { step });

/**
 * @param {number} step
 * @param {number} round
 * @param {number} loss
 * @param {string} hash
 * @param {readonly string[]} roster
 * @param {readonly number[]} shares
 * @param {string} probe
 * @param {string} backend
 * @param {string} leader  '' when none
 */
export const stepApplied = (step, round, loss, hash, roster, shares, probe, backend, leader) =>
  fx('step-applied', {
    step, round, loss, hash, roster: Object.freeze([...roster]), shares: Object.freeze([...shares]),
    probe, backend, leader,
  });

/**
 * How the run ended for this peer: `reason` done | fork | error | left | leader-request;
 * `hashes` a Map peer -> hash; `code` a machine-readable cause for errors ('' if none).
 * @param {string} reason
 * @param {number} step
 * @param {string} hash
 * @param {string} message
 * @param {ReadonlyMap<string, string>} [hashes]
 * @param {string} [code]
 */
export function outcome(reason, step, hash, message, hashes = new Map(), code = '') {
  return Object.freeze({ reason, step, hash, message, hashes: new Map(hashes), code });
}

/**
 * The run is over and every peer acknowledged the stop (or the linger ran out): the shell
 * drains its send buffers, closes and reports `outcome`.
 * @param {Outcome} result
 */
export const finished = (result) => fx('finished', { outcome: result });

/**
 * @typedef {ReturnType<typeof outcome>} Outcome
 * @typedef {ReturnType<typeof sendMessage>} SendMessage
 * @typedef {ReturnType<typeof sendPayload>} SendPayload
 * @typedef {ReturnType<typeof close>} Close
 * @typedef {ReturnType<typeof compute>} Compute
 * @typedef {ReturnType<typeof save>} SaveEffect
 * @typedef {ReturnType<typeof stepApplied>} StepApplied
 * @typedef {ReturnType<typeof finished>} Finished
 * @typedef {SendMessage | SendPayload | Close | Compute | SaveEffect | StepApplied |
 *   Finished} Effect  what Machine.handle resolves to, in order
 */
