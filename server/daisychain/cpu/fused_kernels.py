"""The numba loops behind ``cpufused`` (imported only where numba is installed).

Each loop repeats the numpy reference's operations in the reference's order (``cpufused``'s
docstring says why the bits are the same). The limb count is a constant in every compiled copy
(``rows2`` calls the inlined ``_rows`` with 2), and so is whether the float32 limbs are
written at all (``rows2_i8``: the int8 limbs only), so their branches vanish and the line loops
vectorize. Every function is cached by numba (``cache=True``) and releases the interpreter lock
(``nogil``), so a background audit thread runs beside it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from daisychain.numerics.quant import E_CEIL, E_FLOOR, LO_SHIFT, MANT_BUMP

LIM = np.float32(127)
ZERO = np.float32(0)
LO_SCALE = np.float32(1 << LO_SHIFT)
SHIFT64 = float(1 << LO_SHIFT)
NON_FINITE, DIVERGED = -1000, 1000  # the codes a quantize loop returns for a refused block


@njit(cache=True, nogil=True)
def exponent(amax_bits):  # type: ignore[no-untyped-def]
    """``numerics.quant.scale_exponent`` of one block from the bits of its largest magnitude;
    NON_FINITE or DIVERGED where numpy's rule raises (the caller re-runs it for its message)."""
    biased = np.int32(amax_bits >> np.uint32(23))
    if biased == 0xFF:
        return NON_FINITE
    big_e = biased - 127
    if big_e >= E_CEIL:
        return DIVERGED
    if big_e < E_FLOOR:
        return 0
    bump = 1 if (amax_bits & np.uint32(0x7FFFFF)) >= np.uint32(MANT_BUMP) else 0
    return big_e - 6 + bump


@njit(cache=True, nogil=True)
def pow2_neg(e):  # type: ignore[no-untyped-def]
    """2^-e as float32 from its exponent bits (e in [-106, 94]: a normal float32, exact)."""
    tmp = np.empty(1, dtype=np.uint32)
    tmp[0] = np.uint32((127 - e) << 23)
    return tmp.view(np.float32)[0]


@njit(cache=True, nogil=True, inline="always")
def _clamp(t):  # type: ignore[no-untyped-def]
    t = LIM if t > LIM else t  # np.clip's min(max(t, -127), 127), as branch-free selects
    return -LIM if t < -LIM else t


@njit(cache=True, nogil=True, inline="always")
def _write(x, scale, q, q8, b, r, limbs, floats):  # type: ignore[no-untyped-def]
    """The limbs of one line ``x`` (folded values) with ``scale`` (2^-e per element): quantize /
    quantize2 / quantize3's operations in their order, into q8[:, b, r] and, when ``floats``,
    q[:, b, r] (else ``q`` is never touched)."""
    q80 = q8[0, b, r]
    q81 = q8[limbs - 1, b, r]  # only used when limbs >= 2
    q82 = q8[limbs - 1, b, r]  # only used when limbs == 3
    if limbs == 3:
        q81 = q8[1, b, r]
    if floats:
        q0 = q[0, b, r]
        q1 = q[limbs - 1, b, r]
        q2 = q[limbs - 1, b, r]
        if limbs == 3:
            q1 = q[1, b, r]
    for c in range(x.shape[0]):
        y = x[c] * scale[c]
        hi = np.rint(y) + ZERO  # + 0 turns -0 into +0
        q80[c] = np.int8(hi)
        if floats:
            q0[c] = hi
        if limbs >= 2:
            y = (y - hi) * LO_SCALE  # exact (numerics.quant.quantize2)
            mid = _clamp(np.rint(y)) + ZERO
            q81[c] = np.int8(mid)
            if floats:
                q1[c] = mid
            if limbs == 3:
                y = (y - mid) * LO_SCALE
                lo = _clamp(np.rint(y)) + ZERO
                q82[c] = np.int8(lo)
                if floats:
                    q2[c] = lo


@njit(cache=True, nogil=True, inline="always")
def _rows(g, fr, fc, q, q8, e, limbs, floats):  # type: ignore[no-untyped-def]
    """Blocks along the last axis of g (B, R, C), x = g * fr[b, r] * fc[b, c]: q (L, B, R, C)
    float32 and q8 int8 get the limbs, e (B, R) the exponents. 0, or a refused block's code."""
    line = np.empty(g.shape[2], dtype=np.float32)
    bits = line.view(np.uint32)
    scale = np.empty(g.shape[2], dtype=np.float32)
    for b in range(g.shape[0]):
        fcb = fc[b]
        for r in range(g.shape[1]):
            f, gr = fr[b, r], g[b, r]
            for c in range(line.shape[0]):
                line[c] = gr[c] * f * fcb[c]
            m = np.uint32(0)
            for c in range(line.shape[0]):
                u = bits[c] & np.uint32(0x7FFFFFFF)  # |x|'s order is its bits' order
                m = u if u > m else m
            ex = exponent(m)
            if ex == NON_FINITE or ex == DIVERGED:  # noqa: SIM109 (numba: plain compares)
                return ex
            e[b, r] = ex
            scale[:] = pow2_neg(ex)
            _write(line, scale, q, q8, b, r, limbs, floats)
    return 0


@njit(cache=True, nogil=True, inline="always")
def _cols(g, fr, fc, q, q8, e, limbs, floats):  # type: ignore[no-untyped-def]
    """As ``_rows`` with blocks along axis 1 (one per column); e (B, C). Two passes over each
    matrix: the column maxima row by row, then the limbs row by row."""
    line = np.empty(g.shape[2], dtype=np.float32)
    bits = line.view(np.uint32)
    m = np.empty(g.shape[2], dtype=np.uint32)
    scale = np.empty(g.shape[2], dtype=np.float32)
    for b in range(g.shape[0]):
        fcb = fc[b]
        m[:] = 0
        for r in range(g.shape[1]):
            f, gr = fr[b, r], g[b, r]
            for c in range(line.shape[0]):
                line[c] = gr[c] * f * fcb[c]
            for c in range(line.shape[0]):
                u = bits[c] & np.uint32(0x7FFFFFFF)
                m[c] = u if u > m[c] else m[c]
        for c in range(line.shape[0]):
            ex = exponent(m[c])
            if ex == NON_FINITE or ex == DIVERGED:  # noqa: SIM109 (numba: plain compares)
                return ex
            e[b, c] = ex
            scale[c] = pow2_neg(ex)
        for r in range(g.shape[1]):
            f, gr = fr[b, r], g[b, r]
            for c in range(line.shape[0]):
                line[c] = gr[c] * f * fcb[c]
            _write(line, scale, q, q8, b, r, limbs, floats)
    return 0


@njit(cache=True, nogil=True, inline="always")
def _dequantize(parts, fr, fc, out, limbs):  # type: ignore[no-untyped-def]
    """out (B, M, N) = f32(sum_i 256^(L-1-i) parts[i] * fr[b, m] * fc[b, n]): the limbs' int32
    products (L, B, M, N) combined exactly in float64 (below 2^53) and scaled by two exact
    power-of-two factors, one rounding."""
    for b in range(out.shape[0]):
        fcb = fc[b]
        for i in range(out.shape[1]):
            row, o = fr[b, i], out[b, i]
            p0 = parts[0, b, i]
            p1 = parts[limbs - 1, b, i]
            p2 = parts[limbs - 1, b, i]
            if limbs == 3:
                p1 = parts[1, b, i]
            for j in range(o.shape[0]):
                acc = np.float64(p0[j])
                if limbs >= 2:
                    acc = acc * SHIFT64 + np.float64(p1[j])
                    if limbs == 3:
                        acc = acc * SHIFT64 + np.float64(p2[j])
                o[j] = np.float32(acc * row * fcb[j])


@njit(cache=True, nogil=True)
def rows1(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _rows(g, fr, fc, q, q8, e, 1, True)


@njit(cache=True, nogil=True)
def rows1_i8(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _rows(g, fr, fc, q, q8, e, 1, False)


@njit(cache=True, nogil=True)
def rows2(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _rows(g, fr, fc, q, q8, e, 2, True)


@njit(cache=True, nogil=True)
def rows2_i8(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _rows(g, fr, fc, q, q8, e, 2, False)


@njit(cache=True, nogil=True)
def rows3(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _rows(g, fr, fc, q, q8, e, 3, True)


@njit(cache=True, nogil=True)
def rows3_i8(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _rows(g, fr, fc, q, q8, e, 3, False)


@njit(cache=True, nogil=True)
def cols1(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _cols(g, fr, fc, q, q8, e, 1, True)


@njit(cache=True, nogil=True)
def cols1_i8(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _cols(g, fr, fc, q, q8, e, 1, False)


@njit(cache=True, nogil=True)
def cols2(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _cols(g, fr, fc, q, q8, e, 2, True)


@njit(cache=True, nogil=True)
def cols2_i8(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _cols(g, fr, fc, q, q8, e, 2, False)


@njit(cache=True, nogil=True)
def cols3(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _cols(g, fr, fc, q, q8, e, 3, True)


@njit(cache=True, nogil=True)
def cols3_i8(g, fr, fc, q, q8, e):  # type: ignore[no-untyped-def]
    return _cols(g, fr, fc, q, q8, e, 3, False)


@njit(cache=True, nogil=True)
def dequantize1(parts, fr, fc, out):  # type: ignore[no-untyped-def]
    _dequantize(parts, fr, fc, out, 1)


@njit(cache=True, nogil=True)
def dequantize2(parts, fr, fc, out):  # type: ignore[no-untyped-def]
    _dequantize(parts, fr, fc, out, 2)


@njit(cache=True, nogil=True)
def dequantize3(parts, fr, fc, out):  # type: ignore[no-untyped-def]
    _dequantize(parts, fr, fc, out, 3)


@njit(cache=True, nogil=True)
def _slice_ok(a, b, out, danger_r, lines_c, s_rows, s_cols) -> bool:  # type: ignore[no-untyped-def]
    """``gpu.audit``'s checks of one product ``out = a @ b`` (int8 (M, K) and (K, N), int32
    (M, N)), in exact int64: the whole first and last row and column, every crossing of a
    danger row (``danger_r[i]``) and a danger column (``lines_c``), the scheduled cells, and
    every row and column sum. Four passes: b, a, b, out."""
    m, k_len, n = a.shape[0], a.shape[1], b.shape[1]
    rowsum_b = np.zeros(k_len, dtype=np.int64)
    col0 = np.empty(k_len, dtype=np.int64)
    col_n = np.empty(k_len, dtype=np.int64)
    cross_b = np.empty((lines_c.shape[0], k_len), dtype=np.int64)
    for k in range(k_len):  # pass 1: b's row sums and the columns the a-pass dots with
        bk = b[k]
        s = np.int64(0)
        for j in range(n):
            s += np.int64(bk[j])
        rowsum_b[k] = s
        col0[k], col_n[k] = bk[0], bk[n - 1]
        for t in range(lines_c.shape[0]):
            cross_b[t, k] = bk[lines_c[t]]
    colsum_a = np.zeros(k_len, dtype=np.int64)
    want_rows = np.empty(m, dtype=np.int64)
    row = np.empty(k_len, dtype=np.int64)
    for i in range(m):  # pass 2: a @ (b 1), the edge columns, the crossings on danger rows
        ai = a[i]
        for k in range(k_len):
            row[k] = ai[k]
            colsum_a[k] += row[k]
        s = np.int64(0)
        e0 = np.int64(0)
        e_n = np.int64(0)
        for k in range(k_len):
            s += row[k] * rowsum_b[k]
            e0 += row[k] * col0[k]
            e_n += row[k] * col_n[k]
        want_rows[i] = s
        if e0 != out[i, 0] or e_n != out[i, n - 1]:
            return False
        if danger_r[i]:
            for t in range(lines_c.shape[0]):
                ct = cross_b[t]
                d = np.int64(0)
                for k in range(k_len):
                    d += row[k] * ct[k]
                if d != out[i, lines_c[t]]:
                    return False
    want_cols = np.zeros(n, dtype=np.int64)
    first = np.zeros(n, dtype=np.int64)
    last = np.zeros(n, dtype=np.int64)
    bk64 = np.empty(n, dtype=np.int64)
    for k in range(k_len):  # pass 3: (1^T a) @ b and the edge rows
        bk = b[k]
        for j in range(n):
            bk64[j] = bk[j]
        ca, a0, a_m = colsum_a[k], np.int64(a[0, k]), np.int64(a[m - 1, k])
        for j in range(n):
            want_cols[j] += ca * bk64[j]
            first[j] += a0 * bk64[j]
            last[j] += a_m * bk64[j]
    got_cols = np.zeros(n, dtype=np.int64)
    for i in range(m):  # pass 4: out's row and column sums
        oi = out[i]
        s = np.int64(0)
        for j in range(n):
            v = np.int64(oi[j])
            s += v
            got_cols[j] += v
        if s != want_rows[i]:
            return False
    for j in range(n):
        if got_cols[j] != want_cols[j] or first[j] != out[0, j] or last[j] != out[m - 1, j]:
            return False
    for t in range(s_rows.shape[0]):  # the scheduled cells
        i, j = s_rows[t], s_cols[t]
        d = np.int64(0)
        for k in range(k_len):
            d += np.int64(a[i, k]) * np.int64(b[k, j])
        if d != out[i, j]:
            return False
    return True


@njit(cache=True, nogil=True)
def first_failing(a, b, out, danger_r, lines_c, s_rows, s_cols) -> int:  # type: ignore[no-untyped-def]
    """The first slice of (B, M, K) @ (B, K, N) -> (B, M, N) that fails ``_slice_ok``, or -1."""
    for s in range(out.shape[0]):
        if not _slice_ok(a[s], b[s], out[s], danger_r, lines_c, s_rows, s_cols):
            return s
    return -1
