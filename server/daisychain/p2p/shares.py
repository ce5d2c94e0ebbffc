"""Shares: how many of the step's ``G`` sequences each roster peer computes (protocol v2).

docs/PROTOCOL.md, "Gradient chunks and the exchange arithmetic", is the specification. The
leader calls ``allot`` at every commit with the peers' latest measured seconds per sequence, so
faster devices take a bigger share and the peers finish their gradients together; everyone else
only reads the committed shares. Everything here is pure and in float64 (what JavaScript numbers
are) in a fixed order, so ``static/js/p2p/shares.js`` computes the same integers; the protocol
traces pin both.

Positions: peer ``k`` computes positions ``[offset(k), offset(k) + shares[k])``; position ``p`` is
row ``p % lane_size`` of lane ``p // lane_size``, and lane ``l`` is the batch version 1 gave rank
``l``, so who computes a sequence never changes what is trained there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_GLOBAL_BATCH = 4096  # shares multiply int8 values exactly in float32: 127 * 4096 < 2^24


def allot(speeds: Sequence[float], global_batch: int) -> tuple[int, ...]:
    """Shares for peers whose seconds per sequence are ``speeds`` (roster order; 0 = not
    measured), summing to ``global_batch``: proportional to 1 / seconds, largest remainders."""
    n = len(speeds)
    assert n >= 1 and global_batch >= 1, (n, global_batch)
    measured = [1.0 / s for s in speeds if s > 0]
    if measured:
        total = 0.0
        for w in measured:
            total += w
        unknown = total / len(measured)
        weights = [1.0 / s if s > 0 else unknown for s in speeds]
    else:
        weights = [1.0] * n
    whole = 0.0
    for w in weights:
        whole += w
    quotas = [(global_batch * w) / whole for w in weights]
    out = [math.floor(q) for q in quotas]
    left = global_batch - sum(out)
    # Largest remainder first; equal remainders go to the lower rank (sorted() is stable).
    order = sorted(range(n), key=lambda k: -(quotas[k] - out[k]))
    for k in order[:left]:
        out[k] += 1
    return tuple(out)


def offsets(shares: Sequence[int]) -> tuple[int, ...]:
    """Cumulative shares ``c[0..N]``: peer ``k`` computes positions ``[c[k], c[k + 1])``."""
    out = [0]
    for s in shares:
        out.append(out[-1] + s)
    return tuple(out)


@dataclass(frozen=True)
class Piece:
    """Rows ``[row, row + rows)`` of lane ``lane``: one slice of a peer's positions."""

    lane: int
    row: int
    rows: int


def pieces(first: int, count: int, lane_size: int) -> tuple[Piece, ...]:
    """Positions ``[first, first + count)`` cut at lane boundaries (at most ``lane_size`` rows
    each, so a peer never holds more than one lane's activations)."""
    out: list[Piece] = []
    p, end = first, first + count
    while p < end:
        lane, row = divmod(p, lane_size)
        rows = min(lane_size - row, end - p)
        out.append(Piece(lane, row, rows))
        p += rows
    return tuple(out)


@dataclass(frozen=True)
class RoundPiece:
    """Rows ``[row, row + rows)`` of lane ``lane`` of global batch index ``index``: one slice
    of an outer round's inner step."""

    index: int
    lane: int
    row: int
    rows: int


CUT_SHARE = "share"  # one inner step per batch index, of the peer's share (the default)
CUT_BATCH = "batch"  # inner steps of the run's batch: a bigger share takes more of them
CUTS = (CUT_SHARE, CUT_BATCH)


def round_steps(
    indices: Sequence[int], first: int, count: int, batch: int, cut: str = CUT_SHARE
) -> tuple[tuple[RoundPiece, ...], ...]:
    """An outer round's inner steps at one peer (docs/PROTOCOL.md, "A round at a peer"): its
    positions ``[first, first + count)`` of every batch index in ``indices``, in that order.
    ``cut`` "share": one inner step per index, its pieces cut at lane boundaries (every peer
    takes ``len(indices)`` steps; a bigger share makes them bigger). "batch": cut into inner
    steps of ``batch`` sequences (the last takes what is left) and, within a step, at lane and
    batch-index boundaries, so a bigger share takes more inner steps of the same size:
    ``ceil(len(indices) * count / batch)`` of them. A share of 0 takes none either way."""
    assert batch >= 1 and count >= 0 and cut in CUTS, (batch, count, cut)
    if cut == CUT_SHARE:
        return tuple(
            tuple(RoundPiece(i, p.lane, p.row, p.rows) for p in pieces(first, count, batch))
            for i in indices
            if count
        )
    out: list[tuple[RoundPiece, ...]] = []
    step: list[RoundPiece] = []
    filled = 0
    for index in indices:
        for p in pieces(first, count, batch):
            row, left = p.row, p.rows
            while left:
                take = min(left, batch - filled)
                step.append(RoundPiece(index, p.lane, row, take))
                row, left, filled = row + take, left - take, filled + take
                if filled == batch:
                    out.append(tuple(step))
                    step, filled = [], 0
    if step:
        out.append(tuple(step))
    return tuple(out)


def check(shares: Sequence[int], peers: int, global_batch: int) -> str | None:
    """Why a roster's shares are not acceptable for the run, or None."""
    if len(shares) != peers:
        return f"{len(shares)} shares for {peers} roster peers"
    if any(s < 0 for s in shares):
        return "a share is negative"
    if sum(shares) != global_batch:
        return f"shares sum to {sum(shares)}, the run's global batch is {global_batch}"
    return None
