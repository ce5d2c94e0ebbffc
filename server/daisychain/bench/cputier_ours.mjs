// Our side of `daisychain bench cpu-tier`: the browser CPU tier's training step (the JS mirror
// with its WebAssembly SIMD int8 GEMM, and its WebAssembly elementwise kernel where this build
// has one, gated and installed as the page's training worker does at start: train/trainer.js),
// timed step by step on the batches the bench hands in, then the state hash.
// Environment-agnostic: cputier_node.mjs runs it under Node, bench/_cputier_chromium.py in a page
// of the real app (its CSP and cross-origin isolation included). The caller passes the modules
// it loaded: M = static/js/model/index.js, enableWasmGemm from static/js/numerics/wasmgate.js,
// enableWasmElementwise from static/js/numerics/wasmeltgate.js (null where the file is absent).
//
// measureOurs({M, enableWasmGemm, enableWasmElementwise}, {preset, vocab, batches: [{x, y}],
// warmup, steps}):
// `warmup` untimed steps, then `steps` timed ones (computeGrads + applyGrads, no hash: the loop a
// peer runs between hashes), seed 1 and default AdamW as the reference run the bench compares
// the hash with. Resolves to {gate, ...times, losses, hash} or {gate, refused} when the kernel
// is refused (a page would then train on the JS GEMM, which is not what this bench measures).

export async function measureOurs(
  { M, enableWasmGemm, enableWasmElementwise = null },
  { preset, vocab, batches, warmup, steps },
) {
  const gate = await enableWasmGemm();
  if (!gate.enabled) return { gate, refused: `the WebAssembly GEMM was refused: ${gate.reason}` };
  // A refused elementwise kernel leaves the JS quantizers, as in the page (same bits).
  const elementwise = enableWasmElementwise ? await enableWasmElementwise() : null;
  if (batches.length < warmup + steps) throw new Error('fewer batches than warmup + steps');
  const cfg = M.preset(preset, { vocabSize: vocab });
  const state = M.init(cfg, {}, 1);
  const losses = [];
  const step = (i) => {
    const x = Int32Array.from(batches[i].x);
    const y = Int32Array.from(batches[i].y);
    const t0 = performance.now();
    const { loss, grads } = M.computeGrads(state, x, y);
    M.applyGrads(state, grads);
    const ms = performance.now() - t0;
    losses.push(loss);
    return ms;
  };
  const round = (v, d = 1) => Math.round(v * 10 ** d) / 10 ** d;
  const median = (xs) => [...xs].sort((p, q) => p - q)[xs.length >> 1];
  const warmupMs = [];
  for (let i = 0; i < warmup; i++) warmupMs.push(step(i));
  const ms = [];
  for (let i = warmup; i < warmup + steps; i++) ms.push(step(i));
  const tokensPerStep = cfg.batch * cfg.seqLen;
  return {
    gate,
    elementwise,
    threads: 1, // the CPU tier computes on the calling thread (one worker in the page)
    cross_origin_isolated: globalThis.crossOriginIsolated ?? null,
    warmup_ms: warmupMs.map((v) => round(v)),
    step_ms: ms.map((v) => round(v)),
    median_ms: round(median(ms)),
    tokens_per_s: round(tokensPerStep / (median(ms) / 1e3), 0),
    losses: losses.map((v) => round(v, 4)),
    steps_trained: M.stepOf(state),
    hash: await M.stateHash(state),
  };
}
