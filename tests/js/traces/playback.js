// @ts-check
// Replaying a conformance trace (tests/vectors/protocol/*.json) on the JavaScript machine: what
// tests/vectors/README.md "Protocol traces" asks of every implementation. Mirror of
// tests/protocol_traces/playback.py, in Node and in the browser alike.
//
// Every event is fed with `now = at`; the effects must equal the trace's in order, each compared
// as a JSON value (key order and number spelling do not matter), a payload by its header fields,
// length and SHA-256; then the next deadline must equal the trace's. The first difference throws
// TraceMismatch naming the trace, the step, the event and the exact field that differs.

import { Machine } from '../../../static/js/p2p/machine/machine.js';
import { settings } from '../../../static/js/p2p/machine/settings.js';
import { DATA_PROTOCOL_VERSION, FRAME_VERSION } from '../../../static/js/p2p/versions.js';
import { effectToJson, eventFromJson } from './jsonform.js';
import { TraceReplica } from './trace_replica.js';

export const FORMAT = 'daisychain-protocol-trace';
export const FORMAT_VERSION = 1;

/** The machine's effects differ from the trace's (the message names the trace and the step). */
export class TraceMismatch extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'TraceMismatch';
  }
}

/**
 * The machine a trace's `setup` describes, with the trace replica (what a replayer builds).
 * @param {Record<string, any>} setup  a trace's `setup` (settings checks its fields)
 * @param {ConstructorParameters<typeof Machine>[2]} [options]
 */
export function buildMachine(setup, options = {}) {
  const s = settings({
    id: setup.id, name: setup.name, tokenizer_sha256: setup.tokenizer_sha256,
    vocab_size: setup.vocab_size, backend: setup.backend, reference_probe: setup.reference_probe,
    timers: setup.timers, can_save: setup.can_save, save_every: setup.save_every,
    limits: setup.limits,
  });
  const state = setup.replica;
  const replica = state === null ? new TraceReplica() : new TraceReplica(state.step, state.hash);
  return new Machine(s, replica, options);
}

const show = (/** @type {unknown} */ v) => (v === undefined ? 'nothing' : JSON.stringify(v));
/**
 * @param {unknown} v
 * @returns {v is Record<string, unknown>}
 */
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * Where two JSON values first differ (`path: expected X, got Y`), or null when equal.
 * @param {unknown} expected
 * @param {unknown} got
 * @param {string} [path]
 * @returns {string | null}
 */
export function firstDifference(expected, got, path = '') {
  if (Array.isArray(expected) && Array.isArray(got)) {
    const n = Math.min(expected.length, got.length);
    for (let i = 0; i < n; i++) {
      const d = firstDifference(expected[i], got[i], `${path}[${i}]`);
      if (d !== null) return d;
    }
    if (expected.length !== got.length) {
      const i = n;
      return `${path}: expected ${expected.length} items, got ${got.length} (${path}[${i}]: ` +
        `expected ${show(expected[i])}, got ${show(got[i])})`;
    }
    return null;
  }
  if (isObject(expected) && isObject(got)) {
    const keys = [...new Set([...Object.keys(expected), ...Object.keys(got)])];
    for (const k of keys) {
      const d = firstDifference(expected[k], got[k], path ? `${path}.${k}` : k);
      if (d !== null) return d;
    }
    return null;
  }
  return Object.is(expected, got) || expected === got ? null : `${path}: expected ${show(expected)}, got ${show(got)}`;
}

/**
 * Feed every event of `trace` (a parsed JSON object); throw TraceMismatch at the first effect or
 * deadline that differs. Resolves to the number of events replayed. `options.build(setup)` may
 * supply another machine (a test plants a bug that way).
 * @param {any} trace  a parsed JSON file (checked here)
 * @param {{build?: (setup: Record<string, any>) => Machine}} [options]
 * @returns {Promise<number>}
 */
export async function replay(trace, { build = buildMachine } = {}) {
  const name = trace?.name ?? '?';
  if (trace?.format !== FORMAT || trace?.format_version !== FORMAT_VERSION) {
    throw new TraceMismatch(`${name}: not a ${FORMAT} version ${FORMAT_VERSION} file`);
  }
  if (trace.protocol_version !== DATA_PROTOCOL_VERSION) {
    throw new TraceMismatch(`${name}: written for protocol ${trace.protocol_version}, this ` +
      `machine speaks ${DATA_PROTOCOL_VERSION}`);
  }
  if (trace.frame_version !== FRAME_VERSION) {
    throw new TraceMismatch(`${name}: written for frame version ${trace.frame_version}, this ` +
      `machine frames ${FRAME_VERSION}`);
  }
  const machine = build(trace.setup);
  for (const [i, step] of trace.steps.entries()) {
    const where = `${name}: step ${i} (${step.event.event} at ${step.event.at})`;
    const got = [];
    for (const f of await machine.handle(eventFromJson(step.event))) got.push(await effectToJson(f));
    const diff = firstDifference(step.effects, got, 'effects');
    if (diff !== null) throw new TraceMismatch(`${where}: ${diff}`);
    const deadline = machine.nextDeadline();
    if (deadline !== step.deadline) {
      throw new TraceMismatch(`${where}: next deadline ${deadline}, expected ${step.deadline}`);
    }
  }
  return trace.steps.length;
}
