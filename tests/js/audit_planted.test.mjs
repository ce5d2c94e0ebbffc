// Planted bugs in audits' building blocks (docs/TRUST.md), each seen to fail the checks that the
// golden cases of tests/vectors/audit/ drive: a copy of the module's source with one expression
// changed, imported from a data: URL, goes through tests/js/audit_checks.mjs. Apart from
// audit_vectors.test.mjs and ed25519.test.mjs because these read the modules' source text,
// which a mutation tool's instrumented copy no longer holds (tests/mutation.py maps the modules
// to the other two files only).
// - statements.js: a step or a share or token ids written big-endian, seen without its magic,
//   the private flag dropped, an empty chunk hashed, an audit's count left out;
// - draw.js: `2 s[a] > s[j]`, ties broken by the last rank, a seed without the nonces, u read
//   big-endian, a private contribution drawn, assigned peers not skipped, reductions not spread;
// - auditkey.js (without Web Crypto): a signature over a truncated statement, small-order keys
//   accepted, the key label left out;
// - ed25519.js and sha512.js: d for 2d in the addition, a doubling without its C, S >= L
//   accepted, a wrong clamp, the nonce without the prefix, k without the key, a SHA-512 round
//   constant, the length in bytes, a rotation.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { REPO } from './helpers.mjs';
import { drawMismatches, ed25519Mismatches, keyMismatches, statementMismatches } from './audit_checks.mjs';
import { hashImplementation } from '../../static/js/numerics/hash.js';
import * as ak from '../../static/js/p2p/auditkey.js';

const VECTORS = path.join(REPO, 'tests', 'vectors', 'audit');
const load = (name) => JSON.parse(fs.readFileSync(path.join(VECTORS, name), 'utf-8'));
const STATEMENTS = load('statements.json');
const KEYS = load('keys.json');
const DRAW = load('draw.json');
// encodeURIComponent leaves ' alone, and these URLs sit inside quoted import specifiers
const dataUrl = (source) => `data:text/javascript,${encodeURIComponent(source).replace(/'/g, '%27')}`;

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
  return import(dataUrl(absolute));
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


const ED = fs.readFileSync(path.join(REPO, 'static', 'js', 'numerics', 'ed25519.js'), 'utf-8');
const SHA = fs.readFileSync(path.join(REPO, 'static', 'js', 'numerics', 'sha512.js'), 'utf-8');
const SHA_URL = dataUrl(SHA);

/** ed25519.js (or sha512.js) with one occurrence of `from` replaced by `to`, the pair loaded together. */
async function plantedNumerics(file, from, to) {
  const source = file === 'ed' ? ED : SHA;
  assert.equal(source.split(from).length, 2, `'${from}' must occur once in ${file}`);
  if (file === 'sha') {
    const shaUrl = dataUrl(SHA.replace(from, to));
    const edMod = await import(dataUrl(ED.replace("from './sha512.js'", `from '${shaUrl}'`)));
    return { edMod, shaMod: await import(shaUrl) };
  }
  const edMod = await import(dataUrl(ED.replace(from, to).replace("from './sha512.js'", `from '${SHA_URL}'`)));
  return { edMod, shaMod: await import(SHA_URL) };
}

test('planted: an unchanged copy of ed25519.js passes', async () => {
  const { edMod, shaMod } = await plantedNumerics('ed', 'export const P =', 'export const P =');
  assert.deepEqual(ed25519Mismatches(edMod, shaMod, KEYS), []);
});

for (const [file, what, from, to] of [
  // (a doubling's sign slip would not do: it gives -2P, and doublings come in fours here)
  ['ed', 'd instead of 2d in the addition', 'const c = (t1 * D2 % P) * t2 % P;', 'const c = (t1 * D % P) * t2 % P;'],
  ['ed', 'a doubling that loses C', 'const f = c + g;', 'const f = g;'],
  ['ed', 'S >= L accepted', 'if (S >= L) return false;', ''],
  ['ed', 'a clamp that keeps the low bits', '& ((1n << 254n) - 8n)', '& ((1n << 254n) - 1n)'],
  ['ed', 'the nonce hashed without the prefix', 'hashScalar(prefix, message)', 'hashScalar(message)'],
  ['ed', 'k without the public key', 'hashScalar(R, publicKey, message)', 'hashScalar(R, message)'],
  ['sha', 'a round constant one bit off', '0x428a2f98, 0xd728ae22,', '0x428a2f98, 0xd728ae23,'],
  ['sha', 'the length in bytes', 'const bits = n * 8;', 'const bits = n;'],
  ['sha', 'sigma1 rotating by 18', '((yh >>> 19) | (yl << 13))', '((yh >>> 18) | (yl << 14))'],
]) {
  test(`planted bug fails the cases: ${what}`, async () => {
    const { edMod, shaMod } = await plantedNumerics(file, from, to);
    assert.notDeepEqual(ed25519Mismatches(edMod, shaMod, KEYS), []);
  });
}
