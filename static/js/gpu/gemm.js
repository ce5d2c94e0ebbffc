// Exact int8 GEMM on WebGPU: the DP4A path (kernels/gemm_dp4a.wgsl) and the LUT path
// (kernels/gemm_lut.wgsl, products read from luts/mul_i8.bin). Mirrors
// server/daisychain/gpu/gemm.py; the layouts are the kernels' headers and docs/KERNELS.md.
//
// GpuGemm.matmulInt(a, b, M, K, N, {transA, transB, batch}) resolves to the exact int32
// accumulators acc = a @ b (Int32Array, batch x M x N). productOps(gemm) turns a GEMM into the
// model's product provider (static/js/model/ops.js): the limb quantization and the
// dequantization y = f32(acc * 2^s) stay on the CPU and are the very functions of the CPU mirror
// (../numerics/gemm.js), so no float arithmetic of the device is ever in the contract.

import { compileKernel } from './kernels.js';
import { BackwardReplay, ForwardReplay } from './replay.js';
import { ChainTooLarge } from './chain.js';
import { probeStepPlan } from './probe.js';
import { BufferPool } from './pool.js';
import { sha256Hex } from '../numerics/hash.js';
import {
  intMatmul,
  dequantizeProduct,
  dequantizeGradLeft,
  dequantizeGradRight,
  gradLeftLimbs,
  gradRightLimbs,
} from '../numerics/gemm.js';

export const KERNEL_NAMES = { dp4a: 'gemm_dp4a', lut: 'gemm_lut' };
export const TILE = 4; // outputs per invocation along each axis (fixed in the WGSL)
export const WORKGROUP = [8, 8]; // [WG_X, WG_Y] override constants
// |acc| <= 128 * 128 * K must stay below 2^31 (docs/NUMERICS.md section 3).
export const MAX_K = (1 << 17) - 1;
export const LUT_BASE = '/luts/';

/**
 * Packs the (rows x K) int8 matrix at `offset` of `src` K-major: word [k][r] holds
 * x[r, 4k .. 4k+3] as little-endian bytes; rows and K zero-padded to multiples of 4. With
 * `stored === 'transposed'` the matrix is stored (K x rows). Returns a Uint32Array of
 * ceil(K / 4) * 4 * ceil(rows / 4) words.
 */
export function packKMajor(src, offset, rows, K, transposed = false) {
  const k4 = Math.max(1, Math.ceil(K / 4));
  const r4 = 4 * Math.max(1, Math.ceil(rows / 4));
  const words = new Uint32Array(k4 * r4);
  const bytes = new Int8Array(words.buffer);
  if (transposed) {
    for (let k = 0; k < K; k++) {
      const base = (k >> 2) * r4 * 4 + (k & 3);
      const so = offset + k * rows;
      for (let r = 0; r < rows; r++) bytes[base + r * 4] = src[so + r];
    }
  } else {
    for (let r = 0; r < rows; r++) {
      const so = offset + r * K;
      for (let k = 0; k < K; k++) bytes[((k >> 2) * r4 + r) * 4 + (k & 3)] = src[so + k];
    }
  }
  return words;
}

function checkProduct(a, b, M, K, N, batch) {
  for (const [v, what] of [[M, 'M'], [K, 'K'], [N, 'N'], [batch, 'batch']]) {
    if (!Number.isInteger(v) || v < 0) throw new RangeError(`matmulInt: ${what} = ${v}`);
  }
  if (!(a instanceof Int8Array) || !(b instanceof Int8Array)) {
    throw new TypeError('matmulInt expects Int8Array operands');
  }
  if (a.length !== batch * M * K || b.length !== batch * K * N) {
    throw new RangeError(
      `matmulInt: operand lengths ${a.length}, ${b.length} do not fit ${batch} x ` +
        `(${M} x ${K}) @ (${K} x ${N})`,
    );
  }
  if (K > MAX_K) {
    throw new RangeError(
      `matmulInt: K = ${K} exceeds ${MAX_K}, where int32 accumulation could overflow; split K`,
    );
  }
}

/**
 * The verified product table luts/mul_i8.bin as bytes, checked against luts/manifest.json (size
 * and SHA-256; the manifest's entries are verified exhaustively by `daisychain luts --check`).
 */
export async function loadMulTable(base = LUT_BASE) {
  const manifestUrl = `${base}manifest.json`;
  const response = await fetch(manifestUrl, { cache: 'no-cache' });
  if (!response.ok) throw new Error(`GET ${manifestUrl} answered ${response.status}`);
  const entry = (await response.json()).tables?.mul_i8;
  if (!entry) throw new Error(`${manifestUrl} has no mul_i8 table; reinstall daisychain`);
  const tableUrl = `${base}${entry.file}`;
  const raw = await fetch(tableUrl, { cache: 'no-cache' });
  if (!raw.ok) throw new Error(`GET ${tableUrl} answered ${raw.status}`);
  const bytes = new Uint8Array(await raw.arrayBuffer());
  if (bytes.length !== entry.bytes) {
    throw new Error(`${tableUrl}: ${bytes.length} bytes, the manifest says ${entry.bytes}`);
  }
  const digest = await sha256Hex(bytes);
  if (digest !== entry.sha256) {
    throw new Error(
      `${tableUrl}: SHA-256 ${digest.slice(0, 16)}... differs from the manifest's ` +
        `${entry.sha256.slice(0, 16)}...; the table is corrupt or stale (reinstall daisychain)`,
    );
  }
  return bytes;
}

/** One GEMM kernel (DP4A or LUT) compiled on one device, with its buffer pool. */
export class GpuGemm {
  constructor(gpu, kind, kernel, pool, lut) {
    this.gpu = gpu;
    this.kind = kind;
    this.kernel = kernel;
    this.pool = pool;
    this.lut = lut;
    this.products = 0;
    this.pendingProbe = null; // the step probe's product a step chain made (gpu/probe.js)
  }

  /** Compiles the kind's kernel ("dp4a" or "lut"); `source` replaces the file's WGSL. */
  static async create(gpu, kind, { source, kernelBase, lutBase } = {}) {
    if (!(kind in KERNEL_NAMES)) throw new Error(`unknown GEMM kind ${kind}`);
    const bindings = ['uniform', 'read', 'read', 'write'];
    if (kind === 'lut') bindings.push('read');
    const kernel = await compileKernel(gpu, KERNEL_NAMES[kind], bindings, {
      source,
      base: kernelBase,
      constants: { WG_X: WORKGROUP[0], WG_Y: WORKGROUP[1] },
    });
    let lut = null;
    if (kind === 'lut') {
      const table = await loadMulTable(lutBase);
      lut = gpu.device.createBuffer({
        label: 'mul_i8',
        size: table.byteLength,
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
      });
      gpu.queue.writeBuffer(lut, 0, table);
    }
    return new GpuGemm(gpu, kind, kernel, new BufferPool(gpu), lut);
  }

  get name() {
    return `webgpu-${this.kind}`;
  }

  /** Output rows x columns covered by one workgroup (the audit's block edges). */
  get tile() {
    return [TILE * WORKGROUP[1], TILE * WORKGROUP[0]];
  }

  /**
   * Exact int32 accumulators of `batch` products (M x K) @ (K x N) of int8 operands stacked at
   * strides M*K and K*N (stored transposed when transA / transB): an Int32Array (batch x M x N).
   */
  async matmulInt(a, b, M, K, N, { transA = false, transB = false, batch = 1 } = {}) {
    checkProduct(a, b, M, K, N, batch);
    const result = new Int32Array(batch * M * N);
    if (M === 0 || N === 0 || K === 0 || batch === 0) return result;
    this.gpu.check();
    const { pool, gpu } = this;
    const k4 = Math.ceil(K / 4);
    const params = pool.upload(new Uint32Array([M, N, k4, 0]), 'uniform');
    const outBytes = M * N * 4;
    const staging = pool.acquire(batch * outBytes, 'staging');
    const encoder = gpu.device.createCommandEncoder();
    const used = [];
    const [tm, tn] = this.tile;
    const groups = [Math.ceil(N / tn), Math.ceil(M / tm), 1];
    for (let t = 0; t < batch; t++) {
      const aw = pool.upload(packKMajor(a, t * M * K, M, K, transA));
      const bw = pool.upload(packKMajor(b, t * K * N, N, K, !transB));
      const out = pool.acquire(outBytes);
      const buffers = [params, aw, bw, out];
      if (this.lut) buffers.push(this.lut);
      const pass = encoder.beginComputePass();
      this.kernel.encode(pass, buffers, groups);
      pass.end();
      encoder.copyBufferToBuffer(out, 0, staging, t * outBytes, outBytes);
      used.push(aw, bw, out);
    }
    gpu.queue.submit([encoder.finish()]);
    try {
      await staging.mapAsync(GPUMapMode.READ, 0, batch * outBytes);
      result.set(new Int32Array(staging.getMappedRange(0, batch * outBytes)));
      staging.unmap();
    } finally {
      pool.release(params, staging, ...used);
    }
    gpu.check();
    this.products += 1;
    return result;
  }
}

/** The CPU mirror's exact integer product behind the GpuGemm interface (the CPU tier's row). */
export class CpuGemm {
  get name() {
    return 'js-cpu';
  }

  get tile() {
    return [32, 32];
  }

  async matmulInt(a, b, M, K, N, opts = {}) {
    checkProduct(a, b, M, K, N, opts.batch ?? 1);
    return Int32Array.from(intMatmul(a, b, M, K, N, opts));
  }
}

/**
 * The model's product provider (static/js/model/ops.js) on an integer GEMM: the int8 products on
 * `gemm`, everything else with the CPU mirror's own functions. `audit(product, acc)`, if given,
 * sees every product ({a, b, M, K, N, transA, transB, batch}) with its accumulators.
 * Two-limb gradients: hi and lo are stacked into one product (rows for the left gradient,
 * columns for the right one); 256 * acc_hi + acc_lo is an exact integer in a double, the value
 * the CPU kernel accumulates directly. Three limbs (the logits gradient, contract v2) stack hi,
 * mid and lo the same way and combine (256 * acc_hi + acc_mid) * 256 + acc_lo, exact too.
 */
export function productOps(gemm, { audit, chain = null, stepChain = null } = {}) {
  let comb = new Float64Array(0);
  const scratch = (n) => (comb.length >= n ? comb : (comb = new Float64Array(n)));
  let replay = null; // answering the current forward's products
  let lastReplay = null; // the latest forward's, kept for its counts
  let backReplay = null; // answering the current step's backward products
  let lastBackReplay = null;
  let probeStep = null; // the probe step a training step's chain ran: {plan, out}, taken once
  const tooLarge = new Set(); // chains and shapes whose one readback this device cannot hold
  /** `run()`'s result, or null where the chain's readback is past the device's largest buffer
   * (remembered under `key`: that shape then computes without it). */
  async function runOr(run, key) {
    try {
      return await run();
    } catch (exc) {
      if (!(exc instanceof ChainTooLarge)) throw exc;
      tooLarge.add(key);
      return null;
    }
  }
  async function product(p) {
    const acc = await gemm.matmulInt(p.a, p.b, p.M, p.K, p.N, p);
    audit?.(p, acc);
    return acc;
  }
  /** A chain that made other bits is not used again. */
  function refuse(exc) {
    replay = null;
    backReplay = null;
    ops.chain = null;
    ops.stepChain = null;
    throw exc;
  }
  /** A replay's accumulators for product `p` (`take()` asks it), audited, or null. */
  function answered(p, take) {
    let acc = null;
    try {
      acc = take();
    } catch (exc) {
      refuse(exc);
    }
    if (acc !== null) audit?.(p, acc);
    return acc;
  }
  /** The forward chain's accumulators for this request, or null (and the replay ends). */
  function replayed(p, ae, be) {
    if (replay === null) return null;
    const acc = answered(p, () => replay.take(p.a, ae, p.b, be, p.M, p.K, p.N, p));
    if (acc === null) replay = null;
    return acc;
  }
  /** The step chain's accumulators for a backward product, or null. Synchronous: a pair's two
   * products are taken in the order the model yields them. */
  function backReplayed(p, kind, x, xe, limbs, dims) {
    if (backReplay === null) return null;
    const acc = answered(p, () => backReplay.take(kind, x, xe, limbs, dims));
    if (acc === null) backReplay = null;
    return acc;
  }
  const ops = {
    chain,
    stepChain,
    /** The latest forward's replay (answered, expected, dropped), or null. */
    get replay() {
      return lastReplay;
    },
    /** The latest step's backward replay, or null. */
    get backReplay() {
      return lastBackReplay;
    },

    /**
     * The model's forward plan (model/gpt.js): with a forward chain that fits it, the whole
     * forward runs here in one submit and one readback, and the forward's products are then
     * answered from it (gpu/replay.js); otherwise nothing happens.
     */
    async plan(p) {
      replay = lastReplay = backReplay = lastBackReplay = null;
      const shape = planShape(p);
      const step = ops.stepChain;
      const pending = probeStep;
      probeStep = null;
      if (pending !== null && samePlan(p, pending.plan)) {
        // the probe step, recorded in the last training step's submit: no run of its own
        replay = lastReplay = new ForwardReplay(p, pending.out.forward);
        backReplay = lastBackReplay = new BackwardReplay(replay, pending.out.backward);
        return null;
      }
      const key = JSON.stringify(shape);
      if (p.targets && step !== null && ops.chain !== null && step.fits(shape) &&
          !tooLarge.has(`step ${key}`)) {
        const probePlan = probeStepPlan();
        const withProbe = step.fits(planShape(probePlan)) ? probePlan : null;
        const out = await runOr(() => step.run(p, withProbe), `step ${key}`);
        if (out !== null) {
          replay = lastReplay = new ForwardReplay(p, out.forward);
          backReplay = lastBackReplay = new BackwardReplay(replay, out.backward);
          gemm.pendingProbe = out.probe; // the step probe's product (gpu/probe.js), taken once
          if (out.probeStep !== null) probeStep = { plan: probePlan, out: out.probeStep };
          return null;
        }
      }
      const ch = ops.chain;
      if (ch === null || !ch.fits(shape) || tooLarge.has(`forward ${key}`)) return null;
      const out = await runOr(() => ch.run(p), `forward ${key}`);
      if (out !== null) replay = lastReplay = new ForwardReplay(p, out);
      return null;
    },

    async qmatmul(aq, ae, bq, be, M, K, N, opts = {}) {
      const { transA = false, transB = false, batch = 1 } = opts;
      const out = opts.out ?? new Float32Array(batch * M * N);
      const p = { a: aq, b: bq, M, K, N, transA, transB, batch };
      const acc = replayed(p, ae, be) ?? (await product(p));
      for (let t = 0; t < batch; t++) {
        dequantizeProduct(acc.subarray(t * M * N), ae, be, M, N, t, out);
      }
      return out;
    },

    async gradMatmulLeft(g, foldE, bq, M, K, N, opts = {}) {
      const { transB = false, batch = 1 } = opts;
      const n = opts.limbCount ?? 2;
      if (n !== 2 && n !== 3) throw new RangeError(`a gradient operand has 2 or 3 limbs, got ${n}`);
      const limbs = gradLeftLimbs(g, foldE, M, K, batch, n);
      if (opts.limbs) Object.assign(opts.limbs, limbs);
      const parts = n === 3 ? [limbs.hi, limbs.mid, limbs.lo] : [limbs.hi, limbs.lo];
      const out = opts.out ?? new Float32Array(batch * M * N);
      const mk = M * K;
      const stacked = new Int8Array(n * batch * mk); // per product: [hi; (mid;) lo], (nM x K)
      for (let t = 0; t < batch; t++) {
        parts.forEach((p, l) => stacked.set(p.subarray(t * mk, (t + 1) * mk), (n * t + l) * mk));
      }
      const p = { a: stacked, b: bq, M: n * M, K, N, transB, batch };
      const acc = backReplayed(p, 'left', bq, foldE, limbs, [M, K, N, batch, n, transB]) ??
        (await product(p));
      const mn = M * N;
      const c = scratch(mn);
      for (let t = 0; t < batch; t++) {
        const base = n * t * mn;
        if (n === 3) {
          for (let i = 0; i < mn; i++) {
            c[i] = (256 * acc[base + i] + acc[base + mn + i]) * 256 + acc[base + 2 * mn + i];
          }
        } else {
          for (let i = 0; i < mn; i++) c[i] = 256 * acc[base + i] + acc[base + mn + i];
        }
        dequantizeGradLeft(c, limbs.e, M, N, t, out, 8 * (n - 1));
      }
      return out;
    },

    async gradMatmulRight(aq, foldE, g, M, K, N, opts = {}) {
      const { transA = false, batch = 1 } = opts;
      const n = opts.limbCount ?? 2;
      if (n !== 2 && n !== 3) throw new RangeError(`a gradient operand has 2 or 3 limbs, got ${n}`);
      const limbs = gradRightLimbs(g, foldE, K, N, batch, n);
      if (opts.limbs) Object.assign(opts.limbs, limbs);
      const parts = n === 3 ? [limbs.hi, limbs.mid, limbs.lo] : [limbs.hi, limbs.lo];
      const out = opts.out ?? new Float32Array(batch * M * N);
      const stacked = new Int8Array(n * batch * K * N); // per product: [hi | (mid |) lo], (K x nN)
      for (let t = 0; t < batch; t++) {
        for (let k = 0; k < K; k++) {
          const src = (t * K + k) * N;
          const dst = n * src;
          parts.forEach((p, l) => stacked.set(p.subarray(src, src + N), dst + l * N));
        }
      }
      const p = { a: aq, b: stacked, M, K, N: n * N, transA, batch };
      const acc = backReplayed(p, 'right', aq, foldE, limbs, [M, K, N, batch, n, transA]) ??
        (await product(p));
      const mn = M * N;
      const c = scratch(mn);
      for (let t = 0; t < batch; t++) {
        const base = n * t * mn;
        for (let i = 0; i < M; i++) {
          const row = base + n * i * N;
          if (n === 3) {
            for (let j = 0; j < N; j++) {
              c[i * N + j] = (256 * acc[row + j] + acc[row + N + j]) * 256 + acc[row + 2 * N + j];
            }
          } else {
            for (let j = 0; j < N; j++) c[i * N + j] = 256 * acc[row + j] + acc[row + N + j];
          }
        }
        dequantizeGradRight(c, limbs.e, M, N, t, out, 8 * (n - 1));
      }
      return out;
    },
  };
  return ops;
}

/** Whether two plans are the same forward: every array equal, bit for bit. */
function samePlan(p, q) {
  const same = (x, y) => {
    if (x === y) return true;
    if (x === null || y === null || x.length !== y.length) return false;
    const a = new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
    const b = new Uint8Array(y.buffer, y.byteOffset, y.byteLength);
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
    return true;
  };
  const qe = (x, y) => same(x.q, y.q) && same(x.e, y.e);
  const list = (xs, ys, eq) => xs.length === ys.length && xs.every((x, i) => eq(x, ys[i]));
  return ['batch', 'heads', 'scale', 'eps', 'width', 'hidden', 'vocab', 'layers']
    .every((k) => p[k] === q[k]) && qe(p.a, q.a) && same(p.h, q.h) &&
    same(p.targets ?? null, q.targets ?? null) && same(p.gf, q.gf) &&
    list(p.g1, q.g1, same) && list(p.g2, q.g2, same) && qe(p.w.wte, q.w.wte) &&
    ['wqkv', 'wo', 'w1', 'w2'].every((k) => list(p.w[k], q.w[k], qe));
}

/** The sizes ForwardChain.fits reads, from a model's plan. */
function planShape(p) {
  return { n: p.a.e.length, c: p.width, f: p.hidden, heads: p.heads,
    t: p.a.e.length / p.batch, vocab: p.vocab };
}
