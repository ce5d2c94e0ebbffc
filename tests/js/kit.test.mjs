// The inference kit's parts under Node: the module joiner (static/js/kit/bundle.js) and the kit's
// data checks (kit/runtime.js loadKitData). The joined script, evaluated on its own, generates
// the same ids as the modules imported directly; every form the joiner cannot translate is
// refused with the module's name; a kit whose format, contract version, weights or tokenizer do
// not match its record refuses to start. (The whole kit runs in Chromium from file:// in
// tests/browser/test_browser_kit.py.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { REPO } from './helpers.mjs';
import { bundle, wrapModule, importsOf, BundleError } from '../../static/js/kit/bundle.js';
import { buildKit, kitFileName } from '../../static/js/kit/build.js';
import { loadKitData, fromBase64 } from '../../static/js/kit/runtime.js';
import { preset } from '../../static/js/model/config.js';
import { CONTRACT_VERSION } from '../../static/js/numerics/index.js';
import { initParams } from '../../static/js/model/params.js';
import { settings, generate } from '../../static/js/model/generate.js';
import { Tokenizer } from '../../static/js/tokenizer.js';

const JS = pathToFileURL(path.join(REPO, 'static', 'js') + '/').href;
const readFile = async (url) => fs.readFileSync(fileURLToPath(url), 'utf-8');
const TOKENIZER_BYTES = new Uint8Array(fs.readFileSync(path.join(REPO, 'luts', 'tokenizer.json')));

test('the joined script generates the same ids as the modules themselves', async () => {
  const script = await bundle(new URL('kit/runtime.js', JS).href, JS, readFile);
  const modules = new Function(`${script}\nreturn __m;`)(); // no document: the kit does not start
  assert.deepEqual(Object.keys(modules).slice(-2), ['model/generate.js', 'kit/runtime.js']);
  const cfg = preset('tiny');
  const params = initParams(cfg, 3);
  const s = settings({ temperature: 0.9, topK: 50, seed: 4, maxTokens: 12 });
  const tok = await Tokenizer.fromBytes(TOKENIZER_BYTES);
  const direct = generate(params, cfg, tok, 'Hello there', s);
  const J = modules['model/generate.js'];
  const jtok = new modules['tokenizer.js'].Tokenizer(JSON.parse(new TextDecoder().decode(TOKENIZER_BYTES)));
  const joined = J.generate(params, modules['model/config.js'].preset('tiny'), jtok, 'Hello there',
    J.settings({ temperature: 0.9, topK: 50, seed: 4, maxTokens: 12 }));
  assert.deepEqual(joined.ids, direct.ids);
  assert.equal(joined.text, direct.text);
  // the dynamic import in tokenizer.js was joined too
  const hashed = await modules['tokenizer.js'].Tokenizer.fromBytes(TOKENIZER_BYTES);
  assert.equal(hashed.sha256, tok.sha256);
});

test('joiner: each form it cannot translate is refused with the module name', async () => {
  const resolve = (spec) => spec.replace('./', '');
  const cases = [
    ['export default 1;\n', /m\.js: cannot join 'export default 1;'/],
    ['import x from \'./a.js\';\n', /m\.js: cannot join 'import x from/],
    ['export const { a, b } = o;\n', /cannot join 'export const \{ a, b \}/],
    ['const u = import.meta.url;\n', /import\.meta cannot be joined/],
    ['import { a as 1b } from \'./a.js\';\n', /cannot join the import\/export item/],
  ];
  for (const [source, pattern] of cases) {
    assert.throws(() => wrapModule('m.js', source, resolve), (e) => e instanceof BundleError && pattern.test(e.message), source);
  }
  const sources = {
    'x/a.js': "import { b } from './b.js';\nexport const a = 1;\n",
    'x/b.js': "import { a } from './a.js';\nexport const b = 2;\n",
    'x/c.js': "import { z } from '../../outside.js';\n",
    'x/d.js': "import { z } from 'bare-package';\n",
    'x/e.js': "export const s = '</script>';\n",
  };
  const root = 'file:///r/';
  const read = async (url) => sources[url.slice(root.length)];
  await assert.rejects(bundle(`${root}x/a.js`, root, read), /import cycle through x\/a\.js/);
  await assert.rejects(bundle(`${root}x/c.js`, root, read), /lies outside file:\/\/\/r\//);
  await assert.rejects(bundle(`${root}x/d.js`, root, read), /'bare-package' is not a relative path/);
  await assert.rejects(bundle(`${root}x/e.js`, root, read), /contains "<\/script"/);
  assert.deepEqual(importsOf("import { a } from './a.js';\nexport * from \"./b.js\";\nawait import('./c.js');\n"),
    ['./a.js', './b.js', './c.js']);
});

async function kitParts(html) {
  const block = (id) => html.match(new RegExp(`<script type="[^"]+" id="${id}">([^<]*)</script>`))[1];
  return {
    meta: JSON.parse(block('kit-meta')),
    weights: fromBase64(block('kit-weights')),
    tokenizer: fromBase64(block('kit-tokenizer')),
  };
}

test('kit data: the recorded checks refuse a wrong format, contract, weights or tokenizer', async () => {
  const cfg = preset('tiny');
  const params = initParams(cfg, 2);
  const html = await buildKit({ model: cfg, params, tokenizerBytes: TOKENIZER_BYTES, info: { step: 7 }, read: readFile });
  assert.match(html, /<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'sha256-/);
  assert.equal(kitFileName({ step: 7, weight_hash: 'abcdef0123456789' }), 'daisychain-kit-step7-abcdef01.html');
  const { meta, weights, tokenizer } = await kitParts(html);
  const ok = await loadKitData(meta, weights, tokenizer);
  for (const [name, a] of params) assert.deepEqual(ok.params.get(name), a, name);
  const bad = [
    [{ ...meta, format: 'other' }, weights, tokenizer, /not a daisychain-kit version 1/],
    [{ ...meta, contract_version: CONTRACT_VERSION + 1 }, weights, tokenizer,
      new RegExp(`numerical contract ${CONTRACT_VERSION + 1}, this code implements ${CONTRACT_VERSION}`)],
    [meta, weights.slice(0, -4), tokenizer, /weights in this file are damaged/],
    [meta, weights.map((b, i) => (i === 100 ? b ^ 1 : b)), tokenizer, /weights in this file are damaged/],
    [meta, weights, tokenizer.map((b, i) => (i === 100 ? b ^ 1 : b)), /tokenizer in this file is damaged/],
  ];
  for (const [m, w, t, pattern] of bad) await assert.rejects(loadKitData(m, w, t), pattern);
  const wrong = new Map(params);
  wrong.set('gf', new Float32Array(3));
  await assert.rejects(buildKit({ model: cfg, params: wrong, tokenizerBytes: TOKENIZER_BYTES, read: readFile }),
    /parameter gf: expected a Float32Array of shape \[64\]/);
});
