// static/js/p2p/privatedata.js (a page's private text: read and tokenized on the device, its
// lanes addressed as the built-in corpus's) and the browser peer's use of it (docs/PROTOCOL.md,
// "Private data"): lanes are sampleBatch over the private ids; a file that is too short, too
// large, binary or not UTF-8 is refused with a hint; a follower with private text says so in its
// `ready`, computes its share on its own lanes, and records itself; a change during a run is
// not taken; a text too short for the run's sequences makes the page leave with the reason.
import { afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Tokenizer } from '../../static/js/tokenizer.js';
import { sampleBatch } from '../../static/js/model/batches.js';
import {
  MAX_PRIVATE_BYTES, PrivateDataError, PrivateText, decodeText, minTokens, readPrivateText,
} from '../../static/js/p2p/privatedata.js';
import { BrowserPeer, leadConfig } from '../../static/js/p2p/peer.js';
import { DetailEvent } from '../../static/js/p2p/signaling.js';
import * as M from '../../static/js/p2p/messages.js';
import { TraceReplica } from './traces/trace_replica.js';
import { paramShapes } from '../../static/js/model/params.js';
import { chunkSlice } from '../../static/js/p2p/allreduce.js';
import { BLOCK, encode, nBlocks } from '../../static/js/p2p/codec.js';
import { REFERENCE_STEP_PROBE } from '../../static/js/gpu/probe.js';
import { REPO } from './helpers.mjs';

const tokenizer = await Tokenizer.fromBytes(fs.readFileSync(path.join(REPO, 'luts', 'tokenizer.json')));
const utf8 = (s) => new TextEncoder().encode(s);
const LINES = ['The lighthouse keeper wrote in her log every evening at seven.',
  'Tides, ships and weather: 42 entries in March, 37 in April.',
  'Nobody else ever read the log; it stayed in the drawer by the lamp.'];

/** A File-like object (what an <input type=file> hands over) with the given bytes. */
function fileOf(name, bytes, { size = bytes.length } = {}) {
  return {
    name, size,
    arrayBuffer: async () => bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length),
  };
}

function story(lines) {
  const out = [];
  for (let i = 0; i < lines; i++) out.push(`${i}: ${LINES[i % LINES.length]}`);
  return `${out.join('\n')}\n`;
}

test('the ids are the tokenizer\'s and lane l of step s is sampleBatch(ids, B, T, seed, s, l)', async () => {
  const text = story(200);
  const p = await readPrivateText(fileOf('log.txt', utf8(text)), tokenizer, { seqLen: 16 });
  assert.ok(p instanceof PrivateText);
  assert.equal(p.name, 'log.txt');
  assert.deepEqual([...p.ids], tokenizer.encode(text), 'one piece: exactly the text\'s ids');
  assert.ok(p.ids instanceof Uint16Array, '2048 ids fit 16 bits');
  const model = { batch: 3, seqLen: 16 };
  for (const [seed, step, lane] of [[1, 0, 0], [1, 0, 1], [7, 5, 2], [4294967295, 12, 0]]) {
    const got = p.lane(model, seed, step, lane);
    const want = sampleBatch(p.ids, 3, 16, seed, step, lane);
    assert.deepEqual([...got.x], [...want.x], `x of (${seed}, ${step}, ${lane})`);
    assert.deepEqual([...got.y], [...want.y], `y of (${seed}, ${step}, ${lane})`);
    assert.deepEqual([...got.x.subarray(1, 16)], [...got.y.subarray(0, 15)], 'y is x shifted');
  }
  // Another lane or step is another batch (the addressing is live, not a constant).
  assert.notDeepEqual([...p.lane(model, 1, 0, 0).x], [...p.lane(model, 1, 0, 1).x]);
  assert.notDeepEqual([...p.lane(model, 1, 0, 0).x], [...p.lane(model, 1, 1, 0).x]);
  assert.match(p.describe(), /^Private text: log\.txt, [\d,]+ tokens — trains here; only gradients leave this device$/);
});

test('a file of several pieces is cut at line ends, each piece encoded whole, with progress', async () => {
  const text = story(40000); // about 2.6 MB: three pieces of at most 1 MiB
  const bytes = utf8(text);
  const seen = [];
  const p = await readPrivateText(fileOf('big.txt', bytes), tokenizer, { onProgress: (f) => seen.push(f) });
  assert.ok(seen.length >= 3 && seen.at(-1) === 1, `${seen}`);
  assert.ok(seen.every((f, i) => i === 0 || f > seen[i - 1]), 'progress only grows');
  // The same cuts by hand: after the last newline before each 1 MiB boundary.
  const want = [];
  for (let start = 0; start < bytes.length;) {
    let end = Math.min(bytes.length, start + (1 << 20));
    if (end < bytes.length) end = bytes.lastIndexOf(0x0a, end - 1) + 1;
    assert.equal(bytes[end - 1], 0x0a, 'a cut follows a newline');
    for (const id of tokenizer.encodeBytes(bytes.subarray(start, end))) want.push(id);
    start = end;
  }
  assert.equal(p.count, want.length);
  assert.deepEqual([...p.ids], want);
});

test('a text shorter than one sequence and its targets is refused, with the counts and a hint', async () => {
  const short = utf8('Just a few words here.');
  const n = tokenizer.encode('Just a few words here.').length;
  await assert.rejects(readPrivateText(fileOf('short.txt', short), tokenizer, { seqLen: 64 }), (exc) => {
    assert.ok(exc instanceof PrivateDataError);
    assert.equal(exc.message, `short.txt has ${n} tokens; sequences of 64 need at least ${minTokens(64)}`);
    assert.match(exc.hint, /longer text file/);
    return true;
  });
  // The boundary: seqLen + 2 ids are enough (two starting offsets), seqLen + 1 are not.
  const ids = Uint16Array.from({ length: 18 }, (_, i) => i);
  const exact = new PrivateText({ name: 'x', bytes: 0, ids });
  exact.checkFits(16);
  assert.equal(exact.lane({ batch: 2, seqLen: 16 }, 1, 0, 0).x.length, 32);
  assert.throws(() => exact.checkFits(17), PrivateDataError);
  assert.throws(() => exact.lane({ batch: 1, seqLen: 17 }, 1, 0, 0), /need at least 19/);
});

test('binary, non-UTF-8, empty and oversized files are refused with what to do instead', async () => {
  const refused = async (file, pattern) => {
    await assert.rejects(readPrivateText(file, tokenizer), (exc) => {
      assert.ok(exc instanceof PrivateDataError, String(exc));
      assert.match(exc.message, pattern);
      assert.ok(exc.hint.length > 10, exc.hint);
      return true;
    });
  };
  const png = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]);
  await refused(fileOf('photo.png', png), /^photo\.png is not a plain text file \(it holds NUL bytes/);
  await refused(fileOf('latin1.txt', Uint8Array.from([0x63, 0x61, 0x66, 0xe9, 0x0a])),
    /^latin1\.txt is not a plain text file \(it is not valid UTF-8\)$/);
  await refused(fileOf('blank.txt', utf8(' \n\t\n')), /^blank\.txt holds no text$/);
  // Too large: refused from its size, before a byte is read.
  const huge = { name: 'huge.txt', size: MAX_PRIVATE_BYTES + 1,
    arrayBuffer: async () => assert.fail('an oversized file must not be read') };
  await refused(huge, /^huge\.txt is 50\.0 MiB: private text is limited to 50\.0 MiB$/);
  assert.throws(() => decodeText(new Uint8Array(MAX_PRIVATE_BYTES + 1), 'x'), /limited to 50\.0 MiB/);
  // What is accepted: UTF-8 with a BOM and non-ASCII letters.
  assert.equal(decodeText(utf8('\ufeffcafé déjà vu\n'), 'ok.txt'), 'café déjà vu\n');
});

// -- the browser peer with private text ---------------------------------------------------------

class FakeMesh extends EventTarget {
  constructor() {
    super();
    this.sent = []; // [peer, text] of every control message
    this.id = '';
    this.open = new Set();
  }

  emit(type, detail) {
    this.dispatchEvent(new DetailEvent(type, detail));
  }

  apply(effect) {
    if (effect.type === 'send-message') this.sent.push([effect.peer, M.encode(effect.message)]);
    return true;
  }

  buffered() {
    return 0;
  }

  openPeers() {
    return [...this.open];
  }

  closePeer() {}

  closeLinks() {}

  relink() {}
}

/** The trace replica with a gradient of zeros; it records the lanes the shell hands it. */
class Replica extends TraceReplica {
  backend = 'js-cpu';
  worker = {};
  lanes = []; // [lane, {x, y}] asked by compute

  async start(model, optim, seed) {
    this.model = model;
    this.seed = seed;
    await super.start(model, optim, seed);
  }

  builtinLane(tokens, lane) { // replica.js's: the run's own lanes
    return sampleBatch(tokens, this.model.batch, this.model.seqLen, this.seed, this.step, lane);
  }

  async compute({ rank, shares }, laneOf) {
    const first = shares.slice(0, rank).reduce((a, b) => a + b, 0);
    for (let p = first; p < first + shares[rank]; p += this.model.batch) {
      const lane = Math.floor(p / this.model.batch);
      this.lanes.push([lane, await laneOf(lane)]);
    }
    let n = 0;
    for (const shape of paramShapes(this.model).values()) n += shape.reduce((a, b) => a * b, 1);
    const flat = new Float32Array(nBlocks(n) * BLOCK);
    const payloads = shares.map((_, k) => {
      const [start, end] = chunkSlice(nBlocks(n), shares, k);
      return start === end ? new Uint8Array(0) : encode(flat.subarray(start, end)).payload;
    });
    return { loss: 7.5, payloads, probe: REFERENCE_STEP_PROBE, backend: this.backend, products: 0,
      ms: 1, gradMs: 1, count: shares[rank] };
  }

  close() {}
}

const TOKENIZER = 'ab'.repeat(32);
const made = [];
afterEach(() => {
  for (const peer of made.splice(0)) peer.dispose();
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(predicate, what, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

const hello = M.encode(M.message('hello', { version: M.DATA_PROTOCOL_VERSION, name: 'lead',
  contract: M.CONTRACT_VERSION }));

/** Page B follows leader A's run of 2 sequences per step (B computes position 1: lane 1). */
async function follower(privateText, { seqLen = 16 } = {}) {
  const mesh = new FakeMesh();
  const replica = new Replica();
  const peer = new BrowserPeer({ mesh, replica, tokens: Uint16Array.from({ length: 4096 }, (_, i) => i % 2048),
    tokenizerSha256: TOKENIZER, vocabSize: 2048, name: 'tab', clock: () => 1, log: () => {},
    privateText });
  made.push(peer);
  const told = [];
  peer.addEventListener('private-data', (e) => told.push(e.detail.peer));
  mesh.emit('welcome', { id: 'B', role: 'member', members: [] });
  mesh.open.add('A');
  mesh.emit('channel-open', { peer: 'A' });
  mesh.emit('message', { peer: 'A', data: hello });
  const config = leadConfig({ preset: 'tiny', steps: 3, batch: 1, seqLen, seed: 5, vocabSize: 2048,
    tokenizerSha256: TOKENIZER, minPeers: 2, sharesBy: 'equal' });
  mesh.emit('message', { peer: 'A', data: M.encode(config) });
  return { mesh, replica, peer, config, told };
}

const sentOf = (mesh, type) => mesh.sent.map(([p, t]) => [p, JSON.parse(t)]).filter(([, m]) => m.type === type);

test('a follower with private text says so in its ready, computes on its own lanes and records itself', async () => {
  const p = await readPrivateText(fileOf('diary.txt', utf8(story(100))), tokenizer, { seqLen: 16 });
  const { mesh, replica, peer, config, told } = await follower(p);
  await until(() => sentOf(mesh, 'ready').length === 1, 'the ready');
  const [[to, ready]] = sentOf(mesh, 'ready');
  assert.equal(to, 'A');
  assert.equal(ready.private_data, true);
  assert.equal(peer.privateText, p);
  assert.deepEqual([...peer.privateDataPeers], ['B']);
  mesh.emit('message', { peer: 'A', data: M.encode(M.message('roster', { run: config.run, step: 1,
    round: 0, peers: ['A', 'B'], shares: [1, 1] })) });
  await until(() => replica.lanes.length === 1, 'the compute');
  const [[lane, batch]] = replica.lanes;
  assert.equal(lane, 1);
  const want = sampleBatch(p.ids, 1, 16, 5, 0, 1); // (seed 5, 0 steps done, lane 1) of the private ids
  assert.deepEqual([...batch.x], [...want.x]);
  assert.deepEqual([...batch.y], [...want.y]);
  const builtin = sampleBatch(peer.tokens, 1, 16, 5, 0, 1);
  assert.notDeepEqual([...batch.x], [...builtin.x], 'not the run\'s text');
  assert.deepEqual(told, ['B'], 'private-data said once, for this page');
  // A choice made during the run is not taken: the run keeps what the ready said.
  peer.usePrivateText(null);
  await sleep(20);
  assert.equal(peer.privateText, p);
  assert.equal(peer.machine.privateData, true);
});

test('without private text the ready carries no flag and the lanes are the run\'s', async () => {
  const { mesh, replica, peer, config } = await follower(null);
  await until(() => sentOf(mesh, 'ready').length === 1, 'the ready');
  assert.ok(!mesh.sent.find(([, t]) => JSON.parse(t).type === 'ready')[1].includes('private_data'));
  assert.deepEqual([...peer.privateDataPeers], []);
  mesh.emit('message', { peer: 'A', data: M.encode(M.message('roster', { run: config.run, step: 1,
    round: 0, peers: ['A', 'B'], shares: [1, 1] })) });
  await until(() => replica.lanes.length === 1, 'the compute');
  assert.deepEqual([...replica.lanes[0][1].x], [...sampleBatch(peer.tokens, 1, 16, 5, 0, 1).x]);
});

test('a private text too short for the run\'s sequences: the page leaves before any step, saying why', async () => {
  const ids = Uint16Array.from({ length: 40 }, (_, i) => i + 1);
  const text = new PrivateText({ name: 'note.txt', bytes: 100, ids });
  const { mesh, peer } = await follower(text, { seqLen: 64 });
  await until(() => peer.outcome !== null, 'the page to leave');
  assert.equal(peer.outcome.reason, 'left');
  assert.match(peer.outcome.message, /private text is too short for this run: note\.txt has 40 tokens; sequences of 64 need at least 66/);
  assert.ok(peer.errors.some((e) => /cannot train this run on the private text/.test(e.message) &&
    /longer text file/.test(e.hint)), JSON.stringify(peer.errors));
  assert.equal(sentOf(mesh, 'leave').length, 1);
});

test('the leader records a peer whose ready says private data, and says so once', async () => {
  const mesh = new FakeMesh();
  const replica = new Replica();
  const peer = new BrowserPeer({ mesh, replica, tokens: new Uint16Array(4096), tokenizerSha256: TOKENIZER,
    vocabSize: 2048, name: 'lead', clock: () => 1, log: () => {} });
  made.push(peer);
  const told = [];
  peer.addEventListener('private-data', (e) => told.push(e.detail.peer));
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  const config = await peer.lead({ preset: 'tiny', steps: 3, batch: 1, seqLen: 16, minPeers: 3 });
  for (const other of ['B', 'C']) {
    mesh.open.add(other);
    mesh.emit('channel-open', { peer: other });
    mesh.emit('message', { peer: other, data: hello });
  }
  const ready = (peers, flag) => M.encode(M.message('ready', { run: config.run, step: 0,
    hash: replica.hash, peers, seq_s: 0, private_data: flag }));
  mesh.emit('message', { peer: 'B', data: ready(['A', 'C'], true) });
  mesh.emit('message', { peer: 'C', data: ready(['A', 'B'], false) });
  await until(() => sentOf(mesh, 'roster').length === 2, 'the first roster');
  assert.deepEqual([...peer.privateDataPeers], ['B'], 'B said so; C and the leader did not');
  assert.deepEqual(told, ['B']);
  // A second ready of B (it may send one again) is not a second record.
  mesh.emit('message', { peer: 'B', data: ready(['A', 'C'], true) });
  await sleep(20);
  assert.deepEqual(told, ['B']);
});

test('a leader whose private text is too short for its run is refused before the run starts', async () => {
  const mesh = new FakeMesh();
  const ids = Uint16Array.from({ length: 30 }, (_, i) => i + 1);
  const peer = new BrowserPeer({ mesh, replica: new Replica(), tokens: new Uint16Array(4096),
    tokenizerSha256: TOKENIZER, vocabSize: 2048, name: 'lead', clock: () => 1, log: () => {},
    privateText: new PrivateText({ name: 'memo.txt', bytes: 90, ids }) });
  made.push(peer);
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  await assert.rejects(peer.lead({ preset: 'tiny', steps: 3, batch: 1, seqLen: 32, minPeers: 2 }),
    (exc) => exc instanceof PrivateDataError &&
      exc.message === 'memo.txt has 30 tokens; sequences of 32 need at least 34');
  assert.equal(peer.phase, 'lobby', 'nothing was configured');
  // Sequences its text can fill: the same page leads.
  await peer.lead({ preset: 'tiny', steps: 3, batch: 1, seqLen: 16, minPeers: 2 });
  await until(() => peer.phase === 'configured', 'configured');
  assert.deepEqual([...peer.privateDataPeers], ['A'], 'a leader records itself');
});
