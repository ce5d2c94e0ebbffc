// Preload (node --import) for running other test files with the WebAssembly GEMM installed as
// the CPU tier's integer kernel: tests/js/wasmgemm.test.mjs runs the golden vectors, the GEMM
// tests, the golden training run and the trainer through it. Not a test file itself. It gates
// and enables the kernel exactly as a page would; if the gate refuses, the process fails here
// rather than silently testing the JS GEMM twice.
//
// With DAISYCHAIN_WASM_THREADS=N (N > 1): a pool of N threads (helpers as worker_threads,
// tests/js/node_pool.mjs), and every kernel call split across it however small (splitMin 0),
// as the gates do: tests/js/wasmpool.test.mjs.
import { enableWasmGemm } from '../../static/js/numerics/wasmgate.js';
import { activeIntKernel } from '../../static/js/numerics/gemm.js';
import { nodeSpawn } from './node_pool.mjs';

const threads = Number(process.env.DAISYCHAIN_WASM_THREADS ?? '1');
const status = await enableWasmGemm(threads > 1 ? { threads, spawn: nodeSpawn } : {});
if (!status.enabled) throw new Error(`the WebAssembly GEMM was not enabled: ${status.reason}`);
if (status.threads !== threads) {
  throw new Error(`the WebAssembly GEMM runs on ${status.threads} threads, not ${threads}: ` +
    status.reason);
}
if (threads > 1) activeIntKernel().splitMin = 0;
console.log(`wasm GEMM enabled: ${status.reason}`);
