// The mesh check page (tests/pages/mesh-check.html, a test page the server does not serve; the
// browser tests load it through tests/repo_route.py): a Mesh on this page's server, its state
// shown as it changes: the signaling state (also `body[data-signaling]`), one line per peer with
// its channel state (`li[data-peer][data-state]`) and every error event (`#errors li`). Tests
// import this module (/repo/tests/pages/check.js) to reach the same `mesh`, the `events` it
// recorded and the `inbox` of what arrived (text messages and frames, at most INBOX_BYTES).
//
// Query: ?room=CODE joins a room; ?name=NAME; ?seed=N makes the reconnect jitter reproducible.

import { Mesh } from '../../static/js/p2p/mesh.js';
import { seededRandom } from '../../static/js/p2p/signaling.js';

const params = new URLSearchParams(location.search);
const seed = params.get('seed');

/** Every event the mesh emitted, in order: {type, detail} (message and frame data left out). */
export const events = [];
/** What arrived on the channels, in order: {type: 'message' | 'frame', peer, data}. */
export const inbox = [];
const INBOX_BYTES = 16 * 1024 * 1024;
let inboxBytes = 0;

export const mesh = new Mesh({
  server: location.origin,
  room: params.get('room'),
  name: params.get('name') ?? '',
  backoff: { initialMs: 250, maxMs: 4000, random: seed === null ? Math.random : seededRandom(Number(seed)) },
});

const $ = (id) => document.getElementById(id);

function peerLine(peer) {
  let li = $('peers').querySelector(`li[data-peer="${CSS.escape(peer)}"]`);
  if (li === null) {
    li = document.createElement('li');
    li.dataset.peer = peer;
    $('peers').append(li);
  }
  return li;
}

function setPeer(peer, state) {
  const li = peerLine(peer);
  li.dataset.state = state;
  li.textContent = `${peer}: ${state}`;
}

for (const type of ['signaling', 'welcome', 'channel-open', 'channel-closed', 'peer-left', 'error']) {
  mesh.addEventListener(type, (e) => events.push({ type, detail: e.detail }));
}
for (const type of ['message', 'frame']) {
  mesh.addEventListener(type, (e) => {
    inboxBytes += e.detail.data.length;
    if (inboxBytes <= INBOX_BYTES) inbox.push({ type, peer: e.detail.peer, data: e.detail.data });
  });
}
mesh.addEventListener('signaling', (e) => {
  const { state, delayMs, reason } = e.detail;
  document.body.dataset.signaling = state;
  $('signaling').textContent = state === 'reconnecting' ?
    `reconnecting in ${(delayMs / 1000).toFixed(2)} s (${reason})` : state;
});
mesh.addEventListener('welcome', (e) => {
  $('me').textContent = `as ${e.detail.id} (${e.detail.role})`;
  for (const m of e.detail.members) setPeer(m.id, 'met');
});
mesh.addEventListener('server', (e) => {
  if (e.detail.message.type === 'peer-joined') setPeer(e.detail.message.peer.id, 'met');
});
mesh.addEventListener('channel-open', (e) => setPeer(e.detail.peer, 'open'));
mesh.addEventListener('channel-closed', (e) => setPeer(e.detail.peer, 'closed'));
mesh.addEventListener('peer-left', (e) => setPeer(e.detail.peer, 'left'));
mesh.addEventListener('error', (e) => {
  const li = document.createElement('li');
  li.className = 'error';
  li.textContent = `${e.detail.message} (${e.detail.hint})`;
  $('errors').append(li);
});

mesh.start();
