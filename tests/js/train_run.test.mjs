// The golden training run (kind `train_run` in tests/vectors/manifest.json, generator
// server/daisychain/vectors.py): the JS model (static/js/model/) trains the tiny configuration
// from the case's seed on the stored batches and must reproduce the loss bits and the state hash
// after every step. tests/js/vectors.test.mjs leaves this kind to this file (the run is async:
// hashes come from crypto.subtle).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createHash } from 'node:crypto';
import * as M from '../../static/js/model/index.js';
import { REPO, bitsOf } from './helpers.mjs';

const DIR = path.join(REPO, 'tests', 'vectors');
const manifest = JSON.parse(fs.readFileSync(path.join(DIR, 'manifest.json'), 'utf-8'));
const cases = manifest.cases.filter((c) => c.kind === 'train_run');

function blob(field, Type, what) {
  const raw = fs.readFileSync(path.join(DIR, field.blob));
  assert.equal(raw.length, field.bytes, `${what}: blob size`);
  assert.equal(createHash('sha256').update(raw).digest('hex'), field.sha256, `${what}: blob hash`);
  assert.equal(field.dtype, { Int32Array: 'int32', Float32Array: 'float32' }[Type.name], what);
  const a = new Type(new Uint8Array(raw).buffer);
  assert.equal(a.length, field.shape.reduce((p, q) => p * q, 1), `${what}: shape`);
  return a;
}

test('the manifest has a train_run case that checks steps 1, 2 and 10', () => {
  assert.ok(cases.length > 0, 'no train_run case in tests/vectors/manifest.json');
  for (const c of cases) assert.ok(c.params.steps >= 10, `${c.name}: ${c.params.steps} steps`);
});

for (const c of cases) {
  test(`golden run ${c.name}: loss bits and state hash after every step`, async (t) => {
    const { model, optim, seed, steps } = c.params;
    const cfg = M.modelConfig(model);
    const x = blob(c.inputs.x, Int32Array, `${c.name} x`);
    const y = blob(c.inputs.y, Int32Array, `${c.name} y`);
    const loss = blob(c.outputs.loss, Float32Array, `${c.name} loss`);
    const hashes = c.outputs.hashes.value;
    assert.deepEqual(c.inputs.x.shape, [steps, cfg.batch, cfg.seqLen]);
    assert.equal(loss.length, steps);
    assert.equal(hashes.length, steps);

    const state = M.init(cfg, optim, seed);
    const bt = cfg.batch * cfg.seqLen;
    const times = [];
    for (let s = 0; s < steps; s++) {
      const t0 = performance.now();
      const r = await M.trainStep(state, x.subarray(s * bt, (s + 1) * bt), y.subarray(s * bt, (s + 1) * bt));
      times.push(performance.now() - t0);
      assert.equal(r.step, s + 1);
      assert.equal(bitsOf(r.loss), bitsOf(loss[s]),
        `${c.name}: loss of step ${s + 1} is ${r.loss}, expected ${loss[s]}`);
      assert.equal(r.hash, hashes[s], `${c.name}: state hash after step ${s + 1} differs`);
    }
    const warm = times.slice(1).sort((a, b) => a - b);
    t.diagnostic(`JS step: first ${times[0].toFixed(0)} ms, median of the rest ` +
      `${warm[warm.length >> 1].toFixed(0)} ms (incl. hashing)`);
  });
}
