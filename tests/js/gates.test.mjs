// The page's GEMM gate set (static/js/gpu/gates.js) in Node, without a browser:
// - its cases are the Python gates' (tests/vectors/gates.json, written from daisychain.gpu.gates
//   by `python tests/vectorgen --write gates`): names, shapes, every operand's bytes and
//   casesDigest(); the comparison names a case that differs, is missing or is extra, so a gate
//   case added to one twin alone fails here, not only in Chromium (test_browser_gpu.py);
// - the CPU tier's GEMM (CpuGemm on the JS GEMM, no WebAssembly kernel installed) passes every
//   case and the kernel probe;
// - a GEMM that sums in float32 (exact while every partial sum is below 2^24) is refused by the
//   long-sum cases, and passes every other integer case: those two cases are what refuse it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { REPO } from './helpers.mjs';
import { casesDigest, gemmCases, qmatmulCases, runGemmGates } from '../../static/js/gpu/gates.js';
import { CpuGemm } from '../../static/js/gpu/gemm.js';
import { evaluateGemm, cpuAdapter } from '../../static/js/gpu/backend.js';
import { REFERENCE_PROBE_HASH } from '../../static/js/gpu/probe.js';
import { activeIntKernel } from '../../static/js/numerics/gemm.js';
import { sha256Arrays } from '../../static/js/numerics/hash.js';

const DOC = JSON.parse(fs.readFileSync(path.join(REPO, 'tests', 'vectors', 'gates.json'), 'utf-8'));
const LONG_SUMS = ['all 127, K=4099', '127 x -127, K=4099'];

/** The page's cases in the file's form: {kind, name, m, k, n, sha256: [per operand]}. */
async function pageCases(integer = gemmCases(), float = qmatmulCases()) {
  const entry = async (kind, c, operands) => ({
    kind, name: c.name, m: c.M, k: c.K, n: c.N,
    sha256: await Promise.all(operands.map((x) => sha256Arrays([x]))),
  });
  return [
    ...(await Promise.all(integer.map((c) => entry('integer', c, [c.a, c.b])))),
    ...(await Promise.all(float.map((c) => entry('float', c, [c.aq, c.ae, c.bq, c.be])))),
  ];
}

/** The first difference between the file's cases and the page's, in words, or null. */
function firstDifference(want, got) {
  for (let i = 0; i < Math.max(want.length, got.length); i++) {
    const w = want[i];
    const g = got[i];
    if (!g) return `case ${i} '${w.name}' is missing from the page's gates`;
    if (!w) return `case ${i} '${g.name}' is in the page's gates only`;
    for (const field of ['kind', 'name', 'm', 'k', 'n', 'sha256']) {
      if (JSON.stringify(w[field]) !== JSON.stringify(g[field])) {
        return `case ${i} '${w.name}': ${field} ${JSON.stringify(w[field])} in Python, ` +
          `${JSON.stringify(g[field])} in the page`;
      }
    }
  }
  return null;
}

test('the page gates on the Python gates\' inputs, case for case (tests/vectors/gates.json)',
  async () => {
    const integer = gemmCases();
    assert.equal(integer.length, DOC.integer_cases);
    assert.equal(qmatmulCases().length, DOC.float_cases);
    assert.equal(firstDifference(DOC.cases, await pageCases()), null);
    assert.equal(await casesDigest(), DOC.digest);
    for (const name of LONG_SUMS) {
      const c = integer.find((x) => x.name === name);
      assert.deepEqual([c.M, c.K, c.N], [5, 4099, 6], name); // tiny in M and N
    }
  });

test('the comparison names a case changed, dropped or added in one twin', async () => {
  const integer = gemmCases();
  const float = qmatmulCases();
  const flipped = integer.map((c) => (c.name === LONG_SUMS[1] ? { ...c, b: c.b.slice() } : c));
  flipped.find((c) => c.name === LONG_SUMS[1]).b[4098 * 6 + 5] = 127; // one value of b
  assert.match(firstDifference(DOC.cases, await pageCases(flipped, float)),
    /^case \d+ '127 x -127, K=4099': sha256 \[.*\] in Python, .* in the page$/);
  const dropped = integer.filter((c) => !LONG_SUMS.includes(c.name)); // the page of before
  assert.match(firstDifference(DOC.cases, await pageCases(dropped, float)),
    /^case \d+ 'all 127, K=4099': name "all 127, K=4099" in Python, "random 0" in the page$/);
  assert.match(firstDifference(DOC.cases.slice(0, -1), await pageCases(integer, float)),
    /^case 51 'float large scales' is in the page's gates only$/);
  assert.match(firstDifference(DOC.cases, await pageCases(integer, float.slice(0, -1))),
    /^case 51 'float large scales' is missing from the page's gates$/);
  const moved = integer.map((c) => (c.name === 'K=4099' ? { ...c, K: 4098 } : c));
  assert.match(firstDifference(DOC.cases, await pageCases(moved, float)),
    /^case \d+ 'K=4099': k 4099 in Python, 4098 in the page$/);
});

test('the CPU tier\'s JS GEMM passes every gate case and the kernel probe', async () => {
  assert.equal(activeIntKernel(), null); // the JS GEMM itself, not a WebAssembly kernel
  const row = await evaluateGemm(new CpuGemm(), cpuAdapter());
  assert.equal(row.failure, null);
  assert.equal(row.gates_passed, true);
  assert.equal(row.cases_passed, DOC.integer_cases + DOC.float_cases);
  assert.equal(row.probe_hash, REFERENCE_PROBE_HASH);
});

/** Sums in float32 from the last k down: a real kernel bug, exact wherever sums stay small. */
class Float32Sums {
  get name() {
    return 'float32-sums';
  }

  get tile() {
    return [32, 32];
  }

  async matmulInt(a, b, M, K, N) {
    const out = new Int32Array(M * N);
    for (let i = 0; i < M; i++) {
      for (let j = 0; j < N; j++) {
        let s = 0;
        for (let k = K - 1; k >= 0; k--) s = Math.fround(s + a[i * K + k] * b[k * N + j]);
        out[i * N + j] = s;
      }
    }
    return out;
  }
}

function exact(c) {
  const out = new Int32Array(c.M * c.N);
  for (let i = 0; i < c.M; i++) {
    for (let j = 0; j < c.N; j++) {
      let s = 0; // a double: exact below 2^53
      for (let k = 0; k < c.K; k++) s += c.a[i * c.K + k] * c.b[k * c.N + j];
      out[i * c.N + j] = s;
    }
  }
  return out;
}

test('a GEMM that sums in float32 is refused by the long-sum cases and by nothing else',
  async () => {
    const planted = new Float32Sums();
    const report = await runGemmGates(planted);
    const cases = gemmCases();
    assert.equal(report.failure?.case, LONG_SUMS[0]);
    assert.equal(report.casesPassed, cases.findIndex((c) => c.name === LONG_SUMS[0]));
    // 4099 * 127 * 127 = 66112771 is odd; float32 past 2^25 holds multiples of 4 only
    assert.equal(report.failure.expected, '66112771');
    assert.notEqual(report.failure.got, '66112771');
    assert.match(report.failure.describe(),
      /^float32-sums failed gate 'all 127, K=4099' shape \(5, 4099, 6\): first mismatch at \(0, 0\)/);
    const wrong = [];
    for (const c of cases) {
      const got = await planted.matmulInt(c.a, c.b, c.M, c.K, c.N);
      if (!exact(c).every((v, i) => v === got[i])) wrong.push(c.name);
    }
    assert.deepEqual(wrong, LONG_SUMS); // each long case refuses it alone; no other case does
  });
