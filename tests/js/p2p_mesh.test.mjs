// static/js/p2p/signaling.js and mesh.js without a browser: the parsers' refusals, the backoff,
// the signaling client's reconnect and final-close rules against a scripted WebSocket, and the
// mesh's who-offers rule, trickle choice, peer-left grace and flow control against scripted
// RTCPeerConnection / RTCDataChannel objects. (Real WebRTC: tests/browser/test_browser_mesh.py.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as S from '../../static/js/p2p/signaling.js';
import { Mesh, HIGH_WATER, LOW_WATER, CHANNEL_LABEL } from '../../static/js/p2p/mesh.js';
import * as F from '../../static/js/p2p/frames.js';
import * as M from '../../static/js/p2p/messages.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(predicate, what, ms = 2000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

// ---------------------------------------------------------------------------------------------
// Scripted WebSocket / RTCPeerConnection / RTCDataChannel

class FakeWebSocket {
  static all = [];
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    FakeWebSocket.all.push(this);
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close(code = 1000) {
    this.closeWith(code);
  }
  open() {
    this.readyState = 1;
    this.onopen?.();
  }
  receive(obj) {
    this.onmessage?.({ data: typeof obj === 'string' ? obj : JSON.stringify(obj) });
  }
  closeWith(code, reason = '') {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }
}

class FakeChannel extends EventTarget {
  constructor(label) {
    super();
    this.label = label;
    this.readyState = 'connecting';
    this.bufferedAmount = 0;
    this.bufferedAmountLowThreshold = 0;
    this.sent = [];
  }
  send(data) {
    if (this.readyState !== 'open') throw new Error('InvalidStateError: not open');
    this.sent.push(typeof data === 'string' ? data : data.slice());
    this.bufferedAmount += data.length;
    this.peak = Math.max(this.peak ?? 0, this.bufferedAmount);
  }
  /** The transport took `n` bytes: bufferedamountlow fires when crossing the threshold. */
  drain(n) {
    const before = this.bufferedAmount;
    this.bufferedAmount = Math.max(0, before - n);
    if (before > this.bufferedAmountLowThreshold && this.bufferedAmount <= this.bufferedAmountLowThreshold) {
      this.dispatchEvent(new Event('bufferedamountlow'));
    }
  }
  open() {
    this.readyState = 'open';
    this.dispatchEvent(new Event('open'));
  }
}

class FakePC extends EventTarget {
  static all = [];
  constructor(config) {
    super();
    this.config = config;
    this.signalingState = 'stable';
    this.iceGatheringState = 'new';
    this.localDescription = null;
    this.remote = [];
    this.candidates = [];
    this.channels = [];
    FakePC.all.push(this);
  }
  createDataChannel(label, options) {
    const ch = new FakeChannel(label);
    ch.options = options;
    this.channels.push(ch);
    return ch;
  }
  async createOffer() {
    return { type: 'offer', sdp: 'v=0 offer' };
  }
  async createAnswer() {
    return { type: 'answer', sdp: 'v=0 answer' };
  }
  async setLocalDescription(d) {
    this.localDescription = d;
    if (d.type === 'offer') this.signalingState = 'have-local-offer';
    else this.signalingState = 'stable';
    this.iceGatheringState = 'gathering';
  }
  async setRemoteDescription(d) {
    this.remote.push(d);
    this.signalingState = d.type === 'offer' ? 'have-remote-offer' : 'stable';
  }
  async addIceCandidate(c) {
    this.candidates.push(c);
  }
  gathered(candidates = []) {
    for (const c of candidates) {
      this.dispatchEvent(Object.assign(new Event('icecandidate'), { candidate: { candidate: c, sdpMid: '0', sdpMLineIndex: 0 } }));
    }
    this.iceGatheringState = 'complete';
    this.localDescription = { ...this.localDescription, sdp: `${this.localDescription.sdp} +${candidates.length}` };
    this.dispatchEvent(new Event('icegatheringstatechange'));
  }
  close() {
    this.closed = true;
  }
}

function newMesh(options = {}) {
  FakeWebSocket.all.length = 0;
  FakePC.all.length = 0;
  const mesh = new Mesh({
    server: 'http://127.0.0.1:8787', name: 'tab', RTCPeerConnectionImpl: FakePC,
    WebSocketImpl: FakeWebSocket, log: () => {}, peerLeftGraceMs: 40,
    backoff: { initialMs: 5, maxMs: 20, random: S.seededRandom(1) }, ...options,
  });
  const events = [];
  for (const type of ['signaling', 'welcome', 'channel-open', 'channel-closed', 'message', 'frame', 'peer-left', 'error']) {
    mesh.addEventListener(type, (e) => events.push({ type, ...e.detail }));
  }
  mesh.start();
  const ws = FakeWebSocket.all[0];
  ws.open();
  return { mesh, ws, events };
}

const peerInfo = (id, device = { kind: 'browser', trickle: true }) => ({ id, name: id, device });
const welcome = (id, members) => ({
  type: 'welcome', version: 1, id, group: { kind: 'local', id: 'g' }, role: 'member', host: null, members,
});
const signals = (ws, to) => ws.sent.filter((m) => m.type === 'signal' && m.to === to).map((m) => m.data);

// ---------------------------------------------------------------------------------------------
// signaling.js

test('parseServer accepts every server message kind and refuses malformed ones with a hint', () => {
  const ok = [
    welcome('me', [peerInfo('a')]),
    { type: 'pending', id: 'me', room: 'room-42', timeout_s: 120, message: 'wait' },
    { type: 'denied', reason: 'timeout', message: 'm', hint: 'h' },
    { type: 'join-request', peer: peerInfo('a'), expires_in_s: 120 },
    { type: 'join-request-closed', peer: 'a', reason: 'left' },
    { type: 'join-requests-refused', count: 3 },
    { type: 'invite', token: 'Ab-_'.repeat(8), uses: 20, used: 3, expires_in_s: 3599.5, status: 'open' },
    { type: 'peer-joined', peer: peerInfo('a') },
    { type: 'peer-left', peer: 'a' },
    { type: 'host-changed', host: 'a' },
    { type: 'signal', from: 'a', data: { kind: 'offer', sdp: 'x' } },
    { type: 'broadcast', from: 'a', data: {} },
    { type: 'pong', nonce: 3 },
    { type: 'error', code: 'rate-limited', message: 'm', hint: 'h', ref: 'signal' },
  ];
  assert.deepEqual(ok.map((m) => S.parseServer(JSON.stringify(m)).type), S.SERVER_TYPES);
  const bad = [
    [new Uint8Array(2), /binary frame/],
    ['{', /not JSON/],
    ['[1]', /not a JSON object/],
    ['{"type":"gossip"}', /unknown server message type "gossip"/],
    ['{"x":1}', /unknown server message type null/],
    [JSON.stringify({ ...welcome('me', []), version: 2 }), /signaling version 2/],
    [JSON.stringify({ ...welcome('bad id', []) }), /welcome.id must be a peer id/],
    [JSON.stringify({ ...welcome('me', [{ id: 'a', name: 'n', device: 'x' }]) }), /device/],
    [JSON.stringify({ ...welcome('me', {}) }), /welcome.members/],
    [JSON.stringify({ type: 'peer-left', peer: 7 }), /peer-left.peer must be a peer id/],
    [JSON.stringify({ type: 'signal', from: 'a', data: 'x' }), /signal.data must be a JSON object/],
    [JSON.stringify({ type: 'denied', reason: 'bored', message: 'm', hint: 'h' }), /one of denied, timeout, closed/],
    [JSON.stringify({ type: 'pending', id: 'me', room: 'r', timeout_s: 1, message: 'm' }), /room code/],
    [JSON.stringify({ type: 'pong', nonce: [1] }), /pong.nonce/],
    [JSON.stringify({ type: 'join-requests-refused', count: 0 }), /join-requests-refused.count/],
    [JSON.stringify({ type: 'join-requests-refused', count: 1.5 }), /join-requests-refused.count/],
    [JSON.stringify({ type: 'error', code: 'x'.repeat(33), message: 'm', hint: 'h' }), /error.code/],
    // invite: the token is of the token alphabet and length, the counts within 0-256, a known status
    [JSON.stringify({ type: 'invite', token: 'short', uses: 20, used: 0, expires_in_s: 1, status: 'open' }), /invite.token/],
    [JSON.stringify({ type: 'invite', token: 'a'.repeat(65), uses: 20, used: 0, expires_in_s: 1, status: 'open' }), /invite.token/],
    [JSON.stringify({ type: 'invite', token: null, uses: 0, used: 0, expires_in_s: 1, status: 'open' }), /invite.uses/],
    [JSON.stringify({ type: 'invite', token: null, uses: 257, used: 0, expires_in_s: 1, status: 'open' }), /invite.uses/],
    [JSON.stringify({ type: 'invite', token: null, uses: 2, used: -1, expires_in_s: 1, status: 'open' }), /invite.used/],
    [JSON.stringify({ type: 'invite', token: null, uses: 2, used: 0, expires_in_s: -1, status: 'open' }), /invite.expires_in_s/],
    [JSON.stringify({ type: 'invite', token: null, uses: 2, used: 0, expires_in_s: 1, status: 'gone' }), /invite.status/],
  ];
  for (const [raw, error] of bad) {
    assert.throws(() => S.parseServer(raw), (exc) => exc instanceof S.SignalingError && error.test(exc.message) && exc.hint.length > 0, String(raw));
  }
});

test('parseSignalData: descriptions and candidates, anything else refused', () => {
  assert.deepEqual(S.parseSignalData({ kind: 'answer', sdp: 'v=0' }), { kind: 'answer', sdp: 'v=0' });
  assert.deepEqual(S.parseSignalData({ kind: 'candidate', candidate: 'candidate:1 1 udp 1 10.0.0.1 9 typ host' }),
    { kind: 'candidate', candidate: 'candidate:1 1 udp 1 10.0.0.1 9 typ host', sdpMid: null, sdpMLineIndex: null });
  for (const [data, error] of [
    [null, /JSON object/], [{ kind: 'offer' }, /sdp/], [{ kind: 'offer', sdp: 'x'.repeat(S.MAX_SDP + 1) }, /sdp/],
    [{ kind: 'candidate', candidate: 5 }, /candidate/], [{ kind: 'candidate', candidate: 'c', sdpMid: 1 }, /sdpMid/],
    [{ kind: 'candidate', candidate: 'c', sdpMLineIndex: -1 }, /sdpMLineIndex/], [{ kind: 'bye' }, /kind must be one of/],
  ]) assert.throws(() => S.parseSignalData(data), error);
});

test('backoff: equal jitter within [cap/2, cap], doubling to the cap, reset; seeded jitter repeats', () => {
  const b = new S.Backoff({ initialMs: 100, maxMs: 1000, random: S.seededRandom(9) });
  const delays = Array.from({ length: 7 }, () => b.next());
  const caps = [100, 200, 400, 800, 1000, 1000, 1000];
  delays.forEach((d, i) => assert.ok(d >= caps[i] / 2 && d <= caps[i], `${i}: ${d}`));
  b.reset();
  assert.ok(b.next() <= 100);
  const again = new S.Backoff({ initialMs: 100, maxMs: 1000, random: S.seededRandom(9) });
  assert.deepEqual(Array.from({ length: 7 }, () => again.next()), delays);
  const r = S.seededRandom(3);
  for (let i = 0; i < 1000; i++) {
    const x = r();
    assert.ok(x >= 0 && x < 1);
  }
  assert.throws(() => new S.Backoff({ initialMs: 0 }), RangeError);
  assert.throws(() => new S.Backoff({ initialMs: 10, maxMs: 5 }), RangeError);
  assert.throws(() => new S.Backoff({ factor: 0.5 }), RangeError);
});

test('wsUrl maps page and server URLs to /ws with the room', () => {
  assert.equal(S.wsUrl('http://127.0.0.1:8787'), 'ws://127.0.0.1:8787/ws');
  assert.equal(S.wsUrl('https://x.hf.space/', 'room-42'), 'wss://x.hf.space/ws?room=room-42');
  assert.equal(S.wsUrl('ws://h:1/ws'), 'ws://h:1/ws');
});

test('signaling client: hello on open, reconnect with growing delays, final codes stop, close() stops', async () => {
  FakeWebSocket.all.length = 0;
  const c = new S.SignalingClient({ server: 'http://h:1', name: 'n', WebSocketImpl: FakeWebSocket,
    backoff: { initialMs: 4, maxMs: 16, random: () => 1 } });
  const states = [];
  const errors = [];
  c.addEventListener('state', (e) => states.push(e.detail));
  c.addEventListener('error', (e) => errors.push(e.detail));
  c.start();
  assert.throws(() => c.start(), /start\(\) in state connecting/);
  FakeWebSocket.all[0].open();
  assert.deepEqual(FakeWebSocket.all[0].sent[0], { type: 'hello', version: 1, name: 'n', device: { kind: 'browser' } });
  FakeWebSocket.all[0].receive(welcome('me', []));
  assert.equal(c.state, 'joined');
  FakeWebSocket.all[0].receive('{"type":"nonsense"}'); // reported, not dropped in silence
  assert.match(errors.at(-1).message, /unknown server message type/);
  // Lost three times in a row: 4, 8, 16 ms (random() = 1 takes the whole cap), then the cap.
  FakeWebSocket.all[0].closeWith(1006);
  for (let i = 1; i <= 3; i++) {
    await until(() => FakeWebSocket.all.length === i + 1, `attempt ${i}`);
    FakeWebSocket.all[i].closeWith(1006);
  }
  const waits = states.filter((s) => s.state === 'reconnecting').map((s) => s.delayMs);
  assert.deepEqual(waits, [4, 8, 16, 16]);
  await until(() => FakeWebSocket.all.length === 5, 'attempt 4');
  FakeWebSocket.all[4].open();
  FakeWebSocket.all[4].receive(welcome('me2', []));
  assert.equal(c.backoff.attempt, 0, 'admitted again: the backoff starts over');
  // A denied room request is final: no reconnect, an error for the page.
  FakeWebSocket.all[4].closeWith(4403, 'denied');
  assert.equal(c.state, 'failed');
  assert.match(errors.at(-1).message, /code 4403/);
  await sleep(30);
  assert.equal(FakeWebSocket.all.length, 5);
  // close() during a backoff wait cancels the reconnect.
  const d = new S.SignalingClient({ server: 'http://h:1', WebSocketImpl: FakeWebSocket, backoff: { initialMs: 5, maxMs: 5 } });
  d.start();
  FakeWebSocket.all.at(-1).closeWith(1001);
  assert.equal(d.state, 'reconnecting');
  const count = FakeWebSocket.all.length;
  d.close();
  await sleep(20);
  assert.equal(FakeWebSocket.all.length, count);
  assert.equal(d.state, 'closed');
});

// ---------------------------------------------------------------------------------------------
// mesh.js

test('who offers: the lower id offers, the higher answers; a second offer is ignored', async () => {
  const { mesh, ws, events } = newMesh();
  assert.equal(ws.sent[0].device.trickle, true, 'a page says it trickles');
  ws.receive(welcome('m', [peerInfo('a'), peerInfo('z', { kind: 'python' })]));
  await until(() => signals(ws, 'z').length === 0 && FakePC.all.length === 1, 'one connection');
  // 'm' < 'z': we offer to z; 'a' < 'm': a offers to us.
  const [pcZ] = FakePC.all;
  assert.deepEqual(pcZ.config, { iceServers: [], iceTransportPolicy: 'all' });
  assert.equal(pcZ.channels[0].label, CHANNEL_LABEL);
  assert.deepEqual(pcZ.channels[0].options, { ordered: true });
  // z is a Python peer (no trickle): the offer waits for gathering to complete.
  await sleep(5);
  assert.equal(signals(ws, 'z').length, 0, 'no description before gathering completes');
  pcZ.gathered(['candidate:1 1 udp 1 10.0.0.1 9 typ host']);
  await until(() => signals(ws, 'z').length === 1, 'offer to z');
  assert.deepEqual(signals(ws, 'z'), [{ kind: 'offer', sdp: 'v=0 offer +1' }]);
  // a (a browser) offers to us: we answer at once and trickle what we gather afterwards.
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'offer', sdp: 'remote' } });
  await until(() => signals(ws, 'a').length === 1, 'answer to a');
  const pcA = FakePC.all[1];
  assert.deepEqual(pcA.remote, [{ type: 'offer', sdp: 'remote' }]);
  pcA.gathered(['candidate:2 1 udp 1 10.0.0.1 10 typ host']);
  assert.deepEqual(signals(ws, 'a'), [{ kind: 'answer', sdp: 'v=0 answer' },
    { kind: 'candidate', candidate: 'candidate:2 1 udp 1 10.0.0.1 10 typ host', sdpMid: '0', sdpMLineIndex: 0 }]);
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'candidate', candidate: 'candidate:9', sdpMid: '0', sdpMLineIndex: 0 } });
  await until(() => pcA.candidates.length === 1, 'candidate applied');
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'offer', sdp: 'again' } });
  await sleep(5);
  assert.equal(FakePC.all.length, 2, 'a second offer makes no second connection');
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'sdp?' } });
  assert.match(events.find((e) => e.type === 'error').message, /a: relayed signal.data.kind/);
  // A peer higher than us joins later: we offer; one lower joins: we wait for its offer.
  ws.receive({ type: 'peer-joined', peer: peerInfo('n') });
  ws.receive({ type: 'peer-joined', peer: peerInfo('b') });
  await until(() => signals(ws, 'n').length === 1, 'offer to n (trickled: no wait)');
  assert.equal(signals(ws, 'b').length, 0);
  mesh.close();
});

async function openMeshWith(peer) {
  const env = newMesh();
  env.ws.receive(welcome('a', [peerInfo(peer)]));
  await until(() => FakePC.all.length === 1, 'connection');
  const channel = FakePC.all[0].channels[0];
  channel.open();
  await until(() => env.mesh.openPeers().length === 1, 'open');
  return { ...env, channel };
}

test('flow control: never more than HIGH_WATER + one frame buffered, order kept, resumes on low', async () => {
  const { mesh, channel } = await openMeshWith('b');
  assert.equal(channel.bufferedAmountLowThreshold, LOW_WATER);
  const payload = new Uint8Array(3 * 1024 * 1024).map((_, i) => (i * 31) & 0xff);
  const hello = M.message('hello', { version: 1, name: 'x', contract: 1 });
  assert.ok(mesh.sendMessage('b', hello));
  assert.ok(mesh.sendPayload('b', { kind: 3, step: 5, transfer: 1, payload }));
  assert.ok(mesh.sendMessage('b', '{"type":"leave","reason":"after the payload"}'));
  await until(() => channel.bufferedAmount > HIGH_WATER, 'the channel to fill');
  await sleep(10);
  const stalled = channel.sent.length;
  assert.ok(channel.bufferedAmount <= HIGH_WATER + F.MAX_FRAME_BYTES, `${channel.bufferedAmount} buffered`);
  assert.ok(mesh.buffered('b') > HIGH_WATER);
  channel.drain(channel.bufferedAmount - LOW_WATER - 1); // above the threshold: no event yet
  await sleep(10);
  assert.equal(channel.sent.length, stalled, 'nothing sent before bufferedamountlow');
  const deadline = Date.now() + 5000;
  while (!(typeof channel.sent.at(-1) === 'string' && channel.sent.length > 2)) {
    assert.ok(Date.now() < deadline, 'timed out draining the channel');
    channel.drain(channel.bufferedAmount);
    await sleep(1);
  }
  assert.ok(channel.peak <= HIGH_WATER + F.MAX_FRAME_BYTES, `peak ${channel.peak}`);
  assert.equal(channel.sent[0], M.encode(hello));
  assert.equal(channel.sent.at(-1), '{"type":"leave","reason":"after the payload"}');
  const r = new F.Reassembler(() => payload.length);
  let out = null;
  for (const frame of channel.sent.slice(1, -1)) out = await r.feed(frame);
  assert.deepEqual(out.data, payload);
  assert.equal(mesh.sendMessage('nobody', hello), false, 'no channel, nothing queued');
  mesh.close();
});

test('effects from a protocol machine: send-message, send-payload (deflated), close', async () => {
  const { mesh, channel, events } = await openMeshWith('b');
  const payload = new Uint8Array(100_000).map((_, i) => i % 7);
  assert.ok(mesh.apply({ type: 'send-payload', peer: 'b', kind: 1, step: 2, round: 1, chunk: 3, transfer: 9, deflate: true, payload }));
  assert.ok(mesh.apply({ type: 'send-message', peer: 'b', message: M.message('leave', { reason: 'r' }) }));
  assert.equal(mesh.apply({ type: 'compute', step: 1 }), false);
  await until(() => channel.sent.length >= 2 && typeof channel.sent.at(-1) === 'string', 'sent');
  const frames = channel.sent.slice(0, -1);
  assert.ok(frames.every((f) => F.parseHeader(f).head.flags === F.FLAG_DEFLATE));
  const r = new F.Reassembler(() => payload.length);
  let out = null;
  for (const f of frames) out = await r.feed(f);
  assert.deepEqual({ ...out, data: null }, { kind: 1, step: 2, round: 1, chunk: 3, data: null });
  assert.deepEqual(out.data, payload);
  assert.ok(mesh.apply({ type: 'close', peer: 'b' }));
  assert.deepEqual(events.filter((e) => e.type === 'channel-closed'), [{ type: 'channel-closed', peer: 'b' }]);
  assert.equal(mesh.sendMessage('b', 'x'), false);
});

test('incoming text and binary become message and frame events; nothing after close', async () => {
  const { mesh, channel, events } = await openMeshWith('b');
  channel.dispatchEvent(Object.assign(new Event('message'), { data: '{"type":"x"}' }));
  channel.dispatchEvent(Object.assign(new Event('message'), { data: new Uint8Array([1, 2]).buffer }));
  channel.readyState = 'closed';
  channel.dispatchEvent(new Event('close'));
  channel.dispatchEvent(Object.assign(new Event('message'), { data: 'late' }));
  assert.deepEqual(events.filter((e) => e.type === 'message').map((e) => e.data), ['{"type":"x"}']);
  assert.deepEqual(events.filter((e) => e.type === 'frame').map((e) => [...e.data]), [[1, 2]]);
  assert.equal(channel.binaryType, 'arraybuffer');
  mesh.close();
});

test('peer-left waits for an open channel up to the grace, at once when it closes', async () => {
  const { mesh, ws, channel, events } = await openMeshWith('b');
  ws.receive({ type: 'peer-left', peer: 'b' });
  await sleep(10);
  assert.equal(events.filter((e) => e.type === 'peer-left').length, 0, 'held for the grace');
  await until(() => events.some((e) => e.type === 'peer-left'), 'peer-left after the grace');
  assert.ok(FakePC.all[0].closed);
  // With the channel closing first, peer-left follows the close at once.
  const second = await openMeshWith('c');
  second.ws.receive({ type: 'peer-left', peer: 'c' });
  second.channel.dispatchEvent(new Event('close'));
  const types = second.events.map((e) => e.type).filter((t) => t === 'peer-left' || t === 'channel-closed');
  assert.deepEqual(types, ['channel-closed', 'peer-left']);
  mesh.close();
  second.mesh.close();
  assert.equal(channel.readyState, 'open'); // the fake's own state: closing is the pc's business
});

test('a reconnect is a new identity: the old links close and the group is met again', async () => {
  const { mesh, ws, events } = await openMeshWith('b');
  ws.closeWith(1001, 'server shutting down');
  assert.match(events.find((e) => e.type === 'error').message, /signaling lost: .*1001.*reconnecting in/);
  await until(() => FakeWebSocket.all.length === 2, 'reconnect');
  const ws2 = FakeWebSocket.all[1];
  ws2.open();
  ws2.receive(welcome('a2', [peerInfo('b')]));
  assert.ok(events.some((e) => e.type === 'channel-closed' && e.peer === 'b'));
  await until(() => FakePC.all.length === 2, 'a new connection to b');
  assert.equal(mesh.id, 'a2');
  mesh.close();
});

test('sessions: closeLinks keeps the signaling; offers until relink are kept and answered then', async () => {
  const { mesh, ws, events } = newMesh();
  const deferred = [];
  mesh.addEventListener('deferred', (e) => deferred.push(e.detail.peer));
  ws.receive(welcome('m', [peerInfo('a'), peerInfo('z')]));
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'offer', sdp: 'run1' } });
  await until(() => FakePC.all.length === 2, 'a link to z (offered) and to a (answered)');
  // Within one session a pair connects once: a's next offer is its next session's.
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'offer', sdp: 'early' } });
  await sleep(5);
  assert.equal(FakePC.all.length, 2);
  assert.deepEqual(deferred, ['a']);
  mesh.closeLinks();
  assert.ok(FakePC.all.every((pc) => pc.closed), 'every peer connection closed');
  assert.equal(ws.readyState, 1, 'the signaling connection stays open');
  // Between sessions: a's latest offer and the candidate trickled after it are kept.
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'offer', sdp: 'run2' } });
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'candidate', candidate: 'candidate:7', sdpMid: '0', sdpMLineIndex: 0 } });
  ws.receive({ type: 'peer-joined', peer: peerInfo('y') });
  await sleep(5);
  assert.equal(FakePC.all.length, 2, 'nothing is linked between sessions');
  assert.deepEqual(deferred, ['a', 'a']);
  mesh.relink();
  await until(() => FakePC.all.length === 5, 'a answered, z and y offered');
  const pcA = FakePC.all.find((pc, i) => i >= 2 && pc.remote.length === 1);
  assert.deepEqual(pcA.remote, [{ type: 'offer', sdp: 'run2' }], 'the latest kept offer is answered');
  await until(() => pcA.candidates.length === 1, 'the kept candidate applied');
  assert.equal(pcA.candidates[0].candidate, 'candidate:7');
  await until(() => signals(ws, 'y').length === 1 && signals(ws, 'z').length === 2, 'offers to y and z');
  mesh.relink(); // the session is open: nothing new
  await sleep(5);
  assert.equal(FakePC.all.length, 5);
  assert.equal(events.filter((e) => e.type === 'error').length, 0);
  mesh.close();
  assert.equal(ws.readyState, 3, 'close() ends the signaling connection too');
});

test('sessions: a kept offer from a peer that left is dropped', async () => {
  const { mesh, ws } = newMesh();
  ws.receive(welcome('m', [peerInfo('a')]));
  mesh.closeLinks();
  ws.receive({ type: 'signal', from: 'a', data: { kind: 'offer', sdp: 'run2' } });
  ws.receive({ type: 'peer-left', peer: 'a' });
  await sleep(5);
  mesh.relink();
  await sleep(5);
  assert.equal(FakePC.all.length, 0, 'no connection to a peer that left');
  mesh.close();
});

test('sessions: driven by a peer, a new identity closes the session until relink', async () => {
  const { mesh, ws } = await openMeshWith('b');
  mesh.sessions = true;
  ws.closeWith(1001, 'server shutting down');
  await until(() => FakeWebSocket.all.length === 2, 'reconnect');
  const ws2 = FakeWebSocket.all[1];
  ws2.open();
  ws2.receive(welcome('a2', [peerInfo('b')]));
  await sleep(5);
  assert.equal(FakePC.all.length, 1, 'the old run ends first: no link under the new id yet');
  assert.equal(mesh.session, 'closed');
  mesh.relink(); // the next session
  await until(() => FakePC.all.length === 2, 'the group met again under the new id');
  mesh.close();
});
