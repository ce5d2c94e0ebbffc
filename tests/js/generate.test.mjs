// static/js/model/generate.js against the generation golden vectors (tests/vectors/generate/):
// the rule on hand-made logits (ties, signed zeros, exp underflow) and whole generations from the
// golden checkpoint (rebuilt by the Python reference from its recipe, its weight hash checked,
// then decoded and validated by static/js/p2p/checkpoint.js): ids, prompt ids, text and stop
// reason equal Python's for every case. Every settings check refuses its wrong input.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnSync } from 'node:child_process';

import { REPO, fromBits } from './helpers.mjs';
import {
  settings, pick, generate, generateAsync, generateSteps, topKFor, startContext, candidateOrder, GenerateError,
  MAX_NEW_TOKENS, MAX_PROMPT_TOKENS,
} from '../../static/js/model/generate.js';
import { Tokenizer } from '../../static/js/tokenizer.js';
import { decodeCheckpoint } from '../../static/js/p2p/checkpoint.js';
import { preset } from '../../static/js/model/config.js';
import { initParams } from '../../static/js/model/params.js';

const VECTORS = JSON.parse(
  fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'generate', 'cases.json'), 'utf-8'));
const TOKENIZER_BYTES = fs.readFileSync(path.join(REPO, 'luts', 'tokenizer.json'));
let dir;
let golden; // {params: Map, model}
let tokenizer;

const jsSettings = (s) => settings({
  temperature: s.temperature, topK: s.top_k, seed: s.seed, maxTokens: s.max_tokens,
});

before(async () => {
  tokenizer = await Tokenizer.fromBytes(TOKENIZER_BYTES, 'luts/tokenizer.json');
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dc-generate-'));
  const file = path.join(dir, 'golden.safetensors');
  const py = process.env.PYTHON ?? 'python';
  const res = spawnSync(py, ['-m', 'vectorgen.generation', file], {
    cwd: REPO,
    env: { ...process.env, PYTHONPATH: [path.join(REPO, 'server'), path.join(REPO, 'tests')].join(path.delimiter) },
    encoding: 'utf-8',
    timeout: 300_000,
  });
  assert.equal(res.status, 0, `Python fixture failed: ${res.error ?? ''}\n${res.stderr}`);
  const ck = await decodeCheckpoint(fs.readFileSync(file), 'golden.safetensors', {
    tokenizerSha256: tokenizer.sha256, vocabSize: tokenizer.vocabSize,
  });
  assert.equal(ck.weightHash, VECTORS.checkpoint.weight_hash, 'the recipe rebuilt another checkpoint');
  const params = new Map(ck.state.params.names.map((n, i) => [n, ck.state.params.arrays[i]]));
  golden = { params, model: ck.model };
});

after(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('vectors file: format and contract version this mirror implements', () => {
  assert.equal(VECTORS.format, 'daisychain-generate-vectors');
  assert.equal(VECTORS.format_version, 1);
  assert.equal(VECTORS.contract_version, 1);
  assert.ok(VECTORS.pick.length >= 10 && VECTORS.cases.length >= 10);
});

test('pick: every hand-made case gives Python\'s id', () => {
  for (const c of VECTORS.pick) {
    const logits = Float32Array.from(c.logits_bits, fromBits);
    assert.equal(pick(logits, c.temperature, c.top_k, c.seed, c.position), c.id, c.name);
  }
});

test('candidate order: logit descending, ties (and +0/-0) by id ascending', () => {
  assert.deepEqual(candidateOrder(Float32Array.of(1, 3, 3, 0, 3)), [1, 2, 4, 0, 3]);
  assert.deepEqual(candidateOrder(Float32Array.of(-0, 0, -1)), [0, 1, 2]);
  assert.throws(() => candidateOrder(Float32Array.of(0, NaN)), GenerateError);
  assert.throws(() => candidateOrder(Float32Array.of(0, Infinity)), /diverged/);
});

test('pick: the draw depends on seed and position, never on anything else', () => {
  const logits = new Float32Array(64); // uniform: every id equally likely
  const seen = new Set();
  for (let p = 0; p < 64; p++) seen.add(pick(logits, 1, 64, 7, p));
  assert.ok(seen.size > 20, `64 positions drew only ${seen.size} distinct ids`);
  assert.equal(pick(logits, 1, 64, 7, 3), pick(logits, 1, 64, 7, 3));
});

test('generation: every golden case gives Python\'s ids, text and stop', () => {
  for (const c of VECTORS.cases) {
    const out = generate(golden.params, golden.model, tokenizer, c.prompt, jsSettings(c.settings));
    assert.deepEqual(out.promptIds, c.prompt_ids, `${c.name}: prompt ids`);
    assert.deepEqual(out.ids, c.ids, `${c.name}: ids`);
    assert.equal(out.text, c.text, `${c.name}: text`);
    assert.equal(out.stop, c.stop, `${c.name}: stop`);
  }
});

test('generateAsync: the same ids, one onToken call per id, and an abort stops it', async () => {
  const c = VECTORS.cases.find((k) => k.name === 't08-k40-s1');
  const seen = [];
  const out = await generateAsync(golden.params, golden.model, tokenizer, c.prompt,
    jsSettings(c.settings), { onToken: (id) => seen.push(id) });
  assert.deepEqual(out.ids, c.ids);
  assert.deepEqual(seen, c.ids);
  const ctrl = new AbortController();
  const cut = await generateAsync(golden.params, golden.model, tokenizer, c.prompt,
    jsSettings(c.settings), { signal: ctrl.signal, onToken: (_, ids) => { if (ids.length === 3) ctrl.abort(); } });
  assert.equal(cut.stop, 'aborted');
  assert.deepEqual(cut.ids, c.ids.slice(0, 3));
});

test('settings: each check refuses its wrong input with a hint', () => {
  const bad = [
    [{ temperature: -0.1 }, /negative; use 0 for greedy/],
    [{ temperature: NaN }, /finite number/],
    [{ temperature: Infinity }, /finite number/],
    [{ temperature: '1' }, /finite number/],
    [{ temperature: 100.5 }, /above 100/],
    [{ topK: 0 }, /top_k must be a positive integer/],
    [{ topK: 2.5 }, /top_k must be a positive integer/],
    [{ seed: -1 }, /seed must be an integer in \[0, 4294967295\]/],
    [{ seed: 4294967296 }, /seed must be an integer/],
    [{ seed: 1.5 }, /seed must be an integer/],
    [{ maxTokens: 0 }, /max_tokens must be an integer in \[1, 1024\]/],
    [{ maxTokens: MAX_NEW_TOKENS + 1 }, /ask for fewer tokens/],
  ];
  for (const [fields, pattern] of bad) {
    assert.throws(() => settings(fields), (e) => e instanceof GenerateError && pattern.test(e.message),
      JSON.stringify(fields));
  }
  assert.equal(settings({ temperature: 100, topK: null }).topK, null); // the edges are allowed
  assert.throws(() => topKFor(settings({ topK: 2049 }), 2048), /exceeds the vocabulary \(2048 tokens\)/);
  assert.equal(topKFor(settings({ topK: 2048 }), 2048), 2048);
  assert.equal(topKFor(settings({ topK: null }), 2048), 2048);
});

test('prompts: empty starts from <|endoftext|>, too long and lone surrogates are refused', () => {
  assert.deepEqual(startContext([], 2047), [2047]);
  assert.throws(() => generateSteps(initParams(preset('tiny'), 1), preset('tiny'), [], settings(), 2047).next(),
    /the context is empty/);
  assert.throws(() => startContext([], null), /no <\|endoftext\|> token/);
  assert.throws(() => startContext(new Array(MAX_PROMPT_TOKENS + 1).fill(5), 2047), /above 4096; .*shorten it/);
  const cfg = preset('tiny');
  const params = initParams(cfg, 1);
  const s = settings({ maxTokens: 1 });
  assert.throws(() => generate(params, cfg, tokenizer, 'bad \ud800 text', s),
    (e) => e instanceof GenerateError && /lone surrogate/.test(e.message));
  assert.throws(() => generate(params, cfg, tokenizer, 'x'.repeat(MAX_PROMPT_TOKENS * 2) + ' ' +
    'a b '.repeat(MAX_PROMPT_TOKENS), s), /shorten it/);
  const other = preset('tiny', { vocabSize: 300 });
  assert.throws(() => generate(initParams(other, 1), other, tokenizer, 'x', s),
    /tokenizer has 2048 tokens, the model 300/);
  assert.throws(() => generate(params, cfg, tokenizer, 'x', settings({ topK: 4096 })),
    /exceeds the vocabulary/);
});
