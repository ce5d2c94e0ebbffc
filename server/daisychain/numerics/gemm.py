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

from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.numerics.quant import LO_SHIFT, FloatArray, IntArray, pow2, quantize2

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
        out: FloatArray = np.matmul(a_q * pow2(a_e), b_q * pow2(b_e))
        return out
    return round_scaled(int_matmul(a_q, b_q), a_e + b_e)


def _limbs(hi: FloatArray, lo: FloatArray) -> npt.NDArray[np.float64]:
    return hi.astype(np.float64) * float(1 << LO_SHIFT) + lo


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
    return round_scaled(int_matmul(_limbs(g_hi, g_lo), b_q), g_e - LO_SHIFT)


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
    return round_scaled(int_matmul(a_q, _limbs(g_hi, g_lo)), g_e - LO_SHIFT)


def grad_matmul_left(g: FloatArray, fold_e: IntArray, b_q: FloatArray) -> FloatArray:
    """dA = G @ B for a forward product whose right operand B was quantized on its rows.

    B's scales sit on the summed axis, so they are folded into G's columns first (an exact
    power-of-two multiply), G is two-limb quantized per row, and B's int8 values are reused.
    g (..., M, K); fold_e broadcastable to (..., 1, K); b_q (..., K, N).
    """
    hi, lo, e = quantize2(g * pow2(fold_e), axis=-1)
    return qmatmul_grad_left(hi, lo, e, b_q)


def grad_matmul_right(a_q: FloatArray, fold_e: IntArray, g: FloatArray) -> FloatArray:
    """dB = A @ G for a forward product whose left operand A was quantized on its columns.

    a_q (..., M, K) reused int8 values; fold_e broadcastable to (..., K, 1) (A's scales on the
    summed axis, folded into G's rows); g (..., K, N) two-limb quantized per column.
    """
    hi, lo, e = quantize2(g * pow2(fold_e), axis=-2)
    return qmatmul_grad_right(a_q, hi, lo, e)
