// The contract's block quantization and the per-token cross-entropy in WebAssembly SIMD: the
// driver of kernels/elementwise_f32.wat (docs/KERNELS.md, "WebAssembly SIMD elementwise
// kernel"; built into static/wasm/elementwise_f32.wasm by `python tests/wasm_build.py`).
//
// quant.js's quantizers and gemm.js's gradient operands (fold + two- or three-limb split) hand
// their float32 blocks to `quantize` while this kernel is installed (quant.js setQuantKernel).
// The module computes the block maxima, the fold and the int8 limbs; what decides a block's
// exponent, and refuses a diverged run, stays in quant.js (`blockExponents`), the same code on
// every path, so the exponents, the errors and their messages cannot differ. Only shapes whose
// blocks run along rows of a multiple of 4 floats are taken (`accepts`): anything else stays on
// the JS path, which computes the same bits.
//
// xent.js's crossEntropy hands its rows to `crossEntropy` while this kernel is installed
// (setCrossEntropyKernel): the module computes each row's maximum, exp, pinned sum and the
// dlogits; the N logs (fmath.js) and the mean stay in JS.
//
// It is used only through wasmeltgate.js, which gates it against the JS mirror before installing.

import { blockExponents } from './quant.js';
import { log } from './fmath.js';
import { nextPow2 } from './reduce.js';
import { wasmBytes } from './wasmgemm.js';

export const WASM_URL = new URL('../../wasm/elementwise_f32.wasm', import.meta.url);
const PAGE = 65536;
// The gate's poison: read as float32 a large POSITIVE value (6.3e18), so a maximum that starts
// from memory's old contents instead of +0 shows (0xDEADBEEF is negative and would hide it).
const POISON = 0x5eadbeef;
const EXPORTS = ['memory', 'absmax_rows', 'absmax_cols', 'pow2_table', 'scale', 'quantize',
  'xent_rows', 'xent_grad'];
const TABLES = 5; // 2^-e | 2^e | 2^(8-e) | 2^(e-8) | 2^(16-e) per block (elementwise_f32.wat)

/** Compiles and instantiates the kernel from `bytes` (default: WASM_URL's). */
export async function loadWasmElementwise({ bytes = null, url = WASM_URL } = {}) {
  if (typeof WebAssembly !== 'object') throw new Error('this JavaScript engine has no WebAssembly');
  const code = bytes ?? (await wasmBytes(url));
  if (!WebAssembly.validate(code)) {
    throw new Error('the WebAssembly elementwise kernel does not validate here: this engine ' +
      'lacks fixed-width SIMD (Chrome 91+, Firefox 89+, Safari 16.4+, Node 16.4+), or the ' +
      'binary is damaged');
  }
  const { instance } = await WebAssembly.instantiate(code, {});
  return new WasmElementwise(instance);
}

const align16 = (n) => (n + 15) & ~15;

/** One instance of the kernel with its memory; not shareable between threads. */
export class WasmElementwise {
  constructor(instance) {
    for (const name of EXPORTS) {
      if (!(name in instance.exports)) {
        throw new Error(`the WebAssembly elementwise module lacks its export ${name}`);
      }
    }
    this.exports = instance.exports;
    this.memory = instance.exports.memory;
    this.calls = 0; // quantizations done, for tests and benchmarks
    this.xentCalls = 0; // cross-entropies done, likewise
    this.buffer = null;
  }

  get name() {
    return 'wasm-simd-elementwise';
  }

  reserve(n) {
    const have = this.memory.buffer.byteLength;
    if (n > have) this.memory.grow(Math.ceil((n - have) / PAGE));
    this.buffer = this.memory.buffer;
  }

  /** Fills the whole memory with POISON: a kernel that relies on zeroed memory shows it. */
  poison() {
    new Int32Array(this.memory.buffer).fill(POISON | 0);
  }

  /** Whether blocks of this shape run here: rows of a multiple of 4 floats (v128 lanes). */
  accepts(cols) {
    return cols > 0 && cols % 4 === 0;
  }

  /**
   * The limbs of `batch` stacked (rows x cols) float32 matrices `x`, blocks along rows
   * (`byRows`: one block per row, quant.js quantize*Rows) or along columns (one per column of
   * each matrix, quantize*Cols), `limbs` = 1, 2 or 3. `out` supplies the arrays {hi, mid, lo, e}
   * (hi always; mid with 2 or 3 limbs, the second limb; lo with 3, the third). `fold`, if given,
   * multiplies x by 2^fold.e first, per column ({byRows: false}) or per row ({byRows: true}) of
   * each matrix, the exponents shared by the batch when there are only cols (rows) of them:
   * gemm.js's foldColumns / foldRows, in front of the quantizer. Throws quant.js's
   * QuantizationError where quant.js would.
   */
  quantize(x, batch, rows, cols, byRows, limbs, out, fold = null) {
    const n = batch * rows * cols;
    const blocks = byRows ? batch * rows : batch * cols;
    const w = byRows ? 16 : 4; // bytes per block in a table: splat for row blocks
    const foldN = fold ? fold.e.length : 0;
    const foldW = fold && fold.byRows ? 16 : 4;
    // Memory: [x | maxima | exponents | tables | fold tables | hi | mid | lo]
    const X = 0;
    const AMAX = align16(X + 4 * n);
    const E = align16(AMAX + 4 * blocks);
    const TAB = align16(E + 4 * Math.max(blocks, foldN));
    const FTAB = align16(TAB + TABLES * w * blocks);
    const HI = align16(FTAB + TABLES * foldW * foldN);
    const MID = align16(HI + n);
    const LO = align16(MID + n);
    this.reserve(LO + n);
    const buf = this.buffer;
    const ex = this.exports;
    new Float32Array(buf, X, n).set(x);
    if (fold) {
      new Int32Array(buf, E, foldN).set(fold.e);
      ex.pow2_table(E, foldN, FTAB, foldW * foldN, fold.byRows ? 1 : 0);
      const per = fold.byRows ? rows : cols; // exponents of one matrix
      const bs = foldN === per ? 0 : per * foldW;
      const s = FTAB + foldW * foldN; // the 2^e table
      if (fold.byRows) ex.scale(X, batch, rows, cols, s, bs, 16, 0);
      else ex.scale(X, batch, rows, cols, s, bs, 0, 16);
    }
    if (byRows) ex.absmax_rows(X, batch * rows, cols, AMAX);
    else ex.absmax_cols(X, batch, rows, cols, AMAX);
    const e = out.e ?? new Int32Array(blocks);
    blockExponents(new Float32Array(buf, AMAX, blocks), e);
    new Int32Array(buf, E, blocks).set(e);
    ex.pow2_table(E, blocks, TAB, w * blocks, byRows ? 1 : 0);
    // scales per (b, r, 4-column chunk): row blocks step 16 bytes a row, column blocks 16 a chunk
    const ts = w * blocks;
    if (byRows) ex.quantize(X, 1, batch * rows, cols, TAB, ts, 0, 16, 0, HI, MID, LO, limbs);
    else ex.quantize(X, batch, rows, cols, TAB, ts, 4 * cols, 0, 16, HI, MID, LO, limbs);
    // {hi, mid, lo, e} in quant.js's key order (the gate compares the outputs in order)
    // (a fresh array is sliced off the memory: about 3x faster in V8 than allocating one and
    // copying into it, whose first touch of fresh pages dominates)
    const limb = (name, at) => {
      if (!out[name]) return new Int8Array(buf.slice(at, at + n));
      out[name].set(new Int8Array(buf, at, n));
      return out[name];
    };
    const result = { hi: limb('hi', HI) };
    if (limbs > 1) result.mid = limb('mid', MID);
    if (limbs > 2) result.lo = limb('lo', LO);
    result.e = e;
    this.calls += 1;
    return result;
  }

  /**
   * The rows of xent.js's crossEntropy: N rows of V float32 logits (`logits`, row-major) become
   * their dlogits in place and lossT[n] = log(s_n) - z_n[y[n]], the JS loop's bits. `y` holds
   * N ids in [0, V) (xent.js checks them). Any V: rows are laid out 4-aligned, padded with
   * -inf (never a maximum; its exp is never read).
   */
  crossEntropy(logits, y, N, V, lossT) {
    const cols = (V + 3) & ~3;
    // Memory: [rows (N x cols) | targets | sums | z at the targets | tree-sum work]
    const X = 0;
    const Y = align16(X + 4 * N * cols);
    const S = align16(Y + 4 * N);
    const Z = align16(S + 4 * N);
    const W = align16(Z + 4 * N);
    this.reserve(W + 4 * Math.max(4, nextPow2(V) / 2));
    const buf = this.buffer;
    const ex = this.exports;
    const x = new Float32Array(buf, X, N * cols);
    if (cols === V) {
      x.set(logits);
    } else {
      for (let n = 0; n < N; n++) {
        x.set(logits.subarray(n * V, (n + 1) * V), n * cols);
        x.fill(-Infinity, n * cols + V, (n + 1) * cols);
      }
    }
    new Int32Array(buf, Y, N).set(y);
    ex.xent_rows(X, N, cols, V, Y, W, S, Z);
    const sums = new Float32Array(buf, S, N);
    const zy = new Float32Array(buf, Z, N);
    for (let n = 0; n < N; n++) lossT[n] = log(sums[n]) - zy[n];
    ex.xent_grad(X, N, cols, Y, S, Math.fround(N));
    if (cols === V) {
      logits.set(x);
    } else {
      for (let n = 0; n < N; n++) logits.set(x.subarray(n * cols, n * cols + V), n * V);
    }
    this.xentCalls += 1;
  }
}
