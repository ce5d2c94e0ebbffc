"""The token-weighted mean of the peers' pseudo-gradients (docs/OUTER.md, "The mean").

Unequal devices do unequal inner work, counted in tokens; a peer's pseudo-gradient counts in
proportion to the tokens it trained on. The arithmetic is pinned like the gradient exchange's
(``p2p.allreduce.reduce_chunk``), element by element over the dense dequantized vectors, the
peers taken in **roster order** (never the order their payloads arrived or were computed in):

    w    = tokens // gcd(every positive count)          integers; a count of 0 is left out
    acc  = d[j0] * f32(w[j0])                           then for each further contributor j:
    acc  = acc + d[j] * f32(w[j])                       one rounded multiply, one rounded add
    mean = acc / f32(sum w)                             one rounded division

Dividing by the gcd changes no mathematical value, and keeps the weights small: the gradient
exchange's products are exact because ``|q| * w < 2^24``; so are these whenever the reduced
weights stay below 2^24 / 127 (equal devices: every weight is 1). A peer with no tokens adds
nothing, so the mean of the others is bit for bit what it would be without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F32 = np.float32
FloatArray = npt.NDArray[np.float32]

# f32(sum w) must be the exact integer: float32 holds every integer below 2^24.
MAX_WEIGHT_SUM = 1 << 24


class MeanError(ValueError):
    """Contributions or weights that do not make a mean."""


def reduced_weights(tokens: Sequence[int]) -> list[int]:
    """The tokens divided by the gcd of the positive counts (0 stays 0); refuses bad counts."""
    for k, t in enumerate(tokens):
        if not isinstance(t, int | np.integer) or isinstance(t, bool):
            raise MeanError(f"peer {k}: token count must be an integer, got {t!r}")
        if t < 0:
            raise MeanError(
                f"peer {k}: negative token count {t}; a peer that did no inner work counts 0"
            )
    positive = [int(t) for t in tokens if t > 0]
    if not positive:
        raise MeanError("no peer trained on any tokens: there is no mean to take")
    g = math.gcd(*positive)
    out = [int(t) // g for t in tokens]
    if sum(out) >= MAX_WEIGHT_SUM:
        raise MeanError(
            f"reduced token weights sum to {sum(out)}, not below 2^24 (float32's exact "
            "integers); count the inner work in coarser units (sequences, or whole inner steps)"
        )
    return out


def weighted_mean(values: Sequence[FloatArray], tokens: Sequence[int]) -> FloatArray:
    """``sum(d * w) / sum(w)`` over the contributors in roster order (module docstring).

    ``values[k]`` is roster peer k's dequantized pseudo-gradient, ``tokens[k]`` its inner tokens.
    """
    if len(values) != len(tokens):
        raise MeanError(f"{len(values)} pseudo-gradients but {len(tokens)} token counts")
    if not values:
        raise MeanError("a mean over no peers")
    shape = values[0].shape
    for k, d in enumerate(values):
        if d.dtype != np.float32 or d.shape != shape:
            raise MeanError(
                f"peer {k}: pseudo-gradient {d.dtype}{d.shape}, expected float32{shape} like "
                "peer 0's (every peer trains the same model)"
            )
    weights = reduced_weights(tokens)
    acc: FloatArray | None = None
    for d, w in zip(values, weights, strict=True):
        if w == 0:
            continue
        term = np.multiply(d, F32(w))
        if acc is None:
            acc = term
        else:
            np.add(acc, term, out=acc)
    assert acc is not None  # reduced_weights refuses all-zero counts
    np.divide(acc, F32(sum(weights)), out=acc)
    return acc
