// The page at `/`: this device as a training peer (docs/USAGE.md, "Train from a browser").
//
// On load it fetches the tokenizer and the built-in corpus's token ids, chooses its compute
// backend by the training worker's rule (replica.js chooseBackend), joins its group (or
// ?room=CODE) and follows the first run a leader configures; "Lead a run" configures one. The
// status line says the phase, step, loss, hash and backend; every error (mesh, worker, run) is
// listed on the page with its hint. The full interface is a later issue: this is the minimum.
//
// Query: ?room=CODE, ?name=NAME, ?backend=auto|webgpu-dp4a|webgpu-lut|js-cpu (default auto),
// ?repair_after=S and ?step_timeout=S (protocol timers, seconds; for tests and slow devices).
// Tests import this module to reach `app` (the same instance the page runs).

import { Mesh } from './p2p/mesh.js';
import { BrowserPeer } from './p2p/peer.js';
import { WorkerReplica, chooseBackend } from './p2p/replica.js';
import { loadTokenizer } from './tokenizer.js';
import { fineWebFeed } from './p2p/datafeed.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

/** What the page built, for tests and the console: {mesh, peer, replica, selection}. */
export const app = { mesh: null, peer: null, replica: null, selection: null, errors: [] };

function showError(message, hint) {
  app.errors.push({ message, hint });
  const li = document.createElement('li');
  li.textContent = hint ? `${message} (${hint})` : message;
  $('errors').append(li);
  $('errors-section').hidden = false;
}

function setStatus(text) {
  $('status').textContent = text;
}

function timerParams() {
  const out = {};
  for (const [query, name] of [['repair_after', 'repair_after_s'], ['step_timeout', 'step_timeout_s']]) {
    const v = params.get(query);
    if (v !== null) out[name] = Number(v);
  }
  return out;
}

async function loadTokens(tokenizer) {
  const response = await fetch('/api/corpus/builtin');
  if (!response.ok) {
    throw Object.assign(new Error(`the training text could not be loaded: HTTP ${response.status}`),
      { hint: 'reload the page; if it persists, the server cannot tokenize its built-in corpus' });
  }
  const made = response.headers.get('X-DaisyChain-Tokenizer-SHA256');
  if (made !== tokenizer.sha256) {
    throw Object.assign(new Error(`the server's tokens were made with tokenizer ${String(made).slice(0, 12)}..., ` +
      `this page loaded ${tokenizer.sha256.slice(0, 12)}...`), { hint: 'reload the page (the server was updated)' });
  }
  const dtype = response.headers.get('X-DaisyChain-Token-Dtype');
  const bytes = await response.arrayBuffer();
  const Type = dtype === 'uint16' ? Uint16Array : dtype === 'uint32' ? Uint32Array : null;
  if (Type === null || bytes.byteLength % Type.BYTES_PER_ELEMENT !== 0) {
    throw Object.assign(new Error(`unexpected token data (${dtype}, ${bytes.byteLength} bytes)`),
      { hint: 'reload the page' });
  }
  return new Type(bytes); // little-endian, as every platform that runs this page stores it
}

const members = new Map();
function renderMembers() {
  $('members').replaceChildren(...[...members.values()].map((m) => {
    const li = document.createElement('li');
    li.textContent = `${m.name} (${m.device?.kind ?? 'device'})`;
    return li;
  }));
}

function renderStep(r) {
  $('step').textContent = String(r.step);
  $('loss').textContent = r.loss.toFixed(4);
  $('hash').textContent = r.hash.slice(0, 16);
  $('hash').title = r.hash;
  $('peers').textContent = String(r.roster.length);
  setStatus(`training: step ${r.step}, loss ${r.loss.toFixed(4)}, hash ${r.hash.slice(0, 12)}, ` +
    `${r.roster.length} peers, backend ${r.backend}`);
}

function wireJoinRequests(mesh) {
  mesh.addEventListener('server', (e) => {
    const m = e.detail.message;
    if (m.type === 'join-request') {
      const li = document.createElement('li');
      li.dataset.peer = m.peer.id;
      li.textContent = `${m.peer.name} asks to join `;
      for (const [label, act] of [['Approve', () => mesh.approve(m.peer.id)], ['Deny', () => mesh.deny(m.peer.id)]]) {
        const b = document.createElement('button');
        b.type = 'button';
        b.textContent = label;
        b.addEventListener('click', () => { act(); li.remove(); });
        li.append(b);
      }
      $('requests').append(li);
    } else if (m.type === 'join-request-closed') {
      $('requests').querySelector(`li[data-peer="${CSS.escape(m.peer)}"]`)?.remove();
    } else if (m.type === 'pending') {
      setStatus(m.message);
    } else if (m.type === 'denied') {
      showError(m.message, m.hint);
    } else if (m.type === 'peer-joined') {
      members.set(m.peer.id, m.peer);
      renderMembers();
    } else if (m.type === 'peer-left') {
      members.delete(m.peer);
      renderMembers();
    }
  });
}

function wireLeadForm(peer) {
  const form = $('lead');
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const num = (name) => (f.get(name) === '' || f.get(name) === null ? undefined : Number(f.get(name)));
    $('lead-button').disabled = true;
    try {
      await peer.lead({
        preset: f.get('preset'), steps: num('steps'), batch: num('batch'), seqLen: num('seq_len'),
        lr: num('lr'), seed: num('seed'), minPeers: num('min_peers'),
      });
      setStatus('leading: waiting for peers to be ready');
    } catch (exc) {
      showError(`cannot lead this run: ${exc.message}`, exc.hint);
      $('lead-button').disabled = false;
    }
  });
}

async function main() {
  const name = params.get('name') ?? '';
  setStatus('loading the tokenizer and the training text…');
  const tokenizer = await loadTokenizer('/luts/tokenizer.json');
  const tokens = await loadTokens(tokenizer);
  setStatus('choosing a compute backend (gates, probe, one timed step)…');
  const selection = await chooseBackend({
    backend: params.get('backend') ?? 'auto',
    onEvent: (e) => { if (e.kind === 'error') showError(e.message, e.hint); },
  });
  app.selection = selection;
  $('backend').textContent = selection.backend;
  $('backend').title = selection.choice?.reason ?? '';
  // Not errors: why the other backends are not used (no WebGPU here, a failed gate, slower).
  $('backend-note').textContent = [selection.choice?.reason ?? '',
    ...selection.demotions.map((d) => `${d.name} not used: ${d.reason}`)].filter(Boolean).join('; ');
  const mesh = new Mesh({
    server: location.origin, room: params.get('room'), name,
    device: { kind: 'browser', backend: selection.backend },
  });
  const replica = new WorkerReplica({
    tokenizerSha256: tokenizer.sha256, vocabSize: tokenizer.vocabSize, backend: selection.backend,
    onEvent: (e) => {
      if (e.kind === 'fallback') showError(`${e.from} failed: computing on ${e.to} from now on`, e.reason);
      else if (e.kind === 'device-lost') showError(`the GPU device was lost in step ${e.step}: ${e.reason}`, 'rebuilding it');
      else if (e.kind === 'error') showError(e.message, e.hint);
    },
  });
  // FineWeb-Edu runs too, when this page's server reads it at a pinned revision (/api/status).
  const data = await fineWebFeed(location.origin, tokenizer);
  const peer = new BrowserPeer({ mesh, replica, tokens, tokenizerSha256: tokenizer.sha256,
    vocabSize: tokenizer.vocabSize, name, timers: timerParams(), data });
  Object.assign(app, { mesh, peer, replica });

  mesh.addEventListener('error', (e) => showError(e.detail.message, e.detail.hint));
  mesh.addEventListener('welcome', (e) => {
    $('me').textContent = e.detail.id;
    for (const m of e.detail.members) members.set(m.id, m);
    renderMembers();
    setStatus('in the lobby: following the first run a leader starts, or lead one below');
    $('lead-button').disabled = false;
  });
  wireJoinRequests(mesh);
  peer.addEventListener('error', (e) => showError(e.detail.message, e.detail.hint));
  peer.addEventListener('phase', (e) => {
    $('phase').textContent = e.detail.phase;
    if (e.detail.phase !== 'lobby') $('lead-button').disabled = true;
    if (e.detail.phase === 'configured') setStatus('configured: preparing the replica and waiting for the first step');
  });
  peer.addEventListener('step', (e) => renderStep(e.detail));
  peer.addEventListener('finished', (e) => {
    const o = e.detail.outcome;
    $('phase').textContent = `stopped (${o.reason})`;
    setStatus(`run ended (${o.reason}) at step ${o.step}: ${o.message || 'done'}; reload the page to join the next run`);
    if (o.reason === 'fork' || o.reason === 'error') showError(`the run stopped: ${o.message}`, 'reload the page to join the next run');
  });
  wireLeadForm(peer);
  addEventListener('pagehide', () => peer.leave('the tab was closed'));
  mesh.start();
}

main().catch((exc) => {
  showError(`this page could not start: ${exc.message}`, exc.hint ?? 'reload the page');
  setStatus('not training: see the errors below');
});
