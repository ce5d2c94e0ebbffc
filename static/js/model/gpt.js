// The contract GPT (v2): forward and hand-written backward on the numerical contract
// (docs/MODEL.md sections 4-6). Mirrors server/daisychain/model/gpt.py operation for operation.
//
// Every matrix product is an exact int8 product from ../numerics (forward `qmatmul`; backward
// `gradMatmulLeft` / `gradMatmulRight`, which reuse the forward int8 operand as stored and fold
// its power-of-two scales into the two-limb gradient). The layers are generators that yield each
// product as a request (ops.js), so the same code runs on the CPU mirror (forwardBackward) or
// with the products on a GPU (forwardBackwardAsync with a provider); the bits are the same.
// Elementwise work is one float32 operation at a time (`Math.fround` or a Float32Array store
// after each), every float reduction is the pinned tree sum, exp and log are the contract's own.
//
// Layout: row-major typed arrays. Activations are (N, C) with N = B * T tokens in (b, t) order;
// attention tensors are (B*H, T, hd) (one stacked matrix per (b, h)). Tokens `x`, `y` are integer
// arrays of B * T ids in (b, t) order. Activation buffers live in a Workspace and are reused
// from call to call; returned gradients and logits are fresh arrays owned by the caller.

import { exp } from '../numerics/fmath.js';
import { crossEntropy as meanCrossEntropy } from '../numerics/xent.js';
import { quantizeRows, quantizeCols } from '../numerics/quant.js';
import { pair, request, runAsync, runSync } from './ops.js';
import { treeSumStrided, treeSumLast, treeSumRows } from '../numerics/reduce.js';
import { paramShapes, numel, zerosLike } from './params.js';

// Limb count of the logits gradient (contract v2; 2 elsewhere): gpt.py's LOGITS_LIMBS.
export const LOGITS_LIMBS = 3;

const f32 = Math.fround;

/** Named typed arrays reused across calls (reallocated only when a size changes). */
export class Workspace {
  constructor() {
    this.arrays = new Map();
  }
  get(name, Type, n) {
    let a = this.arrays.get(name);
    if (!a || a.length !== n || a.constructor !== Type) {
      a = new Type(n);
      this.arrays.set(name, a);
    }
    return a;
  }
  f32(name, n) {
    return this.get(name, Float32Array, n);
  }
  /** A quantized operand {q: Int8Array(n), e: Int32Array(blocks)} stored under `name`. */
  qt(name, n, blocks) {
    return { q: this.get(name + '.q', Int8Array, n), e: this.get(name + '.e', Int32Array, blocks) };
  }
}

// One default workspace per configuration object (configs are frozen values).
const WORKSPACES = new WeakMap();
function defaultWorkspace(cfg) {
  let ws = WORKSPACES.get(cfg);
  if (!ws) {
    ws = new Workspace();
    WORKSPACES.set(cfg, ws);
  }
  return ws;
}

// ---------------------------------------------------------------------------------------------
// layers

/**
 * RMSNorm per row of x (N, C): ss = tree_sum(x * x); d = sqrt(ss / C + eps); inv = 1 / d;
 * xhat = x * inv; y = xhat * g. Fills y, xhat (N, C), inv (N); sq (N, C) is scratch.
 */
function rmsnormForward(x, g, eps, N, C, y, xhat, inv, sq, ss) {
  const cf = f32(C);
  for (let i = 0; i < x.length; i++) sq[i] = x[i] * x[i];
  treeSumLast(sq, N, C, ss);
  for (let n = 0; n < N; n++) {
    const d = f32(Math.sqrt(f32(f32(ss[n] / cf) + eps)));
    const iv = f32(1 / d);
    inv[n] = iv;
    const o = n * C;
    for (let c = 0; c < C; c++) {
      const xh = f32(x[o + c] * iv);
      xhat[o + c] = xh;
      y[o + c] = xh * g[c];
    }
  }
}

/**
 * RMSNorm backward: dxhat = dy * g; mean = tree_sum(dxhat * xhat) / C;
 * dx = (dxhat - xhat * mean) * inv; dg = tree_sum over rows of dy * xhat. Fills dx (N, C) and
 * dg (C); prod (N, C) and dot (N) are scratch.
 */
function rmsnormBackward(dy, g, xhat, inv, N, C, dx, dg, prod, dot) {
  const cf = f32(C);
  for (let n = 0; n < N; n++) {
    const o = n * C;
    for (let c = 0; c < C; c++) {
      const dxh = f32(dy[o + c] * g[c]);
      dx[o + c] = dxh;
      prod[o + c] = dxh * xhat[o + c];
    }
  }
  treeSumLast(prod, N, C, dot);
  for (let n = 0; n < N; n++) {
    const mean = f32(dot[n] / cf);
    const iv = inv[n];
    const o = n * C;
    for (let c = 0; c < C; c++) {
      dx[o + c] = f32(dx[o + c] - f32(xhat[o + c] * mean)) * iv;
    }
  }
  for (let i = 0; i < prod.length; i++) prod[i] = dy[i] * xhat[i];
  treeSumRows(prod, N, C, dg);
}

function addInto(h, d) {
  for (let i = 0; i < h.length; i++) h[i] = h[i] + d[i];
}

/** Causal attention forward on the fused qkv (N, 3C); fills `merged` (N, C); returns the cache. */
function* attentionForward(ws, pre, qkv, cfg, B, T, merged) {
  const { heads: H, headDim: hd, width: C } = cfg;
  const BH = B * H;
  const scale = f32(1 / f32(Math.sqrt(hd))); // an exact power of two
  const size = BH * T * hd;
  const qh = ws.f32('att.qh', size);
  const kh = ws.f32('att.kh', size);
  const vh = ws.f32('att.vh', size);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      const src = (b * T + t) * 3 * C;
      for (let h = 0; h < H; h++) {
        const dst = ((b * H + h) * T + t) * hd;
        const s = src + h * hd;
        for (let d = 0; d < hd; d++) {
          qh[dst + d] = qkv[s + d];
          kh[dst + d] = qkv[s + C + d];
          vh[dst + d] = qkv[s + 2 * C + d];
        }
      }
    }
  }
  const q = quantizeRows(qh, BH * T, hd, ws.qt(pre + 'q', size, BH * T)); // per (b, h, t) over d
  const k = quantizeRows(kh, BH * T, hd, ws.qt(pre + 'k', size, BH * T));
  const v = quantizeCols(vh, T, hd, ws.qt(pre + 'v', size, BH * hd), BH); // per (b, h, d) over t
  const P = ws.f32(pre + 'P', BH * T * T);
  yield request('qmatmul', q.q, q.e, k.q, k.e, T, hd, T, { transB: true, batch: BH, out: P }); // S
  softmaxCausal(P, BH, T, scale);
  const pq = quantizeRows(P, BH * T, T, ws.qt(pre + 'Pq', BH * T * T, BH * T));
  const O = ws.f32('att.O', size);
  yield request('qmatmul', pq.q, pq.e, v.q, v.e, T, T, hd, { batch: BH, out: O });
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      const dst = (b * T + t) * C;
      for (let h = 0; h < H; h++) {
        const src = ((b * H + h) * T + t) * hd;
        for (let d = 0; d < hd; d++) merged[dst + h * hd + d] = O[src + d];
      }
    }
  }
  return { q, k, v, P, pq };
}

/**
 * P = softmax(S * scale, keys j > query i at -inf) per row, in place on S (BH, T, T):
 * m = max; z = S - m; p = exp(z); P = p / tree_sum(p over all T keys).
 */
function softmaxCausal(S, BH, T, scale) {
  for (let r = 0; r < BH * T; r++) {
    const i = r % T;
    const o = r * T;
    let m = -Infinity;
    for (let j = 0; j < T; j++) {
      // S * scale + mask (mask: -inf above the diagonal, -0 elsewhere), as the reference adds it.
      const s = f32(f32(S[o + j] * scale) + (j > i ? -Infinity : -0));
      S[o + j] = s;
      if (s > m) m = s;
    }
    for (let j = 0; j < T; j++) S[o + j] = exp(f32(S[o + j] - m));
    const den = treeSumStrided(S, o, T, 1);
    for (let j = 0; j < T; j++) S[o + j] = S[o + j] / den;
  }
}

/** Gradient of the merged heads (N, C) -> gradient of the fused qkv, written into dqkv (N, 3C). */
function* attentionBackward(ws, dmerged, cache, cfg, B, T, dqkv) {
  const { heads: H, headDim: hd, width: C } = cfg;
  const BH = B * H;
  const scale = f32(1 / f32(Math.sqrt(hd)));
  const size = BH * T * hd;
  const dO = ws.f32('att.dO', size);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      const src = (b * T + t) * C;
      for (let h = 0; h < H; h++) {
        const dst = ((b * H + h) * T + t) * hd;
        for (let d = 0; d < hd; d++) dO[dst + d] = dmerged[src + h * hd + d];
      }
    }
  }
  const { q, k, v, P, pq } = cache;
  // dv = P^T @ dO; dP = dO @ v^T
  const [dv, dS] = yield pair(
    request('gradMatmulRight', pq.q, pq.e, dO, T, T, hd,
      { transA: true, batch: BH, out: ws.f32('att.dv', size) }),
    request('gradMatmulLeft', dO, v.e, v.q, T, hd, T,
      { transB: true, batch: BH, out: ws.f32('att.dS', BH * T * T) }));
  const tmp = ws.f32('att.tmp', T);
  for (let r = 0; r < BH * T; r++) {
    const o = r * T;
    for (let j = 0; j < T; j++) tmp[j] = dS[o + j] * P[o + j];
    const w = treeSumStrided(tmp, 0, T, 1);
    for (let j = 0; j < T; j++) dS[o + j] = f32(P[o + j] * f32(dS[o + j] - w)) * scale;
  }
  // dq = dS @ k; dk^T = q^T @ dS
  const [dq, dkt] = yield pair(
    request('gradMatmulLeft', dS, k.e, k.q, T, T, hd, { batch: BH, out: ws.f32('att.dq', size) }),
    request('gradMatmulRight', q.q, q.e, dS, hd, T, T,
      { transA: true, batch: BH, out: ws.f32('att.dkt', size) }));
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const bh = b * H + h;
      for (let t = 0; t < T; t++) {
        const dst = (b * T + t) * 3 * C + h * hd;
        const src = (bh * T + t) * hd;
        for (let d = 0; d < hd; d++) {
          dqkv[dst + d] = dq[src + d];
          dqkv[dst + C + d] = dkt[(bh * hd + d) * T + t];
          dqkv[dst + 2 * C + d] = dv[src + d];
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// the model

/** Every matrix quantized once per step: wte per vocabulary row, the others per output column. */
function quantizeWeights(ws, params, cfg) {
  const { width: C, vocabSize: V, hidden: F } = cfg;
  const cols = (name, rows, n) =>
    quantizeCols(params.get(name), rows, n, ws.qt('w.' + name, rows * n, n));
  const w = {
    wte: quantizeRows(params.get('wte'), V, C, ws.qt('w.wte', V * C, V)),
    wqkv: [], wo: [], w1: [], w2: [],
  };
  for (let l = 0; l < cfg.layers; l++) {
    const p = `h.${l}.`;
    w.wqkv.push(cols(p + 'wqkv', C, 3 * C));
    w.wo.push(cols(p + 'wo', C, C));
    w.w1.push(cols(p + 'w1', C, F));
    w.w2.push(cols(p + 'w2', F, C));
  }
  return w;
}

function checkInputs(params, cfg, x, batch) {
  const B = batch;
  if (!Number.isInteger(B) || B < 1 || x.length % B !== 0 || x.length === 0) {
    throw new RangeError(`tokens: ${x.length} ids do not split into ${B} sequences`);
  }
  const T = x.length / B;
  if (T > cfg.seqLen) {
    throw new RangeError(`sequence length ${T} outside [1, ${cfg.seqLen}] (the position table)`);
  }
  for (let i = 0; i < x.length; i++) {
    if (!(x[i] >= 0 && x[i] < cfg.vocabSize && Number.isInteger(x[i]))) {
      throw new RangeError(`token ids must lie in [0, ${cfg.vocabSize}); check the tokenizer`);
    }
  }
  for (const [name, shape] of paramShapes(cfg)) {
    const a = params.get(name);
    if (!(a instanceof Float32Array) || a.length !== numel(shape)) {
      throw new RangeError(`parameter ${name}: expected a Float32Array of shape [${shape}]`);
    }
  }
  return T;
}

// Shared forward: logits (N, V) into `logits`, plus what the backward needs when `keep`.
function* forward(ws, params, cfg, x, B, T, keep, logits, targets = null) {
  const { width: C, hidden: F, vocabSize: V, normEps: eps } = cfg;
  const N = B * T;
  const w = quantizeWeights(ws, params, cfg);
  const h = ws.f32('h', N * C);
  const wte = params.get('wte');
  const wpe = params.get('wpe');
  for (let n = 0; n < N; n++) {
    const xo = x[n] * C;
    const po = (n % T) * C;
    for (let c = 0; c < C; c++) h[n * C + c] = wte[xo + c] + wpe[po + c];
  }
  const sq = ws.f32('sq', N * C);
  const ss = ws.f32('ss', N);
  const y = ws.f32('y', N * C); // a normed activation (quantized right away)
  const qkv = ws.f32('qkv', N * 3 * C);
  const merged = ws.f32('merged', N * C);
  const u = ws.f32('u', N * F);
  const caches = [];
  for (let l = 0; l < cfg.layers; l++) {
    const pre = keep ? `L${l}.` : 'L.';
    const p = `h.${l}.`;
    const norm1 = { xhat: ws.f32(pre + 'xhat1', N * C), inv: ws.f32(pre + 'inv1', N) };
    rmsnormForward(h, params.get(p + 'g1'), eps, N, C, y, norm1.xhat, norm1.inv, sq, ss);
    const a = quantizeRows(y, N, C, ws.qt(pre + 'a', N * C, N));
    if (l === 0) yield request('plan', forwardPlan(params, cfg, w, a, h, B, targets));
    yield request('qmatmul', a.q, a.e, w.wqkv[l].q, w.wqkv[l].e, N, C, 3 * C, { out: qkv });
    const attn = yield* attentionForward(ws, pre, qkv, cfg, B, T, merged);
    const o = quantizeRows(merged, N, C, ws.qt(pre + 'o', N * C, N));
    addInto(h, yield request('qmatmul', o.q, o.e, w.wo[l].q, w.wo[l].e, N, C, C,
      { out: ws.f32('proj', N * C) }));
    const norm2 = { xhat: ws.f32(pre + 'xhat2', N * C), inv: ws.f32(pre + 'inv2', N) };
    rmsnormForward(h, params.get(p + 'g2'), eps, N, C, y, norm2.xhat, norm2.inv, sq, ss);
    const bq = quantizeRows(y, N, C, ws.qt(pre + 'b', N * C, N));
    yield request('qmatmul', bq.q, bq.e, w.w1[l].q, w.w1[l].e, N, C, F, { out: u });
    const relu = ws.get(pre + 'relu', Uint8Array, N * F);
    for (let i = 0; i < u.length; i++) {
      const pos = u[i] > 0;
      relu[i] = pos ? 1 : 0;
      // u * 0 + 0 as in the reference: +0 for u <= 0 (-0 included), NaN stays NaN so the
      // quantizer refuses a diverged run exactly where Python does.
      if (!pos) u[i] = f32(u[i] * 0) + 0;
    }
    const r = quantizeRows(u, N, F, ws.qt(pre + 'r', N * F, N));
    addInto(h, yield request('qmatmul', r.q, r.e, w.w2[l].q, w.w2[l].e, N, F, C,
      { out: ws.f32('proj', N * C) }));
    if (keep) caches.push({ norm1, a, attn, o, norm2, bq, relu, r });
  }
  const normf = { xhat: ws.f32('xhatf', N * C), inv: ws.f32('invf', N) };
  rmsnormForward(h, params.get('gf'), eps, N, C, y, normf.xhat, normf.inv, sq, ss);
  const hq = quantizeRows(y, N, C, ws.qt('hf', N * C, N));
  yield request('qmatmul', hq.q, hq.e, w.wte.q, w.wte.e, N, C, V, { transB: true, out: logits });
  return { w, caches, normf, hq };
}

/**
 * What the whole forward depends on, told to the provider once before its first product (a GPU
 * provider may run the forward in one submit from it: gpu/forward_chain.js, and with `targets`,
 * a training step's, the whole step: gpu/step_chain.js; the CPU mirror ignores it): the first
 * block's operand, the residual stream, the quantized weights, the gains, the shapes and the
 * targets (null outside training). Every product is still asked for after it, in order, with
 * the host's operands.
 */
function forwardPlan(params, cfg, w, a, h, B, targets) {
  const g = (name) => params.get(name);
  const layers = [...Array(cfg.layers).keys()];
  return {
    a, h, w, batch: B, heads: cfg.heads, scale: f32(1 / f32(Math.sqrt(cfg.headDim))),
    eps: cfg.normEps, width: cfg.width, hidden: cfg.hidden, vocab: cfg.vocabSize,
    layers: cfg.layers, g1: layers.map((l) => g(`h.${l}.g1`)),
    g2: layers.map((l) => g(`h.${l}.g2`)), gf: g('gf'), targets,
  };
}

/**
 * A training step's plan (forwardPlan, with its targets) without the step: the model runs up to
 * the plan and stops there. The plan's arrays live in `workspace` (a fresh one by default) and
 * stay valid until that workspace computes again. gpu/probe.js takes the probe step's plan this
 * way, for a step chain that records the probe step beside every training step.
 */
export function stepPlan(params, cfg, x, y, { batch = cfg.batch, workspace } = {}) {
  const steps = gradientSteps(params, cfg, x, y, batch, workspace ?? new Workspace());
  for (let r = steps.next(); !r.done; r = steps.next(null)) {
    if (r.value.op === 'plan') {
      steps.return();
      return r.value.args[0];
    }
  }
  throw new Error('the model made no plan');
}

/**
 * Logits for tokens x (B * T ids, (b, t) order): a fresh Float32Array (B * T * V), row-major
 * (B, T, V). The same forward path as training.
 */
export function forwardLogits(params, cfg, x, { batch = cfg.batch, workspace } = {}) {
  return runSync(logitsSteps(params, cfg, x, batch, workspace));
}

/** forwardLogits with the products on `ops` (a provider, see ops.js); resolves to the logits. */
export function forwardLogitsAsync(params, cfg, x, { batch = cfg.batch, workspace, ops } = {}) {
  return runAsync(logitsSteps(params, cfg, x, batch, workspace), ops);
}

function* logitsSteps(params, cfg, x, batch, workspace) {
  const ws = workspace ?? defaultWorkspace(cfg);
  const T = checkInputs(params, cfg, x, batch);
  const logits = new Float32Array(batch * T * cfg.vocabSize);
  yield* forward(ws, params, cfg, x, batch, T, false, logits);
  return logits;
}

/**
 * Mean cross-entropy and dlogits in place (numerics/xent.js: the JS loop, or the WebAssembly
 * SIMD kernel its gate installed; the same bits). Per token: z = logits - max; p = exp(z);
 * s = tree_sum(p); loss_n = log(s) - z[y]; dlogits = ((p / s) - [v == y]) / N.
 * Loss = tree_sum(loss_n) / N.
 */
function crossEntropy(ws, logits, y, N, V) {
  return meanCrossEntropy(logits, y, N, V, ws.f32('lossT', N));
}

/**
 * Mean cross-entropy of next tokens `y` given `x` (each B * T ids in (b, t) order; B from
 * `batch`, default cfg.batch) and its gradients: {loss (a float32 number), grads (a Map name ->
 * fresh Float32Array in parameter order)}. `onGrad(name, grad)` hears of each parameter's
 * gradient once it is final (the last layers first, the embeddings last), so a peer can send
 * those values while the backward goes on (p2p/early.js); it must not modify `grad`.
 */
export function forwardBackward(params, cfg, x, y, { batch = cfg.batch, workspace, onGrad } = {}) {
  return runSync(gradientSteps(params, cfg, x, y, batch, workspace, onGrad));
}

/**
 * forwardBackward with the products on `ops` (a provider, see ops.js; the CPU mirror when
 * omitted); resolves to the same {loss, grads}, bit for bit.
 */
export function forwardBackwardAsync(params, cfg, x, y, opts = {}) {
  const { batch = cfg.batch, workspace, ops, onGrad } = opts;
  return runAsync(gradientSteps(params, cfg, x, y, batch, workspace, onGrad), ops);
}

/**
 * The loss forwardBackward returns (the same float32 bits), forward only: no gradient, nothing
 * kept. The validation loss (docs/MODEL.md section 8) is this on the validation batches, with
 * the products on `ops` (a provider, see ops.js; the CPU mirror when omitted).
 */
export function lossAsync(params, cfg, x, y, { batch = cfg.batch, workspace, ops } = {}) {
  return runAsync(lossSteps(params, cfg, x, y, batch, workspace), ops);
}

function* lossSteps(params, cfg, x, y, batch, workspace) {
  const ws = workspace ?? defaultWorkspace(cfg);
  const T = checkInputs(params, cfg, x, batch);
  checkTargets(cfg, x, y);
  const N = batch * T;
  const logits = ws.f32('logits', N * cfg.vocabSize);
  yield* forward(ws, params, cfg, x, batch, T, false, logits);
  return crossEntropy(ws, logits, y, N, cfg.vocabSize);
}

function checkTargets(cfg, x, y) {
  if (y.length !== x.length) throw new RangeError('targets must have the tokens\' shape');
  for (let i = 0; i < y.length; i++) {
    if (!(y[i] >= 0 && y[i] < cfg.vocabSize && Number.isInteger(y[i]))) {
      throw new RangeError(`target ids must lie in [0, ${cfg.vocabSize})`);
    }
  }
}

function* gradientSteps(params, cfg, x, y, batch, workspace, onGrad = () => {}) {
  const ws = workspace ?? defaultWorkspace(cfg);
  const T = checkInputs(params, cfg, x, batch);
  checkTargets(cfg, x, y);
  const B = batch;
  const N = B * T;
  const { width: C, hidden: F, vocabSize: V } = cfg;
  const logits = ws.f32('logits', N * V);
  const { w, caches, normf, hq } = yield* forward(ws, params, cfg, x, B, T, true, logits, y);
  const loss = crossEntropy(ws, logits, y, N, V);
  const dlogits = logits;

  const grads = zerosLike(cfg);
  // The logits gradient has three limbs (contract v2, docs/NUMERICS.md section 6).
  // Every backward pair below (a layer's input and weight gradients, attention's two pairs) is
  // yielded together (ops.js `pair`): neither reads the other's result.
  const [dhf, dwteT] = yield pair(
    request('gradMatmulLeft', dlogits, w.wte.e, w.wte.q, N, V, C,
      { out: ws.f32('dhf', N * C), limbCount: LOGITS_LIMBS }),
    request('gradMatmulRight', hq.q, hq.e, dlogits, C, N, V,
      { transA: true, out: ws.f32('dwteT', C * V), limbCount: LOGITS_LIMBS }));
  const dh = ws.f32('dh', N * C);
  const dx = ws.f32('dx', N * C);
  const prod = ws.f32('prod', N * C);
  const dot = ws.f32('dot', N);
  rmsnormBackward(dhf, params.get('gf'), normf.xhat, normf.inv, N, C, dh, grads.get('gf'),
    prod, dot);
  const done = (name) => onGrad(name, grads.get(name));
  done('gf');
  const dr = ws.f32('dr', N * F);
  const dmid = ws.f32('dmid', N * C); // dbn, then dmerged, then da
  const dqkv = ws.f32('dqkv', N * 3 * C);
  for (let l = cfg.layers - 1; l >= 0; l--) {
    const p = `h.${l}.`;
    const c = caches[l];
    // MLP branch: h += relu(rmsnorm(h) @ w1) @ w2
    yield pair(
      request('gradMatmulRight', c.r.q, c.r.e, dh, F, N, C,
        { transA: true, out: grads.get(p + 'w2') }),
      request('gradMatmulLeft', dh, w.w2[l].e, w.w2[l].q, N, C, F, { transB: true, out: dr }));
    done(p + 'w2');
    for (let i = 0; i < dr.length; i++) if (!c.relu[i]) dr[i] = 0; // du
    yield pair(
      request('gradMatmulRight', c.bq.q, c.bq.e, dr, C, N, F,
        { transA: true, out: grads.get(p + 'w1') }),
      request('gradMatmulLeft', dr, w.w1[l].e, w.w1[l].q, N, F, C, { transB: true, out: dmid }));
    done(p + 'w1');
    rmsnormBackward(dmid, params.get(p + 'g2'), c.norm2.xhat, c.norm2.inv, N, C, dx,
      grads.get(p + 'g2'), prod, dot);
    done(p + 'g2');
    addInto(dh, dx);
    // attention branch: h += attention(rmsnorm(h) @ wqkv) @ wo
    yield pair(
      request('gradMatmulRight', c.o.q, c.o.e, dh, C, N, C,
        { transA: true, out: grads.get(p + 'wo') }),
      request('gradMatmulLeft', dh, w.wo[l].e, w.wo[l].q, N, C, C, { transB: true, out: dmid }));
    done(p + 'wo');
    yield* attentionBackward(ws, dmid, c.attn, cfg, B, T, dqkv);
    yield pair(
      request('gradMatmulRight', c.a.q, c.a.e, dqkv, C, N, 3 * C,
        { transA: true, out: grads.get(p + 'wqkv') }),
      request('gradMatmulLeft', dqkv, w.wqkv[l].e, w.wqkv[l].q, N, 3 * C, C,
        { transB: true, out: dmid }));
    done(p + 'wqkv');
    rmsnormBackward(dmid, params.get(p + 'g1'), c.norm1.xhat, c.norm1.inv, N, C, dx,
      grads.get(p + 'g1'), prod, dot);
    done(p + 'g1');
    addInto(dh, dx);
  }
  // embeddings: scatter rows of dh in flat position order onto +0, then add the logits part
  const dwte = grads.get('wte');
  for (let n = 0; n < N; n++) {
    const o = x[n] * C;
    for (let c = 0; c < C; c++) dwte[o + c] = dwte[o + c] + dh[n * C + c];
  }
  for (let v = 0; v < V; v++) {
    for (let c = 0; c < C; c++) dwte[v * C + c] = dwte[v * C + c] + dwteT[c * V + v];
  }
  // dwpe[t] = tree_sum over the batch of dh[b * T + t]; rows t >= T stay +0
  done('wte');
  treeSumRows(dh, B, T * C, grads.get('wpe').subarray(0, T * C));
  done('wpe');
  return { loss, grads };
}
