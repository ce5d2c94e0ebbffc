// The JS protocol machine (static/js/p2p/machine/) against the conformance traces of the Python
// machine (tests/vectors/protocol/, tests/vectors/README.md "Protocol traces"): every trace
// replays to exactly the Python effects (message bodies, frame header fields, payload SHA-256,
// deadlines); a perturbed trace and a machine with one planted line are refused with the exact
// field named; runconfig, codec and allreduce give the Python reference's answers, byte for byte.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import {
  loadTraces, plantedCopy, plantedFailures, python, pythonFile,
} from './protocol_helpers.mjs';
import { REPO, testRng } from './helpers.mjs';
import { FORMAT, TraceMismatch, buildMachine, firstDifference, replay } from './traces/playback.js';
import { TraceReplica, initHash } from './traces/trace_replica.js';
import { ReplicaRefused, checkReplica } from '../../static/js/p2p/machine/replica.js';
import * as ev from '../../static/js/p2p/machine/events.js';
import * as runconfig from '../../static/js/p2p/runconfig.js';
import * as codec from '../../static/js/p2p/codec.js';
import { chunkBlocks, reduceChunk } from '../../static/js/p2p/allreduce.js';
import { parse as parseMessage } from '../../static/js/p2p/messages.js';
import * as versions from '../../static/js/p2p/versions.js';
import { setRawSupport, usesRawFormat } from '../../static/js/p2p/deflate.js';

const TRACES = loadTraces();
const byName = (name) => structuredClone(TRACES.find((t) => t.trace.name === name).trace);

test('there are traces, one per file, named as their files', () => {
  assert.ok(TRACES.length >= 23, `${TRACES.length} traces`);
  for (const { file, trace } of TRACES) {
    assert.equal(`${trace.name}.json`, file);
    assert.equal(trace.format, FORMAT);
  }
});

const timings = [];
for (const { file, trace } of TRACES) {
  test(`trace ${file} replays to exactly the Python effects`, async () => {
    const t0 = performance.now();
    const events = await replay(trace);
    timings.push(performance.now() - t0);
    assert.equal(events, trace.steps.length);
    assert.ok(events > 0);
  });
}

test('every trace replayed (count and time)', (t) => {
  assert.equal(timings.length, TRACES.length, 'a trace test did not finish');
  const ms = timings.reduce((a, b) => a + b, 0);
  const steps = TRACES.reduce((n, { trace }) => n + trace.steps.length, 0);
  t.diagnostic(`${TRACES.length} traces, ${steps} events replayed in ${ms.toFixed(0)} ms`);
});

// ---------------------------------------------------------------------------------------------
// The replay can fail: a trace with one thing changed is refused, naming the exact field.

function firstStepWith(trace, effect) {
  return trace.steps.findIndex((s) => s.effects.some((f) => f.effect === effect));
}

test('a changed message field is named', async () => {
  const trace = byName('leader-3-peers');
  const i = firstStepWith(trace, 'send-message');
  const msg = trace.steps[i].effects.find((f) => f.effect === 'send-message');
  const was = msg.message.name;
  msg.message.name = 'someone else';
  await assert.rejects(replay(trace), (exc) => exc instanceof TraceMismatch && exc.message ===
    `leader-3-peers: step ${i} (channel-open at 0): effects[0].message.name: expected ` +
    `"someone else", got ${JSON.stringify(was)}`);
});

test('a changed payload hash, header field, deadline, dropped or added effect are named', async () => {
  const base = byName('leader-3-peers');
  const i = firstStepWith(base, 'send-payload');
  const where = `leader-3-peers: step ${i} (${base.steps[i].event.event} at ${base.steps[i].event.at})`;
  const payload = base.steps[i].effects[0];
  assert.equal(payload.effect, 'send-payload');

  let t = structuredClone(base);
  t.steps[i].effects[0].sha256 = '0'.repeat(64);
  await assert.rejects(replay(t), { name: 'TraceMismatch', message:
    `${where}: effects[0].sha256: expected "${'0'.repeat(64)}", got "${payload.sha256}"` });

  t = structuredClone(base);
  t.steps[i].effects[0].transfer += 1;
  await assert.rejects(replay(t), { message:
    `${where}: effects[0].transfer: expected ${payload.transfer + 1}, got ${payload.transfer}` });

  t = structuredClone(base);
  t.steps[i].effects[0].deflate = false;
  await assert.rejects(replay(t), { message: `${where}: effects[0].deflate: expected false, got true` });

  t = structuredClone(base);
  const dropped = t.steps[i].effects.pop();
  const n = t.steps[i].effects.length;
  await assert.rejects(replay(t), { message: `${where}: effects: expected ${n} items, got ` +
    `${n + 1} (effects[${n}]: expected nothing, got ${JSON.stringify(dropped)})` });

  t = structuredClone(base);
  t.steps[0].effects.push({ effect: 'close', peer: 'ZZZZZZZZZZZZ' });
  await assert.rejects(replay(t), { message: 'leader-3-peers: step 0 (lead at 0): effects: expected ' +
    '1 items, got 0 (effects[0]: expected {"effect":"close","peer":"ZZZZZZZZZZZZ"}, got nothing)' });

  t = structuredClone(base);
  const j = t.steps.findIndex((s) => s.deadline !== null);
  const deadline = t.steps[j].deadline;
  t.steps[j].deadline += 0.25;
  await assert.rejects(replay(t), { message: `leader-3-peers: step ${j} ` +
    `(${t.steps[j].event.event} at ${t.steps[j].event.at}): next deadline ${deadline}, expected ${deadline + 0.25}` });
});

test('a trace of another format, protocol or frame version is refused', async () => {
  const base = byName('leader-3-peers');
  for (const [key, value, words] of [['format', 'other', /not a daisychain-protocol-trace/],
    ['format_version', 2, /version 1 file/], ['protocol_version', 1, /written for protocol 1/],
    ['frame_version', 9, /frame version 9/]]) {
    await assert.rejects(replay({ ...base, [key]: value }), words);
  }
});

test('firstDifference compares JSON values: key order and number spelling do not matter', () => {
  assert.equal(firstDifference({ a: 1, b: [1, 2] }, { b: [1, 2], a: 1.0 }), null);
  assert.equal(firstDifference({ a: { b: 'x' } }, { a: { b: 'y' } }), 'a.b: expected "x", got "y"');
  assert.equal(firstDifference({ a: 1 }, { a: 1, c: 2 }), 'c: expected nothing, got 2');
});

// One line planted in a copy of a module: the replay must name the first trace and field it
// breaks (each bug is one that a reviewer could plausibly write).
const PLANTED = [
  ['checkpoints deflated like gradients', 'p2p/machine/machine.js',
    'const deflate = kind !== FrameKind.CHECKPOINT;', 'const deflate = true;',
    /^resume-leader: step 5 \(message at 1\): effects\[0\]\.deflate: expected false, got true$/],
  ['repair asks gone peers too', 'p2p/machine/repair.js',
    'if (!a.contributions.has(j) && !gone.has(peer)) {', 'if (!a.contributions.has(j)) {',
    /^follower-gone-mid-exchange: step 17 \(timer at 3\.5\): effects\[0\]\.peer: expected "BBBBBBBBBBBB", got "CCCCCCCCCCCC"$/],
  ['mean divided by N + 1', 'p2p/allreduce.js',
    'const g = Math.fround(total);', 'const g = Math.fround(total + 1);',
    /^crc-damage-repair: step 9 \(frame at 1\.5\): effects\[0\]\.sha256: expected "303578fb/],
  ['probe guard disabled', 'p2p/machine/guard.js',
    'if (probe === this.referenceProbe) return;', 'return;',
    /^probe-mismatch: step 12 \(message at 1\): effects: expected 2 items, got 0/],
  ['step deadline from the repair timer', 'p2p/machine/machine.js',
    'a.deadline = this.now + t.step_timeout_s * rounds;', 'a.deadline = this.now + t.repair_after_s;',
    /^follower-gone-mid-exchange: step 7 \(compute-done at 2\): next deadline 6, expected 7$/],
  ['a departure also drops the present peers it blocked', 'p2p/machine/machine.js',
    'if (drop.size === 0) {', '{',
    /^follower-gone-mid-exchange: step 18 \(timer at 8\.5\): effects\[3\]\.message\.peers: /],
  ['ownership ignored (chunks cut by the shares, as version 2 did)', 'p2p/allreduce.js',
    'return shares.map((s) => (2 * s >= top ? s : 0));', 'return shares.map((s) => s);',
    /^leader-weighted-shares: step \d+ \(/],
  ['a stopped peer drops the hashes still on their way (issue 44)', 'p2p/machine/machine.js',
    "else if (m.type === 'hash') this.lateHash(e.peer, m);", '',
    /^final-hashes-after-stop: step \d+ \(message at 1\): effects\[0\]\.hashes\.CCCCCCCCCCCC: expected "[0-9a-f]{64}", got nothing$/],
  ['a late hash of another run counted', 'p2p/machine/machine.js',
    'if (this.config === null || m.run !== this.config.run || !this.peers.wasGreeted(peer)) return;',
    'if (this.config === null || !this.peers.wasGreeted(peer)) return;',
    /^final-hashes-after-stop: step \d+ \(message at 1\): effects\[0\]\.hashes\.EEEEEEEEEEEE: expected nothing, got "[0-9a-f]{64}"$/],
  ['a late hash from a peer never greeted counted', 'p2p/machine/machine.js',
    'if (this.config === null || m.run !== this.config.run || !this.peers.wasGreeted(peer)) return;',
    'if (this.config === null || m.run !== this.config.run) return;',
    /^final-hashes-after-stop: step \d+ \(message at 1\): effects\[0\]\.hashes\.GGGGGGGGGGGG: expected nothing, got "[0-9a-f]{64}"$/],
  ['a version-6 peer takes a config that audits', 'p2p/machine/machine.js',
    'if (cfg.audit != null) {', 'if (false) {',
    /^v6-audit-config: step \d+ \(message at 0\): effects\[0\]\.message\.code: expected "incompatible", got nothing$/],
  ['version 7\'s messages ignored by a version-6 peer', 'p2p/machine/machine.js',
    'if (/** @type {readonly string[]} */ (AUDIT_TYPES).includes(m.type) ||', 'if (false ||',
    /^v6-audit-messages: step \d+ \(message at 0\): effects: expected 2 items, got 0/],
  ['a version-6 peer serves a reduced chunk for a reduced commit', 'p2p/machine/machine.js',
    "(m.type === 'repair' && AUDIT_PIECES.includes(m.piece))) {", 'false) {',
    /^v6-audit-repair: step \d+ \(message at 0\): effects\[0\]\.effect: expected "send-message", got "close"|^v6-audit-repair: step \d+ \(message at 0\): effects: expected 2 items, got 0/],
  ['checkpoint step read big-endian', 'tests/js/traces/trace_replica.js',
    'getUint32(8, true);', 'getUint32(8, false);',
    /^join-with-checkpoint: step 9 \(message at 3\): effects\[0\]\.effect: expected "compute", got "send-message"$/],
];

for (const [what, file, from, to, expected] of PLANTED) {
  test(`a planted bug is caught: ${what}`, async () => {
    const failures = await plantedFailures(file, from, to, TRACES);
    assert.ok(failures.length > 0, 'no trace noticed the planted bug');
    assert.match(failures[0], expected);
  });
}

// ---------------------------------------------------------------------------------------------
// Beyond the stored traces (tests/protocol_variants.py, played by the Python machine at test
// time): ten scenarios with the events no stored trace has (user-stop, user-save,
// user-private-data, signaling-lost) and refusals the stored traces do not reach (too few chunks, chunks of the
// wrong size, a checkpoint the
// replica refuses, a config the leader cannot train, a chunk the codec refuses); and every
// stored trace perturbed six ways (events dropped, duplicated, swapped or delayed, a frame bit or
// a text character damaged; seeded). The JS machine must hand back the Python effects on all.

let variants = null;
const pythonVariants = () => (variants ??= pythonFile('tests/protocol_variants.py',
  { extra: true, seed: 20261201, variants: 6 }));

test('scenarios beyond the stored traces replay to the Python machine\'s effects', async (t) => {
  const { extra } = pythonVariants();
  assert.equal(extra.length, 10);
  let events = 0;
  for (const trace of extra) events += await replay(trace);
  const seen = new Set();
  for (const trace of [...TRACES.map((x) => x.trace), ...extra]) {
    for (const step of trace.steps) seen.add(step.event.event);
  }
  assert.deepEqual([...seen].sort(), [...ev.EVENT_TYPES].sort(), 'an event type is never replayed');
  t.diagnostic(`${extra.length} scenarios, ${events} events replayed`);
});

test('perturbed event sequences: the JS machine answers as the Python machine does', async (t) => {
  const { perturbed, crashes } = pythonVariants();
  assert.deepEqual(crashes, [], 'the Python machine crashed on a perturbed trace');
  assert.equal(perturbed.length, 6 * TRACES.length);
  let events = 0;
  for (const trace of perturbed) events += await replay(trace);
  t.diagnostic(`${perturbed.length} perturbed traces, ${events} events replayed`);
});

test('every trace also replays on Node 18\'s inflate path (node:zlib)', async () => {
  setRawSupport(false);
  try {
    assert.equal(usesRawFormat(), false);
    for (const { trace } of TRACES) await replay(trace);
  } finally {
    setRawSupport(true);
  }
});

// ---------------------------------------------------------------------------------------------
// The machine's own guards.

test('a second handle() while one is in flight is refused, never interleaved', async () => {
  const trace = byName('leader-3-peers');
  const machine = buildMachine(trace.setup);
  const first = machine.handle(ev.channelOpened(0, 'BBBBBBBBBBBB'));
  await assert.rejects(machine.handle(ev.channelOpened(0, 'CCCCCCCCCCCC')), /one at a time/);
  assert.equal((await first).length, 1);
  assert.equal((await machine.handle(ev.channelOpened(0, 'CCCCCCCCCCCC'))).length, 1);
});

test('an object without the replica interface is refused at birth', () => {
  assert.throws(() => checkReplica({ step: 0, hash: '', start() {}, restore() {}, apply() {} }),
    /needs a checkpoint\(\) method/);
  assert.throws(() => checkReplica({ start() {}, restore() {}, checkpoint() {}, apply() {} }),
    /needs a step property/);
  assert.ok(checkReplica(new TraceReplica()));
});

test('an unknown event type, or an event without a finite now, is refused', async () => {
  const machine = buildMachine(byName('leader-3-peers').setup);
  await assert.rejects(machine.handle({ type: 'channel-opened', now: 0, peer: 'B' }),
    /unknown machine event channel-opened/);
  await assert.rejects(machine.handle({ type: 'timer' }), /a type and a finite `now`/);
  await assert.rejects(machine.handle(ev.timer(NaN)), /a type and a finite `now`/);
  assert.deepEqual(await machine.handle(ev.timer(1)), []); // still usable after the refusals
});

test('the trace replica follows the README rules and refuses foreign checkpoints', async () => {
  const trace = byName('leader-3-peers');
  assert.equal(await initHash(7), trace.setup.replica.hash); // the traces' seed is 7
  const r = new TraceReplica(5, trace.setup.replica.hash);
  const blob = r.checkpoint();
  assert.equal(blob.length, 76);
  assert.equal(String.fromCharCode(...blob.subarray(0, 8)), 'DCTRACE1');
  const back = new TraceReplica();
  back.restore(blob, 'test');
  assert.deepEqual([back.step, back.hash], [5, r.hash]);
  assert.throws(() => back.restore(blob.subarray(0, 75), 'short'),
    (e) => e instanceof ReplicaRefused && e.message === 'short: not a trace checkpoint (75 bytes)');
  const upper = blob.slice();
  upper[20] = 'G'.charCodeAt(0);
  assert.throws(() => back.restore(upper, 'bad'), /bad: the recorded hash is not 64 hex digits/);
  await back.apply(new Float32Array(256));
  assert.equal(back.step, 6);
  assert.match(back.hash, /^[0-9a-f]{64}$/);
  await assert.rejects(back.apply([0]), /Float32Array/);
});

test('versions: the traces were written for the versions this mirror states', () => {
  for (const { trace } of TRACES) {
    assert.equal(trace.protocol_version, versions.DATA_PROTOCOL_VERSION);
    assert.equal(trace.frame_version, versions.FRAME_VERSION);
  }
  assert.equal(versions.CONTRACT_VERSION, 2); // contract v2 (issue 12): the traces were regenerated
  assert.equal(versions.SIGNALING_VERSION, 1);
});

// ---------------------------------------------------------------------------------------------
// runconfig, codec and allreduce against the Python reference.

const TOKENIZER = 'ab'.repeat(32);
const BASE = {
  run: '0123456789abcdef', preset: null,
  model: { vocab_size: 64, width: 16, layers: 1, heads: 1, seq_len: 4, batch: 1, mlp_mult: 1 },
  optim: { lr: 0.003, warmup_steps: 0, weight_decay: 0.0, clip: 1.0 },
  steps: 3, seed: 7, data: 'builtin', tokenizer_sha256: TOKENIZER, resume_step: 0, global_batch: 4,
  shares_by: 'speed',
};
const model = (m) => ({ model: { ...BASE.model, ...m } });
const optim = (o) => ({ optim: { ...BASE.optim, ...o } });
const BIG_CAPS = { max_seq_len: 65536, max_batch: 4096, max_memory_mb: 1 };
const CONFIGS = [
  [{}, {}],
  [{ data: 'fineweb' }, {}],
  [{ tokenizer_sha256: 'cd'.repeat(32) }, {}],
  [model({ vocab_size: 65 }), {}],
  [model({ width: 0 }), {}],
  [model({ width: 8193 }), {}],
  [model({ mlp_mult: 17 }), {}],
  [model({ width: 65, heads: 4 }), {}],
  [model({ width: 32, heads: 1 }), {}],
  [model({ batch: 4096, seq_len: 4096 }), BIG_CAPS],
  [{ global_batch: 0 }, {}],
  [{ global_batch: 4097 }, {}],
  [{ global_batch: 4096, ...model({ batch: 64 }) }, {}],
  [{ global_batch: 0, ...model({ batch: 4096, seq_len: 4096 }) }, BIG_CAPS], // tokens-range first
  [{ global_batch: 0, preset: 'huge' }, {}], // global-batch before preset
  [{ preset: 'tiny' }, {}],
  [{ preset: 'huge\u00e9\n' }, {}],
  [{ preset: 'tiny', ...model({ width: 64, layers: 2, heads: 4, mlp_mult: 4 }) }, {}],
  [{ steps: 0 }, {}],
  [{ steps: 2 ** 24 }, {}],
  [{ resume_step: 3, resume_hash: 'ef'.repeat(32) }, {}],
  [{ resume_step: 1, resume_hash: 'ef'.repeat(32) }, {}],
  [optim({ lr: 0 }), {}],
  [optim({ lr: 1e-50 }), {}],
  [optim({ lr: 1.5 }), {}],
  [optim({ warmup_steps: 10 }), {}],
  [optim({ weight_decay: 1.5 }), {}],
  [optim({ weight_decay: -0.1 }), {}],
  [optim({ clip: -1 }), {}],
  [optim({ clip: 2e6 }), {}],
  [model({ width: 8192, heads: 2, layers: 256, mlp_mult: 16 }), {}],
  [model({ seq_len: 2048 }), {}],
  [model({ batch: 65 }), {}],
  [{ steps: 1_000_001 }, {}],
  [model({ width: 4096, heads: 1, seq_len: 1024, batch: 64 }), {}],
  [{}, { max_memory_mb: 1 }],
  [model({ width: 256, heads: 16, layers: 256, seq_len: 65536, batch: 255 }), BIG_CAPS],
  [model({ width: 64, heads: 4, layers: 3, seq_len: 100, batch: 7, mlp_mult: 3 }), { max_memory_mb: 2 }],
];

const RUNCONFIG_PY = String.raw`
import json, sys
from daisychain.p2p import runconfig
from daisychain.wire import messages
out = []
for text, caps in json.load(sys.stdin):
    cfg = messages.parse(text)
    try:
        run = runconfig.parse(cfg, tokenizer_sha256="ab" * 32, vocab_size=64,
                              limits=runconfig.Limits(**caps))
    except runconfig.Incompatible as exc:
        out.append({"rule": exc.rule, "code": exc.code, "message": exc.message, "hint": exc.hint})
    else:
        out.append({"ok": True, "params": str(run.footprint.params),
                    "total": str(run.footprint.total)})
print(json.dumps(out))
`;

test('runconfig.parse: every rule, message and hint is the Python reference\'s', () => {
  const cases = CONFIGS.map(([patch, caps]) => [JSON.stringify({ ...BASE, ...patch, type: 'config' }), caps]);
  const expected = python(RUNCONFIG_PY, cases);
  const rules = new Set();
  cases.forEach(([text, caps], i) => {
    const cfg = parseMessage(text);
    let got;
    try {
      const run = runconfig.parse(cfg, { tokenizerSha256: TOKENIZER, vocabSize: 64,
        caps: runconfig.limits(caps) });
      got = { ok: true, params: String(run.footprint.params), total: String(run.footprint.total) };
    } catch (exc) {
      if (!(exc instanceof runconfig.Incompatible)) throw exc;
      got = { rule: exc.rule, code: exc.code, message: exc.message, hint: exc.hint };
    }
    assert.deepEqual(got, expected[i], `config ${i}: ${text}`);
    rules.add(got.rule ?? 'ok');
  });
  for (const rule of ['ok', 'data', 'tokenizer', 'size-range', 'heads-divide-width', 'head-dim',
    'tokens-range', 'global-batch', 'preset', 'steps-range', 'resume', 'lr', 'warmup', 'weight-decay', 'clip',
    'checkpoint-size', 'max-seq-len', 'max-batch', 'max-steps', 'max-memory']) {
    assert.ok(rules.has(rule), `no case reaches rule ${rule}`);
  }
});

test('runconfig.limits refuses caps that are not positive integers', () => {
  assert.throws(() => runconfig.limits({ max_batch: 0 }), /max_batch must be a positive integer/);
  assert.throws(() => runconfig.limits({ max_steps: 1.5 }), /max_steps must be a positive integer/);
  assert.equal(runconfig.limits({}).max_memory_mb, 4096);
});

test('Python number formats: {:,} and {:,.0f} (ties to even)', () => {
  assert.equal(runconfig.grouped(1234567n), '1,234,567');
  assert.equal(runconfig.grouped(999), '999');
  assert.equal(runconfig.groupedFixed0(2.5), '2');
  assert.equal(runconfig.groupedFixed0(3.5), '4');
  assert.equal(runconfig.groupedFixed0(1234.49), '1,234');
});

const CODEC_PY = String.raw`
import json, sys
import numpy as np
from daisychain.p2p import allreduce
from daisychain.wire import codec
out = {"reduce": [], "encode": [], "refusals": []}
for case in json.load(sys.stdin)["reduce"]:
    parts = [codec.decode(bytes.fromhex(p), case["blocks"]) for p in case["payloads"]]
    payload, values = codec.encode(allreduce.reduce_chunk(parts, case["weights"], sum(case["weights"])))
    out["reduce"].append({"payload": payload.hex(), "values": values.astype("<f4").tobytes().hex()})
print(json.dumps(out))
`;

// Contributions with varied exponents (the traces' all share -7, so their sums are exact and
// would not pin the summation order; these are not).
function contributions(rng, n, blocks) {
  return Array.from({ length: n }, () => {
    const p = new Uint8Array(blocks * 257);
    for (let b = 0; b < blocks; b++) {
      p[b] = (rng.int(0, 9) === 0 ? -126 : rng.int(-40, 20)) & 0xff;
    }
    for (let i = blocks; i < p.length; i++) p[i] = rng.int(-127, 127) & 0xff;
    return p;
  });
}

const hex = (bytes) => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');

let reduceCases = null;
let reduceExpected = null;

// The cases and the Python reference's answers (computed once, inside the first test that asks:
// a missing Python fails those tests, not the whole file).
function reduceReference() {
  if (reduceExpected === null) {
    const rng = testRng(20261201);
    reduceCases = [];
    // Weights (shares) equal, uneven, 1 and the largest (4096 = G for one contributor; products
    // up to 127 * 4095 stay exact in float32).
    const weightsOf = [[1], [3, 1], [5, 5, 6], [1, 2, 3, 4, 4090], [7, 1, 1, 1, 1, 1, 3],
      [4096], [13, 3], [16, 16, 16, 16]];
    const sizes = [[1, 1], [2, 3], [3, 4], [5, 2], [7, 1], [1, 11], [2, 6], [4, 6]];
    sizes.forEach(([n, blocks], i) => {
      reduceCases.push({ n, blocks, weights: weightsOf[i], payloads: contributions(rng, n, blocks).map(hex) });
    });
    // Cancellation: peer 0 adds q * 2^20, peer 2 takes it away again, peer 1's 2^-10 is lost in
    // between (d0 + d1 rounds to d0) in roster order, and survives in any other order.
    const big = contributions(rng, 1, 2)[0];
    big[0] = 20;
    big[1] = 20;
    const small = contributions(rng, 1, 2)[0];
    small[0] = -10 & 0xff;
    small[1] = -10 & 0xff;
    const minus = big.map((v, i) => (i < 2 ? v : (-((v << 24) >> 24)) & 0xff));
    reduceCases.push({ n: 3, blocks: 2, weights: [1, 1, 1], payloads: [big, small, minus].map(hex) });
    reduceExpected = python(CODEC_PY, { reduce: reduceCases }).reduce;
  }
}

// The mismatches of one codec/allreduce implementation against the Python reference.
function reduceMismatches(C, reduce) {
  reduceReference();
  const bad = [];
  reduceCases.forEach((c, i) => {
    const parts = c.payloads.map((h) => C.decode(Uint8Array.from(Buffer.from(h, 'hex')), c.blocks));
    const total = c.weights.reduce((a, b) => a + b, 0);
    const { payload, values } = C.encode(reduce(parts, c.weights, total));
    if (hex(payload) !== reduceExpected[i].payload) bad.push(`case ${i} payload`);
    if (hex(values) !== reduceExpected[i].values) bad.push(`case ${i} values`);
  });
  return bad;
}

test('codec + allreduce: the reduced chunk is the Python reference\'s, byte for byte', () => {
  assert.deepEqual(reduceMismatches(codec, reduceChunk), []);
});

test('the summation order is pinned (the traces cannot see it: their sums are exact)', async () => {
  const copy = plantedCopy('p2p/allreduce.js', 'for (let j = 1; j < contributions.length; j++) {',
    'for (let j = contributions.length - 1; j >= 1; j--) {');
  try {
    const A = await import(copy.url('p2p/allreduce.js'));
    const C = await import(copy.url('p2p/codec.js'));
    assert.ok(reduceMismatches(C, A.reduceChunk).length > 0, 'a reversed sum went unnoticed');
    const { replay: plantedReplay } = await import(copy.url('tests/js/traces/playback.js'));
    for (const { trace } of TRACES) await plantedReplay(trace); // every trace still passes
  } finally {
    copy.dispose();
  }
});

test('codec.decode refuses a wrong length, an exponent out of range and -128', () => {
  const ok = new Uint8Array(2 * 257);
  assert.equal(codec.decode(ok, 2).length, 512);
  assert.throws(() => codec.decode(ok.subarray(1), 2), (e) => e instanceof codec.CodecError &&
    e.message === 'chunk of 2 blocks must be 514 bytes, got 513');
  for (const e of [-127, 101]) {
    const bad = ok.slice();
    bad[1] = e & 0xff;
    assert.throws(() => codec.decode(bad, 2), { message: 'block exponent out of range [-126, 100]' });
  }
  const bad = ok.slice();
  bad[300] = 0x80;
  assert.throws(() => codec.decode(bad, 2), { message: 'quantized value -128 never occurs (|q| <= 127)' });
});

test('allreduce chunks follow the shares (the traces\' 11 blocks over 3 equal shares: 3, 4, 4)', () => {
  assert.deepEqual([0, 1, 2].map((k) => chunkBlocks(11, [2, 2, 2], k)), [[0, 3], [3, 7], [7, 11]]);
  // floor(11 * c / O) with c = 0, 13, 20 and O = 20 (ownership weights 13, 7).
  assert.deepEqual([0, 1].map((k) => chunkBlocks(11, [13, 7], k)), [[0, 7], [7, 11]]);
  // A share of 0, or of less than half the largest (3 of 13, 5 of 11), owns an empty chunk.
  assert.deepEqual([0, 1].map((k) => chunkBlocks(11, [13, 3], k)), [[0, 11], [11, 11]]);
  assert.deepEqual([0, 1, 2].map((k) => chunkBlocks(11, [5, 0, 11], k)), [[0, 0], [0, 0], [0, 11]]);
  assert.deepEqual([0, 1, 2].map((k) => chunkBlocks(11, [6, 0, 11], k)), [[0, 3], [3, 3], [3, 11]]);
  assert.throws(() => chunkBlocks(11, [2, 2, 2], 3), /chunk 3 of shares \[2, 2, 2\]/);
  assert.throws(() => chunkBlocks(11, [0, 0], 0), /chunk 0 of shares/);
});

// ---------------------------------------------------------------------------------------------
// Sans-IO: the machine, its pure helpers and the trace replay read no clock, start no timer and
// touch no socket, DOM or randomness (Python's machine is scanned the same way for asyncio, time,
// threading and socket); the scan must fire on a planted use.

// Repository paths: the trace replay is test-only (tests/js/traces/), the rest the product's.
const PURE = ['tests/js/traces/', ...['machine/', 'codec.js', 'allreduce.js', 'run.js', 'footprint.js',
  'runconfig.js', 'versions.js'].map((p) => `static/js/p2p/${p}`)];
const FORBIDDEN = /\b(Date|performance|setTimeout|setInterval|queueMicrotask|requestAnimationFrame|WebSocket|RTCPeerConnection|document|window|localStorage|fetch|Worker)\b|Math\.random/;

function impureLines(file, text) {
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').split('\n');
  const bad = [];
  code.forEach((line, i) => {
    const stripped = line.replace(/\/\/.*$/, '').replace(/'[^']*'|`[^`]*`/g, "''");
    if (FORBIDDEN.test(stripped)) bad.push(`${file}:${i + 1}: ${line.trim()}`);
  });
  return bad;
}

function importClosure(start) {
  const seen = new Set();
  const todo = [path.resolve(start)];
  while (todo.length > 0) {
    const file = todo.pop();
    if (seen.has(file)) continue;
    seen.add(file);
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/^(?:import|export)[^'"]*from\s+'([^']+)'/gm)) {
      if (m[1].startsWith('.')) todo.push(path.resolve(path.dirname(file), m[1]));
    }
  }
  return seen;
}

test('the machine is sans-IO: no clock, timer, socket, DOM or randomness (and the scan fires)', () => {
  const js = path.join(REPO, 'static', 'js');
  const files = [...importClosure(path.join(REPO, 'tests', 'js', 'traces', 'playback.js'))]
    .map((f) => path.relative(REPO, f).split(path.sep).join('/'))
    .filter((f) => PURE.some((p) => f.startsWith(p)));
  assert.ok(files.length >= 20, files.join(', '));
  assert.ok(files.includes('tests/js/traces/trace_replica.js'), files.join(', '));
  const bad = files.flatMap((f) => impureLines(f, readFileSync(path.join(REPO, f), 'utf8')));
  assert.deepEqual(bad, []);
  // The closure never reaches the I/O shell; signaling.js only for its version constant.
  const closure = [...importClosure(path.join(js, 'p2p', 'machine', 'index.js'))].map((f) => path.relative(js, f));
  assert.ok(!closure.includes(path.join('p2p', 'mesh.js')), 'the machine imports the mesh');
  assert.match(readFileSync(path.join(js, 'p2p', 'versions.js'), 'utf8'),
    /export \{ SIGNALING_VERSION \} from '\.\/signaling\.js';/);
  for (const planted of ['const t = Date.now();', 'setTimeout(f, 10);', 'x = Math.random();',
    'this.now = performance.now();']) {
    assert.equal(impureLines('planted.js', planted).length, 1, planted);
  }
  assert.deepEqual(impureLines('ok.js', "// Date.now() in a comment\nconst s = 'setTimeout';"), []);
});
