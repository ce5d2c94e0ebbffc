"""Block quantization with power-of-two scales (docs/NUMERICS.md, "Quantization").

A block is every element that shares one index outside the quantized axis (a row, a column, a
token of one head, ...). Its scale exponent ``e`` comes from the bits of the block's absolute
maximum alone, so it is an integer rule every platform computes the same way:

    amax = max |x|                       (exact: max needs no rounding)
    E    = unbiased exponent of amax     (float32 bits 30..23, minus 127)
    e    = E - 6 + (mantissa(amax) >= 0x7F0000)

so ``amax * 2^-e`` lies in [63.75, 127.5) and rounds to at most 127: no clamp is ever needed for the
primary limb. Blocks whose amax is below 2^E_FLOOR (zero, subnormal or negligible) quantize to all
zeros with e = 0. Then ``q = rint(x * 2^-e)`` (ties to even); the multiply by a power of two is
exact.

Quantized values are returned as float32 arrays holding small integers: the exact GEMM feeds them
straight to float32 BLAS (see gemm.py), so no conversion is paid per product.

Two-limb quantization (gradients, docs/NUMERICS.md "Backward"): hi as above, the residual
``r = x - hi * 2^e`` (exact in float32), and ``lo = clamp(rint(r * 2^(8-e)), -127, 127)`` so that
``x ~= (256 * hi + lo) * 2^(e-8)`` with about 15 significant bits.

Three limbs (the logits gradient only, contract v2): the second limb's residual is split once
more, ``x ~= (65536 * hi + 256 * mid + lo) * 2^(e-16)`` with about 23 significant bits, so the
softmax tail far below the target's ``p - 1`` survives instead of rounding to zero.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

F32 = np.float32
FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]

# Blocks whose absolute maximum is below 2^E_FLOOR quantize to zero: it keeps every scale 2^-e
# a normal float32 (no subnormals anywhere) and such values are far below anything that matters
# for training (the smallest gradients seen in practice are around 2^-40).
E_FLOOR = -100
# Blocks whose absolute maximum reaches 2^E_CEIL mean training has diverged: refuse them.
E_CEIL = 100
# Mantissa threshold: amax * 2^(6-E) >= 127.5 exactly when the 23 mantissa bits are >= this
# (127.5 / 64 = 1.9921875 = 1 + 0x7F0000 / 2^23); then e is raised by one so nothing rounds to 128.
MANT_BUMP = 0x7F0000
LO_SHIFT = 8


class QuantizationError(FloatingPointError):
    """Non-finite or exploding values reached a quantizer (training has diverged)."""


def pow2(e: npt.NDArray[np.int32]) -> FloatArray:
    """2^e as float32 for integer e in [-126, 127], built from the exponent bits (exact)."""
    if e.size and (int(e.min()) < -126 or int(e.max()) > 127):
        raise ValueError(f"pow2: exponent out of the normal float32 range: [{e.min()}, {e.max()}]")
    return pow2_unchecked(e)


def pow2_unchecked(e: npt.NDArray[np.int32]) -> FloatArray:
    """``pow2`` for exponents the caller already knows lie in [-126, 127] (no range scan)."""
    bits = (e + np.int32(127)).astype(np.uint32)
    bits <<= np.uint32(23)
    out: FloatArray = bits.view(np.float32)
    return out


def scale_exponent(x: FloatArray, axis: int) -> IntArray:
    """Scale exponent per block (keepdims along ``axis``); 0 for blocks that quantize to zero."""
    if x.dtype != np.float32:
        raise TypeError(f"quantize expects float32, got {x.dtype}")
    # The bits of max |x|, as the largest of the sign-cleared bit patterns: for float32 the
    # order of |x| is the order of its bits read as unsigned integers (one integer pass and one
    # integer max, 1.5-3.5x faster than max(max x, -min x) on the step's shapes). A NaN or an
    # infinity has the largest exponent (0xFF) and wins the max, so it is caught just below.
    bits = np.bitwise_and(x.view(np.uint32), np.uint32(0x7FFFFFFF))
    bits = np.max(bits, axis=axis, keepdims=True)
    biased = (bits >> np.uint32(23)).astype(np.int32)  # the sign bit is clear
    top = int(biased.max()) if biased.size else 0
    if top == 0xFF:
        raise QuantizationError(
            "non-finite value reached the quantizer; training has diverged "
            "(lower the learning rate or enable gradient clipping)"
        )
    big_e = biased - 127
    if top - 127 >= E_CEIL:
        raise QuantizationError(
            f"value of magnitude 2^{top - 127} reached the quantizer; training has "
            "diverged (lower the learning rate)"
        )
    bump = ((bits & np.uint32(0x7FFFFF)) >= np.uint32(MANT_BUMP)).astype(np.int32)
    e = big_e - 6 + bump
    return np.where(big_e < E_FLOOR, np.int32(0), e).astype(np.int32)


def quantize(x: FloatArray, axis: int) -> tuple[FloatArray, IntArray]:
    """Quantize ``x`` in blocks along ``axis``: returns (q, e) with x ~= q * 2^e.

    ``q`` is float32 holding integers in [-127, 127]; ``e`` has ``x``'s shape with ``axis`` kept
    as length 1 (ready to broadcast).
    """
    e = scale_exponent(x, axis)
    # e lies in [-106, 94] (E_FLOOR, E_CEIL), so -e, e and LO_SHIFT - e are normal exponents.
    q = np.multiply(x, pow2_unchecked(-e))
    np.rint(q, out=q)
    # rint(-0.3) is -0: adding +0 turns every -0 into +0 so the integer meaning is unambiguous.
    np.add(q, F32(0.0), out=q)
    return q, e


def _check_stack(out: FloatArray | None, x: FloatArray, limbs: int) -> None:
    if out is not None and (out.shape != (limbs, *x.shape) or out.dtype != np.float32):
        raise ValueError(f"limb buffer must be float32 {(limbs, *x.shape)}, got {out.shape}")


def quantize2(
    x: FloatArray, axis: int, overwrite: bool = False, out: FloatArray | None = None
) -> tuple[FloatArray, FloatArray, IntArray]:
    """Two-limb quantization: (hi, lo, e) with x ~= (256 * hi + lo) * 2^(e - 8).

    With ``overwrite`` the buffer of ``x`` is reused for ``lo`` (``x`` is then lost). With
    ``out`` (float32, ``(2, *x.shape)``) hi and lo are written to ``out[0]`` and ``out[1]``, so
    a GEMM that takes batches gets both limbs as one operand (the same operations, same bits).
    """
    _check_stack(out, x, 2)
    e = scale_exponent(x, axis)
    y = np.multiply(x, pow2_unchecked(-e), out=x if overwrite else None)  # exact
    hi = np.rint(y, out=None if out is None else out[0])
    np.add(hi, F32(0.0), out=hi)
    # r * 2^(8 - e) = (x * 2^-e - hi) * 2^8 with r = x - hi * 2^e: the subtraction is exact
    # (|y - hi| <= 1/2 and both are multiples of y's ulp) and so are both power-of-two
    # multiplies, so this is the module docstring's residual without two broadcast multiplies.
    np.subtract(y, hi, out=y)
    np.multiply(y, F32(1 << LO_SHIFT), out=y)
    np.rint(y, out=y)
    np.clip(y, F32(-127), F32(127), out=y)
    lo = np.add(y, F32(0.0), out=y if out is None else out[1])
    return hi, lo, e


def quantize3(
    x: FloatArray, axis: int, overwrite: bool = False, out: FloatArray | None = None
) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
    """Three-limb quantization: (hi, mid, lo, e) with x ~= (65536 hi + 256 mid + lo) 2^(e - 16).

    hi and mid are exactly ``quantize2``'s hi and lo; lo quantizes the residual left by mid,
    ``r2 = r - mid * 2^(e-8)`` (exact, as r is), as ``clamp(rint(r2 * 2^(16-e)), -127, 127)``.
    ``overwrite`` and ``out`` (``(3, *x.shape)``: hi, mid, lo) as in ``quantize2``.
    """
    _check_stack(out, x, 3)
    e = scale_exponent(x, axis)
    y = np.multiply(x, pow2_unchecked(-e), out=x if overwrite else None)  # exact
    hi = np.rint(y, out=None if out is None else out[0])
    np.add(hi, F32(0.0), out=hi)
    np.subtract(y, hi, out=y)  # exact (see quantize2)
    np.multiply(y, F32(1 << LO_SHIFT), out=y)  # r * 2^(8 - e), exact
    mid = np.rint(y, out=None if out is None else out[1])
    np.clip(mid, F32(-127), F32(127), out=mid)
    np.add(mid, F32(0.0), out=mid)
    # r2 * 2^(16 - e) = (r * 2^(8-e) - mid) * 2^8: the subtraction is exact (mid is the nearest
    # integer, or the clamp's 127 at most one step away, and both are multiples of y's ulp).
    np.subtract(y, mid, out=y)
    np.multiply(y, F32(1 << LO_SHIFT), out=y)
    np.rint(y, out=y)
    np.clip(y, F32(-127), F32(127), out=y)
    lo = np.add(y, F32(0.0), out=y if out is None else out[2])
    return hi, mid, lo, e


def dequantize(q: FloatArray, e: IntArray) -> FloatArray:
    """q * 2^e in float32 (exact for the values quantize produces)."""
    out: FloatArray = np.ldexp(q.astype(np.float64), e).astype(np.float32)
    return out


def to_int8(q: FloatArray) -> npt.NDArray[np.int8]:
    """The int8 bytes of a quantized array (for hashing, the wire and the GPU)."""
    return q.astype(np.int8)


# Elements of float32 per block of a transposed cast (``to_int8_c``): 128 KiB of source, which
# stays in the core's L2 while its transposed bytes are written.
_CAST_BLOCK = 1 << 15


def to_int8_c(q: FloatArray) -> npt.NDArray[np.int8]:
    """``to_int8`` as a C-contiguous array, fast when ``q`` is a transposed view.

    The int8 GEMM (cpu/int8.py) needs C-order operands, and the model hands it transposed views
    (``x.T`` in a weight gradient, ``w.T`` in an input gradient, ``k^T`` per head). numpy casts
    such a view element by element along the long stride: 10-50x slower than a contiguous cast
    (a 1024 x 1024 operand: 3.5 ms against 0.07). Here the contiguous buffer underneath is
    cast, then its bytes are transposed in row blocks that stay in cache (2-D) or in one copy
    (batched). The values are the same integers either way; only the order of the work differs.
    """
    if q.ndim < 2 or q.flags.c_contiguous:
        return q.astype(np.int8, order="C")
    repeated = [i for i in range(q.ndim - 2) if q.strides[i] == 0 and q.shape[i] > 1]
    if repeated:  # a broadcast operand (one matrix for both limbs): cast it once, then repeat
        once = q[tuple(slice(0, 1) if i in repeated else slice(None) for i in range(q.ndim))]
        return np.ascontiguousarray(np.broadcast_to(to_int8_c(once), q.shape))
    if q.ndim > 2 and q.size == q.shape[-2] * q.shape[-1]:  # one matrix: the 2-D path below
        return to_int8_c(q.reshape(q.shape[-2:])).reshape(q.shape)
    under = np.swapaxes(q, -1, -2)
    if not under.flags.c_contiguous:  # neither layout: the plain strided cast
        return q.astype(np.int8, order="C")
    if q.ndim > 2:  # batched (attention heads): small slices, one byte transpose in all
        return np.ascontiguousarray(np.swapaxes(under.astype(np.int8), -1, -2))
    rows, cols = under.shape  # q is (cols, rows)
    step = max(16, _CAST_BLOCK // max(1, cols))
    out = np.empty((cols, rows), dtype=np.int8)
    for i in range(0, rows, step):
        out[:, i : i + step] = under[i : i + step].astype(np.int8).T
    return out


def int8_operands(
    a: FloatArray | npt.NDArray[np.int8],
    b: FloatArray | npt.NDArray[np.int8],
    a8: npt.NDArray[np.int8] | None = None,
    b8: npt.NDArray[np.int8] | None = None,
) -> tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[np.int8], npt.NDArray[np.int8]]:
    """The operands of a batched product (..., M, K) @ (..., K, N): ``a`` and ``b`` broadcast on
    their leading axes (views), and each as the C-ordered int8 a GEMM takes (``int8_operand``,
    from ``a8``/``b8`` where the caller has them)."""
    lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a_b: npt.NDArray[Any] = np.broadcast_to(a, (*lead, *a.shape[-2:]))
    b_b: npt.NDArray[Any] = np.broadcast_to(b, (*lead, *b.shape[-2:]))
    return a_b, b_b, int8_operand(a_b, a8), int8_operand(b_b, b8)


def int8_operand(
    q: FloatArray | npt.NDArray[np.int8], q8: npt.NDArray[np.int8] | None
) -> npt.NDArray[np.int8]:
    """``to_int8_c(q)``, or ``q8`` when the caller already has it (the fused quantizer writes the
    int8 values with the float32 ones): ``q8`` must hold ``q``'s values, in any layout (a
    transposed view is made C-ordered as ``to_int8_c`` does), broadcast along leading axes."""
    if q8 is not None and (q8.dtype != np.int8 or q8.shape[-2:] != q.shape[-2:]):
        raise ValueError(f"int8 operand {q8.dtype} {q8.shape} does not match {q.shape}")
    src = q if q8 is None else q8
    if src.dtype == np.int8 and src.shape == q.shape and src.flags.c_contiguous:
        return src  # type: ignore[return-value]  # already what the GEMM takes
    # a transposed or broadcast view (of int8 values, or of float32 ones): C-ordered bytes
    return to_int8_c(np.broadcast_to(src, q.shape))
