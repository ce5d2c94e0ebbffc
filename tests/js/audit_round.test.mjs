// The audit round in JavaScript (static/js/p2p/machine/audit.js) replaying every case of
// tests/vectors/audit/rounds.json, which the Python twin wrote (tests/audit_round_vectors.py):
// each peer's round is made from the case's setup and fed the same events; every answer (each
// decision as one line, or the refusal's code) and the state after each event must be the
// Python round's, byte for byte (statements and Ed25519 signatures included). Planted bugs: a
// rule removed from the source is loaded as a module and must fail a case.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { REPO } from './helpers.mjs';
import * as real from '../../static/js/p2p/machine/audit.js';

const FILE = path.join(REPO, 'tests', 'vectors', 'audit', 'rounds.json');
const ROUNDS = JSON.parse(fs.readFileSync(FILE, 'utf-8'));
const SOURCE = path.join(REPO, 'static', 'js', 'p2p', 'machine', 'audit.js');

const fromHex = (/** @type {string} */ h) => Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
const hex = (/** @type {Uint8Array} */ b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
const signed = (/** @type {{statement: string, sig: string}} */ s) => ({ statement: fromHex(s.statement), sig: fromHex(s.sig) });

/** A decision as the generator's one line. */
function line(d) {
  switch (d.type) {
    case 'send': {
      const extra = d.audited ? ` audited ${hex(d.audited.statement)} ${hex(d.audited.sig)}` : '';
      return `send ${hex(d.signed.statement)} ${hex(d.signed.sig)}${extra}`;
    }
    case 'recompute':
      return `recompute ${hex(d.of)} ${d.item} ${d.index} ${d.author} ${d.round} ${d.rank} ${d.shares.join(',')} ${d.why}`;
    case 'ask':
      return `ask ${d.peer}`;
    case 'proof':
      return `proof ${d.kind} ${hex(d.first.statement)} ${hex(d.first.sig)} ${hex(d.second.statement)} ${hex(d.second.sig)}`;
    case 'concluded':
      return `concluded ${d.item} ${d.index} ${d.author} ${d.auditor} ${d.result}`;
    case 'proven':
      return `proven ${d.peer} ${d.kind} ${d.by}`;
    default:
      return `refuse ${d.peer} ${d.code}`;
  }
}

function state(r) {
  return {
    phase: r.phase,
    waiting_for: [...r.waitingFor()].sort(),
    proven: [...r.proven.values()].map((p) => `${p.peer} ${p.kind} ${p.by}`).sort(),
    may_apply: r.mayApply,
    seed: r.seed ? hex(r.seed) : '',
  };
}

function make(mod, s) {
  return new mod.AuditRound({
    run: s.run, step: s.step, round: s.round, peers: s.peers, shares: s.shares, blocks: s.blocks, me: s.me,
    secret: fromHex(s.secret), prev: fromHex(s.prev), oneIn: s.one_in,
    keys: new Map(Object.entries(s.keys).map(([p, k]) => [p, fromHex(k)])), private: s.private,
    carry: s.carry,
  });
}

function feed(r, e) {
  switch (e.event) {
    case 'commit':
      return r.commitContribution(e.chunks.map(fromHex), fromHex(e.data), { privateData: e.private, now: e.now });
    case 'commit-reduced':
      return r.commitReduced(fromHex(e.digest), e.now);
    case 'receive':
      return r.receive(signed(e), e.sender, e.now, { relayed: e.relayed });
    case 'proof':
      return r.receiveProof(e.kind, signed(e.first), signed(e.second), e.sender, e.now);
    case 'recomputed':
      return r.recomputed(fromHex(e.of), e.digests.map(fromHex), fromHex(e.data), e.now);
    case 'cancel':
      r.cancel(e.now);
      return [];
    default:
      throw new Error(`unknown event ${e.event}`);
  }
}

/** Replays one peer's events; throws an AssertionError at the first difference. */
function replay(mod, peer, where) {
  const r = make(mod, peer.setup);
  peer.events.forEach((e, i) => {
    const at = `${where} event ${i} (${e.event})`;
    let answer;
    try {
      answer = { decisions: feed(r, e).map(line) };
    } catch (err) {
      if (err instanceof mod.AuditRefused) answer = { refused: err.code };
      else if (err instanceof RangeError && e.answer.error) answer = { error: e.answer.error };
      else throw err;
    }
    assert.deepEqual(answer, e.answer, at);
    assert.deepEqual(state(r), e.state, at);
  });
}

function replayAll(mod) {
  for (const c of ROUNDS.cases) {
    for (const peer of c.peers) replay(mod, peer, `${c.scenario} at ${peer.setup.me}`);
  }
}

test('rounds.json holds every case the generator writes', () => {
  assert.equal(ROUNDS.format_version, 1);
  const names = ROUNDS.cases.map((c) => c.scenario);
  for (const want of ['honest_not_audited', 'honest_audited', 'caught_liar', 'liar_leader', 'false_accusation',
    'equivocation', 'bad_reveal', 'withheld_reveal', 'withheld_audit', 'carried_late', 'refuse_wrong_signature',
    'refuse_audit_from_unassigned']) {
    assert.ok(names.includes(want), want);
  }
  const events = ROUNDS.cases.flatMap((c) => c.peers.flatMap((p) => p.events));
  assert.ok(events.some((e) => e.answer.refused) && events.some((e) => e.state.phase === 'settled'));
});

for (const c of ROUNDS.cases) {
  test(`replays ${c.scenario}`, () => {
    for (const peer of c.peers) replay(real, peer, `${c.scenario} at ${peer.setup.me}`);
  });
}

// -- planted bugs: each rule removed once must fail a case

// encodeURIComponent leaves ' alone, and these URLs sit inside quoted import specifiers
const dataUrl = (source) => `data:text/javascript,${encodeURIComponent(source).replace(/'/g, '%27')}`;

/** audit.js with the one occurrence of `old` replaced, loaded as a data: URL (its relative
 * imports made absolute, so it shares the real building blocks). */
async function mutant(old, replacement) {
  const source = fs.readFileSync(SOURCE, 'utf-8');
  assert.equal(source.split(old).length, 2, `${old} must occur once in audit.js`);
  const absolute = source.replace(old, replacement).replace(/from '(\.{1,2}\/[^']+)'/g,
    (_, rel) => `from '${pathToFileURL(path.resolve(path.dirname(SOURCE), rel)).href}'`);
  return import(dataUrl(absolute));
}

test('planted: an unchanged copy replays every case (the loading route is sound)', async () => {
  replayAll(await mutant('export const MAX_ITEMS', 'export const MAX_ITEMS'));
});

const PLANTS = [
  ['signatures not verified', 'if (!verifies(key, signed.statement, signed.sig)) {', 'if (false) {'],
  ['a statement taken from a peer other than its author', 'if (author !== sender && !relayed) {', 'if (false) {'],
  ['the roster digest not compared', 'if (!same(s.head.roster, ctx.digest)) {', 'if (false) {'],
  ['prev not compared', 'if (!same(s.prev, this.prev)) {', 'if (false) {'],
  ['the chunk layout not checked', 'if (absent(c.chunks[k]) !== want) {', 'if (false) {'],
  ['private data accepted in a run that refuses it', "if (s.private && this.policy === 'refuse') {", 'if (false) {'],
  ['an audit from a peer not assigned the item', 'if (item.auditor !== a.head.author) {', 'if (false) {'],
  ['a reveal sent before every commit', 'this._missingStatements().size === 0', 'this.commits.has(this.rank)'],
  ['a draw without seen-agree', 'const differ = this.peers.filter((_, j) => !same(reveal(j).seen, seen));', 'const differ = [];'],
  ['equivocation not looked for', 'if (same(held.statement, signed.statement)) return null;', 'return null;'],
  ['a nonce not checked against its hash', '!same(st.nonceHash(r.nonce), c.nonceHash) && !this.proven', 'false && !this.proven'],
  ["a dispute settled by the accuser's word", "if (sameOutcome(own, /** @type {Outcome} */ (item.accusation))) {", 'if (true) {'],
  ['settled at the first verdict', '.every((i) => i.result !== null || this.proven.has(i.auditor))', '.every(() => true)'],
  ['a private contribution drawn', 'private: priv, carried: carriedShares', 'carried: carriedShares'],
  ['a proof of another step taken', '!thisStep(a) || !thisStep(b)', '!thisStep(a)'],
  ['a fork declared before the signature is checked', '    this._verify(signed, author);\n    if (s.head.run', '    if (s.head.run'],
  ["another attempt's statement taken", 'if (s.head.run !== this.run || s.head.step !== this.step) {', 'if (false) {'],
  ['the data digest rule dropped', "if (absent(c.data) !== (share === 0 || c.private)) return", 'if (false) return'],
  ['a reduced commit of a chunk its author does not own', '(!this.chunks.includes(s.chunk) || ctx.peers[s.chunk] !== author)', 'false'],
  ["a held audit's refusal dropped", "out.push({ type: 'refuse', peer: sender, code: e.code, message: e.message });", ''],
  ['audit results held before the draw without a bound', '.length >= MAX_ITEMS) {', '.length < 0) {'],
  ['no check-yourself recomputation', "return [recompute(item, 'check')];", 'return [];'],
  ['a carried statement not awaited before the reveal', 'if (!this.carried.has(i)) out.add(c.peer);', ''],
  ['passed before every result', "[...this.items.values()].every((i) => i.result === 'pass')", 'true'],
];

for (const [what, old, replacement] of PLANTS) {
  test(`planted: ${what}`, async () => {
    const mod = await mutant(old, replacement);
    // a difference from the Python round, or a crash on the way to one (a reveal before every
    // commit has no seen to send); the unchanged copy above replays cleanly
    assert.throws(() => replayAll(mod), Error, what);
  });
}

test('a round is made only from a sound setup, and its own statements once each', () => {
  const peers = ['A', 'B', 'C'];
  const shares = [2, 2, 2];
  const good = { run: '0123456789abcdef', step: 1, round: 1, peers, shares, blocks: 6, me: 'A',
    secret: new Uint8Array(32).fill(7), prev: new Uint8Array(32).fill(1), oneIn: 16, keys: new Map() };
  const r = new real.AuditRound({ ...good, carry: [{ round: 0, peer: 'C', peers, shares }] });
  for (const [change, words] of [
    [{ me: 'Z' }, /not in the roster/],
    [{ oneIn: 0 }, /oneIn/],
    [{ oneIn: 65537 }, /oneIn/],
    [{ carry: [{ round: 1, peer: 'C', peers, shares }] }, /round is late/],
    [{ carry: [{ round: 0, peer: 'D', peers, shares }] }, /not in its roster/],
  ]) {
    assert.throws(() => new real.AuditRound({ ...good, ...change }), words);
  }
  const digest = (/** @type {number} */ k) => new Uint8Array(32).fill(k + 1);
  const absent = new Uint8Array(32);
  assert.throws(() => r.commitContribution([absent, absent, absent], digest(9), { privateData: false, now: 0 }), /digest/);
  r.commitContribution([digest(0), digest(1), digest(2)], digest(9), { privateData: false, now: 0 });
  assert.throws(() => r.commitContribution([digest(0), digest(1), digest(2)], digest(9), { privateData: false, now: 0 }),
    /committed already/);
  r.commitReduced(digest(3), 0);
  assert.throws(() => r.commitReduced(digest(3), 0), /no reduced commit/);
  assert.throws(() => r.recomputed(digest(4), [digest(5)], absent, 0), /no recomputation/);
  r.cancel(5);
  assert.equal(r.phase, 'cancelled');
  assert.throws(() => r._become('passed', 6), /cannot become/);
});
