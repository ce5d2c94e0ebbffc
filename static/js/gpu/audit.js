// Continuous audit: re-check sampled output cells of a live product against exact CPU dots.
//
// Mirrors server/daisychain/gpu/audit.py. The gates prove a kernel at start; the audit keeps
// proving it at the shapes training really uses. Bugs in tiled kernels live at structure
// boundaries, so the sample ALWAYS starts with the structural danger cells, in this order: the
// four corners, the whole first and last row and column, then every crossing of a danger row
// and a danger column (first, last, both sides of every block edge). Then `samples` random cells
// from the contract PRNG (stream (7,) under `seed`), so every device audits the same cells.

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

/** {cells, structural}: the danger cells, then `samples` random cells. */
export function sampleCells(m, n, tile, samples, seed = 0) {
  const cells = dangerCells(m, n, tile);
  const structural = cells.length;
  if (samples > 0) {
    for (const f of below(key(seed, AUDIT_STREAM), samples, m * n)) {
      cells.push([Math.floor(f / n), f % n]);
    }
  }
  return { cells, structural };
}

/**
 * Audits product `t` of p = {a, b, M, K, N, transA, transB} (int8 operands as sent to the
 * kernel) against its accumulators `acc` (Int32Array, batch x M x N). Returns
 * {cellsChecked, dangerCells, mismatches: [{row, col, expected, got}], ok, describe()}.
 */
export function auditProduct(p, acc, { t = 0, samples = 16, seed = 0, tile = [32, 32] } = {}) {
  const { a, b, M, K, N, transA = false, transB = false } = p;
  const mismatches = [];
  if (M === 0 || N === 0) return report(0, 0, mismatches);
  const { cells, structural } = sampleCells(M, N, tile, samples, seed);
  const ao = t * M * K;
  const bo = t * K * N;
  const co = t * M * N;
  for (const [i, j] of cells) {
    let s = 0; // |s| <= 2^14 * K < 2^53: exact
    for (let k = 0; k < K; k++) {
      const x = transA ? a[ao + k * M + i] : a[ao + i * K + k];
      const y = transB ? b[bo + j * K + k] : b[bo + k * N + j];
      s += x * y;
    }
    const got = acc[co + i * N + j];
    if (got !== s) mismatches.push({ row: i, col: j, expected: s, got });
  }
  return report(cells.length, structural, mismatches);
}

function report(cellsChecked, dangerCount, mismatches) {
  return {
    cellsChecked,
    dangerCells: dangerCount,
    mismatches,
    ok: mismatches.length === 0,
    describe() {
      if (this.ok) return `audit ok: ${cellsChecked} cells (${dangerCount} structural)`;
      const f = mismatches[0];
      return (
        `audit FAILED: ${mismatches.length} of ${cellsChecked} cells differ; first at ` +
        `[${f.row}, ${f.col}]: expected ${f.expected}, got ${f.got}`
      );
    },
  };
}

/**
 * An auditor for productOps: audits every product (each of a batch) and counts; the first
 * failure is kept in `failure` and thrown (a kernel that computes different bits must stop).
 */
export class Auditor {
  constructor({ samples = 16, tile = [32, 32] } = {}) {
    this.samples = samples;
    this.tile = tile;
    this.products = 0;
    this.cells = 0;
    this.failure = null;
  }

  check(p, acc) {
    const batch = p.batch ?? 1;
    for (let t = 0; t < batch; t++) {
      const seed = this.products;
      const r = auditProduct(p, acc, { t, samples: this.samples, seed, tile: this.tile });
      this.cells += r.cellsChecked;
      if (!r.ok) {
        const shape = `${p.M} x ${p.K} x ${p.N}, batch ${t}`;
        this.failure = `product ${this.products} (${shape}): ${r.describe()}`;
        throw new Error(this.failure);
      }
    }
    this.products += 1;
  }
}
