// @ts-check
// The trace replica: the state a conformance trace's machine steers, defined by hashing alone
// (tests/vectors/README.md, "Protocol traces"). Mirror of tests/protocol_traces/trace_replica.py,
// written from the README's rules:
//
// - start(model, optim, seed): step 0, hash = SHA-256 of the ASCII text
//   `daisychain-trace init seed=<seed>`;
// - apply(flat): step + 1, hash = SHA-256 of (the previous hash as 64 ASCII hex digits, then the
//   flat mean gradient as little-endian float32 bytes);
// - checkpoint(): `DCTRACE1`, the step as u32 little-endian, the hash as 64 ASCII hex digits
//   (76 bytes); restore(blob) is the inverse and refuses anything else.
//
// A trace checks the protocol, not the model: the numerics have their own golden vectors.

import { sha256Arrays, sha256Hex } from '../../../static/js/numerics/hash.js';
import { ReplicaRefused } from '../../../static/js/p2p/machine/replica.js';

export const MAGIC = 'DCTRACE1';
export const CHECKPOINT_BYTES = MAGIC.length + 4 + 64;
const HEX64 = /^[0-9a-f]{64}$/;

const ascii = (/** @type {string} */ text) => Uint8Array.from(text, (c) => c.charCodeAt(0));

/**
 * The fresh state's hash for `seed`.
 * @param {number} seed
 */
export function initHash(seed) {
  return sha256Hex(ascii(`daisychain-trace init seed=${seed}`));
}

export class TraceReplica {
  /**
   * @param {number} [step]
   * @param {string} [digest]  the state's hash
   */
  constructor(step = 0, digest = '') {
    this._step = step;
    this._hash = digest;
  }

  get step() {
    return this._step;
  }

  get hash() {
    return this._hash;
  }

  /**
   * The hash chain above serves both sync modes (Python's set_outer does nothing either): a
   * trace pins the protocol, the mean it applies included, not the model. Having it says this
   * replica trains outer runs (machine/replica.js), so the machine replays their traces.
   * @param {unknown} _outer
   */
  setOuter(_outer) {}

  /**
   * @param {unknown} model
   * @param {unknown} optim
   * @param {number} seed
   */
  async start(model, optim, seed) {
    this._step = 0;
    this._hash = await initHash(seed);
  }

  /**
   * @param {Uint8Array | ArrayBuffer} blob
   * @param {string} source
   */
  restore(blob, source) {
    const bytes = blob instanceof Uint8Array ? blob : new Uint8Array(blob);
    const step = this.stepOf(bytes, source);
    const digest = String.fromCharCode(...bytes.subarray(12));
    if (!HEX64.test(digest)) {
      throw new ReplicaRefused(`${source}: the recorded hash is not 64 hex digits`);
    }
    this._step = step;
    this._hash = digest;
  }

  /**
   * The step checkpoint bytes of this kind hold (also peer.js's name for a user's export).
   * @param {Uint8Array | ArrayBuffer} blob
   * @param {string} [source]
   */
  stepOf(blob, source = 'checkpoint') {
    const bytes = blob instanceof Uint8Array ? blob : new Uint8Array(blob);
    const magic = String.fromCharCode(...bytes.subarray(0, MAGIC.length));
    if (bytes.length !== CHECKPOINT_BYTES || magic !== MAGIC) {
      throw new ReplicaRefused(`${source}: not a trace checkpoint (${bytes.length} bytes)`);
    }
    return new DataView(bytes.buffer, bytes.byteOffset, bytes.length).getUint32(8, true);
  }

  checkpoint() {
    const out = new Uint8Array(CHECKPOINT_BYTES);
    out.set(ascii(MAGIC), 0);
    new DataView(out.buffer).setUint32(8, this._step, true);
    out.set(ascii(this._hash), 12);
    return out;
  }

  /** @param {Float32Array} flat */
  async apply(flat) {
    if (!(flat instanceof Float32Array)) throw new TypeError('apply takes the flat Float32Array');
    const digest = await sha256Arrays([ascii(this._hash), flat]); // float32 little-endian
    this._step += 1;
    this._hash = digest;
  }
}
