// static/js/p2p/modelreplica.js's `compute` (protocol v2: a share of the step's global batch as lane
// pieces, each piece's mean gradient, their float32 combination, the roster's chunks) against
// the Python peer's (daisychain.p2p.node: shares.pieces, training.next_batch per lane,
// training.mean_gradient, codec.encode of each chunk), computed by the Python reference at test time
// on the same tokens and seed. The spec does not require the combined mean to match across
// platforms (every peer uses the bytes a contributor sends), but the CPU tier is the contract,
// so here every payload is the same bytes: a wrong lane, row range, weight, order or division
// shows as another SHA-256.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { python } from './protocol_helpers.mjs';
import { LocalWorker, digest, tokens } from './local_worker.mjs';
import { WorkerReplica } from '../../static/js/p2p/modelreplica.js';
import { modelConfig } from '../../static/js/model/config.js';
import { adamwConfig } from '../../static/js/model/optim.js';

const V = 300;
const SEED = 11;
const MODEL = { vocab_size: V, width: 16, layers: 1, heads: 1, seq_len: 8, batch: 4, mlp_mult: 2 };
// [shares, rank]: one whole lane; a lane and a row of the next; the rest of that lane; three
// pieces (two rows, then two whole lanes); a share of 0 (probe only, empty payloads); one row.
const CASES = [[[4], 0], [[5, 3], 0], [[5, 3], 1], [[2, 0, 10], 2], [[2, 0, 10], 1], [[1, 11], 0]];

const PY = String.raw`
import hashlib, json, sys
import numpy as np
from daisychain import training
from daisychain.model.config import ModelConfig
from daisychain.optim import AdamWConfig
from daisychain.p2p import allreduce, shares
from daisychain.wire import codec
from daisychain.training import mean_gradient
inp = json.load(sys.stdin)
cfg = ModelConfig(**inp["model"])
state = training.init(cfg, AdamWConfig(), inp["seed"])
tokens = np.array(inp["tokens"], dtype=np.uint16)
tb = codec.n_blocks(sum(g.size for g in state.params.values()))
out = []
for sh, rank in inp["cases"]:
    rows = []
    for p in shares.pieces(shares.offsets(sh)[rank], sh[rank], cfg.batch):
        x, y = training.next_batch(state, tokens, p.lane)
        rows.append((x[p.row : p.row + p.rows], y[p.row : p.row + p.rows]))
    loss, flat = mean_gradient(state, rows, sh[rank])
    payloads = []
    for k in range(len(sh)):
        sl = allreduce.chunk_slice(tb, sh, k)
        data = b"" if flat is None or sl.start == sl.stop else codec.encode(flat[sl])[0]
        payloads.append(f"{len(data)}:{hashlib.sha256(data).hexdigest()}")
    out.append({"loss": float(loss), "payloads": payloads})
print(json.dumps(out))
`;

test('compute with early chunks: the same bytes, each final chunk handed over before the backward ends', async () => {
  const toks = tokens(V);
  const expected = python(PY, { model: MODEL, seed: SEED, tokens: [...toks], cases: CASES });
  const replica = new WorkerReplica({ tokenizerSha256: 'ab'.repeat(32), vocabSize: V,
    backend: 'js-cpu', makeWorker: () => new LocalWorker() });
  await replica.start(modelConfig(MODEL), adamwConfig({}), SEED);
  let emitted = 0;
  for (const [i, [shares, rank]] of CASES.entries()) {
    const early = [];
    const r = await replica.compute({ rank, shares },
      (lane) => replica.builtinLane(toks, lane), (k, payload) => early.push([k, payload]));
    const what = `shares ${shares}, rank ${rank}`;
    assert.deepEqual(r.payloads.map(digest), expected[i].payloads, what);
    for (const [k, payload] of early) {
      assert.ok(r.payloads[k].length > 0, `${what}: chunk ${k} is empty`);
      assert.equal(digest(payload), digest(r.payloads[k]), `${what}: chunk ${k}'s bytes`);
    }
    const order = early.map(([k]) => k);
    assert.deepEqual(order, [...order].sort((a, b) => b - a), `${what}: the end first`);
    if (shares[rank] === 0) assert.deepEqual(order, [], `${what}: a share of 0 sends nothing`);
    // The chunk holding wpe (the last gradient) is final only with compute-done.
    if (shares[rank] > 0) {
      assert.ok(order.length < r.payloads.filter((p) => p.length > 0).length, what);
    }
    emitted += early.length;
  }
  assert.ok(emitted > 0, 'some chunk left early');
});

test('compute: lane pieces, their combined mean and the chunks are the Python peer\'s bytes', async () => {
  const toks = tokens(V);
  const expected = python(PY, { model: MODEL, seed: SEED, tokens: [...toks], cases: CASES });
  const replica = new WorkerReplica({ tokenizerSha256: 'ab'.repeat(32), vocabSize: V,
    backend: 'js-cpu', makeWorker: () => new LocalWorker() });
  await replica.start(modelConfig(MODEL), adamwConfig({}), SEED);
  const lanesRead = [];
  for (const [i, [shares, rank]] of CASES.entries()) {
    const r = await replica.compute({ rank, shares }, (lane) => {
      lanesRead.push(lane);
      return replica.builtinLane(toks, lane);
    });
    const what = `shares ${shares}, rank ${rank}`;
    assert.deepEqual(r.payloads.map(digest), expected[i].payloads, what);
    assert.equal(r.loss, expected[i].loss, `${what}: loss`);
    assert.equal(r.count, shares[rank]);
    assert.equal(r.probe.length, 64, `${what}: the probe is computed even for a share of 0`);
    assert.ok(r.gradMs >= 0 && r.ms >= r.gradMs);
  }
  // Each case reads exactly its pieces' lanes (a share of 0 reads none).
  assert.deepEqual(lanesRead, [0, 0, 1, 1, 0, 1, 2, 0]);
  replica.close();
});
