"""One outer round of a whole group in one process (docs/OUTER.md, "A round").

What a group's peers do across the network in an outer run (docs/PROTOCOL.md, "Outer runs"), as
arithmetic in one process: every peer computes and compresses its pseudo-gradient (in any order:
each depends on its own weights only), the dequantized values are averaged in roster order
weighted by tokens, and the Nesterov step is applied. The transport follows from the
compression, and decides both the bytes and one rounding:

- ``int8``: the gradient exchange's reduce-scatter and all-gather (``p2p.allreduce``): chunk k of
  the blocks (proportional to the ownership weights, here the reduced token weights) goes to
  roster peer k, which reduces it and quantizes the reduced chunk once more before sending it to
  everyone. So the applied mean is ``int8(mean)``, the same bits whoever owns which chunk
  (quantization is per block, and chunks are whole blocks). A peer sends about 2 (N-1)/N of one
  payload.
- ``topk``: a sum of sparse vectors is not sparse, so a reduced chunk would go back dense. Instead
  every contributor sends its payload to every other peer (all-gather) and each peer reduces
  the whole vector itself, unquantized: (N-1) payloads per peer.

The run mode itself is ``p2p.inner`` and the protocol machine; this module is its reference:
``bench converge --sync outer`` trains with it, and tests check the outer weights of a group of
real peers against it (tests/p2p/test_outer_mesh.py). ``topk`` is arithmetic only: runs send
``int8`` (docs/OUTER.md, "What is not built").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from daisychain.outer import payload as comp
from daisychain.outer.mean import reduced_weights, weighted_mean
from daisychain.outer.nesterov import (
    FloatArray,
    OuterConfig,
    OuterError,
    OuterState,
    Params,
    apply_outer,
    outer_hash,
    pseudo_gradient,
)
from daisychain.p2p import allreduce
from daisychain.wire import codec


@dataclass(frozen=True)
class RoundResult:
    hash: str  # outer_hash after the step: every replica's identity
    bytes_sent: tuple[int, ...]  # payload bytes each roster peer sends in this round
    residuals: tuple[FloatArray | None, ...]  # each peer's error-feedback residual after it


def bytes_sent(how: comp.Compression, n_values: int, tokens: Sequence[int]) -> tuple[int, ...]:
    """Payload bytes each roster peer sends in one round (module docstring's transports)."""
    n = len(tokens)
    weights = reduced_weights(tokens)
    contributors = [j for j in range(n) if weights[j] > 0]
    sent = [0] * n
    if how.kind == "topk":
        for j in contributors:
            sent[j] = how.payload_bytes(n_values) * (n - 1)
        return tuple(sent)
    blocks = n_values // codec.BLOCK
    for k in range(n):
        first, end = allreduce.chunk_blocks(blocks, weights, k)
        size = (end - first) * (codec.BLOCK + 1)
        for j in contributors:
            if j != k:
                sent[j] += size  # reduce-scatter: contributor j's part of chunk k
        sent[k] += size * (n - 1)  # all-gather: the reduced chunk to every other peer
    return tuple(sent)


def outer_round(
    state: OuterState,
    cfg: OuterConfig,
    how: comp.Compression,
    local: Sequence[Params],
    tokens: Sequence[int],
    residuals: Sequence[FloatArray | None],
    order: Sequence[int] | None = None,
) -> RoundResult:
    """The round, in place on ``state``. ``local[k]``, ``tokens[k]``, ``residuals[k]``: roster
    peer k's weights after its inner steps, the tokens it trained on, its error-feedback
    residual (None: none yet, or no error feedback). ``order``: the order the peers' parts are
    computed in (a permutation of the roster; it must not matter, and tests check it does not)."""
    n = len(local)
    if not n or len(tokens) != n or len(residuals) != n:
        raise OuterError(
            f"one weight set, token count and residual per peer: got {len(local)}, "
            f"{len(tokens)}, {len(residuals)}"
        )
    order = list(range(n)) if order is None else list(order)
    if sorted(order) != list(range(n)):
        raise OuterError(f"order must be a permutation of the roster 0..{n - 1}, got {order}")
    reduced_weights(tokens)  # refuse bad counts before any work
    sent: list[FloatArray | None] = [None] * n
    kept = list(residuals)
    for k in order:
        delta = pseudo_gradient(state.params, local[k])
        if tokens[k] == 0:
            continue  # no inner work: nothing to send, its residual carries on unchanged
        _, sent[k], kept[k] = comp.compress(delta, how, residuals[k])
    size = next(d.size for d in sent if d is not None)
    zeros = np.zeros(size, dtype=np.float32)  # stands in for peers that send nothing
    mean = weighted_mean([zeros if d is None else d for d in sent], tokens)
    if how.kind == "int8":
        _, mean = codec.encode(mean)  # the chunk owner's one quantization of its reduced chunk
    apply_outer(state, cfg, mean)
    return RoundResult(outer_hash(state), bytes_sent(how, size, tokens), tuple(kept))
