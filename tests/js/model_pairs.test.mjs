// The model's backward pairs (static/js/model/ops.js `pair`; docs/KERNELS.md "Backward pairs"):
// gpt.js yields a layer's two gradient products together, and an asynchronous provider starts
// both before either resolves (on WebGPU: both submitted before either is read back). Checked
// with a provider whose products resolve only after a timer (as a GPU readback does): the
// products of a pair overlap, the gradients are the CPU mirror's bits, every backward product
// goes in a pair; a pair whose product fails throws that failure once both have settled.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as M from '../../static/js/model/index.js';
import { CPU_OPS, pair, request, runAsync, runSync } from '../../static/js/model/ops.js';
import { assertBitsEqual } from './helpers.mjs';

/** The CPU mirror's products, each resolving after a timer; records when each starts and ends. */
function slowProvider(log) {
  const provider = {};
  for (const op of Object.keys(CPU_OPS)) {
    provider[op] = async (...args) => {
      const id = log.length;
      log.push({ op, start: true });
      const out = CPU_OPS[op](...args);
      await new Promise((resolve) => setTimeout(resolve, 1));
      log.push({ op, end: id });
      return out;
    };
  }
  return provider;
}

const cfg = M.preset('tiny');
const state = M.init(cfg, {}, 7);
const x = Int32Array.from({ length: cfg.batch * cfg.seqLen }, (_, i) => (i * 37) % cfg.vocabSize);
const y = Int32Array.from({ length: x.length }, (_, i) => (i * 91 + 5) % cfg.vocabSize);

test('a step through a slow provider: pairs overlap, the gradients are the mirror bits', async () => {
  const want = M.forwardBackward(state.params, cfg, x, y);
  const log = [];
  const got = await M.forwardBackwardAsync(state.params, cfg, x, y, { ops: slowProvider(log) });
  assert.equal(new Float32Array([got.loss])[0], new Float32Array([want.loss])[0]);
  for (const [name, g] of want.grads) assertBitsEqual(got.grads.get(name), g, name);
  // Every gradient product started while the other of its pair was still running: the log
  // holds each as start, start, end, end.
  const grads = log.filter((e) => e.op.startsWith('grad'));
  const pairs = cfg.layers * 6 + 1; // four linear layers' and attention's two per layer, logits
  assert.equal(grads.length, 4 * pairs);
  for (let i = 0; i < grads.length; i += 4) {
    assert.deepEqual(grads.slice(i, i + 4).map((e) => (e.start ? 'start' : 'end')),
      ['start', 'start', 'end', 'end'], `pair ${i / 4}`);
  }
  // forward products are one at a time
  const forward = log.filter((e) => e.op === 'qmatmul');
  for (let i = 0; i < forward.length; i += 2) assert.ok(forward[i].start && !forward[i + 1].start);
});

test('runSync gives a pair its two results in order', () => {
  function* steps() {
    const [a, b] = yield pair(request('qmatmul', Int8Array.of(2), Int32Array.of(0), Int8Array.of(3),
      Int32Array.of(0), 1, 1, 1), request('qmatmul', Int8Array.of(5), Int32Array.of(1),
      Int8Array.of(7), Int32Array.of(0), 1, 1, 1));
    return [a[0], b[0]];
  }
  assert.deepEqual(runSync(steps()), [6, 70]);
});

test('a pair whose product fails throws that failure after both settled, and nothing else', async () => {
  const seen = [];
  const unheard = (reason) => seen.push(reason);
  process.on('unhandledRejection', unheard);
  try {
    let second = false;
    const ops = {
      async gradMatmulLeft() { throw new Error('device lost mid-product'); },
      async gradMatmulRight() {
        await new Promise((resolve) => setTimeout(resolve, 5));
        second = true;
        throw new Error('the second failure');
      },
    };
    function* steps() {
      yield pair(request('gradMatmulLeft'), request('gradMatmulRight'));
    }
    await assert.rejects(runAsync(steps(), ops), /device lost mid-product/);
    assert.equal(second, true, 'the pair was left before its second product settled');
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.deepEqual(seen, []);
  } finally {
    process.off('unhandledRejection', unheard);
  }
});
