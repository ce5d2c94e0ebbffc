// Float32 arithmetic in integer instructions on WebGPU (kernels/softfloat.wgsl; docs/KERNELS.md
// "Float32 in integers"): its gate in the browser, test-only like tests/softfloat_gate.py (the
// chains' own gates exercise the library on each device at start). Mirrors
// server/daisychain/gpu/softfloat.py and tests/softfloat_gate.py.
//
// WGSL's own f32 may fuse, reassociate and flush subnormals, so a GPU epilogue that must give the
// contract's bits computes on float32 bit patterns with u32/i32 instructions. `GpuSoftFloat.apply`
// runs one operation per element through the file's gate entry point; `runSoftFloatGate` compares
// it with this page's own float32 arithmetic (Math.fround after every + - * / sqrt is correctly
// rounded: a double holds the exact result to well past twice float32's precision, so rounding
// it once more to float32 gives the correctly rounded float32) and the contract's exp and log
// (numerics/fmath.js), bit for bit, every NaN as the one canonical NaN.

import { compileKernel } from '../../static/js/gpu/kernels.js';
import { BufferPool } from '../../static/js/gpu/pool.js';
import { exp, f32, f32Bits, fromBits, log, rint } from '../../static/js/numerics/fmath.js';

export const SOFTFLOAT_OPS = Object.freeze({
  add: 0, sub: 1, mul: 2, div: 3, sqrt: 4, exp: 5, log: 6, rint: 7,
});
export const UNARY_OPS = Object.freeze(new Set(['sqrt', 'exp', 'log', 'rint']));
export const CANONICAL_NAN = 0x7fc00000;
const WG = 64;
const MAX_PER_DISPATCH = 65535 * WG;

/** One float32 operation per element, computed by softfloat.wgsl's integer arithmetic. */
export class GpuSoftFloat {
  /** Compiles kernels/softfloat.wgsl (or `source`, as the planted-bug tests do). */
  static async create(gpu, { source } = {}) {
    const kernel = await compileKernel(gpu, 'softfloat', ['uniform', 'read', 'read', 'write'], {
      source,
      constants: { WG },
    });
    return new GpuSoftFloat(gpu, kernel);
  }

  constructor(gpu, kernel) {
    this.gpu = gpu;
    this.kernel = kernel;
    this.pool = new BufferPool(gpu);
    this.name = 'webgpu-softfloat';
  }

  /** `op` on float32 bit patterns (Uint32Array), element by element; a new Uint32Array. */
  async apply(op, a, b = null) {
    if (!(op in SOFTFLOAT_OPS)) {
      throw new Error(`unknown soft-float operation ${op}; one of ${Object.keys(SOFTFLOAT_OPS)}`);
    }
    if (!(a instanceof Uint32Array)) {
      throw new TypeError('soft-float operands are Uint32Array bits');
    }
    if (b === null) {
      if (!UNARY_OPS.has(op)) throw new Error(`${op} needs two operands`);
      b = a;
    } else if (!(b instanceof Uint32Array) || b.length !== a.length) {
      throw new Error(`operands differ: ${a.length} and ${b?.length} elements`);
    }
    const out = new Uint32Array(a.length);
    for (let start = 0; start < a.length; start += MAX_PER_DISPATCH) {
      const stop = Math.min(start + MAX_PER_DISPATCH, a.length);
      const part = await this.dispatch(
        SOFTFLOAT_OPS[op], a.subarray(start, stop), b.subarray(start, stop),
      );
      out.set(part, start);
    }
    return out;
  }

  async dispatch(code, a, b) {
    const n = a.length;
    if (n === 0) return new Uint32Array(0);
    const { gpu, pool } = this;
    const params = pool.upload(new Uint32Array([n, code, 0, 0]), 'uniform');
    const bufs = [params, pool.upload(a), pool.upload(b), pool.acquire(n * 4)];
    const staging = pool.acquire(n * 4, 'staging');
    try {
      const encoder = gpu.device.createCommandEncoder();
      const pass = encoder.beginComputePass();
      this.kernel.encode(pass, bufs, [Math.ceil(n / WG), 1, 1]);
      pass.end();
      encoder.copyBufferToBuffer(bufs[3], 0, staging, 0, n * 4);
      gpu.queue.submit([encoder.finish()]);
      await staging.mapAsync(GPUMapMode.READ, 0, n * 4);
      const got = new Uint32Array(staging.getMappedRange(0, n * 4).slice(0));
      staging.unmap();
      gpu.check();
      return got;
    } finally {
      pool.release(...bufs, staging);
    }
  }
}

function scalar(op, x, y) {
  switch (op) {
    case 'add': return f32(x + y);
    case 'sub': return f32(x - y);
    case 'mul': return f32(x * y);
    case 'div': return f32(x / y);
    case 'sqrt': return f32(Math.sqrt(x));
    case 'exp': return exp(x);
    case 'log': return log(x);
    case 'rint': return rint(x);
    default: throw new Error(`unknown soft-float operation ${op}`);
  }
}

/** This page's float32 result bits of `op` (NaN as the canonical NaN). */
export function softFloatReference(op, a, b = a) {
  const out = new Uint32Array(a.length);
  for (let i = 0; i < a.length; i += 1) {
    const r = scalar(op, fromBits(a[i]), fromBits(b[i]));
    out[i] = r !== r ? CANONICAL_NAN : f32Bits(r);
  }
  return out;
}

const hex = (v) => `0x${(v >>> 0).toString(16).padStart(8, '0')}`;

/**
 * Every case ({name, a, b}: Uint32Array bits) through every operation; the first result whose
 * bits differ fails the gate: {passed, failure: null | {case, index, expected, got}}.
 */
export async function runSoftFloatGate(sf, cases) {
  let passed = 0;
  for (const { name, a, b } of cases) {
    for (const op of Object.keys(SOFTFLOAT_OPS)) {
      const unary = UNARY_OPS.has(op);
      const label = `${name} (${op})`;
      let got;
      try {
        got = unary ? await sf.apply(op, a) : await sf.apply(op, a, b);
      } catch (exc) {
        const failure = { case: label, index: null, expected: 'a result', got: String(exc) };
        return { passed, failure };
      }
      const want = softFloatReference(op, a, unary ? a : b);
      for (let i = 0; i < want.length; i += 1) {
        if (want[i] !== got[i]) {
          const operands = unary ? hex(a[i]) : `${hex(a[i])}, ${hex(b[i])}`;
          const failure = {
            case: `${label} of ${operands}`, index: i, expected: hex(want[i]), got: hex(got[i]),
          };
          return { passed, failure };
        }
      }
      passed += 1;
    }
  }
  return { passed, failure: null };
}
