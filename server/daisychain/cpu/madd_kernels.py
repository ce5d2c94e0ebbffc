"""The numba loop behind ``cpumadd`` (imported only where numba is installed).

One loop: every output cell is a dot product over K of an int8 row of ``a`` and an int8 row of
``b`` transposed, each product widened to int32 and summed in an int32. Integer arithmetic in
LLVM is exact by definition, so which instructions the compiler picks cannot change a bit; on
x86 it vectorizes the loop into ``vpmovsxbw`` (int8 to int16) and ``vpmaddwd`` (16-bit
multiplies, each adjacent pair summed into an int32 lane: never saturating, since two products
of int8 values are at most 2 * 128 * 128 = 2^15 in magnitude), which SSE2 and AVX2 have; where a
CPU has AVX-512 VNNI, LLVM may fold a multiply-add into ``vpdpwssd``, which computes the same
int32 sums. On ARM the same loop becomes NEON ``smull``/``sadalp``. Cached by numba
(``cache=True``), and it releases the interpreter lock (``nogil``) so the caller splits the rows
between threads.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def gemm_rows(a, bt, out, r0, r1):  # type: ignore[no-untyped-def]
    """``out[b, i, j] = sum_k a[b, i, k] * bt[b, j, k]`` (int32) for the flat rows ``t = b * M +
    i`` in ``[r0, r1)``: ``a`` (B, M, K), ``bt`` (B, N, K) int8, ``out`` (B, M, N) int32, all
    C-contiguous."""
    m, kk = a.shape[1], a.shape[2]
    n = bt.shape[1]
    for t in range(r0, r1):
        b, i = t // m, t % m
        for j in range(n):
            s = np.int32(0)
            for k in range(kk):
                s += np.int32(a[b, i, k]) * np.int32(bt[b, j, k])
            out[b, i, j] = s
