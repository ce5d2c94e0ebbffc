// A whole training step's products in one submit and one readback on the page's WebGPU tier
// (docs/KERNELS.md "On the page"; mirrors server/daisychain/gpu/step_chain.py and
// backward_record.py, whose params slots, bindings and grids are the kernels' headers).
//
// After the forward chain (gpu/forward_chain.js), in the same command encoder:
// - cross_entropy_epilogue.wgsl makes the logits' gradient from the logits product and the
//   targets;
// - transpose_pack.wgsl repacks each forward operand a backward product reads as its transpose;
// - the backward: per pair limbs_epilogue.wgsl (the gradient with the other operand's exponents
//   folded in, quantized in two or three limbs, per row for dA and per column for dB), every
//   limb's products, combine_epilogue.wgsl (the limbs' products combined exactly, rounded once;
//   the ReLU's mask; placed where the next pair reads it), grad_norm_epilogue.wgsl and
//   grad_softmax_epilogue.wgsl between them, in the model's order;
// - the kernel probe's product (what a peer publishes after the step, gpu/probe.js).
// The host uploads the forward's inputs, the weights in both packings and the targets; one
// readback brings back every product and every operand the GPU made. The model still computes
// everything on the CPU; ForwardReplay and BackwardReplay (gpu/replay.js) answer its requests
// only where its operands equal the GPU's.

import { packKMajor } from './gemm.js';
import { PROBE_SHAPE, probeOperands } from './probe.js';
import {
  ROW_MAX, MIN_STORAGE_BINDING, Recording, alignedWords, compileEpilogue, f32Bits, rowsGrid,
  slot, span, unpackKMajor,
} from './chain.js';

export const ROWS = 0; // the limbs epilogue's modes: per row (dA's operand), per column (dB's)
export const COLUMNS = 1;
export const VOCAB_MAX = 2048; // the longest vocabulary row the cross-entropy epilogue holds
// The pairs of a block in the model's order (gpt.js gradientSteps, from the last block).
export const BLOCK_PAIRS = Object.freeze(['w2', 'w1', 'wo', 'pv', 'qk', 'qkv']);

export const STEP_EPILOGUES = Object.freeze({
  limbs: ['limbs_epilogue', ['uniform', 'read', 'read', 'write', 'write']],
  combine: ['combine_epilogue', ['uniform', 'read', 'read', 'read', 'write']],
  grad_norm: ['grad_norm_epilogue', ['uniform', 'read', 'read', 'read', 'read', 'read', 'write']],
  grad_softmax: ['grad_softmax_epilogue', ['uniform', 'read', 'read', 'write']],
  cross_entropy: ['cross_entropy_epilogue', ['uniform', 'read', 'read', 'read', 'read', 'write']],
  transpose: ['transpose_pack', ['uniform', 'read', 'write']],
});

const PROBE_STEP = 'probe.step.'; // the probe step's names in a training step's recording
const cdiv = (a, b) => Math.ceil(a / b);
const pow2At = (n) => { let w = 1; while (w < n) w *= 2; return w; };
const grid64 = (count) => {
  const groups = cdiv(count, 64);
  return [Math.min(groups, 65535), cdiv(groups, 65535), 1];
};

/** Exponents in a buffer: index f at buf[at + step * f]; perSlice when each slice has its own. */
const fold = (buf, at = 0, step = 1, perSlice = false) => ({ buf, at, step, perSlice });
/** An int8 operand packed K-major per slice, `stride` words apart (`slices` 1: one for all). */
const packed = (buf, stride, slices) => ({ buf, stride, slices });

/** The backward's dispatches into one Recording (backward_record.Recorder). */
class Recorder {
  constructor(chain, rec) {
    this.chain = chain;
    this.rec = rec;
    this.gemm = chain.gemm;
    this.lut = this.gemm.lut ? [this.gemm.lut] : [];
  }

  product(name, m, n, k, a, b, out) {
    const params = this.rec.upload(name, slot([m, n, Math.max(1, cdiv(k, 4)), 0]), 'uniform');
    const [tm, tn] = this.gemm.tile;
    this.rec.dispatch(this.gemm.kernel, [span(params, 0, 16), a, b, out, ...this.lut],
      [cdiv(n, tn), cdiv(m, tm), 1]);
  }

  limbs(name, g, [slices, m, n, limbs], f, mode) {
    const rec = this.rec;
    const [kw, width, blocks] = mode === ROWS ? [cdiv(n, 4), 4 * cdiv(m, 4), slices * m]
      : [cdiv(m, 4), 4 * cdiv(n, 4), slices * n];
    const stride = alignedWords(kw * width);
    const out = rec.output(name, limbs * slices * stride * 4);
    const status = rec.output(name + '_status', 2 * blocks * 4);
    const per = mode === ROWS ? n : m;
    const params = rec.upload(name + '.params', slot([slices, m, n, limbs, mode, m * n,
      f.perSlice ? per : 0, stride, kw, width, blocks, f.at, f.step, 0, 0, 0]), 'uniform');
    rec.dispatch(this.chain.kernels.limbs, [span(params, 0, 64), g, f.buf, out, status],
      rowsGrid(blocks));
    return { out, stride, status };
  }

  pair(name, g, shape, src) {
    const [slices, m, n, limbs] = shape;
    const rec = this.rec;
    const rows = this.limbs(name + '.rows', g, shape, src.foldA, ROWS);
    const cols = this.limbs(name + '.cols', g, shape, src.foldB, COLUMNS);
    const aStride = alignedWords(m * src.k);
    const bStride = alignedWords(src.k2 * n);
    const accA = rec.output(name + '.acc_a', limbs * slices * aStride * 4);
    const accB = rec.output(name + '.acc_b', limbs * slices * bStride * 4);
    for (let limb = 0; limb < limbs; limb++) {
      for (let s = 0; s < slices; s++) {
        const r = limb * slices + s;
        const bs = s % src.b.slices;
        const as = s % src.a.slices;
        // dA = limbs (m, n) @ B (n, k)
        this.product(`${name}.ga${r}`, m, src.k, n, span(rows.out, r * rows.stride * 4,
          rows.stride * 4), span(src.b.buf, bs * src.b.stride * 4, src.b.stride * 4),
        span(accA, r * aStride * 4, aStride * 4));
        // dB = A (k2, m) @ limbs (m, n)
        this.product(`${name}.gb${r}`, src.k2, n, m, span(src.a.buf, as * src.a.stride * 4,
          src.a.stride * 4), span(cols.out, r * cols.stride * 4, cols.stride * 4),
        span(accB, r * bStride * 4, bStride * 4));
      }
    }
    return { name, slices, m, n, limbs, k: src.k, k2: src.k2, accA, accB,
      rowsStatus: rows.status, colsStatus: cols.status };
  }

  combine(name, pair, [slices, m, k], mode, { out = null, place = [0, 0, 0, 0, 0, 0],
    mask = null, transposed = false } = {}) {
    const rec = this.rec;
    const [acc, status] = mode === ROWS ? [pair.accA, pair.rowsStatus]
      : [pair.accB, pair.colsStatus];
    const total = slices * m * k;
    const target = out ?? rec.scratch(name, total * 4);
    const params = rec.upload(name + '.params', slot([slices, m, k, pair.limbs, mode,
      alignedWords(m * k), ...place, transposed ? 1 : 0, mask !== null ? 1 : 0, 0, 0]),
    'uniform');
    rec.dispatch(this.chain.kernels.combine, [span(params, 0, 64), acc, status, mask ?? status,
      target], grid64(total));
    return target;
  }

  normBackward(name, dy, norm, dh, n, c, eps) {
    const rec = this.rec;
    const params = rec.upload(name + '.params', slot([n, c, pow2At(c), f32Bits(c),
      dh !== null ? 1 : 0, 1, f32Bits(eps), 0]), 'uniform');
    const out = rec.scratch(name, n * c * 4);
    // inv is computed from x (from_x mode): x bound in its place, never read
    rec.dispatch(this.chain.kernels.grad_norm, [span(params, 0, 32), dy, norm.g, norm.x, norm.x,
      dh ?? dy, out], rowsGrid(n));
    return out;
  }

  softmaxBackward(name, dp, p, rows, t, scale) {
    const params = this.rec.upload(name + '.params', slot([rows, t, pow2At(t), f32Bits(scale)]),
      'uniform');
    const out = this.rec.scratch(name, rows * t * 4);
    this.rec.dispatch(this.chain.kernels.grad_softmax, [span(params, 0, 16), dp, p, out],
      rowsGrid(rows));
    return out;
  }
}

/** The whole backward in gpt.js's order (backward_record.record_backward). */
function recordBackward(r, src, sh) {
  const { n, c, f, t, heads, hd, slices, vocab } = sh;
  const logits = r.pair('logits', src.dlogits, [1, n, vocab, 3], src.logits);
  const dhf = r.combine('dhf', logits, [1, n, c], ROWS);
  let dh = r.normBackward('dh.f', dhf, src.normf, null, n, c, src.eps);
  const pairs = [];
  for (let i = src.blocks.length - 1; i >= 0; i--) {
    const w = src.blocks[i];
    const p = `${i}.`;
    const mine = {};
    mine.w2 = r.pair(p + 'w2', dh, [1, n, c, 2], w.pairs.w2);
    const du = r.combine(p + 'du', mine.w2, [1, n, f], ROWS, { mask: w.relu });
    mine.w1 = r.pair(p + 'w1', du, [1, n, f, 2], w.pairs.w1);
    const dbn = r.combine(p + 'dbn', mine.w1, [1, n, c], ROWS);
    dh = r.normBackward(p + 'dh.2', dbn, w.norm2, dh, n, c, src.eps);
    mine.wo = r.pair(p + 'wo', dh, [1, n, c, 2], w.pairs.wo);
    const dO = r.combine(p + 'do', mine.wo, [1, n, c], ROWS, { place: [1, t, heads, hd, c, 0] });
    mine.pv = r.pair(p + 'pv', dO, [slices, t, hd, 2], w.pairs.pv);
    const dp = r.combine(p + 'dp', mine.pv, [slices, t, t], ROWS);
    const ds = r.softmaxBackward(p + 'ds', dp, w.p, slices * t, t, sh.scale);
    mine.qk = r.pair(p + 'qk', ds, [slices, t, t, 2], w.pairs.qk);
    const dqkv = r.rec.scratch(p + 'dqkv', n * 3 * c * 4);
    r.combine(p + 'dq', mine.qk, [slices, t, hd], ROWS,
      { out: dqkv, place: [2, t, heads, hd, c, 0] });
    r.combine(p + 'dk', mine.qk, [slices, hd, t], COLUMNS,
      { out: dqkv, place: [2, t, heads, hd, c, 1], transposed: true });
    r.combine(p + 'dv', mine.pv, [slices, t, hd], COLUMNS,
      { out: dqkv, place: [2, t, heads, hd, c, 2] });
    mine.qkv = r.pair(p + 'qkv', dqkv, [1, n, 3 * c, 2], w.pairs.qkv);
    const dan = r.combine(p + 'dan', mine.qkv, [1, n, c], ROWS);
    dh = r.normBackward(p + 'dh.1', dan, w.norm1, dh, n, c, src.eps);
    pairs[i] = mine;
  }
  return { logits, pairs };
}

/**
 * A pair's outputs from the readback, in the layouts gemm.js's productOps uses: the limbs and
 * exponents as gradLeftLimbs / gradRightLimbs make them, and the accumulators as the stacked
 * products ([hi; (mid;) lo] rows per slice for dA, [hi | (mid |) lo] columns for dB).
 */
function readPair(out, pair) {
  const { name, slices: S, m, n, limbs: L, k, k2 } = pair;
  const limbsOf = (mode) => {
    const [kw, width, blocks] = mode === ROWS ? [cdiv(n, 4), 4 * cdiv(m, 4), S * m]
      : [cdiv(m, 4), 4 * cdiv(n, 4), S * n];
    const stride = alignedWords(kw * width);
    const words = out.words(`${name}.${mode === ROWS ? 'rows' : 'cols'}`);
    const values = [];
    for (let l = 0; l < L; l++) {
      const v = new Int8Array(S * m * n);
      for (let s = 0; s < S; s++) {
        const r = l * S + s;
        const region = words.subarray(r * stride, r * stride + kw * width);
        if (mode === ROWS) {
          v.set(unpackKMajor(region, kw, width, m, n), s * m * n);
        } else {
          const t = unpackKMajor(region, kw, width, n, m); // (n, m): transpose back
          for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) v[s * m * n + i * n + j] = t[j * m + i];
        }
      }
      values.push(v);
    }
    const status = out.words(`${name}.${mode === ROWS ? 'rows' : 'cols'}_status`);
    const e = new Int32Array(blocks);
    const bad = new Uint32Array(blocks);
    for (let b = 0; b < blocks; b++) {
      e[b] = status[2 * b] | 0;
      bad[b] = status[2 * b + 1];
    }
    return { values, e, status: bad };
  };
  const aStride = alignedWords(m * k);
  const bStride = alignedWords(k2 * n);
  const wa = out.words(name + '.acc_a', Int32Array);
  const wb = out.words(name + '.acc_b', Int32Array);
  const accA = new Int32Array(S * L * m * k); // per slice [limb 0 (m x k); limb 1; ...]
  const accB = new Int32Array(S * k2 * L * n); // per slice, per row [limb 0 (n) | limb 1 | ...]
  for (let l = 0; l < L; l++) {
    for (let s = 0; s < S; s++) {
      const r = l * S + s;
      accA.set(wa.subarray(r * aStride, r * aStride + m * k), (s * L + l) * m * k);
      for (let i = 0; i < k2; i++) {
        accB.set(wb.subarray(r * bStride + i * n, r * bStride + (i + 1) * n),
          ((s * k2 + i) * L + l) * n);
      }
    }
  }
  return { rows: limbsOf(ROWS), cols: limbsOf(COLUMNS), accA, accB, limbs: L };
}

/** The step chain on one GEMM: a forward chain's kernels plus the backward's. */
export class StepChain {
  constructor(forward, kernels) {
    this.forward = forward;
    this.gemm = forward.gemm;
    this.kernels = kernels;
    this.name = `${this.gemm.name}-step`;
    this.runs = 0;
    this.dispatches = 0;
  }

  /** Compiles the backward's epilogues beside `forward` (a ForwardChain on the same GEMM). */
  static async create(forward, { sources = {}, base, width } = {}) {
    const kernels = {};
    for (const [key, [name, bindings]] of Object.entries(STEP_EPILOGUES)) {
      kernels[key] = await compileEpilogue(forward.gemm.gpu, name, bindings,
        { source: sources[key], base, width });
    }
    return new StepChain(forward, kernels);
  }

  /** Whether a step of these sizes fits (the forward's, then the backward's limits). */
  fits(shape) {
    const { n, c, f, t, vocab, heads } = shape;
    const limit = Math.min(MIN_STORAGE_BINDING,
      this.gemm.gpu.limits?.maxStorageBufferBindingSize ?? MIN_STORAGE_BINDING);
    const slices = (n / t) * heads;
    const widest = 4 * Math.max(3 * n * vocab, 2 * n * f, 2 * slices * t * t, 3 * n * c,
      3 * c * vocab);
    return vocab <= VOCAB_MAX && this.forward.fits(shape) && c <= ROW_MAX && t <= ROW_MAX &&
      widest <= limit;
  }

  /**
   * The forward, the cross-entropy's gradient, the backward and the kernel probe's product of
   * `plan` (with its targets), and with `probeStep` (the probe step's plan, gpu/probe.js) that
   * whole step too: one submit, one readback. Resolves to {forward, backward, probe,
   * probeStep: {forward, backward} | null}.
   */
  async run(plan, probeStep = null) {
    const rec = new Recording(this.gemm.gpu, this.gemm.pool);
    const made = this.record(rec, plan);
    const probeMade = probeStep === null ? null : this.record(rec.scoped(PROBE_STEP), probeStep);
    const [pm, pk, pn] = PROBE_SHAPE;
    const { a, b } = probeOperands();
    const probe = rec.output('probe', pm * pn * 4);
    new Recorder(this, rec).product('probe.params', pm, pn, pk,
      rec.upload('probe.a', packKMajor(a, 0, pm, pk, false)),
      rec.upload('probe.b', packKMajor(b, 0, pn, pk, true)), probe);
    const out = await rec.run();
    this.runs += 1;
    this.dispatches += rec.steps.length;
    return {
      ...made.read(out),
      probe: out.words('probe', Int32Array).slice(),
      probeStep: probeMade === null ? null : probeMade.read(out.scoped(PROBE_STEP)),
    };
  }

  /** One training step's dispatches into `rec` (a Recording or a scoped one); returns how to
   * read its outputs. */
  record(rec, plan) {
    const fw = this.forward.record(rec, plan);
    const { n, c, f, vocab } = fw;
    const { w, batch, heads, scale } = plan;
    const dlogits = rec.scratch('dlogits', n * vocab * 4);
    const colE = rec.upload('wte.e', Int32Array.from(w.wte.e));
    const ce = rec.upload('ce.params', slot([n, vocab, pow2At(vocab), f32Bits(n)]), 'uniform');
    const last = fw.blocks[fw.blocks.length - 1];
    rec.dispatch(this.kernels.cross_entropy, [span(ce, 0, 16), fw.logits, last.norm.next, colE,
      rec.upload('targets', Uint32Array.from(plan.targets)), dlogits], rowsGrid(n));
    const t = n / batch;
    const src = this.sources(rec, fw, plan, dlogits, colE);
    const r = new Recorder(this, rec);
    const back = recordBackward(r, src, { n, c, f, vocab, t, heads, hd: c / heads,
      slices: batch * heads, scale });
    return {
      read: (out) => ({
        forward: fw.read(out),
        backward: {
          logits: readPair(out, back.logits),
          blocks: back.pairs.map((mine) => Object.fromEntries(
            BLOCK_PAIRS.map((name) => [name, readPair(out, mine[name])]))),
        },
      }),
    };
  }

  /** X^T packed per slice from X (rows x k) packed K-major `stride` words apart. */
  transposed(rec, name, src, slices, rows, k, stride) {
    const inM4 = 4 * cdiv(rows, 4);
    const outM4 = 4 * cdiv(k, 4);
    const outStride = alignedWords(cdiv(rows, 4) * outM4);
    const out = rec.scratch(name, slices * outStride * 4);
    const params = rec.upload(name + '.params', slot([slices, rows, k, stride, outStride, inM4,
      outM4, 0]), 'uniform');
    rec.dispatch(this.kernels.transpose, [span(params, 0, 32), src, out],
      grid64(slices * cdiv(rows, 4) * k));
    return packed(out, outStride, slices);
  }

  /** The backward's inputs: the weights in the backward's packing, the rest from the
   * forward's buffers (step_chain.StepChain._sources). */
  sources(rec, fw, plan, dlogits, colE) {
    const { n, c, qkv } = fw;
    const { core, slices, t, hd } = qkv;
    const { w } = plan;
    /** B^T (rows x k, row-major in `x` at rows x k, or stored transposed) packed K-major. */
    const weight = (name, x, rows, k, stored) => {
      const stride = alignedWords(cdiv(k, 4) * 4 * cdiv(rows, 4));
      const words = new Uint32Array(stride);
      words.set(packKMajor(x, 0, rows, k, stored));
      return packed(rec.upload(name, words), stride, 1);
    };
    const exps = (name, e) => fold(rec.upload(name, Int32Array.from(e)));
    const tokensT = (name, buf, width) => this.transposed(rec, name, buf, 1, n, width,
      cdiv(width, 4) * 4 * cdiv(n, 4));
    const last = fw.blocks[fw.blocks.length - 1];
    const logits = { foldA: fold(colE), b: weight('wte.b', w.wte.q, c, plan.vocab, true), k: c,
      foldB: fold(last.norm.next), a: tokensT('hq.t', last.norm.packed, c), k2: c };
    const blocks = fw.blocks.map(({ q, merge, b: tail }, i) => {
      const p = `${i}.bw.`;
      const f = fw.f;
      const [aIn, aE] = i === 0 ? [fw.a0, fw.a0e]
        : [fw.blocks[i - 1].norm.packed, fw.blocks[i - 1].norm.next];
      const pairs = {
        w2: { foldA: exps(p + 'w2.e', w.w2[i].e), b: weight(p + 'w2', w.w2[i].q, f, c, false),
          k: f, foldB: fold(tail.next2), a: tokensT(p + 'r.t', tail.r_packed, f), k2: f },
        w1: { foldA: exps(p + 'w1.e', w.w1[i].e), b: weight(p + 'w1', w.w1[i].q, c, f, false),
          k: c, foldB: fold(tail.next), a: tokensT(p + 'b.t', tail.b_packed, c), k2: c },
        wo: { foldA: exps(p + 'wo.e', w.wo[i].e), b: weight(p + 'wo', w.wo[i].q, c, c, false),
          k: c, foldB: fold(merge.next), a: tokensT(p + 'o.t', merge.packed, c), k2: c },
        // dP = dO @ v^T, dv = P^T @ dO; v_e in the split's status words, P_e in the softmax's
        pv: { foldA: fold(q.qkv_status, 4 * qkv.rows, 2, true),
          b: this.transposed(rec, p + 'v', q.b2, slices, hd, t, qkv.vStride), k: t,
          foldB: fold(q.status, 0, 3, true),
          a: this.transposed(rec, p + 'pt', q.packed, slices, t, t, core.packedStride), k2: t },
        // dq = dS @ k, dk^T = q^T @ dS; k_e after q_e in the split's scales
        qk: { foldA: fold(q.scales, qkv.rows, 1, true),
          b: this.transposed(rec, p + 'kt', q.b1, slices, t, hd, qkv.aStride), k: hd,
          foldB: fold(q.scales, 0, 1, true),
          a: this.transposed(rec, p + 'qt', q.a1, slices, t, hd, qkv.aStride), k2: hd },
        qkv: { foldA: exps(p + 'wqkv.e', w.wqkv[i].e),
          b: weight(p + 'wqkv', w.wqkv[i].q, c, 3 * c, false), k: c, foldB: fold(aE),
          a: tokensT(p + 'a.t', aIn, c), k2: c },
      };
      const g1 = i === 0 ? rec.upload(p + 'g1', asWords(plan.g1[0]))
        : fw.blocks[i - 1].norm.g;
      const hIn = i === 0 ? fw.h0 : fw.blocks[i - 1].norm.h_out;
      return { pairs, relu: tail.relu, p: q.p_out, norm1: { g: g1, x: hIn },
        norm2: { g: tail.g, x: tail.h_out } };
    });
    return { dlogits, logits, normf: { g: last.norm.g, x: last.norm.h_out }, blocks,
      eps: plan.eps };
  }
}

const asWords = (x) => new Uint32Array(x.buffer, x.byteOffset, x.length);
