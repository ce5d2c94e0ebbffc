// Config equality on the JavaScript machine: tests/vectors/config_equality.json (written from the
// Python machine by tests/config_vectors.py). A second config from another peer is the run's own
// exactly when its parsed record encodes to the run's bytes (sameConfig); one that differs in any
// field of the record, outer.overlap, outer.cut and audit included, is wrong-run. Every case replays to
// exactly the Python effects; the parsed record here has exactly the fields the Python record
// has; and the rule this one replaced (a hand-kept list of fields), planted in a copy of
// static/js/, fails the cases it missed.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { REPO } from './helpers.mjs';
import { plantedCopy } from './protocol_helpers.mjs';
import { replay } from './traces/playback.js';
import { sameConfig } from '../../static/js/p2p/machine/machine.js';
import { parse } from '../../static/js/p2p/messages.js';

const VECTORS = JSON.parse(readFileSync(path.join(REPO, 'tests', 'vectors', 'config_equality.json'), 'utf8'));
const { cases: CASES } = VECTORS;

/** The stored start with the case's step appended: one protocol trace. */
const caseTrace = (c) => ({ ...VECTORS.trace, name: c.name, steps: [...VECTORS.trace.steps, c.step] });

/** Dotted paths of a parsed record's leaves (`type` is the message kind, not a field). */
function leaves(record, prefix = '') {
  return Object.entries(record).filter(([k]) => k !== 'type').flatMap(([k, v]) =>
    (v !== null && typeof v === 'object' ? leaves(v, `${prefix}${k}.`) : [`${prefix}${k}`]));
}

test('the file is a config-equality set whose field cases cover every field of the parsed record', () => {
  assert.equal(VECTORS.format, 'daisychain-config-equality');
  assert.equal(VECTORS.format_version, 1);
  // The base has no audit (a version-6 follower would refuse it): its record holds audit null;
  // the audit.private case's record holds every field.
  const base = parse(VECTORS.base);
  const withAudit = VECTORS.fields.filter((f) => !f.startsWith('audit.'));
  assert.deepEqual(leaves(base), [...withAudit, 'audit'], 'the JS record has other fields than the Python one');
  const full = parse(CASES.find((c) => c.field === 'audit.private').step.event.text);
  assert.deepEqual(leaves(full), VECTORS.fields, 'the JS record has other fields than the Python one');
  const refused = new Set(CASES.filter((c) => c.expect === 'wrong-run').map((c) => c.field));
  assert.deepEqual(VECTORS.fields.filter((f) => !refused.has(f)), []);
  assert.ok(refused.has('outer.overlap') && refused.has('outer.cut'));
  assert.ok(refused.has('audit.one_in') && refused.has('audit.private'));
});

for (const c of CASES) {
  test(`config case "${c.name}": ${c.expect}, the Python machine's effects`, async () => {
    assert.equal(await replay(caseTrace(c)), VECTORS.trace.steps.length + 1);
    const base = parse(VECTORS.base);
    assert.equal(sameConfig(base, parse(c.step.event.text)), c.expect === 'accepted');
    assert.equal(sameConfig(parse(c.step.event.text), base), c.expect === 'accepted');
  });
}

// The comparison before issue 41: a list of fields kept by hand (outer only on steps, lr and
// momentum; model and optim by the first record's keys; === taking -0 for 0).
const LISTED = `{
  const keys = ['run', 'preset', 'steps', 'seed', 'data', 'tokenizer_sha256', 'resume_step',
    'resume_hash', 'global_batch', 'shares_by'];
  const outerA = a.outer ?? null;
  const outerB = b.outer ?? null;
  return keys.every((k) => a[k] === b[k]) &&
    Object.keys(a.model).every((k) => a.model[k] === b.model[k]) &&
    Object.keys(a.optim).every((k) => a.optim[k] === b.optim[k]) &&
    (a.sync ?? SYNC_STEP) === (b.sync ?? SYNC_STEP) &&
    (outerA === null || outerB === null ? outerA === outerB
      : ['steps', 'lr', 'momentum'].every((k) => outerA[k] === outerB[k]));
}`;

test('the rule of a hand-kept list of fields, planted, accepts the configs it missed', async () => {
  const copy = plantedCopy('p2p/machine/machine.js', '{\n  return encodeMessage(a) === encodeMessage(b);\n}', LISTED);
  try {
    const { replay: plantedReplay } = await import(copy.url('tests/js/traces/playback.js'));
    const missed = [];
    for (const c of CASES) {
      try {
        await plantedReplay(caseTrace(c));
      } catch {
        missed.push(c.name);
      }
    }
    // (and audit, which it never listed: a field added later is missed by such a list)
    assert.deepEqual(missed, ['outer.overlap', 'outer.cut', 'audit.one_in', 'audit.private',
      'optim.weight_decay -0.0 (0.0 in the run)']);
  } finally {
    copy.dispose();
  }
});
