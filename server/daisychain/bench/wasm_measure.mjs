// The measurement behind `daisychain bench wasm`, environment-agnostic: node_wasm.mjs runs it
// under Node, bench/wasm.py serves it to a Chromium page of the app's origin (the same file, so
// both rows measure the same thing). The caller passes the modules it loaded:
//   measure({N, M, enableWasmGemm, enableWasmElementwise}, {presets, vocab, repeats, steps})
// N = static/js/numerics/index.js, M = static/js/model/index.js, enableWasmGemm from
// static/js/numerics/wasmgate.js, enableWasmElementwise (optional) from wasmeltgate.js. It gates
// and enables the kernels exactly as a page does, then, per preset, interleaved so that load on
// the machine hits every side:
// - every product shape of one training step (the model's forward products and their two
//   gradient products), timed through gemm.js's public functions with the JS GEMM and with the
//   kernel installed: best of `repeats` after a warm-up, GOP/s = 2 M K N (batch included) per
//   product, the backward counted as two products (its two- or three-limb work is the kernel's
//   business, not the figure's);
// - the quantizers of one step's largest operands (`quant`), timed like the products with the JS
//   loops and with the elementwise kernel (both with the wasm GEMM installed, which they do not
//   use): activations per row, a weight per column, the logits gradient in three limbs (fold
//   included), a weight gradient in two; and one step's cross-entropy (`xent`, numerics/xent.js:
//   the (B T) x V logits to dlogits and the loss), JS loop against the kernel;
// - the CPU tier's training step (computeGrads + applyGrads, no hash: node_step.mjs's loop) with
//   the JS GEMM, with the wasm GEMM, with the wasm GEMM and the elementwise kernel's
//   quantization but the JS cross-entropy, and with all of the elementwise kernel (`js`, `wasm`,
//   `wasm_quant`, `wasm_elt`), one warm-up each, then `steps` rounds of one step each way; the
//   median is kept. `ratio` = js / wasm (the GEMM's gain), `elementwise_ratio` = wasm /
//   wasm_elt (the elementwise kernel's), `xent_ratio` = wasm_quant / wasm_elt (its
//   cross-entropy's), `total_ratio` = js / wasm_elt.
// Resolves to {gate, elementwise_gate, presets: {name: {gemm, quant, xent, step}}}; with a
// refused GEMM, no presets; with a refused (or absent) elementwise kernel, no `quant`, no `xent`,
// no `wasm_quant` and no `wasm_elt`.

export async function measure(modules, { presets: names, vocab, repeats, steps }) {
  const { N, M, enableWasmGemm, enableWasmElementwise } = modules;
  const gate = await enableWasmGemm();
  if (!gate.enabled) return { gate, presets: {} };
  const kernel = N.activeIntKernel();
  const eltGate = enableWasmElementwise ? await enableWasmElementwise() : null;
  const elt = eltGate?.enabled ? N.activeQuantKernel() : null;
  // on: false (all JS), true (wasm GEMM), 'quant' (+ wasm quantization), 'elt' (+ wasm
  // cross-entropy). The cross-entropy slot is absent from a numerics/index.js that predates it.
  const use = (on) => {
    N.setIntKernel(on ? kernel : null);
    N.setQuantKernel(on === 'elt' || on === 'quant' ? elt : null);
    N.setCrossEntropyKernel?.(on === 'elt' ? elt : null);
  };

  // Timing operands from the contract PRNG (never part of the contract).
  let stream = 0;
  const rand = (n, scale) =>
    N.uniform(N.key(0x7157, 9, stream++), n).map((v) => (v - 0.5) * scale);

  // One product shape: forward y = a @ b (a per row, b per column, b stored transposed when
  // transB), backward dA = dY @ B^T and dB = A^T @ dY on the forward operands as stored.
  function product({ batch, m, k, n, transB }) {
    const a = N.quantizeRows(rand(batch * m * k, 2), batch * m, k);
    const w = rand(batch * k * n, 0.1);
    const b = N.quantizeCols(w, k, n, {}, batch);
    const bq = transB ? transposeEach(b.q, batch, k, n) : b.q;
    const dy = rand(batch * m * n, 1e-3);
    const out = new Float32Array(batch * m * n);
    return {
      forward: () => N.qmatmul(a.q, a.e, bq, b.e, m, k, n, { transB, batch, out }),
      backward: () => {
        N.gradMatmulLeft(dy, b.e, b.q, m, n, k, { transB: true, batch });
        N.gradMatmulRight(a.q, a.e, dy, k, m, n, { transA: true, batch });
      },
    };
  }

  function transposeEach(x, batch, R, C) {
    const out = new Int8Array(x.length);
    for (let t = 0; t < batch; t++) {
      for (let r = 0; r < R; r++) {
        for (let c = 0; c < C; c++) out[t * R * C + c * R + r] = x[t * R * C + r * C + c];
      }
    }
    return out;
  }

  // The product shapes of one training step of `cfg` (gpt.js): name -> {batch, m, k, n, transB}.
  function shapes(cfg) {
    const { batch: B, seqLen: T, width: C, heads: H, vocabSize: V } = cfg;
    const Nt = B * T;
    const F = cfg.mlpMult * C;
    const hd = C / H;
    return {
      qkv: { batch: 1, m: Nt, k: C, n: 3 * C, transB: false },
      attn_scores: { batch: B * H, m: T, k: hd, n: T, transB: true },
      attn_values: { batch: B * H, m: T, k: T, n: hd, transB: false },
      attn_out: { batch: 1, m: Nt, k: C, n: C, transB: false },
      mlp_up: { batch: 1, m: Nt, k: C, n: F, transB: false },
      mlp_down: { batch: 1, m: Nt, k: F, n: C, transB: false },
      logits: { batch: 1, m: Nt, k: C, n: V, transB: true },
    };
  }

  function best(fn, on) {
    use(on);
    fn();
    let t = Infinity;
    for (let r = 0; r < repeats; r++) {
      const t0 = performance.now();
      fn();
      t = Math.min(t, performance.now() - t0);
    }
    return t;
  }

  const round = (v, d = 2) => Math.round(v * 10 ** d) / 10 ** d;
  const median = (xs) => [...xs].sort((p, q) => p - q)[xs.length >> 1];

  const presets = {};
  for (const name of names) {
    const cfg = M.preset(name, { vocabSize: vocab });
    const gemm = {};
    for (const [shapeName, s] of Object.entries(shapes(cfg))) {
      const p = product(s);
      const ops = 2 * s.batch * s.m * s.k * s.n;
      const times = { js: { forward: Infinity, backward: Infinity },
        wasm: { forward: Infinity, backward: Infinity } };
      for (let pass = 0; pass < 2; pass++) {
        for (const side of ['js', 'wasm']) {
          for (const part of ['forward', 'backward']) {
            times[side][part] = Math.min(times[side][part], best(p[part], side === 'wasm'));
          }
        }
      }
      const gops = (ms, k) => (k * ops) / (ms * 1e6);
      gemm[shapeName] = {
        shape: [s.batch, s.m, s.k, s.n],
        forward_js_gops: round(gops(times.js.forward, 1)),
        forward_wasm_gops: round(gops(times.wasm.forward, 1)),
        forward_ratio: round(times.js.forward / times.wasm.forward, 3),
        backward_js_gops: round(gops(times.js.backward, 2)),
        backward_wasm_gops: round(gops(times.wasm.backward, 2)),
        backward_ratio: round(times.js.backward / times.wasm.backward, 3),
      };
    }
    const quant = elt ? quantizers(cfg) : undefined;
    const xent = elt && N.setCrossEntropyKernel ? crossEntropy(cfg) : undefined;
    // Training steps, every way on the same stream of batches (the state advances each step;
    // the time of a step does not depend on its values).
    const state = M.init(cfg, {}, 1);
    const tokens = new Int32Array(200_000);
    for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 7919 + 13) % vocab;
    const step = (on) => {
      use(on);
      const { x, y } = M.nextBatch(state, tokens);
      const t0 = performance.now();
      const { grads } = M.computeGrads(state, x, y);
      M.applyGrads(state, grads);
      return performance.now() - t0;
    };
    const sides = { js: false, wasm: true,
      ...(elt ? { wasm_quant: 'quant', wasm_elt: 'elt' } : {}) };
    const warmup = {};
    const ms = {};
    for (const [side, on] of Object.entries(sides)) {
      warmup[side] = round(step(on), 1);
      ms[side] = [];
    }
    for (let r = 0; r < steps; r++) {
      for (const [side, on] of Object.entries(sides)) ms[side].push(step(on));
    }
    const tokensPerStep = cfg.batch * cfg.seqLen;
    const stepResult = { warmup_ms: warmup, tokens_per_step: tokensPerStep };
    for (const side of Object.keys(sides)) {
      stepResult[`${side}_ms`] = ms[side].map((v) => round(v, 1));
      stepResult[`${side}_median_ms`] = round(median(ms[side]), 1);
      stepResult[`${side}_tokens_per_s`] = round(tokensPerStep / (median(ms[side]) / 1e3), 0);
    }
    stepResult.ratio = round(median(ms.js) / median(ms.wasm), 3);
    if (elt) {
      stepResult.elementwise_ratio = round(median(ms.wasm) / median(ms.wasm_elt), 3);
      stepResult.xent_ratio = round(median(ms.wasm_quant) / median(ms.wasm_elt), 3);
      stepResult.total_ratio = round(median(ms.js) / median(ms.wasm_elt), 3);
    }
    presets[name] = { gemm, ...(quant ? { quant } : {}), ...(xent ? { xent } : {}),
      step: stepResult };
  }
  use(elt ? 'elt' : true);
  return { gate, elementwise_gate: eltGate, presets };

  // The quantizers of one step's largest operands, JS loops against the kernel (best of
  // `repeats`, interleaved): ms each and ratio = JS / wasm.
  function quantizers(cfg) {
    const { batch: B, seqLen: T, width: C, vocabSize: V } = cfg;
    const Nt = B * T;
    const x = rand(Nt * C, 4);
    const w = rand(C * 3 * C, 0.1);
    const dl = rand(Nt * V, 1e-4);
    const fold = new Int32Array(V).fill(-6);
    const dw = rand(Nt * C, 1e-3);
    const foldRows = new Int32Array(Nt).fill(-5);
    const ops = {
      [`quantizeRows ${Nt}x${C}`]: () => N.quantizeRows(x, Nt, C),
      [`quantizeCols ${C}x${3 * C}`]: () => N.quantizeCols(w, C, 3 * C),
      [`gradLeftLimbs 3 limbs ${Nt}x${V}`]: () => N.gradLeftLimbs(dl, fold, Nt, V, 1, 3),
      [`gradRightLimbs 2 limbs ${Nt}x${C}`]: () => N.gradRightLimbs(dw, foldRows, Nt, C, 1, 2),
    };
    const out = {};
    for (const [opName, fn] of Object.entries(ops)) {
      const t = { js: Infinity, wasm: Infinity };
      for (let pass = 0; pass < 2; pass++) {
        t.js = Math.min(t.js, best(fn, true));
        t.wasm = Math.min(t.wasm, best(fn, 'elt'));
      }
      out[opName] = { js_ms: round(t.js, 3), wasm_ms: round(t.wasm, 3),
        ratio: round(t.js / t.wasm, 3) };
    }
    return out;
  }

  // One step's cross-entropy, (B T) x V logits of the spread a fresh model gives, JS loop
  // against the kernel (best of `repeats`, interleaved; a fresh copy of the logits each call).
  function crossEntropy(cfg) {
    const Nt = cfg.batch * cfg.seqLen;
    const V = cfg.vocabSize;
    const logits = rand(Nt * V, 8);
    const y = Int32Array.from(N.bits(N.key(0x7157, 10, 0), Nt), (v) => v % V);
    const work = new Float32Array(Nt * V);
    const lossT = new Float32Array(Nt);
    const fn = () => {
      work.set(logits);
      N.crossEntropy(work, y, Nt, V, lossT);
    };
    const t = { js: Infinity, wasm: Infinity };
    for (let pass = 0; pass < 2; pass++) {
      t.js = Math.min(t.js, best(fn, 'quant'));
      t.wasm = Math.min(t.wasm, best(fn, 'elt'));
    }
    return { shape: [Nt, V], js_ms: round(t.js, 3), wasm_ms: round(t.wasm, 3),
      ratio: round(t.js / t.wasm, 3) };
  }
}
