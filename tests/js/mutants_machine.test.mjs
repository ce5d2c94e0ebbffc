// The protocol machine's sync guard, stopping and leadership (static/js/p2p/machine/guard.js,
// stopping.js, leadership.js): behaviour pinned by mutants that survived the trace replays
// (docs/TESTING.md). Every test name starts with "mutant:" so tests/mutation.py runs them with
// the replays (--test-name-pattern).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Fork, SyncGuard } from '../../static/js/p2p/machine/guard.js';
import { HISTORY_STEPS, successor } from '../../static/js/p2p/run.js';
import { Stopped, Stopping } from '../../static/js/p2p/machine/stopping.js';
import { Leadership } from '../../static/js/p2p/machine/leadership.js';
import { PeerState, PeerTable } from '../../static/js/p2p/machine/peers.js';
import { ReplicaRefused, checkReplica } from '../../static/js/p2p/machine/replica.js';
import { Machine } from '../../static/js/p2p/machine/machine.js';
import { settings as machineSettings, timers } from '../../static/js/p2p/machine/settings.js';
import { limits } from '../../static/js/p2p/runconfig.js';
import { MAX_EARLY, RepairStore, requests } from '../../static/js/p2p/machine/repair.js';
import { Attempt, AttemptPhase } from '../../static/js/p2p/machine/attempt.js';
import { CommittedRoster } from '../../static/js/p2p/run.js';
import { FrameKind } from '../../static/js/p2p/frames.js';
import { TraceReplica } from './traces/trace_replica.js';
import { StateSync, SyncState } from '../../static/js/p2p/machine/statesync.js';
import * as ev from '../../static/js/p2p/machine/events.js';
import { BLOCK, encode as encodeChunk } from '../../static/js/p2p/codec.js';
import { DATA_PROTOCOL_VERSION, parse as parseMessage, encode as encodeMessage } from '../../static/js/p2p/messages.js';
import { loadTraces } from './protocol_helpers.mjs';

const PROBE = 'a'.repeat(64);

test('mutant: a probe other than the reference names the device, its backend and the fix', () => {
  const g = new SyncGuard('me', PROBE);
  g.checkProbe('me', 3, PROBE, 'webgpu'); // the reference probe passes
  const bad = 'b'.repeat(64);
  assert.throws(() => g.checkProbe('p2', 3, bad, 'webgpu'), (exc) => {
    assert.ok(exc instanceof Fork);
    assert.equal(exc.name, 'Fork');
    assert.equal(exc.message, `kernel probe mismatch after step 3: peer p2 (backend webgpu) ` +
      `published ${'b'.repeat(16)}..., every device must publish ${'a'.repeat(16)}...; ` +
      'restart p2 with --backend numpy');
    assert.deepEqual([...exc.hashes], [['p2', bad]]);
    return true;
  });
  assert.throws(() => g.checkProbe('me', 4, bad, 'cpu'), /: this peer me \(backend cpu\)/);
});

test('mutant: have() is a copy of the hashes heard for one attempt, empty when none', () => {
  const g = new SyncGuard('me', PROBE);
  assert.deepEqual([...g.have(1, 0)], []);
  g.record('p2', 1, 0, 'h');
  const have = g.have(1, 0);
  assert.deepEqual([...have], [['p2', 'h']]);
  have.set('p3', 'x');
  assert.deepEqual([...g.have(1, 0)], [['p2', 'h']]);
  assert.deepEqual([...g.have(1, 1)], []);
});

test('mutant: record forks only once our own hash is in and another differs', () => {
  const g = new SyncGuard('me', PROBE);
  g.record('p2', 5, 0, 'x');
  g.record('p3', 5, 0, 'y'); // two others disagree, ours is not in: no verdict yet
  assert.throws(() => g.record('me', 5, 0, 'x'), (exc) => exc instanceof Fork &&
    exc.hashes.get('p3') === 'y' && exc.hashes.get('me') === 'x');
  const ok = new SyncGuard('me', PROBE);
  ok.record('me', 5, 0, 'x');
  ok.record('p2', 5, 0, 'x');
  assert.deepEqual(ok.agreement(5), [2, 2]);
});

test('mutant: the guard keeps exactly HISTORY_STEPS steps of hashes', () => {
  const g = new SyncGuard('me', PROBE);
  g.record('me', 10, 0, 'h');
  g.record('me', 10 + HISTORY_STEPS - 1, 0, 'h');
  assert.deepEqual([...g.have(10, 0)], [['me', 'h']]); // still within the history
  g.record('me', 10 + HISTORY_STEPS, 0, 'h');
  assert.deepEqual([...g.have(10, 0)], []); // dropped exactly at HISTORY_STEPS
  assert.equal(g.hashes.size, 2);
});

test('mutant: agreement counts the peers whose hash equals ours, of those that reported', () => {
  const g = new SyncGuard('me', PROBE);
  assert.deepEqual(g.agreement(7), [0, 0]);
  g.record('p2', 7, 0, 'h');
  assert.deepEqual(g.agreement(7), [0, 0]); // ours is not in
  g.record('me', 7, 0, 'h');
  g.record('p3', 7, 0, 'h');
  assert.deepEqual(g.agreement(7), [3, 3]);
  assert.deepEqual(g.agreement(8), [0, 0]);
  const split = new SyncGuard('me', PROBE);
  split.record('p2', 7, 0, 'z');
  assert.throws(() => split.record('me', 7, 0, 'h'), Fork);
  assert.deepEqual(split.agreement(7), [1, 2]);
});

test('mutant: tally splits the roster into same, differ and missing, with backends', () => {
  const g = new SyncGuard('me', PROBE);
  g.record('p2', 4, 1, 'h', 'webgpu');
  assert.equal(g.tally(4, 1, ['me', 'p2']), null); // our own hash is not in
  assert.equal(g.tally(9, 0, ['me']), null); // no such attempt
  g.record('me', 4, 1, 'h', 'numpy');
  g.hashes.get([...g.hashes.keys()][0]).have.set('p3', 'other'); // a differing hash, no backend
  const t = g.tally(4, 1, ['me', 'p2', 'p3', 'p4']);
  assert.equal(t.step, 4);
  assert.equal(t.round, 1);
  assert.equal(t.hash, 'h');
  assert.deepEqual(t.same, ['me', 'p2']);
  assert.deepEqual(t.differ, ['p3']);
  assert.deepEqual(t.missing, ['p4']);
  assert.deepEqual([...t.byPeer], [['me', 'numpy'], ['p2', 'webgpu'], ['p3', 'unknown']]);
  assert.deepEqual([...t.backends], [['numpy', 1], ['webgpu', 1], ['unknown', 1]]);
  const two = new SyncGuard('me', PROBE);
  two.record('me', 4, 1, 'h'); // no backend named: 'unknown'
  for (const peer of ['p2', 'p5']) two.record(peer, 4, 1, 'h', 'webgpu');
  const t2 = two.tally(4, 1, ['me', 'p2', 'p5']);
  assert.deepEqual([...t2.backends], [['unknown', 1], ['webgpu', 2]]);
});

// --- stopping.js ---------------------------------------------------------------------------

test('mutant: a stopping peer finishes once every greeted peer acknowledged, and only once', () => {
  const s = new Stopping();
  s.stopFrom.add('b'); // b announced the stop to us: it needs no acknowledgement
  s.begin({ message: 'done' }, { type: 'stop' }, ['a', 'b'], 100);
  assert.deepEqual([...s.waiting], ['a']);
  assert.equal(s.done(50), false);
  s.acknowledged('a');
  assert.equal(s.done(50), true);
  assert.equal(s.finished, true);
  assert.equal(s.done(50), false); // finished already
  assert.equal(s.done(500), false);
});

test('mutant: the linger deadline ends the wait at exactly lingerUntil, naming who is missing', () => {
  const logged = [];
  const s = new Stopping((level, message) => logged.push([level, message]));
  s.begin({ message: 'done' }, { type: 'stop' }, ['c', 'a'], 100);
  assert.equal(s.done(99.5), false);
  assert.deepEqual(logged, []);
  assert.equal(s.done(100), true);
  assert.deepEqual(logged, [['warning', 'no stop acknowledgement from a, c']]);
  const quiet = [];
  const none = new Stopping((...x) => quiet.push(x));
  none.begin({ message: 'done' }, null, ['a'], 100); // no stop to repeat: nobody to wait for
  assert.equal(none.done(0), true);
  assert.deepEqual(quiet, []);
});

test('mutant: Stopped carries the outcome, its message and the stop to repeat', () => {
  const outcome = { message: 'the run reached its last step' };
  const e = new Stopped(outcome);
  assert.equal(e.name, 'Stopped');
  assert.equal(e.message, outcome.message);
  assert.equal(e.outcome, outcome);
  assert.equal(e.stop, null);
});

// --- leadership.js -------------------------------------------------------------------------

test('mutant: leading makes this peer the leader of its own run', () => {
  const l = new Leadership('me');
  assert.equal(l.isLeader, false);
  l.leader = 'other';
  assert.equal(l.isLeader, false);
  l.lead(3);
  assert.equal(l.isLeader, true);
  assert.equal(l.leadsOwnRun, true);
  assert.equal(l.minPeers, 3);
});

test('mutant: failover before any roster is refused; after, the successor leads', () => {
  const logged = [];
  const l = new Leadership('b', (level, message) => logged.push([level, message]));
  assert.throws(() => l.failOver(new Set(['a'])), { message: 'failover before any roster' });
  l.leader = 'a';
  l.roster = { step: 2, peers: ['a', 'b', 'c'] };
  const next = successor(['a', 'b', 'c'], new Set(['a']));
  assert.equal(l.failOver(new Set(['a'])), next);
  assert.equal(l.leader, next);
  assert.deepEqual(logged, [['info', `b: leader a gone; successor ${next}`]]);
  l.hold('c', { step: 3, peers: ['b', 'c'] });
  assert.deepEqual(logged[1], ['info', `b: roster from c held (leader is ${next})`]);
});

test('mutant: a held roster is taken only from the leader and only if not older', () => {
  const l = new Leadership('b');
  assert.equal(l.takeHeld(), null); // no leader
  l.held.set('x', { step: 5, peers: [] });
  assert.equal(l.takeHeld(), null); // null leader takes nothing
  assert.equal(l.held.size, 1);
  l.leader = 'c';
  assert.equal(l.takeHeld(), null); // nothing held from c
  const fresh = { step: 4, peers: ['b', 'c'] };
  l.held.set('c', fresh);
  assert.equal(l.takeHeld(), fresh); // no roster yet: taken
  assert.equal(l.held.has('c'), false);
  l.roster = { step: 4, peers: ['b', 'c'] };
  assert.equal(l.takeHeld(), null); // nothing held, a roster of ours
  const same = { step: 4, peers: ['c'] };
  l.held.set('c', same);
  assert.equal(l.takeHeld(), same); // as new as ours: taken
  l.held.set('c', { step: 3, peers: ['c'] });
  assert.equal(l.takeHeld(), null); // older than ours: dropped
  assert.equal(l.held.has('c'), false);
});

test('mutant: forget drops a peer\'s ready and sync wish; eligible needs step, hash and not gone', () => {
  const l = new Leadership('a');
  l.ready.set('b', { step: 2, hash: 'h' });
  l.ready.set('c', { step: 2, hash: 'h' });
  l.ready.set('d', { step: 1, hash: 'h' });
  l.ready.set('e', { step: 2, hash: 'x' });
  l.syncWanted.add('b');
  assert.deepEqual(l.eligible(new Set(['c']), 2, 'h'), ['b']);
  l.forget('b');
  assert.equal(l.ready.has('b'), false);
  assert.equal(l.syncWanted.has('b'), false);
  assert.deepEqual(l.eligible(new Set(), 2, 'h'), ['c']);
});

// --- peers.js ------------------------------------------------------------------------------

test('mutant: the peer table: open, greeted, gone (final), and the channel kept apart', () => {
  const logged = [];
  const t = new PeerTable('me', () => 0, (level, message) => logged.push([level, message]));
  assert.equal(t.get('a'), null);
  assert.equal(t.state('a'), null);
  assert.equal(t.wasGreeted('a'), false);
  t.opened('a', 1);
  t.opened('a', 5); // never re-admitted: the first opening stays
  assert.equal(t.get('a').openedAt, 1);
  assert.equal(t.state('a'), PeerState.OPEN);
  assert.equal(t.get('a').channelOpen, true);
  t.greet('a');
  t.greet('a'); // no change, no log line
  assert.equal(t.state('a'), PeerState.GREETED);
  assert.equal(t.isGone('a'), false);
  assert.equal(t.wasGreeted('a'), true);
  assert.deepEqual(logged, [['info', 'me: peer a: open -> greeted']]);
  assert.equal(t.gone('a'), true);
  assert.equal(t.gone('a'), false);
  assert.equal(t.isGone('a'), true);
  t.set('a', t.get('a'), PeerState.GREETED); // gone is final
  assert.equal(t.state('a'), PeerState.GONE);
  assert.equal(t.gone('z'), true); // never seen: an entry, gone, no channel
  assert.equal(t.get('z').channelOpen, false);
  assert.equal(t.wasGreeted('z'), false);
  assert.deepEqual([...t.goneSet].sort(), ['a', 'z']);
  assert.deepEqual(logged.slice(1), [
    ['info', 'me: peer a: greeted -> gone'], ['info', 'me: peer z: -> gone']]);
  t.channelClosed('nobody'); // unknown: nothing happens
  assert.equal(t.get('nobody'), null);
});

test('mutant: who hears a broadcast, who a ready reports, who a stop goes to', () => {
  const t = new PeerTable('me', () => 0);
  for (const p of ['c', 'b', 'a', 'd']) t.opened(p, 0);
  for (const p of ['c', 'b', 'a']) t.greet(p);
  t.channelClosed('b');
  t.gone('c'); // gone, channel still open
  assert.deepEqual(t.live(), ['a', 'b']);
  assert.deepEqual(t.liveOpen(), ['a']);
  assert.deepEqual(t.greetedOpen(), ['a', 'c']);
});

test('mutant: a hello is overdue at exactly openedAt + timeout; the soonest is next', () => {
  const t = new PeerTable('me', () => 0);
  assert.equal(t.nextHelloDeadline(10), null);
  t.opened('a', 3);
  t.opened('b', 5);
  t.opened('c', 1);
  t.greet('c'); // greeted: no hello deadline
  assert.equal(t.nextHelloDeadline(10), 13);
  assert.deepEqual(t.helloOverdue(12.5, 10), []);
  assert.deepEqual(t.helloOverdue(13, 10), ['a']);
  assert.deepEqual(t.helloOverdue(15, 10), ['a', 'b']);
});

// --- replica.js ----------------------------------------------------------------------------

const SETTINGS = machineSettings({
  id: 'me', name: 'me', tokenizer_sha256: '0'.repeat(64), vocab_size: 64, backend: 'numpy',
  reference_probe: PROBE,
});

test('mutant: a replica without one of the four methods or the two properties is refused by name', () => {
  const ok = new TraceReplica(0, 'h');
  assert.equal(checkReplica(ok), ok);
  assert.ok(new Machine(SETTINGS, ok) instanceof Machine);
  const methods = { start() {}, restore() {}, checkpoint() {}, apply() {}, step: 0, hash: '' };
  assert.equal(checkReplica(methods), methods);
  assert.throws(() => checkReplica(null), { name: 'TypeError', message: 'a replica needs a start() method' });
  for (const m of ['start', 'restore', 'checkpoint', 'apply']) {
    const broken = { ...methods, [m]: 'not a function' };
    assert.throws(() => checkReplica(broken), { name: 'TypeError', message: `a replica needs a ${m}() method` });
    assert.throws(() => new Machine(SETTINGS, broken), { message: `a replica needs a ${m}() method` });
  }
  for (const p of ['step', 'hash']) {
    const broken = { ...methods };
    delete broken[p];
    assert.throws(() => checkReplica(broken), { name: 'TypeError', message: `a replica needs a ${p} property` });
  }
});

test('mutant: ReplicaRefused is an Error named ReplicaRefused carrying its reason', () => {
  const e = new ReplicaRefused('not a checkpoint');
  assert.ok(e instanceof Error);
  assert.equal(e.name, 'ReplicaRefused');
  assert.equal(e.message, 'not a checkpoint');
});

// --- statesync.js --------------------------------------------------------------------------

test('mutant: state sync goes idle -> wanted -> awaiting -> idle; want() only from idle', () => {
  const logged = [];
  const s = new StateSync((level, message) => logged.push([level, message]));
  assert.equal(s.state, SyncState.IDLE);
  assert.equal(s.awaiting, false);
  s.want();
  assert.equal(s.state, SyncState.WANTED);
  s.want(); // no change, no log line
  s.sent();
  s.sent(); // no change, no log line
  assert.equal(s.awaiting, true);
  s.want(); // awaiting the checkpoint: a second wish changes nothing
  assert.equal(s.state, SyncState.AWAITING);
  s.done();
  s.done(); // no change, no log line
  assert.equal(s.state, SyncState.IDLE);
  assert.equal(s.awaiting, false);
  assert.deepEqual(logged, [
    ['debug', 'state sync idle -> wanted'],
    ['debug', 'state sync wanted -> awaiting'],
    ['debug', 'state sync awaiting -> idle'],
  ]);
});

// --- a machine driven by hand ----------------------------------------------------------------
// The traces' setup and run configuration (leader-3-peers), the trace replica; `solo` leads a
// run alone (min_peers 1), so one compute-done applies a step.

const TRACES = loadTraces();
const TRACE = TRACES.find((t) => t.trace.name === 'leader-3-peers').trace;

const CONFIG_JSON = TRACE.steps[0].event.config;
const config = (fields = {}) => parseMessage(JSON.stringify({ ...CONFIG_JSON, ...fields }));
const ME = TRACE.setup.id;
const REF = TRACE.setup.reference_probe;
const B = 'BBBBBBBBBBBB';
const C = 'CCCCCCCCCCCC';

function machine({ id = ME, replica, log, ...fields } = {}) {
  const st = TRACE.setup;
  const s = machineSettings({
    id, name: st.name, tokenizer_sha256: st.tokenizer_sha256, vocab_size: st.vocab_size,
    backend: st.backend, reference_probe: REF, timers: st.timers, limits: st.limits, ...fields,
  });
  return new Machine(s, replica ?? new TraceReplica(st.replica.step, st.replica.hash), { log });
}

const text = (m) => encodeMessage(parseMessage(JSON.stringify(m)));
const hello = (name = 'x') => text({ type: 'hello', version: DATA_PROTOCOL_VERSION, name, contract: 2 });
/** The effects as plain values: messages by their JSON, payloads by their header fields. */
const plain = (effects) => effects.map((f) => {
  if (f.type === 'send-message') return { type: f.type, peer: f.peer, message: JSON.parse(encodeMessage(f.message)) };
  if (f.type === 'send-payload') { const { payload, ...rest } = f; return { ...rest, bytes: payload.length }; }
  if (f.type === 'finished') { const { hashes, ...o } = f.outcome; return { type: f.type, ...o, hashes: [...hashes] }; }
  return { ...f };
});

/** Open a channel to `peer` and greet it (the hello both ways). */
async function greet(m, peer, now = 0) {
  const out = await m.handle(ev.channelOpened(now, peer));
  return [...out, ...(await m.handle(ev.messageReceived(now, peer, hello(peer))))];
}

/** A zero gradient for a roster of `n` peers, as compute-done payloads. */
function zeroPayloads(m, n) {
  const out = [];
  for (let k = 0; k < n; k++) {
    const first = Math.floor((k * m.totalBlocks) / n);
    const end = Math.floor(((k + 1) * m.totalBlocks) / n);
    out.push(encodeChunk(new Float32Array((end - first) * BLOCK)).payload);
  }
  return out;
}

/** A leader alone in its run: lead, compute step 1 (not yet done). */
async function solo(fields = {}, cfg = {}) {
  const m = machine(fields);
  const out = await m.handle(ev.userLead(0, config(cfg), 1));
  return { m, out };
}

/** Finish the compute of the current step with zeros; the effects. */
async function computeStep(m, now, n = 1) {
  const r = m.roster;
  return m.handle(ev.computeDone(now, r.step, r.round, 2.5, zeroPayloads(m, n), REF));
}

// --- events.js -----------------------------------------------------------------------------

test('mutant: every event constructor makes a frozen record of one of EVENT_TYPES, all of them', () => {
  const all = [
    ev.channelOpened(1, 'p'), ev.channelClosed(1, 'p'), ev.peerLeft(1, 'p'),
    ev.messageReceived(1, 'p', '{}'), ev.frameReceived(1, 'p', new Uint8Array(1)),
    ev.computeDone(1, 2, 0, 0.5, [new Uint8Array(1)], 'x'),
    ev.computePartial(1, 2, 0, 1, new Uint8Array(1)), ev.computeFailed(1, 2, 0, 'oom'),
    ev.timer(1), ev.userLead(1, {}, 2), ev.userStop(1, 'why'), ev.userLeave(1, 'why'),
    ev.userSave(1), ev.userPrivateData(1, true), ev.signalingLost(1, 'why'),
  ];
  assert.deepEqual(all.map((e) => e.type), [...ev.EVENT_TYPES]);
  assert.equal(new Set(ev.EVENT_TYPES).size, 15);
  for (const e of all) {
    assert.equal(e.now, 1);
    assert.ok(Object.isFrozen(e));
  }
  assert.deepEqual({ ...ev.userStop(3, 'enough') }, { type: 'user-stop', now: 3, reason: 'enough' });
  assert.deepEqual({ ...ev.userSave(3) }, { type: 'user-save', now: 3 });
  assert.deepEqual({ ...ev.userPrivateData(3, 1) }, { type: 'user-private-data', now: 3, on: true });
  assert.deepEqual({ ...ev.signalingLost(3, 'gone') }, { type: 'signaling-lost', now: 3, reason: 'gone' });
});

test('mutant: a lost signaling server ends the run with an error naming the reason', async () => {
  const m = machine();
  const out = plain(await m.handle(ev.signalingLost(4, 'socket closed')));
  assert.deepEqual(out, [{ type: 'finished', reason: 'error', step: 0, hash: '', // no state in the lobby
    message: 'lost the signaling server: socket closed', hashes: [], code: '' }]);
  assert.equal(m.finished, true);
  assert.deepEqual(await m.handle(ev.timer(5)), []);
});

test('mutant: the leader\'s user-stop ends the run at the next step boundary; a follower\'s is ignored', async () => {
  const logged = [];
  const { m } = await solo({ log: (level, message) => logged.push([level, message]) });
  assert.deepEqual(await m.handle(ev.userStop(1, '')), []);
  assert.ok(logged.some(([l, t]) => l === 'info' && t === `${ME}: ending the run at the next boundary: `));
  const out = plain(await computeStep(m, 2));
  const fin = out.find((f) => f.type === 'finished');
  assert.equal(fin.reason, 'leader-request');
  assert.equal(fin.message, 'the leader ended the run at step 1');
  assert.equal(fin.step, 1);
  const named = (await solo()).m;
  await named.handle(ev.userStop(1, 'enough'));
  const fin2 = plain(await computeStep(named, 2)).find((f) => f.type === 'finished');
  assert.equal(fin2.message, 'enough at step 1');
  // not the leader: nothing changes, the run goes on
  const warned = [];
  const f = machine({ id: B, log: (level, message) => warned.push([level, message]) });
  assert.deepEqual(await f.handle(ev.userStop(1, 'please')), []);
  assert.deepEqual(warned.filter(([l]) => l === 'warning'), [['warning', `${B}: only the leader can end the run`]]);
  assert.equal(f.finished, false);
  // a leader whose run goes on to its last step is not stopped early
  const full = (await solo({}, { steps: 2 })).m;
  assert.equal(plain(await computeStep(full, 2)).some((e) => e.type === 'finished'), false);
});

test('mutant: user-save: a leader asks every peer to save this step, and saves if it can', async () => {
  const { m } = await solo({ can_save: true });
  await greet(m, B);
  const out = plain(await m.handle(ev.userSave(1)));
  assert.deepEqual(out, [
    { type: 'send-message', peer: B, message: { type: 'save', run: CONFIG_JSON.run, step: 0 } },
    { type: 'save', step: 0 },
  ]);
  const cannot = (await solo()).m;
  await greet(cannot, B);
  assert.deepEqual(plain(await cannot.handle(ev.userSave(1))).map((f) => f.type), ['send-message']);
  // a follower without a run saves only itself, and only with a state
  const lobby = machine({ id: B, can_save: true });
  assert.deepEqual(await lobby.handle(ev.userSave(1)), []);
});

// --- settings.js ---------------------------------------------------------------------------

test('mutant: the default timers are 60 s a step, 10 s to repair, 20 s for a hello, 10 s to linger', async () => {
  assert.deepEqual({ ...timers() }, { step_timeout_s: 60, repair_after_s: 10, hello_timeout_s: 20, linger_s: 10 });
  assert.ok(Object.isFrozen(timers()));
  assert.deepEqual({ ...timers({ linger_s: 0, step_timeout_s: 2.5 }) },
    { step_timeout_s: 2.5, repair_after_s: 10, hello_timeout_s: 20, linger_s: 0 });
  // and the machine runs on them: a channel without a hello is closed 20 s after it opened
  const m = machine({ timers: undefined });
  await m.handle(ev.channelOpened(3, B));
  assert.equal(m.nextDeadline(), 23);
  // a leader alone: its step is re-decided 60 s after the roster, repairs asked after 10 s
  const { m: lead } = await solo({ timers: undefined });
  assert.equal(lead.nextDeadline(), 10);
  const out = plain(await lead.handle(ev.timer(59)));
  assert.deepEqual(out, []);
  assert.equal(lead.nextDeadline(), 60);
});

test('mutant: a timer is a finite number of seconds >= 0, and only a known one', () => {
  assert.throws(() => timers({ hello_s: 1 }), { name: 'TypeError', message: 'unknown timer hello_s' });
  for (const bad of [-1, -0.5, NaN, Infinity, '5', null]) {
    assert.throws(() => timers({ linger_s: bad }), { name: 'RangeError',
      message: `timer linger_s must be a finite number of seconds >= 0, got ${bad}` });
  }
  assert.equal(timers({ hello_timeout_s: 0 }).hello_timeout_s, 0);
});

test('mutant: settings need string names and an integer vocabulary; can_save, save_every, limits and data default', () => {
  const base = { id: 'me', name: 'n', tokenizer_sha256: 't', vocab_size: 64, backend: 'numpy', reference_probe: 'p' };
  const s = machineSettings(base);
  assert.ok(Object.isFrozen(s));
  assert.equal(s.id, 'me');
  assert.equal(s.name, 'n');
  assert.equal(s.tokenizer_sha256, 't');
  assert.equal(s.vocab_size, 64);
  assert.equal(s.backend, 'numpy');
  assert.equal(s.reference_probe, 'p');
  assert.deepEqual({ ...s.timers }, { ...timers() });
  assert.equal(s.can_save, false);
  assert.equal(s.save_every, 0);
  assert.deepEqual({ ...s.limits }, { ...limits() });
  assert.deepEqual(s.data_sources, ['builtin']);
  assert.ok(Object.isFrozen(s.data_sources));
  for (const name of ['id', 'name', 'tokenizer_sha256', 'backend', 'reference_probe']) {
    assert.throws(() => machineSettings({ ...base, [name]: 5 }), { name: 'TypeError', message: `settings.${name} must be a string` });
  }
  for (const v of [64.5, '64', undefined]) {
    assert.throws(() => machineSettings({ ...base, vocab_size: v }), { name: 'TypeError', message: 'settings.vocab_size must be an integer' });
  }
  const sources = ['builtin', 'fineweb@abc'];
  const full = machineSettings({ ...base, can_save: 1, save_every: 5, limits: { max_steps: 9 }, data_sources: sources, timers: { linger_s: 1 } });
  assert.equal(full.can_save, true);
  assert.equal(full.save_every, 5);
  assert.equal(full.limits.max_steps, 9);
  assert.equal(full.timers.linger_s, 1);
  sources.push('other'); // a copy
  assert.deepEqual(full.data_sources, ['builtin', 'fineweb@abc']);
});

// --- repair.js -----------------------------------------------------------------------------

const attempt = (step, round, peers, rank, blocks = 3) =>
  new Attempt(new CommittedRoster(step, round, peers, peers.map(() => 1)), rank, blocks, 0);
const piece = (step, round = 0, chunk = 0) => ({ step, round, chunk, kind: FrameKind.REDUCED, data: new Uint8Array(1) });

test('mutant: the store keeps exactly HISTORY_STEPS steps of attempts, and drops early pieces of steps started', () => {
  const st = new RepairStore();
  assert.equal(st.get(1, 0), null);
  assert.equal(st.has(1, 0), false);
  const first = attempt(10, 0, ['a', 'b'], 0);
  st.add(first);
  assert.equal(st.get(10, 0), first);
  assert.equal(st.has(10, 0), true);
  assert.equal(st.has(10, 1), false);
  st.add(attempt(10 + HISTORY_STEPS - 1, 0, ['a', 'b'], 0));
  assert.equal(st.has(10, 0), true); // still within the history
  st.add(attempt(10 + HISTORY_STEPS, 0, ['a', 'b'], 0));
  assert.equal(st.has(10, 0), false); // dropped exactly at HISTORY_STEPS
  assert.equal(st.attempts.size, 2);
  // early pieces: kept for steps not started, dropped once a later or equal step starts
  const s2 = new RepairStore();
  s2.add(attempt(5, 0, ['a', 'b'], 0));
  s2.holdEarly('b', piece(6), 5);
  s2.holdEarly('b', piece(7, 1), 5);
  s2.add(attempt(6, 0, ['a', 'b'], 0));
  assert.deepEqual(s2.takeEarly(7, 1).map(([peer, p]) => [peer, p.step, p.round]), [['b', 7, 1]]);
  assert.deepEqual(s2.takeEarly(7, 1), []); // taken once
  s2.holdEarly('b', piece(7), 6);
  s2.add(attempt(7, 0, ['a', 'b'], 0));
  assert.deepEqual(s2.takeEarly(7, 0).length, 1); // a piece of the step just started stays for it
  assert.deepEqual(s2.takeEarly(6, 0), []); // of the step started earlier: dropped
});

test('mutant: early pieces are held only one or two steps ahead, at most MAX_EARLY of them', () => {
  const st = new RepairStore();
  st.holdEarly('b', piece(5), 5); // our own step: not early
  st.holdEarly('b', piece(8), 5); // three ahead: too far
  st.holdEarly('b', piece(4), 5);
  assert.equal(st.early.size, 0);
  st.holdEarly('b', piece(6), 5);
  st.holdEarly('c', piece(6), 5);
  st.holdEarly('c', piece(7, 2), 5);
  assert.deepEqual(st.takeEarly(6, 0).map(([peer]) => peer), ['b', 'c']);
  assert.equal(st.takeEarly(7, 2).length, 1);
  for (let i = 0; i < MAX_EARLY + 5; i++) st.holdEarly('b', piece(6, 0, i), 5);
  assert.equal(st.takeEarly(6, 0).length, MAX_EARLY);
  assert.equal(MAX_EARLY, 256);
});

test('mutant: abandonBefore abandons only live earlier rounds of that step', () => {
  const st = new RepairStore();
  const a0 = attempt(3, 0, ['a', 'b'], 0);
  const a1 = attempt(3, 1, ['a', 'b'], 0);
  const a2 = attempt(3, 2, ['a', 'b'], 0);
  const other = attempt(2, 0, ['a', 'b'], 0);
  const done = attempt(3, 0, ['a', 'c'], 0);
  for (const a of [other, a0, a1, a2]) st.add(a);
  st.abandonBefore(3, 2);
  assert.equal(a0.phase, AttemptPhase.ABANDONED);
  assert.equal(a1.phase, AttemptPhase.ABANDONED);
  assert.equal(a2.phase, AttemptPhase.COMPUTING);
  assert.equal(other.phase, AttemptPhase.COMPUTING);
  st.abandonBefore(3, 2); // already abandoned: no second transition (which would throw)
  assert.equal(a0.phase, AttemptPhase.ABANDONED);
  done.transition(AttemptPhase.EXCHANGING);
  done.transition(AttemptPhase.APPLIED);
  const st2 = new RepairStore();
  st2.add(done);
  st2.abandonBefore(3, 1); // applied: stays applied
  assert.equal(done.phase, AttemptPhase.APPLIED);
});

test('mutant: serve answers a contribution only to its chunk\'s owner, a reduced chunk to anyone, once held', () => {
  const st = new RepairStore();
  assert.equal(st.serve('b', { step: 4, round: 0, piece: 'reduced', chunk: 0 }), null); // no attempt
  const a = attempt(4, 0, ['a', 'b', 'c'], 0);
  st.add(a);
  const ask = (peer, pieceName, chunk) => st.serve(peer, { step: 4, round: 0, piece: pieceName, chunk });
  assert.equal(ask('b', 'contribution', 1), null); // not computed yet
  assert.equal(ask('a', 'contribution', 0), null);
  const early = new Uint8Array([7]);
  a.early.set(2, early); // chunk 2 left before the compute was done
  assert.deepEqual(ask('c', 'contribution', 2), { kind: FrameKind.CONTRIBUTION, payload: early });
  assert.equal(ask('b', 'contribution', 1), null); // chunk 1 did not
  assert.equal(ask('b', 'contribution', 2), null); // not b's chunk
  const sent = [new Uint8Array([0]), new Uint8Array([1]), new Uint8Array([2])];
  a.sent = sent;
  assert.deepEqual(ask('b', 'contribution', 1), { kind: FrameKind.CONTRIBUTION, payload: sent[1] });
  assert.deepEqual(ask('c', 'contribution', 2), { kind: FrameKind.CONTRIBUTION, payload: sent[2] });
  assert.deepEqual(ask('a', 'contribution', 0), { kind: FrameKind.CONTRIBUTION, payload: sent[0] }); // chunk 0 is a chunk
  assert.equal(ask('c', 'contribution', 1), null); // not c's chunk
  assert.equal(ask('b', 'contribution', 3), null); // no such chunk
  assert.equal(ask('b', 'contribution', -1), null);
  assert.equal(ask('b', 'reduced', 1), null); // not held
  const red = new Uint8Array([9]);
  a.reducedPayload.set(1, red);
  assert.deepEqual(ask('c', 'reduced', 1), { kind: FrameKind.REDUCED, payload: red });
  assert.deepEqual(ask('a', 'reduced', 1), { kind: FrameKind.REDUCED, payload: red });
  assert.equal(ask('c', 'reduced', 3), null);
  a.reducedPayload.set(3, red); // even if something were held past the roster
  assert.equal(ask('c', 'reduced', 3), null);
  a.sent = sent.slice(0, 1); // fewer sent than the chunk: nothing to serve
  assert.equal(ask('b', 'contribution', 1), null);
});

test('mutant: requests ask each live sender for its missing contribution and every other live peer for a missing reduced chunk', () => {
  const a = attempt(4, 1, ['a', 'b', 'c', 'd'], 1); // this peer is b
  a.contributions.set(1, new Float32Array(0));
  a.contributions.set(2, new Float32Array(0));
  a.reduced.set(0, new Float32Array(0));
  a.reduced.set(2, new Float32Array(0));
  const gone = new Set(['d']);
  const got = requests(a, 'b', gone, 'r').map(([peer, m]) => [peer, m.type, m.run, m.step, m.round, m.piece, m.chunk]);
  assert.deepEqual(got, [
    ['a', 'repair', 'r', 4, 1, 'contribution', 1],
    ['a', 'repair', 'r', 4, 1, 'reduced', 1], ['c', 'repair', 'r', 4, 1, 'reduced', 1],
    ['a', 'repair', 'r', 4, 1, 'reduced', 3], ['c', 'repair', 'r', 4, 1, 'reduced', 3],
  ]);
  a.reduced.set(1, new Float32Array(0)); // our chunk is reduced: no contribution is asked for
  assert.deepEqual(requests(a, 'b', new Set(), 'r').map(([peer, m]) => [peer, m.piece, m.chunk]),
    [['a', 'reduced', 3], ['c', 'reduced', 3], ['d', 'reduced', 3]]);
});

// --- attempt.js ----------------------------------------------------------------------------

test('mutant: an attempt computes, then exchanges, then applies; it may be abandoned until applied', () => {
  const logged = [];
  const a = new Attempt(new CommittedRoster(3, 1, ['a', 'b'], [1, 1]), 0, 2, 0, (level, message) => logged.push([level, message]));
  assert.equal(a.computed, false); // nothing sent before the compute is done
  assert.deepEqual(a.sent, []);
  assert.equal(a.live, true);
  const early = new Float32Array(BLOCK).fill(1);
  a.contributions.set(1, early); // b's contribution arrives before ours is computed
  a.computedWith(2.5, zeroPayloads({ totalBlocks: 2 }, 2), 'probe');
  assert.equal(a.computed, true);
  assert.equal(a.contributions.get(1), early); // kept: an exchanging attempt still needs its floats
  assert.equal(a.contributions.get(0).length, BLOCK);
  a.transition(AttemptPhase.ABANDONED);
  assert.equal(a.live, false);
  assert.deepEqual([...a.contributions.keys()].sort(), [0, 1]); // the keys stay
  assert.equal(a.contributions.get(1).length, 0); // the floats go
  assert.deepEqual(logged, [
    ['debug', 'attempt 3/1: computing -> exchanging'],
    ['debug', 'attempt 3/1: exchanging -> abandoned'],
  ]);
  assert.throws(() => a.transition(AttemptPhase.EXCHANGING), { message: 'attempt 3/1 is abandoned: cannot become exchanging' });
  const c = attempt(3, 0, ['a', 'b'], 0);
  c.transition(AttemptPhase.ABANDONED); // a later round was committed before our compute was done
  assert.equal(c.phase, AttemptPhase.ABANDONED);
  assert.throws(() => c.transition(AttemptPhase.APPLIED), { message: 'attempt 3/0 is abandoned: cannot become applied' });
  const d = attempt(3, 0, ['a'], 0);
  assert.throws(() => d.transition(AttemptPhase.APPLIED), { message: 'attempt 3/0 is computing: cannot become applied' });
  d.transition(AttemptPhase.EXCHANGING);
  d.reduced.set(0, new Float32Array(BLOCK));
  d.transition(AttemptPhase.APPLIED);
  assert.equal(d.reduced.get(0).length, 0);
  assert.throws(() => d.transition(AttemptPhase.ABANDONED), { message: 'attempt 3/0 is applied: cannot become abandoned' });
});

test('mutant: an attempt is complete only while exchanging with every reduced chunk in', () => {
  const a = attempt(2, 0, ['a', 'b'], 0, 2);
  a.reduced.set(0, new Float32Array(BLOCK)); // even every reduced chunk (forged or early) does not
  a.reduced.set(1, new Float32Array(BLOCK)); // complete an attempt whose compute is not done
  assert.equal(a.complete(), false);
  a.transition(AttemptPhase.EXCHANGING);
  assert.equal(a.complete(), true);
  a.reduced.delete(1);
  assert.equal(a.complete(), false);
});

test('mutant: missingFrom names whose contribution to our chunk and whose reduced chunk are missing', () => {
  const a = attempt(2, 0, ['a', 'b', 'c', 'd'], 1, 8); // this peer is b
  const v = new Float32Array(0);
  assert.deepEqual([...a.missingFrom()].sort(), ['a', 'c', 'd']);
  a.contributions.set(0, v); // a's contribution in; its reduced chunk still missing
  a.reduced.set(2, v); // c's reduced chunk in; its contribution still missing
  assert.deepEqual([...a.missingFrom()].sort(), ['a', 'c', 'd']);
  a.reduced.set(0, v); // a: both in
  assert.deepEqual([...a.missingFrom()].sort(), ['c', 'd']);
  a.reduced.set(1, v); // our chunk is reduced: contributions no longer matter
  assert.deepEqual([...a.missingFrom()].sort(), ['d']);
  a.reduced.set(3, v);
  assert.deepEqual([...a.missingFrom()], []);
});

// --- machine.js ----------------------------------------------------------------------------

const types = (effects) => effects.map((f) => f.type);

test('mutant: a leader alone runs to its last step: compute, apply, save every save_every steps, done', async () => {
  const { m, out } = await solo({ can_save: true, save_every: 2 }, { steps: 3 });
  assert.deepEqual(plain(out), [{ type: 'compute', step: 1, round: 0, rank: 0,
    shares: [CONFIG_JSON.global_batch], peers: 1 }]);
  assert.equal(m.isLeader, true);
  assert.equal(m.leader, ME);
  assert.deepEqual([...m.roster.peers], [ME]);
  const one = plain(await computeStep(m, 1));
  assert.deepEqual(types(one), ['step-applied', 'compute']); // step 1: not a multiple of 2
  assert.equal(one[0].step, 1);
  assert.equal(one[0].loss, 2.5);
  assert.equal(one[0].leader, ME);
  assert.equal(one[0].backend, TRACE.setup.backend);
  assert.deepEqual(m.agreement(1), [1, 1]);
  assert.deepEqual(m.tally(1, 0, [ME]).same, [ME]);
  const two = plain(await computeStep(m, 2));
  assert.deepEqual(types(two), ['step-applied', 'save', 'compute']);
  assert.equal(two[1].step, 2);
  const three = plain(await computeStep(m, 3));
  assert.deepEqual(types(three), ['step-applied', 'save', 'finished']); // the last step, saved at the stop
  assert.equal(three[1].step, 3);
  assert.equal(three[2].reason, 'done');
  assert.equal(three[2].message, 'reached step 3');
  assert.equal(three[2].step, 3);
  assert.equal(three[2].hash, three[0].hash);
  assert.equal(m.finished, true);
  assert.equal(m.nextDeadline(), null);
  assert.deepEqual(await m.handle(ev.timer(9)), []);
});

test('mutant: a step saved already is not saved again at the stop; a fork is never saved', async () => {
  const { m } = await solo({ can_save: true, save_every: 1 }, { steps: 1 });
  assert.deepEqual(types(await computeStep(m, 1)), ['step-applied', 'save', 'finished']);
});

test('mutant: a run this leader cannot train is refused at once, naming why', async () => {
  const m = machine({ limits: { max_steps: 2 } });
  const out = plain(await m.handle(ev.userLead(0, config({ steps: 3 }), 1)));
  assert.equal(out.length, 1);
  assert.equal(out[0].type, 'finished');
  assert.equal(out[0].reason, 'error');
  assert.match(out[0].message, /^cannot lead this run: .+; .+/);
  assert.notEqual(out[0].code, '');
  assert.equal(m.isLeader, false);
});

test('mutant: a compute that returns the wrong number of chunks ends the run with an error', async () => {
  const { m } = await solo();
  const out = plain(await m.handle(ev.computeDone(1, 1, 0, 2.5, zeroPayloads(m, 2), REF)));
  assert.deepEqual(types(out), ['finished']);
  assert.equal(out[0].reason, 'error');
  assert.equal(out[0].message, 'step 1: compute returned 2 chunks for 1 peers');
});

test('mutant: a step re-committed MAX_ROUNDS times ends the run', async () => {
  const { m } = await solo();
  let out = [];
  let round = 0;
  for (let i = 1; i <= 5000 && !m.finished; i++) {
    out = plain(await m.handle(ev.timer(m.nextDeadline())));
    const c = out.find((f) => f.type === 'compute');
    if (c) round = c.round;
  }
  assert.equal(round, 255);
  const fin = out.find((f) => f.type === 'finished');
  assert.equal(fin.reason, 'error');
  assert.equal(fin.message, 'step 1 failed 256 times');
});

test('mutant: a stopping leader lingers for the stop acknowledgements, then finishes', async () => {
  const logged = [];
  const { m } = await solo({ log: (level, message) => logged.push([level, message]) }, { steps: 1 });
  await greet(m, B); // greeted, not in the roster
  const out = plain(await computeStep(m, 4));
  assert.deepEqual(types(out), ['send-message', 'step-applied', 'send-message']);
  assert.equal(out[2].message.type, 'stop');
  assert.equal(out[2].message.reason, 'done');
  assert.equal(m.finished, false);
  assert.equal(m.nextDeadline(), 4 + TRACE.setup.timers.linger_s);
  assert.deepEqual(await m.handle(ev.messageReceived(5, C, hello())), []); // stopped: not an acknowledgement
  assert.deepEqual(await m.handle(ev.messageReceived(5, B, 'not json')), []);
  assert.deepEqual(await m.handle(ev.messageReceived(5, B, hello())), []);
  const fin = plain(await m.handle(ev.messageReceived(6, B, text({ type: 'leave', reason: 'bye' }))));
  assert.deepEqual(types(fin), ['finished']);
  assert.equal(m.nextDeadline(), null);
  // the linger runs out
  const { m: m2 } = await solo({ log: (level, message) => logged.push([level, message]) }, { steps: 1 });
  await greet(m2, B);
  await computeStep(m2, 4);
  assert.deepEqual(await m2.handle(ev.timer(13.5)), []);
  assert.deepEqual(types(await m2.handle(ev.timer(14))), ['finished']);
  assert.ok(logged.some(([l, t]) => l === 'warning' && t === `no stop acknowledgement from ${B}`));
  // a channel closing, or the server's peer-left, acknowledges too
  for (const ack of [ev.channelClosed, ev.peerLeft]) {
    const { m: m3 } = await solo({}, { steps: 1 });
    await greet(m3, B);
    await computeStep(m3, 4);
    assert.deepEqual(types(await m3.handle(ack(5, B))), ['finished']);
  }
});

/** A follower (B) of the leader ME in the lobby, sent the config: it starts and says ready. */
async function follower(fields = {}, cfg = {}) {
  const m = machine({ id: B, replica: new TraceReplica(), ...fields });
  await greet(m, ME);
  const out = await m.handle(ev.messageReceived(0, ME, text({ ...CONFIG_JSON, ...cfg })));
  return { m, out };
}

const refusal = (peer, code, message, hint = 'see docs/PROTOCOL.md, Data channels') => [
  { type: 'send-message', peer, message: { type: 'error', code, message, hint } },
  { type: 'close', peer },
];

test('mutant: before a hello only a hello is taken; a message without a channel is ignored', async () => {
  const logged = [];
  const m = machine({ id: B, log: (level, message) => logged.push([level, message]) });
  assert.deepEqual(await m.handle(ev.messageReceived(0, C, hello())), []);
  assert.deepEqual(logged.filter(([l]) => l === 'warning'), [['warning', `${B}: message from ${C} without a channel ignored`]]);
  assert.equal(m.peers.get(C), null);
  await m.handle(ev.channelOpened(0, ME));
  assert.deepEqual(plain(await m.handle(ev.messageReceived(1, ME, text({ ...CONFIG_JSON })))),
    refusal(ME, 'bad-message', 'config before hello'));
  assert.equal(m.peers.isGone(ME), true);
  await m.handle(ev.channelOpened(0, C));
  assert.deepEqual(plain(await m.handle(ev.frameReceived(1, C, new Uint8Array(8)))),
    refusal(C, 'bad-frame', 'binary frame before hello'));
  assert.deepEqual(await m.handle(ev.frameReceived(1, C, new Uint8Array(8))), []); // gone: ignored
  assert.deepEqual(await m.handle(ev.frameReceived(1, 'nobody', new Uint8Array(8))), []);
});

test('mutant: the hello carries at most 40 characters of the name; a leader refuses another run', async () => {
  const m = machine({ name: 'n'.repeat(45) });
  const out = plain(await m.handle(ev.channelOpened(0, B)));
  assert.deepEqual(out, [{ type: 'send-message', peer: B, message: { type: 'hello', version: DATA_PROTOCOL_VERSION, name: 'n'.repeat(40), contract: 2 } }]);
  assert.deepEqual(await m.handle(ev.channelOpened(1, B)), []); // opened once: one hello
  // a leader refuses a config from another peer: it leads its own run
  const { m: lead } = await solo();
  await greet(lead, B);
  assert.deepEqual(plain(await lead.handle(ev.messageReceived(1, B, text({ ...CONFIG_JSON })))),
    refusal(B, 'wrong-run', 'this peer leads its own run'));
});

test('mutant: a follower takes the first config, ignores the same one again and refuses another', async () => {
  const { m, out } = await follower();
  assert.deepEqual(plain(out), [{ type: 'send-message', peer: ME, message: { type: 'ready', run: CONFIG_JSON.run, step: 0, hash: m.replica.hash, peers: [ME], seq_s: 0 } }]);
  assert.equal(m.leader, ME);
  assert.equal(m.isLeader, false);
  assert.deepEqual(await m.handle(ev.messageReceived(1, ME, text({ ...CONFIG_JSON }))), []);
  await greet(m, C);
  assert.deepEqual(plain(await m.handle(ev.messageReceived(1, C, text({ ...CONFIG_JSON, seed: 8 })))),
    refusal(C, 'wrong-run', 'a second, different run configuration'));
  assert.equal(m.leader, ME);
});

test('mutant: an error from a peer is only logged, unless it is a version mismatch', async () => {
  const logged = [];
  const { m } = await follower({ log: (level, message) => logged.push([level, message]) });
  const err = text({ type: 'error', code: 'bad-frame', message: 'why', hint: 'h' });
  assert.deepEqual(await m.handle(ev.messageReceived(1, ME, err)), []);
  assert.ok(logged.some(([l, t]) => l === 'warning' && t === `${B}: ${ME} says bad-frame: why`));
  assert.equal(m.peers.isGone(ME), false);
});

test('mutant: a late peer greeted by the leader is sent the config and the current roster', async () => {
  const { m } = await solo();
  const out = plain(await greet(m, B));
  assert.deepEqual(out.map((f) => [f.type, f.peer, f.message?.type]), [
    ['send-message', B, 'hello'], ['send-message', B, 'config'], ['send-message', B, 'roster']]);
  assert.deepEqual(out[2].message, { type: 'roster', run: CONFIG_JSON.run, step: 1, round: 0, peers: [ME],
    shares: [CONFIG_JSON.global_batch] });
  // a follower greets nobody with the run
  const { m: f } = await follower();
  assert.deepEqual(types(await greet(f, C)), ['send-message']);
});
