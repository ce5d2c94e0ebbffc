// static/js/p2p/messages.js (with pyjson.js and pyrepr.js) against the Python implementation
// (daisychain/wire/messages.py) through tests/vectors/p2p_wire/messages.json: every raw text
// parses to the record Python makes (compared through encode, byte for byte what Python writes)
// or is refused with Python's code, message and hint, and the `error` reply encodes the same.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as M from '../../static/js/p2p/messages.js';
import { parse as parseJson, PyFloat, MAX_DEPTH } from '../../static/js/p2p/pyjson.js';
import { floatRepr, strRepr } from '../../static/js/p2p/pyrepr.js';
import { REPO } from './helpers.mjs';

const V = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'p2p_wire', 'messages.json'), 'utf8'));

test('declarations match Python: types, error codes, size limit', () => {
  assert.equal(V.format, 'daisychain-p2p-wire');
  assert.deepEqual([...M.TYPES], V.types);
  assert.deepEqual([...M.ERROR_CODES], V.error_codes);
  assert.equal(M.MAX_MESSAGE_BYTES, V.max_message_bytes);
});

test('every vector: the same record (same encoding) or the same refusal', () => {
  let accepted = 0;
  let refused = 0;
  for (const c of V.cases) {
    let got;
    try {
      got = M.parse(c.raw);
    } catch (exc) {
      assert.ok(exc instanceof M.MessageError, `${c.name}: ${exc.stack}`);
      assert.ok(c.error, `${c.name}: refused (${exc.code}: ${exc.message}) but Python accepted it`);
      assert.deepEqual({ code: exc.code, message: exc.message, hint: exc.hint }, c.error, c.name);
      assert.equal(M.encode(M.errorFrom(exc)), c.reply, `${c.name}: error reply`);
      refused++;
      continue;
    }
    assert.ok(!c.error, `${c.name}: accepted but Python refused it: ${c.error && c.error.message}`);
    assert.equal(M.encode(got), c.encoded, c.name);
    // What a peer writes, the other reads back to the same record.
    assert.equal(M.encode(M.parse(M.encode(got))), c.encoded, `${c.name}: re-parse`);
    accepted++;
  }
  assert.ok(accepted >= 30 && refused >= 90, `${accepted} accepted, ${refused} refused`);
  for (const type of M.TYPES) {
    assert.ok(V.cases.some((c) => c.name === `valid-${type}` && c.encoded), `no valid ${type}`);
  }
  for (const code of ['bad-json', 'bad-message', 'unknown-type', 'too-large', 'version-mismatch']) {
    assert.ok(V.cases.some((c) => c.error && c.error.code === code), `no vector refused as ${code}`);
  }
});

test('records are frozen and carry exactly the declared fields', () => {
  const m = M.parse(V.cases.find((c) => c.name === 'valid-config').raw);
  assert.ok(Object.isFrozen(m) && Object.isFrozen(m.model) && Object.isFrozen(m.optim));
  assert.deepEqual(Object.keys(m).sort(), ['type', ...M.DECLARATIONS.config.map(([f]) => f)].sort());
  const stop = M.parse(V.cases.find((c) => c.name === 'valid-stop').raw);
  assert.ok(stop.hashes instanceof Map);
  assert.deepEqual([...stop.hashes.keys()], ['b', 'a', '123']); // the sender's order, as a dict
});

test('message() builds what encode can write, and refuses a missing or mistyped field', () => {
  const hello = M.message('hello', { version: 1, name: 'tab', contract: M.CONTRACT_VERSION });
  assert.equal(M.encode(hello), `{"version":1,"name":"tab","contract":${M.CONTRACT_VERSION},"type":"hello"}`);
  assert.throws(() => M.message('hello', { version: 1, contract: 1 }), /hello.name/);
  assert.throws(() => M.message('hash', { run: 'r', step: 1, round: 0, hash: 'h', loss: NaN,
    probe: 'p', backend: 'b' }), /hash.loss/); // allow_nan=False, as Python
  assert.throws(() => M.message('gossip', {}), /unknown control message type/);
  assert.throws(() => M.parse(new Uint8Array(3)), TypeError);
});

test('pyjson keeps integers and floats apart, reads NaN/Infinity, refuses what json.loads does', () => {
  assert.equal(parseJson('1'), 1);
  assert.ok(parseJson('1.0') instanceof PyFloat);
  assert.ok(parseJson('1e2') instanceof PyFloat);
  assert.ok(Number.isNaN(parseJson('NaN').value));
  assert.equal(parseJson('-Infinity').value, -Infinity);
  assert.ok(Object.is(parseJson('-0'), 0));
  const obj = parseJson('{"__proto__": 1, "a": 2, "a": 3}');
  assert.deepEqual([...obj], [['__proto__', 1], ['a', 3]]);
  assert.equal(parseJson('"\\ud83d\\ude00"'), '😀');
  for (const bad of ['', '01', '-', '1.', '.5', '+1', '[1,]', '{"a"}', '"\\x"', '"a', 'nul',
    '-NaN', 'infinity', '\ufeff1', '1 2', '"\u0001"', '9'.repeat(4301)]) {
    assert.throws(() => parseJson(bad), /JsonError|at character/, JSON.stringify(bad));
  }
  assert.equal(parseJson('9'.repeat(4300)), Number('9'.repeat(4300)));
  parseJson('['.repeat(MAX_DEPTH) + ']'.repeat(MAX_DEPTH));
  assert.throws(() => parseJson('['.repeat(MAX_DEPTH + 1) + ']'.repeat(MAX_DEPTH + 1)), /too deep/);
});

test('pyrepr writes floats and strings as Python does', () => {
  const floats = [[0.003, '0.003'], [1e-5, '1e-05'], [1e16, '1e+16'], [1e15, '1000000000000000.0'],
    [3, '3.0'], [-0, '-0.0'], [0.1 + 0.2, '0.30000000000000004'], [5e-324, '5e-324'],
    [1.7976931348623157e308, '1.7976931348623157e+308'], [-2.5e-7, '-2.5e-07'], [Infinity, 'inf']];
  for (const [x, text] of floats) assert.equal(floatRepr(x), text);
  assert.equal(strRepr("it's"), `"it's"`);
  assert.equal(strRepr('\'"'), `'\\'"'`);
  assert.equal(strRepr('a\\b\n\u0000\u00e9\u00a0'), `'a\\\\b\\n\\x00é\\xa0'`);
});

// Protocol version 2's fields (config.global_batch, ready.seq_s, roster.shares, hash.seq_s):
// every text below is parsed by the Python reference at test time (messages.parse, encode,
// error_from), so these cases hold before and after tests/vectors/p2p_wire/ is regenerated.
const V2_PY = String.raw`
import json, sys
from daisychain.wire import messages
out = []
for raw in json.load(sys.stdin):
    try:
        m = messages.parse(raw)
    except messages.MessageError as exc:
        out.append({"error": {"code": exc.code, "message": exc.message, "hint": exc.hint},
                    "reply": messages.encode(messages.error_from(exc))})
    else:
        out.append({"encoded": messages.encode(m)})
print(json.dumps(out))
`;

function v2Texts() {
  const run = '0123456789abcdef';
  const hash = 'ab'.repeat(32);
  const cfg = JSON.parse(V.cases.find((c) => c.name === 'valid-config').raw);
  delete cfg.global_batch;
  const config = (extra) => JSON.stringify({ ...cfg, ...extra });
  const ready = (extra) => JSON.stringify({ type: 'ready', run, step: 0, hash, peers: ['a', 'b'], ...extra });
  const roster = (extra) => JSON.stringify({ type: 'roster', run, step: 1, round: 0, peers: ['a', 'b', 'c'], ...extra });
  const hashMsg = (extra) => JSON.stringify({ type: 'hash', run, step: 1, round: 0, hash, loss: 2.5,
    probe: hash, backend: 'numpy', ...extra });
  const texts = [config({}), config({ global_batch: 12 }), config({ global_batch: 0 }),
    config({ global_batch: 2 ** 32 }), config({ global_batch: -1 }), config({ global_batch: true }),
    config({ global_batch: '12' })];
  texts.push(config({}).replace('"type"', '"global_batch":12.0,"type"'));
  texts.push(config({}).replace('"type"', '"global_batch":1e1,"type"'));
  for (const by of ['speed', 'equal', 'Speed', 'fastest', '', 1, null, true, ['speed']]) {
    texts.push(config({ global_batch: 12, shares_by: by }));
  }
  const noShares = { ...cfg, global_batch: 12 };
  delete noShares.shares_by;
  texts.push(JSON.stringify(noShares));
  for (const seq of [0, 0.0125, 1e6, 1000000.5, -0.0, -1e-9, 3, true, null, '1', [1]]) {
    texts.push(ready({ seq_s: seq }), hashMsg({ seq_s: seq }));
  }
  texts.push(ready({}), hashMsg({}));
  texts.push(ready({}).replace('}', ',"seq_s":NaN}'), hashMsg({}).replace('}', ',"seq_s":Infinity}'),
    hashMsg({}).replace('}', `,"seq_s":1${'0'.repeat(400)}}`), ready({}).replace('}', ',"seq_s":1e400}'));
  for (const shares of [[4, 4, 4], [12, 0, 0], [0, 0, 0], [4096, 0, 0], [4097, 0, 0], [4, 4],
    [4, 4, 4, 0], [4, -1, 9], [4, 4.5, 3.5], [4, true, 7], [4, '4', 4], null, 'x', {}, []]) {
    texts.push(roster({ shares }));
  }
  texts.push(roster({}), roster({}).replace('}', ',"shares":[4,4.0,4]}'));
  texts.push(roster({ peers: [], shares: [] }));
  return texts;
}

test('protocol v2 fields: the same record or the same refusal as the Python reference', async () => {
  const { python } = await import('./protocol_helpers.mjs');
  const texts = v2Texts();
  const expected = python(V2_PY, texts);
  let accepted = 0;
  texts.forEach((raw, i) => {
    const e = expected[i];
    let got;
    try {
      got = M.parse(raw);
    } catch (exc) {
      assert.ok(exc instanceof M.MessageError, `${raw}: ${exc.stack}`);
      assert.deepEqual({ code: exc.code, message: exc.message, hint: exc.hint }, e.error, raw);
      assert.equal(M.encode(M.errorFrom(exc)), e.reply, `${raw}: error reply`);
      return;
    }
    assert.ok(!e.error, `${raw}: accepted but Python refused it: ${e.error?.message}`);
    assert.equal(M.encode(got), e.encoded, raw);
    accepted++;
  });
  assert.ok(accepted >= 10 && accepted < texts.length, `${accepted} of ${texts.length} accepted`);
});
