// The JS protocol machine with uneven shares (data-channel protocol v2), beyond the stored
// traces (whose rosters all have equal shares): a follower with a share of 0 applies the step
// whether the reduced chunks arrive before or after its probe-only compute; a roster whose shares
// do not sum to the run's global batch is refused; a contribution from a share of 0 and a piece
// for an empty chunk are refused; the leader shares the next step by the speeds it heard (its
// own from compute-done, a follower's from ready and hash).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Machine } from '../../static/js/p2p/machine/machine.js';
import { settings as machineSettings } from '../../static/js/p2p/machine/settings.js';
import { TraceReplica } from './traces/trace_replica.js';
import * as ev from '../../static/js/p2p/machine/events.js';
import { BLOCK, encode as encodeChunk } from '../../static/js/p2p/codec.js';
import { FrameKind, fragment } from '../../static/js/p2p/frames.js';
import { chunkBlocks } from '../../static/js/p2p/allreduce.js';
import { DATA_PROTOCOL_VERSION, encode as encodeMessage, parse as parseMessage } from '../../static/js/p2p/messages.js';
import { loadTraces } from './protocol_helpers.mjs';

const TRACE = loadTraces().find((t) => t.trace.name === 'leader-3-peers').trace;
const CONFIG_JSON = TRACE.steps[0].event.config;
const G = CONFIG_JSON.global_batch;
const ME = TRACE.setup.id;
const REF = TRACE.setup.reference_probe;
const B = 'BBBBBBBBBBBB';
const C = 'CCCCCCCCCCCC';
const RUN = CONFIG_JSON.run;

function machine(id, replica = new TraceReplica()) {
  const st = TRACE.setup;
  return new Machine(machineSettings({
    id, name: st.name, tokenizer_sha256: st.tokenizer_sha256, vocab_size: st.vocab_size,
    backend: st.backend, reference_probe: REF, timers: st.timers, limits: st.limits,
  }), replica);
}

const text = (m) => encodeMessage(parseMessage(JSON.stringify(m)));
const hello = (name) => text({ type: 'hello', version: DATA_PROTOCOL_VERSION, name, contract: 2 });
const plain = (effects) => effects.map((f) => (f.type === 'send-message'
  ? { type: f.type, peer: f.peer, message: JSON.parse(encodeMessage(f.message)) }
  : f.type === 'send-payload' ? { type: f.type, peer: f.peer, kind: f.kind, chunk: f.chunk } : { ...f }));
const types = (effects) => effects.map((f) => (f.type === 'send-message' ? `${f.type}:${f.message.type}` : f.type));

async function greet(m, peer) {
  await m.handle(ev.channelOpened(0, peer));
  return m.handle(ev.messageReceived(0, peer, hello(peer)));
}

/** Zero values of chunk k of a roster with `shares` (empty bytes for an empty chunk). */
function zeros(m, shares, k) {
  const [first, end] = chunkBlocks(m.totalBlocks, shares, k);
  return end === first ? new Uint8Array(0) : encodeChunk(new Float32Array((end - first) * BLOCK)).payload;
}

let transfer = 1;
async function piece(m, peer, kind, step, chunk, payload, now = 1) {
  let out = [];
  for (const f of await fragment(kind, payload, { transfer: transfer++, step, round: 0, chunk })) {
    out = [...out, ...(await m.handle(ev.frameReceived(now, peer, f)))];
  }
  return out;
}

/** B following ME (and greeting `others`), sent the config and roster {peers, shares}. */
async function follower(peers, shares, others = []) {
  const m = machine(B);
  await greet(m, ME);
  for (const p of others) await greet(m, p);
  await m.handle(ev.messageReceived(0, ME, text(CONFIG_JSON)));
  const out = await m.handle(ev.messageReceived(0.5, ME, text({ type: 'roster', run: RUN, step: 1,
    round: 0, peers, shares })));
  return { m, out };
}

for (const order of ['reduced first', 'compute first']) {
  test(`a follower with a share of 0 computes only the probe and applies the step (${order})`, async () => {
    const shares = [G, 0];
    const { m, out } = await follower([ME, B], shares);
    assert.deepEqual(plain(out), [{ type: 'compute', step: 1, round: 0, rank: 1, shares, peers: 2 }]);
    const done = () => m.handle(ev.computeDone(2, 1, 0, 0, [new Uint8Array(0), new Uint8Array(0)], REF, 0.25));
    let applied;
    if (order === 'reduced first') {
      assert.deepEqual(await piece(m, ME, FrameKind.REDUCED, 1, 0, zeros(m, shares, 0)), []);
      applied = await done(); // everything was in already: the probe completes the step
    } else {
      assert.deepEqual(await done(), [], 'nothing to send: no share, no chunk');
      applied = await piece(m, ME, FrameKind.REDUCED, 1, 0, zeros(m, shares, 0));
    }
    assert.deepEqual(types(applied), ['send-message:hash', 'step-applied']);
    const [hash, stepApplied] = plain(applied);
    assert.equal(hash.peer, ME);
    assert.equal(hash.message.seq_s, 0.25, 'its seconds per sequence go with its hash');
    assert.deepEqual(stepApplied.shares, shares);
    assert.equal(m.replica.step, 1);
  });
}

test('a roster whose shares do not sum to the global batch is refused with bad-message', async () => {
  const { m, out } = await follower([ME, B], [5, G - 6]);
  assert.deepEqual(plain(out)[0], { type: 'send-message', peer: ME, message: { type: 'error',
    code: 'bad-message', message: `roster of step 1: shares sum to ${G - 1}, the run's global ` +
    `batch is ${G}`, hint: 'see docs/PROTOCOL.md, Data channels' } });
  assert.equal(m.peers.isGone(ME), true);
  // Refusing the leader before any roster was accepted ends this peer's run (as in Python).
  assert.deepEqual(types(out), ['send-message:error', 'finished']);
  assert.equal(out[1].outcome.message, 'the leader left before the first step; start the run again');
});

test('a contribution from a share of 0 and a piece for an empty chunk are refused', async () => {
  const shares = [G / 2, G / 2, 0];
  const { m, out } = await follower([ME, B, C], shares, [C]);
  assert.deepEqual(types(out), ['compute']);
  const bad = await piece(m, C, FrameKind.CONTRIBUTION, 1, 1, zeros(m, shares, 1));
  assert.deepEqual(plain(bad)[0].message.message, 'contribution of step 1 from a share of 0');
  assert.deepEqual(types(bad), ['send-message:error', 'close']);
  const empty = await piece(m, ME, FrameKind.REDUCED, 1, 2, encodeChunk(new Float32Array(BLOCK)).payload);
  assert.deepEqual(plain(empty)[0].message.message, 'piece of step 1 for empty chunk 2');
  assert.deepEqual(types(empty), ['send-message:error', 'close']);
});

test('the leader shares the next step by the speeds it heard (allot at every commit)', async () => {
  const m = machine(ME, new TraceReplica(TRACE.setup.replica.step, TRACE.setup.replica.hash));
  await greet(m, B);
  const cfg = parseMessage(text(CONFIG_JSON));
  await m.handle(ev.userLead(0, cfg, 2));
  const ready = text({ type: 'ready', run: RUN, step: 0, hash: m.replica.hash, peers: [ME], seq_s: 0.1 });
  const started = plain(await m.handle(ev.messageReceived(1, B, ready)));
  // Only B is measured: ME gets the mean measured weight, so both get half.
  const roster1 = started.find((f) => f.type === 'send-message' && f.message.type === 'roster');
  assert.deepEqual(roster1.message.shares, [G / 2, G / 2]);
  const shares = roster1.message.shares;
  const computed = await m.handle(ev.computeDone(2, 1, 0, 1.5, [zeros(m, shares, 0), zeros(m, shares, 1)],
    REF, 0.025));
  assert.deepEqual(plain(computed).map((f) => [f.type, f.kind, f.chunk]), [['send-payload', FrameKind.CONTRIBUTION, 1]]);
  await piece(m, B, FrameKind.CONTRIBUTION, 1, 0, zeros(m, shares, 0), 3);
  const applied = plain(await piece(m, B, FrameKind.REDUCED, 1, 1, zeros(m, shares, 1), 3));
  const mine = applied.find((f) => f.type === 'step-applied');
  assert.ok(mine, JSON.stringify(applied));
  const hash = text({ type: 'hash', run: RUN, step: 1, round: 0, hash: mine.hash, loss: 1.5,
    probe: REF, backend: 'numpy', seq_s: 0.1 });
  // The leader commits step 2 at its own apply (B's hash of step 1 comes later): with the
  // speeds it holds then, its own 0.025 and B's ready 0.1, weights 40 and 10: quotas 9.6 and
  // 2.4, the spare one to the larger remainder.
  const roster2 = applied.find((f) => f.type === 'send-message' && f.message.type === 'roster');
  assert.deepEqual(roster2.message.shares, [10, 2]);
  assert.deepEqual(applied.find((f) => f.type === 'compute').shares, [10, 2]);
  const next = plain(await m.handle(ev.messageReceived(4, B, hash)));
  assert.deepEqual(next.filter((f) => f.type === 'send-message' && f.message.type === 'roster'), []);
  assert.deepEqual([...m.leadership.speeds], [[B, 0.1], [ME, 0.025]]);
});
