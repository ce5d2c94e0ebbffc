// The project's own Ed25519 and SHA-512 (static/js/numerics/ed25519.js, sha512.js): what a page
// without Web Crypto signs and verifies audit statements with (docs/TRUST.md).
// - RFC 8032 section 7.1's test vectors, and 48 random keys and messages signed by Python's
//   `cryptography` (tests/vectors/audit/keys.json): the same public keys and signatures, and
//   every one verifies; SHA-512 equals hashlib's at every padding boundary;
// - it agrees with Node's Web Crypto (OpenSSL) on fresh random keys and messages, signatures
//   made by either verified by the other, and on forged ones refused by both;
// - "speed" prints the time of a signature and a verification (docs/TRUST.md, "Signing speed").
// Planted bugs in these modules: tests/js/audit_planted.test.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { REPO, testRng } from './helpers.mjs';
import { ed25519Mismatches, fromHex, hex } from './audit_checks.mjs';
import * as ed from '../../static/js/numerics/ed25519.js';
import * as sha from '../../static/js/numerics/sha512.js';

const KEYS = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'audit', 'keys.json'), 'utf-8'));
const PKCS8_PREFIX = fromHex('302e020100300506032b657004220420');

test('the cases: RFC 8032 7.1, cryptography on random keys, SHA-512 at every boundary', () => {
  assert.equal(KEYS.rfc8032.length, 4);
  assert.equal(KEYS.random.length, 48);
  assert.deepEqual(ed25519Mismatches(ed, sha, KEYS), []);
});

test('it agrees with Web Crypto (OpenSSL) on fresh random keys and messages', async () => {
  const rng = testRng(2024).uniform;
  const bytes = (n) => Uint8Array.from({ length: n }, () => Math.floor(rng() * 256));
  for (let i = 0; i < 40; i++) {
    const seed = bytes(32);
    const msg = bytes(Math.floor(rng() * 300));
    const pkcs8 = new Uint8Array(48);
    pkcs8.set(PKCS8_PREFIX);
    pkcs8.set(seed, 16);
    const key = await crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, true, ['sign']);
    const jwk = await crypto.subtle.exportKey('jwk', key);
    const pub = Uint8Array.from(Buffer.from(jwk.x, 'base64url'));
    assert.equal(hex(ed.publicKey(seed)), hex(pub));
    const native = new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, key, msg));
    const ours = ed.sign(seed, msg);
    assert.equal(hex(ours), hex(native));
    const vk = await crypto.subtle.importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
    // a forgery: one byte of the signature or of the message changed, at a random place
    const forged = ours.slice();
    forged[Math.floor(rng() * 64)] ^= 1 + Math.floor(rng() * 255);
    const other = msg.length ? msg.slice() : Uint8Array.of(0);
    other[Math.floor(rng() * other.length)] ^= 0x80;
    for (const [m, s, want] of [[msg, ours, true], [msg, forged, false], [other, ours, false]]) {
      assert.equal(ed.verify(pub, m, s), want);
      assert.equal(await crypto.subtle.verify({ name: 'Ed25519' }, vk, s, m), want);
    }
  }
});

test('malformed input is false, never an exception', () => {
  const { public: pub, message, signature } = KEYS.rfc8032[1];
  assert.ok(ed.verify(fromHex(pub), fromHex(message), fromHex(signature)));
  assert.equal(ed.verify(fromHex(pub).subarray(1), fromHex(message), fromHex(signature)), false);
  assert.equal(ed.verify(fromHex(pub), fromHex(message), fromHex(signature).subarray(1)), false);
  assert.equal(ed.verify(fromHex('02' + '00'.repeat(31)), fromHex(message), fromHex(signature)), false);
  assert.throws(() => ed.sign(new Uint8Array(31), new Uint8Array(0)), /32 bytes/);
  // decode is strict where OpenSSL is lenient: y >= P, and x = 0 with the sign bit
  const yIsP = fromHex('edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f');
  assert.equal(ed.decode(yIsP), null);
  const neutralSigned = fromHex('01' + '00'.repeat(30) + '80');
  assert.equal(ed.decode(neutralSigned), null);
});

test('speed: one signature and one verification of a statement', () => {
  const seed = fromHex(KEYS.random[0].seed);
  const msg = new Uint8Array(62 + 97 + 3 * 32); // a contribution commit of a 3-peer roster
  const pub = ed.publicKey(seed); // also builds the base point's table
  const time = (fn, n) => {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) fn();
    return (performance.now() - t0) / n;
  };
  let sig = ed.sign(seed, msg);
  const signMs = time(() => { sig = ed.sign(seed, msg); }, 30);
  const verifyMs = time(() => assert.ok(ed.verify(pub, msg, sig)), 30);
  const groupMs = time(() => ed.inPrimeOrderGroup(/** @type {any} */ (ed.decode(pub))), 10);
  console.log(`ed25519.js: sign ${signMs.toFixed(2)} ms, verify ${verifyMs.toFixed(2)} ms, ` +
    `key check ${groupMs.toFixed(2)} ms (node ${process.version})`);
});
