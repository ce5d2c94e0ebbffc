// Early chunks: a contributor's chunks leave as soon as the backward has produced them. Mirror
// of server/daisychain/p2p/early.py (docs/PROTOCOL.md, "Early chunks").
//
// The backward reports each parameter's gradient once it is final (the last layers first, the
// embeddings last: gpt.js's onGrad, relayed by the training worker as 'grad' messages), and the
// flat gradient is in parameter order, so the chunks at its end are final long before chunk 0.
// ChunkWatch follows the last lane piece's backward and encodes each chunk of the roster the
// moment every parameter it covers is in; `emit(k, payload)` hands it to the protocol machine
// as compute-partial. Values are the mean gradient's exactly: one piece's own gradient, or
// fround(fround(acc + fround(g * r)) / count) elementwise (replica.js compute's operations). A
// chunk final only with the last parameter is not emitted (compute-done follows at once).

import { paramShapes } from '../model/params.js';
import { chunkSlice } from './allreduce.js';
import { encode, nBlocks } from './codec.js';

export class ChunkWatch {
  constructor(model, shares, count, emit) {
    this.count = Math.fround(count);
    this.emit = emit;
    this.where = new Map();
    let pos = 0;
    for (const [name, shape] of paramShapes(model)) {
      const size = shape.reduce((a, b) => a * b, 1);
      this.where.set(name, [pos, pos + size]);
      pos += size;
    }
    const total = nBlocks(pos);
    this.slices = new Map();
    this.needs = new Map();
    for (let k = 0; k < shares.length; k++) {
      const [start, end] = chunkSlice(total, shares, k);
      if (start === end) continue;
      this.slices.set(k, [start, end]);
      const needs = [];
      for (const [name, [a, b]] of this.where) if (a < end && b > start) needs.push(name);
      this.needs.set(k, needs);
    }
    this.payloads = new Map(); // chunk -> its bytes, early or not
    this.early = []; // the chunks emitted early, in the order they left
  }

  /** The gradient hook of the last piece: `acc` the earlier pieces' weighted sum, or null. */
  hook(acc, weight) {
    const grads = new Map();
    const w = Math.fround(weight);
    return (name, grad) => {
      if (grads.has(name)) return; // a recomputed backward (a device rebuilt) reports again
      grads.set(name, grad);
      const final = grads.size === this.where.size; // the last parameter: compute-done is next
      for (const [k, needs] of this.needs) {
        if (this.payloads.has(k) || !needs.every((n) => grads.has(n))) continue;
        this.payloads.set(k, encode(this.values(k, grads, acc, w)).payload);
        if (!final) {
          this.early.push(k);
          this.emit(k, this.payloads.get(k));
        }
      }
    };
  }

  values(k, grads, acc, w) {
    const [start, end] = this.slices.get(k);
    const out = new Float32Array(end - start); // the flat vector's zero padding
    for (const name of this.needs.get(k)) {
      const [a, b] = this.where.get(name);
      const lo = Math.max(a, start);
      const hi = Math.min(b, end);
      out.set(grads.get(name).subarray(lo - a, hi - a), lo - start);
    }
    if (acc === null) return out; // one piece: its own gradient is the mean
    for (let i = 0; i < out.length; i++) {
      out[i] = Math.fround(acc[start + i] + Math.fround(out[i] * w)) / this.count;
    }
    return out;
  }

  /** Every roster chunk's bytes (empty for an empty chunk), encoding what was not reported
   * from the whole mean `flat`. */
  chunkPayloads(n, flat) {
    const out = [];
    for (let k = 0; k < n; k++) {
      if (!this.slices.has(k)) {
        out.push(new Uint8Array(0));
        continue;
      }
      if (!this.payloads.has(k)) {
        const [start, end] = this.slices.get(k);
        this.payloads.set(k, encode(flat.subarray(start, end)).payload);
      }
      out.push(this.payloads.get(k));
    }
    return out;
  }
}
