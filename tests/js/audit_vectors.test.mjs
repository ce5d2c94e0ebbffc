// Audits' building blocks in JavaScript (static/js/p2p/statements.js, auditkey.js, draw.js)
// against the golden cases of tests/vectors/audit/ (docs/TRUST.md), which the Python twin wrote:
// - every case gives the same bits, with Web Crypto and with it taken away (numerics/ed25519.js
//   and sha256.js, as on a plain-http LAN page);
// - every check fed a wrong input refuses it;
// - planted bugs (a byte-order slip, `2 s[a] >= s[j]` written `>`, ties broken by the last rank,
//   a seed without the nonces, a signature over a truncated statement, S >= L accepted, ...)
//   each fail the same checks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

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

// ---- planted bugs ---------------------------------------------------------------------------

/**
 * The module at `relative` (under static/js/) with the one occurrence of `from` replaced by
 * `to`, loaded as a data: URL (its relative imports made absolute).
 */
async function planted(relative, from, to) {
  const file = path.join(REPO, 'static', 'js', relative);
  const source = fs.readFileSync(file, 'utf-8');
  assert.equal(source.split(from).length, 2, `'${from}' must occur once in ${relative}`);
  const absolute = source.replace(from, to).replace(/from '(\.{1,2}\/[^']+)'/g,
    (_, rel) => `from '${pathToFileURL(path.resolve(path.dirname(file), rel)).href}'`);
  return import(`data:text/javascript,${encodeURIComponent(absolute).replace(/'/g, '%27')}`);
}

test('planted: an unchanged copy passes (the loading route is sound)', async () => {
  assert.deepEqual(await statementMismatches(await planted('p2p/statements.js', 'export const DIGEST', 'export const DIGEST'), STATEMENTS), []);
  assert.deepEqual(drawMismatches(await planted('p2p/draw.js', 'export const MAX_ONE_IN', 'export const MAX_ONE_IN'), DRAW), []);
});

for (const [what, from, to] of [
  ['the step written big-endian', 'setUint32(0, value, true)', 'setUint32(0, value, false)'],
  ['a share written big-endian', 'Uint8Array.of(share & 0xff, share >> 8)', 'Uint8Array.of(share >> 8, share & 0xff)'],
  ['seen without its magic', 'new Sha256().update(SEEN_MAGIC)', 'new Sha256()'],
  ['the private flag dropped', 'Uint8Array.of(s.private ? 1 : 0)', 'Uint8Array.of(0)'],
  ['an empty chunk hashed', 'payload.length ? sha256Bytes(payload) : ABSENT.slice()', 'sha256Bytes(payload)'],
  ['an audit\'s count left out', 'Uint8Array.of(s.digests.length),', ''],
  ['token ids big-endian', 'view.setInt32(4 * (r * width + i), v, true)', 'view.setInt32(4 * (r * width + i), v, false)'],
]) {
  test(`planted statement bug fails the vectors: ${what}`, async () => {
    assert.notDeepEqual(await statementMismatches(await planted('p2p/statements.js', from, to), STATEMENTS), []);
  });
}

for (const [what, from, to] of [
  ['2 s[a] > s[j]', '2 * shares[a] >= share', '2 * shares[a] > share'],
  ['ties broken by the last rank', 'shares[b] - shares[a] || a - b', 'shares[b] - shares[a] || b - a'],
  ['a seed without the nonces', 'for (const n of nonces) h.update(n);', ''],
  ['u read big-endian', '(d[0] | (d[1] << 8) | (d[2] << 16) | (d[3] << 24)) >>> 0', '((d[0] << 24) | (d[1] << 16) | (d[2] << 8) | d[3]) >>> 0'],
  ['a private contribution drawn', 'shares[j] > 0 && !flags[j]', 'shares[j] > 0'],
  ['assigned peers not skipped', 'contributors.filter((a) => !assigned.has(a))', 'contributors'],
  ['reductions not spread', 'const candidates = free.length ? free : others;', 'const candidates = others;'],
]) {
  test(`planted draw bug fails the vectors: ${what}`, async () => {
    assert.notDeepEqual(drawMismatches(await planted('p2p/draw.js', from, to), DRAW), []);
  });
}

// Not here: auditkey.js's own S < L check. numerics/ed25519.js checks it too, so removing either
// alone changes nothing; tests/js/ed25519.test.mjs plants it in ed25519.js's verify.
for (const [what, from, to] of [
  ['a signature over a truncated statement', 'return ed25519.sign(this._seed, statement);', 'return ed25519.sign(this._seed, statement.subarray(1));'],
  ['small-order keys accepted', "else if (!ed25519.inPrimeOrderGroup(point)) {", 'else if (false) {'],
  ['the key label left out', 'both.set(KEY_LABEL);', ''],
]) {
  test(`planted key bug fails (without Web Crypto): ${what}`, async () => {
    const mod = await planted('p2p/auditkey.js', from, to);
    assert.notDeepEqual(await withoutSubtle(() => keyMismatches(mod, KEYS)), []);
  });
}
