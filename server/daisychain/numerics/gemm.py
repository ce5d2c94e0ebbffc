"""Exact int8 x int8 matrix products and their dequantization (docs/NUMERICS.md, "GEMM").

The contract defines every product as the exact integer sum ``acc = sum_k a[k] * b[k]`` of int8
operands followed by ONE rounding to float32, ``y = RNE_f32(acc * 2^s)``, where ``s`` is the sum of
the operands' scale exponents (each indexed outside the summed axis, so it factors out of the sum).
Two-limb gradient operands ``256 * hi + lo`` (docs/NUMERICS.md, "Backward") make
``y = RNE_f32((256 * acc_hi + acc_lo) * 2^(s - 8))``.

How numpy gets those bits fast, through float32 BLAS:
- An operand ``q * 2^e`` (q an integer, |q| <= 128, 2^e a normal power of two) is an exact float32,
  and every partial sum of such products is an integer multiple of 2^s below 2^(s + 24) while
  K <= 1024. Such a value is exactly representable, so BLAS computes the exact ``acc * 2^s``
  whatever its summation order, blocking or use of fused multiply-add, and it equals
  ``RNE_f32(acc * 2^s)`` because it needs no rounding at all.
- Two limbs: the hi and lo products are each exact as above (two BLAS calls), and one float32
  addition ``A + B`` of the two exact parts is by definition ``RNE_f32(A + B)``, which is the
  contract's single rounding of the exact combined value.
- Outside those conditions (K > 1024, or scales near the ends of the float32 range) the reference
  path runs instead: exact float32 BLAS on chunks of at most 1024, chunk sums in float64 (exact
  below 2^53), then an exact float64 scaling and one rounding to float32. Tests assert both paths
  give the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.numerics.quant import (
    F32,
    LO_SHIFT,
    FloatArray,
    IntArray,
    pow2,
    pow2_unchecked,
    quantize2,
    quantize3,
)

K_CHUNK = 1024  # largest K for which float32 BLAS on int8 values is exact in any order
# |acc| <= 2^24 when K <= 1024 (127 * 127 * 1024 < 2^24; -128 * -128 * 1024 = 2^24)
_EXACT_SPAN = 24


def int_matmul(
    a: npt.NDArray[np.floating[Any]], b: npt.NDArray[np.floating[Any]]
) -> npt.NDArray[np.float64]:
    """Exact integer product of integer-valued float32 arrays (..., M, K) @ (..., K, N) in float64.

    Entries must be integers with |x| <= 128 for single-limb operands; a 16-bit operand
    (256 * hi + lo) may be passed as float64 (the product is then done in float64, exact).
    """
    k = a.shape[-1]
    if b.shape[-2] != k:
        raise ValueError(f"int_matmul: inner dimensions differ: {a.shape} @ {b.shape}")
    if a.dtype == np.float64 or b.dtype == np.float64:
        exact: npt.NDArray[np.float64] = np.matmul(a.astype(np.float64), b.astype(np.float64))
        return exact
    chunks = [
        np.matmul(a[..., i : i + K_CHUNK], b[..., i : i + K_CHUNK, :]).astype(np.float64)
        for i in range(0, k, K_CHUNK)
    ]
    acc: npt.NDArray[np.float64] = chunks[0]
    for c in chunks[1:]:
        acc = acc + c
    return acc


def round_scaled(acc: npt.NDArray[np.float64], s: IntArray) -> FloatArray:
    """The reference dequantization RNE_f32(acc * 2^s): exact float64 scaling, one rounding."""
    out: FloatArray = np.ldexp(acc, s).astype(np.float32)  # exact scaling, one rounding
    return out


def _fast_ok(k: int, s_min: int, s_max: int) -> bool:
    # Normal-range scales and K within the exact-sum bound: BLAS is exact (module docstring).
    return k <= K_CHUNK and s_min >= -126 and s_max + _EXACT_SPAN <= 127


def _range(e: IntArray) -> tuple[int, int]:
    return (int(e.min()), int(e.max())) if e.size else (0, 0)


def qmatmul(a_q: FloatArray, a_e: IntArray, b_q: FloatArray, b_e: IntArray) -> FloatArray:
    """Forward product of two quantized operands.

    a_q (..., M, K) with a_e (..., M, 1); b_q (..., K, N) with b_e (..., 1, N).
    Returns float32 (..., M, N) = RNE_f32(sum_k a_q * b_q * 2^(a_e + b_e)).
    """
    k = a_q.shape[-1]
    (a_lo, a_hi), (b_lo, b_hi) = _range(a_e), _range(b_e)
    if _fast_ok(k, a_lo + b_lo, a_hi + b_hi):
        # Each scale is applied either to its operand before the product or to the product
        # after it, whichever touches fewer elements. Both are exact power-of-two multiplies
        # of exact values (the product of integers is an exact integer below 2^24, and every
        # intermediate stays a normal float32 when each exponent alone also passes _fast_ok),
        # so the bits are those of scaling both operands first.
        m, n = a_q.shape[-2], b_q.shape[-1]
        post_a = m * n < m * k and _fast_ok(k, b_lo, b_hi)
        post_b = m * n < k * n and _fast_ok(k, a_lo, a_hi) and not post_a
        a = a_q if post_a else np.multiply(a_q, pow2_unchecked(a_e))
        b = b_q if post_b else np.multiply(b_q, pow2_unchecked(b_e))
        out: FloatArray = np.matmul(a, b)
        if post_a:
            out *= pow2_unchecked(a_e)
        if post_b:
            out *= pow2_unchecked(b_e)
        return out
    return round_scaled(int_matmul(a_q, b_q), a_e + b_e)


def _limbs_matmul(
    hi: FloatArray, lo: FloatArray, other: FloatArray, left: bool
) -> npt.NDArray[np.float64]:
    """Exact integer 256 * (hi @ other) + lo @ other (``left``), else of other @ hi and lo.

    Float32 BLAS on K-chunks of at most K_CHUNK is exact for each limb (as in ``int_matmul``);
    each chunk's 256 * acc_hi + acc_lo and the sum over chunks are exact in float64 (< 2^53),
    so this is the same integer as one float64 product with the combined 16-bit limbs, at
    float32 BLAS speed.
    """
    k = hi.shape[-1] if left else other.shape[-1]
    acc: npt.NDArray[np.float64] | None = None
    for i in range(0, max(k, 1), K_CHUNK):
        if left:
            o_c = other[..., i : i + K_CHUNK, :]
            p_hi = np.matmul(hi[..., i : i + K_CHUNK], o_c)
            p_lo = np.matmul(lo[..., i : i + K_CHUNK], o_c)
        else:
            o_c = other[..., i : i + K_CHUNK]
            p_hi = np.matmul(o_c, hi[..., i : i + K_CHUNK, :])
            p_lo = np.matmul(o_c, lo[..., i : i + K_CHUNK, :])
        part = p_hi.astype(np.float64)
        part *= float(1 << LO_SHIFT)
        part += p_lo
        if acc is None:
            acc = part
        else:
            acc += part
    assert acc is not None
    return acc


def qmatmul_grad_left(
    g_hi: FloatArray, g_lo: FloatArray, g_e: IntArray, b_q: FloatArray
) -> FloatArray:
    """Two-limb gradient on the left: (..., M, K) @ (..., K, N); g_e is (..., M, 1).

    b_q is a reused forward int8 operand whose own scales were folded into the gradient before
    it was quantized, so it carries none here.
    """
    k = g_hi.shape[-1]
    e_lo, e_hi = _range(g_e)
    if _fast_ok(k, e_lo - LO_SHIFT, e_hi):
        out: FloatArray = np.matmul(g_hi * pow2(g_e), b_q)  # exact
        out += np.matmul(g_lo * pow2(g_e - LO_SHIFT), b_q)  # exact, then one rounding
        return out
    return round_scaled(_limbs_matmul(g_hi, g_lo, b_q, left=True), g_e - LO_SHIFT)


def qmatmul_grad_right(
    a_q: FloatArray, g_hi: FloatArray, g_lo: FloatArray, g_e: IntArray
) -> FloatArray:
    """Two-limb gradient on the right: (..., M, K) @ (..., K, N); g_e is (..., 1, N)."""
    k = a_q.shape[-1]
    e_lo, e_hi = _range(g_e)
    if _fast_ok(k, e_lo - LO_SHIFT, e_hi):
        out: FloatArray = np.matmul(a_q, g_hi * pow2(g_e))  # exact
        out += np.matmul(a_q, g_lo * pow2(g_e - LO_SHIFT))  # exact, then one rounding
        return out
    return round_scaled(_limbs_matmul(g_hi, g_lo, a_q, left=False), g_e - LO_SHIFT)


def _pre_scale(k: int, n_out: int) -> bool:
    """Whether the two-limb fast path scales its gradient operand (k x n_out elements, two
    broadcast multiplies) rather than the product (three passes over its outer x n_out)."""
    return 3 * k < 2 * n_out


def _limbs3_matmul(
    limbs: tuple[FloatArray, FloatArray, FloatArray], other: FloatArray, left: bool
) -> npt.NDArray[np.float64]:
    """Exact integer 65536 * P(hi) + 256 * P(mid) + P(lo), P(x) = x @ other (``left``) or
    other @ x: float32 BLAS on K-chunks of at most K_CHUNK is exact per limb (as in
    ``int_matmul``); the combination and the chunk sum are exact in float64 (|acc| < 2^24 per
    limb and chunk, so every partial value stays below 2^53 for K < 2^12 * K_CHUNK)."""
    hi = limbs[0]
    k = hi.shape[-1] if left else other.shape[-1]
    acc: npt.NDArray[np.float64] | None = None
    for i in range(0, max(k, 1), K_CHUNK):
        part: npt.NDArray[np.float64] | None = None
        for limb in limbs:
            if left:
                p = np.matmul(limb[..., i : i + K_CHUNK], other[..., i : i + K_CHUNK, :])
            else:
                p = np.matmul(other[..., i : i + K_CHUNK], limb[..., i : i + K_CHUNK, :])
            if part is None:
                part = p.astype(np.float64)
            else:
                part *= float(1 << LO_SHIFT)  # exact
                part += p  # exact
        assert part is not None
        if acc is None:
            acc = part
        else:
            acc += part
    assert acc is not None
    return acc


def qmatmul_grad3_left(
    g_hi: FloatArray, g_mid: FloatArray, g_lo: FloatArray, g_e: IntArray, b_q: FloatArray
) -> FloatArray:
    """Three-limb gradient on the left: f32((65536 hi@b + 256 mid@b + lo@b) * 2^(g_e - 16))."""
    acc = _limbs3_matmul((g_hi, g_mid, g_lo), b_q, left=True)
    return round_scaled(acc, g_e - 2 * LO_SHIFT)


def qmatmul_grad3_right(
    a_q: FloatArray, g_hi: FloatArray, g_mid: FloatArray, g_lo: FloatArray, g_e: IntArray
) -> FloatArray:
    """Three-limb gradient on the right: f32((65536 a@hi + 256 a@mid + a@lo) * 2^(g_e - 16))."""
    acc = _limbs3_matmul((g_hi, g_mid, g_lo), a_q, left=False)
    return round_scaled(acc, g_e - 2 * LO_SHIFT)


def _check_limbs(limbs: int) -> None:
    if limbs not in (2, 3):
        raise ValueError(f"a gradient operand has 2 or 3 limbs, got {limbs}")


def grad_matmul_left(
    g: FloatArray, fold_e: IntArray, b_q: FloatArray, limbs: int = 2
) -> FloatArray:
    """dA = G @ B for a forward product whose right operand B was quantized on its rows.

    B's scales sit on the summed axis, so they are folded into G's columns first (an exact
    power-of-two multiply), G is two-limb quantized per row, and B's int8 values are reused.
    g (..., M, K); fold_e broadcastable to (..., 1, K); b_q (..., K, N).

    The fast path either scales the limbs before the products (as ``qmatmul_grad_left``) or
    computes ``(256 * (hi @ b) + lo @ b) * 2^(e - 8)`` on the exact integer products: the
    ``* 256`` is exact, the addition is the one rounding (of an integer), and scaling by a power
    of two commutes with that rounding while the result stays normal (``_fast_ok``), so both
    give the same bits; the cheaper one for the shapes is used.

    ``limbs=3`` (the logits gradient, docs/NUMERICS.md section 6) quantizes G in three limbs and
    combines the three exact integer products in float64 before the one rounding.
    """
    _check_limbs(limbs)
    if limbs == 3:
        h3, m3, l3, e3 = quantize3(np.multiply(g, pow2(fold_e)), axis=-1, overwrite=True)
        return qmatmul_grad3_left(h3, m3, l3, e3, b_q)
    hi, lo, e = quantize2(np.multiply(g, pow2(fold_e)), axis=-1, overwrite=True)
    k, n = g.shape[-1], b_q.shape[-1]
    e_lo, e_hi = _range(e)
    if not _fast_ok(k, e_lo - LO_SHIFT, e_hi):
        return qmatmul_grad_left(hi, lo, e, b_q)
    return _limb_products(hi, lo, e, lambda limb: np.matmul(limb, b_q), _pre_scale(k, n))


def grad_matmul_right(
    a_q: FloatArray, fold_e: IntArray, g: FloatArray, limbs: int = 2
) -> FloatArray:
    """dB = A @ G for a forward product whose left operand A was quantized on its columns.

    a_q (..., M, K) reused int8 values; fold_e broadcastable to (..., K, 1) (A's scales on the
    summed axis, folded into G's rows); g (..., K, N) two-limb quantized per column. The fast
    path is chosen as in ``grad_matmul_left``; ``limbs=3`` as there.
    """
    _check_limbs(limbs)
    if limbs == 3:
        h3, m3, l3, e3 = quantize3(np.multiply(g, pow2(fold_e)), axis=-2, overwrite=True)
        return qmatmul_grad3_right(a_q, h3, m3, l3, e3)
    hi, lo, e = quantize2(np.multiply(g, pow2(fold_e)), axis=-2, overwrite=True)
    m, k = a_q.shape[-2], a_q.shape[-1]
    e_lo, e_hi = _range(e)
    if not _fast_ok(k, e_lo - LO_SHIFT, e_hi):
        return qmatmul_grad_right(a_q, hi, lo, e)
    return _limb_products(hi, lo, e, lambda limb: np.matmul(a_q, limb), _pre_scale(k, m))


def _limb_products(
    hi: FloatArray,
    lo: FloatArray,
    e: IntArray,
    product: Callable[[FloatArray], FloatArray],
    pre_scale: bool,
) -> FloatArray:
    """f32((256 * product(hi) + product(lo)) * 2^(e - 8)) on the fast path (``_fast_ok`` holds).

    ``product`` multiplies a limb by the reused int8 operand (from the left or the right).
    Either the limbs are scaled first (every partial sum exact, one rounding in the final add), or
    the exact integer products are combined and scaled after (``* 256`` exact, one rounding in the
    add, the power-of-two scale exact in the normal range); ``pre_scale`` picks the cheaper. The
    limbs are scaled in place.
    """
    if pre_scale:
        hi *= pow2_unchecked(e)
        lo *= pow2_unchecked(e - LO_SHIFT)
        out = product(hi)  # exact
        out += product(lo)  # exact, then one rounding
        return out
    out = product(hi)  # exact integers
    out *= F32(1 << LO_SHIFT)  # exact
    out += product(lo)  # one rounding
    out *= pow2_unchecked(e - LO_SHIFT)  # exact
    return out
