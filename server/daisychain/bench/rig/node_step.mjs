// Training step time of the JS CPU mirror under Node, for `daisychain bench kernels`.
//
// Usage: node node_step.mjs STATIC_DIR PRESET VOCAB MAX_STEPS BUDGET_S SLOW_S
//   STATIC_DIR  the asset folder static/ (daisychain.assets.asset_dir("static"))
// Trains PRESET (vocabulary VOCAB, seed 1, default AdamW) on the bench's synthetic token stream
// (token i = (7919 i + 13) mod VOCAB, the stream of server/daisychain/bench/_steps.py), one
// warm-up step, then up to MAX_STEPS timed steps, stopping early once BUDGET_S seconds of timed
// steps have passed; when the warm-up alone took more than SLOW_S seconds no step is timed.
// A step is forwardBackward + applyGrads, no state hash: the loop a peer runs between hashes.
// Prints one JSON line {node, warmup_ms, step_ms: [...]}.
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const [staticDir, presetName, vocabArg, maxArg, budgetArg, slowArg] = process.argv.slice(2);
if (!staticDir || !presetName) {
  console.error('usage: node node_step.mjs STATIC_DIR PRESET VOCAB MAX_STEPS BUDGET_S SLOW_S');
  process.exit(2);
}
const M = await import(pathToFileURL(join(staticDir, 'js/model/index.js')).href);

const vocab = Number(vocabArg);
const cfg = M.preset(presetName, { vocabSize: vocab });
const state = M.init(cfg, {}, 1);
const tokens = new Int32Array(200_000);
for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 7919 + 13) % vocab;

function step() {
  const { x, y } = M.nextBatch(state, tokens);
  const { grads } = M.computeGrads(state, x, y);
  M.applyGrads(state, grads);
}

let t0 = performance.now();
step();
const warmupMs = performance.now() - t0;
const stepMs = [];
if (warmupMs <= Number(slowArg) * 1e3) {
  let spent = 0;
  while (stepMs.length < Number(maxArg) && spent < Number(budgetArg) * 1e3) {
    t0 = performance.now();
    step();
    stepMs.push(performance.now() - t0);
    spent += stepMs.at(-1);
  }
}
console.log(JSON.stringify({ node: process.version, warmup_ms: warmupMs, step_ms: stepMs }));
