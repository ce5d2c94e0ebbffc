// @ts-check
// The replica as the protocol machine sees it: a state with a step and a hash. Mirror of
// server/daisychain/p2p/machine/replica.py.
//
// The machine never touches weights. It asks its replica to start from a config, to restore a
// checkpoint it received, to encode one it serves, and to apply the mean gradient it assembled.
// In JavaScript these may return promises (SHA-256 is hash.js's: crypto.subtle's, asynchronous, where the page has it):
// the machine awaits each before its next decision, exactly where Python calls them
// synchronously. The interface:
//
//   get step(): number              the state's step
//   get hash(): string              64 lowercase hex digits
//   start(model, optim, seed)       a fresh state (step 0) from the run's config
//   restore(blob, source)           replace the state by checkpoint bytes; throws ReplicaRefused
//   checkpoint(): Uint8Array        the state as checkpoint bytes
//   apply(flat: Float32Array)       apply the flat mean gradient (parameter order, block padded)
//   setOuter(outer)                 optional: the run's outer loop ({innerSteps, lr, momentum},
//                                   or null for a per-step run), told before start or restore
//                                   (Python's set_outer): then `step` counts outer rounds,
//                                   `apply` takes the mean pseudo-gradient and makes the outer
//                                   step, `hash` is outer_hash (docs/PROTOCOL.md, "Outer runs")
//
// Only a replica with setOuter trains outer runs: the machine accepts a `sync: "outer"` config
// only then (runconfig's `outerRuns`). The page's replica computes one gradient per step, not H
// inner steps, so it has none and the page refuses outer runs with rule `page-outer`.
//
// The traces' replica is tests/js/traces/trace_replica.js (defined by hashing alone); the browser
// peer's is the model.

/**
 * The interface above. `start`'s model and optim are runconfig.parse's; `setOuter`'s outer its
 * `outer` (null: a per-step run).
 * @typedef {ReturnType<typeof import('../runconfig.js').parse>['outer']} OuterLoop
 * @typedef {{
 *   readonly step: number,
 *   readonly hash: string,
 *   start(model: object, optim: object, seed: number): unknown,
 *   restore(blob: Uint8Array, source: string): unknown,
 *   checkpoint(): Uint8Array | Promise<Uint8Array>,
 *   apply(flat: Float32Array): unknown,
 *   setOuter?: (outer: OuterLoop) => void,
 * }} Replica
 */

/** A checkpoint the replica cannot restore (its message says why). */
export class ReplicaRefused extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'ReplicaRefused';
  }
}

const METHODS = ['start', 'restore', 'checkpoint', 'apply'];

/**
 * Whether `replica` trains outer runs (it has the optional setOuter above).
 * @template {object} R
 * @param {R} replica
 * @returns {replica is R & {setOuter: (outer: OuterLoop) => void}}
 */
export function trainsOuterRuns(replica) {
  return typeof /** @type {{setOuter?: unknown}} */ (replica)?.setOuter === 'function';
}

/**
 * Throws TypeError unless `replica` has the interface above (checked once, at machine birth).
 * @param {any} replica  anything: it is checked here
 * @returns {Replica}
 */
export function checkReplica(replica) {
  for (const m of METHODS) {
    if (typeof replica?.[m] !== 'function') throw new TypeError(`a replica needs a ${m}() method`);
  }
  for (const p of ['step', 'hash']) {
    if (!(p in replica)) throw new TypeError(`a replica needs a ${p} property`);
  }
  return replica;
}
