// A whole forward in one submit and one readback on the page's WebGPU tier (docs/KERNELS.md
// "The forward chain", "On the page"; mirrors server/daisychain/gpu/forward_chain.py and the
// layouts of qkv_chain.py, attention_chain.py, block_chain.py and mlp_chain.py, whose params,
// bindings and grids are the kernels' headers).
//
// Per block: the qkv product; qkv_epilogue.wgsl splits it into heads and quantizes q and k by
// rows and v by columns in the GEMM's layouts; every head's scores; attention_epilogue.wgsl's
// causal softmax, quantized; every head's P v; merge_epilogue.wgsl merges the heads and quantizes
// them; the output product; norm_epilogue.wgsl (residual add, RMSNorm, quantize); the MLP's
// first product; mlp_epilogue.wgsl (ReLU, quantize); its second product; norm_epilogue.wgsl again
// (the residual add, the next block's norm or the final one). Then the logits product. The host
// uploads the first block's operand, the residual stream, the weights and the gains; the GPU
// makes every other operand; one readback brings back every product and every operand it made.
//
// Nothing unproven is used: the model (model/gpt.js) still computes every operand on the CPU and
// asks for each product in order; ForwardReplay (gpu/replay.js) answers from this chain's
// outputs only after the request's operands equal the GPU's, bit for bit.

import { packKMajor } from './gemm.js';
import {
  ROW_MAX, SPAN_ALIGN, MIN_STORAGE_BINDING, Recording, alignedWords, compileEpilogue, exps,
  f32Bits, rowsGrid, slot, span, unpackKMajor,
} from './chain.js';

// The epilogues' bindings (their WGSL headers).
const QKV_BINDINGS = ['uniform', 'read', 'read', 'write', 'write', 'write', 'write', 'write'];
const ATTENTION_BINDINGS = ['uniform', 'read', 'read', 'write', 'write', 'write'];
const MERGE_BINDINGS = ['uniform', 'read', 'read', 'read', 'write', 'write', 'write'];
const NORM_BINDINGS = ['uniform', 'read', 'read', 'read', 'read', 'write', 'write', 'write',
  'write'];
const MLP_BINDINGS = ['uniform', 'read', 'read', 'write', 'write', 'write', 'write'];
export const EPILOGUES = Object.freeze({
  qkv: ['qkv_epilogue', QKV_BINDINGS],
  attention: ['attention_epilogue', ATTENTION_BINDINGS],
  merge: ['merge_epilogue', MERGE_BINDINGS],
  norm: ['norm_epilogue', NORM_BINDINGS],
  mlp: ['mlp_epilogue', MLP_BINDINGS],
});

const cdiv = (a, b) => Math.ceil(a / b);
const pow2At = (n) => { let w = 1; while (w < n) w *= 2; return w; };

/** The norm epilogue's params for M tokens of width C. */
function normParams(m, c, eps) {
  return [m, c, cdiv(c, 4), 4 * cdiv(m, 4), pow2At(c), f32Bits(c), f32Bits(eps), 0];
}

/** The scores, softmax and second product of S heads (attention_chain.AttentionCore). */
class AttentionCore {
  constructor(heads, t, hd, scale, [a1Stride, b1Stride, b2Stride]) {
    Object.assign(this, { heads, t, hd, scale, a1Stride, b1Stride, b2Stride });
    this.t4 = cdiv(t, 4);
    this.m4 = 4 * this.t4;
    this.accStride = alignedWords(t * t);
    this.packedStride = alignedWords(this.t4 * this.m4);
    this.outStride = alignedWords(t * hd);
    this.rows = heads * t;
  }

  params() {
    const { heads, t, hd } = this;
    const out = [];
    for (let s = 0; s < heads; s++) out.push(slot([t, t, Math.max(1, cdiv(hd, 4)), s]));
    out.push(slot([t, this.rows, this.accStride, this.packedStride, this.t4, this.m4, pow2At(t),
      f32Bits(this.scale)]));
    for (let s = 0; s < heads; s++) out.push(slot([t, hd, this.t4, s]));
    return out;
  }

  sizes() {
    return {
      acc1: this.heads * this.accStride * 4,
      packed: this.heads * this.packedStride * 4,
      status: 3 * this.rows * 4,
      acc2: this.heads * this.outStride * 4,
    };
  }

  record(rec, chain, bufs, first) {
    const { gemm } = chain;
    const { heads, t, hd } = this;
    const lut = gemm.lut ? [gemm.lut] : [];
    const [tm, tn] = gemm.tile;
    const at = (i, size = 16) => span(bufs.params, (first + i) * SPAN_ALIGN, size);
    const region = (name, s, stride) => span(bufs[name], s * stride * 4, stride * 4);
    for (let s = 0; s < heads; s++) {
      rec.dispatch(gemm.kernel, [at(s), region('a1', s, this.a1Stride),
        region('b1', s, this.b1Stride), region('acc1', s, this.accStride), ...lut],
      [cdiv(t, tn), cdiv(t, tm), 1]);
    }
    rec.dispatch(chain.kernels.attention, [at(heads, 32), bufs.acc1, bufs.scales, bufs.packed,
      bufs.status, bufs.p_out], rowsGrid(this.rows));
    for (let s = 0; s < heads; s++) {
      rec.dispatch(gemm.kernel, [at(heads + 1 + s), region('packed', s, this.packedStride),
        region('b2', s, this.b2Stride), region('acc2', s, this.outStride), ...lut],
      [cdiv(hd, tn), cdiv(t, tm), 1]);
    }
  }

  read(words) {
    const { heads, t, hd, t4, m4 } = this;
    const acc1 = new Int32Array(heads * t * t);
    const p8 = new Int8Array(heads * t * t);
    const acc2 = new Int32Array(heads * t * hd);
    const accW = words('acc1', Int32Array);
    const packed = words('packed');
    const out2 = words('acc2', Int32Array);
    for (let s = 0; s < heads; s++) {
      acc1.set(accW.subarray(s * this.accStride, s * this.accStride + t * t), s * t * t);
      const w = packed.subarray(s * this.packedStride, s * this.packedStride + t4 * m4);
      p8.set(unpackKMajor(w, t4, m4, t, t), s * t * t);
      acc2.set(out2.subarray(s * this.outStride, s * this.outStride + t * hd), s * t * hd);
    }
    const status = words('status');
    const pE = new Int32Array(this.rows);
    const bad = new Uint32Array(this.rows);
    for (let r = 0; r < this.rows; r++) {
      pE[r] = status[3 * r] | 0;
      bad[r] = status[3 * r + 1];
    }
    return { acc1, p8, pE, status: bad, acc2 };
  }
}

/** The qkv product, the split into heads and the attention core (qkv_chain.QkvLayout). */
class QkvLayout {
  constructor(n, c, batch, heads, scale) {
    Object.assign(this, { n, c, heads });
    this.t = n / batch;
    this.hd = c / heads;
    this.slices = batch * heads;
    this.rows = n * heads;
    this.hd4 = cdiv(this.hd, 4);
    this.t4 = cdiv(this.t, 4);
    this.aStride = alignedWords(this.hd4 * 4 * this.t4);
    this.vStride = alignedWords(this.t4 * 4 * this.hd4);
    this.core = new AttentionCore(this.slices, this.t, this.hd, scale,
      [this.aStride, this.aStride, this.vStride]);
  }

  params() {
    const { n, c, t, heads, hd, slices } = this;
    return concatWords([
      slot([n, 3 * c, Math.max(1, cdiv(c, 4)), 0]),
      slot([t, heads, hd, c, slices, this.aStride, this.vStride, this.hd4, this.t4, this.rows,
        0, 0]),
      ...this.core.params(),
    ]);
  }

  sizes() {
    const { n, c, slices } = this;
    return {
      acc_qkv: n * 3 * c * 4,
      a1: slices * this.aStride * 4,
      b1: slices * this.aStride * 4,
      b2: slices * this.vStride * 4,
      qkv_status: (4 * this.rows + 2 * slices * this.hd) * 4,
      ...this.core.sizes(),
    };
  }

  record(rec, chain, bufs) {
    const { gemm } = chain;
    const lut = gemm.lut ? [gemm.lut] : [];
    const [tm, tn] = gemm.tile;
    rec.dispatch(gemm.kernel, [span(bufs.params, 0, 16), bufs.a_in, bufs.w_in, bufs.acc_qkv,
      ...lut], [cdiv(3 * this.c, tn), cdiv(this.n, tm), 1]);
    rec.dispatch(chain.kernels.qkv, [span(bufs.params, SPAN_ALIGN, 48), bufs.acc_qkv,
      bufs.scales_in, bufs.a1, bufs.b1, bufs.b2, bufs.scales, bufs.qkv_status],
    [cdiv(this.rows + this.slices * this.hd, 64), 1, 1]);
    this.core.record(rec, chain, bufs, 2);
  }

  read(words) {
    const { slices, t, hd, rows, hd4, t4 } = this;
    const unpack = (name, stride, k4, m4, r, k) => {
      const all = words(name);
      const out = new Int8Array(slices * r * k);
      for (let s = 0; s < slices; s++) {
        out.set(unpackKMajor(all.subarray(s * stride, s * stride + k4 * m4), k4, m4, r, k),
          s * r * k);
      }
      return out;
    };
    const vt = unpack('b2', this.vStride, t4, 4 * hd4, hd, t); // (S, hd, T)
    const v8 = new Int8Array(slices * t * hd);
    for (let s = 0; s < slices; s++) {
      for (let d = 0; d < hd; d++) {
        for (let j = 0; j < t; j++) v8[(s * t + j) * hd + d] = vt[(s * hd + d) * t + j];
      }
    }
    const status = words('qkv_status');
    const half = status.length / 2;
    const e = new Int32Array(half);
    const bad = new Uint32Array(half);
    for (let i = 0; i < half; i++) {
      e[i] = status[2 * i] | 0;
      bad[i] = status[2 * i + 1];
    }
    return {
      accQkv: words('acc_qkv', Int32Array).slice(),
      q8: unpack('a1', this.aStride, hd4, 4 * t4, t, hd),
      qE: e.slice(0, rows),
      k8: unpack('b1', this.aStride, hd4, 4 * t4, t, hd),
      kE: e.slice(rows, 2 * rows),
      v8,
      vE: e.slice(2 * rows, 2 * rows + slices * hd),
      qkvStatus: bad,
      attention: this.core.read(words),
    };
  }
}

/** The block's output product, norm and MLP (block_chain.BlockLayout). */
class BlockLayout {
  constructor(m, c, f) {
    Object.assign(this, { m, c, f });
    this.c4 = cdiv(c, 4);
    this.f4 = cdiv(f, 4);
    this.m4 = 4 * cdiv(m, 4);
  }

  params(eps) {
    const { m, c, f, c4, f4, m4 } = this;
    return concatWords([slot([m, c, c4, 0]), slot(normParams(m, c, eps)), slot([m, f, c4, 0]),
      slot([m, f, f4, m4]), slot([m, c, f4, 0])]);
  }

  sizes() {
    const { m, c, f, c4, f4, m4 } = this;
    return {
      acc_wo: m * c * 4, b_status: 3 * m * 4, b_packed: c4 * m4 * 4, acc1: m * f * 4,
      r_packed: f4 * m4 * 4, r_status: 2 * m * 4, acc2: m * c * 4,
    };
  }

  record(rec, chain, bufs) {
    const { m, c, f } = this;
    const { gemm } = chain;
    const lut = gemm.lut ? [gemm.lut] : [];
    const [tm, tn] = gemm.tile;
    const at = (i, size = 16) => span(bufs.params, i * SPAN_ALIGN, size);
    rec.dispatch(gemm.kernel, [at(0), bufs.a_o, bufs.b_wo, bufs.acc_wo, ...lut],
      [cdiv(c, tn), cdiv(m, tm), 1]);
    rec.dispatch(chain.kernels.norm, [at(1, 32), bufs.acc_wo, bufs.scales_o, bufs.h, bufs.g,
      bufs.b_packed, bufs.b_status, bufs.next, bufs.h_out], rowsGrid(m));
    rec.dispatch(gemm.kernel, [at(2), bufs.b_packed, bufs.b_w1, bufs.acc1, ...lut],
      [cdiv(f, tn), cdiv(m, tm), 1]);
    rec.dispatch(chain.kernels.mlp, [at(3), bufs.acc1, bufs.next, bufs.r_packed, bufs.r_status,
      bufs.next2, bufs.relu], rowsGrid(m));
    rec.dispatch(gemm.kernel, [at(4), bufs.r_packed, bufs.b_w2, bufs.acc2, ...lut],
      [cdiv(c, tn), cdiv(m, tm), 1]);
  }

  read(words) {
    const { m, c, f, m4 } = this;
    const b = operandOf(words('b_status'), words('b_packed'), 3, this.c4, m4, m, c);
    const r = operandOf(words('r_status'), words('r_packed'), 2, this.f4, m4, m, f);
    return {
      accWo: words('acc_wo', Int32Array).slice(),
      b,
      acc1: words('acc1', Int32Array).slice(),
      r,
      acc2: words('acc2', Int32Array).slice(),
    };
  }
}

/** A product's A operand an epilogue made: {q (rows x k int8), e (rows), status (rows)}. */
function operandOf(status, packed, stride, k4, m4, rows, k) {
  const e = new Int32Array(rows);
  const bad = new Uint32Array(rows);
  for (let r = 0; r < rows; r++) {
    e[r] = status[stride * r] | 0;
    bad[r] = status[stride * r + 1];
  }
  return { q: unpackKMajor(packed, k4, m4, rows, k), e, status: bad };
}

function concatWords(parts) {
  const out = new Uint32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const asWords = (f32array) => new Uint32Array(f32array.buffer, f32array.byteOffset,
  f32array.length);

/**
 * The forward chain on one GEMM (its device, kernel, pool and tile). `plan` (what
 * model/gpt.js yields as its 'plan' request): {a: {q, e}, h, w (quantized weights: wqkv, wo, w1,
 * w2 per layer, wte), g1, g2 (gains per layer), gf, eps, batch, heads, scale, width, hidden,
 * vocab, layers}.
 */
export class ForwardChain {
  constructor(gemm, kernels) {
    this.gemm = gemm;
    this.kernels = kernels;
    this.name = `${gemm.name}-forward`;
    this.runs = 0; // submits (each one readback)
    this.dispatches = 0;
  }

  /** Compiles the five epilogues; `sources` ({merge: wgsl, ...}) replaces a whole module. */
  static async create(gemm, { sources = {}, base, width } = {}) {
    const kernels = {};
    for (const [key, [name, bindings]] of Object.entries(EPILOGUES)) {
      kernels[key] = await compileEpilogue(gemm.gpu, name, bindings,
        { source: sources[key], base, width });
    }
    return new ForwardChain(gemm, kernels);
  }

  /** Whether a forward of N tokens fits: every buffer one storage binding, a row an epilogue's
   * workgroup memory. */
  fits({ n, c, f, heads, t, vocab }) {
    const limit = Math.min(MIN_STORAGE_BINDING,
      this.gemm.gpu.limits?.maxStorageBufferBindingSize ?? MIN_STORAGE_BINDING);
    const hd = c / heads;
    const slices = (n / t) * heads;
    return c > 0 && c <= ROW_MAX && t > 0 && t <= ROW_MAX && Number.isInteger(hd) &&
      Number.isInteger(n / t) &&
      4 * slices * (alignedWords(t * t) + alignedWords(t * Math.max(hd, 4))) <= limit &&
      12 * n * c <= limit && 4 * Math.max(n * f, n * c, c * f) <= limit &&
      4 * n * vocab <= limit && 4 * vocab * c <= limit;
  }

  /** Records the whole forward of `plan` and runs it: one submit, one readback. */
  async run(plan) {
    const rec = new Recording(this.gemm.gpu, this.gemm.pool);
    const made = this.record(rec, plan);
    const out = await rec.run();
    this.runs += 1;
    this.dispatches += rec.steps.length;
    return made.read(out);
  }

  record(rec, plan) {
    const { a, h, w, eps, batch, heads, scale, width: c, hidden: f, vocab, layers } = plan;
    const n = a.e.length;
    const qkv = new QkvLayout(n, c, batch, heads, scale);
    const tail = new BlockLayout(n, c, f);
    const c4 = cdiv(c, 4);
    const m4 = 4 * cdiv(n, 4);
    const { gemm } = this;
    const lut = gemm.lut ? [gemm.lut] : [];
    const [tm, tn] = gemm.tile;
    const up = (name, arr, kind) => rec.upload(name, arr, kind);
    const weight = (name, x, rows, k) => up(name, packKMajor(x.q, 0, rows, k, true));
    let aIn = up('a0', packKMajor(a.q, 0, n, c, false));
    let scalesIn = up('a0.e', exps(0, Int32Array.from([...a.e, ...w.wqkv[0].e])));
    let hIn = up('h0', asWords(h));
    const mergeParams = slot([qkv.t, heads, qkv.hd, c, n, m4, c4, qkv.core.outStride, qkv.rows]);
    const blocks = [];
    for (let l = 0; l < layers; l++) {
      const p = `${l}.`;
      const q = {
        params: up(p + 'qkv.params', qkv.params(), 'uniform'),
        a_in: aIn,
        w_in: weight(p + 'wqkv', w.wqkv[l], 3 * c, c),
        scales_in: scalesIn,
        scales: rec.scratch(p + 'qkv.scales', 2 * qkv.rows * 4),
        p_out: rec.scratch(p + 'p', qkv.core.rows * qkv.t * 4),
      };
      for (const [k, size] of Object.entries(qkv.sizes())) q[k] = rec.output(p + 'qkv.' + k, size);
      qkv.record(rec, this, q);
      const merge = {
        params: up(p + 'merge.params', mergeParams, 'uniform'),
        packed: rec.output(p + 'o.packed', c4 * m4 * 4),
        status: rec.output(p + 'o.status', 2 * n * 4),
        next: up(p + 'o.next', exps(n, w.wo[l].e)),
      };
      rec.dispatch(this.kernels.merge, [span(merge.params, 0, 48), q.acc2, q.status,
        q.qkv_status, merge.packed, merge.status, merge.next], rowsGrid(n));
      const b = {
        params: up(p + 'tail.params', tail.params(eps), 'uniform'),
        a_o: merge.packed,
        b_wo: weight(p + 'wo', w.wo[l], c, c),
        scales_o: merge.next,
        h: hIn,
        g: up(p + 'g2', asWords(plan.g2[l])),
        next: up(p + 'tail.next', exps(n, w.w1[l].e)),
        b_w1: weight(p + 'w1', w.w1[l], f, c),
        b_w2: weight(p + 'w2', w.w2[l], c, f),
        next2: up(p + 'tail.next2', exps(n, w.w2[l].e)),
        h_out: rec.scratch(p + 'h1', n * c * 4),
        relu: rec.scratch(p + 'relu', n * f * 4),
      };
      for (const [k, size] of Object.entries(tail.sizes())) {
        b[k] = rec.output(p + 'tail.' + k, size);
      }
      tail.record(rec, this, b);
      const last = l + 1 === layers;
      const norm = {
        params: up(p + 'norm.params', slot(normParams(n, c, eps)), 'uniform'),
        g: up(p + 'norm.g', asWords(last ? plan.gf : plan.g1[l + 1])),
        packed: rec.output(p + 'a.packed', c4 * m4 * 4),
        status: rec.output(p + 'a.status', 3 * n * 4),
        next: up(p + 'a.next', exps(n, last ? new Int32Array(0) : w.wqkv[l + 1].e)),
        h_out: rec.scratch(p + 'h2', n * c * 4),
      };
      rec.dispatch(this.kernels.norm, [span(norm.params, 0, 32), b.acc2, b.next2, b.h_out,
        norm.g, norm.packed, norm.status, norm.next, norm.h_out], rowsGrid(n));
      blocks.push({ q, merge, b, norm });
      aIn = norm.packed;
      scalesIn = norm.next;
      hIn = norm.h_out;
    }
    const logits = rec.output('logits', n * vocab * 4);
    rec.dispatch(gemm.kernel, [span(up('logits.params', slot([n, vocab, c4, 0]), 'uniform'), 0,
      16), aIn, up('wte', packKMajor(w.wte.q, 0, vocab, c, false)), logits, ...lut],
    [cdiv(vocab, tn), cdiv(n, tm), 1]);
    // What the step chain records its backward on (gpu/step_chain.js): every block's buffers
    // by the names its layouts use, the first block's inputs, and the logits product's.
    return {
      n, c, f, vocab, qkv, tail, blocks, logits,
      a0: blocks.length ? blocks[0].q.a_in : null,
      a0e: blocks.length ? blocks[0].q.scales_in : null,
      h0: blocks.length ? blocks[0].b.h : null,
      read(out) {
        const named = (prefix) => (name, Type) => out.words(prefix + name, Type);
        return {
          blocks: blocks.map((_, l) => ({
            qkv: qkv.read(named(`${l}.qkv.`)),
            o: operandOf(out.words(`${l}.o.status`), out.words(`${l}.o.packed`), 2, c4, m4, n, c),
            tail: tail.read(named(`${l}.tail.`)),
            next: operandOf(out.words(`${l}.a.status`), out.words(`${l}.a.packed`), 3, c4, m4, n,
              c),
          })),
          logits: out.words('logits', Int32Array).slice(),
        };
      },
    };
  }
}
