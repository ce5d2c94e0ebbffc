// The TF.js side of `daisychain bench cpu-tier`: our GPT (docs/MODEL.md) written in TF.js 4.22,
// float32, trained with tf.variableGrads and an AdamW written with tf ops, timed step by step.
// Environment-agnostic: tfjs_node.mjs runs it under Node, bench/_cputier_chromium.py serves it to
// a Chromium page; the caller passes the `tf` namespace with the wasm backend set.
//
// The shape is ours exactly (gptShapes: the canonical parameter list of docs/MODEL.md section 2):
// token embedding tied with the output layer, learned positions, per layer RMSNorm (gain, no
// bias) -> fused qkv -> causal softmax attention (scale 1/sqrt(hd)) -> output projection,
// RMSNorm -> w1 -> ReLU -> w2, final RMSNorm, logits = h @ wte^T, mean cross-entropy. No biases.
// AdamW: our hyper-parameters (lr, betas, eps, weight decay on the 2-D matrices but not on wpe,
// global-norm clip), bias-corrected as section 7.
//
// Two ways of writing it (`mode`), both the same model (and both with the embedding's gradient
// written by hand: see `embed`):
// - 'out-of-the-box': what a natural port writes: tf.matMul on 3-D activations (B, T, C) against
//   the weights (broadcast to 3-D, see `linear`), attention as 4-D batched products with
//   transposeB, TF.js's own gradients. The wasm backend sends batched and transposed products to
//   a scalar loop (only plain 2-D products reach XNNPACK).
// - 'fastest': every product a plain 2-D tf.matMul without transpose flags: activations
//   reshaped to (B*T, C), attention one (T, hd) x (hd, T) product per (sequence, head), and a
//   custom gradient that transposes operands explicitly so the backward's products are plain 2-D
//   too (TF.js's own gradient of matMul uses transposeA/transposeB). Measured while writing it
//   (Node, 1024x256x1024): plain 25 ms, transposeB 171 ms, transposeA 626 ms, explicit transpose
//   then plain 15 ms; the split attention ran 22 ms against 33 ms batched at small's shape.

/** [[name, shape], ...] in the canonical order (MODEL.md section 2); `cfg` as in gpt.js. */
export function gptShapes(cfg) {
  const { vocabSize: V, width: C, layers: L, seqLen: T } = cfg;
  const F = cfg.mlpMult * C;
  const shapes = [['wte', [V, C]], ['wpe', [T, C]]];
  for (let l = 0; l < L; l++) {
    shapes.push([`h.${l}.g1`, [C]], [`h.${l}.wqkv`, [C, 3 * C]], [`h.${l}.wo`, [C, C]],
      [`h.${l}.g2`, [C]], [`h.${l}.w1`, [C, F]], [`h.${l}.w2`, [F, C]]);
  }
  shapes.push(['gf', [C]]);
  return shapes;
}

const isGain = (name) => name === 'gf' || name.endsWith('.g1') || name.endsWith('.g2');
// Weight decay on the 2-D matrices except the positions (MODEL.md section 7).
const decays = (name) => !isGain(name) && name !== 'wpe';

/** The variables, initialised uniformly with our standard deviations (values do not matter to
 * the time of a step, but a sane start keeps the loss comparable with ours). */
function initVariables(tf, cfg, seed) {
  const vars = new Map();
  gptShapes(cfg).forEach(([name, shape], i) => {
    let init;
    if (isGain(name)) {
      init = tf.ones(shape);
    } else {
      const base = name === 'wpe' ? 0.01 : 0.02;
      const std = name.endsWith('.wo') || name.endsWith('.w2')
        ? base / Math.sqrt(2 * cfg.layers) : base;
      const a = std * Math.sqrt(3);
      init = tf.randomUniform(shape, -a, a, 'float32', seed * 1000 + i);
    }
    // Unnamed: TF.js gives each a unique name, so two models may live in one page.
    vars.set(name, tf.variable(init, true));
    init.dispose();
  });
  return vars;
}

/** The forward to the mean loss, for one `mode`: {loss: (x, y) -> scalar tensor, dispose}. */
function buildLoss(tf, cfg, vars, mode) {
  const { vocabSize: V, width: C, layers: L, heads: H, seqLen: T, batch: B } = cfg;
  const hd = C / H;
  const N = B * T;
  const eps = 1e-5;
  const scale = 1 / Math.sqrt(hd);
  // Additive causal mask: 0 on and below the diagonal, -1e9 above (exp gives +0 there).
  const mask = tf.tidy(() => tf.mul(tf.sub(1, tf.linalg.bandPart(tf.ones([T, T]), -1, 0)), -1e9));
  const w = (name) => vars.get(name);

  // y = a @ b, plain 2-D both ways: dA = dY @ b^T and dB = a^T @ dY with explicit transposes.
  const mm = tf.customGrad((a, b, save) => {
    save([a, b]);
    return {
      value: tf.matMul(a, b),
      gradFunc: (dy, [sa, sb]) => [tf.matMul(dy, tf.transpose(sb)), tf.matMul(tf.transpose(sa), dy)],
    };
  });

  // Token embedding, both modes: TF.js's gradient of tf.gather is UnsortedSegmentSum, which the
  // wasm backend lacks, so the gradient is written as ScatterNd (it sums repeated ids).
  const embed = tf.customGrad((table, ids, save) => {
    save([ids]);
    return {
      value: tf.gather(table, ids),
      gradFunc: (dy, [sids]) => [
        tf.scatterND(tf.reshape(sids, [N, 1]), tf.reshape(dy, [N, C]), [V, C]),
        tf.zerosLike(sids),
      ],
    };
  });

  const rmsnorm = (h, g) => {
    const ms = tf.mean(tf.square(h), -1, true);
    return tf.mul(tf.mul(h, tf.rsqrt(tf.add(ms, eps))), g);
  };

  // Linear layer on activations h: (B, T, Cin) in 'out-of-the-box', (N, Cin) in 'fastest'.
  // 'out-of-the-box' broadcasts the weight to (B, Cin, Cout) itself: TF.js's gradient of a
  // rank-3 x rank-2 tf.matMul returns a (B, Cin, Cout) gradient for the 2-D operand and fails.
  const perSequence = (wt) => tf.broadcastTo(wt, [B, ...wt.shape]);
  const linear = mode === 'fastest'
    ? (h, wt) => mm(h, wt) : (h, wt) => tf.matMul(h, perSequence(wt));

  function attention(qkv) {
    if (mode === 'fastest') {
      // (N, 3C) -> per (sequence, head) 2-D products.
      const split = tf.transpose(tf.reshape(qkv, [B, T, 3, H, hd]), [2, 0, 3, 1, 4]); // 3,B,H,T,hd
      const [q, k, v] = tf.unstack(tf.reshape(split, [3, B * H, T, hd]));
      const qs = tf.unstack(q), ks = tf.unstack(k), vs = tf.unstack(v);
      const outs = qs.map((qi, i) => {
        const s = tf.add(tf.mul(mm(qi, tf.transpose(ks[i])), scale), mask);
        return mm(tf.softmax(s), vs[i]);
      });
      const o = tf.reshape(tf.stack(outs), [B, H, T, hd]);
      return tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [N, C]);
    }
    const split = tf.transpose(tf.reshape(qkv, [B, T, 3, H, hd]), [2, 0, 3, 1, 4]); // 3,B,H,T,hd
    const [q, k, v] = tf.unstack(split);
    const s = tf.add(tf.mul(tf.matMul(q, k, false, true), scale), mask);
    const o = tf.matMul(tf.softmax(s), v); // (B, H, T, hd)
    return tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [B, T, C]);
  }

  const loss = (x, y) => {
    const pos = mode === 'fastest' ? tf.tile(w('wpe'), [B, 1]) : w('wpe');
    const emb = embed(w('wte'), mode === 'fastest' ? tf.reshape(x, [N]) : x); // (N | B,T, C)
    let h = tf.add(emb, pos);
    for (let l = 0; l < L; l++) {
      const p = `h.${l}.`;
      const qkv = linear(rmsnorm(h, w(p + 'g1')), w(p + 'wqkv'));
      h = tf.add(h, linear(attention(qkv), w(p + 'wo')));
      const u = tf.relu(linear(rmsnorm(h, w(p + 'g2')), w(p + 'w1')));
      h = tf.add(h, linear(u, w(p + 'w2')));
    }
    const hf = rmsnorm(h, w('gf'));
    const logits = mode === 'fastest'
      ? mm(hf, tf.transpose(w('wte')))
      : tf.reshape(tf.matMul(hf, perSequence(w('wte')), false, true), [N, V]);
    return tf.losses.softmaxCrossEntropy(tf.oneHot(tf.reshape(y, [N]), V), logits);
  };
  return { loss, dispose: () => mask.dispose() };
}

/** AdamW of MODEL.md section 7 with tf ops: global-norm clip, bias correction, decoupled decay
 * on the matrices; `opt` = {lr, beta1, beta2, eps, weight_decay, clip} (constant schedule). */
function adamw(tf, vars, opt) {
  const zeros = (v) => tf.variable(tf.zeros(v.shape), false);
  const moments = new Map([...vars].map(([n, v]) => [n, { m: zeros(v), v: zeros(v) }]));
  let p1 = 1, p2 = 1;
  // `grads`: name -> gradient tensor (our names, not TF.js's variable names).
  const update = (grads) => {
    p1 *= opt.beta1;
    p2 *= opt.beta2;
    const stepSize = opt.lr / (1 - p1);
    const sbc2 = Math.sqrt(1 - p2);
    const decay = 1 - opt.lr * opt.weight_decay;
    tf.tidy(() => {
      const names = [...vars.keys()];
      const norm = tf.sqrt(tf.addN(names.map((n) => tf.sum(tf.square(grads[n])))));
      // min(1, clip / norm) without a readback: clip / max(norm, clip).
      const scale = opt.clip > 0 ? tf.div(opt.clip, tf.maximum(norm, opt.clip)) : tf.scalar(1);
      for (const n of names) {
        const g = tf.mul(grads[n], scale);
        const { m, v } = moments.get(n);
        m.assign(tf.add(tf.mul(m, opt.beta1), tf.mul(g, 1 - opt.beta1)));
        v.assign(tf.add(tf.mul(v, opt.beta2), tf.mul(tf.square(g), 1 - opt.beta2)));
        const den = tf.add(tf.div(tf.sqrt(v), sbc2), opt.eps);
        const upd = tf.mul(tf.div(m, den), stepSize);
        const wv = vars.get(n);
        wv.assign(tf.sub(decays(n) ? tf.mul(wv, decay) : wv, upd));
      }
    });
  };
  const dispose = () => moments.forEach(({ m, v }) => tf.dispose([m, v]));
  return { update, dispose };
}

const round = (v, d = 1) => Math.round(v * 10 ** d) / 10 ** d;
const median = (xs) => [...xs].sort((p, q) => p - q)[xs.length >> 1];

/**
 * Trains `cfg` (gpt.js field names) on `batches` ([{x, y}] of B*T token ids each, in order):
 * `warmup` untimed steps, then `steps` timed ones (a step: forward, gradients, AdamW, and the
 * loss read back so the work is done). Resolves to {mode, simd, threads, ...times, losses}.
 */
export async function measureTfjs(tf, { cfg, opt, batches, warmup, steps, mode, seed = 1 }) {
  if (!['out-of-the-box', 'fastest'].includes(mode)) throw new Error(`unknown mode ${mode}`);
  if (batches.length < warmup + steps) throw new Error('fewer batches than warmup + steps');
  const vars = initVariables(tf, cfg, seed);
  const model = buildLoss(tf, cfg, vars, mode);
  const optimizer = adamw(tf, vars, opt);
  const varList = [...vars.values()];
  const shape = mode === 'fastest' ? [cfg.batch * cfg.seqLen] : [cfg.batch, cfg.seqLen];
  const losses = [];
  const step = (i) => {
    const t0 = performance.now();
    const x = tf.tensor(batches[i].x, shape, 'int32');
    const y = tf.tensor(batches[i].y, shape, 'int32');
    const { value, grads } = tf.variableGrads(() => model.loss(x, y), varList);
    optimizer.update(Object.fromEntries([...vars].map(([n, v]) => [n, grads[v.name]])));
    losses.push(value.dataSync()[0]);
    tf.dispose([x, y, value, ...Object.values(grads)]);
    return performance.now() - t0;
  };
  const warmupMs = [];
  for (let i = 0; i < warmup; i++) warmupMs.push(step(i));
  const ms = [];
  for (let i = warmup; i < warmup + steps; i++) ms.push(step(i));
  const tokensPerStep = cfg.batch * cfg.seqLen;
  const params = varList.reduce((s, v) => s + v.size, 0);
  optimizer.dispose();
  model.dispose();
  tf.dispose(varList);
  return {
    mode,
    backend: tf.getBackend(),
    simd: await tf.env().getAsync('WASM_HAS_SIMD_SUPPORT'),
    multithread_support: await tf.env().getAsync('WASM_HAS_MULTITHREAD_SUPPORT'),
    params,
    warmup_ms: warmupMs.map((v) => round(v)),
    step_ms: ms.map((v) => round(v)),
    median_ms: round(median(ms)),
    tokens_per_s: round(tokensPerStep / (median(ms) / 1e3), 0),
    losses: losses.map((v) => round(v, 4)),
  };
}
