// The WebAssembly SIMD GEMM (kernels/gemm_i8.wat -> static/wasm/gemm_i8.wasm, driven by
// static/js/numerics/wasmgemm.js, gated by wasmgate.js; docs/KERNELS.md "WebAssembly SIMD GEMM"):
// the committed binary validates and compiles here; its products are the JS GEMM's bits on
// random shapes of every layout (K not a multiple of 8 or 16, batches, two- and three-limb
// operands on either side), on full-range -128 operands up to and past the int32 bound of K, and
// on edge shapes; with it installed the golden vectors, the GEMM tests, the golden training run
// and the trainer's CPU tier give the same bits (a child process with tests/js/wasm_enabled.mjs
// preloaded); the CPU tier's per-step probe runs through it; each planted bug
// (tests/wasm_plant.py) is stopped by the check of the gate meant for it; and a kernel that
// throws mid-gate is refused with the reason.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as N from '../../static/js/numerics/index.js';
import { loadWasmGemm, MAX_INT_K, WASM_URL, wasmBytes } from '../../static/js/numerics/wasmgemm.js';
import {
  disableWasmGemm, enableWasmGemm, gateWasmGemm, wasmGemmStatus,
} from '../../static/js/numerics/wasmgate.js';
import { CpuGemm } from '../../static/js/gpu/gemm.js';
import {
  probeHash, probeOperands, PROBE_SHAPE, REFERENCE_PROBE_HASH,
} from '../../static/js/gpu/probe.js';
import { Trainer } from '../../static/js/train/trainer.js';
import { REPO, assertBitsEqual, randomFloat32, randomInt8, testRng } from './helpers.mjs';

const gemm = await loadWasmGemm();

// fn() computed by the JS GEMM and by the WebAssembly kernel installed in gemm.js: bit for bit
// (`used`: the kernel must have run; an empty product returns before it).
function sameAsJs(fn, what, used = true) {
  const previous = N.setIntKernel(null);
  try {
    const want = fn();
    N.setIntKernel(gemm);
    const before = gemm.products;
    gemm.poison();
    const got = fn();
    assert.equal(gemm.products > before, used, `${what}: the kernel was used: ${!used}`);
    assertBitsEqual(got, want, what);
  } finally {
    N.setIntKernel(previous);
  }
}

test('the committed binary validates and compiles, and exports what the driver calls', async () => {
  const bytes = await wasmBytes();
  assert.ok(WASM_URL.pathname.endsWith('/static/wasm/gemm_i8.wasm'));
  assert.ok(WebAssembly.validate(bytes), 'WebAssembly.validate refuses static/wasm/gemm_i8.wasm');
  const module = new WebAssembly.Module(bytes);
  const exports = Object.fromEntries(
    WebAssembly.Module.exports(module).map((e) => [e.name, e.kind]));
  assert.deepEqual(exports, { gemm: 'function', pack: 'function', combine: 'function',
    memory: 'memory' });
  assert.deepEqual(WebAssembly.Module.imports(module), []);
  // a damaged byte is refused with the hint, not run
  const damaged = bytes.slice();
  damaged[damaged.length - 1] = 0xff;
  await assert.rejects(loadWasmGemm({ bytes: damaged }), /does not validate here/);
});

const SHAPES = [
  [1, 1, 1, 1], [1, 1, 7, 1], [1, 2, 8, 3], [1, 3, 9, 4], [1, 5, 15, 5], [1, 4, 16, 8],
  [1, 7, 17, 9], [3, 6, 33, 10], [2, 33, 64, 17], [1, 9, 100, 31], [4, 3, 129, 2],
  [1, 2, 1030, 3], [2, 3, 2100, 5],
];
const LAYOUTS = [{}, { transA: true }, { transB: true }, { transA: true, transB: true }];

test('intMatmul through the kernel is the JS GEMM on random shapes of every layout', () => {
  const rng = testRng(31);
  for (const [batch, M, K, Nn] of SHAPES) {
    for (const layout of LAYOUTS) {
      const a = randomInt8(rng, batch * M * K, -128, 127);
      const b = randomInt8(rng, batch * K * Nn, -128, 127);
      const opts = { ...layout, batch };
      const what = `${batch}x${M}x${K}x${Nn} ${JSON.stringify(layout)}`;
      sameAsJs(() => N.intMatmul(a, b, M, K, Nn, opts), what);
      // the GpuGemm-style entry point gives the same integers as int32
      const direct = gemm.matmulIntSync(a, b, M, K, Nn, opts);
      assertBitsEqual(Float64Array.from(direct), N.intMatmul(a, b, M, K, Nn, opts), what);
    }
  }
});

test('quantized products and two- and three-limb gradients are the JS GEMM bits', () => {
  const rng = testRng(32);
  for (const [batch, M, K, Nn] of SHAPES) {
    const x = randomFloat32(rng, batch * M * K, 2);
    const w = randomFloat32(rng, batch * K * Nn, 0.05);
    const dy = randomFloat32(rng, batch * M * Nn, 1e-3);
    const { q: aq, e: ae } = N.quantizeRows(x, batch * M, K);
    const { q: bq, e: be } = N.quantizeCols(w, K, Nn, {}, batch);
    const what = `${batch}x${M}x${K}x${Nn}`;
    sameAsJs(() => N.qmatmul(aq, ae, bq, be, M, K, Nn, { batch }), `qmatmul ${what}`);
    for (const limbCount of [2, 3]) {
      sameAsJs(() => N.gradMatmulLeft(dy, be, bq, M, Nn, K, { transB: true, batch, limbCount }),
        `gradMatmulLeft ${what} limbs ${limbCount}`);
      sameAsJs(() => N.gradMatmulRight(aq, ae, dy, K, M, Nn, { transA: true, batch, limbCount }),
        `gradMatmulRight ${what} limbs ${limbCount}`);
    }
  }
});

test('all -128 (and -128 x 127) with large K is exact, past the int32 bound (BigInt)', () => {
  const previous = N.setIntKernel(gemm);
  try {
    for (const K of [1024, 1025, 4099, 65537, MAX_INT_K, MAX_INT_K + 1, 300007]) {
      const M = 2;
      const Nn = 3;
      const a = new Int8Array(M * K).fill(-128);
      const b = new Int8Array(K * Nn).fill(-128);
      for (const v of N.intMatmul(a, b, M, K, Nn)) assert.equal(BigInt(v), BigInt(K) * 16384n);
      b.fill(127);
      for (const v of N.intMatmul(a, b, M, K, Nn, {})) assert.equal(BigInt(v), BigInt(K) * -16256n);
      if (K <= MAX_INT_K) {
        b.fill(-128);
        for (const v of gemm.matmulIntSync(a, b, M, K, Nn)) assert.equal(v, K * 16384);
      } else {
        // its int32 result could not hold the sum: refused with the hint to split K
        assert.throws(() => gemm.matmulIntSync(a, b, M, K, Nn), /split K/);
      }
    }
  } finally {
    N.setIntKernel(previous);
  }
});

test('edge shapes: empty products, one cell, odd and wide ones; operands it does not take', () => {
  const rng = testRng(33);
  for (const [M, K, Nn] of [[0, 5, 3], [3, 0, 4], [4, 5, 0], [1, 1, 1], [1, 1000, 1],
    [257, 3, 1], [1, 3, 257], [2, 8, 4], [3, 24, 5], [64, 96, 80]]) {
    const a = randomInt8(rng, M * K, -128, 127);
    const b = randomInt8(rng, K * Nn, -128, 127);
    sameAsJs(() => N.intMatmul(a, b, M, K, Nn), `${M}x${K}x${Nn}`, M * K * Nn > 0);
    assertBitsEqual(gemm.matmulIntSync(a, b, M, K, Nn),
      Int32Array.from(N.intMatmul(a, b, M, K, Nn)), `matmulInt ${M}x${K}x${Nn}`);
  }
  // +128 fits the JS GEMM's domain (|x| <= 128) but no int8: such operands stay with the JS GEMM
  assert.equal(gemm.accepts(new Int16Array(2), new Int8Array(2)), false);
  assert.equal(gemm.accepts([new Int8Array(2), new Int8Array(2)], new Int8Array(2)), true);
  const previous = N.setIntKernel(gemm);
  try {
    const before = gemm.products;
    const y = N.intMatmul(new Int16Array([128, 128]), new Int8Array([-128, 1]), 1, 2, 1);
    assert.equal(y[0], -128 * 128 + 128);
    assert.equal(gemm.products, before, 'an Int16Array operand reached the kernel');
  } finally {
    N.setIntKernel(previous);
  }
  assert.throws(() => gemm.matmulIntSync(new Int16Array(1), new Int8Array(1), 1, 1, 1), TypeError);
  assert.throws(() => gemm.matmulIntSync(new Int8Array(2), new Int8Array(1), 1, 1, 1), RangeError);
});

test('enableWasmGemm gates and installs it; the CPU tier then computes through it', async () => {
  try {
    const status = await enableWasmGemm();
    assert.equal(status.enabled, true, status.reason);
    assert.equal(status.probe_hash, REFERENCE_PROBE_HASH);
    assert.ok(status.cases >= 52 + 20, `only ${status.cases} gate cases`);
    const kernel = N.activeIntKernel();
    assert.equal(kernel.name, 'wasm-simd');
    // the CPU tier's per-step probe (trainer.probe(): probeHash of its CpuGemm) runs through it
    const before = kernel.products;
    assert.equal(await probeHash(new CpuGemm()), REFERENCE_PROBE_HASH);
    assert.ok(kernel.products > before, 'the probe did not reach the kernel');
  } finally {
    disableWasmGemm();
  }
  assert.equal(N.activeIntKernel(), null);
  assert.equal(wasmGemmStatus().enabled, false);
});

test('with the kernel installed: golden vectors, GEMM tests, golden run and trainer hold', () => {
  const files = ['vectors.test.mjs', 'gemm.test.mjs', 'train_run.test.mjs', 'train_worker.test.mjs']
    .map((f) => path.join(REPO, 'tests', 'js', f));
  const res = spawnSync(process.execPath,
    ['--import', path.join(REPO, 'tests', 'js', 'wasm_enabled.mjs'), '--test', ...files],
    // NODE_TEST_CONTEXT would make the child's runner think it is nested and run nothing
    { cwd: REPO, encoding: 'utf-8', timeout: 200_000,
      env: { ...process.env, NODE_TEST_CONTEXT: undefined } });
  const report = `${res.stdout}\n${res.stderr}`;
  assert.equal(res.status, 0,
    `the suites fail with the wasm GEMM installed:\n${report.slice(-6000)}`);
  assert.match(report, /wasm GEMM enabled: wasm-simd/, 'the preload did not enable the kernel');
  assert.match(report, /^# fail 0$/m);
  assert.doesNotMatch(report, /^# pass 0$/m);
});

// Plants built at test time from the real kernel text, assembled as the committed binary is
// (tests/wasm_build.py).
function plants() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasm-plant-'));
  const py = process.env.PYTHON ?? 'python';
  const res = spawnSync(py, [path.join(REPO, 'tests', 'wasm_plant.py'), dir], {
    encoding: 'utf-8',
  });
  assert.equal(res.status, 0, `tests/wasm_plant.py failed: ${res.stderr}`);
  const names = JSON.parse(res.stdout.trim().split('\n').at(-1));
  return Object.fromEntries(names.map((n) => [n,
    new Uint8Array(fs.readFileSync(path.join(dir, `${n}.wasm`)))]));
}

test('each planted bug is stopped by the check meant for it, and the JS GEMM stays', async () => {
  const built = plants();
  // name -> what must stop it (the failure text) and how many checks it passes first
  const expected = {
    // K's last step of 8 dropped: the first gate case with K > 8
    'k-loop-short': [/failed gate 'tile edge M=31 N=31'/, 8],
    // C accumulated into: the poisoned memory shows it on the very first case
    'store-accumulates': [/failed gate '1x1x1'.*got -559\d+/, 0],
    'second-row-dropped': [/failed gate '2x3x2' shape \(2, 3, 2\): first mismatch at \(1, 0\)/, 3],
    // every gate and dispatch case passes; the probe's own cell differs
    'probe-cell': [/kernel probe hash [0-9a-f]{16}\.\.\. != reference fd4bd82715373741/, null],
    // only K > 32768: the dispatch case at the driver's K-split
    'deep-k-cell': [/failed dispatch case 'intMatmul all -128 K=131081'/, null],
    // single-limb products are unaffected: the dispatch's limb cases
    'limb-base-255': [/failed dispatch case 'gradMatmulLeft .* limbs=2'/, null],
  };
  assert.deepEqual(Object.keys(built).sort(), Object.keys(expected).sort());
  const gateCases = 48 + 4;
  for (const [name, [pattern, passedFirst]] of Object.entries(expected)) {
    const planted = await loadWasmGemm({ bytes: built[name] });
    const gate = await gateWasmGemm(planted);
    assert.equal(gate.passed, false, `${name} passed the gate`);
    assert.match(gate.failure, pattern, name);
    if (passedFirst !== null) assert.equal(gate.cases, passedFirst, name);
    else assert.ok(gate.cases >= gateCases, `${name}: stopped by a gate case (${gate.failure})`);
    // enableWasmGemm refuses it with the reason; the JS GEMM keeps computing
    const status = await enableWasmGemm({ bytes: built[name] });
    assert.equal(status.enabled, false, name);
    assert.match(status.reason, /the JS GEMM stays/);
    assert.equal(N.activeIntKernel(), null);
  }
});

test('the per-step probe is computed by the installed kernel (a plant only the probe sees)',
  async () => {
    const planted = await loadWasmGemm({ bytes: plants()['probe-cell'] });
    // the hash the plant must give: the exact product plus one at (40, 48), computed here
    const [m, k, n] = PROBE_SHAPE;
    const { a, b } = probeOperands();
    const want = Int32Array.from(N.intMatmul(a, b, m, k, n));
    want[40 * n + 48] += 1;
    const plantedHash = await N.sha256Arrays([want]);
    assert.notEqual(plantedHash, REFERENCE_PROBE_HASH);
    const previous = N.setIntKernel(planted); // bypassing the gate, as no page can
    try {
      // the CPU tier's probe (trainer.probe() hashes its CpuGemm's product) reports the plant
      assert.equal(await probeHash(new CpuGemm()), plantedHash);
      // and a trainer starting on the CPU tier refuses it: its gates pass, its probe does not
      const trainer = new Trainer();
      await assert.rejects(trainer.handle({ type: 'init', model: { preset: 'tiny' }, seed: 1,
        backend: 'js-cpu', measure: false, audit: 16, sources: {} }),
      /no backend passes its gates .*kernel probe hash/);
    } finally {
      N.setIntKernel(previous);
    }
  });

test('a kernel that throws mid-gate is refused with the reason, not thrown at the caller',
  async () => {
    const broken = await loadWasmGemm();
    const accumulate = broken.accumulate.bind(broken);
    // single-limb products (every gate case) work; the first limb operand throws
    broken.accumulate = (a, ao, transA, b, ...rest) => {
      if (Array.isArray(a) || Array.isArray(b)) throw new RangeError('out of memory (planted)');
      return accumulate(a, ao, transA, b, ...rest);
    };
    const gate = await gateWasmGemm(broken);
    assert.equal(gate.passed, false);
    assert.match(gate.failure, /the gate stopped on RangeError: out of memory \(planted\)/);
    assert.equal(N.activeIntKernel(), null, 'the slot is restored after a throwing gate');
  });
