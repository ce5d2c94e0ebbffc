// The TF.js side of `daisychain bench cpu-tier` under Node (tfjs_gpt.mjs says what is measured).
//
// Usage: node tfjs_node.mjs STATIC_DIR JOB_JSON
//   STATIC_DIR  unused (the bench's Node scripts all take it first; see bench/rig/steps.run_node)
//   JOB_JSON    a file {tfjs_dir, cfg, opt, batches: [{x, y}], warmup, steps, mode}; tfjs_dir
//               holds node_modules/@tensorflow/tfjs{,-backend-wasm} 4.22 (the bench's cache)
// Sets the wasm backend (SIMD and threads as TF.js detects them here) and prints one JSON line
// {node, tfjs, ...measureTfjs's result}.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { measureTfjs } from './tfjs_gpt.mjs';

const [, jobPath] = process.argv.slice(2);
if (!jobPath) {
  console.error('usage: node tfjs_node.mjs STATIC_DIR JOB_JSON');
  process.exit(2);
}
const job = JSON.parse(readFileSync(jobPath, 'utf8'));
// Resolve TF.js from the cache folder, not from this file's location (nothing is installed next
// to the repository).
const require = createRequire(join(job.tfjs_dir, 'package.json'));
const tf = require('@tensorflow/tfjs');
const wasm = require('@tensorflow/tfjs-backend-wasm');
if (!(await tf.setBackend('wasm'))) throw new Error('TF.js could not start its wasm backend');
await tf.ready();
const result = await measureTfjs(tf, job);
console.log(JSON.stringify({
  node: process.version, tfjs: tf.version.tfjs, threads: wasm.getThreadsCount(), ...result }));
