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
