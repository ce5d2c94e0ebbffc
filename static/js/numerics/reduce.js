// Pinned float32 reductions (docs/NUMERICS.md section 4).
//
// Mirrors server/daisychain/numerics/reduce.py: pad to the next power of two with +0.0, then add
// the second half onto the first half until one element is left. The work arrays are
// Float32Arrays, so every store is the correctly rounded float32 sum (the same as Math.fround).
// Padding matters for bits: x + (+0) turns -0 into +0, so the padded lanes are really added.

let work = new Float32Array(1024);
function workBuffer(n) {
  if (work.length < n) work = new Float32Array(Math.max(n, 2 * work.length));
  return work;
}

/** The next power of two >= n (1 for n <= 1). */
export function nextPow2(n) {
  let w = 1;
  while (w < n) w *= 2;
  return w;
}

/** Pinned tree sum of x[offset], x[offset + stride], ... (n elements) as a float32 number. */
export function treeSumStrided(x, offset, n, stride) {
  if (n <= 0) throw new RangeError('treeSum over an empty axis');
  const width = nextPow2(n);
  if (width === 1) return x[offset]; // one element: no add at all, -0 stays -0
  // First level straight from the input (lanes >= n are the +0 padding).
  let w = width >> 1;
  const y = workBuffer(w);
  for (let i = 0; i < w; i++) {
    const j = i + w;
    y[i] = x[offset + i * stride] + (j < n ? x[offset + j * stride] : 0);
  }
  while (w > 1) {
    w >>= 1;
    for (let i = 0; i < w; i++) y[i] = y[i] + y[i + w];
  }
  return y[0];
}

/** Pinned tree sum of a whole Float32Array (or a subarray). */
export function treeSum(x) {
  return treeSumStrided(x, 0, x.length, 1);
}

/** Per-row pinned sums of a row-major (rows x cols) matrix (Python tree_sum(x, axis=-1)). */
export function treeSumLast(x, rows, cols, out = new Float32Array(rows)) {
  for (let r = 0; r < rows; r++) out[r] = treeSumStrided(x, r * cols, cols, 1);
  return out;
}

/**
 * Pinned sums over axis 0 of a row-major (rows x cols) matrix, one per column
 * (Python tree_sum_rows): whole rows are added level by level, so the inner loops run along
 * contiguous memory.
 */
export function treeSumRows(x, rows, cols, out = new Float32Array(cols)) {
  if (rows <= 0) throw new RangeError('treeSumRows over an empty axis');
  const width = nextPow2(rows);
  if (width === 1) {
    out.set(x.subarray(0, cols));
    return out;
  }
  let w = width >> 1;
  const y = workBuffer(w * cols);
  for (let i = 0; i < w; i++) {
    const o = i * cols;
    const j = i + w;
    if (j < rows) {
      const p = j * cols;
      for (let c = 0; c < cols; c++) y[o + c] = x[o + c] + x[p + c];
    } else {
      for (let c = 0; c < cols; c++) y[o + c] = x[o + c] + 0;
    }
  }
  while (w > 1) {
    w >>= 1;
    const n = w * cols;
    for (let i = 0; i < n; i++) y[i] = y[i] + y[i + n];
  }
  out.set(y.subarray(0, cols));
  return out;
}

/** Left-to-right float32 sum of a short list, starting from +0.0 (per-tensor partial sums). */
export function sequentialSum(values) {
  let total = 0;
  for (const v of values) total = Math.fround(total + Math.fround(v));
  return total;
}
