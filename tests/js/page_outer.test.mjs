// The page's outer rounds (static/js/p2p/modelreplica.js computeRound, apply and checkpoint on the
// training worker's train/outer.js) against the headless peer's (daisychain.p2p.modelreplica
// ModelReplica with set_outer, inner_start / adopt_inner, and p2p/inner.py inner_round),
// computed by the Python reference at test time on the same tokens and seed: every round's
// chunk payloads and loss, the outer hash after every outer step, and the checkpoint bytes.
// Rounds: a share of two lane pieces (5 sequences of each of H = 3 batch indices, so 4 inner
// steps of the batch, 4, 4, 4 and 3 sequences, cut across lanes and indices), then a share of 0
// (no inner steps: the inner AdamW state must stay as it was), then the first share again (it
// must continue from round 1's inner state). The applied mean is the peer's own dequantized pseudo-gradient (a group of one); the
// reduction across peers is the machine's and has its own traces (protocol_outer.test.mjs).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { python } from './protocol_helpers.mjs';
import { LocalWorker, digest, tokens } from './local_worker.mjs';
import { WorkerReplica } from '../../static/js/p2p/modelreplica.js';
import { modelConfig } from '../../static/js/model/config.js';
import { adamwConfig } from '../../static/js/model/optim.js';
import { decode } from '../../static/js/p2p/codec.js';
import { ReplicaRefused } from '../../static/js/p2p/machine/replica.js';
import { decodeCheckpoint } from '../../static/js/p2p/checkpoint.js';
import { resumeConfig } from '../../static/js/p2p/peer.js';
import { parse as parseRunConfig } from '../../static/js/p2p/runconfig.js';

const V = 300;
const SEED = 11;
const H = 3;
const OUTER = { innerSteps: H, lr: 0.7, momentum: 0.9 };
const MODEL = { vocab_size: V, width: 16, layers: 1, heads: 1, seq_len: 8, batch: 4, mlp_mult: 2 };
// [shares, rank] of protocol steps 1, 2, 3: two pieces (lane 0, a row of lane 1); a share of 0;
// the two pieces again.
const ROUNDS = [[[5, 3], 0], [[0, 8], 0], [[5, 3], 0]];

const PY = String.raw`
import hashlib, json, sys
import numpy as np
from daisychain.batches import sample_batch
from daisychain.model.config import ModelConfig
from daisychain.optim import AdamWConfig
from daisychain.outer.nesterov import OuterConfig
from daisychain.p2p import inner, shares
from daisychain.wire import codec
from daisychain.p2p.modelreplica import ModelReplica
inp = json.load(sys.stdin)
cfg = ModelConfig(**inp["model"])
h = inp["H"]
rep = ModelReplica("ab" * 32, cfg.vocab_size)
rep.set_outer(OuterConfig(h, inp["lr"], inp["momentum"], inp["overlap"], inp["cut"]))
rep.start(cfg, AdamWConfig(), inp["seed"])
tokens = np.array(inp["tokens"], dtype=np.uint16)
digest = lambda b: f"{len(b)}:{hashlib.sha256(b).hexdigest()}"
out = {"start": rep.hash, "rounds": []}
mean = None
for s, (sh, rank) in enumerate(inp["rounds"], start=1):
    count = sh[rank]
    work = rep.inner_start()
    outer_params = {k: w.copy() for k, w in work.params.items()}
    plan = shares.round_steps(inner.round_indices(s, h), shares.offsets(sh)[rank], count, cfg.batch, inp["cut"])
    rows = []
    for step in plan:
        step_rows = []
        for p in step:
            x, y = sample_batch(tokens, cfg.batch, cfg.seq_len, work.seed, p.index, p.lane)
            step_rows.append((x[p.row : p.row + p.rows], y[p.row : p.row + p.rows]))
        rows.append(step_rows)
    if count:
        done = inner.inner_round(work, outer_params, rows, sh, inp["overlap"], rep.carry)
        loss, payloads, opt, carry = done.loss, done.payloads, done.opt, done.carry
        total = codec.n_blocks(sum(w.size for w in outer_params.values()))
        mean = np.concatenate([codec.decode(p, len(p) // (codec.BLOCK + 1)) for p in payloads if p])
        assert mean.size == total * codec.BLOCK
    else:
        loss, payloads, opt = 0.0, (b"",) * len(sh), None
    rep.apply(mean.copy())
    if opt is not None:
        rep.adopt_inner(opt, carry)
    out["rounds"].append({"loss": float(loss), "payloads": [digest(p) for p in payloads],
                          "hash": rep.hash, "step": rep.step})
out["checkpoint"] = digest(rep.checkpoint())
print(json.dumps(out))
`;

function newReplica() {
  return new WorkerReplica({ tokenizerSha256: 'ab'.repeat(32), vocabSize: V, backend: 'js-cpu',
    makeWorker: () => new LocalWorker() });
}

/** The page's rounds as its machine drives them: compute, then apply the mean. */
async function pageRounds(replica, toks, { onRound = () => {} } = {}) {
  const got = [];
  const indices = [];
  let mean = null;
  for (const [i, [shares, rank]] of ROUNDS.entries()) {
    const step = i + 1;
    const early = new Map(); // chunk -> payload handed over before compute resolved
    const r = await replica.compute({ step, rank, shares }, (lane, index) => {
      indices.push([step, lane, index]);
      return replica.builtinLane(toks, lane, index);
    }, (k, payload) => {
      assert.ok(!early.has(k), `chunk ${k} handed over twice`);
      early.set(k, payload);
    });
    if (shares[rank] > 0) {
      const parts = r.payloads.filter((p) => p.length > 0);
      const flats = parts.map((p) => decode(p, p.length / 257));
      mean = new Float32Array(flats.reduce((n, f) => n + f.length, 0));
      let pos = 0;
      for (const f of flats) {
        mean.set(f, pos);
        pos += f.length;
      }
    }
    await replica.apply(Float32Array.from(mean));
    got.push({ loss: r.loss, payloads: r.payloads.map(digest), hash: replica.hash,
      step: replica.step, count: r.count, early: [...early].map(([k, p]) => [k, digest(p)]),
      final: r.payloads.map((p, k) => [k, digest(p)]).filter(([k]) => r.payloads[k].length > 0) });
    onRound(step);
  }
  return { got, indices };
}

// Cut by shares (the default): 3 inner steps of 5 sequences; by the batch: 4 steps of 4, 4, 4
// and 3 sequences, cut across lanes and indices. Overlap 0.5 cut by the batch: round 1 is
// measured after 2 of its 4 steps, and round 3 starts from W plus the carry of round 1's last 2
// (round 2's share of 0 leaves it as it was); by shares, after 2 of 3.
for (const [cut, overlap] of [['share', 0], ['batch', 0], ['batch', 0.5], ['share', 0.5]]) {
  test(`outer rounds on the page (cut ${cut}, overlap ${overlap}): payloads, losses, outer hashes and the checkpoint are the Python peer's bytes`, async () => {
    await pageMatchesPython(cut, overlap);
  });
}

async function pageMatchesPython(cut, overlap) {
  const toks = tokens(V);
  const expected = python(PY, { model: MODEL, seed: SEED, tokens: [...toks], rounds: ROUNDS, H,
    lr: OUTER.lr, momentum: OUTER.momentum, overlap, cut });
  const replica = newReplica();
  replica.setOuter({ ...OUTER, overlap, cut });
  await replica.start(modelConfig(MODEL), adamwConfig({}), SEED);
  assert.equal(replica.hash, expected.start, 'the outer hash at the start (W, M = +0)');
  const { got, indices } = await pageRounds(replica, toks);
  for (const [i, want] of expected.rounds.entries()) {
    const what = `round ${i + 1} (shares ${ROUNDS[i][0]})`;
    assert.deepEqual(got[i].payloads, want.payloads, `${what}: chunk payloads`);
    assert.equal(got[i].loss, want.loss, `${what}: loss`);
    assert.equal(got[i].hash, want.hash, `${what}: outer hash`);
    assert.equal(got[i].step, want.step, `${what}: rounds done`);
    assert.equal(got[i].count, ROUNDS[i][0][ROUNDS[i][1]] * H, `${what}: sequences of the round`);
    // With overlap every chunk with a payload leaves at the sync step, the bytes compute-done
    // then carries; without, none leaves early (the round is measured after its last step).
    assert.deepEqual(got[i].early, overlap > 0 ? got[i].final : [], `${what}: early chunks`);
  }
  // Step s's round reads batch indices (s - 1) * H + j, both lanes of the share, each once.
  const want = [];
  for (const s of [1, 3]) for (let j = 0; j < H; j++) for (const lane of [0, 1]) want.push([s, lane, (s - 1) * H + j]);
  assert.deepEqual(indices, want);
  assert.equal(digest(await replica.checkpoint()), expected.checkpoint, 'checkpoint bytes');
  replica.close();
}

test('an outer checkpoint restores on another page replica with the same outer hash, and continues', async () => {
  const toks = tokens(V);
  const a = newReplica();
  a.setOuter(OUTER);
  await a.start(modelConfig(MODEL), adamwConfig({}), SEED);
  await pageRounds(a, toks);
  const bytes = await a.checkpoint();
  const b = newReplica();
  b.setOuter(OUTER);
  await b.restore(bytes, 'a checkpoint');
  assert.equal(b.step, a.step);
  assert.equal(b.hash, a.hash);
  // A per-step replica refuses it, and an outer replica refuses a per-step checkpoint.
  const perStep = newReplica();
  await assert.rejects(perStep.restore(bytes, 'ck'), (exc) => exc instanceof ReplicaRefused &&
    /a checkpoint of an outer run, but this is a per-step run/.test(exc.message));
  await perStep.start(modelConfig(MODEL), adamwConfig({}), SEED);
  const plain = await perStep.checkpoint();
  await assert.rejects(b.restore(plain, 'ck'), (exc) => exc instanceof ReplicaRefused &&
    /a checkpoint of a per-step run, but this is an outer run/.test(exc.message));
  // A damaged momentum is refused by the recorded outer hash.
  const bad = Uint8Array.from(bytes);
  bad[bad.length - 1] ^= 0x01;
  await assert.rejects(newOuter().restore(bad, 'ck'), (exc) => exc instanceof ReplicaRefused &&
    /outer hash .* does not match/.test(exc.message));
  for (const r of [a, b, perStep]) r.close();
});

function newOuter() {
  const r = newReplica();
  r.setOuter(OUTER);
  return r;
}

test('the worker refuses a round not cut as the run cuts it, and per-step requests in an outer run', async () => {
  const x = new Int32Array(8).fill(1);
  const piece = [{ x, y: x, rows: 1 }];
  const x2 = new Int32Array(16).fill(1);
  const two = [{ x: x2, y: x2, rows: 2 }];
  const byBatch = new LocalWorker();
  await byBatch.init({ model: MODEL, seed: SEED, backend: 'js-cpu', measure: false });
  await byBatch.outer({ ...OUTER, cut: 'batch' });
  // Not H times a share.
  await assert.rejects(byBatch.round([piece, piece], 2, 1),
    /a round of 2 sequences in inner steps of 1, 1; this run takes H = 3 times a share, in inner steps of 4/);
  // H times a share of 2, but in three steps of 2 instead of the batch's 4 and 2.
  await assert.rejects(byBatch.round([two, two, two], 6, 1), /in inner steps of 2, 2, 2; this run takes/);
  // Cut by shares: H steps of the share each, so the batch's cut is refused there.
  const w = new LocalWorker();
  await w.init({ model: MODEL, seed: SEED, backend: 'js-cpu', measure: false });
  await w.outer(OUTER);
  const four = [{ x: new Int32Array(32).fill(1), y: new Int32Array(32).fill(1), rows: 4 }];
  await assert.rejects(w.round([four, two], 6, 1),
    /a round of 6 sequences in inner steps of 4, 2; this run takes H = 3 times a share, in H inner steps of the share/);
  await assert.rejects(w.request('step', { x, y: x, batch: 1 }), /cannot step in an outer run/);
  await assert.rejects(w.request('round', { steps: [piece], count: 2, token: 1 }),
    /the inner steps hold 1 sequences, count is 2/);
});

test('a page continues an outer checkpoint as an outer run (resumeConfig), the run rules accept it', async () => {
  const toks = tokens(V);
  const a = newOuter();
  await a.start(modelConfig(MODEL), adamwConfig({}), SEED);
  await pageRounds(a, toks);
  const bytes = await a.checkpoint();
  const ck = await decodeCheckpoint(bytes, 'ck', { tokenizerSha256: 'ab'.repeat(32), vocabSize: V });
  assert.equal(ck.outer.step, ROUNDS.length);
  const cfg = resumeConfig(ck, { steps: 10, tokenizerSha256: 'ab'.repeat(32) });
  assert.equal(cfg.resume_step, ROUNDS.length);
  assert.equal(cfg.resume_hash, a.hash);
  assert.deepEqual([cfg.sync, cfg.outer],
    ['outer', { steps: H, lr: 0.7, momentum: 0.9, overlap: 0, cut: 'share' }]);
  const args = { tokenizerSha256: 'ab'.repeat(32), vocabSize: V };
  assert.deepEqual(parseRunConfig(cfg, { ...args, outerRuns: true }).outer,
    { ...OUTER, overlap: 0, cut: 'share' });
  assert.throws(() => parseRunConfig(cfg, args), (exc) => exc.rule === 'page-outer');
  a.close();
});
