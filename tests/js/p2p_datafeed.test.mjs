// static/js/p2p/datafeed.js (the browser peer's FineWeb-Edu feed) against a scripted fetch: a
// golden window (tests/vectors/fineweb/cases.json) answered by "/data" becomes the Python peer's
// batch; the next steps are prefetched; 429 + Retry-After is waited out while it fits the
// patience; a wrong window, a short window, an error answer and an unreachable server each
// reject with DataUnavailable and a hint; /api/status decides whether the page advertises the
// revision. (The real run with a Python peer: tests/browser/test_browser_fineweb.py.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '../../static/js/tokenizer.js';
import { DataUnavailable, FineWebFeed, fineWebFeed } from '../../static/js/p2p/datafeed.js';
import { REPO } from './helpers.mjs';

const RAW = fs.readFileSync(path.join(REPO, 'luts', 'tokenizer.json'));
const VECTORS = JSON.parse(
  fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'fineweb', 'cases.json'), 'utf8'));
const tk = await Tokenizer.fromBytes(RAW, 'luts/tokenizer.json');
const REV = VECTORS.revision;
const CASE = VECTORS.cases.find((c) => c.split === 'train');

const json = (status, body, headers = {}) => new Response(JSON.stringify(body),
  { status, headers: { 'content-type': 'application/json', ...headers } });

/** The answer a server gives for the query of `url`, with the golden case's texts. */
function windowOf(url, texts = CASE.texts) {
  const q = new URL(url).searchParams;
  return { source: 'fineweb', revision: q.get('revision'), split: q.get('split'),
    seed: Number(q.get('seed')), step: Number(q.get('step')), rank: Number(q.get('rank')),
    chars: Number(q.get('max_chars')), texts };
}

function feed(answer, options = {}) {
  const asked = [];
  const f = new FineWebFeed({ server: 'http://127.0.0.1:1', revision: REV, tokenizer: tk,
    fetch: async (url) => { asked.push(new URL(url).searchParams.get('step')); return answer(url, asked.length); },
    ...options });
  return { f, asked };
}

const address = (step = CASE.step) => ({ seed: CASE.seed, step, rank: CASE.rank, batch: CASE.batch,
  seqLen: CASE.seq_len });

test("a golden window becomes the Python peer's batch; the next steps are prefetched", async () => {
  const { f, asked } = feed((url) => json(200, windowOf(url)), { depth: 3 });
  const { x, y } = await f.batch(address());
  const T = CASE.seq_len;
  for (let i = 0; i < CASE.batch; i++) {
    const row = CASE.ids.slice(i * (T + 1), (i + 1) * (T + 1));
    assert.deepEqual(Array.from(x.subarray(i * T, (i + 1) * T)), row.slice(0, -1));
    assert.deepEqual(Array.from(y.subarray(i * T, (i + 1) * T)), row.slice(1));
  }
  assert.deepEqual(asked.map(Number), [0, 1, 2, 3].map((k) => CASE.step + k));
  await new Promise((r) => setTimeout(r, 20));
  await f.batch(address(CASE.step + 1)); // ready: fetched while "step" CASE.step computed
  assert.equal(f.stats.ready, 1);
  assert.equal(f.stats.waited, 1);
  f.close();
});

test('429 with Retry-After is waited out while it fits the patience, else refused', async () => {
  const { f } = feed((url, n) => (n === 1 ? json(429, { error: 'slow down', hint: 'wait' },
    { 'Retry-After': '0' }) : json(200, windowOf(url))), { depth: 0 });
  await f.batch(address());
  const { f: impatient } = feed(() => json(503, { error: 'busy', hint: 'try later' },
    { 'Retry-After': '5' }), { depth: 0, patienceS: 1 });
  await assert.rejects(impatient.batch(address()),
    (e) => e instanceof DataUnavailable && /busy/.test(e.message) && e.hint === 'try later');
});

test('a wrong window, a short window, an error and an unreachable server are refused', async () => {
  const cases = [
    [(url) => json(200, { ...windowOf(url), step: 999 }), /other than the window asked for/],
    [(url) => json(200, { ...windowOf(url), revision: 'f'.repeat(40) }), /other than the window/],
    [(url) => json(200, windowOf(url, CASE.texts.map((t) => t.slice(1)))), /characters, not/],
    [() => new Response('<html>oops</html>', { status: 500 }), /HTTP 500/],
    [() => { throw new TypeError('fetch failed'); }, /cannot read training data from http:\/\/127\.0\.0\.1:1\/data/],
  ];
  for (const [answer, pattern] of cases) {
    const { f } = feed(answer, { depth: 0 });
    await assert.rejects(f.batch(address()), (e) => e instanceof DataUnavailable &&
      pattern.test(e.message) && e.hint.length > 0, String(pattern));
  }
});

test('/api/status decides whether the page reads FineWeb-Edu, and at which revision', async () => {
  const status = (data) => async () => json(200, { data });
  const got = await fineWebFeed('http://127.0.0.1:1/', tk, { fetch: status({ state: 'ready', revision: REV }) });
  assert.equal(got.dataName, `fineweb@${REV}`);
  assert.equal(got.server, 'http://127.0.0.1:1');
  for (const data of [{ state: 'offline', revision: REV }, { state: 'ready', revision: 'main' },
    { state: 'ready', revision: null }, null]) {
    assert.equal(await fineWebFeed('http://x', tk, { fetch: status(data) }), null, JSON.stringify(data));
  }
  assert.equal(await fineWebFeed('http://x', tk, { fetch: async () => { throw new TypeError('down'); } }), null);
});

/** A CacheStorage of one Map per name (the Cache API's put/match/delete by URL). */
class FakeCaches {
  constructor() { this.stores = new Map(); }
  async open(name) {
    if (!this.stores.has(name)) this.stores.set(name, new Map());
    const m = this.stores.get(name);
    return {
      match: async (url) => (m.has(url) ? new Response(m.get(url)) : undefined),
      put: async (url, response) => { m.set(url, await response.text()); },
      delete: async (url) => m.delete(url),
    };
  }
}

test('a window read once is read from the Cache API after; a damaged copy is fetched again', async () => {
  const caches = new FakeCaches();
  const first = feed((url) => json(200, windowOf(url)), { depth: 0, caches });
  const a = await first.f.batch(address());
  assert.equal(first.asked.length, 1);
  const again = feed(() => { throw new TypeError('the server is gone'); }, { depth: 0, caches });
  const b = await again.f.batch(address()); // a reload: no request at all
  assert.deepEqual([again.asked.length, again.f.stats.cached, again.f.stats.fetched], [0, 1, 0]);
  assert.deepEqual(Array.from(b.x), Array.from(a.x));
  const [store] = caches.stores.values();
  const [url] = store.keys();
  store.set(url, JSON.stringify({ ...JSON.parse(store.get(url)), step: 12345 })); // damaged
  const third = feed((u) => json(200, windowOf(u)), { depth: 0, caches });
  const c = await third.f.batch(address());
  assert.deepEqual([third.asked.length, third.f.stats.cached], [1, 0]);
  assert.deepEqual(Array.from(c.x), Array.from(a.x));
  assert.equal(JSON.parse(store.get(url)).step, CASE.step, 'the good copy replaced it');
});

test('protocol v2: a share spanning two lanes keeps both lanes\' prefetches; a passed step drops them', async () => {
  const asked = [];
  const f = new FineWebFeed({ server: 'http://127.0.0.1:1', revision: REV, tokenizer: tk, depth: 2,
    fetch: async (url) => {
      const q = new URL(url).searchParams;
      asked.push(`${q.get('rank')}/${q.get('step')}`);
      return json(200, windowOf(url));
    } });
  const lane = (rank, step) => ({ ...address(step), rank });
  const s = CASE.step;
  // One step's two lanes asked one after the other (peer.js asks them at once).
  await Promise.all([f.batch(lane(0, s)), f.batch(lane(1, s))]);
  await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(asked.sort(), [`0/${s}`, `0/${s + 1}`, `0/${s + 2}`, `1/${s}`, `1/${s + 1}`,
    `1/${s + 2}`].sort());
  await Promise.all([f.batch(lane(0, s + 1)), f.batch(lane(1, s + 1))]);
  assert.equal(f.stats.ready, 2, 'both lanes of the next step were prefetched, none dropped');
  // A later step of lane 0 alone (the shares changed): lane 1's guesses of passed steps go.
  await f.batch(lane(0, s + 3));
  assert.ok([...f.pending.values()].every((e) => e.address.step > s + 3 ||
    (e.address.step === s + 3 && e.address.rank !== 0)), [...f.pending.keys()]);
  f.close();
});

test("a server's own dataset: its name from /api/status, answers checked for source 'dataset'", async () => {
  const status = (data) => async () => json(200, { data });
  const name = `hf:someone/notes@${REV}:train:content`;
  const got = await fineWebFeed('http://127.0.0.1:1/', tk,
    { fetch: status({ state: 'ready', revision: REV, name }) });
  assert.equal(got.dataName, name);
  assert.equal(got.source, 'dataset');
  assert.equal(got.cacheName, `daisychain-data-${name}`); // one commit's columns share /data URLs
  for (const bad of [`hf:someone/notes@${'f'.repeat(40)}:train:content`, 'hf:x', 42, 'builtin']) {
    assert.equal(await fineWebFeed('http://x', tk, { fetch: status({ state: 'ready', revision: REV, name: bad }) }),
      null, String(bad));
  }
  const dataset = (url) => json(200, { ...windowOf(url), source: 'dataset' });
  const ok = feed(dataset, { dataName: name, caches: null });
  assert.equal((await ok.f.batch(address())).x.length, CASE.batch * CASE.seq_len);
  // A FineWeb-Edu answer to a dataset run is other text: refused.
  const wrong = feed((url) => json(200, windowOf(url)), { dataName: name, caches: null, patienceS: 0 });
  await assert.rejects(wrong.f.batch(address()), (e) => e instanceof DataUnavailable &&
    /other than the window asked for/.test(e.message));
  assert.throws(() => new FineWebFeed({ server: 'http://x', revision: REV, dataName: `fineweb@${'f'.repeat(40)}`,
    tokenizer: tk }), RangeError);
});
