"""An outer run's round at one peer: its inner AdamW steps and its pseudo-gradient's chunks.

docs/PROTOCOL.md, "Outer runs": protocol step ``s`` of an outer run is outer round ``s - 1``.
The round's sequences at a peer are its roster positions ``[o[rank], o[rank] + shares[rank])``
of global batch indices ``(s - 1) * H + j``, ``j = 0 .. H-1``, exactly the positions a per-step
run's steps of those indices give it, so no two peers train the same sequences. It trains them
from the outer weights in inner steps cut as the run's ``outer.cut`` says (``shares.round_steps``:
"share", ``H`` steps of its share; "batch", steps of the run's batch, so a bigger share takes
more of them). Each inner step is a contributor's mean gradient over
its pieces (``training.mean_gradient``: pieces combined in piece order) and one AdamW step with
this peer's own inner state. Then the pseudo-gradient ``W - w`` (``outer.pseudo_gradient``) is cut
into the roster's chunks and each chunk quantized with the exchange codec, exactly as a gradient is
(``early.ChunkWatch``'s layout): the group's reduction and apply follow from there.

With overlap (docs/OUTER.md, "Overlap") the round is measured after ``sync_step`` of its inner
steps, its chunks leave then, and the steps after it run while the exchange does; their progress
(the carry) is not lost: the next round starts from the new outer weights plus it.

Runs on the compute thread, on a private copy of the state (``ModelReplica.inner_start``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from daisychain import training
from daisychain.model.params import param_shapes
from daisychain.optim import AdamWState
from daisychain.outer.nesterov import Params, add_carry, pseudo_gradient
from daisychain.p2p import allreduce
from daisychain.wire import codec

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


def sync_step(inner_steps: int, overlap: float) -> int:
    """How many of a round's ``inner_steps`` come before it is measured and its chunks leave:
    ``n - floor(n * overlap)`` (float64, as JavaScript computes it); the rest run beside the
    exchange. 0 overlap: all of them (no carry); 1: none (the round sends the last one's carry)."""
    return inner_steps - math.floor(inner_steps * overlap)


@dataclass(frozen=True)
class Round:
    """A round's result at one peer: its mean inner loss, its chunk payloads, and the private
    inner state the next round starts from if this one is applied: the AdamW state and the
    carry (the progress after the sync step; None without one)."""

    loss: float
    payloads: tuple[bytes, ...]
    opt: AdamWState
    carry: Params | None


def inner_round(
    work: training.TrainState,
    outer: Params,
    rows: Sequence[list[Rows]],
    shares: Sequence[int],
    overlap: float = 0.0,
    carry: Params | None = None,
    on_chunk: Callable[[int, bytes], None] | None = None,
) -> Round:
    """Take the inner steps (``rows[j]``: inner step j's pieces, ``shares.round_steps``) on
    ``work`` in place, from ``outer`` (the round's outer weights, unchanged; ``work`` holds a
    copy) plus ``carry`` (the last applied round's). The round is measured after
    ``sync_step(len(rows), overlap)`` steps: ``on_chunk(k, payload)`` hears every non-empty chunk
    then, while the remaining steps run (the payloads returned are the same bytes)."""
    assert rows and all(rows), "a share of 0 takes no inner steps"
    shapes = param_shapes(work.cfg)
    if carry is not None:
        work.params = add_carry(work.params, carry)
    sync = sync_step(len(rows), overlap)
    total = np.float32(0)
    payloads: tuple[bytes, ...] = ()
    measured: Params | None = None
    for j in range(len(rows) + 1):
        if j == sync:
            delta = pseudo_gradient(outer, work.params)
            payloads = chunk_payloads(delta, shares, delta.size // codec.BLOCK)
            if sync < len(rows):  # the weights the carry is counted from
                measured = {k: w.copy() for k, w in work.params.items()}
            for k, payload in enumerate(payloads):
                if payload and on_chunk is not None:
                    on_chunk(k, payload)
        if j == len(rows):
            break
        count = sum(len(x) for x, _ in rows[j])
        loss, flat = training.mean_gradient(work, rows[j], count)
        assert flat is not None
        training.apply_grads(work, codec.unflatten(flat, shapes))
        total = np.float32(total + np.float32(loss))
    after = None if measured is None else {k: work.params[k] - w for k, w in measured.items()}
    mean = float(np.float32(total / np.float32(len(rows))))
    return Round(mean, payloads, work.opt_state, after)
