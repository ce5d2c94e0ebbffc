// The measurement behind `daisychain bench wasm-pool`, run as a module Worker of a page of the
// app's origin, which the server makes cross-origin isolated (bench/wasmpool.py serves this file
// under /bench/). The CPU tier's training step (gradients + AdamW, no hash; the loop of
// wasm_measure.mjs) with the WebAssembly GEMM on this thread alone (`one`) and with the same
// kernel sharing its calls with a pool of helper workers (`pool`: numerics/wasmpool.js, as many
// threads as poolSupport() allows here), the elementwise kernel installed for both, one warm-up
// each, then `steps` rounds of one step each way, interleaved, on the same stream of batches.
// Both kernels pass the gate first (the pool with every call split). Answers {ok, result} with,
// per preset, the medians, tokens/s and `ratio` = one / pool; or {ok: false, error}.
self.onmessage = async ({ data: { presets: names, vocab, steps, splitMin } }) => {
  try {
    const N = await import('/js/numerics/index.js');
    const M = await import('/js/model/index.js');
    const { loadWasmGemm } = await import('/js/numerics/wasmgemm.js');
    const { gateWasmGemm } = await import('/js/numerics/wasmgate.js');
    const { enableWasmElementwise } = await import('/js/numerics/wasmeltgate.js');
    const { poolSupport } = await import('/js/numerics/wasmpool.js');
    const support = poolSupport();
    const result = { isolated: self.crossOriginIsolated, cores: navigator.hardwareConcurrency,
      support, presets: {} };
    if (support.threads < 2) {
      self.postMessage({ ok: true, result: { ...result, skipped: support.reason } });
      return;
    }
    const kernels = { one: await loadWasmGemm(), pool: await loadWasmGemm({ threads: support.threads }) };
    for (const [side, kernel] of Object.entries(kernels)) {
      const gate = await gateWasmGemm(kernel);
      if (!gate.passed) throw new Error(`${side}: ${gate.failure}`);
    }
    result.threads = kernels.pool.threads;
    if (splitMin !== null) kernels.pool.splitMin = splitMin;
    result.split_min = kernels.pool.splitMin;
    result.elementwise = (await enableWasmElementwise()).enabled;
    const round = (v, d = 2) => Math.round(v * 10 ** d) / 10 ** d;
    const median = (xs) => [...xs].sort((p, q) => p - q)[xs.length >> 1];
    for (const name of names) {
      const cfg = M.preset(name, { vocabSize: vocab });
      const state = M.init(cfg, {}, 1);
      const tokens = new Int32Array(200_000);
      for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 7919 + 13) % vocab;
      const step = (side) => {
        N.setIntKernel(kernels[side]);
        const { x, y } = M.nextBatch(state, tokens);
        const t0 = performance.now();
        const { grads } = M.computeGrads(state, x, y);
        M.applyGrads(state, grads);
        return performance.now() - t0;
      };
      const ms = { one: [], pool: [] };
      const warmup = { one: round(step('one'), 1), pool: round(step('pool'), 1) };
      for (let r = 0; r < steps; r++) for (const side of ['one', 'pool']) ms[side].push(step(side));
      const tokensPerStep = cfg.batch * cfg.seqLen;
      const out = { warmup_ms: warmup, tokens_per_step: tokensPerStep };
      for (const side of ['one', 'pool']) {
        out[`${side}_ms`] = ms[side].map((v) => round(v, 1));
        out[`${side}_median_ms`] = round(median(ms[side]), 1);
        out[`${side}_tokens_per_s`] = round(tokensPerStep / (median(ms[side]) / 1e3), 0);
      }
      out.ratio = round(median(ms.one) / median(ms.pool), 3);
      result.presets[name] = out;
    }
    N.setIntKernel(null);
    kernels.pool.close();
    self.postMessage({ ok: true, result });
  } catch (exc) {
    self.postMessage({ ok: false, error: `${exc.name}: ${exc.message}` });
  }
};
