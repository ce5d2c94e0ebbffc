// The live panel's pieces that need no browser: the sync guard's read-only tally (a differing
// hash is never counted as agreement; a planted tally that counts it is caught), the read-outs
// of static/js/page/livefigures.js, the training worker's `eval` request rules (each malformed
// one refused with a hint), and the validation loss itself: the trainer's `eval` on the CPU tier
// equals daisychain.training.eval_loss (Python) on the same state, bit for bit, and a planted
// wrong validation seed is caught. The page itself: tests/page/test_page_live.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SyncGuard, Fork } from '../../static/js/p2p/machine/guard.js';
import { Machine } from '../../static/js/p2p/machine/machine.js';
import * as F from '../../static/js/page/livefigures.js';
import { parseRequest, MessageError } from '../../static/js/train/messages.js';
import { meanLoss, validationBatches, validationSeed } from '../../static/js/train/validation.js';
import { sampleBatch } from '../../static/js/model/batches.js';
import { Trainer } from '../../static/js/train/trainer.js';
import { plantedCopy, python } from './protocol_helpers.mjs';

const PROBE = 'p'.repeat(64);
const H = (c) => c.repeat(64);

test('tally: three equal hashes are three identical replicas, with their backends', () => {
  const g = new SyncGuard('a', PROBE);
  assert.equal(g.tally(41, 0, ['a', 'b', 'c']), null, 'nothing before our own hash');
  g.record('b', 41, 0, H('9'), 'webgpu-dp4a');
  assert.equal(g.tally(41, 0, ['a', 'b', 'c']), null, 'nothing before our own hash');
  g.record('a', 41, 0, H('9'), 'webgpu-dp4a');
  let t = g.tally(41, 0, ['a', 'b', 'c']);
  assert.deepEqual([t.same, t.differ, t.missing], [['a', 'b'], [], ['c']]);
  assert.equal(F.agreementLine(t).state, 'partial');
  g.record('c', 41, 0, H('9'), 'numpy');
  t = g.tally(41, 0, ['a', 'b', 'c']);
  assert.deepEqual([t.same, t.differ, t.missing], [['a', 'b', 'c'], [], []]);
  assert.deepEqual(F.agreementLine(t), { state: 'agree',
    text: '3 replicas identical at step 41, hash 99999999…' });
  assert.equal(F.unitsLine(t.backends), '2 × webgpu-dp4a, 1 × numpy');
  assert.equal(g.tally(41, 1, ['a', 'b', 'c']), null, 'another round is another attempt');
});

test('tally: a differing hash is counted as differing, never as agreement', () => {
  const g = new SyncGuard('a', PROBE);
  g.record('b', 7, 0, H('1'), 'js-cpu');
  g.record('c', 7, 0, H('2'), 'numpy'); // differs from ours
  // Our own hash comes last: the guard fires (the run stops in a fork)...
  assert.throws(() => g.record('a', 7, 0, H('1'), 'js-cpu'), Fork);
  // ...and the read-out, asked afterwards, still names the difference.
  const t = g.tally(7, 0, ['a', 'b', 'c']);
  assert.deepEqual([t.same, t.differ, t.missing], [['a', 'b'], ['c'], []]);
  const line = F.agreementLine(t);
  assert.equal(line.state, 'differ');
  assert.match(line.text, /^1 of 3 replicas differ from this one at step 7/);
  assert.doesNotMatch(line.text, /identical/);
});

/** The differing-hash scenario on a guard module; returns the agreement line's state. */
function differingScenario(GuardClass) {
  const g = new GuardClass('a', PROBE);
  g.record('b', 7, 0, H('1'), 'js-cpu');
  g.record('c', 7, 0, H('2'), 'numpy');
  try {
    g.record('a', 7, 0, H('1'), 'js-cpu');
  } catch {
    // the fork: expected
  }
  return F.agreementLine(g.tally(7, 0, ['a', 'b', 'c'])).state;
}

test('a planted tally that counts any published hash as agreement is caught', async () => {
  assert.equal(differingScenario(SyncGuard), 'differ');
  const copy = plantedCopy('p2p/machine/guard.js',
    '(entry.have.get(peer) === hash ? out.same : out.differ).push(peer);', 'out.same.push(peer);');
  try {
    const planted = await import(copy.url('p2p/machine/guard.js'));
    assert.equal(differingScenario(planted.SyncGuard), 'agree',
      'the planted tally reads as agreement, so the assertion above is what catches it');
  } finally {
    copy.dispose();
  }
});

test('tally changes nothing the guard decides (read-only)', () => {
  const g = new SyncGuard('a', PROBE);
  g.record('a', 3, 0, H('5'), 'js-cpu');
  const before = JSON.stringify([...g.hashes].map(([k, v]) => [k, [...v.have]]));
  g.tally(3, 0, ['a', 'b']);
  g.tally(4, 0, ['a']);
  assert.equal(JSON.stringify([...g.hashes].map(([k, v]) => [k, [...v.have]])), before);
  assert.deepEqual(g.have(3, 0), new Map([['a', H('5')]]));
  assert.equal(typeof Machine.prototype.tally, 'function', 'the machine exposes it');
});

test('read-outs: units, rates, durations, split, schedule, progress', () => {
  assert.equal(F.unitsLine(new Map()), '–');
  assert.equal(F.unitsLine(new Map([['numpy', 1], ['js-cpu', 1], ['webgpu-lut', 2]])),
    '2 × webgpu-lut, 1 × js-cpu, 1 × numpy');
  assert.equal(F.tokensPerSecond(128, 0), null);
  assert.equal(F.tokensPerSecond(128, NaN), null);
  assert.equal(F.tokensPerSecond(128, 500), 256);
  assert.equal(F.formatRate(null), '–');
  assert.equal(F.formatRate(256.4), '256 tok/s');
  assert.equal(F.formatRate(1234), '1.2k tok/s');
  assert.equal(F.formatRate(45678), '46k tok/s');
  assert.equal(F.formatDuration(850), '850 ms');
  assert.equal(F.formatDuration(4210), '4.2 s');
  assert.equal(F.formatDuration(39900), '40 s');
  assert.equal(F.formatDuration(3 * 60000), '3 min');
  assert.equal(F.formatDuration(65 * 60000), '1 h 5 min');
  const prev = { appliedAtMs: 1000 };
  const r = { computeMs: 300, computedAtMs: 1400, appliedAtMs: 1900 };
  assert.deepEqual(F.stepSplit(r, prev), { wall: 900, compute: 300, exchange: 500 });
  assert.deepEqual(F.stepSplit({ appliedAtMs: 5 }), { wall: null, compute: null, exchange: null });
  const recs = [0, 1000, 2000].map((t) => ({ appliedAtMs: t, roster: ['a', 'b', 'c'] }));
  assert.equal(F.groupRate(recs.slice(0, 1), 4, 64), null);
  assert.equal(F.groupRate(recs, 4, 64), (2 * 3 * 4 * 64) / 2);
  // Protocol v2: a step's sequences are its shares' sum (the global batch), whoever computed them.
  const uneven = [0, 1000, 2000].map((t) => ({ appliedAtMs: t, roster: ['a', 'b'], shares: [13, 3] }));
  assert.equal(F.groupRate(uneven, 4, 64), (2 * 16 * 64) / 2);
  assert.equal(F.sequencesOf({ roster: ['a', 'b'], shares: [0, 12] }, 4), 12);
  const speeds = new Map([['a', 0.05], ['b', 0.2], ['c', 0], ['gone', 0.001]]);
  assert.equal(F.fastestAlone(speeds, ['a', 'b', 'c'], 64), 64 / 0.05, 'the fastest roster device');
  assert.equal(F.fastestAlone(new Map([['c', 0]]), ['c'], 64), null, 'nobody measured');
  assert.equal(F.fastestAlone(undefined, ['a'], 64), null);
  assert.equal(F.shareText(3, 16), 'computes 3 of 16 sequences');
  assert.equal(F.shareText(0, 16), 'follows without computing');
  assert.equal(F.shareText(1, 1), 'computes 1 of 1 sequence');
  assert.equal(F.shareText(undefined, 16), '');
  assert.deepEqual([F.shareCell(3, 16), F.shareCell(0, 16), F.shareCell(undefined, 16)],
    ['3 of 16', 'follows', '–']);
  assert.equal(F.formatTokens(1520.4), '1,520 tok/s');
  assert.equal(F.groupSpeedLine(1520.4, 1180), 'group 1,520 tok/s; fastest device alone ≈ ' +
    '1,180 tok/s (its gradient time only)');
  assert.equal(F.groupSpeedLine(null, null), 'group –');
  assert.equal(F.evalEvery(12), 10);
  assert.equal(F.evalEvery(1000), 50);
  assert.deepEqual([...Array(13).keys()].filter((s) => F.evalDue(s, 12)), [10, 12]);
  assert.equal(F.progressLine(41, 300, 1000), 'step 41 of 300, about 4 min left');
  assert.equal(F.progressLine(300, 300, 1000), 'step 300 of 300');
});

test('eval requests: accepted as declared, each malformed one refused with a hint', () => {
  const x = new Int32Array([1, 2, 3, 4]);
  const y = new Int32Array([2, 3, 4, 5]);
  parseRequest({ id: 1, type: 'eval', batches: [{ x, y }, { x, y }] });
  parseRequest({ id: 1, type: 'eval', batches: [{ x, y }], batch: 2 });
  const refused = (msg, pattern) => assert.throws(() => parseRequest({ id: 1, type: 'eval', ...msg }),
    (exc) => exc instanceof MessageError && pattern.test(exc.message) && exc.hint.length > 0);
  refused({}, /batches must be a list/);
  refused({ batches: [] }, /batches must be a list/);
  refused({ batches: Array(17).fill({ x, y }) }, /batches must be a list of 1 to 16/);
  refused({ batches: [[x, y]] }, /batches\[0\] must be \{x, y\}/);
  refused({ batches: [{ x, y, z: x }] }, /unknown field 'z'/);
  refused({ batches: [{ x: [1, 2], y }] }, /batches\[0\]\.x must be a non-empty Int32Array/);
  refused({ batches: [{ x, y: y.subarray(1) }] }, /batches\[0\] has 4 inputs and 3 targets/);
  refused({ batches: [{ x, y }, { x: x.subarray(2), y: y.subarray(2) }] }, /batches\[1\] has 2/);
  refused({ batches: [{ x, y }], batch: 0 }, /batch must be an integer/);
  refused({ batches: [{ x, y }], extra: 1 }, /unknown field 'extra'/);
});

test('validation batches: seed ^ 0x5EED as a uint32, batches 0..3 of the validation ids', () => {
  assert.equal(validationSeed(7), 7 ^ 0x5eed);
  assert.equal(validationSeed(0xffff0001), 0xffff5eec, 'not a negative int32');
  const val = Int32Array.from({ length: 300 }, (_, i) => (i * 7) % 97);
  const got = validationBatches(val, 2, 8, 0xffff0001);
  assert.equal(got.length, 4);
  got.forEach((b, i) => assert.deepEqual(b, sampleBatch(val, 2, 8, 0xffff5eec, i)));
  assert.equal(meanLoss([1.5, 2.5, 3, 4]), 2.75);
});

// daisychain.training.eval_loss on a state trained 3 steps from seed (a seed above 2^31: the XOR
// must stay unsigned), with its state hash; token ids drawn by numpy.
const PY_EVAL = `
import json, sys
import numpy as np
from daisychain import training
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
eval_loss = training.eval_loss
c = json.load(sys.stdin)
cfg = preset("tiny", batch=c["batch"], seq_len=c["seq_len"])
rng = np.random.default_rng(3)
train = rng.integers(0, cfg.vocab_size, 3000)
val = rng.integers(0, cfg.vocab_size, 500)
state = training.init(cfg, AdamWConfig(lr=c["lr"]), c["seed"])
for _ in range(c["steps"]):
    x, y = training.next_batch(state, train)
    training.train_step(state, x, y)
print(json.dumps({"model": {"vocab_size": cfg.vocab_size, "width": cfg.width, "layers": cfg.layers,
    "heads": cfg.heads, "seq_len": cfg.seq_len, "batch": cfg.batch, "mlp_mult": cfg.mlp_mult},
    "train": train.tolist(), "val": val.tolist(), "hash": training.state_hash(state),
    "loss": eval_loss(state, val)}))
`;

async function jsValidation(ref, c, batchesOf) {
  const trainer = new Trainer();
  let id = 1;
  const ask = async (msg) => (await trainer.handle(parseRequest({ id: id++, ...msg }))).result;
  await ask({ type: 'init', model: ref.model, optim: { lr: c.lr }, seed: c.seed,
    backend: 'js-cpu', measure: false });
  const train = Int32Array.from(ref.train);
  for (let s = 0; s < c.steps; s++) {
    const { x, y } = sampleBatch(train, c.batch, c.seq_len, c.seed, s, 0);
    await ask({ type: 'step', x, y });
  }
  const before = await ask({ type: 'hash' });
  const r = await ask({ type: 'eval', batches: batchesOf(Int32Array.from(ref.val)) });
  assert.deepEqual(await ask({ type: 'hash' }), before, 'eval changed nothing');
  return r;
}

test('the worker\'s validation loss equals Python\'s eval_loss on the same state', async () => {
  const c = { batch: 2, seq_len: 16, lr: 3e-3, seed: 0xffff0001, steps: 3 };
  const ref = python(PY_EVAL, c);
  const r = await jsValidation(ref, c, (val) => validationBatches(val, c.batch, c.seq_len, c.seed));
  assert.equal(r.hash, ref.hash, 'the same state');
  assert.equal(r.step, c.steps);
  assert.equal(r.losses.length, 4);
  assert.equal(r.loss, ref.loss, 'bit for bit (float64)');
  // Planted: the validation batches drawn with the run seed itself (not seed ^ 0x5EED).
  const wrong = await jsValidation(ref, c,
    (val) => [0, 1, 2, 3].map((i) => sampleBatch(val, c.batch, c.seq_len, c.seed, i)));
  assert.equal(wrong.hash, ref.hash);
  assert.notEqual(wrong.loss, ref.loss, 'a wrong validation loss is caught by the comparison');
});
