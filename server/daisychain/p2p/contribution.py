"""A contributor's contribution to a step: the bytes an auditor must be able to recompute.

docs/PROTOCOL.md ("Gradient chunks", "A contributor's mean gradient") and docs/TRUST.md ("What
an auditor recomputes, and its cost") are the specification. Rank ``k`` of a roster with
``shares`` computes positions ``[o[k], o[k] + s[k])`` of the step's global batch, cut at lane
boundaries (``positions``); each piece is rows ``[row, row + rows)`` of its lane's batch
(``piece_rows``); the pieces' mean gradient is ``training.mean_gradient``'s, and the roster's
chunks are ``codec.encode``d as ``early.ChunkWatch`` hands them over (``compute``; the float32
mean itself is pinned too, NUMERICS.md section 9, and kept for the vectors: a summation order
that moves one float32 rounding rarely moves an int8 one). The data digest covers the token ids
of every row in position order, ``T + 1`` a row (``token_rows``).

The headless peer's compute (``p2p.node``) goes through these functions, and so do the golden
contribution vectors (tests/audit_vectors.py), so what the vectors pin is what a peer sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from daisychain import training
from daisychain.model.params import param_shapes
from daisychain.p2p import early, shares

IdArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]
Rows = tuple[IdArray, IdArray]  # (x, y) of one piece, each (rows, T)


def positions(roster_shares: Sequence[int], rank: int, lane_size: int) -> tuple[shares.Piece, ...]:
    """Rank ``rank``'s positions of the step as lane pieces (none for a share of 0)."""
    first = shares.offsets(roster_shares)[rank]
    return shares.pieces(first, roster_shares[rank], lane_size)


def piece_rows(x: IdArray, y: IdArray, piece: shares.Piece) -> Rows:
    """The piece's rows of its lane's batch ``(x, y)``, each ``(lane_size, T)``."""
    end = piece.row + piece.rows
    return x[piece.row : end], y[piece.row : end]


def _ignore(chunk: int, payload: bytes) -> None:
    """No early chunks wanted (the audit vectors; a peer with early chunks off still gets the
    same bytes in ``compute-done``)."""


@dataclass(frozen=True)
class Computed:
    loss: float
    payloads: tuple[bytes, ...]  # every roster chunk's codec.encode bytes (b"": empty)
    mean: FloatArray | None  # the float32 mean gradient before quantization (None: a share of 0)


def compute(
    state: training.TrainState,
    rows: list[Rows],
    roster_shares: Sequence[int],
    rank: int,
    emit: early.Emit = _ignore,
) -> Computed:
    """Rank ``rank``'s mean gradient over ``rows`` (its pieces' rows in position order) and
    every roster chunk's ``codec.encode`` bytes; empty bytes for an empty chunk and for every
    chunk of a share of 0. ``emit`` hears each chunk final before the backward ends."""
    count = roster_shares[rank]
    peers = len(roster_shares)
    watch = early.ChunkWatch(param_shapes(state.cfg), roster_shares, count, emit)
    loss, flat = training.mean_gradient(state, rows, count, watch)
    payloads = (b"",) * peers if flat is None else watch.chunk_payloads(peers, flat)
    return Computed(loss, payloads, flat)


def token_rows(rows: list[Rows]) -> IdArray:
    """The ``(count, T + 1)`` token ids the data digest covers (``statements.data_digest``):
    each row's inputs and its last target (``x[r] || y[r, -1]``: the text it read), in position
    order."""
    assert rows, "a share of 0 reads no text (its data digest is absent)"
    return np.concatenate([np.concatenate([x, y[:, -1:]], axis=1) for x, y in rows])
