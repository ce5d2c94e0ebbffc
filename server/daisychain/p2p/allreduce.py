"""The bandwidth-optimal gradient exchange: who reduces what, and the pinned arithmetic.

With a roster of N peers (in committed order) the flattened gradient's B blocks are cut into N
contiguous chunks, chunk k = blocks [floor(k B / N), floor((k + 1) B / N)), owned by roster[k].

1. Every peer quantizes its whole gradient (codec.encode) and sends chunk k to roster[k]
   (reduce-scatter). It keeps only the dequantized values of what it sent: the sender uses
   exactly what the receiver decodes.
2. The owner of chunk k sums the N dequantized contributions in roster order with float32 adds,
   ``acc = d[0]; acc = acc + d[1]; ...; acc = acc + d[N-1]``, then divides by float32(N)
   (one correctly rounded division), quantizes the result once (codec.encode) and sends it to
   every other roster peer (all-gather).
3. Every peer, the owner included, dequantizes the N reduced chunks into the flat mean gradient
   and hands it to ``training.apply_grads``.

Each step every peer sends (N-1)/N of the gradient twice at about one byte per value: a float32
full mesh sends 4 (N-1) bytes per value, so the ratio is about 1 / (2N) before compression.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from daisychain.p2p import codec

FloatArray = npt.NDArray[np.float32]


def chunk_blocks(total_blocks: int, n: int, k: int) -> tuple[int, int]:
    """[first, end) block indices of chunk ``k`` of ``n``."""
    assert 0 <= k < n, f"chunk {k} of {n}"
    return total_blocks * k // n, total_blocks * (k + 1) // n


def chunk_slice(total_blocks: int, n: int, k: int) -> slice:
    """The values of chunk ``k`` in the flattened gradient."""
    first, end = chunk_blocks(total_blocks, n, k)
    return slice(first * codec.BLOCK, end * codec.BLOCK)


def reduce_chunk(contributions: list[FloatArray]) -> FloatArray:
    """Mean of dequantized contributions in roster order (pinned float32 sequence)."""
    assert contributions, "a roster has at least one peer"
    acc = contributions[0].copy()
    for d in contributions[1:]:
        np.add(acc, d, out=acc)  # one correctly rounded float32 add per roster peer, in order
    np.divide(acc, np.float32(len(contributions)), out=acc)
    return acc


def exchange_locally(flat_grads: list[FloatArray]) -> tuple[FloatArray, int]:
    """The whole exchange in one process, for tests and benchmarks: the mean gradient every
    peer applies, and the payload bytes one peer sends (the largest over peers)."""
    n = len(flat_grads)
    total_blocks = flat_grads[0].size // codec.BLOCK
    sent = [0] * n
    out = np.empty_like(flat_grads[0])
    for k in range(n):
        sl = chunk_slice(total_blocks, n, k)
        parts = []
        for j, g in enumerate(flat_grads):
            payload, deq = codec.encode(g[sl])
            if j != k:
                sent[j] += len(payload)
            parts.append(deq)
        payload, out[sl] = codec.encode(reduce_chunk(parts))
        sent[k] += len(payload) * (n - 1)
    return out, max(sent)
