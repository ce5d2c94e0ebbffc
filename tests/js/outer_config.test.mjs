// Outer runs' config in the JavaScript mirror (docs/PROTOCOL.md, "Outer runs"): sync/outer are
// parsed and written as Python does (a per-step config keeps its bytes), every wrong outer
// field is refused with its rule, and the page refuses a valid outer run with rule page-outer
// and a hint naming the headless peer. (tests/p2p/test_outer_config.py compares every case
// with Python's answer, message and hint included.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as M from '../../static/js/p2p/messages.js';
import * as R from '../../static/js/p2p/runconfig.js';

const SHA = '5a'.repeat(32);
const ARGS = { tokenizerSha256: SHA, vocabSize: 2048 };

function raw(extra = {}) {
  const obj = {
    run: '0123456789abcdef', preset: null,
    model: { vocab_size: 2048, width: 64, layers: 2, heads: 4, seq_len: 64, batch: 4, mlp_mult: 4 },
    optim: { lr: 0.003, warmup_steps: 0, weight_decay: 0.1, clip: 1.5 },
    steps: 30, seed: 7, data: 'builtin', tokenizer_sha256: SHA, resume_step: 0,
    resume_hash: null, global_batch: 8, shares_by: 'speed', type: 'config', ...extra,
  };
  return JSON.stringify(obj);
}
const outer = (steps = 3, lr = 0.7, momentum = 0.9) => ({ steps, lr, momentum });

test('a per-step config writes no sync or outer; an outer config writes both', () => {
  const step = M.parse(raw());
  assert.equal(step.sync, 'step');
  assert.ok(!M.encode(step).includes('"sync"') && !M.encode(step).includes('"outer"'));
  const o = M.parse(raw({ sync: 'outer', outer: outer() }));
  assert.ok(M.encode(o).endsWith(
    '"shares_by":"speed","sync":"outer","outer":{"steps":3,"lr":0.7,"momentum":0.9},"type":"config"}'));
});

test('the page refuses a valid outer run, naming the headless peer', () => {
  assert.doesNotThrow(() => R.parse(M.parse(raw()), ARGS));
  assert.throws(() => R.parse(M.parse(raw({ sync: 'outer', outer: outer() })), ARGS), (exc) => {
    assert.equal(exc.code, 'incompatible');
    assert.equal(exc.rule, 'page-outer');
    assert.match(exc.hint, /this page cannot train outer runs yet; join with the headless peer/);
    return true;
  });
});

test('every wrong sync or outer field is refused with its rule', () => {
  const cases = [
    [{ sync: 'stream' }, 'sync'],
    [{ sync: 'outer', outer: outer(0) }, 'outer-steps'],
    [{ sync: 'outer', outer: outer(600000) }, 'outer-steps'],
    [{ sync: 'outer', outer: outer(3, 0) }, 'outer-lr'],
    [{ sync: 'outer', outer: outer(3, 11) }, 'outer-lr'],
    [{ sync: 'outer', outer: outer(3, 0.7, 1) }, 'outer-momentum'],
    [{ sync: 'outer', outer: outer(3, 0.7, -0.5) }, 'outer-momentum'],
  ];
  for (const [extra, rule] of cases) {
    assert.throws(() => R.parse(M.parse(raw(extra)), ARGS), (exc) => exc.rule === rule,
      JSON.stringify(extra));
  }
  for (const extra of [{ sync: 1 }, { sync: 'outer' }, { sync: 'outer', outer: outer('3') },
    { sync: 'outer', outer: outer(3, '0.7') }, { sync: 'outer', outer: outer(3.5) }]) {
    assert.throws(() => M.parse(raw(extra)), (exc) => exc.code === 'bad-message',
      JSON.stringify(extra));
  }
});

test('overlap: parsed and written only when not 0, its state counted, passed on as the run\'s', () => {
  const o = M.parse(raw({ sync: 'outer', outer: { ...outer(), overlap: 0.5 } }));
  assert.equal(o.outer.overlap, 0.5);
  assert.ok(M.encode(o).includes('"outer":{"steps":3,"lr":0.7,"momentum":0.9,"overlap":0.5}'));
  const plain = M.parse(raw({ sync: 'outer', outer: outer() }));
  assert.equal(plain.outer.overlap, 0);
  const args = { ...ARGS, outerRuns: true };
  const [a, b] = [plain, o].map((cfg) => R.parse(cfg, args));
  assert.equal(b.footprint.total - a.footprint.total,
    R.OVERLAP_STATE_BYTES_PER_PARAM * a.footprint.params, 'the measured weights and the carry');
  assert.equal(b.outer.overlap, 0.5);
  assert.equal(a.outer.overlap, 0);
  assert.throws(() => R.parse(M.parse(raw({ sync: 'outer', outer: { ...outer(), overlap: 2 } })), args),
    (exc) => exc.rule === 'outer-overlap');
});
