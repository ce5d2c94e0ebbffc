// The WebAssembly GEMM's pool of workers (static/js/numerics/wasmpool.js, wasmhelper.js;
// docs/KERNELS.md "A pool of workers"), with its helpers as real node:worker_threads on one
// shared memory: the shared-memory build is the committed one; split calls give the JS GEMM's
// bits on random shapes (fewer row pairs than threads included); the gate passes it with every
// call split; with it installed and every call split, the golden vectors, the GEMM tests, the
// golden training run and the trainer give the same bits (a child process); a split that loses
// a row pair is refused by the gate; a helper that cannot start leaves one thread, with why.
// In a page: tests/browser/test_browser_wasm_pool.py (Chromium, cross-origin isolated).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import * as N from '../../static/js/numerics/index.js';
import { loadWasmGemm, wasmBytes } from '../../static/js/numerics/wasmgemm.js';
import { disableWasmGemm, enableWasmGemm, gateWasmGemm } from '../../static/js/numerics/wasmgate.js';
import {
  GemmPool, poolSupport, SHARED_MAX_PAGES, SHARED_WASM_URL,
} from '../../static/js/numerics/wasmpool.js';
import { failingSpawn, nodeSpawn } from './node_pool.mjs';
import { REPO, assertBitsEqual, randomInt8, testRng } from './helpers.mjs';

test('the shared build imports one shared memory of the declared maximum', async () => {
  const bytes = await wasmBytes(SHARED_WASM_URL);
  assert.ok(WebAssembly.validate(bytes));
  const module = new WebAssembly.Module(bytes);
  assert.deepEqual(WebAssembly.Module.imports(module),
    [{ module: 'env', name: 'memory', kind: 'memory' }]);
  const memory = new WebAssembly.Memory({ initial: 1, maximum: SHARED_MAX_PAGES, shared: true });
  assert.ok(new WebAssembly.Instance(module, { env: { memory } }).exports.gemm);
  // an unshared memory, or a larger maximum than declared, does not fit the import
  for (const wrong of [{ initial: 1, maximum: SHARED_MAX_PAGES },
    { initial: 1, maximum: SHARED_MAX_PAGES + 1, shared: true }]) {
    assert.throws(() => new WebAssembly.Instance(module, {
      env: { memory: new WebAssembly.Memory(wrong) } }), WebAssembly.LinkError);
  }
});

test('a context that is not a cross-origin isolated worker gets one thread, and says why', () => {
  assert.equal(poolSupport().threads, 1); // Node's main thread
  assert.match(poolSupport({ crossOriginIsolated: false }).reason, /not cross-origin isolated/);
  assert.match(poolSupport({ crossOriginIsolated: true }).reason, /not in a worker/);
  class WorkerGlobalScope {}
  const scope = Object.assign(new WorkerGlobalScope(), { crossOriginIsolated: true,
    WorkerGlobalScope, navigator: { hardwareConcurrency: 64 } });
  assert.deepEqual(poolSupport(scope), { threads: 8, reason: '8 threads (64 logical cores)' });
});

// fn() by the JS GEMM and by `kernel` installed, on poisoned memory: bit for bit.
function sameAsJs(kernel, fn, what) {
  const previous = N.setIntKernel(null);
  try {
    const want = fn();
    N.setIntKernel(kernel);
    kernel.poison();
    assertBitsEqual(fn(), want, what);
  } finally {
    N.setIntKernel(previous);
  }
}

test('every call split across 3 threads gives the JS GEMM bits (fewer row pairs too)', async () => {
  const gemm = await loadWasmGemm({ threads: 3, spawn: nodeSpawn });
  try {
    assert.equal(gemm.name, 'wasm-simd x3');
    assert.equal(gemm.threads, 3);
    gemm.splitMin = 0;
    const rng = testRng(71);
    const shapes = [[1, 1, 1], [2, 9, 3], [3, 8, 5], [5, 17, 4], [6, 33, 9], [41, 130, 37],
      [64, 64, 64], [7, 1030, 13]];
    for (const [M, K, N2] of shapes) {
      for (const [transA, transB] of [[false, false], [true, true]]) {
        const a = randomInt8(rng, 2 * M * K);
        const b = randomInt8(rng, 2 * K * N2);
        sameAsJs(gemm, () => N.intMatmul(a, b, M, K, N2, { transA, transB, batch: 2 }),
          `${M}x${K}x${N2} transA=${transA} transB=${transB}`);
      }
    }
    assert.ok(gemm.pool.calls > shapes.length, `only ${gemm.pool.calls} calls were split`);
  } finally {
    gemm.close();
  }
});

test('the gate passes the pool with every call split, and keeps the threshold after', async () => {
  const gemm = await loadWasmGemm({ threads: 2, spawn: nodeSpawn });
  try {
    const before = gemm.pool.calls;
    const splitMin = gemm.splitMin;
    const gate = await gateWasmGemm(gemm);
    assert.equal(gate.passed, true, gate.failure);
    assert.ok(gemm.pool.calls - before > 50, `the gate split ${gemm.pool.calls - before} calls`);
    assert.equal(gemm.splitMin, splitMin);
  } finally {
    gemm.close();
  }
});

test('a split that loses its last row pair is refused by the gate', async () => {
  const gemm = await loadWasmGemm({ threads: 2, spawn: nodeSpawn });
  try {
    const run = GemmPool.prototype.run;
    // an off-by-one bound: the last row pair of every call is left unwritten (poisoned)
    gemm.pool.run = function lossy(kernel, a, b, c, m2, ...rest) {
      return run.call(this, kernel, a, b, c, Math.max(1, m2 - 1), ...rest);
    };
    const gate = await gateWasmGemm(gemm);
    assert.equal(gate.passed, false);
    assert.match(gate.failure, /mismatch/);
  } finally {
    gemm.close();
  }
});

test('a helper whose kernel call traps makes the call throw; the next call works', async () => {
  const gemm = await loadWasmGemm({ threads: 2, spawn: nodeSpawn });
  try {
    // Two row pairs: the caller's writes C at 0, the helper's 2 ldc bytes further, past the
    // memory's 64 KiB: the helper's call traps, the caller's does not.
    assert.throws(() => gemm.pool.run(gemm.kernel, 0, 0, 0, 2, 1, 1, 40000),
      /GEMM helper 0 failed a kernel call/);
    gemm.pool.run(gemm.kernel, 0, 0, 0, 2, 1, 1, 16); // in bounds: no failure left over
  } finally {
    gemm.close();
  }
});

test('a pool whose helper cannot start leaves one thread installed, saying why', async () => {
  try {
    const status = await enableWasmGemm({ threads: 2, spawn: failingSpawn });
    assert.equal(status.enabled, true, status.reason);
    assert.equal(status.threads, 1);
    assert.equal(N.activeIntKernel().name, 'wasm-simd');
    assert.match(status.reason,
      /a pool of 2 threads was refused: .*planted: this helper has no instance/);
  } finally {
    disableWasmGemm();
  }
});

test('enableWasmGemm installs a pool that passes its gate', async () => {
  try {
    const status = await enableWasmGemm({ threads: 2, spawn: nodeSpawn });
    assert.equal(status.enabled, true, status.reason);
    assert.equal(status.threads, 2);
    assert.match(status.reason, /every product split across the pool/);
    assert.equal(N.activeIntKernel().name, 'wasm-simd x2');
  } finally {
    disableWasmGemm();
  }
  assert.equal(N.activeIntKernel(), null);
});

test('with a pool of 3, every call split: golden vectors, GEMM tests, golden run, trainer', () => {
  const files = ['vectors.test.mjs', 'gemm.test.mjs', 'train_run.test.mjs', 'train_worker.test.mjs']
    .map((f) => path.join(REPO, 'tests', 'js', f));
  const res = spawnSync(process.execPath,
    ['--import', path.join(REPO, 'tests', 'js', 'wasm_enabled.mjs'), '--test', ...files],
    { cwd: REPO, encoding: 'utf-8', timeout: 300_000,
      env: { ...process.env, NODE_TEST_CONTEXT: undefined, DAISYCHAIN_WASM_THREADS: '3' } });
  const report = `${res.stdout}\n${res.stderr}`;
  assert.equal(res.status, 0, `the suites fail with a pool of 3:\n${report.slice(-6000)}`);
  assert.match(report, /wasm GEMM enabled: wasm-simd x3: .*split across the pool/);
  assert.match(report, /^# fail 0$/m);
  assert.doesNotMatch(report, /^# pass 0$/m);
});
