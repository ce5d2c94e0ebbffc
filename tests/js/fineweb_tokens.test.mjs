// FineWeb-Edu golden cases (tests/vectors/fineweb/cases.json, written by
// `python tests/vectorgen --write fineweb`): the text of each run address, encoded with the
// JavaScript tokenizer, gives the ids the Python peer trains on. A browser peer fetches the same
// window from /data, joins its documents with the end-of-text token and encodes it like this.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { EOT_TOKEN, Tokenizer } from '../../static/js/tokenizer.js';
import * as fineweb from '../../static/js/fineweb.js';
import * as runconfig from '../../static/js/p2p/runconfig.js';
import { parse as parseMessage } from '../../static/js/p2p/messages.js';
import { REPO } from './helpers.mjs';

const RAW = fs.readFileSync(path.join(REPO, 'luts', 'tokenizer.json'));
const VECTORS = JSON.parse(
  fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'fineweb', 'cases.json'), 'utf8'));
const tk = await Tokenizer.fromBytes(RAW, 'luts/tokenizer.json');

// fineweb.window_texts: `chars` code points of documents from `firstRow` on, wrapping round.
function windowTexts(documents, firstRow, chars) {
  const picked = [];
  let budget = chars;
  let i = firstRow % documents.length;
  while (budget > 0) {
    const text = Array.from(documents[i]).slice(0, budget).join('');
    picked.push(text);
    budget -= Array.from(text).length;
    i = (i + 1) % documents.length;
  }
  return picked;
}

test('the cases were made with the shipped tokenizer', () => {
  assert.equal(VECTORS.format, 'daisychain-fineweb-vectors');
  assert.equal(crypto.createHash('sha256').update(RAW).digest('hex'), VECTORS.tokenizer_sha256);
  assert.ok(VECTORS.cases.length >= 8);
});

for (const c of VECTORS.cases) {
  const name = `${c.split} seed ${c.seed} step ${c.step} rank ${c.rank}`;
  test(`${name}: static/js/fineweb.js addresses the same window and cuts the same batch`, () => {
    const nShards = VECTORS.shards.length;
    const shard = fineweb.shardOf(c.seed, c.step, c.rank, c.split, nShards);
    const w = fineweb.window(c.seed, c.step, c.rank, c.split,
      { shard, nShards, rows: VECTORS.shards[shard].rows, chars: c.chars });
    assert.deepEqual([shard, w.rowGroup, w.firstRow, w.chars],
      [c.shard, c.row_group, c.first_row, c.chars]);
    assert.equal(fineweb.windowChars(c.batch, c.seq_len), c.chars);
    const ids = tk.encode(fineweb.join(c.texts)).slice(0, c.batch * (c.seq_len + 1));
    const { x, y } = fineweb.batchFromIds(ids, c.batch, c.seq_len);
    for (let i = 0; i < c.batch; i++) { // Python: rows = ids.reshape(B, T + 1); x, y = rows[:, :-1], rows[:, 1:]
      const row = c.ids.slice(i * (c.seq_len + 1), (i + 1) * (c.seq_len + 1));
      assert.deepEqual(Array.from(x.subarray(i * c.seq_len, (i + 1) * c.seq_len)), row.slice(0, -1));
      assert.deepEqual(Array.from(y.subarray(i * c.seq_len, (i + 1) * c.seq_len)), row.slice(1));
    }
    const q = new URL(fineweb.windowQuery({ ...c, seqLen: c.seq_len, revision: VECTORS.revision }),
      'http://x');
    assert.equal(q.searchParams.get('max_chars'), String(c.chars));
    assert.equal(q.searchParams.get('split'), c.split);
  });
  test(`${name}: the window's text encodes to the Python peer's ids`, () => {
    const need = c.batch * (c.seq_len + 1);
    const ids = tk.encode(c.texts.join(EOT_TOKEN)).slice(0, need);
    assert.deepEqual(ids, c.ids);
  });
  test(`${name}: the window is the documents' (chars count code points, not UTF-16 units)`, () => {
    const docs = VECTORS.documents[c.shard][c.row_group];
    assert.deepEqual(windowTexts(docs, c.first_row, c.chars), c.texts);
    assert.equal(c.texts.reduce((n, t) => n + Array.from(t).length, 0), c.chars);
  });
}

test('fineweb.js refuses what fineweb.py refuses', () => {
  assert.throws(() => fineweb.window(1, 0, 0, 'train', { shard: 0, nShards: 1, rows: [5], chars: 9 }),
    /no training row group/);
  assert.throws(() => fineweb.window(1, 0, 0, 'train', { shard: 0, nShards: 2, rows: [0], chars: 9 }),
    /has no rows/);
  assert.throws(() => fineweb.shardOf(1, 0, 0, 'train', 0), /empty/);
  assert.throws(() => fineweb.batchFromIds([], 1, 4), /no tokens/);
  for (const bad of ['fineweb', `fineweb@${'0'.repeat(39)}`, `fineweb@${'A'.repeat(40)}`, 'x']) {
    assert.throws(() => fineweb.revisionOf(bad), /unknown data source/);
  }
  assert.equal(fineweb.revisionOf('builtin'), null);
  assert.equal(fineweb.revisionOf(fineweb.dataName(VECTORS.revision)), VECTORS.revision);
  assert.equal(fineweb.codePoints('a😀'), 2);
  const { x } = fineweb.batchFromIds([5, 6, 7], 2, 3); // repeated from the start, like np.resize
  assert.deepEqual(Array.from(x), [5, 6, 7, 6, 7, 5]);
});

test('a changed id is caught', () => {
  const c = VECTORS.cases[0];
  const ids = tk.encode(c.texts.join(EOT_TOKEN)).slice(0, c.ids.length);
  ids[2] += 1;
  assert.notDeepEqual(ids, c.ids);
});

test('runconfig data rule: a FineWeb-Edu run is accepted only where its revision is readable', () => {
  const data = `fineweb@${VECTORS.revision}`;
  const cfg = parseMessage(JSON.stringify({
    type: 'config', run: '0123456789abcdef', preset: 'tiny',
    model: { vocab_size: 64, width: 64, layers: 2, heads: 4, seq_len: 16, batch: 1, mlp_mult: 4 },
    optim: { lr: 0.003, warmup_steps: 0, weight_decay: 0.1, clip: 1.0 }, steps: 3, seed: 7,
    data, tokenizer_sha256: 'ab'.repeat(32), resume_step: 0, resume_hash: null, global_batch: 1, shares_by: 'speed',
  }));
  const args = { tokenizerSha256: 'ab'.repeat(32), vocabSize: 64 };
  assert.equal(runconfig.parse(cfg, { ...args, dataSources: ['builtin', data] }).message.data, data);
  assert.throws(() => runconfig.parse(cfg, args),
    (e) => e.rule === 'data' && /cannot read FineWeb-Edu at revision 0123456789ab/.test(e.message)
      && /--offline/.test(e.hint));
});

test('runconfig data rule: a Hub dataset run (a name past 64 characters) as in Python', () => {
  const repo = `${'o'.repeat(50)}/${'n'.repeat(50)}`;
  const data = `hf:${repo}@${VECTORS.revision}:sample/10BT:content`;
  assert.ok(data.length > 64);
  const cfg = parseMessage(JSON.stringify({
    type: 'config', run: '0123456789abcdef', preset: 'tiny',
    model: { vocab_size: 64, width: 64, layers: 2, heads: 4, seq_len: 16, batch: 1, mlp_mult: 4 },
    optim: { lr: 0.003, warmup_steps: 0, weight_decay: 0.1, clip: 1.0 }, steps: 3, seed: 7,
    data, tokenizer_sha256: 'ab'.repeat(32), resume_step: 0, resume_hash: null, global_batch: 1, shares_by: 'speed',
  }));
  const args = { tokenizerSha256: 'ab'.repeat(32), vocabSize: 64 };
  assert.equal(runconfig.parse(cfg, { ...args, dataSources: ['builtin', data] }).message.data, data);
  const fw = `fineweb@${VECTORS.revision}`;
  assert.throws(() => runconfig.parse(cfg, { ...args, dataSources: ['builtin', fw] }),
    (e) => e.rule === 'data' && e.message === `this peer cannot read ${repo} (sample/10BT, column content) ` +
      `at revision 0123456789ab (it reads: builtin, ${fw})` && /--dataset/.test(e.hint));
});
