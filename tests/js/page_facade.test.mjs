// The page reads the run through one facade (static/js/p2p/peer.js BrowserPeer, the twin of
// node.py's Node properties; docs/JS_MIRROR.md, "The page"), and its panels keep one style:
//
// - the facade against a real protocol machine: a BrowserPeer on a scripted mesh with the trace
//   replica (as p2p_peer.test.mjs) leads a one-device run, and every getter says what the
//   machine says in the lobby (before and after the mesh is admitted), configured, training
//   and stopped, and after the run finished;
// - a static check of static/js/page/: no panel reads `.machine`, no file builds elements
//   other than through dom.js `h()` (no `function el(`, no document.createElement), every panel
//   is a `mount(root, page)` function with no class; shown firing on planted sources.
import { afterEach, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { BrowserPeer } from '../../static/js/p2p/peer.js';
import { DetailEvent } from '../../static/js/p2p/signaling.js';
import { TraceReplica } from './traces/trace_replica.js';
import { paramShapes } from '../../static/js/model/params.js';
import { chunkSlice } from '../../static/js/p2p/allreduce.js';
import { BLOCK, encode, nBlocks } from '../../static/js/p2p/codec.js';
import { REFERENCE_STEP_PROBE } from '../../static/js/gpu/probe.js';
import { REPO } from './helpers.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(predicate, what, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

/** A mesh with no other device: what the shell sends is dropped. */
class LoneMesh extends EventTarget {
  id = '';

  emit(type, detail) {
    this.dispatchEvent(new DetailEvent(type, detail));
  }

  apply() {
    return true;
  }

  buffered() {
    return 0;
  }

  openPeers() {
    return [];
  }

  closePeer() {}

  closeLinks() {}

  relink() {}
}

/** The trace replica (hash-defined state) with a gradient: zeros of the run's model size. */
class Replica extends TraceReplica {
  backend = 'js-cpu';
  worker = {}; // a replica with a worker holds a state the page may export

  async start(model, optim, seed) {
    this.model = model;
    await super.start(model, optim, seed);
  }

  async compute({ rank, shares }) {
    let n = 0;
    for (const shape of paramShapes(this.model).values()) n += shape.reduce((a, b) => a * b, 1);
    const flat = new Float32Array(nBlocks(n) * BLOCK); // zero-padded to whole blocks
    const payloads = [];
    for (let k = 0; k < shares.length; k++) {
      const [start, end] = chunkSlice(nBlocks(n), shares, k);
      payloads.push(start === end || shares[rank] === 0 ? new Uint8Array(0)
        : encode(flat.subarray(start, end)).payload);
    }
    return { loss: 7.5, payloads, probe: REFERENCE_STEP_PROBE, backend: this.backend, products: 0,
      ms: 1, gradMs: 1, count: shares[rank] };
  }

  close() {}
}

const made = [];
afterEach(() => {
  for (const peer of made.splice(0)) peer.dispose();
});

/** Every facade read next to the machine's own state (null machine: the answers before it). */
function facadeOf(peer) {
  return {
    id: peer.id, admitted: peer.admitted, phase: peer.phase, inRun: peer.inRun,
    canLead: peer.canLead, config: peer.config, leader: peer.leader, isLeader: peer.isLeader,
    hasState: peer.hasState, gone: [...peer.gone], speeds: [...peer.speeds],
    privateDataPeers: [...peer.privateDataPeers],
  };
}

function machineOf(peer) {
  const m = peer.machine;
  return {
    id: m.id, phase: m.phase.phase, config: m.config, leader: m.leader, isLeader: m.isLeader,
    hasState: m.hasState, gone: [...m.peers.goneSet], speeds: [...m.leadership.speeds],
    privateDataPeers: [...m.privateDataPeers],
  };
}

function assertTracks(peer, when) {
  const f = facadeOf(peer);
  const m = machineOf(peer);
  for (const key of Object.keys(m)) assert.deepEqual(f[key], m[key], `${when}: ${key}`);
  assert.equal(f.admitted, true, `${when}: admitted`);
  assert.equal(f.inRun, peer.outcome === null && ['configured', 'training'].includes(m.phase),
    `${when}: inRun`);
  assert.equal(f.canLead, peer.outcome === null && m.phase === 'lobby', `${when}: canLead`);
  return f;
}

test('the facade tracks the machine: lobby -> configured -> training -> stopped -> finished', async () => {
  const mesh = new LoneMesh();
  const peer = new BrowserPeer({
    mesh, replica: new Replica(), tokens: new Uint16Array(4096), tokenizerSha256: 'ab'.repeat(32),
    vocabSize: 2048, name: 'tab', clock: () => 1, log: () => {},
  });
  made.push(peer);
  const steps = [];
  peer.addEventListener('step', (e) => steps.push(e.detail));

  // Not admitted: no machine yet; the facade answers for it.
  assert.equal(peer.machine, null);
  assert.deepEqual(facadeOf(peer), {
    id: '', admitted: false, phase: 'lobby', inRun: false, canLead: false, config: null,
    leader: null, isLeader: false, hasState: false, gone: [], speeds: [], privateDataPeers: [],
  });
  assert.deepEqual(peer.agreement(1), [0, 0]);
  assert.equal(peer.tally(1, 0, ['A']), null);

  mesh.emit('welcome', { id: 'A', role: 'member', members: [] });
  let f = assertTracks(peer, 'lobby');
  assert.deepEqual([f.phase, f.inRun, f.canLead, f.config, f.leader, f.hasState],
    ['lobby', false, true, null, null, false]);

  // Configured: the leader waits for a second device (minPeers 2), so the run cannot start.
  const config = await peer.lead({ preset: 'tiny', steps: 3, batch: 1, seqLen: 32, minPeers: 2 });
  await until(() => peer.phase === 'configured', 'configured');
  f = assertTracks(peer, 'configured');
  assert.deepEqual([f.inRun, f.canLead, f.config.run, f.leader, f.isLeader, f.hasState],
    [true, false, config.run, 'A', true, true]);
  peer.dispose();

  // Training: a one-device run (minPeers 1) on a fresh peer of the same mesh.
  const second = new BrowserPeer({
    mesh: Object.assign(mesh, { id: 'A' }), replica: new Replica(), tokens: new Uint16Array(4096),
    tokenizerSha256: 'ab'.repeat(32), vocabSize: 2048, name: 'tab', clock: () => 1, log: () => {},
  });
  made.push(second);
  second.addEventListener('step', (e) => steps.push(e.detail));
  const phases = [];
  second.addEventListener('phase', (e) => phases.push([e.detail.phase, second.inRun]));
  const finished = new Promise((resolve) => second.addEventListener('finished', (e) => resolve(e.detail)));
  await second.lead({ preset: 'tiny', steps: 1000, batch: 1, seqLen: 32, minPeers: 1 });
  await until(() => steps.length >= 1, 'the first step');
  f = assertTracks(second, 'training');
  assert.equal(f.phase, 'training');
  assert.deepEqual([f.inRun, f.canLead, f.leader, f.isLeader, f.hasState], [true, false, 'A', true, true]);
  const [r] = steps;
  // Protocol v2: the one device computes the whole global batch (1 sequence per device x at
  // least one device), its step record names the shares, and its measured seconds per sequence
  // (1 ms of gradient for 1 sequence) are what the machine keeps for the leader's next split.
  assert.equal(second.config.global_batch, 1);
  assert.deepEqual([r.shares, r.share, r.seqS], [[1], 1, 0.001]);
  // Later steps add the exchange's work of the step before (feeding the machine): never less.
  const speeds = [...second.speeds];
  assert.equal(speeds.length, 1);
  assert.equal(speeds[0][0], 'A');
  assert.ok(speeds[0][1] >= 0.001, `${speeds[0][1]}`);
  assert.deepEqual(second.agreement(r.step), second.machine.agreement(r.step));
  assert.deepEqual(second.agreement(r.step), [1, 1], 'our own hash agrees with itself');
  const tally = second.tally(r.step, r.round, r.roster);
  assert.deepEqual(tally, second.machine.tally(r.step, r.round, r.roster));
  assert.deepEqual([tally.same, tally.differ, tally.missing], [['A'], [], []]);

  // Stopped: the leader ends the run at the next boundary; inRun turns false with the phase.
  second.endRun('the test ended it');
  const { outcome } = await finished;
  assert.equal(outcome.reason, 'leader-request');
  f = assertTracks(second, 'finished');
  assert.deepEqual([f.phase, f.inRun, f.canLead, f.leader, f.hasState], ['stopped', false, false, 'A', true]);
  // (a one-device run goes from the lobby to training in one input: one phase event)
  assert.deepEqual(phases, [['training', true], ['stopped', false]],
    'each phase event sees the facade already at that phase');
  assert.equal(second.records.length, outcome.step, 'a record per applied step');
});

// -- the static check ---------------------------------------------------------------------------

const PAGE = path.join(REPO, 'static', 'js', 'page');

/** What breaks the page's rules in `sources` ({file: text}): a list of "file: why". */
export function pageViolations(sources) {
  const out = [];
  for (const [file, text] of Object.entries(sources)) {
    const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
    if (/\.machine\b/.test(code)) out.push(`${file}: reads .machine (use the peer's facade)`);
    if (/function\s+el\s*\(|\bconst\s+el\s*=\s*\(/.test(code)) out.push(`${file}: defines its own element builder`);
    if (file !== 'dom.js' && /document\s*\.\s*createElement\s*\(/.test(code)) {
      out.push(`${file}: builds elements without dom.js h()`);
    }
    if (/export\s+function\s+mount\s*\(/.test(code)) {
      if (!/export\s+function\s+mount\s*\(\s*root\s*,\s*page\s*\)/.test(code)) {
        out.push(`${file}: mount is not mount(root, page)`);
      }
      if (/\bclass\s+\w+/.test(code)) out.push(`${file}: a panel defined as a class`);
    }
  }
  return out;
}

function pageSources() {
  return Object.fromEntries(readdirSync(PAGE).filter((n) => n.endsWith('.js'))
    .map((n) => [n, readFileSync(path.join(PAGE, n), 'utf8')]));
}

test('static/js/page/ reads only the facade, builds with h(), and mounts one way', () => {
  const sources = pageSources();
  assert.ok(Object.keys(sources).length >= 10, 'the page modules are there');
  const panels = Object.keys(sources).filter((f) => /export function mount\(root, page\)/.test(sources[f]));
  assert.deepEqual(panels.sort(),
    ['awake.js', 'group.js', 'keep.js', 'lead.js', 'live.js', 'privatetext.js', 'problems.js',
      'readiness.js', 'use.js']);
  assert.deepEqual(pageViolations(sources), []);
});

test('the static check fires on planted sources', () => {
  const planted = {
    'reach.js': "export function mount(root, page) {\n  const c = page.peer?.machine?.config;\n}\n",
    'builder.js': 'function el(tag, attrs = {}, text = "") {\n  return null;\n}\n',
    'arrow.js': 'const el = (tag) => h(tag);\n',
    'raw.js': "const tr = document.createElement('tr');\n",
    'klass.js': 'class UsePanel {}\nexport function mount(root, page) {\n  return new UsePanel();\n}\n',
    'arity.js': 'export function mount(root) {}\n',
    'fine.js': '// peer.machine is named in a comment only\nimport { h } from "./dom.js";\n' +
      'export function mount(root, page) {\n  root.append(h("p", { text: page.peer.phase }));\n}\n',
  };
  assert.deepEqual(pageViolations(planted), [
    "reach.js: reads .machine (use the peer's facade)",
    'builder.js: defines its own element builder',
    'arrow.js: defines its own element builder',
    'raw.js: builds elements without dom.js h()',
    'klass.js: a panel defined as a class',
    'arity.js: mount is not mount(root, page)',
  ]);
  // And on the real tree with one line planted in a panel.
  const sources = pageSources();
  sources['keep.js'] = sources['keep.js'].replace('p.hasState', 'p.machine.hasState');
  assert.deepEqual(pageViolations(sources), ["keep.js: reads .machine (use the peer's facade)"]);
});
