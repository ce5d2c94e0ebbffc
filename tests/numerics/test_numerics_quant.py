"""Power-of-two block quantization (docs/NUMERICS.md section 2) against independent arithmetic.

Every expected value here is computed without the module under test: exponents from
``math.frexp``, products and residuals in float64 or Python integers (all exact at these sizes),
rounding by an explicit ties-to-even rule. Floats are compared by bit pattern, so a -0 where the
contract promises +0 fails.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from daisychain.numerics import quant
from daisychain.numerics.quant import (
    E_CEIL,
    E_FLOOR,
    QuantizationError,
    dequantize,
    pow2,
    quantize,
    quantize2,
    quantize3,
    to_int8,
    to_int8_c,
)

F32 = np.float32
F32Array = npt.NDArray[np.float32]
I32Array = npt.NDArray[np.int32]


def f32_bits(bits: int) -> float:
    """The float32 with the given bit pattern, as a Python float (exact)."""
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def assert_same_bits(actual: F32Array, expected: F32Array, what: str) -> None:
    assert actual.dtype == np.float32 and expected.dtype == np.float32, what
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    diff = actual.view(np.uint32) != expected.view(np.uint32)
    if diff.any():
        i = tuple(int(v) for v in np.argwhere(diff)[0])
        raise AssertionError(
            f"{what}: {int(diff.sum())} elements differ, first at {i}: "
            f"{actual[i]!r} (0x{int(actual.view(np.uint32)[i]):08x}) != "
            f"{expected[i]!r} (0x{int(expected.view(np.uint32)[i]):08x})"
        )


def expected_exponent(amax: float) -> int:
    """The scale exponent rule, from math.frexp instead of bit fields."""
    if amax == 0.0:
        return 0
    _m, exp2 = math.frexp(amax)  # amax = m * 2^exp2, m in [0.5, 1)
    big_e = exp2 - 1  # amax = (2m) * 2^big_e, 2m in [1, 2)
    if big_e < E_FLOOR:
        return 0
    return big_e - 6 if amax * 2.0 ** (6 - big_e) < 127.5 else big_e - 5


def rne(v: float) -> float:
    """Round to nearest integer, ties to even (Python's round() is ties-to-even)."""
    return float(round(v))


def blocks_of(x: F32Array, axis: int) -> list[tuple[tuple[int | slice, ...], F32Array]]:
    """Every block (all elements sharing the indices outside ``axis``) with its index."""
    axis %= x.ndim
    other = [range(n) for i, n in enumerate(x.shape) if i != axis]
    out = []
    for idx in np.ndindex(*[len(r) for r in other]):
        full: list[int | slice] = list(idx)
        full.insert(axis, slice(None))
        out.append((tuple(full), x[tuple(full)]))
    return out


def check_quantize(x: F32Array, axis: int) -> None:
    """quantize(x, axis) equals the rule computed block by block in float64."""
    q, e = quantize(x, axis)
    shape_e = list(x.shape)
    shape_e[axis % x.ndim] = 1
    assert q.dtype == np.float32 and q.shape == x.shape
    assert e.dtype == np.int32 and list(e.shape) == shape_e
    q_exp = np.zeros_like(x)
    e_exp = np.zeros(shape_e, dtype=np.int32)
    for idx, block in blocks_of(x, axis):
        amax = float(np.max(np.abs(block.astype(np.float64))))
        eb = expected_exponent(amax)
        q_exp[idx] = [rne(v * 2.0**-eb) + 0.0 for v in block.astype(np.float64)]
        e_idx = tuple(0 if isinstance(i, slice) else i for i in idx)
        e_exp[e_idx] = eb
    np.testing.assert_array_equal(e, e_exp)
    assert_same_bits(q, q_exp.astype(np.float32), "q")
    assert not np.any(q.view(np.uint32) == 0x80000000), "-0 in q"
    assert float(np.max(np.abs(q), initial=0.0)) <= 127.0


def test_pow2_is_built_from_exponent_bits() -> None:
    e = np.arange(-126, 128, dtype=np.int32)
    np.testing.assert_array_equal(pow2(e).astype(np.float64), np.ldexp(1.0, e))
    with pytest.raises(ValueError, match="normal float32 range"):
        pow2(np.array([-127], dtype=np.int32))
    with pytest.raises(ValueError, match="normal float32 range"):
        pow2(np.array([128], dtype=np.int32))


@pytest.mark.parametrize("big_e", [-100, -37, -1, 0, 6, 23, 99])
def test_exponent_rule_puts_amax_in_range(big_e: int) -> None:
    # Every mantissa class that matters: 1.0, just below/at the bump, the largest mantissa.
    mantissas = [0x000000, 0x400000, 0x7EFFFF, 0x7F0000, 0x7F0001, 0x7FFFFF]
    for mant in mantissas:
        amax = f32_bits(((big_e + 127) << 23) | mant)
        x = np.array([[amax, -amax / 3, amax / 7]], dtype=np.float32)
        q, e = quantize(x, axis=-1)
        assert int(e[0, 0]) == expected_exponent(amax)
        bump = mant >= 0x7F0000
        assert int(e[0, 0]) == big_e - 6 + int(bump)
        scaled = amax * 2.0 ** -int(e[0, 0])
        # docs/NUMERICS.md: amax * 2^-e in [63.75, 127.5) (63.75 only at the bump).
        assert 63.75 <= scaled < 127.5, (hex(mant), scaled)
        assert 64.0 <= float(q[0, 0]) <= 127.0


def test_mantissa_bump_is_exactly_at_0x7f0000() -> None:
    below = f32_bits((133 << 23) | 0x7EFFFF)  # E = 6: amax = 127.4999923...
    at = f32_bits((133 << 23) | 0x7F0000)  # 127.5 exactly
    assert at == 127.5
    q, e = quantize(np.array([[below], [at], [-at]], dtype=np.float32), axis=-1)
    np.testing.assert_array_equal(e[:, 0], [0, 1, 1])
    np.testing.assert_array_equal(q[:, 0], [127.0, 64.0, -64.0])  # 63.75 -> 64


def test_bump_check_detects_planted_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    at = f32_bits((133 << 23) | 0x7F0000)
    x = np.array([[at, 1.0]], dtype=np.float32)
    check_quantize(x, -1)
    monkeypatch.setattr(quant, "MANT_BUMP", 0x7F0001)  # 127.5 would now round to 128
    with pytest.raises(AssertionError):
        check_quantize(x, -1)


@pytest.mark.parametrize("e", [0, -20, 37])
def test_ties_round_to_even(e: int) -> None:
    # amax 100 pins e (times 2^e); the other entries are x * 2^-e = +-k.5 ties.
    row = [100.0, 2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 1.5, -1.5, 126.5, -125.5, 4.5]
    x = (np.array([row], dtype=np.float64) * 2.0**e).astype(np.float32)
    q, qe = quantize(x, axis=-1)
    assert int(qe[0, 0]) == e
    expected = np.array([[100, 2, 4, -2, -4, 0, 0, 2, -2, 126, -126, 4]], dtype=np.float32)
    assert_same_bits(q, expected, "ties")  # -0.5 -> +0, not -0


def test_zero_and_negligible_blocks_are_all_plus_zero() -> None:
    smallest_subnormal = f32_bits(0x00000001)
    x = np.array(
        [
            [0.0, 0.0, 0.0, 0.0],
            [-0.0, -0.0, -0.0, -0.0],
            [smallest_subnormal, -smallest_subnormal, -0.0, 0.0],
            [2.0**-101, -(2.0**-101) * 1.999, 2.0**-120, -0.0],
            [f32_bits(0x0D7FFFFF), -1e-35, 0.0, 0.0],  # amax just below 2^-100
        ],
        dtype=np.float32,
    )
    q, e = quantize(x, axis=-1)
    np.testing.assert_array_equal(e, np.zeros((5, 1), dtype=np.int32))
    assert np.all(q.view(np.uint32) == 0), "zero blocks must be all +0 (bit pattern 0)"
    hi, lo, e2 = quantize2(x, axis=-1)
    assert np.all(hi.view(np.uint32) == 0) and np.all(lo.view(np.uint32) == 0)
    np.testing.assert_array_equal(e2, e)


def test_block_at_the_floor_is_quantized() -> None:
    x = np.array([[2.0**E_FLOOR, -(2.0**-110)]], dtype=np.float32)
    q, e = quantize(x, axis=-1)
    assert int(e[0, 0]) == E_FLOOR - 6
    np.testing.assert_array_equal(q, [[64.0, 0.0]])
    assert q.view(np.uint32)[0, 1] == 0


def test_negative_zero_inputs_in_nonzero_blocks_give_plus_zero() -> None:
    x = np.array([[-0.0, 50.0, -0.0, -1e-9, -0.25]], dtype=np.float32)
    q, _ = quantize(x, axis=-1)
    assert_same_bits(q, np.array([[0, 100, 0, 0, 0]], dtype=np.float32), "q")


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (float("nan"), "non-finite"),
        (float("inf"), "non-finite"),
        (float("-inf"), "non-finite"),
        (2.0**E_CEIL, "diverged"),
        (-(2.0**120), "diverged"),
        (float(np.finfo(np.float32).max), "diverged"),
    ],
)
def test_non_finite_or_exploding_input_raises_with_hint(value: float, match: str) -> None:
    x = np.array([[1.0, 2.0], [value, 1.0]], dtype=np.float32)
    for fn in (quantize, quantize2):
        with pytest.raises(QuantizationError, match=match) as info:
            fn(x, -1)
        assert "learning rate" in str(info.value), "the error must say what to do next"


def test_largest_accepted_magnitude() -> None:
    big = f32_bits(((E_CEIL - 1 + 127) << 23) | 0x7FFFFF)  # just below 2^E_CEIL
    q, e = quantize(np.array([[big, -big, 1.0]], dtype=np.float32), axis=-1)
    assert int(e[0, 0]) == E_CEIL - 1 - 5
    np.testing.assert_array_equal(q, [[64.0, -64.0, 0.0]])


def test_rejects_non_float32() -> None:
    with pytest.raises(TypeError, match="float32"):
        quantize(np.zeros((2, 2), dtype=np.float64), -1)


def random_wide(rng: np.random.Generator, shape: tuple[int, ...]) -> F32Array:
    """Values over many binades, both signs, some exact zeros and ties."""
    mant = rng.uniform(-1.0, 1.0, shape)
    scale = np.exp2(rng.integers(-60, 60, (*shape[:-1], 1)).astype(np.float64))
    spread = np.exp2(-rng.integers(0, 30, shape).astype(np.float64))
    x = (mant * scale * spread).astype(np.float32)
    x[rng.random(shape) < 0.05] = 0.0
    return x


@pytest.mark.parametrize(("shape", "axis"), [((37, 19), -1), ((37, 19), 0), ((3, 4, 5, 6), 1)])
def test_quantize_matches_rule_per_block(shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng(1)
    check_quantize(random_wide(rng, shape), axis)


@pytest.mark.parametrize("axis", [0, -1, 2, -2])
def test_quantize_4d_blocks(axis: int) -> None:
    rng = np.random.default_rng(2)
    check_quantize(random_wide(rng, (2, 3, 8, 5)), axis)


def test_range_error_bound_and_dequantize_exact() -> None:
    rng = np.random.default_rng(3)
    x = random_wide(rng, (512, 96))
    for axis in (0, -1):
        q, e = quantize(x, axis)
        assert np.all(np.abs(q) <= 127.0) and np.all(np.rint(q) == q)
        exact = np.ldexp(q.astype(np.float64), e)  # exact float64
        d = dequantize(q, e)
        assert_same_bits(d, exact.astype(np.float32), "dequantize")
        assert np.array_equal(d.astype(np.float64), exact), "dequantize must not round"
        # Round to nearest: error at most half a step.
        assert np.all(np.abs(x.astype(np.float64) - exact) <= np.ldexp(0.5, e))
        assert_same_bits(to_int8(q).astype(np.float32), q, "to_int8")


def expected_two_limb(x: F32Array, hi: F32Array, e: I32Array) -> npt.NDArray[np.float64]:
    """lo from float64 arithmetic: r = x - hi 2^e, lo = clamp(rne(r 2^(8-e)), -127, 127)."""
    r = x.astype(np.float64) - np.ldexp(hi.astype(np.float64), e)  # exact in float64
    lo = np.rint(np.ldexp(r, 8 - e))
    return np.clip(lo, -127, 127) + 0.0


@pytest.mark.parametrize(
    ("shape", "axis"), [((300, 64), -1), ((300, 64), 0), ((2, 3, 16, 9), -1), ((2, 3, 16, 9), 0)]
)
def test_two_limb_residual_and_reconstruction(shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng(4)
    x = random_wide(rng, shape)
    hi, lo, e = quantize2(x, axis)
    q, e1 = quantize(x, axis)
    assert_same_bits(hi, q, "hi equals the single-limb quantization")
    np.testing.assert_array_equal(e, e1)
    assert_same_bits(lo, expected_two_limb(x, hi, e).astype(np.float32), "lo")
    assert not np.any(lo.view(np.uint32) == 0x80000000), "-0 in lo"
    assert np.all(np.abs(lo) <= 127.0)
    x64 = x.astype(np.float64)
    recon = np.ldexp(256.0 * hi.astype(np.float64) + lo, e - 8)
    err = np.abs(x64 - recon)
    r = x64 - np.ldexp(hi.astype(np.float64), e)
    # The clamp fires whenever rne(|r| 2^(8-e)) would be 128, i.e. |r| >= 127.5 * 2^(e-8), not
    # only at a tie in hi (|r| = 2^(e-1)) as docs/NUMERICS.md section 2 says; there the error is
    # (|r| 2^(8-e) - 127) 2^(e-8), at most one lo step.
    clamp = np.abs(np.ldexp(r, 8 - e)) >= 127.5
    ok = err <= np.ldexp(1.0, e - 9)
    assert np.all(ok | clamp), f"{int((~ok & ~clamp).sum())} entries beyond 2^(e-9)"
    step = np.broadcast_to(np.ldexp(1.0, e - 8), err.shape)
    assert np.all(err[clamp] <= step[clamp])
    assert np.all(np.abs(lo[clamp]) == 127.0)


def test_two_limb_clamp_case() -> None:
    # amax 100 -> e = 0; 2.5 is a tie in hi (-> 2) so r = 0.5 and lo = 128 clamps to 127.
    # 1 + 127.75/256 is no tie, yet lo = rne(127.75) = 128 clamps too (error 0.75 lo steps).
    x = np.array([[100.0, 2.5, 3.5, -2.5, 1.25, -0.0, 1.0 + 127.75 / 256]], dtype=np.float32)
    hi, lo, e = quantize2(x, axis=-1)
    assert int(e[0, 0]) == 0
    assert_same_bits(hi, np.array([[100, 2, 4, -2, 1, 0, 1]], dtype=np.float32), "hi")
    assert_same_bits(lo, np.array([[0, 127, -127, -127, 64, 0, 127]], dtype=np.float32), "lo")


def test_two_limb_lo_ties_round_to_even() -> None:
    # e = 0: lo = rne(r * 256); r = 1.5/256 -> 2, r = 2.5/256 -> 2, r = -0.5/256 -> -0 -> +0.
    x = np.array([[100.0, 1.0 + 1.5 / 256, 1.0 + 2.5 / 256, 3.0 - 0.5 / 256]], dtype=np.float32)
    hi, lo, _ = quantize2(x, axis=-1)
    assert_same_bits(hi, np.array([[100, 1, 1, 3]], dtype=np.float32), "hi")
    assert_same_bits(lo, np.array([[0, 2, 2, 0]], dtype=np.float32), "lo")


def test_quantize3_extends_quantize2_and_keeps_the_softmax_tail() -> None:
    from daisychain.numerics.quant import quantize2, quantize3

    rng = np.random.default_rng(3)
    # a softmax-gradient-like row: one p - 1 entry, a positive tail over 30 binades below it
    x = (rng.uniform(0.5, 1.0, (8, 512)) * 2.0 ** -rng.integers(2, 30, (8, 512))).astype(np.float32)
    x[:, 3] = -0.7
    hi2, lo2, e2 = quantize2(x.copy(), -1)
    hi, mid, lo, e = quantize3(x.copy(), -1)
    assert np.array_equal(hi, hi2) and np.array_equal(mid, lo2) and np.array_equal(e, e2)
    assert np.abs(lo).max() <= 127 and not np.signbit(lo[lo == 0]).any()
    deq = ((hi.astype(np.float64) * 256 + mid) * 256 + lo) * np.ldexp(1.0, e - 16)
    err = np.abs(deq - x)
    free = np.abs(mid) < 127  # mid's clamp did not trigger: at most one lo step
    assert np.all(err[free] <= np.broadcast_to(np.ldexp(1.0, e - 16), x.shape)[free])
    assert np.all(err <= np.ldexp(1.0, e - 8))  # clamped mid: still two limbs' bound
    deq2 = (hi2.astype(np.float64) * 256 + lo2) * np.ldexp(1.0, e2 - 8)
    lost2, lost3 = (np.abs(d - x).sum() for d in (deq2, deq))
    assert lost3 < lost2 / 100  # the tail two limbs rounded away is kept


@pytest.mark.parametrize(
    "shape", [(1024, 256), (256, 1024), (300, 70), (1, 5), (5, 1), (3, 64, 48), (2, 2, 17, 33)]
)
def test_to_int8_c_is_the_plain_cast_in_c_order_for_every_layout(shape: tuple[int, ...]) -> None:
    """The blocked transposed cast (what the int8 GEMM is fed) gives the plain cast's bytes:
    contiguous, transposed views (2-D and batched) and a layout that is neither."""
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-127, 128, size=shape).astype(np.float32)
    views = [x, np.swapaxes(x, -1, -2), x[..., ::2, :], np.swapaxes(x[..., ::2], -1, -2)]
    # a broadcast operand (the one matrix both limbs of a gradient are multiplied by)
    views += [np.broadcast_to(v, (2, *v.shape)) for v in views[:2]]
    for v in views:
        got = to_int8_c(v)
        assert got.flags.c_contiguous and got.dtype == np.int8 and got.shape == v.shape
        assert np.array_equal(got, v.astype(np.int8))


@pytest.mark.parametrize("axis", [-1, -2])
def test_limbs_written_into_a_stack_are_the_same_bits(axis: int) -> None:
    """``quantize2``/``quantize3`` with ``out=`` (the stacked limbs the int8 GEMM takes in one
    call) give exactly the limbs and exponents of the plain call; a wrong buffer is refused."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, 40, 24)) * np.exp2(rng.integers(-20, 20, (6, 1, 1)))).astype(F32)
    for fn, limbs in ((quantize2, 2), (quantize3, 3)):
        plain = fn(x.copy(), axis)
        stack = np.empty((limbs, *x.shape), dtype=np.float32)
        stacked = fn(x.copy(), axis, overwrite=True, out=stack)
        for want, got in zip(plain, stacked, strict=True):
            assert np.array_equal(want.view(np.uint8), np.ascontiguousarray(got).view(np.uint8))
        for i in range(limbs):
            assert np.shares_memory(stacked[i], stack[i])
        for bad in (np.empty((limbs + 1, *x.shape), F32), np.empty((limbs, *x.shape), np.float64)):
            with pytest.raises(ValueError, match="limb buffer"):
                fn(x.copy(), axis, out=bad)
