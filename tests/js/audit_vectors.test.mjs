// Audits' building blocks in JavaScript (static/js/p2p/statements.js, auditkey.js, draw.js)
// against the golden cases of tests/vectors/audit/ (docs/TRUST.md), which the Python twin wrote:
// - every case gives the same bits, with Web Crypto and with it taken away (numerics/ed25519.js
//   and sha256.js, as on a plain-http LAN page);
// - every check fed a wrong input refuses it;
// Planted bugs in these modules: tests/js/audit_planted.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { REPO } from './helpers.mjs';
import { drawMismatches, fromHex, keyMismatches, statementMismatches } from './audit_checks.mjs';
import * as st from '../../static/js/p2p/statements.js';
import * as ak from '../../static/js/p2p/auditkey.js';
import * as dr from '../../static/js/p2p/draw.js';
import { hashImplementation } from '../../static/js/numerics/hash.js';

const VECTORS = path.join(REPO, 'tests', 'vectors', 'audit');
const load = (name) => JSON.parse(fs.readFileSync(path.join(VECTORS, name), 'utf-8'));
const STATEMENTS = load('statements.json');
const KEYS = load('keys.json');
const DRAW = load('draw.json');

/** Runs `fn` with `crypto.subtle` taken away (an insecure page keeps getRandomValues). */
async function withoutSubtle(fn) {
  const saved = Object.getOwnPropertyDescriptor(globalThis, 'crypto');
  const real = globalThis.crypto;
  Object.defineProperty(globalThis, 'crypto', {
    value: { getRandomValues: (a) => real.getRandomValues(a) }, configurable: true, writable: true,
  });
  try {
    assert.equal(hashImplementation(), 'javascript');
    assert.equal(await ak.ed25519Implementation(), 'javascript');
    return await fn();
  } finally {
    if (saved) Object.defineProperty(globalThis, 'crypto', saved);
    else delete globalThis.crypto;
  }
}

test('Node has Web Crypto Ed25519: the first path is the native one', async () => {
  assert.equal(await ak.ed25519Implementation(), 'web-crypto');
});

test('statements match the vectors, with Web Crypto and without', async () => {
  assert.deepEqual(await statementMismatches(st, STATEMENTS), []);
  assert.deepEqual(await withoutSubtle(() => statementMismatches(st, STATEMENTS)), []);
});

test('keys and signatures match the vectors, with Web Crypto and without', async () => {
  assert.deepEqual(await keyMismatches(ak, KEYS), []);
  assert.deepEqual(await withoutSubtle(() => keyMismatches(ak, KEYS)), []);
});

test('the draw matches the vectors', () => {
  assert.deepEqual(drawMismatches(dr, DRAW), []);
});

test('a key made with Web Crypto signs what one made without verifies, and back', async () => {
  const secret = fromHex('11'.repeat(32));
  const msg = fromHex(STATEMENTS.statements[2].bytes);
  const native = await ak.SigningKey.fromSecret(secret);
  const plainKey = await withoutSubtle(() => ak.SigningKey.fromSecret(secret));
  assert.equal(native.publicHex, plainKey.publicHex);
  const s1 = await native.sign(msg);
  const s2 = await withoutSubtle(() => plainKey.sign(msg));
  assert.deepEqual(s1, s2);
  assert.ok(await withoutSubtle(() => ak.verify(native.public, msg, s1)));
  assert.ok(await ak.verify(plainKey.public, msg, s2));
});

// ---- every check fed a wrong input ----------------------------------------------------------

const HEAD = { run: '0123456789abcdef', step: 1, round: 0, author: 'A', roster: new Uint8Array(32) };
const D = new Uint8Array(32);
const reveal = (head) => st.encode({ kind: 3, head, nonce: D, seen: D });

test('a head with a wrong field is refused, naming it', () => {
  for (const [change, words] of [
    [{ run: '0123456789ABCDEF' }, /16 lowercase hex/],
    [{ run: '0'.repeat(15) }, /16 lowercase hex/],
    [{ step: -1 }, /step must be/],
    [{ step: 2 ** 32 }, /step must be/],
    [{ step: 1.5 }, /step must be/],
    [{ round: 256 }, /round must be/],
    [{ author: 'A'.repeat(13) }, /1 to 12 characters/],
    [{ author: 'a b' }, /peer id/],
    [{ author: '' }, /peer id/],
    [{ roster: new Uint8Array(31) }, /roster must be 32 bytes/],
  ]) {
    assert.throws(() => reveal({ ...HEAD, ...change }), (e) => e instanceof st.BadStatement && words.test(e.message),
      JSON.stringify(change));
  }
});

test('wrong bodies, rosters, rows, secrets and rates are refused', async () => {
  const bad = (fn, words) => assert.throws(fn, words);
  bad(() => st.encode({ kind: 1, head: HEAD, private: false, prev: D.subarray(1), nonceHash: D, data: D, chunks: [D] }), /prev must be 32 bytes/);
  bad(() => st.encode({ kind: 1, head: HEAD, private: false, prev: D, nonceHash: D, data: D, chunks: [] }), /chunks must be 1 to 64/);
  bad(() => st.encode({ kind: 1, head: HEAD, private: false, prev: D, nonceHash: D, data: D, chunks: new Array(65).fill(D) }), /chunks must be 1 to 64/);
  bad(() => st.encode({ kind: 2, head: HEAD, chunk: 256, digest: D }), /chunk must be an integer/);
  bad(() => st.encode({ kind: 4, head: HEAD, item: 2, index: 0, of: D, data: D, digests: [] }), /digests must be 1 to 64/);
  bad(() => st.encode(/** @type {any} */ ({ kind: 9, head: HEAD })), /unknown statement kind 9/);
  bad(() => st.nonceHash(new Uint8Array(5)), /nonce must be 32/);
  bad(() => st.rosterDigest([], []), /1 to 64 peers/);
  bad(() => st.rosterDigest(Array.from({ length: 65 }, (_, i) => `p${i}`), new Array(65).fill(1)), /1 to 64 peers/);
  bad(() => st.rosterDigest(['A', 'B'], [1]), /one share each/);
  bad(() => st.rosterDigest(['A', 'A'], [1, 1]), /distinct/);
  bad(() => st.rosterDigest(['A', 'B'], [1, 4097]), /share 1 must be an integer in \[0, 4096\]/);
  bad(() => st.nonce(new Uint8Array(31), '0123456789abcdef', 1, 0), /secret must be 32 bytes/);
  bad(() => ak.signingSeed(new Uint8Array(33)), /secret must be 32 bytes/);
  bad(() => dr.seed('0123456789abcdef', 1, 0, D, D, D, []), /nonces must be one/);
  bad(() => dr.audited(D, 0), /one_in must be an integer in \[1, 65536\]/);
  bad(() => dr.audited(D, 65537), /one_in must be an integer in \[1, 65536\]/);
  bad(() => dr.assign(D, [1, 1], { blocks: 4, audited: true, private: [false] }), /private flags/);
  bad(() => dr.seed('0123456789abcdef', 1, 0, D.subarray(1), D, D, [D]), /roster must be 32 bytes/);
  bad(() => dr.seed('0123456789abcdef', 1, 0, D, new Uint8Array(33), D, [D]), /prev must be 32 bytes/);
  bad(() => dr.seed('0123456789abcdef', 1, 0, D, D, new Uint8Array(0), [D]), /seen must be 32 bytes/);
  bad(() => dr.seed('0123456789abcdef', 1, 0, D, D, D, [D, D.subarray(1)]), /nonces must be one/);
  bad(() => dr.assign(D, [], { blocks: 4, audited: true }), /0 shares \(1 to 64\)/);
  bad(() => dr.assign(D, new Array(65).fill(1), { blocks: 4, audited: true }), /65 shares \(1 to 64\)/);
  bad(() => dr.assign(D, [1, 1], { blocks: 4, audited: true, carried: new Array(65).fill(1) }), /65 carried items \(at most 64\)/);
  bad(() => dr.assign(D, [1, 1], { blocks: 0, audited: true }), /0 blocks \(at least 1\)/);
  // no carried items unless given; a lone block makes one non-empty chunk
  const lone = dr.assign(D, [4, 4, 4], { blocks: 1, audited: true });
  assert.deepEqual([lone.carried.length, lone.reductions.length, lone.contributions.length], [0, 1, 3]);
  // the limits are inclusive: 64 peers and 64 carried items are a roster's most
  assert.equal(dr.assign(D, [1, 1], { blocks: 4, audited: false, carried: new Array(64).fill(1) }).carried.length, 64);
  assert.equal(dr.assign(D, new Array(64).fill(1), { blocks: 64, audited: true }).contributions.length, 64);
  await assert.rejects(st.dataDigest([[1]]), /at least one row of T \+ 1 >= 2/);
  await assert.rejects(st.dataDigest([[1, -2]]), /token ids must be integers/);
  for (const c of STATEMENTS.refused) {
    assert.throws(() => st.parse(fromHex(c.bytes)), st.BadStatement, c.what);
  }
});

test('the key refusals', () => {
  for (const [text, words] of [
    ['A'.repeat(64), /64 lowercase hex/], ['0'.repeat(63), /64 lowercase hex/], [7, /64 lowercase hex/],
    [`01${'0'.repeat(62)}`, /prime-order group/], [`02${'0'.repeat(62)}`, /canonical encoding/],
  ]) {
    assert.throws(() => ak.parsePublicKey(text), (e) => e instanceof ak.BadKey && words.test(e.message), String(text));
  }
  assert.throws(() => ak.checkPublicKey(new Uint8Array(31)), /32 bytes/);
  assert.deepEqual(ak.parsePublicKey(KEYS.keys[0].public), fromHex(KEYS.keys[0].public));
});

test('every flipped bit of a signature is refused, with Web Crypto and without', async () => {
  const k = await ak.SigningKey.fromSecret(fromHex(KEYS.keys[1].secret));
  const msg = fromHex(STATEMENTS.statements[0].bytes);
  const sig = await k.sign(msg);
  for (const verify of [(s) => ak.verify(k.public, msg, s), (s) => withoutSubtle(() => ak.verify(k.public, msg, s))]) {
    assert.ok(await verify(sig));
    for (let bit = 0; bit < 512; bit += 1) {
      const flipped = sig.slice();
      flipped[bit >> 3] ^= 1 << (bit & 7);
      assert.equal(await verify(flipped), false, `bit ${bit} flipped was accepted`);
    }
  }
  assert.equal(await ak.verify(k.public, msg.subarray(0, msg.length - 1), sig), false);
});

// ---- the edges StrykerJS found unpinned in statements.js (docs/TESTING.md) -------------------

test('edges: 64 digests are a statement\'s most, both ways; a header alone is its kind\'s refusal', () => {
  const chunks = new Array(64).fill(D);
  const c = st.encode({ kind: 1, head: HEAD, private: false, prev: D, nonceHash: D, data: D, chunks });
  assert.equal(/** @type {any} */ (st.parse(c)).chunks.length, 64);
  const a = st.encode({ kind: 4, head: HEAD, item: 1, index: 63, of: D, data: D, digests: chunks });
  assert.equal(/** @type {any} */ (st.parse(a)).digests.length, 64);
  const header = c.slice(0, st.HEADER);
  assert.throws(() => st.parse(header), /a contribution commit's body is 97 bytes/);
  const noCount = a.slice(0, st.HEADER + 67);
  noCount[st.HEADER + 66] = 0;
  assert.throws(() => st.parse(noCount), /an audit result has item 1 or 2/);
  const tooMany = new Uint8Array(st.HEADER + 67 + 65 * 32);
  tooMany.set(a.subarray(0, st.HEADER + 66));
  tooMany[st.HEADER + 66] = 65;
  assert.throws(() => st.parse(tooMany), /an audit result has item 1 or 2/);
});

test('edges: integers, ids and run ids of the wrong type or shape', async () => {
  for (const change of [{ round: 1.5 }, { round: -1 }, { author: /** @type {any} */ (5) },
    { run: /** @type {any} */ (1234567890123456) }, { run: '0123456789abcdef0' }, { run: 'x0123456789abcdef' }]) {
    assert.throws(() => reveal({ ...HEAD, ...change }), st.BadStatement, JSON.stringify(change));
  }
  assert.throws(() => st.encode({ kind: 2, head: HEAD, chunk: -1, digest: D }), /chunk must be an integer/);
  assert.throws(() => st.rosterDigest(['A', 'B'], [1, 1.5]), /share 1 must be an integer/);
  assert.throws(() => st.rosterDigest(['A', 'B'], [1, -1]), /share 1 must be an integer/);
  await assert.rejects(st.dataDigest([]), /at least one row/);
  await assert.rejects(st.dataDigest([[1, 2], [1, 2, 3]]), /every row as long/);
  await assert.rejects(st.dataDigest([[1, 2 ** 31]]), /token ids must be integers/);
  assert.deepEqual([st.Kind.CONTRIBUTION, st.Kind.REDUCED, st.Kind.REVEAL, st.Kind.AUDIT], [1, 2, 3, 4]);
  assert.deepEqual([st.Item.CONTRIBUTION, st.Item.REDUCTION], [1, 2]);
});

test('edges: digests handed out are copies; seen without carried items; statementHash is SHA-256', async () => {
  const absent = await st.chunkDigest(new Uint8Array(0));
  absent[0] = 1;
  assert.deepEqual(st.ABSENT, new Uint8Array(32));
  const s = fromHex(STATEMENTS.statements[0].bytes);
  assert.deepEqual(st.seen([s], []), st.seen([s], [], []));
  const { createHash } = await import('node:crypto');
  assert.deepEqual(st.statementHash(s), new Uint8Array(createHash('sha256').update(s).digest()));
});
