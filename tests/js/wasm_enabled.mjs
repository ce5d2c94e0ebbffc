// Preload (node --import) for running other test files with the WebAssembly GEMM installed as
// the CPU tier's integer kernel: tests/js/wasmgemm.test.mjs runs the golden vectors, the GEMM
// tests, the golden training run and the trainer through it. Not a test file itself. It gates
// and enables the kernel exactly as a page would; if the gate refuses, the process fails here
// rather than silently testing the JS GEMM twice.
import { enableWasmGemm } from '../../static/js/numerics/wasmgate.js';

const status = await enableWasmGemm();
if (!status.enabled) throw new Error(`the WebAssembly GEMM was not enabled: ${status.reason}`);
console.log(`wasm GEMM enabled: ${status.reason}`);
