// @ts-check
// A trainer that loses its WebGPU device when a test asks: the test-only request
//   inject-fault  {afterProducts, rebuildSources?}  -> {armed, backend}
// arms a fault; after `afterProducts` more products on the current GPU tier the device is
// destroyed, so the next product meets a lost device mid-step, as on a real GPU that resets.
// The product's trainer then rebuilds the device and gates its kernel again, or falls back to the
// CPU tier (static/js/train/trainer.js); `rebuildSources` ({dp4a?, lut?} of WGSL text) replaces
// the kernels of that one rebuild, so a test can make the rebuilt kernel fail its gates.
//
// The product never carries this request: its parser (messages.js) refuses it and its Trainer
// only calls the empty afterGpuProduct() seam this class fills. A test starts the worker
// fault_worker.js (served to the browser by tests/repo_route.py) instead of the product's; the
// node tests use this class directly.

import { Trainer, TrainerError } from '../../static/js/train/trainer.js';
import { MessageError, parseRequest } from '../../static/js/train/messages.js';

export const INJECT_FAULT = 'inject-fault';
const FIELDS = ['id', 'type', 'afterProducts', 'rebuildSources'];
const KERNELS = ['dp4a', 'lut'];

/**
 * @typedef {{id: number, type: 'inject-fault', afterProducts: number,
 *   rebuildSources: Record<string, string>}} InjectFault
 * @typedef {import('../../static/js/train/messages.js').Request} Request
 */

/**
 * @param {string} what
 * @returns {never}
 */
function refuse(what) {
  throw new MessageError(`inject-fault: ${what}`,
    'send {afterProducts: a whole number >= 1, rebuildSources?: {dp4a?, lut?} of WGSL text}');
}

/**
 * The product's parseRequest, plus the test request inject-fault, checked field by field.
 * @param {any} msg
 * @returns {Request | InjectFault}
 */
export function parseTestRequest(msg) {
  if (msg?.type !== INJECT_FAULT) return parseRequest(msg);
  if (!Number.isSafeInteger(msg.id) || msg.id < 0) refuse('id must be an integer >= 0');
  for (const key of Object.keys(msg)) {
    if (!FIELDS.includes(key)) refuse(`unknown field '${key}'`);
  }
  const after = msg.afterProducts;
  if (!Number.isSafeInteger(after) || after < 1 || after > 1e9) {
    refuse(`afterProducts must be an integer in [1, 1e9], got ${after}`);
  }
  const sources = msg.rebuildSources ?? {};
  if (sources === null || typeof sources !== 'object' || Array.isArray(sources)) {
    refuse('rebuildSources must be an object {dp4a?, lut?}');
  }
  for (const [kind, text] of Object.entries(sources)) {
    if (!KERNELS.includes(kind) || typeof text !== 'string') {
      refuse(`rebuildSources.${kind} is not WGSL text for dp4a or lut`);
    }
  }
  return { id: msg.id, type: INJECT_FAULT, afterProducts: after, rebuildSources: sources };
}

export class FaultTrainer extends Trainer {
  /** @param {(event: {kind: string} & Record<string, unknown>) => void} [emit] */
  constructor(emit) {
    super(emit);
    /** @type {{remaining: number, rebuildSources: Record<string, string>} | null} */
    this.fault = null; // armed, not fired yet
    /** @type {Record<string, string> | null} */
    this.planted = null; // the WGSL of the rebuild the fired fault causes
  }

  /**
   * @override
   * @param {Request | InjectFault} req
   * @param {(grad: {name: string, values: Float32Array}) => void} [progress]
   */
  async handle(req, progress) {
    if (req.type !== INJECT_FAULT) return super.handle(req, progress);
    return { result: this.arm(/** @type {InjectFault} */ (req)), transfer: [] };
  }

  /** @param {InjectFault} req */
  arm({ afterProducts, rebuildSources }) {
    if (this.state !== 'ready') {
      throw new TrainerError(`inject-fault: the trainer is ${this.state}`, 'send init first');
    }
    const tier = /** @type {{name: string, onGpu: boolean}} */ (this.tier); // set once ready
    if (!tier.onGpu) {
      throw new TrainerError(`inject-fault: this worker computes on ${tier.name}, no GPU ` +
        'device to lose', 'inject a device loss only into a worker on a WebGPU backend');
    }
    this.fault = { remaining: afterProducts, rebuildSources };
    return { armed: true, backend: tier.name };
  }

  /**
   * @override
   * @param {any} tier
   */
  afterGpuProduct(tier) {
    if (this.fault === null || tier !== this.tier) return;
    this.fault.remaining -= 1;
    if (this.fault.remaining > 0) return;
    this.planted = this.fault.rebuildSources;
    this.fault = null;
    tier.gpu.device.destroy(); // the next product meets a lost device
  }

  /**
   * The product's recovery, with the fired fault's WGSL in place of init's for this one rebuild.
   * @override
   * @param {any} tier
   * @param {any} exc
   */
  async recover(tier, exc) {
    const planted = this.planted;
    this.planted = null;
    if (planted === null) return super.recover(tier, exc);
    const options = /** @type {any} */ (this.options); // set by init
    this.options = { ...options, sources: { ...options.sources, ...planted } };
    try {
      return await super.recover(tier, exc);
    } finally {
      this.options = options;
    }
  }
}
