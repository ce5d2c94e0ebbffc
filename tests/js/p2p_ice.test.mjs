// ICE servers in the browser (static/js/p2p/ice.js, signaling.js, mesh.js) without a browser:
// the welcome's ice_servers and ice_transport_policy are checked and become the
// RTCPeerConnection configuration, the page's own settings override them, a malformed entry is
// refused with a hint, and relay with no TURN server is an error the page sees. (A real TURN
// relay with Chromium: tests/p2p/test_ice.py.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as S from '../../static/js/p2p/signaling.js';
import { isIceUrl } from '../../static/js/p2p/ice.js';
import { Mesh } from '../../static/js/p2p/mesh.js';

const TURN = 'turn:10.231.0.1:3478?transport=udp';
const welcome = (extra = {}) => ({
  type: 'welcome', version: 1, id: 'm', group: { kind: 'local', id: 'g' }, role: 'member',
  host: null, members: [{ id: 'z', name: 'z', device: { kind: 'python' } }], ...extra,
});

class FakeWebSocket {
  static last = null;
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    FakeWebSocket.last = this;
  }
  send(text) {
    this.sent.push(JSON.parse(text));
  }
  close() {
    this.readyState = 3;
  }
}

class FakePC extends EventTarget {
  static all = [];
  constructor(config) {
    super();
    this.config = config;
    FakePC.all.push(this);
  }
  createDataChannel(label) {
    const ch = new EventTarget();
    Object.assign(ch, { label, readyState: 'connecting', bufferedAmount: 0 });
    return ch;
  }
  async createOffer() {
    return { type: 'offer', sdp: 'v=0' };
  }
  async setLocalDescription(d) {
    this.localDescription = d;
    this.iceGatheringState = 'complete'; // no gathering wait: the description goes out at once
  }
  close() {}
}

/** A mesh that received `msg` as its welcome; the config of its one connection and its errors. */
function meshAfter(msg, options = {}) {
  FakePC.all.length = 0;
  const mesh = new Mesh({
    server: 'http://127.0.0.1:8787', RTCPeerConnectionImpl: FakePC, WebSocketImpl: FakeWebSocket,
    log: () => {}, ...options,
  });
  const errors = [];
  mesh.addEventListener('error', (e) => errors.push(e.detail));
  const warn = console.warn;
  console.warn = () => {};
  try {
    mesh.start();
    FakeWebSocket.last.readyState = 1;
    FakeWebSocket.last.onopen?.();
    FakeWebSocket.last.onmessage({ data: JSON.stringify(msg) });
  } finally {
    console.warn = warn;
  }
  mesh.close();
  return { config: FakePC.all[0]?.config, errors };
}

test('URL shapes: the forms the server accepts pass, others do not', () => {
  for (const ok of ['stun:stun.example.org', 'stun:192.0.2.1:3479', TURN, 'turn:h?transport=tcp',
    'turns:h.example.org:443?transport=tcp', 'turn:[2001:db8::1]:3478']) {
    assert.ok(isIceUrl(ok), ok);
  }
  for (const bad of ['', 'turn://h', 'stuns:h', 'http://h', 'stun:h?transport=udp', 'turns:h?transport=udp',
    'turn:h:0', 'turn:h:70000', 'turn:u@h', 'turn:h?transport=sctp', 'turn:h/x', 7, null, `turn:${'a'.repeat(300)}`]) {
    assert.ok(!isIceUrl(bad), String(bad));
  }
});

test('a welcome without ICE fields means none and "all"; one with them is parsed to RTCIceServer objects', () => {
  const none = S.parseServer(JSON.stringify(welcome()));
  assert.deepEqual([none.ice_servers, none.ice_transport_policy], [[], 'all']);
  const got = S.parseServer(JSON.stringify(welcome({
    ice_servers: [{ urls: ['stun:s.example.org'], username: null, credential: null },
      { urls: [TURN], username: 'u', credential: 'p' }],
    ice_transport_policy: 'relay',
  })));
  // null credentials are left out: WebIDL would make the string "null" of them.
  assert.deepEqual(got.ice_servers, [{ urls: ['stun:s.example.org'] }, { urls: [TURN], username: 'u', credential: 'p' }]);
  assert.equal(got.ice_transport_policy, 'relay');
});

test('a malformed welcome.ice_servers or policy is refused with a hint', () => {
  const cases = [
    [{ ice_servers: { urls: [TURN] } }, /welcome\.ice_servers must be a list/],
    [{ ice_servers: [{ urls: [] }] }, /urls must be a list of 1-8/],
    [{ ice_servers: [{ urls: ['turn://h'] }] }, /urls must be a list of 1-8 STUN\/TURN URLs/],
    [{ ice_servers: [{ urls: [TURN], username: 5 }] }, /username must be/],
    [{ ice_servers: ['turn:h'] }, /an ICE server/],
    [{ ice_servers: Array(9).fill({ urls: [TURN] }) }, /at most 8/],
    [{ ice_transport_policy: 'none' }, /ice_transport_policy must be one of all, relay/],
  ];
  for (const [extra, pattern] of cases) {
    assert.throws(() => S.parseServer(JSON.stringify(welcome(extra))), (exc) => {
      assert.ok(exc instanceof S.SignalingError);
      assert.match(exc.message, pattern);
      assert.ok(exc.hint.length > 0);
      return true;
    });
  }
});

test('the mesh builds its connections from the welcome, unless the page gives its own', () => {
  const servers = [{ urls: [TURN], username: 'u', credential: 'p' }];
  const none = meshAfter(welcome());
  assert.deepEqual(none.config, { iceServers: [], iceTransportPolicy: 'all' });
  assert.deepEqual(none.errors, []);
  const relay = meshAfter(welcome({ ice_servers: servers, ice_transport_policy: 'relay' }));
  assert.deepEqual(relay.config, { iceServers: servers, iceTransportPolicy: 'relay' });
  assert.deepEqual(relay.errors, []);
  const own = [{ urls: ['turn:10.231.0.1:3479'], username: 'a', credential: 'b' }];
  const page = meshAfter(welcome({ ice_servers: servers }), { iceServers: own, iceTransportPolicy: 'relay' });
  assert.deepEqual(page.config, { iceServers: own, iceTransportPolicy: 'relay' });
  const policyOnly = meshAfter(welcome({ ice_servers: servers }), { iceTransportPolicy: 'relay' });
  assert.deepEqual(policyOnly.config, { iceServers: servers, iceTransportPolicy: 'relay' });
  const emptyOwn = meshAfter(welcome({ ice_servers: servers }), { iceServers: [] });
  assert.deepEqual(emptyOwn.config, { iceServers: [], iceTransportPolicy: 'all' });
});

test('relay with no TURN server is an error the page sees', () => {
  const stun = [{ urls: ['stun:s.example.org'] }];
  for (const [msg, options] of [[welcome({ ice_servers: stun, ice_transport_policy: 'relay' }), {}],
    [welcome(), { iceTransportPolicy: 'relay' }]]) {
    const { errors } = meshAfter(msg, options);
    assert.equal(errors.length, 1);
    assert.match(errors[0].message, /relay-only ICE was asked for but no TURN server is known/);
    assert.match(errors[0].hint, /turn:/);
  }
});
