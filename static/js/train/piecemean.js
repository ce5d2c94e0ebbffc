// The mean gradient of one contributor over its lane pieces, in training.mean_gradient's float32
// order (docs/PROTOCOL.md, "Gradient chunks"): one piece's own gradient and loss as they are;
// more than one combine as g = g0 * f32(r0); g = g + g1 * f32(r1); ...; g = g / f32(count), the
// loss the same way, every operation one float32 rounding. The per-step compute (p2p/modelreplica.js)
// adds its pieces as they arrive (its early chunks read the running sum), an outer round's
// inner step (outer.js) all at once: both go through this one accumulator, so the two cannot
// round differently.

const f32 = Math.fround;

export class PieceMean {
  /** `count`: the contributor's sequences (its pieces' rows); `pieces`: how many will come. */
  constructor(count, pieces) {
    this.count = count;
    this.pieces = pieces;
    this.loss = 0;
    this.sum = null; // with more than one piece: the weighted sum so far; else the one gradient
  }

  /** Adds a piece of `rows` rows: its mean `loss` and its gradient `g` (a Float32Array). */
  add(loss, g, rows) {
    if (this.pieces === 1) {
      this.sum = g;
      this.loss = loss;
      return;
    }
    const w = f32(rows);
    if (this.sum === null) {
      this.sum = new Float32Array(g.length);
      for (let i = 0; i < g.length; i++) this.sum[i] = g[i] * w;
      this.loss = f32(loss * w);
    } else {
      const acc = this.sum;
      for (let i = 0; i < g.length; i++) acc[i] = acc[i] + f32(g[i] * w);
      this.loss = f32(this.loss + f32(loss * w));
    }
  }

  /** {loss, values}: the mean over every piece added (values null: none was). */
  result() {
    if (this.pieces === 1 || this.sum === null) return { loss: this.loss, values: this.sum };
    const cnt = f32(this.count);
    const acc = this.sum;
    for (let i = 0; i < acc.length; i++) acc[i] = acc[i] / cnt;
    return { loss: f32(this.loss / cnt), values: acc };
  }
}
