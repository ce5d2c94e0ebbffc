// The measurement behind `daisychain bench wasm`, environment-agnostic: node_wasm.mjs runs it
// under Node, bench/wasm.py serves it to a Chromium page of the app's origin (the same file, so
// both rows measure the same thing). The caller passes the modules it loaded:
//   measure({N, M, enableWasmGemm}, {presets, vocab, repeats, steps})
// N = static/js/numerics/index.js, M = static/js/model/index.js, enableWasmGemm from
// static/js/numerics/wasmgate.js. It gates and enables the kernel exactly as a page does, then,
// per preset, interleaved so that load on the machine hits both sides:
// - every product shape of one training step (the model's forward products and their two
//   gradient products), timed through gemm.js's public functions with the JS GEMM and with the
//   kernel installed: best of `repeats` after a warm-up, GOP/s = 2 M K N (batch included) per
//   product, the backward counted as two products (its two- or three-limb work is the kernel's
//   business, not the figure's);
// - the CPU tier's training step (computeGrads + applyGrads, no hash: node_step.mjs's loop),
//   one warm-up each, then `steps` rounds of one step each way; the median is kept.
// Resolves to {gate, presets: {name: {gemm, step}}}; with a refused kernel, no presets.

export async function measure({ N, M, enableWasmGemm }, { presets: names, vocab, repeats, steps }) {
  const gate = await enableWasmGemm();
  if (!gate.enabled) return { gate, presets: {} };
  const kernel = N.activeIntKernel();
  const use = (on) => N.setIntKernel(on ? kernel : null);

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
    // Training steps, both ways on the same stream of batches (the state advances each step;
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
    const warmup = { js: step(false), wasm: step(true) };
    const ms = { js: [], wasm: [] };
    for (let r = 0; r < steps; r++) {
      ms.js.push(step(false));
      ms.wasm.push(step(true));
    }
    const tokensPerStep = cfg.batch * cfg.seqLen;
    presets[name] = {
      gemm,
      step: {
        warmup_ms: { js: round(warmup.js, 1), wasm: round(warmup.wasm, 1) },
        js_ms: ms.js.map((v) => round(v, 1)),
        wasm_ms: ms.wasm.map((v) => round(v, 1)),
        js_median_ms: round(median(ms.js), 1),
        wasm_median_ms: round(median(ms.wasm), 1),
        ratio: round(median(ms.js) / median(ms.wasm), 3),
        tokens_per_step: tokensPerStep,
        js_tokens_per_s: round(tokensPerStep / (median(ms.js) / 1e3), 0),
        wasm_tokens_per_s: round(tokensPerStep / (median(ms.wasm) / 1e3), 0),
      },
    };
  }
  use(true);
  return { gate, presets };
}
