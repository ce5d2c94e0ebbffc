"""Continuous audit: re-check sampled output cells of a live product against exact CPU dots.

The gates prove a kernel at start; the audit keeps proving it at the shapes training really uses.
Bugs in tiled kernels live at structure boundaries, so the sample ALWAYS starts with the
structural danger cells, in this order: the four corners, then the WHOLE first and last row and
first and last column, then every crossing of a danger row and a danger column, where danger rows
are the first and last row and both sides of every block (workgroup tile) edge, and likewise for
columns. Then ``samples`` seeded random cells (contract
PRNG, so every device audits the same cells for the same seed). Each is compared with an exact
int64 dot product of the int8 operands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from daisychain.numerics import prng

AUDIT_STREAM = 7  # random cells come from prng.key(seed, 7) (NUMERICS.md section 7)
Int8Array = npt.NDArray[np.int8]
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

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def describe(self) -> str:
        if self.ok:
            return f"audit ok: {self.cells_checked} cells ({self.danger_cells} structural)"
        first = self.mismatches[0]
        return (
            f"audit FAILED: {len(self.mismatches)} of {self.cells_checked} cells differ; first "
            f"at [{first.row}, {first.col}]: expected {first.expected}, got {first.got}"
        )


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


def sample_cells(
    m: int, n: int, tile: tuple[int, int], samples: int, seed: int = 0
) -> tuple[list[tuple[int, int]], int]:
    """(cells, number of structural ones): the danger cells, then ``samples`` random cells."""
    cells = danger_cells(m, n, tile)
    k = prng.key(seed, AUDIT_STREAM)
    flat = prng.below(k, samples, m * n) if samples > 0 else np.zeros(0, dtype=np.int64)
    return cells + [(int(f) // n, int(f) % n) for f in flat], len(cells)


def audit(
    a: Int8Array,
    b: Int8Array,
    out: Int32Array,
    samples: int = 64,
    *,
    seed: int = 0,
    tile: tuple[int, int] = (32, 32),
) -> AuditReport:
    """Check the danger cells and ``samples`` random cells of ``out = a @ b`` exactly."""
    m, n = a.shape[0], b.shape[1]
    if out.shape != (m, n):
        raise ValueError(f"audit: output shape {out.shape} is not {(m, n)}")
    if m == 0 or n == 0:
        return AuditReport(0, 0)
    cells, structural = sample_cells(m, n, tile, samples, seed)
    rows = np.array([c[0] for c in cells], dtype=np.int64)
    cols = np.array([c[1] for c in cells], dtype=np.int64)
    # (S, K) * (S, K) summed in int64: exact for any K the model uses.
    expected = np.einsum(
        "sk,sk->s", a[rows].astype(np.int64), b[:, cols].T.astype(np.int64), dtype=np.int64
    )
    got = out[rows, cols].astype(np.int64)
    bad = np.nonzero(expected != got)[0]
    mismatches = [Mismatch(int(rows[s]), int(cols[s]), int(expected[s]), int(got[s])) for s in bad]
    return AuditReport(len(cells), structural, mismatches)
