// The replays' rules (static/js/gpu/replay.js; docs/KERNELS.md "On the page"), without a GPU: a
// chain run's outputs stand in as plain arrays (the browser tests run the real chains). A request
// is answered only when it is the product the chain made, with the operands it used: a made
// operand (or a gradient limb) that differs is a kernel computing other bits (ChainMismatch,
// thrown before the product is used); a weight or a forward operand that differs, or another
// shape, order or limb count, ends the replay and the product computes on its own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BackwardReplay, ChainMismatch, ForwardReplay } from '../../static/js/gpu/replay.js';

// One block, C = 4 in one head (hd = 4), B = 1 sequence of T = 2 tokens (N = 2), F = 8, V = 5.
const C = 4;
const F = 8;
const V = 5;
const N = 2;
const T = 2;
const hd = 4;
let seed = 1;
const i8 = (n) => Int8Array.from({ length: n }, () => ((seed = (seed * 73 + 11) % 251) % 255) - 127);
const i32 = (n) => Int32Array.from({ length: n }, () => (seed = (seed * 37 + 5) % 97) - 48);
const q = (rows, cols, exps) => ({ q: i8(rows * cols), e: i32(exps) });

function forwardCase() {
  const w = { wqkv: [q(C, 3 * C, 3 * C)], wo: [q(C, C, C)], w1: [q(C, F, F)], w2: [q(F, C, C)],
    wte: q(V, C, V) };
  const plan = { a: q(N, C, N), w, width: C, hidden: F, vocab: V, batch: 1, heads: 1 };
  const made = { qkv: q(T, hd, T), k: q(T, hd, T), v: q(T, hd, hd), p: q(T, T, T), o: q(N, C, N),
    b: q(N, C, N), r: q(N, F, N), next: q(N, C, N) };
  const out = {
    blocks: [{
      qkv: { accQkv: i32(N * 3 * C), q8: made.qkv.q, qE: made.qkv.e, k8: made.k.q, kE: made.k.e,
        v8: made.v.q, vE: made.v.e,
        attention: { acc1: i32(T * T), p8: made.p.q, pE: made.p.e, acc2: i32(T * hd) } },
      o: made.o,
      tail: { accWo: i32(N * C), b: made.b, acc1: i32(N * F), r: made.r, acc2: i32(N * C) },
      next: made.next,
    }],
    logits: i32(N * V),
  };
  // the model's requests in order: [aq, ae, bq, be, M, K, N, opts]
  const requests = [
    [plan.a.q, plan.a.e, w.wqkv[0].q, w.wqkv[0].e, N, C, 3 * C, {}],
    [made.qkv.q, made.qkv.e, made.k.q, made.k.e, T, hd, T, { transB: true, batch: 1 }],
    [made.p.q, made.p.e, made.v.q, made.v.e, T, T, hd, { batch: 1 }],
    [made.o.q, made.o.e, w.wo[0].q, w.wo[0].e, N, C, C, {}],
    [made.b.q, made.b.e, w.w1[0].q, w.w1[0].e, N, C, F, {}],
    [made.r.q, made.r.e, w.w2[0].q, w.w2[0].e, N, F, C, {}],
    [made.next.q, made.next.e, w.wte.q, w.wte.e, N, C, V, { transB: true }],
  ];
  const accs = [out.blocks[0].qkv.accQkv, out.blocks[0].qkv.attention.acc1,
    out.blocks[0].qkv.attention.acc2, out.blocks[0].tail.accWo, out.blocks[0].tail.acc1,
    out.blocks[0].tail.acc2, out.logits];
  return { plan, out, requests, accs };
}

const copy = (x) => x.slice();
const bump = (x, at = 1) => { const y = x.slice(); y[at] += 1; return y; };

test('every forward request with the chain\'s operands is answered, in order', () => {
  const { plan, out, requests, accs } = forwardCase();
  const replay = new ForwardReplay(plan, out);
  requests.forEach((r, i) => {
    // the host's own arrays: equal bits, not the same objects
    const [aq, ae, bq, be, ...rest] = r;
    assert.equal(replay.take(copy(aq), copy(ae), copy(bq), copy(be), ...rest), accs[i], `${i}`);
  });
  assert.equal(replay.answered, 7);
  assert.equal(replay.done, true);
  assert.equal(replay.take(...requests[0]), null, 'nothing more to answer');
});

test('an operand the GPU made that differs from the host\'s throws before it is used', () => {
  for (const [at, side, what] of [[1, 0, 'scores\'s A operand values'],
    [2, 2, 'P v\'s B operand values'], [3, 1, 'output\'s A operand exponents'],
    [6, 0, 'logits\'s A operand values']]) {
    const { plan, out, requests } = forwardCase();
    const replay = new ForwardReplay(plan, out);
    for (let i = 0; i < at; i++) replay.take(...requests[i]);
    const wrong = [...requests[at]];
    wrong[side] = bump(wrong[side]);
    assert.throws(() => replay.take(...wrong), (exc) => exc instanceof ChainMismatch &&
      exc.message.includes(what) && exc.message.includes('index 1'), `${at}: ${what}`);
  }
});

test('a weight that is not the one uploaded, or another product, ends the replay', () => {
  const cases = [
    ['weight', (r) => { r[2] = bump(r[2]); }, /the B operand differs from the one uploaded/],
    ['first operand', (r) => { r[0] = bump(r[0]); }, /the A operand differs from the one uploaded/],
    ['shape', (r) => { r[6] = 3 * C + 1; }, /the model asked for/],
    ['transposition', (r) => { r[7] = { transA: true }; }, /the model asked for/],
  ];
  for (const [name, change, why] of cases) {
    const { plan, out, requests } = forwardCase();
    const replay = new ForwardReplay(plan, out);
    const first = [...requests[0]];
    change(first);
    assert.equal(replay.take(...first), null, name);
    assert.match(replay.dropped, why, name);
    assert.equal(replay.take(...requests[1]), null, `${name}: every later request computes alone`);
  }
});

// The backward of the same block: each pair's limbs (by rows for dA, by columns for dB) and
// stacked accumulators, as step_chain.js readPair makes them.
function pairOf(m, n, k, k2, limbs, slices = 1) {
  const side = (blocks) => ({ values: Array.from({ length: limbs }, () => i8(slices * m * n)),
    e: i32(blocks) });
  return { rows: side(slices * m), cols: side(slices * n), limbs,
    accA: i32(slices * limbs * m * k), accB: i32(slices * k2 * limbs * n) };
}

function backwardCase() {
  const fw = forwardCase();
  const back = {
    logits: pairOf(N, V, C, C, 3),
    blocks: [{ w2: pairOf(N, C, F, F, 2), w1: pairOf(N, F, C, C, 2), wo: pairOf(N, C, C, C, 2),
      pv: pairOf(T, hd, T, T, 2), qk: pairOf(T, T, hd, hd, 2), qkv: pairOf(N, 3 * C, C, C, 2) }],
  };
  const forward = new ForwardReplay(fw.plan, fw.out);
  const f = forward.expected;
  const limbsOf = (side) => {
    const [hi, a, b] = side.values;
    return b ? { hi, mid: a, lo: b, e: side.e } : { hi, lo: a, e: side.e };
  };
  // [kind, x, xe, limbs, dims], in the model's order (gpt.js gradientSteps)
  const left = (pair, op, M, K, Nn, trans) => ['left', op.q, op.e, limbsOf(pair.rows),
    [M, K, Nn, 1, pair.limbs, trans]];
  const right = (pair, op, M, K, Nn) => ['right', op.q, op.e, limbsOf(pair.cols),
    [M, K, Nn, 1, pair.limbs, true]];
  const b = back.blocks[0];
  const requests = [
    left(back.logits, f[6].b, N, V, C, false), right(back.logits, f[6].a, C, N, V),
    right(b.w2, f[5].a, F, N, C), left(b.w2, f[5].b, N, C, F, true),
    right(b.w1, f[4].a, C, N, F), left(b.w1, f[4].b, N, F, C, true),
    right(b.wo, f[3].a, C, N, C), left(b.wo, f[3].b, N, C, C, true),
    right(b.pv, f[2].a, T, T, hd), left(b.pv, f[2].b, T, hd, T, true),
    left(b.qk, f[1].b, T, T, hd, false), right(b.qk, f[1].a, hd, T, T),
    right(b.qkv, f[0].a, C, N, 3 * C), left(b.qkv, f[0].b, N, 3 * C, C, true),
  ];
  return { forward, back, requests };
}

test('every backward product with the forward\'s operand and the GPU\'s limbs is answered', () => {
  const { forward, back, requests } = backwardCase();
  const replay = new BackwardReplay(forward, back);
  for (const [kind, x, xe, limbs, dims] of requests) {
    const acc = replay.take(kind, copy(x), copy(xe), limbs, dims);
    assert.ok(acc instanceof Int32Array, `${kind} ${dims}`);
  }
  assert.equal(replay.answered, 14);
  assert.equal(replay.take(...requests[0]), null, 'nothing more to answer');
  // dA's accumulators for a left product, dB's for a right one
  const again = new BackwardReplay(forward, back);
  assert.equal(again.take(...requests[0]), back.logits.accA);
  assert.equal(again.take(...requests[1]), back.logits.accB);
});

test('a gradient limb or exponent the host makes otherwise throws before the product is used', () => {
  for (const [at, which] of [[0, 'hi'], [1, 'lo'], [3, 'lo'], [10, 'e']]) {
    const { forward, back, requests } = backwardCase();
    const replay = new BackwardReplay(forward, back);
    for (let i = 0; i < at; i++) replay.take(...requests[i]);
    const [kind, x, xe, limbs, dims] = requests[at];
    const mine = { ...limbs, [which]: bump(limbs[which], 0) };
    assert.throws(() => replay.take(kind, x, xe, mine, dims), (exc) =>
      exc instanceof ChainMismatch && /differs? from the host's at index 0/.test(exc.message),
    `${at} ${which}`);
  }
});

test('another forward operand, order or limb count ends the backward replay', () => {
  const cases = [
    ['forward operand', (r) => { r[1] = bump(r[1]); }, /its forward operand is not the forward's/],
    ['its exponents', (r) => { r[2] = bump(r[2]); }, /its forward operand is not the forward's/],
    ['the other product first', (r) => { r[0] = 'right'; }, /the model asked for another/],
    ['two limbs for three', (r) => { r[4] = [...r[4]]; r[4][4] = 2; }, /asked for another/],
  ];
  for (const [name, change, why] of cases) {
    const { forward, back, requests } = backwardCase();
    const replay = new BackwardReplay(forward, back);
    const first = [...requests[0]];
    change(first);
    assert.equal(replay.take(...first), null, name);
    assert.match(replay.dropped, why, name);
    assert.equal(replay.take(...requests[1]), null, `${name}: every later product computes alone`);
  }
});
