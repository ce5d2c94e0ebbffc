// The tokenizer mirror against the golden cases of the Python encoder (docs/TOKENIZER.md).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Tokenizer, TokenizerFileError, splitBytes } from '../../static/js/tokenizer.js';
import { REPO } from './helpers.mjs';

const RAW = fs.readFileSync(path.join(REPO, 'luts', 'tokenizer.json'));
const CASES = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'tokenizer.json')));
const tk = await Tokenizer.fromBytes(RAW, 'luts/tokenizer.json');

const chunks = (text) => {
  const bytes = new TextEncoder().encode(text);
  let from = 0;
  return splitBytes(bytes).map((to) => {
    const c = new TextDecoder().decode(bytes.subarray(from, to));
    from = to;
    return c;
  });
};

test('the golden vectors cover enough cases to mean something', () => {
  assert.ok(CASES.length >= 40, `${CASES.length} cases`);
  assert.ok(CASES.some((c) => c.name === 'long_mixture' && c.text.length >= 8000));
});

for (const c of CASES) {
  test(`golden case ${c.name}: encode gives the reference ids, decode gives the text back`, () => {
    assert.deepEqual(tk.encode(c.text), c.ids);
    assert.equal(tk.decode(c.ids), c.text);
  });
}

test('pre-splitting follows the spec examples', () => {
  assert.deepEqual(chunks('a   b'), ['a', '  ', ' b']);
  assert.deepEqual(chunks('in 1611'), ['in', ' ', '161', '1']);
  assert.deepEqual(chunks('12345'), ['123', '45']);
  assert.deepEqual(chunks('\n\nword'), ['\n\n', 'word']);
  assert.deepEqual(chunks('x \n y'), ['x', ' \n', ' y']);
  assert.deepEqual(chunks('a\u00a0b c'), ['a\u00a0b', ' c']);
  assert.deepEqual(chunks('hi  !'), ['hi', ' ', ' !']);
  assert.deepEqual(chunks('end   '), ['end', '   ']);
  assert.deepEqual(chunks(''), []);
});

test('identity: the file hash, vocabulary size and end-of-text id', () => {
  assert.equal(tk.sha256, '6096ae8464eb7d00c74c6372506fcc8f6f3c07cd05354a4f1a643163e55bb7d0');
  assert.equal(tk.vocabSize, 2048);
  assert.equal(tk.eotId, 2047);
  assert.deepEqual(tk.encode('<|endoftext|>'), [2047]);
});

test('lone surrogates are refused; invalid UTF-8 decodes to U+FFFD; a BOM is kept', () => {
  assert.throws(() => tk.encode('ok \ud800 no'), /lone surrogate U\+D800 at index 3/);
  assert.throws(() => tk.encode('\udc00'), RangeError);
  assert.doesNotThrow(() => tk.encode('\ud83d\ude00'));
  const ff = tk.encodeBytes(new Uint8Array([0xff]));
  assert.equal(tk.decode(ff), '\ufffd');
  assert.equal(tk.decode(tk.encode('\ufeffx')), '\ufeffx');
  assert.throws(() => tk.decode([2048]), RangeError);
});

test('a tokenizer.json with another pipeline is refused', () => {
  const spec = JSON.parse(RAW.toString('utf-8'));
  spec.normalizer = { type: 'NFC' };
  assert.throws(() => new Tokenizer(spec), TokenizerFileError);
  const other = JSON.parse(RAW.toString('utf-8'));
  other.pre_tokenizer.pretokenizers[0].pattern.Regex = '\\s+';
  assert.throws(() => new Tokenizer(other), /pre-tokenizer/);
});
