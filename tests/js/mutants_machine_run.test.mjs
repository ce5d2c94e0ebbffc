// The protocol machine's rules that tie the run together (static/js/p2p/machine/machine.js):
// behaviour pinned by mutants that survived the trace replays and tests/js/mutants_machine.test.mjs
// (docs/TESTING.md, "static/js/p2p/machine/machine.js"). Each test drives a real Machine through
// events and asserts on the effects it returns, what a peer on the other end would see. Every
// test name starts with "mutant:" so tests/mutation.py runs them with the replays
// (--test-name-pattern).

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Machine } from '../../static/js/p2p/machine/machine.js';
import { settings as machineSettings } from '../../static/js/p2p/machine/settings.js';
import { TraceReplica } from './traces/trace_replica.js';
import * as ev from '../../static/js/p2p/machine/events.js';
import { BLOCK, encode as encodeChunk } from '../../static/js/p2p/codec.js';
import { FrameKind, HEADER_BYTES, fragment } from '../../static/js/p2p/frames.js';
import { paramShapes } from '../../static/js/model/params.js';
import { modelConfig } from '../../static/js/model/config.js';
import { parse as parseMessage, encode as encodeMessage } from '../../static/js/p2p/messages.js';
import { loadTraces } from './protocol_helpers.mjs';
import { DATA_PROTOCOL_VERSION } from '../../static/js/p2p/versions.js';

const TRACE = loadTraces().find((t) => t.trace.name === 'leader-3-peers').trace;
const CONFIG_JSON = TRACE.steps[0].event.config;
const RUN = CONFIG_JSON.run;
const REF = TRACE.setup.reference_probe;
const T = TRACE.setup.timers; // step 30 s, repair 5 s, hello 20 s, linger 10 s
const A = 'AAAAAAAAAAAA';
const B = 'BBBBBBBBBBBB';
const C = 'CCCCCCCCCCCC';
const D = 'DDDDDDDDDDDD';

// Protocol version 2: the trace's config has global_batch 12, and peers that never reported a
// speed (every ready, hash and compute-done here says seq_s 0) get equal shares of it.
const GB = CONFIG_JSON.global_batch;
assert.equal(GB, 12);

/** The equal shares of the global batch for `n` unmeasured peers (4,4,4 for three). */
function even(n) {
  assert.equal(GB % n, 0, `${n} peers do not split ${GB} evenly`);
  return new Array(n).fill(GB / n);
}
/** Shares given as a list, or as a count of peers with equal shares. */
const sharesOf = (s) => (Array.isArray(s) ? s : even(s));

const config = (fields = {}) => parseMessage(JSON.stringify({ ...CONFIG_JSON, ...fields }));

/** A machine with the trace's setup (id A unless told), a trace replica at `step`. */
function machine({ id = A, step = 0, hash, replica, log, ...fields } = {}) {
  const st = TRACE.setup;
  const s = machineSettings({
    id, name: st.name, tokenizer_sha256: st.tokenizer_sha256, vocab_size: st.vocab_size,
    backend: st.backend, reference_probe: REF, timers: st.timers, limits: st.limits, ...fields,
  });
  return new Machine(s, replica ?? new TraceReplica(step, hash ?? st.replica.hash), { log });
}

const text = (m) => encodeMessage(parseMessage(JSON.stringify(m)));
const hello = (name = 'x') => text({ type: 'hello', version: DATA_PROTOCOL_VERSION, name, contract: 2 });
const msg = (type, fields = {}) => text({ type, run: RUN, ...fields });

/** The effects as plain values: messages by their JSON, payloads by their header fields. */
const plain = (effects) => effects.map((f) => {
  if (f.type === 'send-message') return { type: f.type, peer: f.peer, message: JSON.parse(encodeMessage(f.message)) };
  if (f.type === 'send-payload') { const { payload, ...rest } = f; return { ...rest, bytes: payload.length }; }
  if (f.type === 'finished') { const { hashes, ...o } = f.outcome; return { type: f.type, ...o, hashes: Object.fromEntries(hashes) }; }
  return { ...f };
});
const types = (effects) => effects.map((f) => f.type);
/** Each effect in short: `type peer message-type` (or kind/step for the others). */
const brief = (effects) => plain(effects).map((f) => {
  if (f.type === 'send-message') return `${f.peer} ${f.message.type}`;
  if (f.type === 'send-payload') return `${f.peer} payload ${f.kind} ${f.step}.${f.round}.${f.chunk}`;
  if (f.type === 'compute') {
    assert.equal(f.peers, f.shares.length); // Python's Compute.peers
    return `compute ${f.step}.${f.round} rank ${f.rank} of ${f.shares.join(',')}`;
  }
  if (f.type === 'close') return `${f.peer} close`;
  if (f.type === 'save') return `save ${f.step}`;
  if (f.type === 'step-applied') return `applied ${f.step}.${f.round}`;
  if (f.type === 'finished') return `finished ${f.reason}`;
  return f.type;
});
const sent = (effects, type) => plain(effects).filter((f) => f.type === 'send-message' && f.message.type === type);

/** Open a channel to `peer` and greet it (the hello both ways). */
async function greet(m, peer, now = 0) {
  const out = await m.handle(ev.channelOpened(now, peer));
  return [...out, ...(await m.handle(ev.messageReceived(now, peer, hello(peer))))];
}

/**
 * [first, end) blocks of chunk `k` of a roster with shares `s` (a list, or a peer count for
 * equal shares): blocks [floor(B c[k] / G), floor(B c[k+1] / G)) with cumulative shares c
 * (docs/PROTOCOL.md, "Gradient chunks and the exchange arithmetic"; written out here, not
 * allreduce.js's).
 */
function chunkBounds(m, k, s) {
  // Ownership weights (version 3): a share under half the largest owns nothing.
  const top = Math.max(...sharesOf(s));
  const shares = sharesOf(s).map((x) => (2 * x >= top ? x : 0));
  let below = 0;
  for (let j = 0; j < k; j++) below += shares[j];
  const g = shares.reduce((x, y) => x + y, 0);
  return [Math.floor((m.totalBlocks * below) / g), Math.floor((m.totalBlocks * (below + shares[k])) / g)];
}
/** The chunk `k` of a gradient of `fill`s of a roster with shares `s`, as a piece payload. */
function chunkOf(m, k, s, fill = 0) {
  const [first, end] = chunkBounds(m, k, s);
  return encodeChunk(new Float32Array((end - first) * BLOCK).fill(fill)).payload;
}
/** The chunk `k` of a zero gradient of a roster with shares `s`, as a piece payload. */
const zeroChunk = (m, k, s) => chunkOf(m, k, s, 0);
/** A compute-done's payloads: every chunk of a zero gradient, one per roster peer. */
const zeroPayloads = (m, s) => sharesOf(s).map((_, k) => zeroChunk(m, k, s));

/** Feed `peer`'s piece (a payload framed as the peer's shell would) to `m`; the effects. */
let transfer = 1;
async function feedPiece(m, peer, now, kind, step, round, chunk, payload) {
  const out = [];
  for (const f of await fragment(kind, payload, { transfer: transfer++, step, round, chunk })) {
    out.push(...(await m.handle(ev.frameReceived(now, peer, f))));
  }
  return out;
}

const HASH0 = TRACE.setup.replica.hash; // the state at step 0 of every peer built here
const ready = (peers = [], seqS = 0) => msg('ready', { step: 0, hash: HASH0, peers, seq_s: seqS });
/** A roster message; shares equal unless given (they must sum to the global batch, 12). */
const rosterMsg = (step, round, peers, shares = even(peers.length)) => msg('roster', { step, round, peers, shares });
const hashMsg = (step, round, digest, probe = REF, seqS = 0) =>
  msg('hash', { step, round, hash: digest, loss: 1.5, probe, backend: 'numpy', seq_s: seqS });

/**
 * The leader A with `others` greeted and ready: after the last ready it commits step 1 round 0
 * over [A, ...others] (min_peers counts them all), with equal shares unless `speeds` (peer ->
 * the seq_s its ready reports) says otherwise. Resolves to {m, out} (the last event's effects).
 */
async function leaderWith(others, fields = {}, cfg = {}, speeds = {}) {
  const m = machine(fields);
  await m.handle(ev.userLead(0, config(cfg), 1 + others.length));
  for (const p of others) await greet(m, p);
  let out = [];
  for (const p of others) out = await m.handle(ev.messageReceived(0, p, ready([], speeds[p] ?? 0)));
  return { m, out };
}

/**
 * Follower `id` of the leader A (others greeted too), sent the config and then the roster of step
 * 1 round 0 over `peers` (equal shares unless told). Resolves to {m, out} (the roster's effects).
 */
async function followerIn(id, peers, { greeted = peers, fields = {}, cfg = {}, shares = even(peers.length) } = {}) {
  const m = machine({ id, replica: new TraceReplica(), ...fields });
  for (const p of new Set([A, ...greeted])) if (p !== id) await greet(m, p);
  await m.handle(ev.messageReceived(0, A, text({ ...CONFIG_JSON, ...cfg })));
  const out = await m.handle(ev.messageReceived(0, A, rosterMsg(1, 0, peers, shares)));
  return { m, out };
}

/**
 * `m` computes its attempt (step, round) of a roster with shares `s` (or of `s` peers with equal
 * shares) with zeros, at `now`; unmeasured (seq_s 0) unless told.
 */
const computed = (m, now, step, round, s, seqS = 0) =>
  m.handle(ev.computeDone(now, step, round, 2.5, zeroPayloads(m, s), REF, seqS));

// --- handle(): one event at a time, each an event of events.js ------------------------------

// Pins lines 101-124: a second handle() while one is in flight is refused (busy), an event
// without a string type or a finite `now` is a TypeError, an unknown event type is thrown (not
// turned into a stop), and the machine takes the next event after each refusal.
test('mutant: handle takes one event at a time, each with a type and a finite now; an unknown type is thrown', async () => {
  const m = machine();
  const first = m.handle(ev.channelOpened(0, B));
  await assert.rejects(m.handle(ev.timer(0)), {
    name: 'Error',
    message: 'Machine.handle: an event is still being handled; await each handle() before feeding ' +
      'the next (events are processed in order, one at a time)',
  });
  assert.deepEqual(brief(await first), [`${B} hello`]);
  const shape = { name: 'TypeError', message: 'Machine.handle takes an event of events.js: a type and a finite `now`' };
  for (const bad of [null, undefined, { now: 1 }, { type: 7, now: 1 }, { type: 'timer', now: NaN },
    { type: 'timer', now: Infinity }, { type: 'timer' }]) {
    await assert.rejects(m.handle(bad), shape);
  }
  await assert.rejects(m.handle({ type: 'bogus', now: 1 }), { name: 'TypeError', message: 'unknown machine event bogus' });
  assert.equal(m.finished, false);
  assert.deepEqual(brief(await m.handle(ev.messageReceived(1, B, hello()))), []); // still working
  assert.equal(m.peers.state(B), 'greeted');
});

// Pins lines 278, 315, 457, 814 (the errors that are the shell's or the replica's bugs, not a
// peer's): text that is not a string, a frame that is not bytes, a lead without a model, a replica
// whose restore throws something else than ReplicaRefused: thrown, in the lobby, from a gone
// peer and while stopping; a finished machine ignores every event and has no deadline (lines
// 113, 139, 874, 910).
test('mutant: a shell or replica bug is thrown, never taken for a peer\'s fault; a finished machine ignores everything', async () => {
  const m = machine({ id: B });
  await greet(m, A);
  await assert.rejects(m.handle(ev.messageReceived(1, A, 42)), { name: 'TypeError', message: 'a control message is a string' });
  await assert.rejects(m.handle(ev.frameReceived(1, A, 'not bytes')), { name: 'TypeError', message: /must be bytes/ });
  assert.equal(m.peers.state(A), 'greeted'); // not rejected
  const { m: g } = await followerIn(B, [A, B, C]);
  await g.handle(ev.channelClosed(2, C));
  await assert.rejects(g.handle(ev.messageReceived(3, C, 42)), { name: 'TypeError', message: 'a control message is a string' });
  // a lead with a config the parser cannot read at all
  const l = machine();
  await assert.rejects(l.handle(ev.userLead(0, { ...config(), model: null }, 1)), TypeError);
  assert.equal(l.isLeader, false);
  // stopping: the leader's stop repeated to C, waiting for C's acknowledgement
  const { m: s } = await followerIn(B, [A, B, C]);
  await s.handle(ev.messageReceived(1, A, msg('stop', { reason: 'done', step: 0, message: 'm', hashes: {} })));
  assert.equal(s.finished, false);
  await assert.rejects(s.handle(ev.messageReceived(2, C, 42)), { name: 'TypeError', message: 'a control message is a string' });
  assert.deepEqual(types(await s.handle(ev.messageReceived(2, C, 'not json'))), []);
  assert.deepEqual(types(await s.handle(ev.timer(100))), ['finished']);
  assert.equal(s.nextDeadline(), null);
  assert.deepEqual(await s.handle(ev.messageReceived(101, C, 42)), []); // finished: nothing at all
  // a replica whose restore fails with a bug, not a refusal
  const broken = new TraceReplica();
  broken.restore = () => { throw new TypeError('replica bug'); };
  const f = machine({ id: D, replica: broken });
  await greet(f, A);
  await f.handle(ev.messageReceived(0, A, text({ ...CONFIG_JSON, resume_step: 2, resume_hash: HASH0 })));
  await assert.rejects(feedPiece(f, A, 1, FrameKind.CHECKPOINT, 2, 0, 0, new TraceReplica(2, HASH0).checkpoint()),
    { name: 'TypeError', message: 'replica bug' });
});

// Pins line 144: the next deadline is the sooner of a hello deadline and the attempt's repair
// time (a hello due at 20 s comes before a repair rescheduled to 23 s).
test('mutant: the next deadline is the soonest of a hello deadline, the repair time and the step deadline', async () => {
  const m = machine();
  await m.handle(ev.userLead(0, config(), 1));
  assert.equal(m.nextDeadline(), T.repair_after_s); // repair at 5, step deadline 30
  await m.handle(ev.channelOpened(0, C)); // hello due at 20
  assert.equal(m.nextDeadline(), T.repair_after_s);
  await m.handle(ev.timer(18)); // not computed yet: the repair time moves to 23
  assert.equal(m.nextDeadline(), T.hello_timeout_s);
  await m.handle(ev.messageReceived(19, C, hello()));
  assert.equal(m.nextDeadline(), 18 + T.repair_after_s);
});

// --- sameConfig -----------------------------------------------------------------------------

// Pins lines 42-46 (sameConfig): a second config from another peer that differs from the run's
// in any one field, of the run, the model or the optimizer (or, in version 2, the global batch),
// is refused; the same one is ignored.
test('mutant: a second config that differs in any one field is refused', async () => {
  const variants = {
    preset: { preset: 'tiny' }, steps: { steps: 4 }, data: { data: 'fineweb@' + 'a'.repeat(40) },
    tokenizer_sha256: { tokenizer_sha256: 'f'.repeat(64) }, resume_step: { resume_step: 3, resume_hash: HASH0 },
    resume_hash: { resume_step: 2, resume_hash: 'e'.repeat(64) }, model: { model: { ...CONFIG_JSON.model, width: 32 } },
    optim: { optim: { ...CONFIG_JSON.optim, lr: 0.001 } }, global_batch: { global_batch: GB + 1 },
  };
  for (const [field, change] of Object.entries(variants)) {
    const m = machine({ id: B, replica: new TraceReplica() });
    await greet(m, A);
    await greet(m, C);
    // (a resume_hash is only read when resume_step > 0)
    const base = field.startsWith('resume') ? { ...CONFIG_JSON, resume_step: 2, resume_hash: HASH0 } : CONFIG_JSON;
    await m.handle(ev.messageReceived(0, A, text(base)));
    assert.deepEqual(await m.handle(ev.messageReceived(1, C, text(base))), [], field);
    assert.deepEqual(brief(await m.handle(ev.messageReceived(1, C, text({ ...CONFIG_JSON, ...change })))),
      [`${C} error`, `${C} close`], field);
  }
});

// --- saves and stopping -------------------------------------------------------------------

// Pins lines 75, 894 (nothing is saved before the first save: savedStep starts at -1; a fork is
// never saved), 885 (the run's phase becomes stopped) and 38 (a leader-request stop is announced).
test('mutant: the first stop saves the last step; a fork saves nothing; a leader-request stop is announced', async () => {
  const solo = machine({ can_save: true });
  await solo.handle(ev.userLead(0, config({ steps: 1 }), 1));
  assert.deepEqual(brief(await computed(solo, 1, 1, 0, 1)), ['applied 1.0', 'save 1', 'finished done']);
  assert.equal(solo.phase.phase, 'stopped');
  // a fork (B's kernel probe differs) is not saved
  const { m } = await leaderWith([B], { can_save: true });
  const out = plain(await m.handle(ev.messageReceived(1, B, hashMsg(1, 0, HASH0, 'b'.repeat(64)))));
  assert.deepEqual(out.map((f) => f.type), ['send-message']);
  assert.equal(out[0].message.type, 'stop');
  assert.equal(out[0].message.reason, 'fork');
  assert.equal(m.phase.phase, 'stopped');
  // the leader's user-stop: a stop with reason leader-request goes to every greeted peer
  const l = machine();
  await l.handle(ev.userLead(0, config(), 1));
  await greet(l, B);
  await l.handle(ev.userStop(1, 'enough'));
  const stop = sent(await computed(l, 2, 1, 0, 1), 'stop');
  assert.deepEqual(stop.map((f) => [f.peer, f.message.reason, f.message.message]), [[B, 'leader-request', 'enough at step 1']]);
});

// Pins lines 252, 848, 853: only the leader asks every peer to save (a follower's user-save saves
// here only); a peer that cannot save never saves, even asked; save_every <= 0 saves nothing
// periodically.
test('mutant: user-save on a follower saves only here; a peer without can_save never saves; save_every <= 0 is off', async () => {
  const { m } = await followerIn(B, [A, B], { fields: { can_save: true } });
  assert.deepEqual(brief(await m.handle(ev.userSave(1))), ['save 0']);
  const { m: no } = await followerIn(B, [A, B], { fields: { save_every: 1 } });
  assert.deepEqual(brief(await no.handle(ev.messageReceived(1, A, msg('save', { step: 0 })))), []);
  assert.deepEqual(brief(await no.handle(ev.userSave(1))), []);
  const s = machine({ can_save: true, save_every: -1 });
  await s.handle(ev.userLead(0, config({ steps: 3 }), 1));
  assert.deepEqual(brief(await computed(s, 1, 1, 0, 1)), ['applied 1.0', 'compute 2.0 rank 0 of 12']);
  assert.deepEqual(brief(await computed(s, 2, 2, 0, 1)), ['applied 2.0', 'compute 3.0 rank 0 of 12']);
});

// --- refusals and versions ------------------------------------------------------------------

// Pins lines 279, 337, 417: a message that does not parse is refused (the peer closed, the run
// goes on), a version mismatch in the lobby (parsed or said in an `error`) ends this peer's wait
// for a run, and in a run it only closes that peer's channel.
test('mutant: bad JSON is refused; a version-mismatch error ends the lobby, and in a run only closes that peer', async () => {
  const m = machine({ id: B });
  await greet(m, C);
  assert.deepEqual(plain(await m.handle(ev.messageReceived(1, C, 'not json'))), [
    { type: 'send-message', peer: C, message: { type: 'error', code: 'bad-json', message: 'control message is not valid JSON', hint: 'send one JSON object' } },
    { type: 'close', peer: C }]);
  assert.equal(m.finished, false);
  const lobby = machine({ id: B });
  await greet(lobby, C);
  const vm = text({ type: 'error', code: 'version-mismatch', message: 'speaks 1', hint: 'upgrade' });
  const out = plain(await lobby.handle(ev.messageReceived(1, C, vm)));
  assert.deepEqual(out.map((f) => [f.type, f.reason, f.code, f.message]),
    [['finished', 'error', 'version-mismatch', `speaks 1 (peer ${C}); upgrade`]]);
  const { m: run } = await followerIn(B, [A, B], { greeted: [A, C] });
  assert.deepEqual(brief(await run.handle(ev.messageReceived(1, C, vm))), [`${C} close`]);
  assert.equal(run.finished, false);
  assert.equal(run.peers.isGone(C), true);
});

// Pins line 332: a `leave` marks its sender gone at once (its pieces are asked for now, and the
// step is re-committed without it at the repair time, not the step deadline).
test('mutant: a leave marks the peer gone: repair now, re-commit without it soon', async () => {
  const { m } = await leaderWith([B, C]);
  assert.equal(m.nextDeadline(), T.repair_after_s);
  await computed(m, 1, 1, 0, 3); // and every piece of C's is in: only B's are missing
  await feedPiece(m, C, 1, FrameKind.CONTRIBUTION, 1, 0, 0, zeroChunk(m, 0, 3));
  await feedPiece(m, C, 1, FrameKind.REDUCED, 1, 0, 2, zeroChunk(m, 2, 3));
  assert.deepEqual(brief(await m.handle(ev.messageReceived(3, B, text({ type: 'leave', reason: 'bye' })))), []);
  assert.equal(m.peers.isGone(B), true);
  assert.equal(m.nextDeadline(), 3);
  await m.handle(ev.timer(3));
  assert.equal(m.nextDeadline(), 3 + T.repair_after_s);
  const out = plain(await m.handle(ev.timer(3 + T.repair_after_s)));
  const r = out.find((f) => f.type === 'send-message' && f.message.type === 'roster');
  assert.deepEqual([r.peer, r.message.round, r.message.peers, r.message.shares], [C, 1, [A, C], [6, 6]]);
});

// --- the leader's decisions: re-commit and boundary -----------------------------------------

// Pins lines 377-381, 623: the peers other peers report missing (every report kept, per attempt)
// are dropped with the gone ones and the leader's own missing ones when the step is re-committed.
test('mutant: a re-commit drops the peers reported missing by any peer, and the leader\'s own missing ones', async () => {
  const { m } = await leaderWith([B, C, D]);
  await computed(m, 1, 1, 0, 4);
  for (const p of [B, C, D]) await feedPiece(m, p, 1, FrameKind.CONTRIBUTION, 1, 0, 0, zeroChunk(m, 0, 4));
  await feedPiece(m, C, 1, FrameKind.REDUCED, 1, 0, 2, zeroChunk(m, 2, 4));
  await feedPiece(m, D, 1, FrameKind.REDUCED, 1, 0, 3, zeroChunk(m, 3, 4)); // only B's chunk 1 missing here
  await m.handle(ev.messageReceived(2, B, msg('missing', { step: 1, round: 0, peers: [C] })));
  await m.handle(ev.messageReceived(2, C, msg('missing', { step: 1, round: 0, peers: [D] })));
  await m.handle(ev.messageReceived(2, D, msg('missing', { step: 1, round: 9, peers: [C] }))); // another attempt
  const out = plain(await m.handle(ev.timer(T.step_timeout_s)));
  assert.deepEqual(out.filter((f) => f.type === 'compute'), [{ type: 'compute', step: 1, round: 1, rank: 0, shares: [GB], peers: 1 }]);
  assert.deepEqual(sent(out, 'roster').map((f) => [f.peer, f.message.peers, f.message.shares]),
    [[B, [A], [GB]], [C, [A], [GB]], [D, [A], [GB]]]);
});

// Pins the boundary's wait: once the leader applied the last step, it waits for every live roster
// peer's hash of it until exactly the step deadline, then ends the run (a non-last step waits
// for the hashes one step late: traces leader-hash-one-step-late, leader-drops-laggard).
test('mutant: at exactly the step deadline the leader ends a run with the hashes it has', async () => {
  const { m } = await leaderWith([B, C], {}, { steps: 1 });
  await computed(m, 1, 1, 0, 3);
  for (const p of [B, C]) await feedPiece(m, p, 1, FrameKind.CONTRIBUTION, 1, 0, 0, zeroChunk(m, 0, 3));
  await feedPiece(m, B, 1, FrameKind.REDUCED, 1, 0, 1, zeroChunk(m, 1, 3));
  const applied = plain(await feedPiece(m, C, 1, FrameKind.REDUCED, 1, 0, 2, zeroChunk(m, 2, 3)));
  const digest = applied.find((f) => f.type === 'step-applied').hash;
  assert.deepEqual(brief(await m.handle(ev.messageReceived(2, B, hashMsg(1, 0, digest)))), []);
  assert.equal(m.nextDeadline(), T.step_timeout_s);
  assert.deepEqual(brief(await m.handle(ev.timer(T.step_timeout_s - 0.5))), []);
  const out = plain(await m.handle(ev.timer(T.step_timeout_s)));
  assert.deepEqual(sent(out, 'stop').map((f) => [f.peer, f.message.reason, f.message.step]),
    [[B, 'done', 1], [C, 'done', 1]]);
});

// Pins lines 827-838: the leader serves the peers that asked for the state in id order, and only
// those still greeted; they join the next roster.
test('mutant: at a boundary the leader sends the state to the greeted peers that asked, in id order', async () => {
  const m = machine();
  await m.handle(ev.userLead(0, config(), 1));
  const E = 'EEEEEEEEEEEE';
  for (const p of [D, C, E]) await greet(m, p);
  for (const p of [D, C, E]) await m.handle(ev.messageReceived(1, p, msg('sync-request')));
  await m.handle(ev.channelClosed(1, E));
  const out = brief(await computed(m, 2, 1, 0, 1));
  assert.deepEqual(out.filter((f) => f.includes('payload')), [`${C} payload 3 1.0.0`, `${D} payload 3 1.0.0`]);
  assert.deepEqual(sent(await m.handle(ev.timer(2)), 'roster'), []);
  assert.deepEqual([[...m.roster.peers], [...m.roster.shares]], [[A, C, D], [4, 4, 4]]);
});

// Pins lines 383-386: a repair request is answered with the piece asked for; one that cannot be
// served is not answered.
test('mutant: a repair is answered with the contribution asked for, and an unknown one not at all', async () => {
  const { m } = await leaderWith([B, C]);
  await computed(m, 1, 1, 0, 3);
  const out = plain(await m.handle(ev.messageReceived(2, B, msg('repair', { step: 1, round: 0, piece: 'contribution', chunk: 1 }))));
  assert.deepEqual(out.map((f) => [f.type, f.peer, f.kind, f.step, f.round, f.chunk, f.bytes]),
    [['send-payload', B, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(m, 1, 3).length]]);
  assert.deepEqual(await m.handle(ev.messageReceived(2, B, msg('repair', { step: 9, round: 0, piece: 'contribution', chunk: 1 }))), []);
  // version 2: B and C reported 1 and 2 s a sequence (A unmeasured: their mean weight), so the
  // roster's shares are 4,5,3 and chunk 1 is 5 of the 11 blocks (4 with equal shares): the
  // repair serves exactly the bytes sent for it
  const { m: w, out: committed } = await leaderWith([B, C], {}, {}, { [B]: 1.0, [C]: 2.0 });
  assert.deepEqual(brief(committed).filter((f) => f.startsWith('compute')), ['compute 1.0 rank 0 of 4,5,3']);
  assert.deepEqual(chunkBounds(w, 1, [4, 5, 3]), [3, 8]);
  await computed(w, 1, 1, 0, [4, 5, 3]);
  const again = plain(await w.handle(ev.messageReceived(2, B, msg('repair', { step: 1, round: 0, piece: 'contribution', chunk: 1 }))));
  assert.deepEqual(again.map((f) => [f.type, f.peer, f.kind, f.step, f.round, f.chunk, f.bytes]),
    [['send-payload', B, FrameKind.CONTRIBUTION, 1, 0, 1, 5 * (BLOCK + 1)]]);
});

// --- state sync -------------------------------------------------------------------------------

/** Follower D in the lobby, greeted with A, B and C, sent a resumed run's config (no state). */
async function resuming() {
  const m = machine({ id: D, replica: new TraceReplica() });
  for (const p of [A, B, C]) await greet(m, p);
  const out = await m.handle(ev.messageReceived(0, A, text({ ...CONFIG_JSON, resume_step: 2, resume_hash: HASH0 })));
  return { m, out };
}

/** The frames of a checkpoint `blob` from the leader, with one byte of the body flipped if `damage`. */
async function checkpointFrames(blob, damage = false) {
  const frames = await fragment(FrameKind.CHECKPOINT, blob, { transfer: transfer++, step: 2 });
  if (damage) frames[0][HEADER_BYTES] ^= 0xff;
  return frames;
}
async function feedFrames(m, peer, now, frames) {
  const out = [];
  for (const f of frames) out.push(...(await m.handle(ev.frameReceived(now, peer, f))));
  return out;
}

// Pins lines 493-499, 800: a resumed run's config makes the follower ask the leader for the state
// at once (no roster yet); a peer without state never computes, even in a roster naming it.
test('mutant: a resumed run\'s config asks the leader for the state; without it a peer never computes', async () => {
  const { m, out } = await resuming();
  assert.deepEqual(plain(out), [{ type: 'send-message', peer: A, message: { type: 'sync-request', run: RUN } }]);
  assert.deepEqual(brief(await m.handle(ev.messageReceived(1, A, rosterMsg(1, 0, [A, D])))), []);
  assert.equal(m.nextDeadline(), null);
});

// Pins lines 426-432 and 809-838: a syncing follower takes a checkpoint up to 12 bytes a
// parameter plus 1 MiB, from its leader only; a damaged one is asked for again; one the replica
// refuses ends the run naming why; a checkpoint nobody asked for is refused.
test('mutant: a checkpoint is taken only while syncing, only from the leader, up to 12 bytes a parameter + 1 MiB', async () => {
  const { m } = await resuming();
  const good = new TraceReplica(2, HASH0).checkpoint();
  assert.deepEqual(await feedFrames(m, C, 1, await checkpointFrames(good)), []); // not the leader: ignored
  assert.equal(m.hasState, false);
  assert.deepEqual(brief(await feedFrames(m, A, 1, await checkpointFrames(good, true))), [`${A} sync-request`]);
  let n = 0;
  for (const s of paramShapes(modelConfig(CONFIG_JSON.model)).values()) n += s.reduce((x, d) => x * d, 1);
  const limit = 12 * n + 1024 * 1024;
  // the largest checkpoint a syncing peer takes: the trace replica refuses it, and the run ends
  const big = new Uint8Array(limit);
  big.set(good);
  const out = plain(await feedFrames(m, A, 2, await checkpointFrames(big)));
  assert.deepEqual(out.map((f) => [f.type, f.reason, f.message]), [['finished', 'error',
    `the leader's checkpoint was refused: checkpoint from ${A}: not a trace checkpoint (${limit} bytes)`]]);
  // one byte more is refused as a frame
  const { m: m2 } = await resuming();
  const frames = await checkpointFrames(new Uint8Array(limit + 1));
  // (refusing the leader before the first roster then ends the run)
  assert.deepEqual(plain(await m2.handle(ev.frameReceived(2, A, frames[0]))).map((f) => [f.type, f.message?.code, f.message?.message ?? f.message]), [
    ['send-message', 'bad-frame', `checkpoint payload of ${limit + 1} bytes exceeds the limit of ${limit}`],
    ['finished', undefined, 'the leader left before the first step; start the run again']]);
  // synced: the next checkpoint is not expected
  const { m: m3 } = await resuming();
  await feedFrames(m3, A, 2, await checkpointFrames(good));
  assert.equal(m3.hasState, true);
  assert.equal(m3.replica.step, 2);
  assert.deepEqual(plain(await feedFrames(m3, A, 3, await checkpointFrames(good))).map((f) => [f.type, f.message?.code, f.message?.message]).slice(0, 1), [
    ['send-message', 'bad-frame', 'checkpoint frames are not expected now']]);
});

// Pins lines 796-807 and 581-582: a follower left out of a roster it could have computed asks
// for the state, but only once every peer of that roster is greeted (the checkpoint and the
// pieces of the next step come over those channels).
test('mutant: a follower left out of a roster asks for the state once every roster peer is greeted', async () => {
  const { m, out } = await followerIn(C, [A, B], { greeted: [A] });
  assert.deepEqual(brief(out), []);
  const greeted = brief(await greet(m, B));
  assert.deepEqual(greeted, [`${B} hello`, `${A} sync-request`]);
});

// Pins lines 585-586: a roster for a step this peer already applied is ignored; a later round of
// that step (the leader abandoned the one applied here) makes it ask for the state.
test('mutant: a roster of a step applied here is ignored; a later round of it asks for the state', async () => {
  const { m } = await followerIn(B, [A, B]);
  await computed(m, 1, 1, 0, 2);
  await feedPiece(m, A, 1, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(m, 1, 2));
  const applied = brief(await feedPiece(m, A, 1, FrameKind.REDUCED, 1, 0, 0, zeroChunk(m, 0, 2)));
  assert.ok(applied.includes('applied 1.0'));
  assert.deepEqual(brief(await m.handle(ev.messageReceived(2, A, rosterMsg(1, 0, [A, B])))), []);
  assert.deepEqual(brief(await m.handle(ev.messageReceived(2, A, rosterMsg(1, 1, [A, B])))), [`${A} sync-request`]);
});

// --- peers gone and failover ------------------------------------------------------------------

// Pins line 533: a peer gone twice is gone once (a second close of a follower's channel is no
// leader departure); 550-554: when every peer of the last roster left, the run ends with an error.
test('mutant: a second close is nothing; when every peer of the last roster left the run ends', async () => {
  const m = machine({ id: B });
  await greet(m, A);
  await greet(m, C);
  await m.handle(ev.messageReceived(0, A, text({ ...CONFIG_JSON })));
  assert.deepEqual(await m.handle(ev.channelClosed(1, C)), []);
  assert.deepEqual(await m.handle(ev.channelClosed(1, C)), []);
  assert.equal(m.finished, false);
  const { m: d } = await followerIn(D, [A, B, C]);
  for (const p of [B, C]) assert.deepEqual(types(await d.handle(ev.peerLeft(2, p))), []);
  const out = plain(await d.handle(ev.peerLeft(3, A)));
  assert.deepEqual(out.map((f) => [f.type, f.reason, f.message]), [['finished', 'error', 'every peer of the last roster left']]);
});

/** Follower B of [A, B, C] with every piece in: applied step 1. Resolves to {m, digest}. */
async function appliedFollower(fields = {}, cfg = {}) {
  const { m } = await followerIn(B, [A, B, C], { fields, cfg });
  await computed(m, 1, 1, 0, 3);
  for (const p of [A, C]) await feedPiece(m, p, 1, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(m, 1, 3));
  await feedPiece(m, A, 1, FrameKind.REDUCED, 1, 0, 0, zeroChunk(m, 0, 3));
  const out = plain(await feedPiece(m, C, 1, FrameKind.REDUCED, 1, 0, 2, zeroChunk(m, 2, 3)));
  return { m, digest: out.find((f) => f.type === 'step-applied').hash };
}

// Pins lines 240 and 555-558: a follower's user-stop is ignored, also once it leads; a successor
// that applied the last step waits for its hashes only repair_after_s more, then ends the run.
test('mutant: a successor that applied waits repair_after_s for the hashes, then goes on; a follower\'s stop request is not kept', async () => {
  const { m } = await appliedFollower({}, { steps: 1 });
  assert.deepEqual(await m.handle(ev.userStop(1, 'not mine')), []);
  assert.equal(m.nextDeadline(), null);
  await m.handle(ev.peerLeft(10, A));
  assert.equal(m.isLeader, true);
  assert.equal(m.nextDeadline(), 10 + T.repair_after_s);
  assert.deepEqual(brief(await m.handle(ev.timer(14))), []);
  const out = plain(await m.handle(ev.timer(15)));
  assert.deepEqual(sent(out, 'stop').map((f) => [f.peer, f.message.reason, f.message.step]), [[A, 'done', 1], [C, 'done', 1]]);
});

// The pipelined boundary at a successor: C was in roster 1 with the state of step 0, so the
// successor that applied step 1 commits step 2 with C at once, without C's hash of step 1.
test('mutant: a successor that applied a step that is not the last commits the next at once', async () => {
  const { m } = await appliedFollower();
  const out = plain(await m.handle(ev.peerLeft(10, A)));
  assert.equal(m.isLeader, true);
  assert.deepEqual(sent(out, 'roster').map((f) => [f.peer, f.message.step, f.message.peers, f.message.shares]), [[C, 2, [B, C], even(2)]]);
  assert.equal(m.finished, false);
});

// Pins lines 560-565: a follower waiting for the state asks the successor when the leader goes;
// with no roster held from it, nothing else happens.
test('mutant: a syncing follower asks the successor for the state when the leader goes', async () => {
  const { m } = await resuming();
  await m.handle(ev.messageReceived(1, A, rosterMsg(1, 0, [A, B, C])));
  const out = brief(await m.handle(ev.peerLeft(2, A)));
  assert.deepEqual(out, [`${B} sync-request`]);
  assert.equal(m.leader, B);
  assert.deepEqual([m.roster.step, ...m.roster.peers, ...m.roster.shares], [1, A, B, C, 4, 4, 4]); // no held roster: the last one stays
});

// Pins lines 145, 557, 585-590, 614-624, 799: a roster for a step this peer is far behind of
// (it asks for the state, computes nothing) and then its leader goes, so that it leads a roster it
// has no attempt of: it re-commits without crashing and never asks itself for the state.
test('mutant: a peer behind its roster computes nothing; leading it after a failover, it re-commits', async () => {
  const { m, out } = await followerIn(B, [A, B, C], { greeted: [A] }); // C not greeted yet
  assert.deepEqual(brief(out), ['compute 1.0 rank 1 of 4,4,4']);
  assert.deepEqual(brief(await m.handle(ev.messageReceived(1, A, rosterMsg(5, 0, [A, B, C])))), []);
  assert.equal(m.nextDeadline(), null);
  const gone = brief(await m.handle(ev.peerLeft(2, A)));
  assert.equal(m.isLeader, true);
  assert.deepEqual(gone, []);
  assert.deepEqual([m.roster.step, m.roster.round, [...m.roster.peers], [...m.roster.shares]], [5, 1, [B, C], [6, 6]]);
  assert.equal(m.nextDeadline(), null);
  assert.deepEqual(brief(await m.handle(ev.timer(3))), []);
  // C comes: as the leader, B sends it the run; it never asks itself for the state
  const greeted = brief(await greet(m, C, 4));
  assert.deepEqual(greeted.slice(0, 3), [`${C} hello`, `${C} config`, `${C} roster`]);
  assert.ok(!greeted.includes(`${B} sync-request`), greeted.join('; '));
});

// --- the exchange -----------------------------------------------------------------------------

const ones = (m, k, s) => chunkOf(m, k, s, 1);
const refusalOf = (effects) => plain(effects).filter((f) => f.type === 'send-message' && f.message.type === 'error')
  .map((f) => [f.peer, f.message.code, f.message.message]);

// Pins lines 596, 687-689: a piece that arrives before its roster is held, and used once the
// roster and our own gradient are in (B reduces its chunk at once).
test('mutant: a piece that arrives before its roster is used once the roster comes', async () => {
  const m = machine({ id: B, replica: new TraceReplica() });
  await greet(m, A);
  await m.handle(ev.messageReceived(0, A, text({ ...CONFIG_JSON })));
  assert.deepEqual(await feedPiece(m, A, 0, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(m, 1, 2)), []);
  assert.deepEqual(brief(await m.handle(ev.messageReceived(0, A, rosterMsg(1, 0, [A, B])))), ['compute 1.0 rank 1 of 6,6']);
  assert.deepEqual(brief(await computed(m, 1, 1, 0, 2)), [`${A} payload 1 1.0.0`, `${A} payload 2 1.0.1`]);
});

// Pins lines 692-711: a piece from a peer outside the roster, for a chunk outside it, that does
// not decode, or a contribution for another peer's chunk is refused naming why; a late piece of
// an applied attempt is ignored.
test('mutant: pieces from outside the roster, of no chunk, that do not decode, or for another chunk are refused', async () => {
  const fresh = async () => {
    const { m } = await followerIn(B, [A, B, C], { greeted: [A, C, D] });
    await computed(m, 1, 1, 0, 3);
    return m;
  };
  let m = await fresh();
  assert.deepEqual(refusalOf(await feedPiece(m, D, 1, FrameKind.REDUCED, 1, 0, 0, zeroChunk(m, 0, 3))),
    [[D, 'bad-frame', 'piece of step 1 from a non-roster peer']]);
  m = await fresh();
  assert.deepEqual(refusalOf(await feedPiece(m, C, 1, FrameKind.REDUCED, 1, 0, 3, zeroChunk(m, 2, 3))),
    [[C, 'bad-frame', 'piece of step 1 from a non-roster peer']]);
  m = await fresh();
  const whole = zeroChunk(m, 2, 3);
  const short = whole.subarray(1);
  assert.deepEqual(refusalOf(await feedPiece(m, C, 1, FrameKind.REDUCED, 1, 0, 2, short)),
    [[C, 'bad-frame', `chunk of ${whole.length / (BLOCK + 1)} blocks must be ${whole.length} bytes, got ${short.length}`]]);
  // version 2: the size a chunk must have follows the roster's shares (4,3,5: chunk 2 is blocks
  // [6, 11), not the [7, 11) of equal shares; every share is at least half the largest, so
  // every peer owns a chunk)
  const { m: u, out: uneven } = await followerIn(B, [A, B, C], { greeted: [A, C, D], shares: [4, 3, 5] });
  assert.deepEqual(brief(uneven), ['compute 1.0 rank 1 of 4,3,5']);
  await computed(u, 1, 1, 0, [4, 3, 5]);
  assert.deepEqual(chunkBounds(u, 2, [4, 3, 5]), [6, 11]);
  const equalSized = zeroChunk(u, 2, 3); // 4 blocks
  assert.deepEqual(refusalOf(await feedPiece(u, C, 1, FrameKind.REDUCED, 1, 0, 2, equalSized)),
    [[C, 'bad-frame', `chunk of 5 blocks must be ${5 * (BLOCK + 1)} bytes, got ${4 * (BLOCK + 1)}`]]);
  m = await fresh();
  assert.deepEqual(refusalOf(await feedPiece(m, C, 1, FrameKind.CONTRIBUTION, 1, 0, 0, zeroChunk(m, 0, 3))),
    [[C, 'bad-frame', 'contribution for chunk 0 sent to me']]);
  assert.equal(m.peers.isGone(C), true);
  // applied: a late contribution, even for another chunk, is not held against its sender
  const { m: done } = await appliedFollower();
  assert.deepEqual(await feedPiece(done, C, 2, FrameKind.CONTRIBUTION, 1, 0, 0, zeroChunk(done, 0, 3)), []);
  assert.equal(done.peers.isGone(C), false);
});

// Pins lines 711 and 714: the first copy of a piece counts; a second, different copy (a repair
// that crossed the original) changes neither the reduced chunk nor the step's hash.
test('mutant: the first copy of a contribution or a reduced chunk counts, not a later one', async () => {
  const { m: ref, digest } = await appliedFollower();
  const { m } = await followerIn(B, [A, B, C]);
  await feedPiece(m, C, 0, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(m, 1, 3));
  await feedPiece(m, C, 0, FrameKind.CONTRIBUTION, 1, 0, 1, ones(m, 1, 3));
  await feedPiece(m, A, 0, FrameKind.REDUCED, 1, 0, 0, zeroChunk(m, 0, 3));
  await feedPiece(m, A, 0, FrameKind.REDUCED, 1, 0, 0, ones(m, 0, 3));
  await computed(m, 1, 1, 0, 3);
  const reduced = (await feedPiece(m, A, 1, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(m, 1, 3)))
    .filter((f) => f.type === 'send-payload' && f.kind === FrameKind.REDUCED);
  assert.equal(reduced.length, 2);
  assert.deepEqual([...reduced[0].payload], [...zeroChunk(m, 1, 3)]);
  const out = plain(await feedPiece(m, C, 1, FrameKind.REDUCED, 1, 0, 2, zeroChunk(m, 2, 3)));
  assert.equal(out.find((f) => f.type === 'step-applied').hash, digest);
  assert.equal(ref.replica.hash, digest);
});

// Pins line 671: a compute-done for an attempt that is not computing (unknown, or done twice) is
// ignored.
test('mutant: a compute-done for an unknown attempt or a second one is ignored', async () => {
  const { m } = await followerIn(B, [A, B]);
  assert.deepEqual(await computed(m, 1, 9, 0, 2), []);
  assert.deepEqual(brief(await computed(m, 1, 1, 0, 2)), [`${A} payload 1 1.0.0`]);
  assert.deepEqual(await computed(m, 1, 1, 0, 2), []);
});

// Pins lines 754-761: a damaged reduced chunk is asked for again as `reduced`.
test('mutant: a damaged reduced chunk is asked for again by its piece name', async () => {
  const { m } = await followerIn(B, [A, B, C]);
  await computed(m, 1, 1, 0, 3);
  const frames = await fragment(FrameKind.REDUCED, zeroChunk(m, 0, 3), { transfer: transfer++, step: 1, round: 0, chunk: 0 });
  frames[0][HEADER_BYTES] ^= 0x01;
  assert.deepEqual(sent(await feedFrames(m, A, 1, frames), 'repair').map((f) => f.message),
    [{ type: 'repair', run: RUN, step: 1, round: 0, piece: 'reduced', chunk: 0 }]);
});

// --- timers -----------------------------------------------------------------------------------

// Pins lines 765-784: a timer with no attempt, or before the repair time, does nothing; at the
// repair time a follower asks for what is missing and tells the leader whose pieces never came
// (sorted).
test('mutant: at the repair time a follower asks for the missing pieces and tells the leader who is missing, sorted', async () => {
  const lobby = machine({ id: B });
  await greet(lobby, A);
  await lobby.handle(ev.messageReceived(0, A, text({ ...CONFIG_JSON })));
  assert.deepEqual(await lobby.handle(ev.timer(100)), []);
  const { m } = await followerIn(B, [A, B, C]);
  await computed(m, 0, 1, 0, 3);
  await feedPiece(m, A, 0, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(m, 1, 3));
  assert.deepEqual(await m.handle(ev.timer(T.repair_after_s - 1)), []);
  const out = plain(await m.handle(ev.timer(T.repair_after_s)));
  assert.deepEqual(sent(out, 'missing').map((f) => [f.peer, f.message.peers, f.message.step, f.message.round]), [[A, [A, C], 1, 0]]);
});

// --- messages from a gone peer ---------------------------------------------------------------

// Pins lines 868-880: from a peer already dropped only a stop of this run is heard, and only if
// that peer once said hello and this peer is in a run.
test('mutant: from a gone peer only a stop of this run is heard, and only from one that said hello', async () => {
  const stop = (run = RUN) => text({ type: 'stop', run, reason: 'done', step: 0, message: 'over', hashes: {} });
  const lobby = machine({ id: B });
  await greet(lobby, C);
  await lobby.handle(ev.channelClosed(1, C));
  assert.deepEqual(await lobby.handle(ev.messageReceived(2, C, stop())), []); // no run yet
  const { m } = await followerIn(B, [A, B, C]);
  await m.handle(ev.channelOpened(0, D)); // never says hello
  await m.handle(ev.channelClosed(1, D));
  await m.handle(ev.channelClosed(1, C));
  assert.deepEqual(await m.handle(ev.messageReceived(2, D, stop())), []);
  assert.deepEqual(await m.handle(ev.messageReceived(2, C, 'not json')), []);
  assert.deepEqual(await m.handle(ev.messageReceived(2, C, hashMsg(1, 0, HASH0))), []);
  assert.deepEqual(await m.handle(ev.messageReceived(2, C, stop('fedcba9876543210'))), []);
  assert.equal(m.finished, false);
  assert.deepEqual(brief(await m.handle(ev.messageReceived(3, C, stop()))), [`${A} stop`]); // repeated to A
  assert.equal(m.phase.phase, 'stopped');
});

// Pins lines 733 and 586: an attempt of a step this peer's state has left behind (a checkpoint
// came meanwhile) is never applied; a peer whose state went back behind a roster it holds the
// attempt of asks for the state again.
test('mutant: a stale attempt is never applied on a newer state; a state behind a roster asks again', async () => {
  const { m } = await followerIn(B, [A, B]);
  await computed(m, 1, 1, 0, 2);
  assert.deepEqual(brief(await m.handle(ev.messageReceived(1, A, rosterMsg(3, 0, [A, B])))), [`${A} sync-request`]);
  await feedFrames(m, A, 2, await fragment(FrameKind.CHECKPOINT, new TraceReplica(2, HASH0).checkpoint(), { transfer: transfer++, step: 2 }));
  assert.equal(m.replica.step, 2);
  await feedPiece(m, A, 3, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(m, 1, 2));
  const late = brief(await feedPiece(m, A, 3, FrameKind.REDUCED, 1, 0, 0, zeroChunk(m, 0, 2)));
  assert.deepEqual(late, []);
  assert.equal(m.replica.step, 2);
  // back behind: a leader's checkpoint of step 0 after this peer applied step 1 and computes step 2
  const { m: b } = await followerIn(B, [A, B]);
  await computed(b, 1, 1, 0, 2);
  await feedPiece(b, A, 1, FrameKind.CONTRIBUTION, 1, 0, 1, zeroChunk(b, 1, 2));
  await feedPiece(b, A, 1, FrameKind.REDUCED, 1, 0, 0, zeroChunk(b, 0, 2));
  assert.deepEqual(brief(await b.handle(ev.messageReceived(2, A, rosterMsg(2, 0, [A, B])))), ['compute 2.0 rank 1 of 6,6']);
  assert.deepEqual(brief(await b.handle(ev.messageReceived(2, A, rosterMsg(5, 0, [A, B])))), [`${A} sync-request`]);
  await feedFrames(b, A, 3, await fragment(FrameKind.CHECKPOINT, new TraceReplica(0, HASH0).checkpoint(), { transfer: transfer++, step: 0 }));
  assert.equal(b.replica.step, 0);
  assert.deepEqual(brief(await b.handle(ev.messageReceived(4, A, rosterMsg(2, 0, [A, B])))), [`${A} sync-request`]);
});

// Pins line 689: a peer without state (waiting for a checkpoint) holds no early piece: after the
// checkpoint, a piece that came before it is asked for again, not used.
test('mutant: a peer without state holds no piece for later', async () => {
  const m = machine({ id: D, replica: new TraceReplica() });
  for (const p of [A, C]) await greet(m, p);
  await m.handle(ev.messageReceived(0, A, text({ ...CONFIG_JSON, resume_step: 1, resume_hash: HASH0 })));
  assert.deepEqual(await feedPiece(m, C, 0, FrameKind.CONTRIBUTION, 2, 0, 2, zeroChunk(m, 2, 3)), []);
  await feedFrames(m, A, 1, await fragment(FrameKind.CHECKPOINT, new TraceReplica(1, HASH0).checkpoint(), { transfer: transfer++, step: 1 }));
  assert.deepEqual(brief(await m.handle(ev.messageReceived(1, A, rosterMsg(2, 0, [A, C, D])))), ['compute 2.0 rank 2 of 4,4,4']);
  await computed(m, 2, 2, 0, 3);
  // A's contribution is in, C's (sent before the checkpoint) is not: no reduced chunk yet
  assert.deepEqual(brief(await feedPiece(m, A, 2, FrameKind.CONTRIBUTION, 2, 0, 2, zeroChunk(m, 2, 3))), []);
});
