// static/js/p2p/frames.js, crc32.js and deflate.js against the Python implementation
// (daisychain/wire/frames.py) through tests/vectors/p2p_wire/frames.json, written by
// `python tests/vectorgen --write wire`: CRC-32 known answers, fragmentation to the
// exact bytes, every reassembly sequence with the answer of each feed (payload, nothing yet, or
// the error class and message), and inflate with its bounds. Both inflate paths run: the
// engine's 'deflate-raw' and the node:zlib one that Node 18 takes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import * as F from '../../static/js/p2p/frames.js';
import { crc32 } from '../../static/js/p2p/crc32.js';
import { setRawSupport, usesRawFormat } from '../../static/js/p2p/deflate.js';
import { REPO } from './helpers.mjs';

const V = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'p2p_wire', 'frames.json'), 'utf8'));
const blob = (name) => new Uint8Array(Buffer.from(V.blobs[name], 'base64'));
const b64 = (s) => new Uint8Array(Buffer.from(s, 'base64'));
const RAW_AVAILABLE = usesRawFormat();
const PATHS = RAW_AVAILABLE ? [true, false] : [false];

// zlib's own words follow "not valid deflate-raw data (": engines differ there, the rest not.
function assertSameError(got, expected, what) {
  assert.ok(got instanceof F.FrameError, `${what}: ${got} is not a FrameError`);
  assert.equal(got.name, expected.error, `${what}: error class`);
  const prefix = 'payload is not valid deflate-raw data (';
  if (expected.message.startsWith(prefix)) assert.ok(got.message.startsWith(prefix), `${what}: ${got.message}`);
  else assert.equal(got.message, expected.message, what);
}

test('vector file is the format this test reads', () => {
  assert.equal(V.format, 'daisychain-p2p-wire');
  assert.equal(V.format_version, 1);
  assert.deepEqual(V.constants, {
    header_bytes: F.HEADER_BYTES, max_frame_bytes: F.MAX_FRAME_BYTES,
    max_fragment_bytes: F.MAX_FRAGMENT_BYTES, frame_version: F.FRAME_VERSION,
    max_open_transfers: F.MAX_OPEN_TRANSFERS, flag_deflate: F.FLAG_DEFLATE,
  });
});

test('crc32 equals zlib.crc32 on every known answer, whole and in pieces', () => {
  assert.ok(V.crc32.length >= 5);
  for (const { data, crc } of V.crc32) {
    const bytes = b64(data);
    assert.equal(crc32(bytes), crc);
    const half = bytes.length >> 1;
    assert.equal(crc32(bytes.subarray(half), crc32(bytes.subarray(0, half))), crc);
  }
  assert.equal(crc32(new TextEncoder().encode('123456789')), 0xcbf43926); // the check value
});

test('fragment builds the exact frames Python builds (uncompressed)', async () => {
  let checked = 0;
  for (const c of V.fragment.filter((c) => !c.deflate)) {
    const expected = c.frames.map(blob);
    const payload = concat(expected.map((f) => f.subarray(F.HEADER_BYTES)));
    const got = await F.fragment(c.kind, payload, c);
    assert.equal(got.length, expected.length, `${c.name}: frame count`);
    got.forEach((f, i) => assert.deepEqual(f, expected[i], `${c.name}: frame ${i}`));
    got.forEach((f, i) => {
      const { head, data } = F.parseHeader(f);
      const { data_bytes: n, ...fields } = c.headers[i];
      assert.deepEqual(head, fields, `${c.name}: header ${i}`);
      assert.equal(data.length, n);
      assert.ok(f.length <= F.MAX_FRAME_BYTES);
    });
    checked++;
  }
  assert.ok(checked >= 4);
});

for (const raw of PATHS) {
  const label = raw ? 'deflate-raw' : 'node:zlib (Node 18 path)';

  test(`compressed fragments: Python's inflate in JS, JS's in Python's format [${label}]`, async () => {
    setRawSupport(raw);
    try {
      for (const c of V.fragment.filter((c) => c.deflate)) {
        const payload = blob(c.payload);
        // Python's frames reassemble in JS to the payload...
        const r = new F.Reassembler(() => payload.length);
        let out = null;
        for (const f of c.frames.map(blob)) out = await r.feed(f);
        assert.deepEqual(out.data, payload, c.name);
        // ...and JS's frames carry a deflate-raw body that zlib (Python's library) inflates.
        const mine = await F.fragment(c.kind, payload, c);
        const heads = mine.map((f) => F.parseHeader(f).head);
        assert.ok(heads.every((h) => h.flags === F.FLAG_DEFLATE && h.kind === c.kind));
        const body = concat(mine.map((f) => f.subarray(F.HEADER_BYTES)));
        assert.equal(crc32(body), heads[0].crc);
        assert.deepEqual(new Uint8Array(zlib.inflateRawSync(body)), payload, `${c.name}: zlib`);
      }
    } finally {
      setRawSupport(true);
    }
  });

  test(`every reassembly sequence answers as Python's Reassembler [${label}]`, async () => {
    setRawSupport(raw);
    try {
      for (const c of V.reassembly) {
        const r = new F.Reassembler((kind) => c.limits[String(kind)]);
        for (let i = 0; i < c.frames.length; i++) {
          const expected = c.results[i];
          const what = `${c.name}: frame ${i}`;
          let got;
          try {
            got = await r.feed(blob(c.frames[i]));
          } catch (exc) {
            assert.ok(expected.error, `${what}: refused (${exc.message}) but Python accepted it`);
            assertSameError(exc, expected, what);
            continue;
          }
          assert.ok(!expected.error, `${what}: accepted but Python raised ${expected.message}`);
          if (expected.incomplete) {
            assert.equal(got, null, what);
          } else {
            const p = expected.payload;
            assert.deepEqual({ ...got, data: null }, { ...p, data: null }, what);
            assert.deepEqual(got.data, blob(p.data), `${what}: data`);
          }
        }
      }
    } finally {
      setRawSupport(true);
    }
  });

  test(`inflate bounds: exact limit, one over, bomb, invalid, truncated, trailing [${label}]`, async () => {
    setRawSupport(raw);
    try {
      for (const c of V.inflate) {
        let out;
        try {
          out = await F.inflate(b64(c.data), c.limit);
        } catch (exc) {
          assert.ok(c.error, `${c.name}: refused (${exc.message}) but Python accepted it`);
          assertSameError(exc, c, c.name);
          continue;
        }
        assert.ok(!c.error, `${c.name}: accepted but Python raised ${c.message}`);
        assert.deepEqual(out, b64(c.output), c.name);
      }
    } finally {
      setRawSupport(true);
    }
  });
}

test('every refusal kind in the vectors is exercised (a check without a failing case is a gap)', () => {
  const messages = V.reassembly.flatMap((c) => c.results.filter((r) => r.error).map((r) => r.message));
  for (const needle of ['too short', 'exceeds 49152', 'bad magic', 'frame version', 'unknown frame kind',
    'unknown flags', 'exceeds total', 'not expected now', 'exceeds the limit', 'starts at offset',
    'transfers open', 'header changed', 'crc changed', 'expected', 'CRC-32 mismatch',
    'inflates beyond', 'not valid deflate-raw', 'truncated or has trailing']) {
    assert.ok(messages.some((m) => m.includes(needle)), `no vector refuses with "${needle}"`);
  }
});

test('the inflate limit holds memory: a bomb stops near the limit, not at its full size', async () => {
  // 200 MB of zeros deflate to ~200 KB; refusing at 1 MB must not allocate the 200 MB.
  const bomb = new Uint8Array(zlib.deflateRawSync(Buffer.alloc(200 * 1024 * 1024), { level: 9 }));
  const before = process.memoryUsage().arrayBuffers;
  await assert.rejects(F.inflate(bomb, 1024 * 1024), /inflates beyond the limit of 1048576 bytes/);
  const grew = process.memoryUsage().arrayBuffers - before;
  assert.ok(grew < 64 * 1024 * 1024, `inflating a refused bomb grew ArrayBuffers by ${grew} bytes`);
});

test('fragment refuses what cannot be framed', async () => {
  await assert.rejects(F.fragment(1, new Uint8Array(0), { transfer: 1, step: 1 }), /0 bytes cannot be framed/);
  await assert.rejects(F.fragment(1, new Uint8Array(1), { transfer: 1, step: 1, round: 256 }), /round 256 out of range/);
  await assert.rejects(F.fragment(1, new Uint8Array(1), { transfer: 1, step: 1, chunk: -1 }), /chunk -1 out of range/);
  await assert.rejects(F.fragment(1, new Uint8Array(1), { transfer: 2 ** 32, step: 1 }), /transfer .* out of range/);
  await assert.rejects(F.fragment(1, new Uint8Array(1), { transfer: 1, step: 1.5 }), /step 1.5 out of range/);
  await assert.rejects(F.fragment(4, new Uint8Array(1), { transfer: 1, step: 1 }), /unknown frame kind 4/);
});

test('a round trip through JS alone: 1 MB compressible payload, interleaved with another', async () => {
  const payload = new Uint8Array(1 << 20).map((_, i) => (i * 7919) % 13);
  const a = await F.fragment(2, payload, { transfer: 1, step: 3, deflate: true });
  const b = await F.fragment(3, payload.subarray(0, 100_000), { transfer: 2, step: 3 });
  const r = new F.Reassembler(() => 2 << 20);
  const got = [];
  for (const f of [b[0], ...a, b[1], b[2]]) {
    const out = await r.feed(f);
    if (out) got.push(out);
  }
  assert.equal(got.length, 2);
  assert.deepEqual(got[0].data, payload);
  assert.deepEqual(got[1].data, payload.subarray(0, 100_000));
  assert.equal(r.buffered, 0);
});

function concat(parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
