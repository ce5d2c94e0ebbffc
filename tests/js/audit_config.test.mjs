// config.audit in the JavaScript mirror (docs/TRUST.md, "Config and versions"): every audit
// rule of static/js/p2p/runconfig.js (audit-rate, audit-private, audit-outer, private-data,
// min-audit), fed wrong inputs, answers with Python's rule, message and hint (the Python
// reference runs at test time on the same texts); audits off writes nothing, so a config keeps
// its bytes; and version 7's records are written as Python writes them. The version-6 machine's
// refusals are the traces v6-audit-* (tests/js/protocol_traces.test.mjs, with planted bugs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as M from '../../static/js/p2p/messages.js';
import * as R from '../../static/js/p2p/runconfig.js';
import { python } from './protocol_helpers.mjs';

const SHA = '5a'.repeat(32);
const H = '1f'.repeat(32);
const SIG = '5e'.repeat(64);

function raw(extra = {}) {
  return JSON.stringify({
    run: '0123456789abcdef', preset: null,
    model: { vocab_size: 2048, width: 64, layers: 2, heads: 4, seq_len: 64, batch: 4, mlp_mult: 4 },
    optim: { lr: 0.003, warmup_steps: 0, weight_decay: 0.1, clip: 1.5 },
    steps: 30, seed: 7, data: 'builtin', tokenizer_sha256: SHA, resume_step: 0,
    resume_hash: null, global_batch: 8, shares_by: 'speed', type: 'config', ...extra,
  });
}
const OUTER = { sync: 'outer', outer: { steps: 3, lr: 0.7, momentum: 0.9 } };

// [config text, this peer: {private_data, min_audit}]
const CASES = [
  [raw(), {}],
  [raw({ audit: { one_in: 16 } }), {}],
  [raw({ audit: { one_in: 1, private: 'unaudited' } }), { private_data: true }],
  [raw({ audit: { one_in: 65536 } }), { min_audit: 65536 }],
  [raw({ audit: { one_in: 0 } }), {}],
  [raw({ audit: { one_in: 65537 } }), {}],
  [raw({ audit: { one_in: 4294967295 } }), {}],
  [raw({ audit: { one_in: 16, private: 'accept' } }), {}],
  [raw({ audit: { one_in: 16, private: '' } }), {}],
  [raw({ audit: { one_in: 16, private: 'it\'s "unaudited"' } }), {}],
  [raw({ audit: { one_in: 16 }, ...OUTER }), {}],
  [raw({ audit: { one_in: 16, private: 'unaudited' }, ...OUTER }), { private_data: true }],
  [raw({ audit: { one_in: 16 } }), { private_data: true }],
  [raw({ audit: { one_in: 16, private: 'refuse' } }), { private_data: true }],
  [raw(), { private_data: true }],
  [raw(), { min_audit: 1 }],
  [raw({ audit: { one_in: 16 } }), { min_audit: 8 }],
  [raw({ audit: { one_in: 8 } }), { min_audit: 8 }],
  [raw({ audit: { one_in: 0, private: 'x' }, ...OUTER }), { private_data: true, min_audit: 1 }],
  [raw({ audit: { one_in: 16, private: 'x' }, ...OUTER }), { private_data: true }],
  [raw({ audit: { one_in: 16 }, ...OUTER }), { private_data: true, min_audit: 1 }],
  [raw({ audit: { one_in: 0 }, sync: 'outer', outer: { steps: 0, lr: 0.7, momentum: 0.9 } }), {}],
  // after the outer rules, before the optimizer's
  [raw({ audit: { one_in: 0 }, optim: { lr: 5, warmup_steps: 0, weight_decay: 0.1, clip: 1.5 } }), {}],
  [raw({ audit: { one_in: 16 }, optim: { lr: 5, warmup_steps: 0, weight_decay: 0.1, clip: 1.5 } }), {}],
];

const PY = String.raw`
import json, sys
from daisychain.p2p import runconfig
from daisychain.wire import messages
out = []
for text, me in json.load(sys.stdin):
    cfg = messages.parse(text)
    try:
        runconfig.parse(cfg, tokenizer_sha256="5a" * 32, vocab_size=2048,
                        private_data=me.get("private_data", False),
                        min_audit=me.get("min_audit", 0))
    except runconfig.Incompatible as exc:
        out.append({"rule": exc.rule, "code": exc.code, "message": exc.message, "hint": exc.hint})
    else:
        out.append({"ok": True})
print(json.dumps(out))
`;

test('every audit rule, message and hint is the Python reference\'s', () => {
  const expected = python(PY, CASES);
  const rules = new Set();
  CASES.forEach(([text, me], i) => {
    let got;
    try {
      // outerRuns: the protocol's rules, as a peer that trains outer runs answers them
      R.parse(M.parse(text), { tokenizerSha256: SHA, vocabSize: 2048, outerRuns: true,
        privateData: me.private_data ?? false, minAudit: me.min_audit ?? 0 });
      got = { ok: true };
    } catch (exc) {
      if (!(exc instanceof R.Incompatible)) throw exc;
      got = { rule: exc.rule, code: exc.code, message: exc.message, hint: exc.hint };
    }
    assert.deepEqual(got, expected[i], `case ${i}: ${text} ${JSON.stringify(me)}`);
    rules.add(got.rule ?? 'ok');
  });
  for (const rule of ['ok', 'audit-rate', 'audit-private', 'audit-outer', 'private-data',
    'min-audit', 'outer-steps', 'lr']) {
    assert.ok(rules.has(rule), `no case reaches rule ${rule}`);
  }
});

test('a wrong minimum is a programming error, not a refusal', () => {
  for (const wrong of [-1, 65537, 1.5, true, '8', NaN]) {
    assert.throws(() => R.parse(M.parse(raw()), { tokenizerSha256: SHA, vocabSize: 2048, minAudit: wrong }),
      (exc) => exc instanceof RangeError && /minAudit must be an integer in \[0, 65536\]/.test(exc.message),
      String(wrong));
  }
});

test('audits off writes nothing; on, after outer, private only when not "refuse"', () => {
  const off = M.parse(raw());
  assert.equal(off.audit, null);
  assert.ok(!M.encode(off).includes('audit'));
  const on = M.encode(M.parse(raw({ audit: { one_in: 16, private: 'refuse' } })));
  assert.ok(on.endsWith('"shares_by":"speed","audit":{"one_in":16},"type":"config"}'), on);
  const both = M.encode(M.parse(raw({ audit: { private: 'unaudited', one_in: 2 }, ...OUTER })));
  assert.ok(both.endsWith('"outer":{"steps":3,"lr":0.7,"momentum":0.9},' +
    '"audit":{"one_in":2,"private":"unaudited"},"type":"config"}'), both);
  const built = M.message('config', { ...M.parse(raw()), audit: { one_in: 4 } });
  assert.ok(M.encode(built).endsWith(',"audit":{"one_in":4},"type":"config"}'));
});

test('version 7 records: a commit written by its piece, optional fields only when present', () => {
  const attempt = { run: '0123456789abcdef', step: 1, round: 0 };
  const reduced = M.message('commit', { ...attempt, peer: 'A', roster: H, piece: 'reduced',
    chunk: 3, digest: H, sig: SIG });
  assert.deepEqual(Object.keys(JSON.parse(M.encode(reduced))),
    ['run', 'step', 'round', 'peer', 'roster', 'piece', 'chunk', 'digest', 'sig', 'type']);
  assert.throws(() => M.message('commit', { ...attempt, peer: 'A', roster: H, piece: 'checkpoint',
    chunk: 3, digest: H, sig: SIG }), /unknown commit piece checkpoint/);
  assert.throws(() => M.message('commit', { ...attempt, peer: 'A', roster: H, piece: 'reduced',
    digest: H, sig: SIG }), /commit\.chunk is not a valid int/);
  const bare = M.message('audit', { ...attempt, item: 'reduced', index: 0, of: H, digests: [H],
    data: '', sig: SIG });
  assert.ok(!M.encode(bare).includes('statement'));
  assert.equal(M.encode(M.parse(M.encode(bare))), M.encode(bare));
  const roster = M.message('roster', { ...attempt, peers: ['a'], shares: [12], carry: [] });
  assert.ok(!M.encode(roster).includes('carry'));
  const carried = M.message('roster', { ...attempt, peers: ['a'], shares: [12], carry: [[1, 'b']] });
  assert.ok(M.encode(carried).endsWith('"shares":[12],"carry":[[1,"b"]],"type":"roster"}'));
  assert.throws(() => M.message('roster', { ...attempt, peers: ['a'], shares: [12], carry: [['1', 'b']] }),
    /roster\.carry is not a valid carry\?/);
});
