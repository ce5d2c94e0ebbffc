// The project's own SHA-256 (static/js/numerics/sha256.js): what numerics/hash.js hashes with
// when the page has no Web Crypto (plain http from a LAN address is not a secure context).
// - equal to Python's hashlib on every case of tests/vectors/sha256.json (tests/numerics/test_sha256_vectors.py);
// - incremental updates split anywhere give the one-shot digest;
// - hash.js without crypto.subtle gives the same hex as with it (sha256Hex, sha256Arrays on mixed
//   typed arrays and offset views, the kit's CSP hashes, and the golden run's weight hash);
// - planted bugs (a round constant one bit off, the padding boundary one byte off, a rotation
//   amount, the length counted in bytes) each fail the golden cases, so a passing run means
//   something.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { REPO, testRng } from './helpers.mjs';
import { sha256, Sha256 } from '../../static/js/numerics/sha256.js';
import { sha256Hex, sha256Arrays, sha256Bytes, hashImplementation } from '../../static/js/numerics/hash.js';
import { buildKit } from '../../static/js/kit/build.js';
import { preset } from '../../static/js/model/config.js';
import { initParams } from '../../static/js/model/params.js';
import * as M from '../../static/js/model/index.js';

const SOURCE = path.join(REPO, 'static', 'js', 'numerics', 'sha256.js');
const DOC = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'sha256.json'), 'utf-8'));
const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
const fromHex = (s) => Uint8Array.from(s.match(/../g) ?? [], (h) => parseInt(h, 16));

/** The file's `lcg_seed` rule (tests/numerics/test_sha256_vectors.py lcg_bytes). */
function lcgBytes(seed, length) {
  const out = new Uint8Array(length);
  let x = seed >>> 0;
  for (let i = 0; i < length; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

/** A case's input bytes; where the file gives both hex and a seed, they must agree. */
function inputOf(c) {
  const src = c.input;
  let data;
  if ('hex' in src) {
    data = fromHex(src.hex);
    if ('lcg_seed' in src) assert.deepEqual(lcgBytes(src.lcg_seed, c.length), data, `${c.name}: lcg`);
  } else if ('lcg_seed' in src) {
    data = lcgBytes(src.lcg_seed, c.length);
  } else {
    const unit = fromHex(src.repeat_hex);
    data = new Uint8Array(c.length);
    for (let i = 0; i < c.length; i += unit.length) data.set(unit, i);
  }
  assert.equal(data.length, c.length, c.name);
  return data;
}

const CASES = DOC.cases.map((c) => ({ ...c, bytes: inputOf(c) }));

/**
 * Runs `fn` with Web Crypto taken away as an insecure page has it: `how` 'no-subtle' keeps
 * `crypto` (getRandomValues exists on http pages) without `subtle`; 'no-crypto' removes it.
 */
async function withoutWebCrypto(how, fn) {
  const saved = Object.getOwnPropertyDescriptor(globalThis, 'crypto');
  const real = globalThis.crypto;
  const value = how === 'no-subtle' ? { getRandomValues: (a) => real.getRandomValues(a) } : undefined;
  Object.defineProperty(globalThis, 'crypto', { value, configurable: true, writable: true });
  try {
    assert.equal(hashImplementation(), 'javascript');
    return await fn();
  } finally {
    if (saved) Object.defineProperty(globalThis, 'crypto', saved);
    else delete globalThis.crypto;
    assert.equal(hashImplementation(), 'web-crypto');
  }
}

test('the vectors cover the NIST examples and every padding boundary', () => {
  assert.equal(DOC.format, 'daisychain-sha256-vectors');
  assert.equal(DOC.format_version, 1);
  const names = new Set(CASES.map((c) => c.name));
  for (const n of ['nist.empty', 'nist.abc', 'nist.448-bit', 'nist.896-bit', 'nist.million-a']) {
    assert.ok(names.has(n), n);
  }
  const lengths = new Set(CASES.map((c) => c.length));
  for (let n = 0; n <= 130; n++) assert.ok(lengths.has(n), `length ${n}`);
  assert.ok(CASES.some((c) => c.length > 100000));
});

test('sha256 equals hashlib on every golden case, one-shot and in uneven pieces', () => {
  for (const c of CASES) {
    assert.equal(hex(sha256(c.bytes)), c.sha256, c.name);
    // pieces of 1, 63, 64, 65 and 1000 bytes in turn: every path through update()
    const h = new Sha256();
    const sizes = [1, 63, 64, 65, 1000];
    for (let o = 0, k = 0; o < c.bytes.length; k++) {
      const n = sizes[k % sizes.length];
      h.update(c.bytes.subarray(o, o + n));
      o += n;
    }
    assert.equal(hex(h.digest()), c.sha256, `${c.name} in pieces`);
  }
  // the NIST answers themselves, not only the file's
  assert.equal(hex(sha256(new TextEncoder().encode('abc'))),
    'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
});

test('incremental: a 200-byte buffer split at every pair of offsets gives the one-shot digest', () => {
  const buf = lcgBytes(7, 200);
  const want = hex(sha256(buf));
  for (let i = 0; i <= buf.length; i++) {
    assert.equal(hex(new Sha256().update(buf.subarray(0, i)).update(buf.subarray(i)).digest()), want, `split ${i}`);
    for (let j = i; j <= buf.length; j += 7) {
      const h = new Sha256().update(buf.subarray(0, i)).update(buf.subarray(i, j)).update(buf.subarray(j));
      assert.equal(hex(h.digest()), want, `split ${i}, ${j}`);
    }
  }
  // empty updates change nothing; a view with an odd byteOffset is read in place
  const big = new Uint8Array(buf.length + 3);
  big.set(buf, 3);
  const h = new Sha256().update(new Uint8Array(0)).update(big.subarray(3)).update(new Uint8Array(0));
  assert.equal(hex(h.digest()), want);
  assert.equal(hex(h.digest()), want, 'digest() twice gives the same bytes');
  assert.throws(() => h.update(buf), /update\(\) after digest\(\)/);
});

test('inputs: ArrayBuffer, DataView and other typed arrays hash their bytes, like crypto.subtle', async () => {
  const f = new Float32Array([1, -0, 2.5, 3, 4, Number.NaN]);
  const bytes = new Uint8Array(f.buffer);
  const want = hex(sha256(bytes));
  for (const x of [f, f.buffer, new DataView(f.buffer), new Int16Array(f.buffer)]) {
    assert.equal(hex(sha256(x)), want, x.constructor.name);
    assert.equal(hex(new Uint8Array(await crypto.subtle.digest('SHA-256', x))), want, x.constructor.name);
  }
  assert.throws(() => sha256('abc'), TypeError);
  assert.throws(() => sha256(null), TypeError);
});

// Mixed typed arrays as the weight hash sees them: float32, int8, uint32, views into larger
// buffers at byte offsets that are not multiples of 4 or 64, empty arrays, and one array big
// enough that most of its blocks are read straight from the view.
function mixedArrays() {
  const rng = testRng(11);
  const f = new Float32Array(1000).map(() => rng.uniform() * 2 - 1);
  const big = new Float32Array(300000).map((_, i) => (i % 97) - 48.5);
  const i8 = new Int8Array(333).map((_, i) => (i * 37) - 128);
  const u32 = new Uint32Array(77).map((_, i) => (i * 2654435761) >>> 0);
  const host = new Uint8Array(5000).map((_, i) => i * 13);
  return [
    f, i8, u32, new Float32Array(0),
    f.subarray(3, 700), // byteOffset 12
    i8.subarray(5, 200), // byteOffset 5
    new Uint8Array(host.buffer, 1, 4321), // byteOffset 1
    new Float64Array([Math.PI, -0, Infinity]),
    big.subarray(17),
    u32.subarray(9, 10),
  ];
}

for (const how of ['no-subtle', 'no-crypto']) {
  test(`hash.js without Web Crypto (${how}): same hex as with it`, async () => {
    const arrays = mixedArrays();
    assert.equal(hashImplementation(), 'web-crypto');
    const wantArrays = await sha256Arrays(arrays);
    const wantEach = await Promise.all(arrays.map((a) => sha256Hex(a)));
    const wantBuffer = await sha256Hex(arrays[0].buffer);
    const wantEmpty = await sha256Arrays([]);
    await withoutWebCrypto(how, async () => {
      assert.equal(await sha256Arrays(arrays), wantArrays);
      assert.deepEqual(await Promise.all(arrays.map((a) => sha256Hex(a))), wantEach);
      assert.equal(await sha256Hex(arrays[0].buffer), wantBuffer);
      assert.equal(await sha256Arrays([]), wantEmpty);
      assert.equal(hex(await sha256Bytes(new TextEncoder().encode('abc'))),
        'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
      for (const c of CASES.filter((x) => x.length % 61 === 0)) assert.equal(await sha256Hex(c.bytes), c.sha256, c.name);
      // a rejected promise (not a synchronous throw) for a bad input, as with crypto.subtle
      await assert.rejects(sha256Hex('abc'), TypeError);
    });
    // the reference's own answer (tests/js/hash.test.mjs), through the fallback
    const f = (...v) => new Float32Array(v);
    await withoutWebCrypto(how, async () => assert.equal(await sha256Arrays([f(1, -0, 2.5), f(3, 4)]),
      'a7dc1c60dcfa81d8d3c4265a545c1f77b6f8caf96a84b3161d78f4e2e261544b'));
  });
}

test('the inference kit is byte-identical built with or without Web Crypto', async () => {
  const read = async (url) => fs.readFileSync(fileURLToPath(url), 'utf-8');
  const tokenizerBytes = new Uint8Array(fs.readFileSync(path.join(REPO, 'luts', 'tokenizer.json')));
  const cfg = preset('tiny');
  const args = { model: cfg, params: initParams(cfg, 2), tokenizerBytes, info: { step: 3 }, read };
  const withIt = await buildKit(args);
  const without = await withoutWebCrypto('no-subtle', () => buildKit(args));
  assert.equal(without, withIt);
  assert.match(without, /script-src 'sha256-[A-Za-z0-9+/]{43}='/);
});

test("the golden run's weight hash after step 1, hashed without Web Crypto", async () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'manifest.json'), 'utf-8'));
  const c = manifest.cases.find((x) => x.kind === 'train_run');
  assert.ok(c, 'no train_run case in tests/vectors/manifest.json');
  const { model, optim, seed } = c.params;
  const cfg = M.modelConfig(model);
  const read = (field) => {
    const raw = fs.readFileSync(path.join(REPO, 'tests', 'vectors', field.blob));
    return new Int32Array(new Uint8Array(raw).buffer);
  };
  const bt = cfg.batch * cfg.seqLen;
  const x = read(c.inputs.x).subarray(0, bt);
  const y = read(c.inputs.y).subarray(0, bt);
  const state = M.init(cfg, optim, seed);
  const r = await withoutWebCrypto('no-crypto', () => M.trainStep(state, x, y));
  assert.equal(r.hash, c.outputs.hashes.value[0], 'state hash after step 1 (Python: hashlib)');
});

// ---- planted bugs ---------------------------------------------------------------------------

const CLEAN = fs.readFileSync(SOURCE, 'utf-8');

/** sha256.js with `from` (which must occur exactly once) replaced by `to`, as a fresh module. */
async function planted(from, to) {
  assert.equal(CLEAN.split(from).length, 2, `'${from}' must occur once in sha256.js`);
  const source = CLEAN.replace(from, to);
  return import(`data:text/javascript,${encodeURIComponent(source)}`);
}

/** Names of the golden cases a sha256 implementation gets wrong. */
function failing(impl) {
  return CASES.filter((c) => hex(impl.sha256(c.bytes)) !== c.sha256).map((c) => c.name);
}

test('planted bugs: each fails the golden cases (and the unplanted copy passes)', async () => {
  // the loading route itself is sound: an unchanged copy passes every case
  const same = await planted('const W = new Int32Array(64);', 'const W = new Int32Array(64);');
  assert.deepEqual(failing(same), []);

  // one bit of one round constant: every digest is wrong
  const k0 = await planted('0x428a2f98,', '0x428a2f99,');
  assert.equal(failing(k0).length, CASES.length);

  // the padding boundary one byte late: the length field overwrites the last message block byte
  // exactly when the message ends 56 bytes into a block; only those cases catch it
  const pad = await planted('if (fill > 56)', 'if (fill > 57)');
  const want = CASES.filter((c) => c.length % 64 === 56).map((c) => c.name);
  assert.ok(want.includes('nist.448-bit') && want.includes('lcg.56') && want.includes('lcg.120'));
  assert.deepEqual(failing(pad), want);

  // one rotation amount of sigma0 in the message schedule: every block expands W16..W63 from
  // it, so every digest changes
  const rot = await planted('((x >>> 7) | (x << 25))', '((x >>> 8) | (x << 24))');
  assert.equal(failing(rot).length, CASES.length);

  // the length field in bytes instead of bits: everything but the empty message is wrong
  const bits = await planted('* 8;', '* 1;');
  assert.deepEqual(failing(bits), CASES.filter((c) => c.length > 0).map((c) => c.name));

  // incremental bookkeeping: a pending block completed one byte short
  const take = await planted('Math.min(64 - this._fill, n)', 'Math.min(63 - this._fill, n)');
  assert.deepEqual(failing(take), [], 'one-shot hashing never has a pending block');
  const buf = lcgBytes(7, 200);
  const split = hex(new take.Sha256().update(buf.subarray(0, 10)).update(buf.subarray(10)).digest());
  assert.notEqual(split, hex(sha256(buf)));

  // and the comparison is sensitive to one input bit: flipping any bit of a golden input
  // changes the digest away from the recorded one
  const c = CASES.find((x) => x.name === 'lcg.64');
  for (let bit = 0; bit < c.length * 8; bit += 37) {
    const flipped = c.bytes.slice();
    flipped[bit >> 3] ^= 1 << (bit & 7);
    assert.notEqual(hex(sha256(flipped)), c.sha256, `bit ${bit}`);
  }
});

test('speed (reported, not asserted)', async (t) => {
  const n = 16 << 20;
  const buf = lcgBytes(3, n);
  let js = Infinity;
  let native = Infinity;
  for (let r = 0; r < 3; r++) {
    let t0 = performance.now();
    sha256(buf);
    js = Math.min(js, performance.now() - t0);
    t0 = performance.now();
    await crypto.subtle.digest('SHA-256', buf);
    native = Math.min(native, performance.now() - t0);
  }
  t.diagnostic(`SHA-256 of 16 MiB: sha256.js ${(n / 1e3 / js).toFixed(0)} MB/s, ` +
    `crypto.subtle ${(n / 1e3 / native).toFixed(0)} MB/s (best of 3)`);
});
