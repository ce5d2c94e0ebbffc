// An outer run inside the training worker (docs/PROTOCOL.md, "Outer runs"; docs/OUTER.md): the
// browser twin of what daisychain/p2p/modelreplica.py (the outer state, inner_start, adopt_inner) and
// p2p/inner.py (inner_round) do for the headless peer.
//
// The worker's training state (trainer.js `run`) then holds the OUTER weights W as its params
// (the same Maps as the outer state's, as in Python) and this peer's own inner AdamW state as
// its optState; beside it the outer momentum M (+0 at the start) and the rounds done. A round
// never touches either: it trains a copy of W with a copy of the inner state, and what it
// produces (the inner state after its inner steps) is kept under the round's token until the round
// is applied. So a checkpoint export or a hash between the requests of a round sees W and M,
// and a round computed again after a roster change starts from the same bits.

import * as M from '../model/index.js';
import { applyOuter, outerConfig, outerHash, outerState, pseudoGradient } from '../outer/nesterov.js';
import { PieceMean } from './piecemean.js';

function copyMap(map) {
  const out = new Map();
  for (const [name, a] of map) out.set(name, Float32Array.from(a));
  return out;
}

/** Python's inner.sync_step: of `n` inner steps, n - floor(n * overlap) come before the round is
 * measured (float64 arithmetic in both). */
export function syncStep(n, overlap) {
  return n - Math.floor(n * overlap);
}

/** W + carry per element, one float32 addition each (Python's outer.add_carry). */
function addCarry(weights, carry) {
  const out = new Map();
  for (const [name, w] of weights) {
    const c = carry.get(name);
    const s = new Float32Array(w.length);
    for (let i = 0; i < s.length; i++) s[i] = Math.fround(w[i] + c[i]);
    out.set(name, s);
  }
  return out;
}

/** a - b per element, one float32 subtraction each. */
function subtractMaps(a, b) {
  const out = new Map();
  for (const [name, x] of a) {
    const y = b.get(name);
    const d = new Float32Array(x.length);
    for (let i = 0; i < d.length; i++) d[i] = Math.fround(x[i] - y[i]);
    out.set(name, d);
  }
  return out;
}

function copyOptState(s) {
  return { m: copyMap(s.m), v: copyMap(s.v), step: s.step, p1: s.p1, p2: s.p2 };
}

/**
 * The mean gradient of one contributor over its lane pieces (`parts`: [{loss, grads: Map,
 * rows}]), parameter by parameter through piecemean.js (the per-step compute's arithmetic).
 */
export function combinePieces(parts, count) {
  const grads = new Map();
  let loss = 0;
  for (const name of parts[0].grads.keys()) {
    const mean = new PieceMean(count, parts.length);
    for (const { loss: l, grads: g, rows } of parts) mean.add(l, g.get(name), rows);
    const result = mean.result();
    grads.set(name, result.values);
    loss = result.loss; // the same for every parameter
  }
  return { loss, grads };
}

export class OuterLoop {
  /**
   * Turns `run` (a training.js state) into an outer run's: its params become W (kept, the same
   * Maps), M is `momentum` (a Map in parameter order) or +0, `step` the rounds done. `run`'s
   * optState is the inner AdamW state the first round starts from.
   */
  constructor(run, { lr, momentum, innerSteps, overlap = 0, cut = 'share' }, shared = null) {
    this.cfg = outerConfig({ innerSteps, lr, momentum, overlap, cut });
    this.run = run;
    const zeros = () => new Map([...run.params].map(([k, w]) => [k, new Float32Array(w.length)]));
    this.state = shared === null ? outerState(run.params, zeros(), 0)
      : outerState(run.params, shared.momentum, shared.step);
    // With overlap, the progress after the last applied round was measured (null: none); this
    // peer's own, like the inner AdamW state (docs/OUTER.md, "Overlap").
    this.carry = null;
    this.rounds = new Map(); // token -> {optState, carry} that round produced
  }

  get step() {
    return this.state.step;
  }

  hash() {
    return outerHash(this.state);
  }

  /**
   * One round: `steps[j]` are inner step j's pieces [{x, y, rows}] (shares.js roundSteps; `count`
   * sequences in all); `gradsOf(work, x, y, rows)` resolves to {loss, grads} of the work copy's
   * weights. The copy starts at W plus the carry; each inner step is its pieces' mean gradient
   * and one AdamW step on it. The round is measured after syncStep(steps, overlap) of them
   * (Python's inner.inner_round); resolves to {loss (the mean of the inner losses), delta (the
   * flat pseudo-gradient W - w there, padded)} and keeps the copy's inner state and carry under
   * `token` for apply. `onDelta(delta)` hears the delta as soon as it is measured.
   */
  async round(steps, count, token, gradsOf, onDelta = undefined) {
    const H = this.cfg.innerSteps;
    const batch = this.run.cfg.batch;
    const sizes = steps.map((pieces) => pieces.reduce((n, p) => n + p.rows, 0));
    const last = sizes.length - 1;
    // The machine asks H times a share, cut as the run's `cut` says: any other cut would change
    // this peer's contribution from what the run means.
    const wrong = this.cfg.cut === 'share'
      ? sizes.length !== H || sizes.some((n) => n !== count / H)
      : sizes.some((n, j) => (j === last ? n < 1 || n > batch : n !== batch));
    if (count % H !== 0 || wrong) {
      const how = this.cfg.cut === 'share' ? `in H inner steps of the share`
        : `in inner steps of ${batch} (the last takes the rest)`;
      throw new RangeError(`a round of ${count} sequences in inner steps of ${sizes.join(', ')}; ` +
        `this run takes H = ${H} times a share, ${how}`);
    }
    const start = this.carry === null ? copyMap(this.state.params)
      : addCarry(this.state.params, this.carry);
    const work = { ...this.run, params: start, optState: copyOptState(this.run.optState) };
    const sync = syncStep(steps.length, this.cfg.overlap);
    let total = 0;
    let delta = null;
    let measured = null;
    for (let j = 0; j <= steps.length; j++) {
      if (j === sync) {
        delta = pseudoGradient(this.state.params, work.params);
        if (sync < steps.length) measured = copyMap(work.params); // the carry is counted from here
        onDelta?.(delta);
      }
      if (j === steps.length) break;
      const parts = [];
      for (const { x, y, rows } of steps[j]) parts.push({ ...(await gradsOf(work, x, y, rows)), rows });
      const { loss, grads } = combinePieces(parts, sizes[j]);
      M.applyGrads(work, grads);
      total = Math.fround(total + Math.fround(loss));
    }
    const carry = measured === null ? null : subtractMaps(work.params, measured);
    this.rounds.set(token, { optState: work.optState, carry });
    return { loss: Math.fround(total / Math.fround(steps.length)), delta };
  }

  /**
   * The outer step with the reduced mean `mean` (flat, padded) on W and M; the inner state of
   * round `token` (null: this peer computed nothing for it) becomes this peer's. Rounds kept
   * for anything else are abandoned (the machine applies one round per step).
   */
  async apply(mean, token) {
    applyOuter(this.state, this.cfg, mean);
    const inner = token === null ? undefined : this.rounds.get(token);
    if (inner !== undefined) {
      this.run.optState = inner.optState;
      this.carry = inner.carry;
    }
    this.rounds.clear();
    return { step: this.state.step, hash: await this.hash() };
  }
}
