"""Exact int8 GEMMs (docs/NUMERICS.md sections 3 and 6) against int64 arithmetic, bit for bit.

The reference for every product is ``a.astype(int64) @ b`` (two limbs: ``256 * acc_hi + acc_lo``)
followed by one rounding of ``acc * 2^s``: ``np.ldexp`` in float64 is exact for |acc| < 2^53 and
these exponents, and the float64 -> float32 cast is the single round-to-nearest-even. Each
check also runs the module's reference path (``round_scaled(int_matmul(...))``) explicitly, so
the fast BLAS path and the reference path are proven to give the same bits, and the mutation
tests at the end prove the checks fail on planted bugs.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from daisychain.numerics import gemm
from daisychain.numerics.gemm import (
    grad_matmul_left,
    grad_matmul_right,
    int_matmul,
    qmatmul,
    round_scaled,
)
from daisychain.numerics.quant import LO_SHIFT, quantize, quantize2

F32Array = npt.NDArray[np.float32]
I32Array = npt.NDArray[np.int32]
I64Array = npt.NDArray[np.int64]


def assert_same_bits(actual: F32Array, expected: F32Array, what: str) -> None:
    assert actual.dtype == np.float32, f"{what}: dtype {actual.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    diff = actual.view(np.uint32) != expected.astype(np.float32).view(np.uint32)
    if diff.any():
        i = tuple(int(v) for v in np.argwhere(diff)[0])
        raise AssertionError(
            f"{what}: {int(diff.sum())} of {diff.size} elements differ, first at {i}: "
            f"{actual[i]!r} != {expected[i]!r}"
        )


def imatmul(a: F32Array, b: F32Array) -> I64Array:
    """Exact integer product of integer-valued arrays (numpy's int64 matmul, no BLAS)."""
    assert np.array_equal(a, np.rint(a)) and np.array_equal(b, np.rint(b))
    out: I64Array = np.matmul(a.astype(np.int64), b.astype(np.int64))
    return out


def round_once(acc: I64Array, s: I32Array) -> F32Array:
    """RNE_f32(acc * 2^s): exact float64 scaling, then one rounding."""
    assert int(np.max(np.abs(acc), initial=0)) < 2**53
    out: F32Array = np.ldexp(acc.astype(np.float64), s.astype(np.int64)).astype(np.float32)
    return out


def ints(
    rng: np.random.Generator, shape: tuple[int, ...], lo: int = -127, hi: int = 127
) -> F32Array:
    out: F32Array = rng.integers(lo, hi + 1, shape).astype(np.float32)
    return out


def exps(rng: np.random.Generator, shape: tuple[int, ...], lo: int, hi: int) -> I32Array:
    out: I32Array = rng.integers(lo, hi + 1, shape).astype(np.int32)
    return out


def s_range(*es: I32Array) -> tuple[int, int]:
    return sum(int(e.min()) for e in es), sum(int(e.max()) for e in es)


def check_qmatmul(a_q: F32Array, a_e: I32Array, b_q: F32Array, b_e: I32Array) -> None:
    s = a_e + b_e
    expected = round_once(imatmul(a_q, b_q), s)
    assert_same_bits(gemm.qmatmul(a_q, a_e, b_q, b_e), expected, "qmatmul")
    ref = gemm.round_scaled(gemm.int_matmul(a_q, b_q), s)
    assert_same_bits(ref, expected, "qmatmul reference path")


def check_grad_left(g_hi: F32Array, g_lo: F32Array, g_e: I32Array, b_q: F32Array) -> None:
    acc = 256 * imatmul(g_hi, b_q) + imatmul(g_lo, b_q)
    expected = round_once(acc, g_e - LO_SHIFT)
    out = gemm.qmatmul_grad_left(g_hi, g_lo, g_e, b_q)
    assert_same_bits(out, expected, "qmatmul_grad_left")
    limbs = g_hi.astype(np.float64) * 256.0 + g_lo
    ref = gemm.round_scaled(gemm.int_matmul(limbs, b_q), g_e - LO_SHIFT)
    assert_same_bits(ref, expected, "qmatmul_grad_left reference path")


def check_grad_right(a_q: F32Array, g_hi: F32Array, g_lo: F32Array, g_e: I32Array) -> None:
    acc = 256 * imatmul(a_q, g_hi) + imatmul(a_q, g_lo)
    expected = round_once(acc, g_e - LO_SHIFT)
    out = gemm.qmatmul_grad_right(a_q, g_hi, g_lo, g_e)
    assert_same_bits(out, expected, "qmatmul_grad_right")
    limbs = g_hi.astype(np.float64) * 256.0 + g_lo
    ref = gemm.round_scaled(gemm.int_matmul(a_q, limbs), g_e - LO_SHIFT)
    assert_same_bits(ref, expected, "qmatmul_grad_right reference path")


# (batch dims, M, K, N): K = 1, around the 1024 chunk, > 1024 and several chunks, batched.
SHAPES = [
    ((), 1, 1, 1),
    ((), 7, 1, 5),
    ((), 33, 64, 17),
    ((), 9, 1023, 11),
    ((), 9, 1024, 11),
    ((), 9, 1025, 11),
    ((), 5, 2048, 3),
    ((), 6, 3000, 7),
    ((3,), 8, 64, 16),
    ((2, 3), 5, 128, 6),
    ((2, 2), 4, 1100, 3),
]


@pytest.mark.parametrize(("batch", "m", "k", "n"), SHAPES)
def test_qmatmul_exact(batch: tuple[int, ...], m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(k * 31 + m)
    a_q, b_q = ints(rng, (*batch, m, k)), ints(rng, (*batch, k, n))
    a_e, b_e = exps(rng, (*batch, m, 1), -40, 20), exps(rng, (*batch, 1, n), -30, 30)
    check_qmatmul(a_q, a_e, b_q, b_e)
    if k <= gemm.K_CHUNK:
        assert gemm._fast_ok(k, *s_range(a_e, b_e)), "this case must exercise the BLAS path"


def test_qmatmul_broadcasts_a_2d_weight_over_batches() -> None:
    rng = np.random.default_rng(5)
    a_q, a_e = ints(rng, (2, 3, 16, 40)), exps(rng, (2, 3, 16, 1), -10, 10)
    b_q, b_e = ints(rng, (40, 24)), exps(rng, (1, 24), -10, 10)
    check_qmatmul(a_q, a_e, b_q, b_e)


def test_qmatmul_from_quantized_floats() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w = (rng.standard_normal((96, 48)) * 0.02).astype(np.float32)
    x_q, x_e = quantize(x, axis=-1)
    w_q, w_e = quantize(w, axis=0)
    check_qmatmul(x_q, x_e, w_q, w_e)


@pytest.mark.parametrize("k", [1, 1023, 1024, 1025, 2049])
@pytest.mark.parametrize(("va", "vb"), [(-128, -128), (127, 127), (-128, 127), (127, -127)])
def test_qmatmul_worst_cases(k: int, va: int, vb: int) -> None:
    a_q = np.full((3, k), va, dtype=np.float32)
    b_q = np.full((k, 4), vb, dtype=np.float32)
    zero_e = (np.zeros((3, 1), dtype=np.int32), np.zeros((1, 4), dtype=np.int32))
    check_qmatmul(a_q, zero_e[0], b_q, zero_e[1])
    if (va, vb, k) == (-128, -128, 1024):
        # The documented bound: acc = 2^24 exactly, still exact in float32.
        assert np.all(qmatmul(a_q, zero_e[0], b_q, zero_e[1]) == 2.0**24)
    a_e = np.array([[-3], [0], [7]], dtype=np.int32)
    b_e = np.array([[-2, 0, 5, 9]], dtype=np.int32)
    check_qmatmul(a_q, a_e, b_q, b_e)


@pytest.mark.parametrize("k", [64, 1024, 1025, 3000])
def test_qmatmul_alternating_signs(k: int) -> None:
    signs = np.where(np.arange(k) % 2 == 0, 1.0, -1.0).astype(np.float32)
    a_q = np.stack([127 * signs, -128 * signs, 127 * signs[::-1]])
    b_q = np.stack([127 * signs, -127 * signs, np.full(k, -128, np.float32)], axis=1)
    zero_a, zero_b = np.zeros((3, 1), np.int32), np.zeros((1, 3), np.int32)
    check_qmatmul(a_q, zero_a, b_q, zero_b)


@pytest.mark.parametrize("k", [5, 1024, 1025, 2048, 2049])
def test_last_row_column_and_chunk_edges(k: int) -> None:
    """Only the structural danger cells are non-zero: a dropped edge shows as a zero result."""
    m, n = 6, 5
    a_q = np.zeros((m, k), np.float32)
    b_q = np.zeros((k, n), np.float32)
    edges = sorted({0, k - 1, min(k - 1, 1023), min(k - 1, 1024), min(k - 1, 2047)})
    for j, kk in enumerate(edges):
        a_q[m - 1, kk] = 127 - j
        a_q[0, kk] = -128
        b_q[kk, n - 1] = -127 + 3 * j
        b_q[kk, 0] = 101
    a_e = np.arange(m, dtype=np.int32).reshape(m, 1) - 3
    b_e = np.arange(n, dtype=np.int32).reshape(1, n) - 2
    check_qmatmul(a_q, a_e, b_q, b_e)
    y = qmatmul(a_q, a_e, b_q, b_e)
    assert y[m - 1, n - 1] != 0 and y[0, 0] != 0


def test_zero_products_give_plus_zero() -> None:
    # acc = 0 must be +0 even when every product is -0 (+0 times a negative value).
    a_q = np.zeros((4, 16), np.float32)
    b_q = np.full((16, 3), -5.0, np.float32)
    z = (np.zeros((4, 1), np.int32), np.zeros((1, 3), np.int32))
    check_qmatmul(a_q, z[0], b_q, z[1])
    check_qmatmul(-np.ones((4, 16), np.float32), z[0], np.zeros((16, 3), np.float32), z[1])
    check_grad_left(a_q, a_q, z[0], b_q)


@pytest.mark.parametrize(
    ("a_range", "b_range"),
    [
        ((-106, -100), (-60, -20)),  # s < -126: reference path, results tiny or subnormal
        ((-106, -106), (-106, -106)),  # the smallest scales quantize produces: all underflow
        ((90, 94), (10, 13)),  # s + 24 > 127: reference path near the top (|acc| < 2^20)
        ((-90, 80), (-46, 27)),  # one product mixing both ends
    ],
)
def test_scales_at_the_ends_force_the_reference_path(
    a_range: tuple[int, int], b_range: tuple[int, int]
) -> None:
    rng = np.random.default_rng(7)
    a_q, b_q = ints(rng, (8, 40)), ints(rng, (40, 9))
    a_e, b_e = exps(rng, (8, 1), *a_range), exps(rng, (1, 9), *b_range)
    (a_e[0, 0], a_e[-1, 0]), (b_e[0, 0], b_e[0, -1]) = a_range, b_range
    assert not gemm._fast_ok(40, *s_range(a_e, b_e))
    with np.errstate(over="raise"):
        check_qmatmul(a_q, a_e, b_q, b_e)


def subnormal_expected(acc: int, s: int) -> np.float32:
    """f32(acc * 2^s) for a subnormal result, from Python integers: round acc * 2^(s+149)."""
    scaled = Fraction(acc) * Fraction(2) ** (s + 149)
    n = round(scaled)  # ties to even
    assert abs(n) < 2**23, "not a subnormal result"
    return np.float32(math.copysign(math.ldexp(float(n), -149), acc))


def exact_row(acc: int) -> list[float]:
    """A row [f1, f2, r] with 127 f1 + 127 f2 + r = acc and every entry in [-127, 127]."""
    f = max(-254, min(254, int(acc / 127)))
    f1 = max(-127, min(127, f))
    rest = acc - 127 * f
    assert abs(rest) <= 127
    return [float(f1), float(f - f1), float(rest)]


def test_subnormal_results_round_once() -> None:
    # acc = 2048 n + r at s = -160: ties (r = 1024) go to even, and -1024 rounds to -0.
    accs = [1024, 3072, 5120, -1024, -3072, 1025, 2047, 16129, -16129, 32257, -32384, 1]
    a_q = np.array([exact_row(acc) for acc in accs], np.float32)
    b_q = np.array([[127.0], [127.0], [1.0]], np.float32)
    a_e = np.full((len(accs), 1), -100, np.int32)
    b_e = np.full((1, 1), -60, np.int32)
    y = qmatmul(a_q, a_e, b_q, b_e)
    expected = np.array([[subnormal_expected(acc, -160)] for acc in accs], np.float32)
    assert_same_bits(y, expected, "subnormal results")
    assert y.view(np.uint32)[3, 0] == 0x80000000, "-1024 * 2^-160 rounds to -0"
    assert float(y[1, 0]) == 2 * 2.0**-149 and float(y[2, 0]) == 2 * 2.0**-149
    check_qmatmul(a_q, a_e, b_q, b_e)


# --- two-limb backward -------------------------------------------------------------------------

GRAD_SHAPES = [
    ((), 4, 1, 3),
    ((), 16, 64, 24),
    ((), 5, 1024, 6),
    ((), 5, 1025, 6),
    ((), 3, 3000, 4),
    ((2, 4), 8, 32, 16),
]


@pytest.mark.parametrize(("batch", "m", "k", "n"), GRAD_SHAPES)
def test_qmatmul_grad_left_exact(batch: tuple[int, ...], m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(11 + k)
    g_hi, g_lo = ints(rng, (*batch, m, k)), ints(rng, (*batch, m, k))
    g_e = exps(rng, (*batch, m, 1), -60, 40)
    b_q = ints(rng, (*batch, k, n), -128, 127)
    check_grad_left(g_hi, g_lo, g_e, b_q)
    if k <= gemm.K_CHUNK:
        assert gemm._fast_ok(k, int(g_e.min()) - LO_SHIFT, int(g_e.max()))


@pytest.mark.parametrize(("batch", "m", "k", "n"), GRAD_SHAPES)
def test_qmatmul_grad_right_exact(batch: tuple[int, ...], m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(13 + k)
    a_q = ints(rng, (*batch, m, k), -128, 127)
    g_hi, g_lo = ints(rng, (*batch, k, n)), ints(rng, (*batch, k, n))
    g_e = exps(rng, (*batch, 1, n), -60, 40)
    check_grad_right(a_q, g_hi, g_lo, g_e)


# quantize2 gives e >= -106, so e - 8 >= -114 stays on the fast path; these hand-made exponents
# reach the reference path from both ends (and subnormal results at the low end).
@pytest.mark.parametrize("g_range", [(-126, -119), (-126, 0), (104, 110), (-120, 104)])
def test_grad_scales_at_the_ends(g_range: tuple[int, int]) -> None:
    rng = np.random.default_rng(17)
    g_hi, g_lo, b_q = ints(rng, (6, 50)), ints(rng, (6, 50)), ints(rng, (50, 7))
    g_e = exps(rng, (6, 1), *g_range)
    g_e[0, 0], g_e[-1, 0] = g_range
    assert not gemm._fast_ok(50, int(g_e.min()) - LO_SHIFT, int(g_e.max()))
    with np.errstate(over="raise"):
        check_grad_left(g_hi, g_lo, g_e, b_q)
        check_grad_right(b_q.T.copy(), g_hi.T.copy(), g_lo.T.copy(), g_e.T.copy())


def test_grad_worst_cases() -> None:
    for k in (1024, 1025):
        g_hi = np.full((2, k), -127, np.float32)
        g_lo = np.full((2, k), -127, np.float32)
        b_q = np.full((k, 3), -128, np.float32)
        g_e = np.array([[0], [-20]], np.int32)
        check_grad_left(g_hi, g_lo, g_e, b_q)
        check_grad_right(b_q.T.copy(), g_hi.T.copy(), g_lo.T.copy(), g_e.T.copy())


def test_two_limb_sum_rounds_once() -> None:
    # 256 * acc_hi + acc_lo needs more than 24 bits: the result is the rounding of the exact sum,
    # not of a rounded hi part plus lo (acc_hi = 65535, acc_lo = 1 -> 16776961 is exact; with
    # acc_lo = 127 * 255 the sum is odd and above 2^24, so it must round to even once).
    g_hi = np.array([[127.0, 127.0, 127.0, 127.0]], np.float32)
    g_lo = np.array([[127.0, 127.0, 1.0, 1.0]], np.float32)
    b_q = np.array([[127.0], [127.0], [127.0], [127.0]], np.float32)
    g_e = np.zeros((1, 1), np.int32)
    check_grad_left(g_hi, g_lo, g_e, b_q)


@pytest.mark.parametrize(
    ("batch", "m", "k", "n"), [((), 32, 48, 20), ((), 4, 1500, 6), ((2,), 8, 16, 8)]
)
def test_grad_matmul_left_and_right(batch: tuple[int, ...], m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(19 + k)
    g = (rng.standard_normal((*batch, m, k)) * 1e-3).astype(np.float32)
    b_q = ints(rng, (*batch, k, n))
    fold_b = exps(rng, (*batch, 1, k), -12, -4)
    d_a = grad_matmul_left(g, fold_b, b_q)
    folded = (g.astype(np.float64) * np.ldexp(1.0, fold_b)).astype(np.float32)  # exact
    hi, lo, e = quantize2(folded, axis=-1)
    acc = 256 * imatmul(hi, b_q) + imatmul(lo, b_q)
    assert_same_bits(d_a, round_once(acc, e - LO_SHIFT), "grad_matmul_left")
    check_grad_left(hi, lo, e, b_q)

    a_q = ints(rng, (*batch, n, m))
    g2 = (rng.standard_normal((*batch, m, k)) * 1e-2).astype(np.float32)
    fold_a = exps(rng, (*batch, m, 1), -9, 3)
    d_b = grad_matmul_right(a_q, fold_a, g2)
    folded2 = (g2.astype(np.float64) * np.ldexp(1.0, fold_a)).astype(np.float32)
    hi2, lo2, e2 = quantize2(folded2, axis=-2)
    acc2 = 256 * imatmul(a_q, hi2) + imatmul(a_q, lo2)
    assert_same_bits(d_b, round_once(acc2, e2 - LO_SHIFT), "grad_matmul_right")
    check_grad_right(a_q, hi2, lo2, e2)


# --- mutation checks: each check above must detect a planted bug -------------------------------


def test_exactness_check_detects_a_too_large_k_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    # With K_CHUNK = 2048 a K = 2000 product runs through float32 BLAS whose partial sums pass
    # 2^24 and round. Random values near 127 are needed: with all-equal worst-case entries
    # (-128 or 127) OpenBLAS's lane-parallel partial sums stay exact and the bug goes unseen.
    rng = np.random.default_rng(23)
    a_q, b_q = ints(rng, (32, 2000), 100, 127), ints(rng, (2000, 32), 100, 127)
    a_e, b_e = np.zeros((32, 1), np.int32), np.zeros((1, 32), np.int32)
    check_qmatmul(a_q, a_e, b_q, b_e)
    monkeypatch.setattr(gemm, "K_CHUNK", 2048)
    with pytest.raises(AssertionError, match="qmatmul"):
        check_qmatmul(a_q, a_e, b_q, b_e)


def test_reference_path_check_detects_missing_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(29)
    a_q, b_q = ints(rng, (16, 3000), 100, 127), ints(rng, (3000, 16), 100, 127)
    e_a, e_b = np.zeros((16, 1), np.int32), np.zeros((1, 16), np.int32)
    monkeypatch.setattr(gemm, "K_CHUNK", 4096)  # int_matmul now sums 3000 terms in float32
    with pytest.raises(AssertionError):
        check_qmatmul(a_q, e_a, b_q, e_b)


def _double_rounding(acc: npt.NDArray[np.float64], s: I32Array) -> F32Array:
    """A planted bug: the accumulator is rounded to float32 before it is scaled."""
    out: F32Array = (acc.astype(np.float32).astype(np.float64) * np.exp2(s)).astype(np.float32)
    return out


def test_check_detects_double_rounding(monkeypatch: pytest.MonkeyPatch) -> None:
    # acc = 16129 * 1041 + 10 = 16790299 > 2^24 is odd: float32 rounds it up to 16790300, which
    # at s = -152 lands on a tie (n + 0.5, n odd) that rounds away from the true n.
    a_q = np.ones((1, 1042), np.float32)
    b_q = np.ones((1042, 1), np.float32)
    a_q[0, :1041], b_q[:1041, 0] = 127, 127
    b_q[1041, 0] = 10
    a_e, b_e = np.full((1, 1), -100, np.int32), np.full((1, 1), -52, np.int32)
    check_qmatmul(a_q, a_e, b_q, b_e)
    monkeypatch.setattr(gemm, "round_scaled", _double_rounding)
    with pytest.raises(AssertionError, match="qmatmul"):
        check_qmatmul(a_q, a_e, b_q, b_e)


def _limbs_rounded_separately(
    g_hi: F32Array, g_lo: F32Array, g_e: I32Array, b_q: F32Array
) -> F32Array:
    """A planted bug: hi and lo results rounded to float32 separately, then added (two roundings
    that happen to be exact whenever BLAS is, so only the reference-path shapes expose it)."""
    hi = round_scaled(int_matmul(g_hi, b_q), g_e)
    lo = round_scaled(int_matmul(g_lo, b_q), g_e - LO_SHIFT)
    out: F32Array = hi + lo
    return out


def test_check_detects_separately_rounded_limbs(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(31)
    g_hi, g_lo = ints(rng, (16, 1500), 100, 127), ints(rng, (16, 1500))
    b_q = ints(rng, (1500, 16), 100, 127)
    g_e = np.zeros((16, 1), np.int32)
    check_grad_left(g_hi, g_lo, g_e, b_q)
    monkeypatch.setattr(gemm, "qmatmul_grad_left", _limbs_rounded_separately)
    with pytest.raises(AssertionError, match="qmatmul_grad_left"):
        check_grad_left(g_hi, g_lo, g_e, b_q)


@pytest.mark.parametrize("k", [7, 1024, 2049])
def test_three_limb_products_are_the_exact_integer_rounded_once(k: int) -> None:
    """qmatmul_grad3_left/right against int64 arithmetic (contract v2, the logits gradient)."""
    from daisychain.numerics import gemm as g
    from daisychain.numerics.gemm import round_scaled

    rng = np.random.default_rng(k)
    m, n = 5, 6
    limbs = [rng.integers(-127, 128, (m, k)) for _ in range(3)]
    limbs[0][:, 0] = -127  # worst-case magnitudes beside random ones
    b = rng.integers(-128, 128, (k, n))
    e = rng.integers(-40, 20, (m, 1)).astype(np.int32)
    combined = (limbs[0] * 256 + limbs[1]) * 256 + limbs[2]  # int64, exact
    want = round_scaled((combined @ b).astype(np.float64), e - 16)  # |acc| < 2^53: exact
    f32 = [x.astype(np.float32) for x in limbs]
    got = g.qmatmul_grad3_left(*f32, e, b.astype(np.float32))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    got_r = g.qmatmul_grad3_right(b.T.astype(np.float32).copy(), *[x.T.copy() for x in f32], e.T)
    want_r = round_scaled((b.T @ combined.T).astype(np.float64), e.T - 16)
    assert np.array_equal(got_r.view(np.uint32), want_r.view(np.uint32))


def test_grad_matmul_refuses_a_limb_count_other_than_2_or_3() -> None:
    from daisychain.numerics import gemm as g

    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="2 or 3 limbs"):
        g.grad_matmul_left(x, np.zeros((1, 3), np.int32), np.ones((3, 2), np.float32), limbs=4)
    with pytest.raises(ValueError, match="2 or 3 limbs"):
        g.grad_matmul_right(np.ones((2, 3), np.float32), np.zeros((3, 1), np.int32), x, limbs=1)
