"""The bandwidth-optimal gradient exchange: who reduces what, and the pinned arithmetic.

With a roster of N peers (in committed order) and their shares ``s`` of the step's ``G``
sequences (``p2p.shares``), the flattened gradient's B blocks are cut into N contiguous chunks
in proportion to the **ownership weights** ``o`` (version 3, ``ownership``): ``o[k] = s[k]``
when ``2 s[k] >= max(s)``, else 0. With their cumulative sums ``c`` (``c[N] = O``), chunk k =
blocks [floor(B c[k] / O), floor(B c[k+1] / O)), owned by roster[k]. A chunk may be empty (a
share of less than half the largest always gives one); nothing is sent for it. Why: an owner's
own apply waits only for contributions, but a peer that owns a chunk puts a round trip through
itself into everyone's apply (its reduced chunk comes only after it received the others' parts
and reduced them); with three or more peers an owner also carries more bytes per value of its
chunk than a non-owner (N - 1 contributions in and N - 1 copies out, against one each way). A
much slower device sends its part and waits for the result instead of sitting in everyone's
critical path; peers of similar speed still split the chunks and use every link at once.

1. Every contributor (share > 0) quantizes its mean gradient (codec.encode) and sends chunk k
   to roster[k] (reduce-scatter). It keeps only the dequantized values of what it sent: the
   sender uses exactly what the receiver decodes.
2. The owner of chunk k weights each contributor's dequantized values by its share and sums
   them in roster order with float32 operations, ``acc = d[j0] * s[j0]; acc = acc + d[j1] *
   s[j1]; ...``, then divides by float32(G) (one correctly rounded division). Each product is
   exact: |q| * s <= 127 * 4096 < 2^24 and q 2^e s stays a normal float32. It quantizes the
   result once (codec.encode) and sends it to every other roster peer (all-gather).
3. Every peer, the owner included, dequantizes the reduced chunks into the flat mean gradient
   and hands it to ``training.apply_grads``.

Each step every peer sends about (N-1)/N of the gradient twice at one byte per value (equal
shares): a float32 full mesh sends 4 (N-1) bytes per value, so the ratio is about 1 / (2N)
before compression.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from daisychain.p2p import shares as share_rules
from daisychain.wire import codec

FloatArray = npt.NDArray[np.float32]


def ownership(shares: Sequence[int]) -> tuple[int, ...]:
    """The ownership weights of a roster's shares: a share of less than half the largest owns
    nothing (integers only, so every implementation agrees)."""
    top = max(shares, default=0)
    return tuple(s if 2 * s >= top else 0 for s in shares)


def chunk_blocks(total_blocks: int, shares: Sequence[int], k: int) -> tuple[int, int]:
    """[first, end) block indices of chunk ``k`` of a roster with these shares."""
    c = share_rules.offsets(ownership(shares))
    g = c[-1]
    assert 0 <= k < len(shares) and g > 0, f"chunk {k} of shares {list(shares)}"
    return total_blocks * c[k] // g, total_blocks * c[k + 1] // g


def chunk_slice(total_blocks: int, shares: Sequence[int], k: int) -> slice:
    """The values of chunk ``k`` in the flattened gradient."""
    first, end = chunk_blocks(total_blocks, shares, k)
    return slice(first * codec.BLOCK, end * codec.BLOCK)


def reduce_chunk(contributions: list[FloatArray], weights: list[int], total: int) -> FloatArray:
    """The weighted mean ``sum(d * s) / G`` of the contributors' dequantized values, in roster
    order (pinned float32 sequence)."""
    assert contributions and len(contributions) == len(weights), "one weight per contribution"
    assert all(w >= 1 for w in weights) and sum(weights) == total, (weights, total)
    acc = np.multiply(contributions[0], np.float32(weights[0]))  # exact (see the docstring)
    for d, w in zip(contributions[1:], weights[1:], strict=True):
        np.add(acc, np.multiply(d, np.float32(w)), out=acc)  # exact product, one rounded add
    np.divide(acc, np.float32(total), out=acc)
    return acc


def exchange_locally(flat_grads: list[FloatArray], shares: Sequence[int]) -> tuple[FloatArray, int]:
    """The whole exchange in one process, for tests and benchmarks: the mean gradient every
    peer applies, and the payload bytes one peer sends (the largest over peers).
    ``flat_grads[k]`` is roster peer k's mean gradient (ignored for a share of 0)."""
    n = len(flat_grads)
    assert len(shares) == n
    total_blocks = flat_grads[0].size // codec.BLOCK
    g = sum(shares)
    contributors = [j for j in range(n) if shares[j] > 0]
    sent = [0] * n
    out = np.empty_like(flat_grads[0])
    for k in range(n):
        sl = chunk_slice(total_blocks, shares, k)
        if sl.start == sl.stop:
            continue
        parts = []
        for j in contributors:
            payload, deq = codec.encode(flat_grads[j][sl])
            if j != k:
                sent[j] += len(payload)
            parts.append(deq)
        payload, out[sl] = codec.encode(reduce_chunk(parts, [shares[j] for j in contributors], g))
        sent[k] += len(payload) * (n - 1)
    return out, max(sent)
