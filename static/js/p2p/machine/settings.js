// @ts-check
// What a protocol machine is given at birth: who it is and its timers. Mirror of
// server/daisychain/p2p/machine/settings.py (field names in snake_case, as the traces' `setup`).

import { limits } from '../runconfig.js';

const TIMER_DEFAULTS = Object.freeze({
  step_timeout_s: 60.0, // leader: a roster step not complete by then is re-decided
  repair_after_s: 10.0, // a piece still missing after this is requested again
  hello_timeout_s: 20.0, // a channel without a valid hello by then is closed
  // A stopping peer keeps its channels open until every peer acknowledged the stop (its own
  // `stop`, its channel closing, or the server's peer-left), at most this long.
  linger_s: 10.0,
});

/** @typedef {keyof typeof TIMER_DEFAULTS} TimerName */

/**
 * Protocol timers in seconds (shortened in tests).
 * @param {Partial<Record<TimerName, number>>} [fields]  any other name is a TypeError
 */
export function timers(fields = {}) {
  /** @type {Record<TimerName, number>} */
  const out = { ...TIMER_DEFAULTS };
  for (const [key, value] of Object.entries(fields)) {
    const name = /** @type {TimerName} */ (key); // checked on the next line
    if (!(name in TIMER_DEFAULTS)) throw new TypeError(`unknown timer ${name}`);
    if (!(typeof value === 'number' && Number.isFinite(value) && value >= 0)) {
      throw new RangeError(`timer ${name} must be a finite number of seconds >= 0, got ${value}`);
    }
    out[name] = value;
  }
  return Object.freeze(out);
}

/**
 * {id, name, tokenizer_sha256, vocab_size, backend, reference_probe, timers, can_save,
 * save_every, limits, data_sources}: `id` is this peer's server-assigned id, `name` is shown to other peers in
 * hello (at most 40 characters are sent), `backend` is published with every hash,
 * `reference_probe` is what every device's kernel probe must equal, `can_save` says this peer has
 * a checkpoint path, `save_every` also saves every that many steps, `limits` are the caps on
 * what a leader may impose on this peer (runconfig.limits).
 * @param {{id: string, name: string, tokenizer_sha256: string, vocab_size: number,
 *   backend: string, reference_probe: string, timers?: Partial<Record<TimerName, number>>,
 *   can_save?: boolean, save_every?: number, limits?: object,
 *   data_sources?: readonly string[]}} fields
 */
export function settings(fields) {
  const strings = /** @type {const} */ (
    ['id', 'name', 'tokenizer_sha256', 'backend', 'reference_probe']);
  for (const name of strings) {
    if (typeof fields[name] !== 'string') throw new TypeError(`settings.${name} must be a string`);
  }
  if (!Number.isSafeInteger(fields.vocab_size)) throw new TypeError('settings.vocab_size must be an integer');
  return Object.freeze({
    id: fields.id,
    name: fields.name,
    tokenizer_sha256: fields.tokenizer_sha256,
    vocab_size: fields.vocab_size,
    backend: fields.backend,
    reference_probe: fields.reference_probe,
    timers: timers(fields.timers ?? {}),
    can_save: Boolean(fields.can_save ?? false),
    save_every: fields.save_every ?? 0,
    limits: limits(fields.limits ?? {}),
    // The config.data names this peer can read (runconfig's "data" rule).
    data_sources: Object.freeze([...(fields.data_sources ?? ['builtin'])]),
  });
}

/** @typedef {ReturnType<typeof settings>} Settings */
