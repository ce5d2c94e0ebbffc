// static/js/p2p/peer.js (the browser peer's shell) without a browser: a scripted mesh, the
// trace replica (tests/vectors/README.md's hashing rules) and a clock the test moves. What the
// shell owes the machine (docs/PROTOCOL.md, "The browser peer"): the machine is born on
// `welcome` with the mesh's id; inputs are fed in order with `now`; effects reach the mesh in
// order; the one timer fires the machine's deadline; a deadline that passed while the page's
// timers were throttled is fed before the next input; a refusal's channel is closed only after
// its `error` left; a new signaling id ends the run with `error`. (Real runs with Python peers:
// tests/browser/test_browser_peer.py.)
import { afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { BrowserPeer, leadConfig } from '../../static/js/p2p/peer.js';
import { DetailEvent } from '../../static/js/p2p/signaling.js';
import * as M from '../../static/js/p2p/messages.js';
import { TraceReplica } from './traces/trace_replica.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(predicate, what, ms = 2000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

class FakeMesh extends EventTarget {
  constructor() {
    super();
    this.sent = []; // [peer, text or {payload}]
    this.closed = [];
    this.queued = new Map(); // peer -> items still "in the channel's queue"
    this.open = new Set();
    this.shut = false;
    this.id = ''; // the mesh's id once admitted (a real Mesh sets it on welcome)
    this.calls = []; // 'closeLinks' / 'relink', in order
  }

  closeLinks() {
    this.calls.push('closeLinks');
    this.open.clear();
  }

  relink() {
    this.calls.push('relink');
  }

  emit(type, detail) {
    this.dispatchEvent(new DetailEvent(type, detail));
  }

  apply(effect) {
    if (effect.type === 'send-message') this.sent.push([effect.peer, M.encode(effect.message)]);
    else if (effect.type === 'send-payload') this.sent.push([effect.peer, { kind: effect.kind }]);
    return true;
  }

  buffered(peer) {
    return this.queued.get(peer) ?? 0;
  }

  openPeers() {
    return [...this.open];
  }

  closePeer(peer) {
    this.closed.push(peer);
    this.open.delete(peer);
  }

  close() {
    this.shut = true;
  }
}

class Replica extends TraceReplica {
  backend = 'js-cpu';

  close() {}
}

const TOKENIZER = 'ab'.repeat(32);

const made = [];
afterEach(() => {
  for (const peer of made.splice(0)) peer.dispose(); // no timer may outlive its test
});

function makePeer({ clock, timers = {}, mesh = new FakeMesh() }) {
  const peer = new BrowserPeer({
    mesh, replica: new Replica(), tokens: new Uint16Array(4096), tokenizerSha256: TOKENIZER,
    vocabSize: 2048, name: 'tab', timers, clock, log: () => {},
  });
  made.push(peer);
  return { mesh, peer };
}

const hello = M.encode(M.message('hello', { version: M.DATA_PROTOCOL_VERSION, name: 'other',
  contract: M.CONTRACT_VERSION }));

test('the machine is born on welcome and says hello on every channel that opens', async () => {
  const { mesh, peer } = makePeer({ clock: () => 1 });
  mesh.emit('channel-open', { peer: 'B' }); // before welcome: waits in the inbox
  assert.equal(peer.machine, null);
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  assert.equal(peer.id, 'A');
  await until(() => mesh.sent.length === 1, 'hello');
  assert.deepEqual(JSON.parse(mesh.sent[0][1]), JSON.parse(M.encode(M.message('hello', {
    version: M.DATA_PROTOCOL_VERSION, name: 'tab', contract: M.CONTRACT_VERSION }))));
  assert.equal(mesh.sent[0][0], 'B');
});

test('an overdue deadline is fed before the next input (a throttled page timer)', async () => {
  let now = 100;
  const { mesh, peer } = makePeer({ clock: () => now, timers: { hello_timeout_s: 20 } });
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  mesh.open.add('B');
  mesh.emit('channel-open', { peer: 'B' });
  await until(() => mesh.sent.length === 1, 'our hello');
  assert.equal(peer.machine.nextDeadline(), 120);
  clearTimeout(peer.timer); // the page's timer is late (a hidden tab): it never fires here
  now = 125;
  // B's hello arrives after its deadline: the machine must see the timer first and refuse B.
  mesh.emit('message', { peer: 'B', data: hello });
  await until(() => mesh.closed.includes('B'), 'B closed');
  const error = JSON.parse(mesh.sent[1][1]);
  assert.equal(error.type, 'error');
  assert.equal(error.code, 'bad-message');
  assert.match(error.message, /no hello in time/);
});

test('the armed timer feeds the deadline with no other input', async () => {
  const start = performance.now() / 1000;
  const clock = () => performance.now() / 1000 - start;
  const { mesh, peer } = makePeer({ clock, timers: { hello_timeout_s: 0.05 } });
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  mesh.open.add('B');
  mesh.emit('channel-open', { peer: 'B' });
  await until(() => mesh.closed.includes('B'), 'the hello timeout to close B');
  assert.equal(JSON.parse(mesh.sent[1][1]).code, 'bad-message');
  assert.equal(peer.machine.nextDeadline(), null, 'nothing left to time');
});

test("a refused peer's channel closes only once its error left (or after 1 s)", async () => {
  let now = 0;
  const { mesh } = makePeer({ clock: () => now, timers: { hello_timeout_s: 20 } });
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  mesh.open.add('B');
  mesh.emit('channel-open', { peer: 'B' });
  await until(() => mesh.sent.length === 1, 'our hello');
  mesh.queued.set('B', 1); // the error is still queued
  mesh.emit('message', { peer: 'B', data: '{"type":"nonsense"}' });
  await until(() => mesh.sent.length === 2, 'the error');
  await sleep(60);
  assert.deepEqual(mesh.closed, [], 'closed with the error still queued');
  now = 1.5; // still queued, but the 1 s the error is given has passed on the shell's clock
  await until(() => mesh.closed.includes('B'), 'B closed after 1 s');
});

test('a refused peer whose error left is closed at once', async () => {
  const { mesh } = makePeer({ clock: () => 0 });
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  mesh.open.add('B');
  mesh.emit('channel-open', { peer: 'B' });
  mesh.emit('message', { peer: 'B', data: '{"type":"nonsense"}' });
  await until(() => mesh.closed.includes('B'), 'B closed');
});

test('a new signaling id ends the run with error and the page is told', async () => {
  const { mesh, peer } = makePeer({ clock: () => 5 });
  const finished = new Promise((resolve) => peer.addEventListener('finished', (e) => resolve(e.detail)));
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  mesh.emit('welcome', { id: 'Z', role: 'member', members: [] });
  const { outcome } = await finished;
  assert.equal(outcome.reason, 'error');
  assert.match(outcome.message, /lost the signaling server: .*new device \(Z\)/);
  assert.deepEqual(mesh.calls, ['closeLinks'], 'the links are closed when the run ends');
  assert.equal(mesh.shut, false, 'the signaling connection stays for the next run');
});

test('a finished run keeps the mesh: a new peer on it is born at once and the old one is deaf', async () => {
  const mesh = new FakeMesh();
  const { peer: first } = makePeer({ clock: () => 1, mesh });
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  mesh.id = 'A';
  const finished = new Promise((resolve) => first.addEventListener('finished', (e) => resolve(e.detail)));
  first.leave('the user left');
  assert.equal((await finished).outcome.reason, 'left');
  assert.deepEqual(mesh.calls, ['closeLinks']);
  // The next run: a new BrowserPeer on the same, admitted mesh.
  const { peer: second } = makePeer({ clock: () => 2, mesh });
  assert.equal(second.id, 'A', 'the machine is built at once (no second welcome comes)');
  assert.equal(mesh.sessions, true, 'a new identity ends the session (mesh.js)');
  assert.equal(second.phase, 'lobby');
  assert.deepEqual(mesh.calls, ['closeLinks', 'relink'], 'the next session starts');
  const before = mesh.sent.length;
  mesh.open.add('B');
  mesh.emit('channel-open', { peer: 'B' });
  await until(() => mesh.sent.length > before, 'hello from the new peer');
  await sleep(10);
  assert.deepEqual(mesh.sent.slice(before).map(([peer, text]) => [peer, JSON.parse(text).type]),
    [['B', 'hello']], 'one hello: the finished peer no longer listens');
  assert.equal(first.inbox.length, 0);
  await second.lead({ preset: 'tiny', steps: 5, batch: 1, seqLen: 32, minPeers: 2 });
  assert.equal(second.isLeader, true, 'the new session can lead the next run');
});

test('a link already open when the new peer is made is greeted at once', async () => {
  const mesh = new FakeMesh();
  mesh.id = 'A';
  mesh.open.add('B');
  makePeer({ clock: () => 1, mesh });
  await until(() => mesh.sent.length === 1, 'hello to B');
  assert.equal(mesh.sent[0][0], 'B');
});

test('leadConfig builds the config node.py builds (warm-up capped, AdamW defaults)', () => {
  const c = leadConfig({ preset: 'tiny', steps: 5, warmup: 20, batch: 1, seqLen: 32, seed: 7,
    vocabSize: 2048, tokenizerSha256: TOKENIZER });
  assert.match(c.run, /^[0-9a-f]{16}$/);
  const text = M.encode(c);
  assert.ok(text.includes('"optim":{"lr":0.003,"warmup_steps":4,"weight_decay":0.1,"clip":1.0}'), text);
  assert.ok(text.includes('"model":{"vocab_size":2048,"width":64,"layers":2,"heads":4,' +
    '"seq_len":32,"batch":1,"mlp_mult":4}'), text);
  assert.throws(() => leadConfig({ preset: 'huge', steps: 5, vocabSize: 2048,
    tokenizerSha256: TOKENIZER }), /unknown preset "huge"/);
  // Protocol v2: global_batch (last, as Python declares it) defaults to batch x max(1, minPeers),
  // node.py's rule; the page's form passes its own (per device x the devices ready at Start).
  assert.ok(text.endsWith('"resume_step":0,"resume_hash":null,"global_batch":1,' +
    '"shares_by":"speed","type":"config"}'), text);
  const base = { preset: 'tiny', steps: 5, vocabSize: 2048, tokenizerSha256: TOKENIZER };
  assert.equal(leadConfig({ ...base, batch: 4, minPeers: 3 }).global_batch, 12);
  assert.equal(leadConfig({ ...base, minPeers: 0 }).global_batch, 4, "tiny's batch x 1");
  assert.equal(leadConfig({ ...base, batch: 4, minPeers: 3, globalBatch: 5 }).global_batch, 5);
  assert.equal(leadConfig({ ...base, sharesBy: 'equal' }).shares_by, 'equal');
});

test('lead refuses a run this device could not train, with the rule and a hint', async () => {
  const { mesh, peer } = makePeer({ clock: () => 1 });
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  await assert.rejects(peer.lead({ preset: 'tiny', steps: 5, batch: 65, minPeers: 2 }),
    (exc) => exc.rule === 'max-batch' && /cap of 64/.test(exc.message) && exc.hint.length > 0);
  assert.equal(peer.phase, 'lobby');
  await peer.lead({ preset: 'tiny', steps: 5, batch: 1, seqLen: 32, minPeers: 2 });
  assert.equal(peer.phase, 'configured');
  assert.equal(peer.isLeader, true);
});

test("a leader's save exports the replica and says so when the page keeps checkpoints", async () => {
  const { mesh, peer } = makePeer({ clock: () => 1 });
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  const saves = [];
  peer.addEventListener('save', (e) => saves.push(e.detail));
  await peer.lead({ preset: 'tiny', steps: 5, batch: 1, seqLen: 32, minPeers: 2 });
  peer.saveGroup(); // keep is false: the save is only logged
  await sleep(10);
  assert.equal(saves.length, 0);
  peer.keep = true;
  peer.saveGroup();
  await until(() => saves.length === 1, 'the save event');
  const [s] = saves;
  assert.equal(s.step, 0);
  assert.equal(s.why, 'asked');
  assert.equal(s.run, peer.machine.config.run);
  assert.equal(s.hash, peer.replica.hash);
  assert.deepEqual(s.bytes, await peer.replica.checkpoint(), 'the replica exported as checkpoint bytes');
  assert.deepEqual((await peer.checkpoint()).bytes, s.bytes, 'checkpoint() exports the same state');
  peer.saveGroup(); // the same step again: saved once
  await sleep(10);
  assert.equal(saves.length, 1);
});

test("a user's export is named by the step its bytes hold, not the step the page last showed", async () => {
  const { mesh, peer } = makePeer({ clock: () => 1 });
  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  await peer.lead({ preset: 'tiny', steps: 5, batch: 1, seqLen: 32, minPeers: 2 });
  const before = peer.replica.step;
  // The worker serves requests in order: a step already sent to it is applied before the
  // export is answered. Stand in for that: the export applies one step first.
  const checkpoint = peer.replica.checkpoint.bind(peer.replica);
  peer.replica.checkpoint = async () => {
    await peer.replica.apply(new Float32Array(4));
    return checkpoint();
  };
  const s = await peer.checkpoint();
  assert.equal(s.step, before + 1, 'the step inside the bytes');
  assert.equal(peer.replica.stepOf(s.bytes), s.step);
  assert.equal(s.hash, peer.replica.hash);
  assert.throws(() => peer.replica.stepOf(new Uint8Array(8)), /not a trace checkpoint/);
});

test('seconds per sequence: the first measurement, then an average with the newest weighted 1/2; a share of 0 keeps it', () => {
  const shell = { seqS: 0, exchangeWorkS: 0 };
  const measured = (r) => BrowserPeer.prototype.measured.call(shell, r);
  assert.equal(measured({ count: 0, gradMs: 0 }), 0, 'never measured: 0');
  assert.equal(measured({ count: 4, gradMs: 400 }), 0.1);
  assert.equal(measured({ count: 2, gradMs: 600 }), (0.1 + 0.3) / 2);
  assert.equal(measured({ count: 0, gradMs: 5 }), 0.2, 'a share of 0 measures nothing: the last value stays');
  assert.equal(measured({ count: 1, gradMs: 100 }), (0.2 + 0.1) / 2);
  // The exchange's work of the last contributing step counts too, over the share.
  shell.seqS = 0;
  shell.exchangeWorkS = 0.4;
  assert.equal(measured({ count: 4, gradMs: 400 }), (0.4 + 0.4) / 4);
});
