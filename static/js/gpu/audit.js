// Continuous audit: re-check a live product against exact CPU arithmetic (docs/KERNELS.md).
//
// Mirrors server/daisychain/gpu/audit.py. The gates prove a kernel at start; the audit keeps
// proving it at the shapes training really uses, three ways:
// 1. the structural danger cells, always first: the four corners, the whole first and last row
//    and column, then every crossing of a danger row and a danger column (first, last, both
//    sides of every block edge) -- bugs in tiled kernels live there;
// 2. `samples` cells of a seeded schedule: the permutation x -> (mult x + offset) mod (M N)
//    (offset, mult from the contract PRNG, stream (7,) under `seed`; mult coprime to M N),
//    `samples` further along at each `rotation`, so rotations 0 .. ceil(M N / samples) - 1 check
//    every cell exactly once and every device checks the same cells;
// 3. checksums: the row sums of acc against a @ (b @ 1) and the column sums against
//    (1^T a) @ b, exact in doubles (|sum| <= 2^14 K max(M, N) < 2^53). A single wrong cell
//    changes one row sum and one column sum: it is caught on the call it happens, wherever it
//    lies, and located (its exact value is computed and reported like a sampled cell).

import { below, key } from '../numerics/prng.js';

export const AUDIT_STREAM = 7;

/** First and last index, and both sides of every block edge, sorted and unique. */
export function dangerLines(size, block) {
  const lines = new Set([0, size - 1]);
  for (let edge = block; edge < size; edge += block) {
    lines.add(edge - 1);
    lines.add(edge);
  }
  return [...lines].filter((i) => i >= 0 && i < size).sort((x, y) => x - y);
}

/** Structural danger cells of an (m x n) output, corners first, as [row, col] pairs. */
export function dangerCells(m, n, tile) {
  const ordered = [[0, 0], [0, n - 1], [m - 1, 0], [m - 1, n - 1]];
  for (const i of [0, m - 1]) for (let j = 0; j < n; j++) ordered.push([i, j]);
  for (const j of [0, n - 1]) for (let i = 0; i < m; i++) ordered.push([i, j]);
  const rows = dangerLines(m, tile[0]);
  const cols = dangerLines(n, tile[1]);
  for (const i of rows) for (const j of cols) ordered.push([i, j]);
  const seen = new Set();
  return ordered.filter(([i, j]) => {
    const id = i * n + j;
    if (seen.has(id)) return false;
    seen.add(id);
    return true;
  });
}

function gcd(x, y) {
  while (y) [x, y] = [y, x % y];
  return x;
}

function mulmod(x, y, m) {
  return m <= 2 ** 26 ? (x * y) % m : Number((BigInt(x) * BigInt(y)) % BigInt(m));
}

/** [mult, offset] of the seeded permutation x -> (mult * x + offset) mod cells. */
export function schedule(cells, seed = 0) {
  const [offset, first] = below(key(seed, AUDIT_STREAM), 2, cells);
  let mult = first;
  while (gcd(mult, cells) !== 1) mult = (mult + 1) % cells; // ends: 1 is coprime to all
  return [mult, offset];
}

/** The `rotation`-th group of min(samples, m n) cells of the seeded permutation. */
export function scheduledCells(m, n, samples, seed = 0, rotation = 0) {
  const cells = m * n;
  const count = Math.min(Math.max(samples, 0), cells);
  if (count === 0) return [];
  const [mult, offset] = schedule(cells, seed);
  const start = (rotation * count) % cells;
  const out = [];
  for (let t = 0; t < count; t++) {
    const f = (mulmod(mult, (start + t) % cells, cells) + offset) % cells;
    out.push([Math.floor(f / n), f % n]);
  }
  return out;
}

/** {cells, structural}: the danger cells, then the scheduled cells. */
export function sampleCells(m, n, tile, samples, seed = 0, rotation = 0) {
  const cells = dangerCells(m, n, tile);
  const structural = cells.length;
  cells.push(...scheduledCells(m, n, samples, seed, rotation));
  return { cells, structural };
}

// Element readers of product t of p (operands as sent to the kernel, maybe stored transposed).
function readers(p, t) {
  const { a, b, M, K, N, transA = false, transB = false } = p;
  const ao = t * M * K;
  const bo = t * K * N;
  return {
    A: transA ? (i, k) => a[ao + k * M + i] : (i, k) => a[ao + i * K + k],
    B: transB ? (k, j) => b[bo + j * K + k] : (k, j) => b[bo + k * N + j],
  };
}

function exactCell(p, t, i, j) {
  const { A, B } = readers(p, t);
  let s = 0; // |s| <= 2^14 * K < 2^53: exact
  for (let k = 0; k < p.K; k++) s += A(i, k) * B(k, j);
  return s;
}

/** {badRows, badCols}: rows and columns of product t whose sums in `acc` are not exact. */
export function checksums(p, acc, t = 0) {
  const { M, K, N } = p;
  if (2 ** 14 * K * Math.max(M, N, 1) >= 2 ** 53) {
    throw new RangeError(`audit checksums: ${M} x ${K} x ${N} is too large for exact doubles`);
  }
  const { A, B } = readers(p, t);
  const bRow = new Float64Array(K); // b @ 1
  const aCol = new Float64Array(K); // 1^T a
  for (let k = 0; k < K; k++) {
    let s = 0;
    for (let j = 0; j < N; j++) s += B(k, j);
    bRow[k] = s;
    s = 0;
    for (let i = 0; i < M; i++) s += A(i, k);
    aCol[k] = s;
  }
  const co = t * M * N;
  const badRows = [];
  const gotCols = new Float64Array(N);
  for (let i = 0; i < M; i++) {
    let want = 0;
    for (let k = 0; k < K; k++) want += A(i, k) * bRow[k];
    let got = 0;
    const row = co + i * N;
    for (let j = 0; j < N; j++) {
      got += acc[row + j];
      gotCols[j] += acc[row + j];
    }
    if (got !== want) badRows.push(i);
  }
  const badCols = [];
  for (let j = 0; j < N; j++) {
    let want = 0;
    for (let k = 0; k < K; k++) want += aCol[k] * B(k, j);
    if (gotCols[j] !== want) badCols.push(j);
  }
  return { badRows, badCols };
}

export const MAX_LOCATED = 4096; // cells on failing rows/columns computed for the report

/**
 * Audits product `t` of p = {a, b, M, K, N, transA, transB} (int8 operands as sent to the
 * kernel) against its accumulators `acc` (Int32Array, batch x M x N). Returns
 * {cellsChecked, dangerCells, mismatches: [{row, col, expected, got}], badRows, badCols, ok,
 * describe()}.
 */
export function auditProduct(
  p, acc, { t = 0, samples = 16, seed = 0, rotation = 0, tile = [32, 32], checksum = true } = {},
) {
  const { M, N } = p;
  const mismatches = [];
  if (M === 0 || N === 0) return report(0, 0, mismatches, [], [], checksum);
  const { cells, structural } = sampleCells(M, N, tile, samples, seed, rotation);
  const co = t * M * N;
  for (const [i, j] of cells) {
    const s = exactCell(p, t, i, j);
    const got = acc[co + i * N + j];
    if (got !== s) mismatches.push({ row: i, col: j, expected: s, got });
  }
  let badRows = [];
  let badCols = [];
  if (checksum) {
    ({ badRows, badCols } = checksums(p, acc, t));
    // Locate: a wrong cell lies on a failing row and a failing column, unless its error
    // cancels along one of them (then search that whole line).
    const seen = new Set(mismatches.map((x) => x.row * N + x.col));
    const all = (size) => Array.from({ length: size }, (_, i) => i);
    const rows = badRows.length ? badRows : badCols.length ? all(M) : [];
    const cols = badCols.length ? badCols : badRows.length ? all(N) : [];
    let searched = 0;
    for (const i of rows) {
      for (const j of cols) {
        if (searched >= MAX_LOCATED) break;
        if (seen.has(i * N + j)) continue;
        searched += 1;
        const s = exactCell(p, t, i, j);
        const got = acc[co + i * N + j];
        if (got !== s) mismatches.push({ row: i, col: j, expected: s, got });
      }
    }
  }
  return report(cells.length, structural, mismatches, badRows, badCols, checksum);
}

function report(cellsChecked, dangerCount, mismatches, badRows, badCols, checksum) {
  return {
    cellsChecked,
    dangerCells: dangerCount,
    mismatches,
    badRows,
    badCols,
    ok: mismatches.length === 0 && badRows.length === 0 && badCols.length === 0,
    describe() {
      const sums = checksum ? ' + row/column sums' : '';
      if (this.ok) return `audit ok: ${cellsChecked} cells (${dangerCount} structural)${sums}`;
      const parts = [];
      if (badRows.length || badCols.length) {
        parts.push(
          `checksum: ${badRows.length} row sums (first rows [${badRows.slice(0, 3).join(', ')}]) ` +
            `and ${badCols.length} column sums (first columns [${badCols.slice(0, 3).join(', ')}]) ` +
            'differ',
        );
      }
      if (mismatches.length) {
        const f = mismatches[0];
        parts.push(
          `${mismatches.length} cells differ; first at [${f.row}, ${f.col}]: ` +
            `expected ${f.expected}, got ${f.got}`,
        );
      }
      return `audit FAILED (${cellsChecked} cells checked${sums}): ${parts.join('; ')}`;
    },
  };
}

/**
 * An auditor for productOps: audits every product (each of a batch) and counts; the first
 * failure is kept in `failure` and thrown (a kernel that computes different bits must stop).
 * Each output shape M x N has its own rotation counter (one step per audited matrix), so every
 * cell of every live shape is checked within ceil(M N / samples) matrices of that shape, on top
 * of the checksums. `checksum: false` leaves only the cells (tests show what they miss).
 */
export class Auditor {
  constructor({ samples = 16, tile = [32, 32], seed = 0, checksum = true } = {}) {
    this.samples = samples;
    this.tile = tile;
    this.seed = seed;
    this.checksum = checksum;
    this.rotations = new Map();
    this.products = 0;
    this.cells = 0;
    this.failure = null;
  }

  check(p, acc) {
    const batch = p.batch ?? 1;
    const shapeKey = `${p.M}x${p.N}`;
    for (let t = 0; t < batch; t++) {
      const rotation = this.rotations.get(shapeKey) ?? 0;
      this.rotations.set(shapeKey, rotation + 1);
      const r = auditProduct(p, acc, {
        t, samples: this.samples, seed: this.seed, rotation, tile: this.tile,
        checksum: this.checksum,
      });
      this.cells += r.cellsChecked;
      if (!r.ok) {
        const shape = `${p.M} x ${p.K} x ${p.N}, batch ${t}`;
        this.failure = `product ${this.products} (${shape}): live audit failed: ${r.describe()}`;
        throw new Error(this.failure);
      }
    }
    this.products += 1;
  }
}
