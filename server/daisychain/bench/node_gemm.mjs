// Int8 GEMM throughput of the JS CPU mirror under Node, for `daisychain bench kernels`.
//
// Usage: node node_gemm.mjs STATIC_DIR SHAPES_JSON REPEATS
//   STATIC_DIR   the asset folder static/ (daisychain.assets.asset_dir("static")): in a wheel it
//                lives under daisychain/_assets/, so the bench passes it rather than guessing
//   SHAPES_JSON  [[name, M, K, N], ...]
// Prints one JSON line {node, shapes: {name: gops}}: the same CpuGemm.matmulInt and the same
// measureGops (best of REPEATS after a warm-up, 2*M*K*N operations) the Chromium page times, so
// the Node and Chromium rows differ only in the JavaScript engine around them.
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

const [staticDir, shapesJson, repeatsArg] = process.argv.slice(2);
if (!staticDir || !shapesJson) {
  console.error('usage: node node_gemm.mjs STATIC_DIR SHAPES_JSON [REPEATS]');
  process.exit(2);
}
const load = (rel) => import(pathToFileURL(join(staticDir, rel)).href);
const { CpuGemm } = await load('js/gpu/gemm.js');
const { measureGops } = await load('js/gpu/backend.js');

const repeats = Number(repeatsArg ?? 1);
const gemm = new CpuGemm();
const shapes = {};
for (const [name, m, k, n] of JSON.parse(shapesJson)) {
  shapes[name] = await measureGops(gemm, [m, k, n], repeats);
}
console.log(JSON.stringify({ node: process.version, shapes }));
