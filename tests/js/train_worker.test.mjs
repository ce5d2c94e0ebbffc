// The training worker's pieces that need no browser (static/js/train/, static/js/gpu/backend.js):
// every request rule refusing a wrong input with a hint, the backend-choice rule on given
// measurements (a backend failing its gates is never chosen, whatever its time), and the
// trainer itself on the CPU tier: the golden hashes through step and through grads + apply,
// export/load continuing bit for bit, and the state machine refusing out-of-order requests.
// Chromium runs the same trainer inside a real Worker (tests/browser/test_browser_worker.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { parseRequest, parseReply, MessageError } from '../../static/js/train/messages.js';
import { chooseBackend, timeRounds } from '../../static/js/gpu/backend.js';
import { MAX_DEVICE_REBUILDS, Trainer, TrainerError } from '../../static/js/train/trainer.js';
import { GpuFault, GpuUnavailable, acquireGpu, noWebGpuReason } from '../../static/js/gpu/device.js';
import { FaultTrainer, parseTestRequest } from '../pages/fault_trainer.js';
import { REPO, bitsOf } from './helpers.mjs';

const DIR = path.join(REPO, 'tests', 'vectors');
const manifest = JSON.parse(fs.readFileSync(path.join(DIR, 'manifest.json'), 'utf-8'));
const golden = manifest.cases.find((c) => c.name === 'train_run.tiny');
const blob = (field, Type) => new Type(new Uint8Array(fs.readFileSync(path.join(DIR, field.blob))).buffer);

function refused(msg, pattern) {
  assert.throws(() => parseRequest(msg), (exc) => {
    assert.ok(exc instanceof MessageError, `${exc}`);
    assert.match(exc.message, pattern);
    assert.ok(exc.hint.length > 0, 'a refusal carries a hint');
    return true;
  });
}

const x = new Int32Array([1, 2, 3, 4]);
const y = new Int32Array([2, 3, 4, 5]);

test('parseRequest accepts the declared messages and fills defaults', () => {
  const init = parseRequest({ id: 1, type: 'init', model: { preset: 'tiny' }, seed: 1 });
  assert.equal(init.backend, 'auto');
  assert.equal(init.measure, true);
  assert.equal(init.audit, 16);
  assert.deepEqual(init.optim, {});
  assert.equal(init.chains, 'auto');
  for (const chains of ['auto', 'on', 'off', 'measure']) {
    assert.equal(parseRequest({ id: 1, type: 'init', model: {}, seed: 1, chains }).chains, chains);
  }
  assert.equal(parseRequest({ id: 2, type: 'step', x, y }).hash, true);
  parseRequest({ id: 3, type: 'grads', x, y, batch: 2 });
  assert.equal(parseRequest({ id: 3, type: 'grads', x, y }).early, false);
  assert.equal(parseRequest({ id: 3, type: 'grads', x, y, early: true }).early, true);
  parseRequest({ id: 4, type: 'apply', grads: { names: ['a'], arrays: [new Float32Array(2)] } });
  for (const type of ['probe', 'hash', 'export']) parseRequest({ id: 5, type });
});

test('parseRequest refuses each malformed request with a hint', () => {
  const ok = { names: ['a'], arrays: [new Float32Array(1)] };
  const state = { step: 0, p1: 1, p2: 1, params: ok, m: ok, v: ok };
  refused(null, /must be an object/);
  refused([1], /must be an object/);
  refused({ id: -1, type: 'probe' }, /id must be an integer/);
  refused({ id: 1.5, type: 'probe' }, /id must be an integer/);
  refused({ id: 1, type: 'train' }, /unknown request type "train"/);
  refused({ id: 1, type: 'probe', extra: 1 }, /unknown field 'extra'/);
  refused({ id: 1, type: 'init', seed: 1 }, /model must be an object/);
  refused({ id: 1, type: 'init', model: {}, seed: 2 ** 32 }, /seed must be an integer/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, backend: 'cuda' }, /backend "cuda"/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, measure: 'yes' }, /measure must be/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, chains: 'sometimes' },
    /chains "sometimes" is not one of auto, on, off, measure/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, chains: true }, /chains true is not/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, audit: 5000 }, /audit must be/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, optim: 3 }, /optim must be/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, sources: { cuda: 'x' } }, /sources.cuda/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, kernelBase: 'http://x/' }, /kernelBase/);
  refused({ id: 1, type: 'init', model: {}, seed: 1, state: { ...state, p1: 2 } }, /p1 must be/);
  refused({ id: 1, type: 'step', x: [1, 2], y }, /x must be a non-empty Int32Array/);
  refused({ id: 1, type: 'step', x, y: new Int32Array(0) }, /y must be a non-empty Int32Array/);
  refused({ id: 1, type: 'step', x, y: new Int32Array(3) }, /x has 4 tokens, y 3/);
  refused({ id: 1, type: 'grads', x, y, batch: 0 }, /batch must be an integer/);
  refused({ id: 1, type: 'step', x, y, hash: 1 }, /hash must be a boolean/);
  refused({ id: 1, type: 'grads', x, y, early: 'yes' }, /early must be a boolean/);
  refused({ id: 1, type: 'step', x, y, early: true }, /unknown field 'early'/);
  refused({ id: 1, type: 'apply', grads: new Map() }, /grads must be \{names/);
  refused({ id: 1, type: 'apply', grads: { names: ['a', 'b'], arrays: [new Float32Array(1)] } },
    /2 names but 1 arrays/);
  refused({ id: 1, type: 'apply', grads: { names: ['a', 'a'], arrays: [ok.arrays[0], ok.arrays[0]] } },
    /names must be distinct/);
  refused({ id: 1, type: 'apply', grads: { names: ['a'], arrays: [new Float64Array(1)] } },
    /a is not a Float32Array/);
  refused({ id: 1, type: 'load', state: { ...state, step: -1 } }, /step must be an integer/);
  refused({ id: 1, type: 'load', state: { ...state, extra: 1 } }, /unknown field 'extra'/);
  refused({ id: 1, type: 'load', state: { ...state, m: undefined } }, /state.m must be/);
  // The test hook that loses the device is no request of the product's worker (issue 41).
  refused({ id: 1, type: 'inject-fault', afterProducts: 3 }, /unknown request type "inject-fault"/);
});

test('parseReply refuses malformed worker messages', () => {
  parseReply({ type: 'result', id: 1, result: {} });
  parseReply({ type: 'error', id: null, error: { name: 'E', message: 'm', hint: 'h' } });
  parseReply({ type: 'event', event: { kind: 'fallback' } });
  assert.throws(() => parseReply({ type: 'result', id: 1 }), /without a result/);
  assert.throws(() => parseReply({ type: 'error', id: 1, error: { message: 'm' } }),
    /without \{name, message, hint\}/);
  assert.throws(() => parseReply({ type: 'event', event: { kind: 'boom' } }), /unknown event/);
  assert.throws(() => parseReply({ type: 'shout' }), /unknown worker message type/);
  parseReply({ type: 'grad', id: 3, name: 'gf', values: new Float32Array(2) });
  assert.throws(() => parseReply({ type: 'grad', id: 3, name: 'gf', values: [1, 2] }),
    /grad without \{name, values/);
  assert.throws(() => parseReply({ type: 'grad', id: 3, values: new Float32Array(2) }),
    /grad without \{name, values/);
  assert.throws(() => parseReply({ type: 'grad', id: -1, name: 'gf', values: new Float32Array(2) }),
    /grad id must be/);
});

const row = (name, passed, ms, complete = true) => ({
  name, gates_passed: passed, failure: passed ? null : `${name} failed gate 'x'`,
  step_ms: ms, step_complete: ms === null ? null : complete,
});

test('the choice is the fastest measured backend among those that pass their gates', () => {
  const rows = [row('webgpu-dp4a', true, 900), row('webgpu-lut', true, 300, false),
    row('js-cpu', true, 250)];
  const c = chooseBackend(rows);
  assert.equal(c.selected, 'js-cpu');
  assert.equal(c.rule, 'measured');
  assert.match(c.reason, /^js-cpu: 250 ms per step, the fastest .*webgpu-dp4a 900 ms, webgpu-lut >= 300 ms/);
  assert.deepEqual(c.measurements.map((m) => [m.name, m.complete]),
    [['webgpu-dp4a', true], ['webgpu-lut', false], ['js-cpu', true]]);
  // The same numbers with the GPU faster: the GPU wins; a tie goes to the earlier row.
  assert.equal(chooseBackend([row('webgpu-dp4a', true, 40), row('js-cpu', true, 250)]).selected,
    'webgpu-dp4a');
  assert.equal(chooseBackend([row('webgpu-dp4a', true, 40), row('js-cpu', true, 40)]).selected,
    'webgpu-dp4a');
});

// A timer for timeRounds: each candidate's times in turn (a busy first round, say), stopped past
// the limit as the real one is.
function timerOf(times, asked) {
  const next = Object.fromEntries(Object.keys(times).map((k) => [k, 0]));
  return async (c, limit) => {
    asked.push(c.name);
    const ms = times[c.name][next[c.name]++];
    return ms <= limit ? { ms, complete: true } : { ms: limit, complete: false };
  };
}

const entries = (...names) => names.map((name) => ({
  row: { name, gates_passed: true, failure: null, step_ms: null, step_complete: null },
  candidate: { name },
}));

test('a moment of load at start does not pick the backend for the run', async () => {
  // js-cpu was busy for its first timing (another tab loading): 12x its quiet time.
  const times = { 'webgpu-lut': [500, 500, 500], 'js-cpu': [672, 56, 56] };
  const asked = [];
  const three = entries('webgpu-lut', 'js-cpu');
  await timeRounds(three, timerOf(times, asked), 3);
  assert.deepEqual(asked, ['webgpu-lut', 'js-cpu', 'webgpu-lut', 'js-cpu', 'webgpu-lut', 'js-cpu']);
  assert.deepEqual(three.map((e) => [e.row.step_ms, e.row.step_complete]), [[500, true], [56, true]]);
  const c = chooseBackend(three.map((e) => e.row), { rounds: 3 });
  assert.equal(c.selected, 'js-cpu');
  assert.match(c.reason, /^js-cpu: 56\.0 ms per step \(best of 3\), the fastest .*webgpu-lut 500 ms/);
  // The planted bug: one timing (the old rule) takes the slow GPU for the whole run.
  const once = entries('webgpu-lut', 'js-cpu');
  await timeRounds(once, timerOf(times, []), 1);
  assert.equal(chooseBackend(once.map((e) => e.row)).selected, 'webgpu-lut');
});

test('timeRounds keeps lower bounds for stopped rows, drops a row that throws, refuses 0 rounds', async () => {
  const times = { a: [10, 10], b: [50, 50] };
  const rows = entries('a', 'b');
  await timeRounds(rows, timerOf(times, []), 2);
  assert.deepEqual(rows[1].row, { name: 'b', gates_passed: true, failure: null, step_ms: 10,
    step_complete: false });
  const broken = entries('a', 'b');
  let calls = 0;
  await timeRounds(broken, async (c) => {
    if (c.name === 'b') { calls++; throw new Error('audit: wrong product'); }
    return { ms: 5, complete: true };
  }, 3);
  assert.equal(calls, 1); // never timed again
  assert.equal(broken[1].row.gates_passed, false);
  assert.match(broken[1].row.failure, /failed while timing a step: audit: wrong product/);
  await assert.rejects(timeRounds(rows, timerOf(times, []), 0), /rounds must be a whole number/);
});

test('a backend failing its gates is never chosen, even when its time is the fastest', () => {
  const c = chooseBackend([row('webgpu-dp4a', false, 1), row('webgpu-lut', true, 500),
    row('js-cpu', true, 600)]);
  assert.equal(c.selected, 'webgpu-lut');
  assert.match(c.reason, /failed their gates: webgpu-dp4a/);
  assert.throws(() => chooseBackend([row('webgpu-dp4a', false, 1), row('js-cpu', false, 2)]),
    /no backend passes its gates \(webgpu-dp4a: webgpu-dp4a failed gate/);
});

test('without a measurement of every usable backend the rule is the preference order', () => {
  const c = chooseBackend([row('webgpu-dp4a', false, null), row('webgpu-lut', true, null),
    row('js-cpu', true, 10)]);
  assert.equal(c.selected, 'webgpu-lut');
  assert.equal(c.rule, 'preference');
  assert.match(c.reason, /speed not measured/);
});

test('a measurement stopped below the best is refused (the cutoff may only stop the slower)', () => {
  assert.throws(() => chooseBackend([row('webgpu-dp4a', true, 100, false), row('js-cpu', true, 200)]),
    /stopped at 100 ms, below the best 200 ms/);
  assert.throws(() => chooseBackend([row('webgpu-dp4a', true, 100, false)]), /stopped early/);
});

function goldenInputs() {
  const { model, optim, seed, steps } = golden.params;
  const xs = blob(golden.inputs.x, Int32Array);
  const ys = blob(golden.inputs.y, Int32Array);
  const loss = blob(golden.outputs.loss, Float32Array);
  const bt = xs.length / steps;
  const batch = (s) => ({ x: xs.slice(s * bt, (s + 1) * bt), y: ys.slice(s * bt, (s + 1) * bt) });
  return { model, optim, seed, batch, loss, hashes: golden.outputs.hashes.value };
}

test('the trainer on the CPU tier: golden hashes through step, grads + apply, export/load', async () => {
  const g = goldenInputs();
  const events = [];
  const a = new Trainer((e) => events.push(e));
  await assert.rejects(a.handle({ type: 'step', ...g.batch(0), hash: true }),
    (exc) => exc instanceof TrainerError && /trainer is new/.test(exc.message) &&
      exc.hint === 'send init first');
  const sel = (await a.handle({ type: 'init', model: g.model, optim: g.optim, seed: g.seed,
    backend: 'auto', measure: true, audit: 16, sources: {} })).result;
  // No navigator.gpu under Node: both WebGPU rows unusable with the reason, the CPU measured.
  assert.equal(sel.backend, 'js-cpu');
  assert.equal(sel.choice.rule, 'measured');
  assert.deepEqual(sel.rows.map((r) => [r.name, r.gates_passed]),
    [['webgpu-dp4a', false], ['webgpu-lut', false], ['js-cpu', true]]);
  assert.match(sel.rows[0].failure, /navigator.gpu is missing: this browser has no WebGPU/);
  assert.ok(sel.rows[2].step_ms > 0 && sel.rows[2].step_complete);
  assert.deepEqual(events.filter((e) => e.kind === 'state').map((e) => `${e.from}->${e.to}`),
    ['new->selecting', 'selecting->ready']);
  assert.equal(events.filter((e) => e.kind === 'selection').length, 1);
  await assert.rejects(a.handle({ type: 'init', model: g.model, seed: 1 }), /already ready/);
  await assert.rejects(a.handle({ type: 'inject-fault', afterProducts: 1 }),
    /unknown request inject-fault/);

  // Steps 1-2 with `step`, step 3 with grads + apply, like a peer that combines gradients.
  for (let s = 0; s < 2; s++) {
    const r = (await a.handle({ type: 'step', ...g.batch(s), hash: true })).result;
    assert.equal(r.step, s + 1);
    assert.equal(bitsOf(r.loss), bitsOf(g.loss[s]));
    assert.equal(r.hash, g.hashes[s]);
    assert.equal(r.backend, 'js-cpu');
    assert.equal(r.probe, 'a3cb5679bf27de938f3229024ecaed4620b060dc524e6e7de85e3c07b738aa19');
  }
  const gr = (await a.handle({ type: 'grads', ...g.batch(2) })).result;
  assert.equal(bitsOf(gr.loss), bitsOf(g.loss[2]));
  assert.equal(gr.grads.names[0], 'wte');
  const applied = (await a.handle({ type: 'apply', grads: gr.grads })).result;
  assert.equal(applied.step, 3);
  assert.equal(applied.hash, g.hashes[2]);

  // export -> a second trainer loads it and continues exactly like the first.
  const { state } = (await a.handle({ type: 'export' })).result;
  const b = new Trainer();
  const loaded = (await b.handle({ type: 'init', model: g.model, optim: g.optim, seed: 99,
    backend: 'js-cpu', measure: false, audit: 16, sources: {}, state })).result;
  assert.equal(loaded.step, 3);
  assert.equal(loaded.hash, g.hashes[2]);
  const ra = (await a.handle({ type: 'step', ...g.batch(3), hash: true })).result;
  const rb = (await b.handle({ type: 'step', ...g.batch(3), hash: true })).result;
  assert.equal(ra.hash, g.hashes[3]);
  assert.equal(rb.hash, g.hashes[3]);

  // A state of another model is refused before anything changes.
  const wrong = { ...state, params: { names: state.params.names.slice(1),
    arrays: state.params.arrays.slice(1) } };
  await assert.rejects(b.handle({ type: 'load', state: wrong }),
    (exc) => exc instanceof TrainerError && /load: params lists/.test(exc.message));
  const short = { ...state, m: { names: state.m.names,
    arrays: state.m.arrays.map((t, i) => (i === 0 ? t.subarray(1) : t)) } };
  await assert.rejects(b.handle({ type: 'load', state: short }), /m wte has \d+ values/);
  assert.equal((await b.handle({ type: 'hash' })).result.hash, g.hashes[3]);
  // A forced WebGPU backend with no WebGPU: refused with the reason and a hint.
  await assert.rejects(new Trainer().handle({ type: 'init', model: g.model, seed: 1,
    backend: 'webgpu-dp4a', measure: true, audit: 16, sources: {} }),
  (exc) => /webgpu-dp4a was requested but is not usable here/.test(exc.message) &&
    /backend 'auto'/.test(exc.hint));
});

// A tier that claims to be WebGPU and whose every product throws `error`; gpu.failed() answers
// `deviceFailed` (the real GpuDevice asks device.lost).
function fakeGpuTier(error, deviceFailed) {
  const fail = () => { throw error; };
  return {
    name: 'webgpu-dp4a', adapter: 'fake adapter', gemm: { kind: 'dp4a' }, onGpu: true,
    gpu: { lost: deviceFailed ? 'device lost (unknown): fake' : null, faults: [],
      failed: async () => deviceFailed },
    ops: { qmatmul: fail, gradMatmulLeft: fail, gradMatmulRight: fail },
  };
}

async function cpuTrainer(events) {
  const g = goldenInputs();
  const t = new Trainer((e) => events.push(e));
  const init = (await t.handle({ type: 'init', model: g.model, optim: g.optim, seed: g.seed,
    backend: 'js-cpu', measure: false, audit: 16, sources: {} })).result;
  return { g, t, init };
}

test('a lost device with nothing to rebuild on: the step is recomputed on the CPU tier', async () => {
  const events = [];
  const { g, t } = await cpuTrainer(events);
  t.tier = fakeGpuTier(new GpuFault('device lost'), true);
  const r = (await t.handle({ type: 'step', ...g.batch(0), hash: true })).result;
  assert.equal(r.backend, 'js-cpu');
  assert.equal(r.hash, g.hashes[0]);
  assert.equal(bitsOf(r.loss), bitsOf(g.loss[0]));
  const kinds = events.map((e) => e.kind).filter((k) => k.startsWith('device') || k === 'fallback');
  assert.deepEqual(kinds, ['device-lost', 'fallback']);
  const fallback = events.find((e) => e.kind === 'fallback');
  assert.equal(fallback.from, 'webgpu-dp4a');
  assert.match(fallback.reason, /^device lost \(unknown\): fake; no device could be rebuilt: WebGPU is not available here/);
});

test('a device lost too often is not rebuilt again', async () => {
  const events = [];
  const { g, t } = await cpuTrainer(events);
  t.rebuilds = MAX_DEVICE_REBUILDS;
  t.tier = fakeGpuTier(new GpuFault('device lost'), true);
  const r = (await t.handle({ type: 'step', ...g.batch(0), hash: true })).result;
  assert.equal(r.hash, g.hashes[0]);
  assert.match(events.find((e) => e.kind === 'fallback').reason,
    new RegExp(`lost ${MAX_DEVICE_REBUILDS + 1} times; not rebuilding it again`));
});

test('an error that is not a device failure (a failed audit) stops the step, never retried', async () => {
  const events = [];
  const { g, t, init } = await cpuTrainer(events);
  const tier = fakeGpuTier(new Error('product 3: live audit failed: ...'), false);
  t.tier = tier;
  await assert.rejects(t.handle({ type: 'step', ...g.batch(0), hash: true }), /live audit failed/);
  assert.equal(t.tier, tier); // no fallback: the page decides
  assert.deepEqual(events.filter((e) => e.kind === 'device-lost' || e.kind === 'fallback'), []);
  assert.equal((await t.handle({ type: 'hash' })).result.hash, init.hash); // weights untouched
});

// The test-only trainer of tests/pages/fault_worker.js: its request checked like the product's,
// refused on the CPU tier, and the device destroyed after exactly the products it was armed for.
test('the test worker\'s inject-fault: parsed, refused with hints, fired on the Nth product', async () => {
  const ok = parseTestRequest({ id: 6, type: 'inject-fault', afterProducts: 3, rebuildSources: { dp4a: 'x' } });
  assert.deepEqual(ok, { id: 6, type: 'inject-fault', afterProducts: 3, rebuildSources: { dp4a: 'x' } });
  assert.deepEqual(parseTestRequest({ id: 1, type: 'inject-fault', afterProducts: 1 }).rebuildSources, {});
  assert.equal(parseTestRequest({ id: 2, type: 'hash' }).type, 'hash'); // the rest: the product's
  const bad = (msg, pattern) => assert.throws(() => parseTestRequest(msg), (exc) =>
    exc instanceof MessageError && pattern.test(exc.message) && exc.hint.length > 0);
  bad({ id: 1, type: 'inject-fault', afterProducts: 0 }, /afterProducts must be an integer/);
  bad({ id: 1, type: 'inject-fault', afterProducts: 1.5 }, /afterProducts must be an integer/);
  bad({ id: -1, type: 'inject-fault', afterProducts: 1 }, /id must be/);
  bad({ id: 1, type: 'inject-fault', afterProducts: 1, when: 2 }, /unknown field 'when'/);
  bad({ id: 1, type: 'inject-fault', afterProducts: 1, rebuildSources: { cuda: 'x' } },
    /rebuildSources.cuda is not WGSL/);
  bad({ id: 1, type: 'inject-fault', afterProducts: 1, rebuildSources: [] }, /must be an object/);
  bad({ id: 1, type: 'train' }, /unknown request type "train"/);

  const events = [];
  const g = goldenInputs();
  const t = new FaultTrainer((e) => events.push(e));
  await assert.rejects(t.handle({ type: 'inject-fault', afterProducts: 1, rebuildSources: {} }),
    (exc) => /the trainer is new/.test(exc.message) && exc.hint === 'send init first');
  await t.handle({ type: 'init', model: g.model, optim: g.optim, seed: g.seed,
    backend: 'js-cpu', measure: false, audit: 16, sources: {} });
  await assert.rejects(t.handle({ type: 'inject-fault', afterProducts: 1, rebuildSources: {} }),
    (exc) => /computes on js-cpu, no GPU device to lose/.test(exc.message) && exc.hint.length > 0);
  let destroyed = 0;
  t.tier = { ...fakeGpuTier(new GpuFault('unused'), true), gpu: { device: { destroy: () => { destroyed += 1; } } } };
  const armed = await t.handle({ type: 'inject-fault', afterProducts: 2, rebuildSources: { lut: 'w' } });
  assert.deepEqual(armed.result, { armed: true, backend: 'webgpu-dp4a' });
  t.afterGpuProduct({ other: 'tier' }); // a product of a tier already replaced: not counted
  t.afterGpuProduct(t.tier);
  assert.equal(destroyed, 0);
  t.afterGpuProduct(t.tier);
  assert.equal(destroyed, 1);
  assert.deepEqual(t.planted, { lut: 'w' });
  t.afterGpuProduct(t.tier);
  assert.equal(destroyed, 1, 'a fault fires once');
  // The product's trainer has the seam and nothing behind it.
  const plain = new Trainer();
  plain.tier = t.tier;
  plain.afterGpuProduct(t.tier);
  assert.equal(destroyed, 1);
});

test('a missing navigator.gpu is explained by the context: plain http, or a browser without it', async () => {
  assert.match(noWebGpuReason(true), /this browser has no WebGPU, or has it switched off/);
  assert.doesNotMatch(noWebGpuReason(true), /secure context/);
  assert.match(noWebGpuReason(false), /only to a secure context, https:\/\/ or localhost, and this page is plain http/);
  assert.doesNotMatch(noWebGpuReason(false), /this browser has no WebGPU/);
  // acquireGpu reads isSecureContext: a plain-http page is told about https, not about its browser.
  const had = Object.getOwnPropertyDescriptor(globalThis, 'isSecureContext');
  try {
    Object.defineProperty(globalThis, 'isSecureContext', { value: false, configurable: true });
    await assert.rejects(acquireGpu(), (exc) => exc instanceof GpuUnavailable &&
      exc.message.startsWith(noWebGpuReason(false)) && /the CPU mirror computes the same bits/.test(exc.message));
  } finally {
    if (had) Object.defineProperty(globalThis, 'isSecureContext', had);
    else delete globalThis.isSecureContext;
  }
  await assert.rejects(acquireGpu(), (exc) => exc.message.startsWith(noWebGpuReason(true)));
});
