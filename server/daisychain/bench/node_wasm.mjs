// The WebAssembly SIMD GEMM against the JS GEMM under Node, for `daisychain bench wasm`.
//
// Usage: node node_wasm.mjs STATIC_DIR PRESETS VOCAB REPEATS STEPS
//   STATIC_DIR  the asset folder static/ (daisychain.assets.asset_dir("static"))
//   PRESETS     comma-separated model presets (tiny,small)
// Runs wasm_measure.mjs (what is measured, and how) on the modules of STATIC_DIR and prints one
// JSON line {node, gate, presets}.
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { measure } from './wasm_measure.mjs';

const [staticDir, presetsArg, vocabArg, repeatsArg, stepsArg] = process.argv.slice(2);
if (!staticDir || !presetsArg) {
  console.error('usage: node node_wasm.mjs STATIC_DIR PRESETS VOCAB REPEATS STEPS');
  process.exit(2);
}
const load = (rel) => import(pathToFileURL(join(staticDir, rel)).href);
const modules = {
  N: await load('js/numerics/index.js'),
  M: await load('js/model/index.js'),
  enableWasmGemm: (await load('js/numerics/wasmgate.js')).enableWasmGemm,
  enableWasmElementwise: (await load('js/numerics/wasmeltgate.js')).enableWasmElementwise,
};
const result = await measure(modules, {
  presets: presetsArg.split(','),
  vocab: Number(vocabArg ?? 2048),
  repeats: Math.max(1, Number(repeatsArg ?? 5)),
  steps: Math.max(1, Number(stepsArg ?? 3)),
});
console.log(JSON.stringify({ node: process.version, ...result }));
