"""The fused CPU passes (``daisychain.cpu.fused``: numba loops for the quantize, dequantize and
audit around a batched GEMM's products): the numpy reference's bits, proven by gates at start
that are each shown refusing a planted bug, and the live quantizer inside the step probe.

numba is a test extra, so nothing here skips in CI; only the tests that train through the CPU
int8 GEMM need onnxruntime too (also a test extra) and its gates passing on this CPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from daisychain import training
from daisychain.cpu import fused as cpufused
from daisychain.cpu import int8 as cpuint8
from daisychain.gpu import live
from daisychain.gpu.backend import Backend
from daisychain.gpu.live import KernelAuditError, step_probe, training_ops
from daisychain.gpu.probe import elementwise_operand, reference_step_probe
from daisychain.model import gpt
from daisychain.model.config import preset
from daisychain.model.ops import IntGemmOps
from daisychain.numerics import gemm as ref
from daisychain.numerics.quant import (
    LO_SHIFT,
    QuantizationError,
    pow2,
    quantize,
    quantize2,
    quantize3,
)
from daisychain.optim import AdamWConfig

pytest.importorskip("numba", reason="the fused passes need numba (test extras)")

Kernels = dict[str, Callable[..., Any]]


@pytest.fixture(scope="module")
def fused() -> cpufused.FusedPasses:
    passes, why = cpufused.evaluate()
    assert passes is not None, f"the fused passes failed their gates on this machine: {why}"
    return passes


def _bits(x: npt.NDArray[Any]) -> npt.NDArray[Any]:
    return x.view(np.uint32) if x.dtype == np.float32 else x


@pytest.mark.parametrize("limbs", [1, 2, 3])
@pytest.mark.parametrize("axis", [-1, -2])
@pytest.mark.parametrize("fold", ["none", "rows", "cols"])
def test_quantize_gives_numpys_bits_on_training_shapes(
    fused: cpufused.FusedPasses, limbs: int, axis: int, fold: str
) -> None:
    """A gradient-like batched operand (attention's (B, H, T, T)), its scales spread over 2^60,
    with the other operand's scales folded in by rows or columns as the model does."""
    rng = np.random.default_rng(limbs * 10 + axis)  # test input only
    g = rng.standard_normal((2, 3, 33, 40)) * np.exp2(rng.integers(-30, 30, (2, 3, 33, 1)))
    g = g.astype(np.float32)
    g[0, 0, 4, :] = 0.0  # an all-zero block (e = 0)
    g[1, 2, :, 7] = -0.0
    fold_e = None
    if fold != "none":
        shape = (2, 3, 33, 1) if fold == "rows" else (2, 3, 1, 40)
        fold_e = rng.integers(-12, 12, shape).astype(np.int32)
    x = g if fold_e is None else np.multiply(g, pow2(fold_e))
    *want, want_e = (quantize, quantize2, quantize3)[limbs - 1](x.copy(), axis)
    got, got8, got_e = fused.quantize_limbs(g, fold_e, axis, limbs)
    none, only8, only_e = fused.quantize_limbs(g, fold_e, axis, limbs, floats=False)
    assert got is not None and none is None
    assert np.array_equal(got_e, want_e) and np.array_equal(only_e, want_e)
    for i in range(limbs):
        assert np.array_equal(_bits(got[i]), _bits(want[i])), f"limb {i}"
        assert np.array_equal(got8[i], want[i].astype(np.int8)), f"int8 limb {i}"
        assert np.array_equal(only8[i], want[i].astype(np.int8)), f"int8-only limb {i}"
    assert got8.flags.c_contiguous and only8.flags.c_contiguous and only8.dtype == np.int8


@pytest.mark.parametrize("limbs", [1, 2, 3])
def test_dequantize_gives_round_scaleds_bits(fused: cpufused.FusedPasses, limbs: int) -> None:
    rng = np.random.default_rng(limbs)  # test input only
    parts = rng.integers(-(2**31), 2**31, (limbs, 4, 30, 50), dtype=np.int64).astype(np.int32)
    row = rng.integers(-130, 40, (4, 30, 1)).astype(np.int32)
    col = rng.integers(-100, 30, (4, 1, 50)).astype(np.int32)
    combined = parts[0].astype(np.float64)
    for p in parts[1:]:
        combined = combined * float(1 << LO_SHIFT) + p
    with np.errstate(over="ignore"):
        want = ref.round_scaled(combined, row + col)
        got = fused.dequantize(parts, row, col)
    assert np.array_equal(_bits(got), _bits(want))


def test_a_non_finite_or_diverged_gradient_is_refused_with_numpys_message(
    fused: cpufused.FusedPasses,
) -> None:
    g = np.ones((4, 8), dtype=np.float32)
    g[2, 5] = np.nan
    with pytest.raises(QuantizationError, match="non-finite value"):
        fused.quantize_limbs(g, None, -1, 2)
    g[2, 5] = 2.0**101
    with pytest.raises(QuantizationError, match="magnitude 2\\^101"):
        fused.quantize_limbs(g, None, -2, 3)
    with pytest.raises(TypeError, match="float32"):
        fused.quantize_limbs(g.astype(np.float64), None, -1, 2)  # type: ignore[arg-type]


# -- planted bugs: each one passes for most inputs, and the gates refuse every one ---------------


def _wrap(name: str, after: Callable[..., None]) -> Kernels:
    """The real kernels, with ``name`` followed by ``after(*args)`` (which plants the bug)."""
    kernels = dict(cpufused._kernels())
    inner = kernels[name]

    def planted(*args: Any) -> Any:
        result = inner(*args)
        after(*args)
        return result

    kernels[name] = planted
    return kernels


def _limb_off(g, fr, fc, q, q8, e) -> None:  # type: ignore[no-untyped-def]
    q[-1, -1, -1, -1] += 1  # the last limb of the last cell one unit off, float32 and int8
    q8[-1, -1, -1, -1] += 1


def _int8_only_off(g, fr, fc, q, q8, e) -> None:  # type: ignore[no-untyped-def]
    q8[0, 0, 0, 0] += 1  # what the GEMM gets differs from what the audit reads


def _negative_zero(g, fr, fc, q, q8, e) -> None:  # type: ignore[no-untyped-def]
    q[np.where(q == 0)] = -0.0  # the "+ 0" forgotten: -0 and +0 are different bits


def _exponent_off(g, fr, fc, q, q8, e) -> None:  # type: ignore[no-untyped-def]
    e[0, 0] += 1


def _dequantize_ulp(parts, fr, fc, out) -> None:  # type: ignore[no-untyped-def]
    flat = out.reshape(-1).view(np.uint32)
    flat[flat.size // 2] += 1  # one ulp in one cell


# "_i8": the int8-only loops training and the step probe use; the others also write float32
PLANTS: dict[str, Kernels | Callable[[], Kernels]] = {
    "a limb one unit off in one cell": lambda: _wrap("rows2", _limb_off),
    "a column-block limb one unit off, int8-only loop": lambda: _wrap("cols3_i8", _limb_off),
    "a limb one unit off, int8-only loop": lambda: _wrap("rows2_i8", _limb_off),
    "the int8 limb differs from the float32 one": lambda: _wrap("rows1", _int8_only_off),
    "-0 left in the limbs": lambda: _wrap("cols2", _negative_zero),
    "a block's exponent one too high": lambda: _wrap("rows3", _exponent_off),
    "a block's exponent one too high, int8-only loop": lambda: _wrap("cols1_i8", _exponent_off),
    "the dequantize one ulp off in one cell": lambda: _wrap("dequantize2", _dequantize_ulp),
}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_planted_bug_in_a_fused_pass_is_refused_by_the_gates(plant: str) -> None:
    make = PLANTS[plant]
    kernels = make() if callable(make) else make
    passes, why = cpufused.evaluate(cpufused.FusedPasses(kernels))
    assert passes is None and why is not None and "differ from numpy" in why, why


def test_a_dequantize_rounding_in_float32_is_refused_by_the_gates() -> None:
    """A plausible wrong implementation, not a one-cell plant: the limbs combined in float32,
    which rounds before the scale does (right wherever the combined value fits 24 bits)."""
    kernels = dict(cpufused._kernels())

    def float32_combine(parts, fr, fc, out) -> None:  # type: ignore[no-untyped-def]
        acc = parts[0].astype(np.float32)
        for p in parts[1:]:
            acc = acc * np.float32(256) + p.astype(np.float32)
        out[...] = (acc * fr[:, :, None] * fc[:, None, :]).astype(np.float32)

    kernels["dequantize2"] = float32_combine
    passes, why = cpufused.evaluate(cpufused.FusedPasses(kernels))
    assert passes is None and why is not None and "dequantize, 2 limb(s)" in why, why


def _audit_kernel(verdict: Callable[[int], int]) -> Kernels:
    kernels = dict(cpufused._kernels())
    inner = kernels["first_failing"]
    kernels["first_failing"] = lambda *args: verdict(inner(*args))
    return kernels


@pytest.mark.parametrize(
    ("plant", "verdict"),
    [
        ("an audit that passes everything", lambda bad: -1),
        ("an audit that names the wrong slice", lambda bad: -1 if bad < 0 else bad - 1),
    ],
)
def test_a_planted_bug_in_the_fused_audit_is_refused_by_the_gates(
    plant: str, verdict: Callable[[int], int]
) -> None:
    passes, why = cpufused.evaluate(cpufused.FusedPasses(_audit_kernel(verdict)))
    assert passes is None and why is not None and "audit:" in why, (plant, why)


@pytest.mark.parametrize(
    ("name", "a", "b", "out", "want"),
    cpufused.audit_cases(np.random.default_rng(3)),
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_the_fused_audit_names_the_slice_numpys_names(
    fused: cpufused.FusedPasses, name: str, a: Any, b: Any, out: Any, want: Any
) -> None:
    """Each place an error can hide (a corner, an edge column, a tile-edge crossing, an interior
    cell only the sums see, a rectangle that cancels in every sum and is seen only as a
    scheduled cell), planted in the last slice of three."""
    got = fused.first_failing_slice(a, b, out, 8, seed=0, rotation=0, tile=(8, 8))
    assert got == want, name


def test_the_fused_audit_reads_only_the_cells_of_its_rotation(
    fused: cpufused.FusedPasses,
) -> None:
    """Errors that cancel in every sum, away from every danger line: only the rotation that
    schedules that cell sees them, exactly as the numpy audit's schedule says."""
    from daisychain.gpu.audit import danger_lines, first_failing_slice, scheduled_cells

    rng = np.random.default_rng(9)  # test input only
    a = rng.integers(-128, 128, (1, 64, 100), dtype=np.int64).astype(np.int8)
    b = rng.integers(-128, 128, (1, 100, 64), dtype=np.int64).astype(np.int8)
    out = np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)
    lines = set(danger_lines(64, 16))
    free = [i for i in range(64) if i not in lines and i + 2 not in lines and i + 2 < 64]
    i, j = free[3], free[5]
    for di, dj, d in ((0, 0, 1), (0, 2, -1), (2, 0, -1), (2, 2, 1)):
        out[0, i + di, j + dj] += d
    seen = [
        r for r in range(64 * 64 // 16)
        if (i, j) in scheduled_cells(64, 64, 16, 4, r)
        or (i, j + 2) in scheduled_cells(64, 64, 16, 4, r)
        or (i + 2, j) in scheduled_cells(64, 64, 16, 4, r)
        or (i + 2, j + 2) in scheduled_cells(64, 64, 16, 4, r)
    ]  # fmt: skip
    for rotation in range(64 * 64 // 16):
        kw: dict[str, Any] = {"seed": 4, "rotation": rotation, "tile": (16, 16)}
        want = (0,) if rotation in seen else None
        assert first_failing_slice(a, b, out, 16, **kw) == want
        assert fused.first_failing_slice(a, b, out, 16, **kw) == want, rotation


def test_without_numba_training_uses_numpys_passes_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpufused, "available", lambda: False)
    monkeypatch.setattr(cpufused, "_PROVEN", [])
    passes, why = cpufused.proven()
    assert passes is None and why == "numba is not installed"
    assert cpufused.describe() == "numpy (numba is not installed)"
    assert "numba is not installed" in (cpufused.evaluate()[1] or "")

    class Batched:
        name = "cpu-int8"

        def matmul_int_batched(self, a: Any, b: Any) -> Any: ...

    assert live._passes(Backend(Batched(), "cpu"), "proven") is None  # type: ignore[arg-type]


# -- in training, through the CPU int8 GEMM ------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_gemm() -> cpuint8.CpuInt8Gemm:
    pytest.importorskip("onnxruntime", reason="the CPU int8 GEMM needs onnxruntime")
    gemm, why = cpuint8.evaluate()
    if gemm is None:
        pytest.skip(f"the gates refused the CPU int8 GEMM here: {why}")
    assert isinstance(gemm, cpuint8.CpuInt8Gemm)
    return gemm


def _hashes(cfg_name: str, ops: Any, steps: int = 3) -> list[str]:
    cfg = preset(cfg_name)
    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    if ops is not None:
        state.ops = ops
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    out = []
    for _ in range(steps):
        x, y = training.next_batch(state, tokens)
        out.append(training.train_step(state, x, y).hash)
    return out


def test_training_through_the_fused_passes_keeps_numpys_bits(
    fused: cpufused.FusedPasses, cpu_gemm: cpuint8.CpuInt8Gemm
) -> None:
    cpu = Backend(cpu_gemm, "cpu")
    want = _hashes("tiny", None)
    assert _hashes("tiny", training_ops(cpu, passes=fused)) == want, "fused, audited"
    assert _hashes("tiny", training_ops(cpu, passes=None)) == want, "numpy passes, audited"
    raw = IntGemmOps("raw", cpu_gemm.matmul_int, cpu_gemm.matmul_float, None, fused)
    assert _hashes("tiny", raw) == want, "fused, unaudited (bench step's side)"


@pytest.mark.parametrize("which", ["fused", "numpy"])
def test_an_interior_cell_of_one_head_is_caught_by_either_audit(
    fused: cpufused.FusedPasses, cpu_gemm: cpuint8.CpuInt8Gemm, which: str
) -> None:
    """One unit off in an interior cell (no danger line) of the last head's scores: the row
    and column sums of both audits see it, and the report names the slice."""
    cfg = preset("tiny")
    head = cfg.width // cfg.heads

    class OneCell:
        name = "cpu-int8"

        def matmul_int(self, a: Any, b: Any) -> Any:
            return cpu_gemm.matmul_int(a, b)

        def matmul_int_batched(self, a: Any, b: Any) -> Any:
            out = cpu_gemm.matmul_int_batched(a, b)
            if a.shape[-2:] == (cfg.seq_len, head) and b.shape[-1] == cfg.seq_len:
                out[(*(d - 1 for d in out.shape[:-2]), 5, 3)] += 1
            return out

    ops = training_ops(Backend(OneCell(), "cpu"), passes=fused if which == "fused" else None)
    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    state.ops = ops
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    x, y = training.next_batch(state, tokens)
    last = f"slice ({cfg.batch - 1}, {cfg.heads - 1})"
    with pytest.raises(KernelAuditError, match=re.escape(last)):
        gpt.forward_backward(state.params, cfg, x, y, ops)


def test_the_step_probe_quantizes_through_the_live_passes(
    fused: cpufused.FusedPasses, cpu_gemm: cpuint8.CpuInt8Gemm
) -> None:
    """The honest fused quantizer gives the reference step probe; one that is wrong only on the
    probe's own matrix (so it passes every gate case) publishes another, which the sync guard
    refuses at the next step."""
    cpu = Backend(cpu_gemm, "cpu")
    assert step_probe(cpu, fused) == reference_step_probe()
    assert step_probe(cpu) == reference_step_probe()  # as the peer calls it
    probe_shape = elementwise_operand().shape

    def off_on_probe(g, fr, fc, q, q8, e) -> None:  # type: ignore[no-untyped-def]
        if g.shape[1:] == probe_shape:
            q8[0, 0, 3, 4] += 1

    planted = cpufused.FusedPasses(_wrap("rows2_i8", off_on_probe))
    assert cpufused.evaluate(planted)[0] is not None, "the plant must slip past the gates"
    assert step_probe(cpu, planted) != reference_step_probe()


def test_the_int8_values_made_by_the_quantizing_pass_reach_the_gemm_uncast(
    fused: cpufused.FusedPasses,
) -> None:
    """With fused passes every operand's int8 values come from the pass that quantized it:
    the forward's activations and weights (``QTensor.q8``) and the gradient limbs. Each is
    ``q``'s integers, and every product of a step hands its int8 operands to the GEMM, so
    nothing is cast from float32 again. The numpy reference makes no int8 mirror."""
    cfg = preset("tiny")
    seen: list[tuple[bool, bool]] = []

    def batched(a: Any, b: Any, *, a8: Any = None, b8: Any = None) -> Any:
        for q, q8 in ((a, a8), (b, b8)):
            if q8 is not None:
                assert q8.dtype == np.int8 and np.array_equal(
                    np.broadcast_to(q8, q.shape), q.astype(np.int8)
                )
        seen.append((a8 is not None or a.dtype == np.int8, b8 is not None or b.dtype == np.int8))
        return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)

    ops = IntGemmOps("recorder", lambda a, b: batched(a, b), batched, None, fused)
    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    x, y = training.next_batch(state, tokens)
    gpt.forward_backward(state.params, cfg, x, y, ops)
    assert seen and all(a and b for a, b in seen), (
        f"cast again: {seen.count((True, True))}/{len(seen)}"
    )
    q, _, q8 = ops.quantize(np.linspace(-3, 3, 40, dtype=np.float32).reshape(5, 8), -1)
    assert q8 is not None and np.array_equal(q8, q.astype(np.int8))
    assert gpt.NUMPY_OPS.quantize(q, -1)[2] is None


def test_a_numba_that_cannot_build_or_run_the_passes_is_refused_with_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """numba installed but broken here (an incompatible numpy, a compiler error) must not stop
    training: the passes are refused with the reason and numpy's run (same bits)."""

    def broken() -> Kernels:
        raise ImportError("numba needs a numpy older than this one")

    monkeypatch.setattr(cpufused, "_kernels", broken)
    passes, why = cpufused.evaluate()
    assert passes is None and why is not None
    assert "could not build" in why and "older than this one" in why
    monkeypatch.undo()

    def crash(*args: Any) -> None:
        raise RuntimeError("typing error in the loop")

    kernels = dict(cpufused._kernels())
    kernels["dequantize3"] = crash
    passes, why = cpufused.evaluate(cpufused.FusedPasses(kernels))
    assert passes is None and why is not None and "typing error in the loop" in why


def test_operands_that_do_not_fit_are_refused_with_what_was_given(
    fused: cpufused.FusedPasses,
) -> None:
    """Every shape and type rule of the fused passes and of the int8 operands they hand on,
    fed a wrong input: a clear error, never a silent wrong product."""
    from daisychain.numerics.quant import int8_operand

    g = np.ones((4, 6), dtype=np.float32)
    with pytest.raises(ValueError, match="axis 0"):
        fused.quantize_limbs(g, None, 0, 2)
    with pytest.raises(ValueError, match="4 limbs"):
        fused.quantize_limbs(g, None, -1, 4)
    with pytest.raises(ValueError):  # a fold that varies along both axes is no row or column
        fused.quantize_limbs(g, np.zeros((4, 6), dtype=np.int32), -1, 2)
    a8 = np.zeros((2, 4, 5), dtype=np.int8)
    b8 = np.zeros((2, 5, 3), dtype=np.int8)
    with pytest.raises(ValueError, match="do not match"):
        fused.first_failing_slice(a8, b8, np.zeros((2, 4, 4), np.int32), 8,
                                  seed=0, rotation=0, tile=(8, 8))  # fmt: skip
    with pytest.raises(ValueError, match="does not match"):
        int8_operand(g, np.zeros((4, 5), dtype=np.int8))  # another shape
    with pytest.raises(ValueError, match="does not match"):
        int8_operand(g, g.astype(np.int16))  # not int8  # type: ignore[arg-type]
