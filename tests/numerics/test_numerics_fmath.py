"""The contract's own exp/log (docs/NUMERICS.md section 5) and the pinned tree sum (section 4).

Accuracy is measured in ulps against float64 ``np.exp``/``np.log`` rounded to float32 (the
correctly rounded value except in vanishingly rare near-ties) as the distance between the
ordered bit patterns. Measured maxima, over about 4e7 random inputs and an every-7th-float sweep
of [-86, 88] (exp) and an every-5th-float sweep of all positive normal floats (log): exp 3 ulp,
log 2 ulp; both monotone over every float in those ranges (exhaustive sweeps). The tests below
use a few million inputs and state those bounds.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from daisychain.numerics import fmath
from daisychain.numerics.fmath import exp, log
from daisychain.numerics.reduce import next_pow2, sequential_sum, tree_sum

F32 = np.float32
F32Array = npt.NDArray[np.float32]

EXP_MAX_ULP = 3
LOG_MAX_ULP = 2


def f32(bits: int) -> np.float32:
    return np.float32(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def bits_of(x: F32Array) -> npt.NDArray[np.uint32]:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def ordered(x: F32Array) -> npt.NDArray[np.int64]:
    """Bit patterns mapped to integers that count floats in order (so ulp distance = difference)."""
    b = bits_of(x).astype(np.int64)
    return np.where(b >= 2**31, -(b - 2**31), b)


def ulp_error(y: F32Array, ref64: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    out: npt.NDArray[np.int64] = np.abs(ordered(y) - ordered(ref64.astype(np.float32)))
    return out


def assert_bits(actual: F32Array, expected: list[int], what: str) -> None:
    got = [f"0x{int(b):08x}" for b in bits_of(actual)]
    assert got == [f"0x{b:08x}" for b in expected], what


# --- constants ---------------------------------------------------------------------------------


def significant_bits(v: np.float32) -> int:
    mant = (int(bits_of(np.array([v]))[0]) & 0x7FFFFF) | 0x800000
    return 24 - ((mant & -mant).bit_length() - 1)


def test_constants_match_their_bit_patterns_and_values() -> None:
    table = {
        "EXP_LO": (fmath.EXP_LO, 0xC2AC0000, -86.0),
        "EXP_HI": (fmath.EXP_HI, 0x42B00000, 88.0),
        "LOG2E": (fmath.LOG2E, 0x3FB8AA3B, float(np.float32(1 / math.log(2)))),
        "LN2_A": (fmath.LN2_A, 0x3F317200, 0.693145751953125),
        "LN2_B": (fmath.LN2_B, 0x35BFBF00, None),
        "LN2_C": (fmath.LN2_C, 0xAD630880, None),
        "LN2_HI": (fmath.LN2_HI, 0x3F317200, 0.693145751953125),
        "LN2_LO": (fmath.LN2_LO, 0x35BFBE8E, float(np.float32(math.log(2) - 0.693145751953125))),
    }
    for name, (value, bits, decimal) in table.items():
        assert isinstance(value, np.float32), name
        assert int(bits_of(np.array([value]))[0]) == bits, name
        if decimal is not None:
            assert float(value) == decimal, name
    # k * LN2_A and k * LN2_B are exact for |k| <= 127 (7 bits): both need <= 17 significant bits.
    assert significant_bits(fmath.LN2_A) <= 16 and significant_bits(fmath.LN2_B) <= 16
    for k in range(-127, 128):
        assert Fraction(float(F32(k) * fmath.LN2_A)) == k * Fraction(float(fmath.LN2_A))
        assert Fraction(float(F32(k) * fmath.LN2_B)) == k * Fraction(float(fmath.LN2_B))
    # The three-piece ln 2 agrees with ln 2 far beyond float32 precision.
    ln2_sum = sum(Fraction(float(c)) for c in (fmath.LN2_A, fmath.LN2_B, fmath.LN2_C))
    assert abs(float(ln2_sum) - math.log(2)) < 2.0**-50
    coefs = [1.0, 1.0, 0.5, 1 / 6, 1 / 24, 1 / 120, 1 / 720]
    assert [float(c) for c in fmath.EXP_COEF] == [float(np.float32(c)) for c in coefs]
    assert [float(c) for c in fmath.LOG_COEF] == [float(np.float32(1 / n)) for n in (3, 5, 7, 9)]
    assert int(fmath.SQRT2_MANT) == int(bits_of(np.array([math.sqrt(2)], np.float32))[0]) & 0x7FFFFF


# --- exp ---------------------------------------------------------------------------------------


def test_exp_special_values() -> None:
    below_lo = np.nextafter(fmath.EXP_LO, F32(-np.inf))
    above_hi = np.nextafter(fmath.EXP_HI, F32(np.inf))
    x = np.array([0.0, -0.0, -np.inf, np.inf, below_lo, -90.0, above_hi, 1e30, -1e30], np.float32)
    assert_bits(
        exp(x),
        [0x3F800000, 0x3F800000, 0, 0x7F800000, 0, 0, 0x7F800000, 0x7F800000, 0],
        "exp special values",
    )
    assert np.isnan(exp(np.array([np.nan], np.float32))[0])
    edge = exp(np.array([fmath.EXP_LO, fmath.EXP_HI], np.float32))
    assert np.all(np.isfinite(edge)) and float(edge[0]) >= 2.0**-126, "exp(-86) stays normal"
    ref = np.exp(np.array([-86.0, 88.0]))
    assert np.all(ulp_error(edge, ref) <= EXP_MAX_ULP)


def test_exp_of_zero_is_exactly_one() -> None:
    assert exp(np.array([0.0], np.float32))[0] == 1.0
    tiny = np.array([2.0**-30, -(2.0**-30), 2.0**-149], np.float32)
    assert np.all(exp(tiny) == 1.0)


def test_exp_accuracy() -> None:
    rng = np.random.default_rng(41)
    worst = 0
    for lo, hi in ((-90.0, 0.0), (-86.0, 88.0), (-1.0, 1.0)):
        x = rng.uniform(lo, hi, 2_000_000).astype(np.float32)
        x = x[(x >= fmath.EXP_LO) & (x <= fmath.EXP_HI)]
        worst = max(worst, int(ulp_error(exp(x), np.exp(x.astype(np.float64))).max()))
    # Uniform over bit patterns too: small |x| where r is tiny and rounding dominates.
    b = rng.integers(0, 2**32, 4_000_000, dtype=np.uint64).astype(np.uint32)
    x = b.view(np.float32)
    x = x[(x >= fmath.EXP_LO) & (x <= fmath.EXP_HI)]
    worst = max(worst, int(ulp_error(exp(x), np.exp(x.astype(np.float64))).max()))
    assert worst <= EXP_MAX_ULP, f"exp is {worst} ulp off"


def transition_grid(points: npt.NDArray[np.float64], width: int) -> F32Array:
    """Every float within ``width`` steps of each point, ascending."""
    centre = points.astype(np.float32).view(np.int32).astype(np.int64)
    offs = np.arange(-width, width + 1)
    pos = centre[:, None] + np.where(points[:, None] >= 0, offs, -offs)
    grid = np.unique(pos.ravel().astype(np.uint32).view(np.float32))
    out: F32Array = np.sort(grid)
    return out


def test_exp_monotone_on_a_dense_grid() -> None:
    # Around every switch of k (x = (k + 1/2) ln 2) and the range ends, plus a contiguous run.
    ks = np.arange(-125, 128)
    points = np.concatenate([(ks + 0.5) * math.log(2), [-86.0, 88.0, 0.0, -1.0, 1.0]])
    grid = transition_grid(points, 400)
    run = (np.arange(0, 1 << 20, dtype=np.uint32) + np.uint32(0x3F000000)).view(np.float32)
    x = np.sort(np.concatenate([grid, run, -run]))
    x = x[(x >= fmath.EXP_LO) & (x <= fmath.EXP_HI)]
    y = exp(x)
    assert np.all(np.diff(y) >= 0), "exp is not monotone"


def test_exp_keeps_results_out_of_the_subnormal_range() -> None:
    x = np.linspace(-86.0, -80.0, 100_001, dtype=np.float32)
    y = exp(x)
    assert float(y.min()) >= 2.0**-126


# --- log ---------------------------------------------------------------------------------------


def test_log_special_values() -> None:
    x = np.array(
        [
            1.0,
            0.0,
            -0.0,
            float(f32(0x00000001)),  # smallest subnormal
            float(f32(0x007FFFFF)),  # largest subnormal
            np.inf,
        ],
        np.float32,
    )
    assert_bits(
        log(x), [0x00000000, 0xFF800000, 0xFF800000, 0xFF800000, 0xFF800000, 0x7F800000], "log"
    )
    nans = log(np.array([-1.0, -np.inf, np.nan, -(2.0**-140), -1e30], np.float32))
    assert np.all(np.isnan(nans))
    edge = np.array([f32(0x00800000), f32(0x7F7FFFFF), 2.0, 0.5], np.float32)
    assert np.all(ulp_error(log(edge), np.log(edge.astype(np.float64))) <= LOG_MAX_ULP)


def test_log_accuracy() -> None:
    rng = np.random.default_rng(43)
    b = rng.integers(0x00800000, 0x7F800000, 4_000_000, dtype=np.uint64).astype(np.uint32)
    near_one = rng.uniform(0.5, 2.0, 1_000_000).astype(np.float32)
    worst = 0
    for x in (b.view(np.float32), near_one):
        worst = max(worst, int(ulp_error(log(x), np.log(x.astype(np.float64))).max()))
    assert worst <= LOG_MAX_ULP, f"log is {worst} ulp off"


def test_log_monotone_on_a_dense_grid() -> None:
    binades = np.ldexp(1.0, np.arange(-126, 128)).astype(np.float64)
    points = np.concatenate([binades, binades * math.sqrt(2), binades / math.sqrt(2)])
    points = points[(points >= 2.0**-126) & (points < 3.4e38)]
    grid = transition_grid(points, 300)
    run = (np.arange(0, 1 << 21, dtype=np.uint32) + np.uint32(0x3F400000)).view(np.float32)
    x = np.sort(np.concatenate([grid, run]))
    x = x[(x >= 2.0**-126) & np.isfinite(x)]
    assert np.all(np.diff(log(x)) >= 0), "log is not monotone"


# --- tree_sum ----------------------------------------------------------------------------------


def tree_reference(values: list[float]) -> np.float32:
    """The pinned order spelled out with scalar float32 adds: pad with +0 and halve."""
    xs = [F32(v) for v in values]
    xs += [F32(0.0)] * (next_pow2(len(xs)) - len(xs))
    while len(xs) > 1:
        h = len(xs) // 2
        xs = [F32(xs[i] + xs[i + h]) for i in range(h)]
    return xs[0]


def test_tree_sum_pinned_order_differs_from_sequential_and_np_sum() -> None:
    # Three values: the pinned order is (a + c) + (b + 0); sequential is (a + b) + c.
    a, b, c = F32(2.0**-24), F32(1.0), F32(2.0**-24)
    by_hand = F32(F32(a + c) + F32(b + F32(0.0)))
    sequential = F32(F32(a + b) + c)
    assert by_hand == F32(1.0 + 2.0**-23) and sequential == F32(1.0)
    x = np.array([a, b, c], np.float32)
    assert tree_sum(x).reshape(-1)[0] == by_hand
    assert np.sum(x) != by_hand, "np.sum happens to use the pinned order here"
    # Eight values: (x0 + x4) + (x2 + x6) + ... pairs that differ from numpy's unrolled order.
    y = np.array([1.0, 2.0**-24, 3.0**-1, 2.0**-24, -1.0, 2.0**-24, 7.0, 2.0**-24], np.float32)
    assert bits_of(tree_sum(y).reshape(1))[0] == bits_of(np.array([tree_reference(list(y))]))[0]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 8, 9, 100, 127, 128, 129, 1000])
def test_tree_sum_matches_the_spelled_out_order(n: int) -> None:
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
    got = tree_sum(x)
    assert got.size == 1 and got.dtype == np.float32
    assert bits_of(got.reshape(1))[0] == bits_of(np.array([tree_reference(list(x))]))[0]


def test_tree_sum_of_a_vector_is_0d() -> None:
    x = np.ones(3, np.float32)
    assert tree_sum(x).shape == ()
    assert tree_sum(x, keepdims=True).shape == (1,)


def test_tree_sum_padding_is_plus_zero() -> None:
    neg_zero = F32(-0.0)
    one = tree_sum(np.array([neg_zero], np.float32))
    four = tree_sum(np.array([neg_zero] * 4, np.float32))
    three = tree_sum(np.array([neg_zero] * 3, np.float32))
    assert bits_of(one.reshape(1))[0] == 0x80000000
    assert bits_of(four.reshape(1))[0] == 0x80000000
    assert bits_of(three.reshape(1))[0] == 0, "padding with +0 turns a -0 sum into +0"


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("keepdims", [False, True])
def test_tree_sum_axis_and_keepdims(axis: int, keepdims: bool) -> None:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((5, 6, 7)) * np.exp2(rng.integers(-12, 12, (5, 6, 7)))).astype(
        np.float32
    )
    got = tree_sum(x, axis=axis, keepdims=keepdims)
    moved = np.moveaxis(x, axis, -1)
    expected = np.array(
        [tree_reference(list(row)) for row in moved.reshape(-1, moved.shape[-1])], np.float32
    ).reshape(moved.shape[:-1])
    if keepdims:
        expected = np.expand_dims(expected, axis)
    assert got.shape == expected.shape
    assert np.array_equal(bits_of(got), bits_of(expected))


def test_tree_sum_rejects_bad_input() -> None:
    with pytest.raises(TypeError, match="float32"):
        tree_sum(np.zeros(4, np.float64))
    with pytest.raises(ValueError, match="empty"):
        tree_sum(np.zeros((3, 0), np.float32))


def test_sequential_sum_is_left_to_right_from_plus_zero() -> None:
    vals = [F32(1.0), F32(2.0**-24), F32(2.0**-24)]
    assert sequential_sum(vals) == F32(1.0)
    assert bits_of(np.array([sequential_sum([F32(-0.0)])]))[0] == 0, "starts from +0"
