// The live panel's outer-run read-outs (static/js/page/livefigures.js: innerStepsOf, syncLine,
// bytesPerToken, groupRate's inner steps) and the worker's outer requests (train/messages.js):
// right inputs, and wrong ones refused or shown as unknown, never as a number. The page itself:
// tests/page/test_page_outer_form.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as F from '../../static/js/page/livefigures.js';
import { MessageError, parseRequest } from '../../static/js/train/messages.js';
import { WorkerReplica } from '../../static/js/p2p/modelreplica.js';
import { trainsOuterRuns } from '../../static/js/p2p/machine/replica.js';

const OUTER = { sync: 'outer', steps: 10, outer: { steps: 4, lr: 0.7, momentum: 0.9 } };
const PER_STEP = { steps: 10 };

test('innerStepsOf: H of an outer run, 1 otherwise (a malformed outer counts as per-step)', () => {
  assert.equal(F.innerStepsOf(OUTER), 4);
  assert.equal(F.innerStepsOf(PER_STEP), 1);
  assert.equal(F.innerStepsOf({ sync: 'step', outer: { steps: 4 } }), 1, 'outer without sync');
  assert.equal(F.innerStepsOf({ sync: 'outer', outer: { steps: 2.5 } }), 1);
  assert.equal(F.innerStepsOf(null), 1);
});

test('syncLine: the round, H and the inner steps done', () => {
  assert.equal(F.syncLine(OUTER, 3),
    'round 3 of 10: 4 inner steps per device per round (12 of 40 inner steps done)');
  assert.equal(F.syncLine({ ...OUTER, outer: { steps: 1 } }, 1),
    'round 1 of 10: 1 inner step per device per round (1 of 10 inner steps done)');
  assert.equal(F.syncLine({ ...OUTER, outer: { steps: 4, cut: 'batch' } }, 3),
    'round 3 of 10: 4 inner steps per round at an even share, more on faster devices (12 of 40 done)');
  assert.equal(F.syncLine(PER_STEP, 3), 'every step (per-step exchange)');
  assert.equal(F.syncLine({ ...OUTER, outer: { steps: 4, overlap: 0.5 } }, 3),
    'round 3 of 10: 4 inner steps per device per round (12 of 40 inner steps done); 50% of each ' +
    'round\'s inner steps run beside its exchange');
});

test('bytesPerToken: bytes sent over the tokens of this device\'s shares x H', () => {
  const recs = [{ share: 2, bytesSent: 1000 }, { share: 0, bytesSent: 1000 },
    { share: 2, bytesSent: 4096 }];
  assert.equal(F.bytesPerToken(recs, 32, 1), 4096 / (4 * 32));
  assert.equal(F.bytesPerToken(recs, 32, 4), 4096 / (4 * 32 * 4), 'H inner steps per round');
  assert.equal(F.bytesPerToken([{ share: 0, bytesSent: 10 }], 32), null, 'trained nothing');
  assert.equal(F.bytesPerToken([], 32), null);
  assert.equal(F.bytesPerToken([{ share: 1, bytesSent: undefined }], 32), null);
  assert.equal(F.bytesPerTokenLine(1377.4), '1,377 bytes per token sent by this device');
  assert.equal(F.bytesPerTokenLine(13.77), '13.8 bytes per token sent by this device');
  assert.equal(F.bytesPerTokenLine(0.964), '0.96 bytes per token sent by this device');
  assert.equal(F.bytesPerTokenLine(null), '–');
  assert.equal(F.bytesPerTokenLine(Infinity), '–');
});

test('groupRate counts H inner steps of an outer round\'s sequences', () => {
  const recs = [{ shares: [1, 1], appliedAtMs: 0 }, { shares: [1, 1], appliedAtMs: 1000 }];
  assert.equal(F.groupRate(recs, 1, 32), 64);
  assert.equal(F.groupRate(recs, 1, 32, 5, 4), 256);
  assert.equal(F.progressLine(3, 10, null, 'round'), 'round 3 of 10');
});

test('the page\'s replica trains outer runs (the machine then accepts sync outer)', () => {
  const r = new WorkerReplica({ tokenizerSha256: 'ab'.repeat(32), vocabSize: 300, backend: 'js-cpu',
    makeWorker: () => null });
  assert.ok(trainsOuterRuns(r));
  r.setOuter({ innerSteps: 3, lr: 0.7, momentum: 0.9 });
  assert.deepEqual(r.outer, { innerSteps: 3, lr: 0.7, momentum: 0.9, overlap: 0, cut: 'share' },
    'no overlap, cut by shares');
  r.setOuter({ innerSteps: 3, lr: 0.7, momentum: 0.9, overlap: 0.5, cut: 'batch' });
  assert.equal(r.outer.overlap, 0.5);
  assert.equal(r.outer.cut, 'batch');
  r.setOuter(null);
  assert.equal(r.outer, null);
});

test('the worker\'s outer requests: each malformed one refused with a hint', () => {
  const x = new Int32Array(8).fill(1);
  const ok = { id: 1, type: 'round', steps: [[{ x, y: x, rows: 1 }]], count: 1, token: 1 };
  assert.equal(parseRequest(ok).type, 'round');
  assert.equal(parseRequest({ ...ok, early: true }).early, true);
  const bad = [
    [{ ...ok, steps: [] }, /steps must be a list of 1 to/],
    [{ ...ok, steps: [[]] }, /non-empty list of pieces/],
    [{ ...ok, steps: [[{ x, y: x, rows: 3 }]] }, /8 inputs, 8 targets for 3 rows/],
    [{ ...ok, steps: [[{ x, y: x.subarray(1), rows: 1 }]] }, /8 inputs, 7 targets/],
    [{ ...ok, count: 2 }, /the inner steps hold 1 sequences, count is 2/],
    [{ ...ok, steps: [ok.steps[0], ok.steps[0]] }, /steps must be a list of 1 to count \(1\) inner steps/],
    [{ ...ok, count: 4096 * 4096 + 1 }, /count must be an integer/],
    [{ ...ok, token: -1 }, /token must be an integer/],
    [{ ...ok, early: 1 }, /round: early must be true or false/],
    [{ ...ok, extra: 1 }, /unknown field 'extra'/],
    [{ id: 1, type: 'outer', outer: { innerSteps: 0, lr: 0.7, momentum: 0.9 } }, /innerSteps must be/],
    [{ id: 1, type: 'outer', outer: { innerSteps: 2, lr: NaN, momentum: 0.9 } }, /lr must be a finite/],
    [{ id: 1, type: 'outer', outer: { innerSteps: 2, lr: 1, momentum: 0.9, overlap: 2 } },
      /outer.overlap must be a number in \[0, 1\]/],
    [{ id: 1, type: 'outer', outer: { innerSteps: 2, lr: 1, momentum: 0.9, cut: 'lanes' } },
      /outer.cut must be share or batch/],
    [{ id: 1, type: 'outer', outer: { innerSteps: 2, lr: 1, momentum: 0.9 },
      shared: { step: 1 } }, /shared.momentum must be/],
    [{ id: 1, type: 'outer-apply', mean: [0], token: null }, /mean must be a Float32Array/],
    [{ id: 1, type: 'outer-apply', mean: new Float32Array(1), token: 1.5 }, /token must be an integer/],
  ];
  for (const [msg, want] of bad) {
    assert.throws(() => parseRequest(msg), (exc) => exc instanceof MessageError &&
      want.test(exc.message) && exc.hint.length > 0, want.source);
  }
});
