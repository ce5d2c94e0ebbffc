"""Continuous audit: re-check a live product against exact CPU arithmetic (docs/KERNELS.md).

The gates prove a kernel at start; the audit keeps proving it at the shapes training really uses.
Three checks, all against exact integer arithmetic on the int8 operands (small float32 BLAS
products whose every partial sum stays below 2^24, ``_exact_parts``):

1. **Structural danger cells**, always first, in this order: the four corners, then the WHOLE
   first and last row and first and last column, then every crossing of a danger row and a
   danger column, where danger rows are the first and last row and both sides of every block
   (workgroup tile) edge, and likewise for columns. Bugs in tiled kernels live there.
2. **Rotating sampled cells**: ``samples`` cells from a seeded schedule that walks a permutation
   of all ``m * n`` cells, ``samples`` further at each ``rotation``; rotations ``0 .. ceil(m n /
   samples) - 1`` check every cell exactly once. The permutation ``f(x) = (mult * x + offset) mod
   m n`` takes ``offset`` and ``mult`` (made coprime to ``m n``) from the contract PRNG (stream
   ``(7,)`` under ``seed``), so every device audits the same cells for the same seed and rotation.
3. **Checksums**: the row sums ``out @ 1`` against ``a @ (b @ 1)`` and the column sums ``1^T out``
   against ``(1^T a) @ b``, exact, O(MK + KN + MN) -- cheap next to the O(MNK) product.
   A single wrong cell, by any amount, changes exactly one row sum and one column sum, so it is
   caught on every call wherever it lies; the crossing of the failing rows and columns locates it
   (its exact value is then computed and reported like a sampled cell). Only errors that cancel
   in every row sum AND every column sum (e.g. +d, -d, -d, +d on the corners of a rectangle)
   pass the checksums; the rotating cells reach those in at most ``ceil(m n / samples)`` calls.

Why all three: cells 1 and 2 alone cannot see an interior cell that is neither structural nor in
this call's sample (with 16 samples a one-unit error in a 256 x 2048 product escapes a given call
with probability 1 - 16 / 524288); the checksums see it at once.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from daisychain.numerics import prng
from daisychain.numerics.gemm import int_matmul

AUDIT_STREAM = 7  # the schedule comes from prng.key(seed, 7) (NUMERICS.md section 7)
INT32_EXACT_K = (1 << 17) - 1  # |dot| <= 2^14 K < 2^31: int32 sums are exact up to this K
MAX_LOCATED = 4096  # cells on failing rows/columns whose exact value is computed for the report
Int8Array = npt.NDArray[np.int8]
# Operands the audit reads: int8, or float32 holding int8 values (what the model's ops hold;
# the values are the same integers, so no conversion back to int8 is needed to check them)
Operand = npt.NDArray[np.int8] | npt.NDArray[np.float32]
Int32Array = npt.NDArray[np.int32]


@dataclass(frozen=True)
class Mismatch:
    row: int
    col: int
    expected: int
    got: int


@dataclass(frozen=True)
class AuditReport:
    cells_checked: int
    danger_cells: int
    mismatches: list[Mismatch] = field(default_factory=list)
    bad_rows: list[int] = field(default_factory=list)  # row sums that differ (checksum)
    bad_cols: list[int] = field(default_factory=list)  # column sums that differ (checksum)
    checksum: bool = False  # whether the row/column sums were compared

    @property
    def ok(self) -> bool:
        return not (self.mismatches or self.bad_rows or self.bad_cols)

    def describe(self) -> str:
        sums = " + row/column sums" if self.checksum else ""
        if self.ok:
            return f"audit ok: {self.cells_checked} cells ({self.danger_cells} structural){sums}"
        parts = []
        if self.bad_rows or self.bad_cols:
            parts.append(
                f"checksum: {len(self.bad_rows)} row sums (first rows {self.bad_rows[:3]}) and "
                f"{len(self.bad_cols)} column sums (first columns {self.bad_cols[:3]}) differ"
            )
        if self.mismatches:
            first = self.mismatches[0]
            parts.append(
                f"{len(self.mismatches)} cells differ; first at [{first.row}, {first.col}]: "
                f"expected {first.expected}, got {first.got}"
            )
        return f"audit FAILED ({self.cells_checked} cells checked{sums}): " + "; ".join(parts)


def danger_lines(size: int, block: int) -> list[int]:
    """First and last index, and both sides of every block edge, sorted and unique."""
    lines = {0, size - 1}
    for edge in range(block, size, block):
        lines.update((edge - 1, edge))
    return sorted(i for i in lines if 0 <= i < size)


def danger_cells(m: int, n: int, tile: tuple[int, int]) -> list[tuple[int, int]]:
    """Structural danger cells of an (m, n) output, corners first."""
    ordered = [(0, 0), (0, n - 1), (m - 1, 0), (m - 1, n - 1)]
    for i in (0, m - 1):
        ordered += [(i, j) for j in range(n)]
    for j in (0, n - 1):
        ordered += [(i, j) for i in range(m)]
    ordered += [(i, j) for i in danger_lines(m, tile[0]) for j in danger_lines(n, tile[1])]
    return list(dict.fromkeys(ordered))  # unique, first occurrence keeps its place


@functools.lru_cache(maxsize=1024)
def schedule(cells: int, seed: int = 0) -> tuple[int, int]:
    """(mult, offset) of the seeded permutation ``x -> (mult * x + offset) mod cells``."""
    offset, mult = (int(v) for v in prng.below(prng.key(seed, AUDIT_STREAM), 2, cells))
    while math.gcd(mult, cells) != 1:  # ends: mult = 1 is coprime to everything
        mult = (mult + 1) % cells
    return mult, offset


def scheduled_cells(
    m: int, n: int, samples: int, seed: int = 0, rotation: int = 0
) -> list[tuple[int, int]]:
    """The ``rotation``-th group of ``min(samples, m n)`` cells of the seeded permutation."""
    cells = m * n
    count = min(max(samples, 0), cells)
    if count == 0:
        return []
    mult, offset = schedule(cells, seed)
    start = rotation * count
    flat = [(mult * ((start + t) % cells) + offset) % cells for t in range(count)]
    return [(f // n, f % n) for f in flat]


def sample_cells(
    m: int, n: int, tile: tuple[int, int], samples: int, seed: int = 0, rotation: int = 0
) -> tuple[list[tuple[int, int]], int]:
    """(cells, number of structural ones): the danger cells, then the scheduled cells."""
    cells = danger_cells(m, n, tile)
    return cells + scheduled_cells(m, n, samples, seed, rotation), len(cells)


@functools.lru_cache(maxsize=256)
def _danger_index(
    m: int, n: int, tile: tuple[int, int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(rows, cols) of ``danger_cells`` as arrays, cached: live shapes repeat every step."""
    cells = np.array(danger_cells(m, n, tile), dtype=np.int64).reshape(-1, 2)
    rows, cols = cells[:, 0].copy(), cells[:, 1].copy()
    rows.setflags(write=False)
    cols.setflags(write=False)
    return rows, cols


@dataclass(frozen=True)
class _Layout:
    """Where ``_exact_parts`` finds each danger cell of an (m, n) output: on an edge row (from
    the edge rows of ``a`` times ``b``), on an edge column (``a`` times the edge columns of
    ``b``) or at a crossing of inner danger lines (danger rows times danger columns). A pure
    function of the shape and tile, so it is built once per live shape, not once per product."""

    cells: int
    edge_r: npt.NDArray[np.int64]
    edge_c: npt.NDArray[np.int64]
    lines_r: npt.NDArray[np.int64]
    lines_c: npt.NDArray[np.int64]
    on_row: npt.NDArray[np.bool_]
    on_row_edge: npt.NDArray[np.int64]
    on_row_cols: npt.NDArray[np.int64]
    on_col: npt.NDArray[np.bool_]
    on_col_rows: npt.NDArray[np.int64]
    on_col_edge: npt.NDArray[np.int64]
    rest: npt.NDArray[np.bool_]
    rest_r: npt.NDArray[np.int64]
    rest_c: npt.NDArray[np.int64]


@functools.lru_cache(maxsize=256)
def _layout(m: int, n: int, tile: tuple[int, int]) -> _Layout:
    rows, cols = _danger_index(m, n, tile)
    lines_r = np.array(danger_lines(m, tile[0]), dtype=np.int64)
    lines_c = np.array(danger_lines(n, tile[1]), dtype=np.int64)
    on_row = (rows == 0) | (rows == m - 1)
    on_col = ~on_row & ((cols == 0) | (cols == n - 1))
    rest = ~on_row & ~on_col  # crossings of a danger row and a danger column
    pos_r = np.full(m, -1, dtype=np.int64)
    pos_r[lines_r] = np.arange(len(lines_r))
    pos_c = np.full(n, -1, dtype=np.int64)
    pos_c[lines_c] = np.arange(len(lines_c))
    return _Layout(
        cells=len(rows),
        edge_r=np.array([0, m - 1], dtype=np.int64),
        edge_c=np.array([0, n - 1], dtype=np.int64),
        lines_r=lines_r,
        lines_c=lines_c,
        on_row=on_row,
        on_row_edge=np.where(rows[on_row] == 0, 0, 1),
        on_row_cols=cols[on_row],
        on_col=on_col,
        on_col_rows=rows[on_col],
        on_col_edge=np.where(cols[on_col] == 0, 0, 1),
        rest=rest,
        rest_r=pos_r[rows[rest]],
        rest_c=pos_c[cols[rest]],
    )


def _exact_cells(
    a: Operand, b: Operand, rows: npt.NDArray[np.int64], cols: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    # (S, K) * (S, K) summed exactly: in int32 while |dot| <= 2^14 K < 2^31, else in int64.
    wide = np.int32 if a.shape[1] <= INT32_EXACT_K else np.int64
    exact = np.einsum("sk,sk->s", a[rows].astype(wide), b[:, cols].T.astype(wide), dtype=wide)
    result: npt.NDArray[np.int64] = exact.astype(np.int64)
    return result


def _limbs(v: npt.NDArray[np.float32], axis: int) -> npt.NDArray[np.float32]:
    """Integer-valued ``v`` as signed base-128 digits stacked on a new ``axis``: ``v = sum_i
    d_i 128^i`` with |d_i| <= 64, as many digits as ``v`` needs. Each digit times an int8
    operand summed over K <= 1024 stays below 2^24, so float32 BLAS multiplies them exactly."""
    digits = []
    rest = v
    while True:
        high = np.round(rest / np.float32(128))  # exact: a power-of-two division, ties to even
        digits.append(rest - np.float32(128) * high)  # in [-64, 64]
        rest = high
        if not np.any(rest):
            return np.stack(digits, axis=axis)


def _exact_parts(
    a: Operand, b: Operand, tile: tuple[int, int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For every slice of (..., M, K) @ (..., K, N): the exact values of ``danger_cells(m, n,
    tile)`` in that order, the exact row sums ``a @ (b @ 1)`` and column sums ``(1^T a) @ b``.

    Three small float32 products, exact by construction (``int_matmul``: int8-valued operands,
    K cut in chunks of 1024): ``a`` times [the two edge columns of ``b``, the base-128 digits of
    ``b``'s row sums]; [the two edge rows of ``a``, the digits of ``a``'s column sums] times
    ``b``; the danger rows of ``a`` times the danger columns of ``b``. No per-cell gathered dot
    and no wide copy of either operand: on a 1024 x 768 output (6,432 danger cells) this is a
    fraction of a gathered int32 dot per cell."""
    m, n = a.shape[-2], b.shape[-1]
    lay = _layout(m, n, tile)
    af = np.asarray(a, dtype=np.float32)  # int8 values, exact (no copy when already float32)
    bf = np.asarray(b, dtype=np.float32)
    row_digits = _limbs(bf.sum(axis=-1), axis=-1)  # (..., K, D): b @ 1, exact below 2^24
    col_digits = _limbs(af.sum(axis=-2), axis=-2)  # (..., D, K): 1^T a
    right = np.concatenate([bf[..., :, lay.edge_c], row_digits], axis=-1)  # (..., K, 2 + D)
    left = np.concatenate([af[..., lay.edge_r, :], col_digits], axis=-2)  # (..., 2 + D, K)
    by_cols = int_matmul(af, right)  # (..., M, 2 + D)
    by_rows = int_matmul(left, bf)  # (..., 2 + D, N)
    cross = int_matmul(af[..., lay.lines_r, :], bf[..., :, lay.lines_c])
    weights = np.float64(128) ** np.arange(row_digits.shape[-1])
    want_rows = by_cols[..., 2:] @ weights  # float64, exact: |sum| < 2^53
    weights = np.float64(128) ** np.arange(col_digits.shape[-2])
    want_cols = np.swapaxes(by_rows[..., 2:, :], -1, -2) @ weights
    danger = np.empty((*a.shape[:-2], lay.cells), dtype=np.float64)
    danger[..., lay.on_row] = by_rows[..., lay.on_row_edge, lay.on_row_cols]
    danger[..., lay.on_col] = by_cols[..., lay.on_col_rows, lay.on_col_edge]
    danger[..., lay.rest] = cross[..., lay.rest_r, lay.rest_c]
    return danger.astype(np.int64), want_rows.astype(np.int64), want_cols.astype(np.int64)


def _bad_sums(
    out: Int32Array, want_rows: npt.NDArray[np.int64], want_cols: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which row and column sums of ``out`` differ from the exact ones, compared modulo 2^32:
    ``out`` is summed in int32, which wraps (three times cheaper than widening every cell to
    int64), and the exact sums are wrapped the same way. Nothing is lost for the checksums'
    purpose: a wrong cell differs from the right one by 0 < |d| < 2^32 (both are int32), so
    it changes its row and column sums modulo 2^32 too."""
    got_rows = out.sum(axis=-1, dtype=np.int32)
    got_cols = out.sum(axis=-2, dtype=np.int32)
    return got_rows != want_rows.astype(np.int32), got_cols != want_cols.astype(np.int32)


def checksums(
    a: Int8Array, b: Int8Array, out: Int32Array
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """(rows, columns) whose sums in ``out`` differ from the exact sums of ``a @ b``
    (|row sum| <= 2^14 K N, |column sum| <= 2^14 K M: computed exactly, ``_exact_parts``)."""
    _, want_rows, want_cols = _exact_parts(a, b, (a.shape[0], b.shape[1]))
    bad_rows, bad_cols = _bad_sums(out, want_rows, want_cols)
    return np.nonzero(bad_rows)[0], np.nonzero(bad_cols)[0]


def audit(
    a: Operand,
    b: Operand,
    out: Int32Array,
    samples: int = 64,
    *,
    seed: int = 0,
    rotation: int = 0,
    tile: tuple[int, int] = (32, 32),
    checksum: bool = True,
) -> AuditReport:
    """Check ``out = a @ b``: danger cells, ``samples`` scheduled cells, row/column sums."""
    m, n = a.shape[0], b.shape[1]
    if out.shape != (m, n):
        raise ValueError(f"audit: output shape {out.shape} is not {(m, n)}")
    if m == 0 or n == 0:
        return AuditReport(0, 0, checksum=checksum)
    danger_rows, danger_cols = _danger_index(m, n, tile)
    scheduled = np.array(scheduled_cells(m, n, samples, seed, rotation), dtype=np.int64)
    scheduled = scheduled.reshape(-1, 2)
    rows = np.concatenate([danger_rows, scheduled[:, 0]])
    cols = np.concatenate([danger_cols, scheduled[:, 1]])
    structural = len(danger_rows)
    danger, want_rows, want_cols = _exact_parts(a, b, tile)
    expected = np.concatenate([danger, _exact_cells(a, b, scheduled[:, 0], scheduled[:, 1])])
    got = out[rows, cols].astype(np.int64)
    bad = np.nonzero(expected != got)[0]
    mismatches = [Mismatch(int(rows[s]), int(cols[s]), int(expected[s]), int(got[s])) for s in bad]
    bad_rows: list[int] = []
    bad_cols: list[int] = []
    if checksum:
        r, c = _bad_sums(out, want_rows, want_cols)
        bad_rows, bad_cols = [int(i) for i in np.nonzero(r)[0]], [int(j) for j in np.nonzero(c)[0]]
        # Locate: a wrong cell lies on a failing row and a failing column, unless its error
        # cancels along one of them (then search that whole line); compute those cells exactly,
        # up to MAX_LOCATED of them (only ever on the failure path).
        seen = {(x.row, x.col) for x in mismatches}
        search_rows = bad_rows or (list(range(m)) if bad_cols else [])
        search_cols = bad_cols or (list(range(n)) if bad_rows else [])
        candidates = ((i, j) for i in search_rows for j in search_cols if (i, j) not in seen)
        pairs = list(itertools.islice(candidates, MAX_LOCATED))
        if pairs:
            pr = np.array([p[0] for p in pairs], dtype=np.int64)
            pc = np.array([p[1] for p in pairs], dtype=np.int64)
            want, have = _exact_cells(a, b, pr, pc), out[pr, pc].astype(np.int64)
            mismatches += [
                Mismatch(int(pr[s]), int(pc[s]), int(want[s]), int(have[s]))
                for s in np.nonzero(want != have)[0]
            ]
    return AuditReport(len(rows), structural, mismatches, bad_rows, bad_cols, checksum)


def first_failing_slice(
    a: Operand,
    b: Operand,
    out: Int32Array,
    samples: int = 64,
    *,
    seed: int = 0,
    rotation: int = 0,
    tile: tuple[int, int] = (32, 32),
) -> tuple[int, ...] | None:
    """``audit`` of every 2-D slice of a batched product at once: the batch index of the first
    slice that fails any check (danger cells, the ``rotation``-th scheduled cells, row and column
    sums), or None. ``a`` (..., M, K), ``b`` (..., K, N) and ``out`` (..., M, N) share their
    leading axes. Vectorized over the batch: a product of 32 attention heads costs one audit's
    Python, not 32 (the cells and sums checked are exactly ``audit``'s for each slice, so the
    caller re-runs ``audit`` on the failing slice for the report)."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    lead = a.shape[:-2]
    if out.shape != (*lead, m, n) or b.shape[:-2] != lead:
        raise ValueError(f"audit: shapes {a.shape} @ {b.shape} -> {out.shape} do not match")
    if m == 0 or n == 0 or not lead or math.prod(lead) == 0:
        return None
    danger_rows, danger_cols = _danger_index(m, n, tile)
    scheduled = np.array(scheduled_cells(m, n, samples, seed, rotation), dtype=np.int64)
    s_rows, s_cols = scheduled.reshape(-1, 2)[:, 0], scheduled.reshape(-1, 2)[:, 1]
    wide = np.int32 if k <= INT32_EXACT_K else np.int64
    # the scheduled cells, (..., S, K) * (..., S, K) summed exactly, as _exact_cells does
    sampled = np.einsum(
        "...sk,...sk->...s",
        a[..., s_rows, :].astype(wide),
        np.swapaxes(b[..., :, s_cols], -1, -2).astype(wide),
        dtype=wide,
    ).astype(np.int64)
    danger, want_rows, want_cols = _exact_parts(a, b, tile)
    bad = (danger != out[..., danger_rows, danger_cols]).any(axis=-1)
    bad |= (sampled != out[..., s_rows, s_cols]).any(axis=-1)
    bad_rows, bad_cols = _bad_sums(out, want_rows, want_cols)
    bad |= bad_rows.any(axis=-1) | bad_cols.any(axis=-1)
    failing = np.argwhere(bad)
    return tuple(int(i) for i in failing[0]) if len(failing) else None
