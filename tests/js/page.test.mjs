// The page's pieces that need no browser (static/js/page/): the readiness panel's read-outs
// (a backend that could not be tried for want of WebGPU, or a missing GPU feature, is not
// reported as a failed gate; the speed is given only for a complete measurement), the name from
// the address, the roster's record of what the server said (a refusal kept as sent; an error
// after admission is no refusal; a host hand-off), how a run ended in words, and the counters'
// time format. The page itself: tests/page/test_page_states.py and tests/page/test_page_rooms.py.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { backendLines, measuredSpeed, deviceName, MAX_NAME } from '../../static/js/page/readiness.js';
import { Roster } from '../../static/js/page/roster.js';
import { refusedText } from '../../static/js/page/group.js';
import { defaultGlobalBatch, endedText, sizeLine } from '../../static/js/page/lead.js';
import { seconds } from '../../static/js/page/dom.js';
import { DetailEvent } from '../../static/js/p2p/signaling.js';
import { PRESETS } from '../../static/js/model/config.js';

const row = (name, fields = {}) => ({
  name, adapter: 'SwiftShader', gates_passed: true, cases_passed: 12, failure: null,
  probe_hash: 'p', step_ms: null, step_complete: null, ...fields,
});

test('readiness: the CPU line names the WebAssembly SIMD GEMM, or says why it was refused', () => {
  const on = { backend: 'js-cpu', wasm: { enabled: true, name: 'wasm-simd', reason: 'ok' },
    rows: [row('js-cpu', { adapter: 'CPU (JS mirror, integer products in WebAssembly SIMD)' })] };
  assert.deepEqual(backendLines(on).map(([mark, text]) => [mark, text]), [
    ['✓', 'js-cpu: passed its exact gates (chosen), integer products in WebAssembly SIMD'],
  ]);
  // a pool of workers shares them (a cross-origin isolated page): the line says on how many
  const pooled = { ...on, wasm: { ...on.wasm, name: 'wasm-simd x4', threads: 4 } };
  assert.equal(backendLines(pooled)[0][1],
    'js-cpu: passed its exact gates (chosen), integer products in WebAssembly SIMD on 4 threads');
  const refused = { backend: 'js-cpu', rows: [row('js-cpu', { adapter: 'cpu' })],
    wasm: { enabled: false, name: 'wasm-simd', reason: 'gate 7: cell (0, 1) is 5, expected 6; the JS GEMM stays' } };
  const lines = backendLines(refused);
  assert.deepEqual(lines[0].slice(0, 2), ['✓', 'js-cpu: passed its exact gates (chosen)']);
  assert.equal(lines[1][0], '–');
  assert.match(lines[1][1], /^WebAssembly SIMD GEMM: not used, gate 7/);
  // Never tried (a request with wasm: false, or an engine without WebAssembly): no line.
  const untried = { ...refused, wasm: { enabled: false, name: null, reason: 'not tried' } };
  assert.equal(backendLines(untried).length, 1);
});

test('readiness: passed, failed, and not available are three different lines', () => {
  const selection = {
    backend: 'js-cpu',
    rows: [
      row('webgpu-dp4a', { gates_passed: false, adapter: 'none', failure: 'no WebGPU adapter' }),
      row('webgpu-lut', { gates_passed: false, adapter: 'none', failure: 'no WebGPU adapter' }),
      row('js-cpu', { adapter: 'cpu' }),
    ],
  };
  assert.deepEqual(backendLines(selection).map(([mark, text]) => [mark, text]), [
    ['–', 'webgpu-dp4a, webgpu-lut: not available, no WebGPU on this browser'],
    ['✓', 'js-cpu: passed its exact gates (chosen)'],
  ]);
  const gpu = {
    backend: 'webgpu-lut',
    rows: [
      row('webgpu-dp4a', { gates_passed: false,
        failure: 'WGSL language feature packed_4x8_integer_dot_product is missing on this browser/device' }),
      row('webgpu-lut'),
      row('js-cpu', { gates_passed: false, failure: 'gate 3: cell (1, 2) is 7, expected 8' }),
    ],
  };
  const lines = backendLines(gpu);
  assert.equal(lines[0][0], '–', 'a missing feature is not a failed gate');
  assert.match(lines[0][1], /not available, this GPU lacks the feature it needs/);
  assert.deepEqual(lines[1].slice(0, 2), ['✓', 'webgpu-lut: passed its exact gates (chosen)']);
  assert.deepEqual(lines[2].slice(0, 2), ['✗', 'js-cpu: failed its gates, gate 3: cell (1, 2) is 7, expected 8']);
  const long = backendLines({ backend: 'x', rows: [row('y', { gates_passed: false, failure: 'z'.repeat(500) })] });
  assert.ok(long[0][1].length < 200 && long[0][2].length === 500, 'shortened on the line, whole in the title');
});

test('readiness: a GPU tier says whether its step chain is used, and why not', () => {
  const gpu = (chain) => ({ backend: 'webgpu-dp4a', onGpu: true, chain,
    rows: [row('webgpu-dp4a')] });
  const used = backendLines(gpu({ used: true, name: 'step', reason: '3 + 3 gate cases passed' }));
  assert.deepEqual(used[1], ['✓', 'step chain: every training step in one submit and one readback',
    '3 + 3 gate cases passed']);
  const why = 'google swiftshader is emulated: its epilogues cost more than the round trips';
  const off = backendLines(gpu({ used: false, name: 'step', reason: why }));
  assert.deepEqual(off[1], ['–', `step chain: not used, ${why}`, why]);
  // the CPU tier has no chains: no line
  assert.equal(backendLines({ backend: 'js-cpu', onGpu: false,
    chain: { used: false, name: 'step', reason: 'the CPU tier has no chains' },
    rows: [row('js-cpu')] }).length, 1);
});

test('readiness: the speed is one tiny step of the chosen backend, only when measured in full', () => {
  const tokens = PRESETS.tiny.batch * PRESETS.tiny.seqLen;
  const sel = (fields) => ({ backend: 'js-cpu', rows: [row('js-cpu', fields)] });
  assert.equal(measuredSpeed(sel({ step_ms: 1000, step_complete: true })), tokens);
  assert.equal(measuredSpeed(sel({ step_ms: 500, step_complete: true })), 2 * tokens);
  assert.equal(measuredSpeed(sel({ step_ms: null })), null, 'a forced backend is not timed');
  assert.equal(measuredSpeed(sel({ step_ms: 500, step_complete: false })), null, 'a stopped timing is a bound');
  assert.equal(measuredSpeed(sel({ step_ms: 0, step_complete: true })), null);
  assert.equal(measuredSpeed({ backend: 'webgpu-lut', rows: [row('js-cpu', { step_ms: 9 })] }), null,
    'another backend\'s timing is not this one\'s');
  assert.equal(measuredSpeed(null), null);
});

test('readiness: ?name= wins and is cut to what the hello carries; no storage is no name', () => {
  assert.equal(deviceName(new URLSearchParams('name=Ada')), 'Ada');
  assert.equal(deviceName(new URLSearchParams(`name=${'x'.repeat(60)}`)).length, MAX_NAME);
  assert.equal(deviceName(new URLSearchParams('')), '', 'Node has no localStorage: nothing remembered');
});

function fakeMesh() {
  const mesh = new EventTarget();
  mesh.signaling = { state: 'idle', hello: { name: 'me' } };
  mesh.say = (message) => mesh.dispatchEvent(new DetailEvent('server', { message }));
  return mesh;
}
const peer = (id, name = id) => ({ id, name, device: { kind: 'browser', backend: 'js-cpu', tokens_per_s: 300 } });

test('roster: a refusal is kept as the server sent it; an error after admission is not one', () => {
  const mesh = fakeMesh();
  const r = new Roster(mesh);
  mesh.say({ type: 'pending', id: 'me1', room: 'abcdefgh', timeout_s: 120, message: 'waiting for the host' });
  assert.equal(r.waiting.timeoutS, 120);
  mesh.say({ type: 'denied', reason: 'timeout', message: 'the host did not answer within 120 s', hint: 'reconnect' });
  assert.equal(r.waiting, null);
  assert.deepEqual(r.refusal, { message: 'the host did not answer within 120 s', hint: 'reconnect', reason: 'timeout' });

  const m2 = fakeMesh();
  const admitted = new Roster(m2);
  m2.say({ type: 'welcome', id: 'me', role: 'host', host: 'me', group: { kind: 'room', id: 'r' }, members: [] });
  m2.say({ type: 'error', code: 'unknown-peer', message: 'no pending join request', hint: 'it may have timed out', ref: 'approve' });
  assert.equal(admitted.refusal, null, 'a late answer does not make the host a refused page');
  assert.equal(admitted.role, 'host');

  const m3 = fakeMesh();
  const refused = new Roster(m3);
  m3.say({ type: 'error', code: 'room-busy', message: 'the room is full', hint: 'wait', ref: 'hello' });
  assert.equal(refused.refusal.message, 'the room is full', 'a refused hello is a refusal');
});

test('roster: members, requests, channels and a host hand-off', () => {
  const mesh = fakeMesh();
  const r = new Roster(mesh);
  let changes = 0;
  r.addEventListener('change', () => changes++);
  mesh.say({ type: 'welcome', id: 'b', role: 'member', host: 'a', group: { kind: 'room', id: 'r' },
    members: [peer('a', 'Ada')] });
  assert.equal(r.nameOf('a'), 'Ada');
  assert.equal(r.nameOf('b'), 'me');
  assert.equal(r.channelOf('a'), 'connecting');
  mesh.dispatchEvent(new DetailEvent('channel-open', { peer: 'a' }));
  assert.equal(r.channelOf('a'), 'open');
  mesh.say({ type: 'peer-joined', peer: peer('c', '') });
  assert.equal(r.nameOf('c'), 'c', 'no name: the id');
  mesh.say({ type: 'peer-left', peer: 'a' });
  mesh.say({ type: 'host-changed', host: 'b' });
  assert.equal(r.role, 'host');
  assert.deepEqual(r.news, { kind: 'host', id: 'b' });
  mesh.say({ type: 'join-request', peer: peer('d', 'Dee'), expires_in_s: 30 });
  assert.equal(r.requests.size, 1);
  mesh.say({ type: 'join-request-closed', peer: 'd', reason: 'timeout' });
  assert.equal(r.requests.size, 0);
  assert.deepEqual(r.news, { kind: 'closed', name: 'Dee', reason: 'timeout' });
  mesh.say({ type: 'pong', nonce: 1 });
  assert.equal(changes, 7, 'one change per membership message and channel event, none for a pong');
});

test('roster: requests the server refused unseen are counted for the host, anew each welcome', () => {
  const mesh = fakeMesh();
  const r = new Roster(mesh);
  mesh.say({ type: 'welcome', id: 'me', role: 'host', host: 'me', group: { kind: 'room', id: 'r' }, members: [] });
  assert.equal(r.refused, 0);
  mesh.say({ type: 'join-requests-refused', count: 3 });
  assert.equal(r.refused, 3);
  mesh.say({ type: 'join-requests-refused', count: 12 });
  assert.equal(r.refused, 12, 'the count is the room\'s total so far, not an increment');
  mesh.say({ type: 'welcome', id: 'me2', role: 'host', host: 'me2', group: { kind: 'room', id: 'r' }, members: [] });
  assert.equal(r.refused, 0, 'a new membership starts from nothing');
  assert.match(refusedText(1), /^1 more join request was refused: the waiting list was full\./);
  assert.match(refusedText(1234), /^1,234 more join requests were refused/);
});

test('a run\'s end in words; an unknown reason is shown as it is', () => {
  assert.equal(endedText({ reason: 'done', step: 300 }), 'The run ended at step 300: it finished.');
  assert.equal(endedText({ reason: 'leader-request', step: 19 }, 'The last run'),
    'The last run ended at step 19: its leader stopped it.');
  assert.equal(endedText({ reason: 'mystery', step: 1 }), 'The run ended at step 1: mystery.');
});

test('counters: whole seconds, then minutes, then hours', () => {
  assert.deepEqual([0, 0.4, 59.4, 60, 125, 3600, 3725].map(seconds),
    ['0 s', '0 s', '59 s', '1 min', '2 min 5 s', '1 h', '1 h 2 min']);
  assert.equal(seconds(-5), '0 s');
});

test("the lead form's default global batch: per device x the devices ready here (at least this one)", () => {
  const peerWith = (open) => ({ mesh: { openPeers: () => Array.from({ length: open }, (_, i) => `p${i}`) } });
  assert.equal(defaultGlobalBatch(peerWith(2), 'tiny', 3), 9, '3 per device, this device and 2 linked');
  assert.equal(defaultGlobalBatch(peerWith(0), 'tiny', undefined), PRESETS.tiny.batch, 'alone: the preset batch');
  assert.equal(defaultGlobalBatch(peerWith(1), 'small', undefined), 2 * PRESETS.small.batch);
  assert.equal(defaultGlobalBatch({ mesh: null }, 'tiny', 2), 2, 'no mesh yet: one device');
});

// The numbers are daisychain.p2p.footprint.estimate's for the same sizes (Python: tiny 233,792
// parameters, about 30 MiB; width 128, 3 layers, 2 heads: 861,056, about 74 MiB), so the form
// says before Start what every follower will compare with its memory cap.
test('lead form: the size line names the model, its parameters and its memory before Start', () => {
  assert.deepEqual(sizeLine({ preset: 'tiny' }), { ok: true,
    text: 'tiny: width 64, 2 layers, 4 heads, 233,792 parameters, about 30 MiB per device to train.' });
  assert.deepEqual(sizeLine({ preset: 'tiny', width: 128, layers: 3, heads: 2 }), { ok: true,
    text: 'Custom: width 128, 3 layers, 2 heads, 861,056 parameters, about 74 MiB per device to train.' });
  assert.match(sizeLine({ preset: 'tiny', width: 16, layers: 1, heads: 1 }).text,
    /^Custom: width 16, 1 layer, 1 head, /);
  const bad = sizeLine({ preset: 'tiny', width: 48, heads: 4 }); // head dim 12
  assert.equal(bad.ok, false);
  assert.match(bad.text, /^This size cannot be trained: head dim width\/heads = 12 must be a power of 4/);
});
