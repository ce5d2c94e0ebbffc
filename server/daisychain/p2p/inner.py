"""An outer run's round at one peer: its inner AdamW steps and its pseudo-gradient's chunks.

docs/PROTOCOL.md, "Outer runs": protocol step ``s`` of an outer run is outer round ``s - 1``.
The round's sequences at a peer are its roster positions ``[o[rank], o[rank] + shares[rank])``
of global batch indices ``(s - 1) * H + j``, ``j = 0 .. H-1``, exactly the positions a per-step
run's steps of those indices give it, so no two peers train the same sequences. It trains them
from the outer weights in inner steps of the run's batch (``shares.round_steps``): a peer with a
bigger share takes more inner steps, not bigger ones, so a slow device (a small share) takes few
full-sized steps instead of ``H`` tiny ones. Each inner step is a contributor's mean gradient over
its pieces (``training.mean_gradient``: pieces combined in piece order) and one AdamW step with
this peer's own inner state. Then the pseudo-gradient ``W - w`` (``outer.pseudo_gradient``) is cut
into the roster's chunks and each chunk quantized with the exchange codec, exactly as a gradient is
(``early.ChunkWatch``'s layout): the group's reduction and apply follow from there.

Runs on the compute thread, on a private copy of the state (``ModelReplica.inner_start``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from daisychain import training
from daisychain.model.params import param_shapes
from daisychain.optim import AdamWState
from daisychain.outer.nesterov import Params, pseudo_gradient
from daisychain.p2p import allreduce, codec

Rows = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


def batch_index(step: int, inner_steps: int, j: int) -> int:
    """The ``j``-th global batch index (``j < inner_steps``) of protocol step ``step``'s round
    (1-based): the round's sequences are the peer's positions of every such index."""
    return (step - 1) * inner_steps + j


def round_indices(step: int, inner_steps: int) -> range:
    """The global batch indices of protocol step ``step``'s round, in order."""
    return range(batch_index(step, inner_steps, 0), batch_index(step, inner_steps, inner_steps))


def chunk_payloads(
    flat: npt.NDArray[np.float32], shares: Sequence[int], total_blocks: int
) -> tuple[bytes, ...]:
    """Every roster chunk of ``flat`` quantized (``codec.encode``); empty bytes for an empty
    chunk. Quantization is per block and chunks are whole blocks, so these are the bytes of one
    whole-vector encode cut at the chunk boundaries."""
    out = []
    for k in range(len(shares)):
        sl = allreduce.chunk_slice(total_blocks, shares, k)
        out.append(codec.encode(flat[sl])[0] if sl.start != sl.stop else b"")
    return tuple(out)


def inner_round(
    work: training.TrainState,
    outer: Params,
    rows: Sequence[list[Rows]],
    shares: Sequence[int],
) -> tuple[float, tuple[bytes, ...], AdamWState]:
    """Take the inner steps (``rows[j]``: inner step j's pieces, ``shares.round_steps``) on
    ``work`` in place; returns the mean inner loss, the pseudo-gradient's chunk payloads and
    the inner AdamW state after the round. ``outer`` are the round's outer weights (unchanged)."""
    assert rows and all(rows), "a share of 0 takes no inner steps"
    shapes = param_shapes(work.cfg)
    total = np.float32(0)
    for pieces in rows:
        count = sum(len(x) for x, _ in pieces)
        loss, flat = training.mean_gradient(work, pieces, count)
        assert flat is not None
        training.apply_grads(work, codec.unflatten(flat, shapes))
        total = np.float32(total + np.float32(loss))
    delta = pseudo_gradient(outer, work.params)
    payloads = chunk_payloads(delta, shares, delta.size // codec.BLOCK)
    return float(np.float32(total / np.float32(len(rows)))), payloads, work.opt_state
