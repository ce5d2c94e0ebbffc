// `daisychain bench identity`: the JS CPU mirror under Node trains the run of CONFIG_JSON on the
// int32 token file TOKENS for STEPS steps and prints one JSON line per step {step, hash, loss}.
//
// Usage: node node_identity.mjs STATIC_DIR CONFIG_JSON TOKENS STEPS
//   CONFIG_JSON  {model: {...python field names...}, optim: {...}, seed}
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const [staticDir, configPath, tokensPath, stepsArg] = process.argv.slice(2);
if (!staticDir || !configPath || !tokensPath || !stepsArg) {
  console.error('usage: node node_identity.mjs STATIC_DIR CONFIG_JSON TOKENS STEPS');
  process.exit(2);
}
const M = await import(pathToFileURL(join(staticDir, 'js/model/index.js')).href);
const run = JSON.parse(readFileSync(configPath, 'utf8'));
const raw = readFileSync(tokensPath);
const tokens = new Int32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4);
const state = M.init(M.modelConfig(run.model), run.optim, run.seed);
for (let s = 0; s < Number(stepsArg); s++) {
  const { x, y } = M.nextBatch(state, tokens);
  const r = await M.trainStep(state, x, y);
  console.log(JSON.stringify({ step: r.step, hash: r.hash, loss: r.loss }));
}
