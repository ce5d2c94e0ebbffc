// A chain whose one readback a device cannot hold (static/js/gpu/chain.js ChainTooLarge;
// docs/KERNELS.md "On the page"): the recording refuses before it creates the staging buffer
// (a buffer past the device's maxBufferSize would be a device error, and a lost step), gives its
// buffers back, and the WebGPU provider computes that shape without the chain from then on, with
// the same bits. No GPU here: a fake device and pool stand in for the recording (the browser
// tests run the real chains) and the CPU mirror's exact product for the GEMM.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ChainTooLarge, Recording } from '../../static/js/gpu/chain.js';
import { productOps } from '../../static/js/gpu/gemm.js';
import { intMatmul } from '../../static/js/numerics/gemm.js';
import { forwardBackward, forwardBackwardAsync, Workspace } from '../../static/js/model/gpt.js';
import { initParams, modelConfig } from '../../static/js/model/index.js';

function fakePool() {
  const pool = { acquired: [], released: [] };
  pool.acquire = (size, kind = 'storage') => {
    const b = { size: Math.max(16, Math.ceil(size / 16) * 16), kind };
    pool.acquired.push(b);
    return b;
  };
  pool.upload = (array, kind) => pool.acquire(array.byteLength, kind);
  pool.release = (...buffers) => pool.released.push(...buffers);
  return pool;
}

test('a recording whose readback is past the largest buffer refuses and gives its buffers back', async () => {
  const pool = fakePool();
  const gpu = { device: { limits: { maxBufferSize: 256 } }, check() {} };
  const rec = new Recording(gpu, pool);
  rec.upload('a', new Uint32Array(8));
  rec.output('x', 160);
  rec.output('y', 160); // 320 bytes to read back in one buffer: past 256
  await assert.rejects(rec.run(), (exc) => exc instanceof ChainTooLarge &&
    /reads back 320 bytes in one buffer, past this device's 256/.test(exc.message));
  assert.equal(pool.acquired.filter((b) => b.kind === 'staging').length, 0, 'no staging buffer');
  assert.deepEqual(new Set(pool.released), new Set(pool.acquired), 'every buffer given back');
});

test('the provider computes a shape its chains cannot read back without them, same bits', async () => {
  const cfg = modelConfig({ vocabSize: 11, width: 16, layers: 1, heads: 1, seqLen: 4, batch: 2 });
  const params = initParams(cfg, 3);
  const x = Int32Array.from({ length: 8 }, (_, i) => (i * 5 + 1) % 11);
  const y = Int32Array.from({ length: 8 }, (_, i) => (i * 3 + 2) % 11);
  const gemm = { products: 0, async matmulInt(a, b, M, K, N, opts) {
    this.products += 1;
    return Int32Array.from(intMatmul(a, b, M, K, N, opts));
  } };
  const runs = { step: 0, forward: 0 };
  const tooLarge = (what) => async () => {
    runs[what] += 1;
    throw new ChainTooLarge(`${what}: past this device's largest buffer`);
  };
  const ops = productOps(gemm, {
    chain: { fits: () => true, run: tooLarge('forward') },
    stepChain: { fits: () => true, run: tooLarge('step') },
  });
  const want = forwardBackward(params, cfg, x, y, { workspace: new Workspace() });
  for (let round = 0; round < 2; round++) {
    const got = await forwardBackwardAsync(params, cfg, x, y, { workspace: new Workspace(), ops });
    assert.equal(got.loss, want.loss);
    for (const [name, g] of want.grads) assert.deepEqual(got.grads.get(name), g, name);
    assert.equal(ops.replay, null, 'no replay: every product computed on its own');
  }
  // tried once each for this shape, then remembered: no second attempt
  assert.deepEqual(runs, { step: 1, forward: 1 });
  assert.equal(gemm.products, 2 * 3 * (6 * cfg.layers + 1));
  // the chains stay attached: other shapes may fit
  assert.notEqual(ops.chain, null);
  assert.notEqual(ops.stepChain, null);
});

test('the chains refuse shapes their epilogues or bindings cannot hold', async () => {
  const { ForwardChain } = await import('../../static/js/gpu/forward_chain.js');
  const { StepChain, VOCAB_MAX } = await import('../../static/js/gpu/step_chain.js');
  const gemm = { name: 'fake', gpu: { limits: { maxStorageBufferBindingSize: 2 ** 27 } } };
  const forward = new ForwardChain(gemm, {});
  const step = new StepChain(forward, {});
  const tiny = { n: 256, c: 64, f: 256, heads: 4, t: 64, vocab: 2048 };
  const small = { n: 1024, c: 256, f: 1024, heads: 4, t: 128, vocab: 2048 };
  for (const shape of [tiny, small]) assert.ok(step.fits(shape) && forward.fits(shape));
  // a vocabulary row past the cross-entropy's reach: the forward chain only
  assert.equal(step.fits({ ...tiny, vocab: VOCAB_MAX + 1 }), false);
  assert.equal(forward.fits({ ...tiny, vocab: VOCAB_MAX + 1 }), true);
  // a token's row or a query's keys past an epilogue's workgroup memory, heads that do not
  // divide the width, a sequence that does not divide the tokens: neither
  for (const wrong of [{ c: 1028, f: 4 * 1028 }, { t: 1025, n: 2050 }, { heads: 3 }, { t: 60 }]) {
    const shape = { ...tiny, ...wrong };
    assert.equal(forward.fits(shape), false, JSON.stringify(wrong));
    assert.equal(step.fits(shape), false, JSON.stringify(wrong));
  }
  // a buffer past the device's storage binding
  const narrow = new ForwardChain({ ...gemm, gpu: { limits: { maxStorageBufferBindingSize: 2 ** 20 } } }, {});
  assert.equal(narrow.fits(tiny), false);
});
