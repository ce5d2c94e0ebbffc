// Answering the model's forward products from one forward-chain run (docs/KERNELS.md "The
// forward chain", "On the page"; mirrors server/daisychain/gpu/replay.py's ForwardReplay).
//
// model/gpt.js computes every operand on the CPU and asks for the products in a fixed order: per
// block qkv, the scores, P v, the output product, the MLP's two; then the logits. The replay
// holds what the chain expects each request to be: its shape, its A and B operands (the GPU-made
// ones, or the weights as uploaded) and the accumulators. A request is answered only when its
// operands equal those bit for bit:
// - a weight that differs from the one uploaded, or a request the chain did not plan for (a
//   shape, a transposition), ends the replay: that product and the rest compute on their own;
// - an operand the GPU made that differs from the host's is a kernel computing different bits:
//   ChainMismatch, and the step stops before the product computed from it is used.

/** The GPU made an operand that differs from the host's: the step must stop. */
export class ChainMismatch extends Error {
  constructor(message) {
    super(message);
    this.name = 'ChainMismatch';
  }
}

function firstDiff(want, got) {
  if (want.length !== got.length) return -2;
  for (let i = 0; i < want.length; i++) if (want[i] !== got[i]) return i;
  return -1;
}

/** The expected products of a forward, in the model's order, from `plan` and chain `out`. */
function expectedProducts(plan, out) {
  const { w, width: C, hidden: F, vocab: V, batch: B, heads: H } = plan;
  const N = plan.a.e.length;
  const T = N / B;
  const hd = C / H;
  const BH = B * H;
  const weight = (x) => ({ q: Int8Array.from(x.q), e: Int32Array.from(x.e), made: false });
  const made = (q, e) => ({ q, e, made: true });
  const list = [];
  let a = made(Int8Array.from(plan.a.q), Int32Array.from(plan.a.e));
  a.made = false; // the host's own first operand, uploaded
  out.blocks.forEach((blk, l) => {
    const { qkv, o, tail, next } = blk;
    const att = qkv.attention;
    list.push(
      { what: `block ${l} qkv`, shape: [N, C, 3 * C, 1, false, false], a, b: weight(w.wqkv[l]),
        acc: qkv.accQkv },
      { what: `block ${l} scores`, shape: [T, hd, T, BH, false, true], a: made(qkv.q8, qkv.qE),
        b: made(qkv.k8, qkv.kE), acc: att.acc1 },
      { what: `block ${l} P v`, shape: [T, T, hd, BH, false, false], a: made(att.p8, att.pE),
        b: made(qkv.v8, qkv.vE), acc: att.acc2 },
      { what: `block ${l} output`, shape: [N, C, C, 1, false, false], a: made(o.q, o.e),
        b: weight(w.wo[l]), acc: tail.accWo },
      { what: `block ${l} mlp in`, shape: [N, C, F, 1, false, false], a: made(tail.b.q, tail.b.e),
        b: weight(w.w1[l]), acc: tail.acc1 },
      { what: `block ${l} mlp out`, shape: [N, F, C, 1, false, false],
        a: made(tail.r.q, tail.r.e), b: weight(w.w2[l]), acc: tail.acc2 },
    );
    a = made(next.q, next.e);
  });
  list.push({ what: 'logits', shape: [N, C, V, 1, false, true], a, b: weight(w.wte),
    acc: out.logits });
  return list;
}

export class ForwardReplay {
  constructor(plan, out) {
    this.expected = expectedProducts(plan, out);
    this.next = 0;
    this.answered = 0;
    this.dropped = null; // why the replay ended early, if it did
  }

  get done() {
    return this.dropped !== null || this.next >= this.expected.length;
  }

  #drop(why) {
    this.dropped = why;
    return null;
  }

  /**
   * The accumulators for the request qmatmul(aq, ae, bq, be, M, K, N, opts), or null (the
   * request computes on its own, and so does every later one). Throws ChainMismatch where an
   * operand the GPU made differs from the host's.
   */
  take(aq, ae, bq, be, M, K, N, { transA = false, transB = false, batch = 1 } = {}) {
    if (this.done) return null;
    const want = this.expected[this.next];
    const shape = [M, K, N, batch, transA, transB];
    if (shape.some((v, i) => v !== want.shape[i])) {
      return this.#drop(`${want.what}: the model asked for (${shape}), the chain made ` +
        `(${want.shape})`);
    }
    for (const [side, x, e] of [['A', aq, ae], ['B', bq, be]]) {
      const part = side === 'A' ? want.a : want.b;
      for (const [name, expect, got] of [['values', part.q, x], ['exponents', part.e, e]]) {
        const at = firstDiff(expect, got);
        if (at === -1) continue;
        const where = at === -2 ? `${got.length} values, not ${expect.length}` :
          `index ${at}: the GPU's ${expect[at]}, the host's ${got[at]}`;
        if (part.made) {
          throw new ChainMismatch(`forward chain: ${want.what}'s ${side} operand ${name} ` +
            `differ from the host's (${where}); the chain's epilogue computes other bits`);
        }
        return this.#drop(`${want.what}: the ${side} operand differs from the one uploaded`);
      }
    }
    this.next += 1;
    this.answered += 1;
    return want.acc;
  }
}

// The backward's products in the model's order (gpt.js gradientSteps): the logits' pair, then
// per block from the last its six pairs; within a pair the order the model yields them. `fw`
// names the forward product whose operand the backward product reads (ForwardReplay's order
// per block: qkv, scores, P v, output, mlp in, mlp out), `side` which of its operands.
const BACKWARD_ORDER = Object.freeze([
  ['w2', [['right', 5, 'a'], ['left', 5, 'b']]],
  ['w1', [['right', 4, 'a'], ['left', 4, 'b']]],
  ['wo', [['right', 3, 'a'], ['left', 3, 'b']]],
  ['pv', [['right', 2, 'a'], ['left', 2, 'b']]],
  ['qk', [['left', 1, 'b'], ['right', 1, 'a']]],
  ['qkv', [['right', 0, 'a'], ['left', 0, 'b']]],
]);
const TRANS_B = Object.freeze({ logits: false, w2: true, w1: true, wo: true, pv: true, qk: false,
  qkv: true });

/**
 * Answering the model's backward products from one step-chain run (docs/KERNELS.md "On the
 * page"; replay.py's BackwardReplay): each product's forward operand must be the one the
 * forward used (else the replay ends and the rest compute on their own), and the host's limbs
 * of the gradient must equal the ones the GPU made (else ChainMismatch: the GPU's gradient
 * drifted from the host's, and the step stops).
 */
export class BackwardReplay {
  constructor(forward, back) {
    const fw = forward.expected;
    const perBlock = 6;
    this.expected = [];
    const add = (pair, name, what, kind, operand) => {
      this.expected.push({ what, kind, pair, operand, trans: kind === 'right' || TRANS_B[name] });
    };
    const logitsFw = fw[fw.length - 1];
    add(back.logits, 'logits', 'logits', 'left', logitsFw.b);
    add(back.logits, 'logits', 'logits', 'right', logitsFw.a);
    for (let l = back.blocks.length - 1; l >= 0; l--) {
      for (const [name, order] of BACKWARD_ORDER) {
        for (const [kind, at, side] of order) {
          add(back.blocks[l][name], name, `block ${l} ${name}`, kind, fw[l * perBlock + at][side]);
        }
      }
    }
    this.next = 0;
    this.answered = 0;
    this.dropped = null;
  }

  get done() {
    return this.dropped !== null || this.next >= this.expected.length;
  }

  /**
   * The stacked accumulators for a backward product (kind 'left': gradMatmulLeft, forward
   * operand `x` = B with exponents `xe`; 'right': gradMatmulRight, `x` = A; `limbs` the host's
   * {hi, (mid,) lo, e}; `dims` [M, K, N, batch, limbCount, trans]), or null (the replay ends,
   * and that product and every later one compute on their own). Throws ChainMismatch where
   * the host's limbs differ from the GPU's.
   */
  take(kind, x, xe, limbs, dims) {
    if (this.done) return null;
    const want = this.expected[this.next];
    const { pair } = want;
    const [M, K, N, batch, count, trans] = dims;
    const L = pair.limbs;
    // the gradient is batch x m x n: (M, K) for dA = g @ B (k = N), (K, N) for dB = A @ g
    const [m, n, out] = kind === 'left' ? [M, K, M * N] : [K, N, M * N];
    const fits = kind === want.kind && count === L && trans === want.trans &&
      pair.rows.e.length === batch * m && pair.cols.e.length === batch * n &&
      (kind === 'left' ? pair.accA : pair.accB).length === batch * L * out;
    if (!fits) {
      this.dropped = `${want.what} ${want.kind}: the model asked for another product`;
      return null;
    }
    if (firstDiff(want.operand.q, x) !== -1 || firstDiff(want.operand.e, xe) !== -1) {
      this.dropped = `${want.what} ${kind}: its forward operand is not the forward's`;
      return null;
    }
    const made = kind === 'left' ? pair.rows : pair.cols;
    const how = kind === 'left' ? 'by rows' : 'by columns';
    const mine = L === 3 ? [limbs.hi, limbs.mid, limbs.lo] : [limbs.hi, limbs.lo];
    for (let l = 0; l < L; l++) {
      const at = firstDiff(made.values[l], mine[l]);
      if (at !== -1) {
        throw new ChainMismatch(`step chain: ${want.what}'s gradient limb ${l} (${how}) ` +
          `differs from the host's at index ${at}: the GPU's ${made.values[l][at]}, the ` +
          `host's ${mine[l][at]}; the chain's epilogues compute other bits`);
      }
    }
    const at = firstDiff(made.e, limbs.e);
    if (at !== -1) {
      throw new ChainMismatch(`step chain: ${want.what}'s gradient exponents (${how}) differ ` +
        `from the host's at index ${at}: the GPU's ${made.e[at]}, the host's ${limbs.e[at]}`);
    }
    this.next += 1;
    this.answered += 1;
    return kind === 'left' ? pair.accA : pair.accB;
  }
}
