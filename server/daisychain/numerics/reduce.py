"""Pinned float32 reductions (docs/NUMERICS.md, "Reductions").

A float sum's value depends on its order, and numpy's ``np.sum`` order is an implementation
detail. Every float reduction in the contract is this fixed tree instead: pad the axis with +0.0
to the next power of two, then repeatedly add the second half onto the first half
(``x = x[:h] + x[h:]``) until one element is left. Each level is one vectorised float32 add, so
the tree is fast in numpy, trivial in JavaScript and WGSL, and identical everywhere.
"""

from __future__ import annotations

import numpy as np

from daisychain.numerics.quant import FloatArray


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def tree_sum(x: FloatArray, axis: int = -1, keepdims: bool = False) -> FloatArray:
    """Sum along ``axis`` in the pinned pairwise-halving order."""
    if x.dtype != np.float32:
        raise TypeError(f"tree_sum expects float32, got {x.dtype}")
    axis = axis % x.ndim
    n = x.shape[axis]
    if n == 0:
        raise ValueError("tree_sum over an empty axis")
    width = next_pow2(n)
    y = x
    if width != n:
        pad_shape = list(x.shape)
        pad_shape[axis] = width - n
        y = np.concatenate([x, np.zeros(pad_shape, dtype=np.float32)], axis=axis)
    head: list[slice] = [slice(None)] * x.ndim
    tail: list[slice] = [slice(None)] * x.ndim
    while width > 1:
        width //= 2
        head[axis] = slice(0, width)
        tail[axis] = slice(width, 2 * width)
        y = y[tuple(head)] + y[tuple(tail)]
    out = y if keepdims else np.squeeze(y, axis=axis)
    # asarray, not ascontiguousarray: the latter turns a 0-d result (a full 1-D sum) into (1,).
    result: FloatArray = np.asarray(out, dtype=np.float32)
    return result


def tree_sum_rows(x: FloatArray) -> FloatArray:
    """Sum over axis 0 (e.g. a gradient summed over tokens) in the pinned order."""
    return tree_sum(x, axis=0)


def sequential_sum(values: list[np.float32]) -> np.float32:
    """Left-to-right float32 sum of a short list (per-tensor partial sums in declaration order)."""
    total = np.float32(0.0)
    for v in values:
        total = np.float32(total + np.float32(v))
    return total
