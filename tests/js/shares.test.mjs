// static/js/p2p/shares.js and the shares-based allreduce against the Python reference
// (server/daisychain/p2p/shares.py, allreduce.py): the expected values are computed at test time
// by the Python functions themselves (spawned once, like protocol_traces.test.mjs does), on cases
// chosen to reach every branch (no speed measured, some unmeasured, ties broken by rank, quotas
// below one, remainders that differ in the last bits of a double) and on seeded random speeds.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { python } from './protocol_helpers.mjs';
import { testRng } from './helpers.mjs';
import * as shares from '../../static/js/p2p/shares.js';
import { chunkBlocks, exchangeLocally } from '../../static/js/p2p/allreduce.js';

const SHARES_PY = String.raw`
import json, sys
import numpy as np
from daisychain.p2p import shares, allreduce
inp = json.load(sys.stdin)
out = {
    "allot": [list(shares.allot(c["speeds"], c["g"])) for c in inp["allot"]],
    "offsets": [list(shares.offsets(s)) for s in inp["offsets"]],
    "pieces": [[[p.lane, p.row, p.rows] for p in shares.pieces(*c)] for c in inp["pieces"]],
    "check": [shares.check(*c) for c in inp["check"]],
    "round": [[[[p.index, p.lane, p.row, p.rows] for p in step]
               for step in shares.round_steps(c["indices"], c["first"], c["count"], c["batch"], c["cut"])]
              for c in inp["round"]],
    "chunks": [[list(allreduce.chunk_blocks(c["blocks"], c["shares"], k)) for k in range(len(c["shares"]))]
               for c in inp["chunks"]],
    "exchange": [],
}
for c in inp["exchange"]:
    grads = [np.frombuffer(bytes.fromhex(g), dtype="<f4") for g in c["grads"]]
    mean, sent = allreduce.exchange_locally(grads, c["shares"])
    out["exchange"].append({"mean": mean.astype("<f4").tobytes().hex(), "sent": sent})
print(json.dumps(out))
`;

function cases() {
  const rng = testRng(20261203);
  const allot = [
    { speeds: [0], g: 1 },
    { speeds: [0, 0, 0], g: 16 }, // nobody measured: equal weights, remainder to the lower ranks
    { speeds: [0, 0, 0], g: 2 },
    { speeds: [1, 4], g: 16 }, // the spec's example: 13 and 3
    { speeds: [0.25, 0, 1], g: 16 }, // an unmeasured peer gets the mean measured weight
    { speeds: [1, 1, 1], g: 4096 },
    { speeds: [0.001, 1000], g: 16 }, // quota below one: the slow one follows
    { speeds: [1000, 0.001, 1000], g: 3 },
    { speeds: [0.1, 0.3, 0.7, 0.05], g: 64 }, // 1/0.1 etc. are inexact doubles
    { speeds: [3, 3, 3, 3, 3, 3, 3], g: 10 }, // ties everywhere
    { speeds: [0.012345, 0.0123451, 0.01234499], g: 7 },
    { speeds: [1e-9, 2e-9, 0], g: 4095 },
  ];
  for (let i = 0; i < 40; i++) {
    const n = rng.int(1, 12);
    const speeds = Array.from({ length: n }, () => (rng.int(0, 5) === 0 ? 0 : rng.uniform() * 0.2));
    allot.push({ speeds, g: rng.int(1, 4096) });
  }
  const offsets = [[], [5], [13, 3], [0, 4, 0, 9]];
  const pieces = [[0, 0, 4], [0, 4, 4], [3, 4, 4], [13, 3, 4], [2, 17, 5], [5, 1, 1], [7, 9, 3]];
  const check = [[[13, 3], 2, 16], [[13, 3], 3, 16], [[17, -1], 2, 16], [[13, 4], 2, 16], [[0, 16], 2, 16]];
  const round = [];
  for (const cut of ['share', 'batch']) {
    round.push(
      { indices: [0, 1, 2], first: 4, count: 4, batch: 4, cut }, // one lane: H steps of one piece
      { indices: [3, 4, 5], first: 0, count: 5, batch: 4, cut }, // a bigger share
      { indices: [6, 7, 8], first: 5, count: 3, batch: 4, cut }, // a small share
      { indices: [10, 11], first: 3, count: 7, batch: 4, cut }, // across lanes and indices
      { indices: [0, 1, 2, 3, 4], first: 2, count: 0, batch: 4, cut }, // a share of 0: no steps
    );
    for (let i = 0; i < 20; i++) {
      const batch = rng.int(1, 9);
      const h = rng.int(1, 7);
      round.push({ indices: Array.from({ length: h }, (_, j) => 3 * h + j), first: rng.int(0, 30),
        count: rng.int(0, 25), batch, cut });
    }
  }
  const chunks = [
    { blocks: 11, shares: [2, 2, 2] }, { blocks: 11, shares: [13, 3] }, { blocks: 11, shares: [5, 0, 11] },
    { blocks: 3, shares: [1, 1, 1, 1, 1, 11] }, { blocks: 1000003, shares: [4000, 90, 6] },
  ];
  const exchange = [];
  for (const s of [[4, 4], [13, 3], [0, 5, 2], [1, 0, 0, 7], [3, 9, 1]]) {
    const len = 256 * rng.int(1, 9);
    const grads = s.map(() => {
      const g = new Float32Array(len);
      for (let i = 0; i < len; i++) g[i] = (rng.uniform() - 0.5) * 2 ** rng.int(-20, 4);
      return Buffer.from(g.buffer).toString('hex');
    });
    exchange.push({ shares: s, grads });
  }
  return { allot, offsets, pieces, check, round, chunks, exchange };
}

let inputs = null;
let expected = null;
function reference() {
  if (expected === null) {
    inputs = cases();
    expected = python(SHARES_PY, inputs);
  }
  return { inputs, expected };
}

test('allot gives the Python reference\'s shares (fixed and seeded random speeds)', () => {
  const { inputs: I, expected: E } = reference();
  I.allot.forEach((c, i) => {
    const got = shares.allot(c.speeds, c.g);
    assert.deepEqual(got, E.allot[i], `allot(${JSON.stringify(c.speeds)}, ${c.g})`);
    assert.equal(got.reduce((a, b) => a + b, 0), c.g);
  });
  assert.deepEqual(shares.allot([1, 4], 16), [13, 3]); // the spec's own example
});

test('the largest remainder goes first, ties to the lower rank', () => {
  assert.deepEqual(shares.allot([0, 0, 0], 16), [6, 5, 5]);
  assert.deepEqual(shares.allot([0, 0, 0], 2), [1, 1, 0]);
  assert.deepEqual(shares.allot([0.001, 1000], 16), [16, 0]);
  assert.throws(() => shares.allot([], 16), RangeError);
  assert.throws(() => shares.allot([1], 0), RangeError);
});

test('offsets, pieces and check give the Python reference\'s answers', () => {
  const { inputs: I, expected: E } = reference();
  I.offsets.forEach((s, i) => assert.deepEqual(shares.offsets(s), E.offsets[i]));
  I.pieces.forEach((c, i) => assert.deepEqual(
    shares.pieces(...c).map((p) => [p.lane, p.row, p.rows]), E.pieces[i], `pieces(${c})`));
  I.check.forEach((c, i) => assert.equal(shares.check(...c), E.check[i], `check(${JSON.stringify(c)})`));
});

test('an outer round\'s inner steps (roundSteps) are the Python reference\'s pieces', () => {
  const { inputs: I, expected: E } = reference();
  I.round.forEach((c, i) => {
    const got = shares.roundSteps(c.indices, c.first, c.count, c.batch, c.cut);
    assert.deepEqual(got.map((step) => step.map((p) => [p.index, p.lane, p.row, p.rows])), E.round[i],
      `roundSteps(${JSON.stringify(c)})`);
    // Cut by the batch, every step but the last holds a whole batch; by shares, each the share.
    const sizes = got.map((step) => step.reduce((n, p) => n + p.rows, 0));
    if (c.cut === 'batch') sizes.slice(0, -1).forEach((n) => assert.equal(n, c.batch));
    else assert.deepEqual(sizes, c.count ? c.indices.map(() => c.count) : []);
  });
  assert.throws(() => shares.roundSteps([0], 0, 4, 0), RangeError);
  assert.throws(() => shares.roundSteps([0], 0, 4, 4, 'tokens'), RangeError);
});

test('chunk bounds by shares give the Python reference\'s blocks', () => {
  const { inputs: I, expected: E } = reference();
  I.chunks.forEach((c, i) => assert.deepEqual(
    c.shares.map((_, k) => chunkBlocks(c.blocks, c.shares, k)), E.chunks[i], JSON.stringify(c)));
});

test('exchangeLocally (weighted, empty chunks skipped) is the Python reference\'s, bit for bit', () => {
  const { inputs: I, expected: E } = reference();
  I.exchange.forEach((c, i) => {
    const grads = c.grads.map((h) => {
      const b = Buffer.from(h, 'hex');
      return new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
    });
    const { mean, sent } = exchangeLocally(grads, c.shares);
    assert.equal(Buffer.from(mean.buffer).toString('hex'), E.exchange[i].mean, `mean, shares ${c.shares}`);
    assert.equal(sent, E.exchange[i].sent, `sent, shares ${c.shares}`);
  });
});
