// The WebAssembly SIMD elementwise kernel (kernels/elementwise_f32.wat ->
// static/wasm/elementwise_f32.wasm, driven by static/js/numerics/wasmelementwise.js, gated by
// wasmeltgate.js; docs/KERNELS.md "WebAssembly SIMD elementwise kernel"): the committed binary
// validates and compiles here; every quantizer and both gradient operands give the JS mirror's
// bits through it on random shapes (batches, magnitudes from 1e-38 to 1e28, shared and per-batch
// folds); shapes it does not take stay on the JS path; the cross-entropy (xent.js) gives the JS
// bits through it on random rows, V a multiple of 4 or not; with it installed (and the GEMM) the
// golden vectors, the quantizer and GEMM tests, the golden training run and the trainer give the
// same bits (a child process with tests/js/wasm_elementwise_enabled.mjs preloaded); a training
// step computes its quantization and its cross-entropy through it; each planted bug
// (tests/wasm_plant.py elementwise) is refused by the gate; a kernel that throws mid-gate is
// refused with the reason; the trainer reports the kernel's state and the Readiness panel says it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as N from '../../static/js/numerics/index.js';
import * as M from '../../static/js/model/index.js';
import {
  loadWasmElementwise, WASM_URL,
} from '../../static/js/numerics/wasmelementwise.js';
import { wasmBytes } from '../../static/js/numerics/wasmgemm.js';
import {
  disableWasmElementwise, elementwiseCases, enableWasmElementwise, gateWasmElementwise,
  wasmElementwiseStatus,
} from '../../static/js/numerics/wasmeltgate.js';
import { Trainer } from '../../static/js/train/trainer.js';
import {
  activeCrossEntropyKernel, crossEntropy, setCrossEntropyKernel,
} from '../../static/js/numerics/xent.js';
import { backendLines } from '../../static/js/page/readiness.js';
import { REPO, assertBitsEqual, randomFloat32, testRng } from './helpers.mjs';

const kernel = await loadWasmElementwise();

// fn() (returning an object of typed arrays) on the JS loops and through the kernel installed in
// quant.js, on poisoned memory: bit for bit (`used`: whether the kernel must have run).
function sameAsJs(fn, what, used = true) {
  const previous = N.setQuantKernel(null);
  try {
    const want = fn();
    N.setQuantKernel(kernel);
    const before = kernel.calls;
    kernel.poison();
    const got = fn();
    assert.equal(kernel.calls > before, used, `${what}: the kernel was used: ${!used}`);
    assert.deepEqual(Object.keys(got), Object.keys(want), what);
    for (const k of Object.keys(want)) assertBitsEqual(got[k], want[k], `${what} ${k}`);
  } finally {
    N.setQuantKernel(previous);
  }
}

test('the committed binary validates and compiles, and exports what the driver calls', async () => {
  const bytes = await wasmBytes(WASM_URL);
  assert.ok(WASM_URL.pathname.endsWith('/static/wasm/elementwise_f32.wasm'));
  assert.ok(WebAssembly.validate(bytes));
  const module = new WebAssembly.Module(bytes);
  const exports = Object.fromEntries(
    WebAssembly.Module.exports(module).map((e) => [e.name, e.kind]));
  assert.deepEqual(exports, { absmax_rows: 'function', absmax_cols: 'function',
    pow2_table: 'function', scale: 'function', quantize: 'function', xent_rows: 'function',
    xent_grad: 'function', memory: 'memory' });
  assert.deepEqual(WebAssembly.Module.imports(module), []);
  const damaged = bytes.slice();
  damaged[damaged.length - 1] = 0xff;
  await assert.rejects(loadWasmElementwise({ bytes: damaged }), /lacks fixed-width SIMD/);
});

test('a trainer asked for wasm: false leaves both kernels untried', async () => {
  // first in this file: nothing has enabled the kernel in this process yet
  const trainer = new Trainer();
  const r = await trainer.handle({ type: 'init', model: { preset: 'tiny', vocabSize: 256,
    layers: 1 }, seed: 1, backend: 'js-cpu', measure: false, audit: 16, sources: {},
  wasm: false });
  assert.equal(r.result.elementwise.name, null);
  assert.equal(r.result.elementwise.enabled, false);
  assert.equal(N.activeQuantKernel(), null);
  assert.equal(activeCrossEntropyKernel(), null);
});

// crossEntropy on a copy of `logits`, on the JS loop and through the kernel on poisoned memory:
// dlogits, per-row losses and the mean, bit for bit (NaN matching NaN).
function xentSameAsJs(logits, y, N, V, what) {
  const previous = setCrossEntropyKernel(null);
  try {
    const run = () => {
      const d = logits.slice();
      const lossT = new Float32Array(N);
      return { d, lossT, loss: Float32Array.of(crossEntropy(d, y, N, V, lossT)) };
    };
    const want = run();
    setCrossEntropyKernel(kernel);
    kernel.poison();
    const before = kernel.xentCalls;
    const got = run();
    assert.equal(kernel.xentCalls, before + 1, `${what}: the kernel ran`);
    for (const k of Object.keys(want)) assertBitsEqual(got[k], want[k], `${what} ${k}`);
  } finally {
    setCrossEntropyKernel(previous);
  }
}

test('the cross-entropy gives the JS bits through the kernel: random rows, any V', () => {
  const rng = testRng(2027);
  const shapes = [[1, 1, 1], [3, 2, 5], [2, 3, 40], [4, 4, 1], [5, 6, 0.01], [7, 13, 90],
    [8, 64, 3], [3, 255, 30], [16, 256, 8], [2, 2049, 60], [256, 2048, 4]];
  for (const [N, V, spread] of shapes) {
    const logits = randomFloat32(rng, N * V, spread);
    const y = Int32Array.from({ length: N }, () => rng.int(0, V - 1));
    xentSameAsJs(logits, y, N, V, `crossEntropy ${N}x${V} spread ${spread}`);
  }
});

test('the cross-entropy refuses a target outside [0, V) on both paths', () => {
  for (const k of [null, kernel]) {
    const previous = setCrossEntropyKernel(k);
    try {
      for (const bad of [-1, 5, 2.5]) {
        assert.throws(() => crossEntropy(new Float32Array(10), [0, bad], 2, 5),
          /target .* of row 1 is not an id in \[0, 5\)/);
      }
    } finally {
      setCrossEntropyKernel(previous);
    }
  }
});

test('every quantizer gives the JS bits through the kernel: shapes, batches, magnitudes', () => {
  const rng = testRng(2026);
  const shapes = [[1, 4, 1], [2, 8, 1], [5, 12, 3], [64, 16, 16], [17, 36, 2], [256, 64, 1],
    [3, 2048, 1], [128, 256, 1]];
  const scales = [1, 1e-3, 3e-38, 1e28, 7e-12]; // 1e28 ~ 2^93: below the ceiling 2^100
  shapes.forEach(([rows, cols, batch], i) => {
    const x = randomFloat32(rng, batch * rows * cols, scales[i % scales.length]);
    const R = batch * rows;
    const tag = `${batch}x${rows}x${cols}`;
    sameAsJs(() => N.quantizeRows(x, R, cols), `quantizeRows ${tag}`);
    sameAsJs(() => N.quantize2Rows(x, R, cols), `quantize2Rows ${tag}`);
    sameAsJs(() => N.quantize3Rows(x, R, cols), `quantize3Rows ${tag}`);
    sameAsJs(() => N.quantizeCols(x, rows, cols, {}, batch), `quantizeCols ${tag}`);
    sameAsJs(() => N.quantize2Cols(x, rows, cols, {}, batch), `quantize2Cols ${tag}`);
    sameAsJs(() => N.quantize3Cols(x, rows, cols, batch), `quantize3Cols ${tag}`);
  });
  // arrays supplied by the caller are filled, not replaced (the model's workspace)
  const x = randomFloat32(rng, 8 * 32);
  const out = { q: new Int8Array(8 * 32), e: new Int32Array(8) };
  const previous = N.setQuantKernel(kernel);
  try {
    const r = N.quantizeRows(x, 8, 32, out);
    assert.equal(r.q, out.q);
    assert.equal(r.e, out.e);
  } finally {
    N.setQuantKernel(previous);
  }
});

test('gradient operands (fold + two or three limbs) give the JS bits through the kernel', () => {
  const rng = testRng(7);
  for (const [batch, M, K] of [[1, 64, 256], [4, 16, 64], [3, 5, 12], [1, 256, 2048]]) {
    const g = randomFloat32(rng, batch * M * K, 1e-4);
    for (const shared of [true, false]) {
      const fold = (n) => Int32Array.from({ length: shared ? n : batch * n },
        () => rng.int(-20, 20));
      const fc = fold(K);
      const fr = fold(M);
      for (const limbs of [2, 3]) {
        const tag = `${batch}x${M}x${K} shared=${shared} limbs=${limbs}`;
        sameAsJs(() => N.gradLeftLimbs(g, fc, M, K, batch, limbs), `gradLeftLimbs ${tag}`);
        sameAsJs(() => N.gradRightLimbs(g, fr, M, K, batch, limbs), `gradRightLimbs ${tag}`);
      }
    }
  }
});

test('shapes the kernel does not take stay on the JS path, with the JS bits', () => {
  const rng = testRng(3);
  for (const [rows, cols] of [[3, 5], [4, 6], [2, 1], [7, 33]]) {
    const x = randomFloat32(rng, rows * cols);
    sameAsJs(() => N.quantize3Rows(x, rows, cols), `quantize3Rows ${rows}x${cols}`, false);
    sameAsJs(() => N.quantize2Cols(x, rows, cols), `quantize2Cols ${rows}x${cols}`, false);
    sameAsJs(() => N.gradLeftLimbs(x, new Int32Array(cols), rows, cols, 1, 3),
      `gradLeftLimbs ${rows}x${cols}`, false);
  }
});

test('diverged inputs are refused with the JS message through the kernel', () => {
  const previous = N.setQuantKernel(kernel);
  try {
    for (const [v, message] of [[NaN, /non-finite value/], [Infinity, /non-finite value/],
      [2 ** 100, /magnitude 2\^100/]]) {
      const x = new Float32Array(64).fill(0.5);
      x[37] = v;
      const before = kernel.calls;
      assert.throws(() => N.quantize2Rows(x, 4, 16), message);
      assert.throws(() => N.quantize3Cols(x, 4, 16), message);
      assert.equal(kernel.calls, before, 'a refused block returns no limbs');
    }
    // the fold's overflow to infinity as well
    const g = new Float32Array(16).fill(1e30);
    assert.throws(() => N.gradLeftLimbs(g, new Int32Array(4).fill(127), 4, 4, 1, 3),
      /non-finite value/);
  } finally {
    N.setQuantKernel(previous);
  }
});

test('enableWasmElementwise gates and installs it; a training step computes through it',
  async () => {
    try {
      const status = await enableWasmElementwise();
      assert.equal(status.enabled, true, status.reason);
      assert.equal(status.cases, elementwiseCases().length);
      assert.ok(status.cases >= 90, `only ${status.cases} gate cases`);
      const installed = N.activeQuantKernel();
      assert.equal(installed.name, 'wasm-simd-elementwise');
      assert.equal(activeCrossEntropyKernel(), installed);
      const cfg = M.preset('tiny', { vocabSize: 256, layers: 1 });
      const state = M.init(cfg, {}, 1);
      const tokens = Int32Array.from({ length: 4096 }, (_, i) => (i * 31 + 7) % 256);
      const before = installed.calls;
      const xentBefore = installed.xentCalls;
      const { x, y } = M.nextBatch(state, tokens);
      M.computeGrads(state, x, y);
      // every activation and weight quantizer and every gradient operand of the step
      assert.ok(installed.calls - before >= 20, `${installed.calls - before} kernel calls`);
      assert.equal(installed.xentCalls - xentBefore, 1, 'the step\'s cross-entropy');
    } finally {
      disableWasmElementwise();
    }
    assert.equal(N.activeQuantKernel(), null);
    assert.equal(activeCrossEntropyKernel(), null);
    assert.equal(wasmElementwiseStatus().enabled, false);
  });

test('with both kernels installed: golden vectors, quantizer and GEMM tests, golden run, trainer',
  () => {
    const files = ['vectors.test.mjs', 'quant.test.mjs', 'gemm.test.mjs', 'train_run.test.mjs',
      'train_worker.test.mjs'].map((f) => path.join(REPO, 'tests', 'js', f));
    const res = spawnSync(process.execPath,
      ['--import', path.join(REPO, 'tests', 'js', 'wasm_elementwise_enabled.mjs'), '--test',
        ...files],
      // NODE_TEST_CONTEXT would make the child's runner think it is nested and run nothing
      { cwd: REPO, encoding: 'utf-8', timeout: 200_000,
        env: { ...process.env, NODE_TEST_CONTEXT: undefined } });
    const report = `${res.stdout}\n${res.stderr}`;
    assert.equal(res.status, 0,
      `the suites fail with the kernels installed:\n${report.slice(-6000)}`);
    assert.match(report, /wasm elementwise kernel enabled: wasm-simd-elementwise/);
    assert.match(report, /wasm GEMM enabled: wasm-simd/);
    assert.match(report, /^# fail 0$/m);
    assert.doesNotMatch(report, /^# pass 0$/m);
  });

// Plants built at test time from the real kernel text, assembled as the committed binary is
// (tests/wasm_build.py).
function plants() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasm-elt-plant-'));
  const py = process.env.PYTHON ?? 'python';
  const res = spawnSync(py, [path.join(REPO, 'tests', 'wasm_plant.py'), dir, 'elementwise'], {
    encoding: 'utf-8',
  });
  assert.equal(res.status, 0, `tests/wasm_plant.py failed: ${res.stderr}`);
  const names = JSON.parse(res.stdout.trim().split('\n').at(-1));
  return Object.fromEntries(names.map((n) => [n,
    new Uint8Array(fs.readFileSync(path.join(dir, `${n}.wasm`)))]));
}

test('each planted bug is refused by the gate, and the JS quantizers and cross-entropy stay',
  async () => {
    const built = plants();
    // name -> the case that must stop it
    const expected = {
      // a tie rounded up: the first input holding an exact .5 after scaling
      'hi-ties-up': /failed case 'quantizeRows /,
      // -128 where the clamp gives -127: the first case whose second limb clamps from below
      'clamp-low-missing': /failed case 'quantize2Rows .*expected -127, got -128/,
      // one ulp in lane 3 of the fold: only the gradient operands fold
      'fold-lane-ulp': /failed case 'grad(Left|Right)Limbs /,
      // column maxima from poisoned memory: the first column case
      'maxima-not-zeroed': /failed case 'quantizeCols random 1x1x4'/,
      // exp one ulp off in lane 3: the first rows with a value in lane 3 (V = 3 pads it)
      'exp-lane-ulp': /failed case 'crossEntropy random 4x4 /,
      // the maximum misses lane 3: the first rows whose maximum may sit there
      'max-skips-lane-3': /failed case 'crossEntropy random 4x4 /,
      // (p / N) / s: the first case with N not a power of two and a rounding that differs
      'divide-order': /failed case 'crossEntropy random 3x3 /,
      // the tree sum's straddling last value dropped: V = 2 already has it
      'tree-sum-drops-last': /failed case 'crossEntropy random 2x2 /,
    };
    assert.deepEqual(Object.keys(built).sort(), Object.keys(expected).sort());
    for (const [name, pattern] of Object.entries(expected)) {
      const planted = await loadWasmElementwise({ bytes: built[name] });
      const gate = await gateWasmElementwise(planted);
      assert.equal(gate.passed, false, `${name} passed the gate`);
      assert.match(gate.failure, pattern, name);
      const status = await enableWasmElementwise({ bytes: built[name] });
      assert.equal(status.enabled, false, name);
      assert.match(status.reason, /the JS quantizers stay, and the JS cross-entropy$/);
      assert.equal(N.activeQuantKernel(), null);
      assert.equal(activeCrossEntropyKernel(), null);
    }
    // the hand-made tie blocks catch it on their own (without the random inputs' chance ties)
    const ties = await loadWasmElementwise({ bytes: built['hi-ties-up'] });
    const onlyEdges = elementwiseCases().filter((c) => /edge blocks/.test(c.name));
    const previous = N.setQuantKernel(null);
    try {
      const want = onlyEdges.map((c) => c.run());
      N.setQuantKernel(ties);
      const got = onlyEdges.map((c) => c.run());
      assert.ok(got.some((g, i) => g.some((a, j) => a.some((v, k) => v !== want[i][j][k]))),
        'the edge blocks do not catch a tie rounded up');
    } finally {
      N.setQuantKernel(previous);
    }
  });

test('a kernel that throws mid-gate is refused with the reason, not thrown at the caller',
  async () => {
    const broken = await loadWasmElementwise();
    const quantize = broken.quantize.bind(broken);
    broken.quantize = (x, batch, rows, cols, byRows, limbs, ...rest) => {
      // a trap, as a kernel reading past its memory would raise
      if (limbs === 3) throw new WebAssembly.RuntimeError('memory access out of bounds (planted)');
      return quantize(x, batch, rows, cols, byRows, limbs, ...rest);
    };
    const gate = await gateWasmElementwise(broken);
    assert.equal(gate.passed, false);
    assert.match(gate.failure,
      /the gate stopped on RuntimeError: memory access out of bounds \(planted\)/);
    assert.equal(N.activeQuantKernel(), null, 'the slot is restored after a throwing gate');
    assert.equal(activeCrossEntropyKernel(), null, 'and the cross-entropy slot');
  });

test('the gate compares floats by bits: a -0 loss where the JS gives +0 is refused', async () => {
  const signed = await loadWasmElementwise();
  const rows = signed.crossEntropy.bind(signed);
  signed.crossEntropy = (logits, y, N, V, lossT) => {
    rows(logits, y, N, V, lossT);
    for (let n = 0; n < N; n++) if (lossT[n] === 0) lossT[n] = -0; // equal by value, not by bits
  };
  const gate = await gateWasmElementwise(signed);
  assert.equal(gate.passed, false);
  // V = 1: the row's loss is log(1) - 0 = +0 (a comparison by value would see 0 and 0)
  assert.match(gate.failure, new RegExp("failed case 'crossEntropy random 1x1 spread 3': " +
    'output 1, first mismatch at 0: expected 0, got 0'));
  assert.equal(activeCrossEntropyKernel(), null);
});

test('the trainer gates and reports the kernel; the Readiness panel says it', async () => {
  disableWasmElementwise(); // untried again: a refused plant above stays 'tried' until then
  try {
    const trainer = new Trainer();
    const r = await trainer.handle({ type: 'init', model: { preset: 'tiny', vocabSize: 256,
      layers: 1 }, seed: 1, backend: 'js-cpu', measure: false, audit: 16, sources: {} });
    const sel = r.result;
    assert.equal(sel.elementwise.enabled, true, sel.elementwise.reason);
    assert.equal(N.activeQuantKernel().name, 'wasm-simd-elementwise');
    const [line] = backendLines(sel);
    assert.match(line[1],
      new RegExp('^js-cpu: passed its exact gates \\(chosen\\).*, ' +
        'quantization and cross-entropy in WebAssembly SIMD$'));
  } finally {
    disableWasmElementwise();
  }
  const row = { name: 'js-cpu', adapter: 'cpu', gates_passed: true, cases_passed: 12,
    failure: null, probe_hash: 'p' };
  const refused = { backend: 'js-cpu', rows: [row], elementwise: { enabled: false,
    name: 'wasm-simd-elementwise',
    reason: "failed case 'quantizeRows edge blocks'; the JS quantizers stay" } };
  const lines = backendLines(refused);
  assert.deepEqual(lines[0].slice(0, 2), ['✓', 'js-cpu: passed its exact gates (chosen)']);
  assert.equal(lines[1][0], '–');
  assert.match(lines[1][1], /^WebAssembly SIMD elementwise kernel: not used, failed case/);
  const untried = { ...refused, elementwise: { enabled: false, name: null, reason: 'not tried' } };
  assert.equal(backendLines(untried).length, 1);
});
