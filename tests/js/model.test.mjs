// The JS model (static/js/model/) against the Python reference, bit for bit: init, forward
// logits, loss and every gradient (including a short, non-power-of-two batch), AdamW (warmup,
// linear schedule, clipping, decay), batches and the state hash. The reference data is made by
// the Python package in a temporary directory when the suite runs (node:child_process here in
// the tests only; static/ never spawns anything).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import * as M from '../../static/js/model/index.js';
import { key, below, uniform } from '../../static/js/numerics/prng.js';
import { REPO, assertBitsEqual } from './helpers.mjs';

const SCRIPT = String.raw`
import json, sys
import numpy as np
from daisychain import batches, training
from daisychain.model import gpt
from daisychain.model.config import ModelConfig
from daisychain.model.params import init_params
from daisychain.numerics import prng
from daisychain.optim import AdamW, AdamWConfig, learning_rate

out = sys.argv[1]
meta = {}
def save(name, arrays):
    np.concatenate([np.asarray(a, dtype=np.float32).reshape(-1) for a in arrays]).tofile(f"{out}/{name}.bin")

# 1. tiny (V = 2048): init, logits, loss and gradients
cfg = ModelConfig(vocab_size=2048, width=64, layers=2, heads=4, seq_len=64, batch=4)
x = (np.arange(256) * 37 % 2048).reshape(4, 64)
y = ((np.arange(256) * 91 + 5) % 2048).reshape(4, 64)
p = init_params(cfg, 7)
save("tiny_params", p.values())
save("tiny_logits", [gpt.forward_logits(p, cfg, x)])
loss, g = gpt.forward_backward(p, cfg, x, y)
save("tiny_grads", g.values())
meta["tiny_loss"] = int(np.array([loss], dtype=np.float32).view(np.uint32)[0])
st = training.init(cfg, AdamWConfig(), 7)
meta["tiny_init_hash"] = training.state_hash(st)

# 2. odd shapes: B = 3 sequences of T' = 37 < seq_len, one layer, mlp_mult 2, V = 300
cfg2 = ModelConfig(vocab_size=300, width=64, layers=1, heads=4, seq_len=64, batch=3, mlp_mult=2)
x2 = np.array(prng.below(prng.key(3, 1), 3 * 37, 300)).reshape(3, 37)
y2 = np.array(prng.below(prng.key(3, 2), 3 * 37, 300)).reshape(3, 37)
p2 = init_params(cfg2, 5)
for i, (k, a) in enumerate(p2.items()):  # gains away from 1, so the norms' products count
    if k == 'gf' or k.endswith(('.g1', '.g2')):
        a[...] = np.float32(1.0) + (prng.uniform(prng.key(4, i), a.size) - np.float32(0.5))
loss2, g2 = gpt.forward_backward(p2, cfg2, x2, y2)
save("odd_grads", g2.values())
save("odd_logits", [gpt.forward_logits(p2, cfg2, x2)])
meta["odd_loss"] = int(np.array([loss2], dtype=np.float32).view(np.uint32)[0])

# 3. AdamW: warmup 1, linear to step 4, clipping on the first step only
ocfg = AdamWConfig(lr=1e-2, warmup_steps=1, schedule="linear", total_steps=4, final_lr=1e-3)
opt = AdamW(ocfg)
state = opt.init_state(p2)
stats = []
for s, amp in ((0, 1.0), (1, 1e-4)):
    grads = {k: (prng.uniform(prng.key(9, s, i), a.size).reshape(a.shape) - np.float32(0.5)) * np.float32(amp)
             for i, (k, a) in enumerate(p2.items())}
    r = opt.step(p2, grads, state)
    stats.append([float(r.lr), float(r.grad_norm), bool(r.clipped)])
    save(f"opt_state_{s}", [*p2.values(), *state.m.values(), *state.v.values()])
meta["opt_stats"] = stats
meta["lr_linear"] = [float(learning_rate(ocfg, t)) for t in range(1, 7)]
w3 = AdamWConfig(lr=3e-3, warmup_steps=3)
meta["lr_warmup"] = [float(learning_rate(w3, t)) for t in range(1, 6)]

# 4. batches
tokens = prng.below(prng.key(5, 99), 5000, 2048)
bx, by = batches.sample_batch(tokens, 4, 64, 3, 2, 1)
np.concatenate([bx.reshape(-1), by.reshape(-1)]).astype(np.int32).tofile(f"{out}/batch.bin")
json.dump(meta, open(f"{out}/meta.json", "w"))
`;

let dir;
let meta;
const f32file = (name) => new Float32Array(new Uint8Array(fs.readFileSync(path.join(dir, name))).buffer);
const bitsToF32 = (b) => new Float32Array(new Uint32Array([b]).buffer)[0];

function concat(arrays) {
  let n = 0;
  for (const a of arrays) n += a.length;
  const out = new Float32Array(n);
  let o = 0;
  for (const a of arrays) {
    out.set(a, o);
    o += a.length;
  }
  return out;
}

// Compares a Map of tensors with the concatenated reference tensor by tensor (names in errors).
function assertTensorsEqual(map, flat, what) {
  let o = 0;
  for (const [name, a] of map) {
    assertBitsEqual(a, flat.subarray(o, o + a.length), `${what} ${name}`);
    o += a.length;
  }
  assert.equal(o, flat.length, `${what}: total size`);
}

const TINY = M.modelConfig({ vocabSize: 2048, width: 64, layers: 2, heads: 4, seqLen: 64, batch: 4 });
const ODD = M.modelConfig({ vocab_size: 300, width: 64, layers: 1, heads: 4, seq_len: 64, batch: 3, mlp_mult: 2 });
const tinyX = Int32Array.from({ length: 256 }, (_, i) => (i * 37) % 2048);
const tinyY = Int32Array.from({ length: 256 }, (_, i) => (i * 91 + 5) % 2048);
const oddX = Int32Array.from(below(key(3, 1), 3 * 37, 300));
const oddY = Int32Array.from(below(key(3, 2), 3 * 37, 300));
// init_params(ODD, 5) with the gains moved away from 1 (as the Python script does)
function oddParams() {
  const params = M.initParams(ODD, 5);
  [...params].forEach(([name, a], i) => {
    if (!M.isGain(name)) return;
    const u = uniform(key(4, i), a.length);
    for (let j = 0; j < a.length; j++) a[j] = Math.fround(1 + Math.fround(u[j] - 0.5));
  });
  return params;
}

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dc-model-'));
  const py = process.env.PYTHON ?? 'python';
  const res = spawnSync(py, ['-c', SCRIPT, dir], {
    cwd: REPO,
    env: { ...process.env, PYTHONPATH: path.join(REPO, 'server') },
    encoding: 'utf-8',
    timeout: 120_000,
  });
  assert.equal(res.status, 0, `Python reference failed: ${res.error ?? ''}\n${res.stderr}`);
  meta = JSON.parse(fs.readFileSync(path.join(dir, 'meta.json'), 'utf-8'));
});

after(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('config: presets, derived sizes and validation hints', () => {
  assert.equal(M.countParams(M.preset('tiny')), 233792); // = Python's tiny
  assert.equal(M.preset('tiny', { vocabSize: 2048 }).vocabSize, 2048);
  assert.equal(TINY.headDim, 16);
  assert.equal(TINY.hidden, 256);
  assert.equal(TINY.tokens, 256);
  assert.equal(TINY.normEps, Math.fround(1e-5));
  assert.equal(M.modelConfig({ ...TINY, norm_eps_bits: 925353388 }).normEps, Math.fround(1e-5));
  assert.throws(() => M.modelConfig({ ...TINY, heads: 3 }), /divisible/);
  assert.throws(() => M.modelConfig({ ...TINY, heads: 2 }), /power of 4/);
  assert.throws(() => M.modelConfig({ ...TINY, layers: 0 }), /positive integer/);
  assert.throws(() => M.modelConfig({ ...TINY, vocabSize: 2 ** 24 }), /below 2\^24/);
  assert.throws(() => M.preset('huge'), /unknown model preset/);
  assert.deepEqual(M.paramNames(M.modelConfig({ ...TINY, layers: 1 })),
    ['wte', 'wpe', 'h.0.g1', 'h.0.wqkv', 'h.0.wo', 'h.0.g2', 'h.0.w1', 'h.0.w2', 'gf']);
});

test('initParams matches init_params bit for bit (tiny, seed 7)', () => {
  assertTensorsEqual(M.initParams(TINY, 7), f32file('tiny_params.bin'), 'init');
});

test('forwardLogits matches forward_logits (tiny, and B = 3, T = 37)', () => {
  const params = M.initParams(TINY, 7);
  assertBitsEqual(M.forwardLogits(params, TINY, tinyX), f32file('tiny_logits.bin'), 'tiny logits');
  const odd = oddParams();
  assertBitsEqual(M.forwardLogits(odd, ODD, oddX), f32file('odd_logits.bin'), 'odd logits');
});

test('forwardBackward: loss and every gradient match (tiny)', () => {
  const { loss, grads } = M.forwardBackward(M.initParams(TINY, 7), TINY, tinyX, tinyY);
  assert.equal(loss, bitsToF32(meta.tiny_loss), 'loss');
  assertTensorsEqual(grads, f32file('tiny_grads.bin'), 'grad');
});

test('forwardBackward: B = 3, T = 37 < seq_len, mlp_mult 2 (padding, odd rows, dwpe tail)', () => {
  const params = oddParams();
  const { loss, grads } = M.forwardBackward(params, ODD, oddX, oddY);
  assert.equal(loss, bitsToF32(meta.odd_loss), 'loss');
  assertTensorsEqual(grads, f32file('odd_grads.bin'), 'grad');
  const wpe = grads.get('wpe');
  assert.ok(wpe.subarray(37 * 64).every((v) => Object.is(v, 0)), 'dwpe rows past T are +0');
  // a second call reuses the workspace and returns fresh, equal gradients
  const again = M.forwardBackward(params, ODD, oddX, oddY);
  assert.notEqual(again.grads.get('wte'), grads.get('wte'));
  assertTensorsEqual(again.grads, f32file('odd_grads.bin'), 'grad (second call)');
});

test('forwardBackward onGrad: each parameter once, when final, the last layers first', () => {
  const seen = [];
  const snapshots = new Map();
  const { grads } = M.forwardBackward(M.initParams(TINY, 7), TINY, tinyX, tinyY, {
    onGrad: (name, g) => {
      seen.push(name);
      snapshots.set(name, g.slice()); // the values at the moment it was reported
    },
  });
  assert.deepEqual([...seen].sort(), [...grads.keys()].sort());
  assert.equal(new Set(seen).size, seen.length);
  assert.equal(seen[0], 'gf');
  assert.deepEqual(seen.slice(-2), ['wte', 'wpe']);
  assert.ok(seen.indexOf(`h.${TINY.layers - 1}.w2`) < seen.indexOf('h.0.g1'));
  for (const [name, g] of grads) assertBitsEqual(snapshots.get(name), g, `${name} was final`);
  assertTensorsEqual(grads, f32file('tiny_grads.bin'), 'grad');
});

test('forward inputs are validated', () => {
  const params = oddParams();
  assert.throws(() => M.forwardLogits(params, ODD, Int32Array.of(300), { batch: 1 }), /token ids/);
  assert.throws(() => M.forwardLogits(params, ODD, new Int32Array(65), { batch: 1 }), /sequence length/);
  assert.throws(() => M.forwardLogits(params, ODD, new Int32Array(4)), /split/);
});

test('learning-rate schedules match learning_rate', () => {
  const linear = M.adamwConfig({ lr: 1e-2, warmup_steps: 1, schedule: 'linear', total_steps: 4, final_lr: 1e-3 });
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((t) => M.learningRate(linear, t)), meta.lr_linear);
  const warm = M.adamwConfig({ lr: 3e-3, warmupSteps: 3 });
  assert.deepEqual([1, 2, 3, 4, 5].map((t) => M.learningRate(warm, t)), meta.lr_warmup);
  assert.throws(() => M.learningRate(warm, 0), /counted from 1/);
  assert.throws(() => M.adamwConfig({ schedule: 'linear' }), /total_steps/);
  assert.throws(() => M.adamwConfig({ beta1: 1 }), /betas/);
});

test('AdamW: two steps (clipped, then not) match params, m and v bit for bit', () => {
  const params = oddParams();
  const opt = new M.AdamW({ lr: 1e-2, warmup_steps: 1, schedule: 'linear', total_steps: 4, final_lr: 1e-3 });
  const state = opt.initState(params);
  const names = [...params.keys()];
  for (const [s, amp] of [[0, 1.0], [1, 1e-4]]) {
    const grads = new Map(names.map((name, i) => {
      const g = uniform(key(9, s, i), params.get(name).length);
      for (let j = 0; j < g.length; j++) g[j] = Math.fround(Math.fround(g[j] - 0.5) * Math.fround(amp));
      return [name, g];
    }));
    const before = concat([...grads.values()]);
    const r = opt.step(params, grads, state);
    assertBitsEqual(concat([...grads.values()]), before, 'grads are not modified');
    const [lr, norm, clipped] = meta.opt_stats[s];
    assert.equal(r.lr, lr, `step ${s + 1} lr`);
    assert.equal(r.gradNorm, norm, `step ${s + 1} norm`);
    assert.equal(r.clipped, clipped, `step ${s + 1} clipped`);
    assert.equal(r.step, s + 1);
    const flat = f32file(`opt_state_${s}.bin`);
    const all = concat([...params.values(), ...state.m.values(), ...state.v.values()]);
    assertBitsEqual(all, flat, `params, m, v after step ${s + 1}`);
  }
  assert.deepEqual(meta.opt_stats.map((s) => s[2]), [true, false], 'the data exercise both paths');
});

test('sampleBatch matches sample_batch (seed 3, step 2, rank 1)', () => {
  const tokens = below(key(5, 99), 5000, 2048);
  const { x, y } = M.sampleBatch(tokens, 4, 64, 3, 2, 1);
  const ref = new Int32Array(new Uint8Array(fs.readFileSync(path.join(dir, 'batch.bin'))).buffer);
  assert.deepEqual(x, ref.subarray(0, 256));
  assert.deepEqual(y, ref.subarray(256));
  assert.throws(() => M.sampleBatch(new Int32Array(65), 1, 64, 0, 0), /too short/);
});

test('stateHash of a fresh state matches state_hash', async () => {
  const state = M.init(TINY, {}, 7);
  assert.equal(await M.stateHash(state), meta.tiny_init_hash);
});
