// Our side of `daisychain bench cpu-tier` under Node (cputier_ours.mjs says what is measured).
//
// Usage: node cputier_node.mjs STATIC_DIR JOB_JSON
//   STATIC_DIR  the asset folder static/ (daisychain.assets.asset_dir("static"))
//   JOB_JSON    a file {preset, vocab, batches: [{x, y}], warmup, steps}
// Prints one JSON line {node, ...measureOurs's result}.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { measureOurs } from './cputier_ours.mjs';

const [staticDir, jobPath] = process.argv.slice(2);
if (!staticDir || !jobPath) {
  console.error('usage: node cputier_node.mjs STATIC_DIR JOB_JSON');
  process.exit(2);
}
const load = (rel) => import(pathToFileURL(join(staticDir, rel)).href);
const optional = (rel) => (existsSync(join(staticDir, rel)) ? load(rel) : Promise.resolve({}));
const modules = {
  M: await load('js/model/index.js'),
  enableWasmGemm: (await load('js/numerics/wasmgate.js')).enableWasmGemm,
  enableWasmElementwise:
    (await optional('js/numerics/wasmeltgate.js')).enableWasmElementwise ?? null,
};
const result = await measureOurs(modules, JSON.parse(readFileSync(jobPath, 'utf8')));
console.log(JSON.stringify({ node: process.version, ...result }));
