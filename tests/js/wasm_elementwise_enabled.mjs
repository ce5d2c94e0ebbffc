// Preload (node --import) for running other test files with both WebAssembly kernels installed:
// the SIMD GEMM (the CPU tier's integer products) and the SIMD elementwise kernel (its
// quantization and gradient limbs). tests/js/wasmelementwise.test.mjs runs the golden vectors,
// the quantizer and GEMM tests, the golden training run and the trainer through them. Not a test
// file itself. It gates and enables each kernel exactly as a page would; if a gate refuses, the
// process fails here rather than silently testing the JS path twice.
import { enableWasmGemm } from '../../static/js/numerics/wasmgate.js';
import { enableWasmElementwise } from '../../static/js/numerics/wasmeltgate.js';

const kernels = [['GEMM', enableWasmGemm], ['elementwise kernel', enableWasmElementwise]];
for (const [what, enable] of kernels) {
  const status = await enable();
  if (!status.enabled) throw new Error(`the WebAssembly ${what} was not enabled: ${status.reason}`);
  console.log(`wasm ${what} enabled: ${status.reason}`);
}
