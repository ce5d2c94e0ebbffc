// static/js/datanames.js against tests/vectors/datanames.json (written by the Python reference,
// daisychain.datanames): every name parses to the same parts, is described in the same words, or
// is refused with the same message; and the JS-only traps (UTF-16 length, \w) are exercised.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { REPO } from './helpers.mjs';
import { BUILTIN, MAX_LENGTH, describe, parse } from '../../static/js/datanames.js';
import { revisionOf } from '../../static/js/fineweb.js';

const DOC = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'datanames.json'), 'utf-8'));

test('the file covers accepted and refused names of every kind', () => {
  assert.equal(DOC.max_length, MAX_LENGTH);
  const kinds = new Set(DOC.cases.filter((c) => c.parsed).map((c) => c.parsed.kind));
  assert.deepEqual([...kinds].sort(), ['fineweb', 'hub', 'local']);
  assert.ok(DOC.cases.filter((c) => 'error' in c).length >= 10);
});

for (const c of DOC.cases) {
  test(`case ${c.name}`, () => {
    if ('error' in c) {
      assert.throws(() => parse(c.data), (e) => e instanceof RangeError && e.message === c.error);
      assert.throws(() => revisionOf(c.data), RangeError);
      return;
    }
    const parsed = parse(c.data);
    if (c.parsed === null) {
      assert.equal(parsed, null);
      assert.equal(c.data, BUILTIN);
    } else {
      assert.deepEqual({ ...parsed }, c.parsed);
      assert.equal(revisionOf(c.data), c.parsed.revision);
    }
    assert.equal(describe(c.data), c.describe);
  });
}

test('a name of 200 astral characters is 400 UTF-16 units, refused for its pattern, not length', () => {
  const name = '\u{1F600}'.repeat(200);
  assert.equal(name.length, 400);
  assert.throws(() => parse(name), /unknown data source/);
  assert.throws(() => parse('\u{1F600}'.repeat(201)), /longer than 200/);
});

test('a non-string is refused', () => {
  assert.throws(() => parse(42), RangeError);
  assert.throws(() => parse(null), RangeError);
});
