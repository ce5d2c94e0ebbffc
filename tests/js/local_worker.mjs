// The training worker's Trainer run in this process behind TrainWorker's API (static/js/train/
// client.js), so the replica tests drive a real Trainer without a Worker thread; with the token
// stream and the payload digest those tests compare against the Python reference.
import { createHash } from 'node:crypto';
import { Trainer } from '../../static/js/train/trainer.js';
import { parseRequest } from '../../static/js/train/messages.js';

export class LocalWorker extends EventTarget {
  constructor() {
    super();
    this.trainer = new Trainer(() => {});
    this.id = 0;
  }

  async request(type, fields = {}, onGrad = undefined) {
    const progress = onGrad ? ({ name, values }) => onGrad(name, values) : undefined;
    const req = parseRequest({ id: ++this.id, type, ...fields });
    return (await this.trainer.handle(req, progress)).result;
  }

  init(options) {
    return this.request('init', options);
  }

  grads(x, y, { batch, onGrad } = {}) {
    const fields = batch === undefined ? { x, y } : { x, y, batch };
    if (onGrad) fields.early = true;
    return this.request('grads', fields, onGrad);
  }

  step(x, y, { batch, hash } = {}) {
    const fields = { x, y };
    if (batch !== undefined) fields.batch = batch;
    if (hash !== undefined) fields.hash = hash;
    return this.request('step', fields);
  }

  probe() {
    return this.request('probe');
  }

  outer(outer, shared) {
    return this.request('outer', shared === undefined ? { outer } : { outer, shared });
  }

  round(steps, count, token, onDelta = undefined) {
    const fields = { steps, count, token };
    if (onDelta) fields.early = true;
    return this.request('round', fields, onDelta && ((_name, values) => onDelta(values)));
  }

  applyOuter(mean, token) {
    return this.request('outer-apply', { mean, token });
  }

  exportOuter() {
    return this.request('export');
  }

  exportState() {
    return this.request('export').then((r) => r.state);
  }

  terminate() {}
}

/** 4000 token ids below `vocab`, the same on every run (the Python side gets the same list). */
export function tokens(vocab) {
  const t = new Uint16Array(4000);
  for (let i = 0; i < t.length; i++) t[i] = ((i * 2654435761) >>> 7) % vocab;
  return t;
}

/** `length:sha256` of a payload, as the Python reference scripts print it. */
export const digest = (p) => `${p.length}:${createHash('sha256').update(p).digest('hex')}`;
