// The step probe (static/js/gpu/probe.js; docs/KERNELS.md "Kernel probe"): what a peer publishes
// after every step. Its elementwise part goes through quant.js and xent.js, so the WebAssembly
// SIMD quantizer and cross-entropy take part where they are installed: the JS loops and the
// gated kernel give REFERENCE_STEP_PROBE (probe.py's reference_step_probe, checked against this
// file's constant by tests/gpu/test_step_probe.py); a quantizer or a cross-entropy one unit off
// only on the probe's inputs passes its gate and changes the step probe; so does a GEMM one unit
// off only on the probe's product.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as N from '../../static/js/numerics/index.js';
import {
  ELEMENTWISE_SHAPE, PROBE_SHAPE, REFERENCE_PROBE_HASH, REFERENCE_STEP_PROBE, XENT_SHAPE,
  elementwiseOperand, probeHash, stepProbeHash,
} from '../../static/js/gpu/probe.js';
import { loadWasmElementwise } from '../../static/js/numerics/wasmelementwise.js';
import { setCrossEntropyKernel } from '../../static/js/numerics/xent.js';
import { gateWasmElementwise } from '../../static/js/numerics/wasmeltgate.js';

// The exact product as Int32Array (what every tier's gemm.matmulInt resolves to).
const exactGemm = {
  async matmulInt(a, b, m, k, n) {
    return Int32Array.from(N.intMatmul(a, b, m, k, n));
  },
};

// Runs fn with `kernel` installed as both elementwise kernels (quant.js's and xent.js's), as
// wasmeltgate.js installs one module for both.
async function withQuantKernel(kernel, fn) {
  const previous = N.setQuantKernel(kernel);
  const previousXent = setCrossEntropyKernel(kernel);
  try {
    return await fn();
  } finally {
    N.setQuantKernel(previous);
    setCrossEntropyKernel(previousXent);
  }
}

test('the JS loops give the reference step probe, and the GEMM part is the kernel probe', async () => {
  await withQuantKernel(null, async () => {
    assert.equal(await stepProbeHash(exactGemm), REFERENCE_STEP_PROBE);
  });
  assert.equal(await probeHash(exactGemm), REFERENCE_PROBE_HASH);
  assert.notEqual(REFERENCE_STEP_PROBE, REFERENCE_PROBE_HASH);
});

test('the operand: zeros, subnormals, then normals whose scale moves with the row', () => {
  const [rows, cols] = ELEMENTWISE_SHAPE;
  const x = elementwiseOperand();
  assert.equal(x.length, rows * cols);
  assert.ok(x.subarray(0, cols).every((v) => Object.is(v, 0)));
  assert.ok(x.subarray(cols, 2 * cols).every((v) => v === 0 || Math.abs(v) < 2 ** -126));
  assert.ok(x.subarray(2 * cols).every((v) => Math.abs(v) >= 2 ** -27 && Math.abs(v) < 2 ** 10));
  assert.ok(x.some((v) => v < 0) && x.some((v) => v > 0));
});

test('through the gated WebAssembly quantizer: the same step probe, computed by the kernel', async () => {
  const kernel = await loadWasmElementwise();
  assert.equal((await gateWasmElementwise(kernel)).passed, true);
  const before = kernel.calls;
  const got = await withQuantKernel(kernel, () => stepProbeHash(exactGemm));
  assert.equal(got, REFERENCE_STEP_PROBE);
  // the probe matrix's six quantizations, then the probe step's (its operands and limbs)
  assert.ok(kernel.calls - before > 6, 'every quantization of the probe ran in the kernel');
});

test('a quantizer one unit off on the probe matrix only passes its gate, not the step probe', async () => {
  const real = await loadWasmElementwise();
  const marker = elementwiseOperand()[2 * ELEMENTWISE_SHAPE[1]];
  // The plant: the real kernel, with one int8 of the one-limb row quantization one unit up
  // whenever it quantizes the probe's matrix (recognised by its length and one value).
  const planted = Object.create(real);
  planted.quantize = function quantize(x, batch, rows, cols, byRows, limbs, out, fold) {
    const r = real.quantize.call(this, x, batch, rows, cols, byRows, limbs, out, fold);
    if (x.length === 24 * 64 && x[128] === marker && byRows && limbs === 1) r.hi[200] += 1;
    return r;
  };
  const gate = await gateWasmElementwise(planted);
  assert.equal(gate.passed, true, `the gate has no case of the probe's matrix: ${gate.failure}`);
  const got = await withQuantKernel(planted, () => stepProbeHash(exactGemm));
  assert.notEqual(got, REFERENCE_STEP_PROBE);
  // The same plant without the marker's value (any other matrix) changes nothing it gates.
  const again = await withQuantKernel(real, () => stepProbeHash(exactGemm));
  assert.equal(again, REFERENCE_STEP_PROBE);
});

test('a cross-entropy one ulp off on the probe logits only passes its gate, not the step probe', async () => {
  const real = await loadWasmElementwise();
  const [n, v] = XENT_SHAPE;
  const planted = Object.create(real);
  let hit = 0;
  planted.crossEntropy = function crossEntropy(logits, y, rows, cols, lossT) {
    const probe = rows === n && cols === v;
    real.crossEntropy.call(this, logits, y, rows, cols, lossT);
    if (probe) {
      hit += 1;
      const u = new Uint32Array(logits.buffer, logits.byteOffset, logits.length);
      u[3 * v + 17] += 1; // one dlogit, one ulp
    }
  };
  const gate = await gateWasmElementwise(planted);
  assert.equal(gate.passed, true, `the gate has no case of the probe's shape: ${gate.failure}`);
  assert.equal(hit, 0, 'the gate never ran the probe shape');
  const got = await withQuantKernel(planted, () => stepProbeHash(exactGemm));
  assert.equal(hit, 1);
  assert.notEqual(got, REFERENCE_STEP_PROBE);
});

test('a GEMM one unit off at one cell of the probe product changes the step probe', async () => {
  const [, , n] = PROBE_SHAPE;
  const planted = {
    async matmulInt(a, b, m, k, nn) {
      const acc = await exactGemm.matmulInt(a, b, m, k, nn);
      if (m === 64 && k === 96 && nn === 80) acc[40 * n + 50] += 1;
      return acc;
    },
  };
  const got = await withQuantKernel(null, () => stepProbeHash(planted));
  assert.notEqual(got, REFERENCE_STEP_PROBE);
});
