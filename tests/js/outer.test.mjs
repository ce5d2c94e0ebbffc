// The outer loop's arithmetic in JavaScript (static/js/outer/) against the Python reference's
// golden vectors (tests/vectors/outer/, written by vectorgen.outer): the token-weighted
// mean and the Nesterov outer step with its hash, bit for bit; refusals with Python's messages;
// and a planted unweighted mean and a planted momentum order each fail the vectors.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { REPO } from './helpers.mjs';
import { plantedCopy } from './protocol_helpers.mjs';

const DIR = path.join(REPO, 'tests', 'vectors', 'outer');
const MEAN = JSON.parse(readFileSync(path.join(DIR, 'mean.json'), 'utf8'));
const NESTEROV = JSON.parse(readFileSync(path.join(DIR, 'nesterov.json'), 'utf8'));
const HERE = {
  mean: await import('../../static/js/outer/mean.js'),
  nesterov: await import('../../static/js/outer/nesterov.js'),
};

/** A base64 float32 little-endian array as a Float32Array (a copy: the tests mutate). */
function f32(text) {
  const bytes = Buffer.from(text, 'base64');
  const out = new Float32Array(bytes.length / 4);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(4 * i, true);
  return out;
}

const params = (obj) => new Map(Object.entries(obj).map(([n, t]) => [n, f32(t)]));

/** The first index where two Float32Arrays differ in bits, described; null when equal. */
function bitDifference(got, want) {
  if (got.length !== want.length) return `length ${got.length}, expected ${want.length}`;
  const g = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const w = new Uint32Array(want.buffer, want.byteOffset, want.length);
  for (let i = 0; i < g.length; i++) {
    if (g[i] !== w[i]) return `index ${i}: got ${got[i]}, expected ${want[i]}`;
  }
  return null;
}

/** Every mean case through `mod`; the first case that differs, or null. */
function meanFailure(mod) {
  for (const c of MEAN.cases) {
    const diff = bitDifference(mod.weightedMean(c.values.map(f32), c.tokens), f32(c.mean));
    if (diff !== null) return `mean ${c.name}: ${diff}`;
  }
  return null;
}

/** Every Nesterov run through `mod`; the first step that differs, or null. */
async function nesterovFailure(mod) {
  for (const run of NESTEROV.runs) {
    const state = mod.outerState(params(run.start.weights), params(run.start.momentum));
    if (await mod.outerHash(state) !== run.start.hash) return `${run.name}: start hash`;
    const cfg = mod.outerConfig({ innerSteps: 1, lr: run.lr, momentum: run.momentum });
    for (const [s, step] of run.steps.entries()) {
      mod.applyOuter(state, cfg, f32(step.mean));
      for (const [field, want] of [['params', step.weights], ['momentum', step.momentum]]) {
        for (const [name, text] of Object.entries(want)) {
          const diff = bitDifference(state[field].get(name), f32(text));
          if (diff !== null) return `${run.name} step ${s + 1} ${field} ${name}: ${diff}`;
        }
      }
      if (await mod.outerHash(state) !== step.hash) return `${run.name} step ${s + 1}: hash`;
      if (state.step !== s + 1) return `${run.name} step ${s + 1}: state.step ${state.step}`;
    }
  }
  return null;
}

test('the vectors are the outer set of format version 1, with the cases they promise', () => {
  for (const file of [MEAN, NESTEROV]) {
    assert.equal(file.format, 'daisychain-outer-vectors');
    assert.equal(file.format_version, 1);
  }
  const names = MEAN.cases.map((c) => c.name);
  for (const name of ['add-ties', 'product-ties', 'roster-order', 'gcd-6-3-3', 'uneven-5-2-1',
    'zero-share', 'zero-first', 'one-peer']) assert.ok(names.includes(name), name);
  assert.deepEqual(NESTEROV.runs.map((r) => r.name), ['diloco', 'averaging', 'momentum-start']);
});

test('every weighted mean is the Python reference\'s, bit for bit', () => {
  assert.equal(meanFailure(HERE.mean), null);
});

test('refused means throw MeanError with the Python message', () => {
  assert.ok(MEAN.refused.length >= 3);
  for (const c of MEAN.refused) {
    const values = c.tokens.map(() => new Float32Array(c.size));
    assert.throws(() => HERE.mean.weightedMean(values, c.tokens),
      (exc) => exc instanceof HERE.mean.MeanError && exc.message === c.error, c.name);
  }
  assert.throws(() => HERE.mean.weightedMean([new Float32Array(4)], [1, 1]), /1 pseudo-gradients/);
  assert.throws(() => HERE.mean.weightedMean([new Float32Array(4), new Float32Array(3)], [1, 1]),
    /peer 1: pseudo-gradient of 3 values/);
});

test('the pseudo-gradient is the Python reference\'s, bit for bit', () => {
  const pg = NESTEROV.pseudo_gradient;
  const delta = HERE.nesterov.pseudoGradient(params(pg.outer), params(pg.local));
  assert.equal(bitDifference(delta, f32(pg.delta)), null);
});

test('every outer step (weights, momentum, outer_hash) is the Python reference\'s', async () => {
  assert.equal(await nesterovFailure(HERE.nesterov), null);
});

test('the outer step refuses a mean of the wrong size or a non-finite one', () => {
  const n = HERE.nesterov;
  const state = n.initOuter(new Map([['a', new Float32Array(10)]]));
  const cfg = n.outerConfig({ innerSteps: 1, lr: 1, momentum: 0 });
  assert.throws(() => n.applyOuter(state, cfg, new Float32Array(10 + 256)), /padded to whole blocks/);
  const bad = new Float32Array(256);
  bad[3] = Number.NaN;
  assert.throws(() => n.applyOuter(state, cfg, bad), /non-finite pseudo-gradient/);
  assert.equal(state.step, 0);
  for (const wrong of [{ innerSteps: 0 }, { lr: 0 }, { momentum: 1 }, { momentum: -0.1 },
    { overlap: -0.1 }, { overlap: 1.5 }, { cut: 'tokens' }]) {
    assert.throws(() => n.outerConfig(wrong), n.OuterError, JSON.stringify(wrong));
  }
});

// One line planted in a copy of static/js/: the vectors must notice.
const PLANTED = [
  ['an unweighted mean (every contributor weighs 1)', 'outer/mean.js',
    'const out = tokens.map((t) => t / g);', 'const out = tokens.map((t) => (t > 0 ? 1 : 0));',
    'mean', /^mean product-ties: index 0: got 0.5000000596046448, expected 0.7500001192092896$/],
  ['the momentum updated after the look-ahead', 'outer/nesterov.js',
    '      m[i] = Math.fround(Math.fround(m[i] * mu) + g);\n' +
    '      const u = Math.fround(g + Math.fround(m[i] * mu));',
    '      const u = Math.fround(g + Math.fround(m[i] * mu));\n' +
    '      m[i] = Math.fround(Math.fround(m[i] * mu) + g);',
    'nesterov', /^diloco step 1 params wte: index 0: /],
];

for (const [what, file, from, to, kind, expected] of PLANTED) {
  test(`a planted bug fails the vectors: ${what}`, async () => {
    const copy = plantedCopy(file, from, to);
    try {
      const mod = await import(copy.url(file));
      const failure = kind === 'mean' ? meanFailure(mod) : await nesterovFailure(mod);
      assert.match(String(failure), expected);
    } finally {
      copy.dispose();
    }
  });
}
