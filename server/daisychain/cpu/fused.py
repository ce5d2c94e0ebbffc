"""Fused CPU passes around the integer products: ``cpu-int8``'s quantize, dequantize and audit.

numpy does one pass over memory per operation: a two-limb quantization of a gradient is a fold
multiply, an integer max, a scale multiply, two ``rint``, a subtract, a multiply, a clip, two
``+ 0`` and, for the int8 GEMM, a cast per limb -- eleven passes over a tensor the size of the
gradient. Dequantizing the limbs' int32 products is three more (combine, ``ldexp``, cast).
With numpy those passes are about a third of an unaudited ``small`` ``cpu-int8`` step; fused,
about a tenth (profiles: docs/BENCHMARKS_LOG.md, 2026-12-06, ``step``).

This module does the same arithmetic, operation for operation, in two loops compiled by numba
(an optional dependency, ``pip install 'daisychain[int8]'``): one that reads a block to find its
scale exponent and one that writes every limb as int8 (and as float32 where asked) while the
block is still in cache; one loop for the dequantize; four passes per product for the audit
(``first_failing_slice``: ``gpu.audit``'s checks over the int8 operands, in exact int64).
Only where the work happens changes, never the operations, so the bits are the contract's
(docs/NUMERICS.md "Quantization", "Backward"):

- every float32 operation is one IEEE operation in the same order (no fast-math, no reordering:
  numba compiles exactly these loops), ``rint`` ties to even, ``+ 0`` clears every ``-0``;
- the scale exponent is the integer rule of ``numerics.quant.scale_exponent`` on the bits of
  the block's largest magnitude;
- the dequantization multiplies the exact float64 value of the combined limbs by ``2^s`` as two
  exact float64 power-of-two factors (row and column) and rounds once to float32, which is
  ``ldexp(acc, s).astype(float32)`` to the bit (every factor and every intermediate is a normal
  float64: ``|acc| < 2^53`` and ``|s| < 300``).

It is never trusted by construction: ``evaluate()`` compares it with the numpy reference, bit
for bit, on the gate cases (ties, the clamp at 127, ``-0``, blocks below ``E_FLOOR``, subnormal
and overflowing dequantized results, both block axes, batches; the audit on a right product and
an error in each place it looks) before ``cpu-int8`` may use it, and the step probe
(``gpu.probe``) quantizes through it every step. docs/KERNELS.md, "The fused CPU passes".
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.numerics import gemm as ref
from daisychain.numerics.quant import (
    LO_SHIFT,
    FloatArray,
    IntArray,
    pow2,
    quantize,
    quantize2,
    quantize3,
    scale_exponent,
)

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]
# A gradient or its limbs are handled as (B, R, C): a batch of matrices. Blocks run along the
# columns (``axis=-1``: one block per row) or along the rows (``axis=-2``: one per column).


class FusedUnavailable(Exception):
    """numba is not installed."""


def available() -> bool:
    return importlib.util.find_spec("numba") is not None


def _compile() -> dict[str, Callable[..., Any]]:
    """The kernels (``cpufused_kernels``, which imports numba: ``_kernels`` checks it is there),
    compiled on first use; numba caches the machine code next to that module, so a later process
    loads it in a fraction of a second."""
    from daisychain.cpu import fused_kernels as k

    names = [f"{kind}{limbs}{suffix}" for kind in ("rows", "cols") for limbs in (1, 2, 3)
             for suffix in ("", "_i8")] + ["dequantize1", "dequantize2", "dequantize3",
                                           "first_failing"]  # fmt: skip
    return {name: getattr(k, name) for name in names}


_KERNELS: dict[str, Callable[..., Any]] = {}


def _kernels() -> dict[str, Callable[..., Any]]:
    if not available():
        raise FusedUnavailable("numba is not installed (pip install 'daisychain[int8]')")
    if not _KERNELS:
        _KERNELS.update(_compile())
    return _KERNELS


def _as3(x: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``x`` (..., R, C) as (B, R, C), C-contiguous."""
    return np.ascontiguousarray(x.reshape(-1, *x.shape[-2:]) if x.ndim != 2 else x[None])


@functools.lru_cache(maxsize=256)
def _ones(batch: int, size: int, dtype: type) -> npt.NDArray[Any]:
    """Factors of one, read-only and kept: live shapes repeat every step."""
    ones: npt.NDArray[Any] = np.ones((batch, size), dtype=dtype)
    ones.setflags(write=False)
    return ones


@functools.lru_cache(maxsize=256)
def _audit_lines(
    m: int, n: int, tile: tuple[int, int]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """(which rows are danger rows, the danger columns) of an (m, n) output, read-only and kept
    (the audit's per-shape work, built once per live shape)."""
    from daisychain.gpu.audit import danger_lines

    danger_r = np.zeros(m, dtype=np.bool_)
    danger_r[danger_lines(m, tile[0])] = True
    lines_c = np.array(danger_lines(n, tile[1]), dtype=np.int64)
    danger_r.setflags(write=False)
    lines_c.setflags(write=False)
    return danger_r, lines_c


def _factors(
    e: IntArray | None, shape: tuple[int, ...], axis: int, dtype: type
) -> npt.NDArray[Any]:
    """2^e, as (B, len) of ``dtype``, for exponents ``e`` that vary along ``axis`` of ``shape``
    only (keepdims along the other: a row factor for ``axis=-2``, a column factor for
    ``axis=-1``); ones where ``e`` is None."""
    lead, size = shape[:-2], shape[axis]
    batch = math.prod(lead)
    if e is None:
        return _ones(batch, size, dtype)
    target = (*lead, size, 1) if axis == -2 else (*lead, 1, size)
    full = np.broadcast_to(e, target).reshape(batch, size)  # raises if e varies elsewhere
    if dtype is np.float32:
        return pow2(full.astype(np.int32))
    # 2^e from the float64 exponent bits (exact; every e here is far inside [-1022, 1023])
    bits = full.astype(np.int64)
    bits += 1023
    bits <<= 52
    return bits.view(np.float64)


class FusedPasses:
    """The fused quantize and dequantize, the same bits as ``numerics.quant`` / ``gemm``."""

    def __init__(self, kernels: dict[str, Callable[..., Any]] | None = None) -> None:
        self._k = kernels if kernels is not None else _kernels()

    def quantize_limbs(
        self,
        g: FloatArray,
        fold_e: IntArray | None,
        axis: int,
        limbs: int,
        *,
        floats: bool = True,
    ) -> tuple[FloatArray | None, Int8Array, IntArray]:
        """``quantize{limbs}(g * pow2(fold_e), axis)`` with the limbs stacked on a new leading
        axis, (limbs, *g.shape), as float32 (None unless ``floats``) and as int8 (C-contiguous),
        and the exponents e (keepdims along ``axis``). ``fold_e`` is a row or a column factor's
        exponents (or None)."""
        if g.dtype != np.float32:
            raise TypeError(f"quantize expects float32, got {g.dtype}")
        if axis not in (-1, -2) or g.ndim < 2 or limbs not in (1, 2, 3):
            raise ValueError(f"quantize_limbs: axis {axis}, {g.ndim}-D, {limbs} limbs")
        g3 = _as3(g)
        # the folded scale is a row factor (..., R, 1) or a column factor (..., 1, C)
        row_fold = fold_e is not None and fold_e.shape[-1] == 1
        fr = _factors(fold_e if row_fold else None, g.shape, -2, np.float32)
        fc = _factors(None if row_fold else fold_e, g.shape, -1, np.float32)
        # without floats the kernel never touches q (its branches are compiled out)
        q = np.empty((limbs, *g3.shape) if floats else (1, 1, 1, 1), dtype=np.float32)
        q8 = np.empty((limbs, *g3.shape), dtype=np.int8)
        suffix = "" if floats else "_i8"
        if axis == -1:
            e = np.empty(g3.shape[:2], dtype=np.int32)
            code = self._k[f"rows{limbs}{suffix}"](g3, fr, fc, q, q8, e)
            e_shape = (*g.shape[:-1], 1)
        else:
            e = np.empty((g3.shape[0], g3.shape[2]), dtype=np.int32)
            code = self._k[f"cols{limbs}{suffix}"](g3, fr, fc, q, q8, e)
            e_shape = (*g.shape[:-2], 1, g.shape[-1])
        if code != 0:  # non-finite or diverged: numpy's rule raises with its message
            x = g if fold_e is None else np.multiply(g, pow2(fold_e))
            scale_exponent(x, axis)
            raise AssertionError(f"fused quantize refused a block numpy accepts (code {code})")
        floats_out = q.reshape(limbs, *g.shape) if floats else None
        return floats_out, q8.reshape(limbs, *g.shape), e.reshape(e_shape)

    def dequantize(
        self, parts: Int32Array, row_e: IntArray | None, col_e: IntArray | None
    ) -> FloatArray:
        """``round_scaled(combined, row_e + col_e)`` of the limbs' products ``parts`` (L, ...,
        M, N), int32, most significant first: RNE_f32(sum_i 256^(L-1-i) parts[i] * 2^s)."""
        shape = parts.shape[1:]
        p4 = np.ascontiguousarray(parts.reshape(parts.shape[0], -1, *shape[-2:]))
        fr = _factors(row_e, shape, -2, np.float64)
        fc = _factors(col_e, shape, -1, np.float64)
        out = np.empty(p4.shape[1:], dtype=np.float32)
        self._k[f"dequantize{p4.shape[0]}"](p4, fr, fc, out)
        return out.reshape(shape)

    def first_failing_slice(
        self,
        a8: Int8Array,
        b8: Int8Array,
        out: Int32Array,
        samples: int,
        *,
        seed: int,
        rotation: int,
        tile: tuple[int, int],
    ) -> tuple[int, ...] | None:
        """``gpu.audit.first_failing_slice`` of the int8 operands the GEMM was given (the same
        cells, the same row and column sums, in exact int64) in four passes per slice."""
        from daisychain.gpu.audit import scheduled_cells

        m, k, n = a8.shape[-2], a8.shape[-1], b8.shape[-1]
        lead = a8.shape[:-2]
        if out.shape != (*lead, m, n) or b8.shape[:-2] != lead or b8.shape[-2] != k:
            raise ValueError(f"audit: shapes {a8.shape} @ {b8.shape} -> {out.shape} do not match")
        if m == 0 or n == 0 or not lead or int(np.prod(lead)) == 0:
            return None
        danger_r, lines_c = _audit_lines(m, n, tile)
        cells = np.array(scheduled_cells(m, n, samples, seed, rotation), dtype=np.int64)
        cells = cells.reshape(-1, 2)
        bad = self._k["first_failing"](
            np.ascontiguousarray(a8.reshape(-1, m, k)),
            np.ascontiguousarray(b8.reshape(-1, k, n)),
            np.ascontiguousarray(out.reshape(-1, m, n)),
            danger_r,
            lines_c,
            np.ascontiguousarray(cells[:, 0]),
            np.ascontiguousarray(cells[:, 1]),
        )
        return None if bad < 0 else tuple(int(i) for i in np.unravel_index(bad, lead))


# -- the gate: the fused passes against the numpy reference, bit for bit -------------------------


def _gate_inputs() -> list[tuple[str, FloatArray, int]]:
    """(name, float32 (..., R, C) array, block axis): the cases a wrong fused pass would miss."""
    rng = np.random.default_rng(20261206)
    cases: list[tuple[str, FloatArray, int]] = []
    for axis in (-1, -2):
        cases.append(("normal", rng.standard_normal((37, 53)).astype(np.float32), axis))
        wide = rng.standard_normal((3, 17, 29)) * np.exp2(rng.integers(-40, 40, (3, 17, 1)))
        cases.append(("batched, mixed scales", wide.astype(np.float32), axis))
        # every tie of the first and second limb, and the clamp at +-127
        ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.5, -126.5, 127.49, 63.75, 127.25,
                         1 + 127.5 / 256, 1 - 127.5 / 256, 1 + 127.5 / 65536, -3e-8, 0.0, -0.0],
                        dtype=np.float32)  # fmt: skip
        tie = np.tile(ties, (4, 1)) if axis == -1 else np.tile(ties[:, None], (1, 4))
        cases.append(("ties, clamp, -0", tie.astype(np.float32), axis))
        tiny = np.zeros((6, 8), dtype=np.float32)
        tiny[1, :] = np.float32(2.0**-110)  # a block below E_FLOOR: all zeros, e = 0
        tiny[2, :] = np.float32(1e-45)  # subnormal
        tiny[3, :] = np.float32(2.0**-100) * np.float32(1.5)
        tiny[4, :] = np.float32(2.0**99)  # just below E_CEIL
        cases.append(("floor, subnormal, ceiling", tiny if axis == -1 else tiny.T.copy(), axis))
    return cases


def _reference_quantize(x: FloatArray, axis: int, limbs: int) -> list[npt.NDArray[Any]]:
    out = (quantize, quantize2, quantize3)[limbs - 1](x.copy(), axis)
    return list(out)


def gate_failures(fused: FusedPasses) -> list[str]:
    """Every gate case whose bits differ from the numpy reference (empty: the fused passes may
    be used). Compared as bit patterns, so a -0 for a +0 fails."""
    failures: list[str] = []

    def same(x: npt.NDArray[Any], y: npt.NDArray[Any]) -> bool:
        if x.shape != y.shape:
            return False
        if x.dtype == np.float32 or y.dtype == np.float32:
            return x.dtype == y.dtype and bool(np.array_equal(x.view(np.uint32), y.view(np.uint32)))
        return bool(np.array_equal(x, y))

    rng = np.random.default_rng(6)
    for name, x, axis in _gate_inputs():
        for limbs in (1, 2, 3):
            *want, want_e = _reference_quantize(x, axis, limbs)
            got, got8, got_e = fused.quantize_limbs(x, None, axis, limbs)
            _, only8, only_e = fused.quantize_limbs(x, None, axis, limbs, floats=False)
            ok = got is not None and same(got_e, want_e) and same(only_e, want_e)
            ok = ok and all(
                same(got[i], want[i])  # type: ignore[index]
                and same(got8[i], want[i].astype(np.int8))
                and same(only8[i], want[i].astype(np.int8))
                for i in range(limbs)
            )
            # with a fold, as the model folds one operand's scales into the gradient: row
            # exponents (..., R, 1) or column exponents (..., 1, C)
            for along in (-2, -1):
                fshape = [1] * x.ndim
                fshape[along] = x.shape[along]
                fshape[:-2] = x.shape[:-2]
                top = 1 if float(np.max(np.abs(x))) >= 2.0**90 else 9  # stay below E_CEIL
                fold = rng.integers(-9, top, fshape).astype(np.int32)
                folded = np.multiply(x, pow2(fold))
                *want_f, want_fe = _reference_quantize(folded, axis, limbs)
                got_f, got8_f, got_fe = fused.quantize_limbs(x, fold, axis, limbs)
                _, only8_f, only_fe = fused.quantize_limbs(x, fold, axis, limbs, floats=False)
                ok = ok and got_f is not None and same(got_fe, want_fe) and same(only_fe, want_fe)
                ok = ok and all(
                    same(got_f[i], want_f[i])  # type: ignore[index]
                    and same(got8_f[i], want_f[i].astype(np.int8))
                    and same(only8_f[i], want_f[i].astype(np.int8))
                    for i in range(limbs)
                )
            if not ok:
                failures.append(f"quantize, {limbs} limb(s), axis {axis}: {name}")
    failures += _audit_gate_failures(fused, rng)
    for limbs in (1, 2, 3):
        for name, parts, row_e, col_e in _dequantize_cases(rng, limbs):
            combined = parts[0].astype(np.float64)
            for p in parts[1:]:
                combined = combined * float(1 << LO_SHIFT) + p
            s = np.zeros((1, 1), dtype=np.int32)
            s = s + (0 if row_e is None else row_e) + (0 if col_e is None else col_e)
            want_d = ref.round_scaled(combined, s)
            if not same(fused.dequantize(parts, row_e, col_e), want_d):
                failures.append(f"dequantize, {limbs} limb(s): {name}")
    return failures


def _dequantize_cases(
    rng: np.random.Generator, limbs: int
) -> list[tuple[str, Int32Array, IntArray | None, IntArray | None]]:
    big = 2**31 - 1
    cases: list[tuple[str, Int32Array, IntArray | None, IntArray | None]] = []
    parts = rng.integers(-big, big, (limbs, 2, 9, 11), dtype=np.int64).astype(np.int32)
    row = rng.integers(-120, 60, (2, 9, 1)).astype(np.int32)
    col = rng.integers(-120, 60, (2, 1, 11)).astype(np.int32)
    cases.append(("full range, row and column scales", parts, row, col))
    cases.append(("row scales only", parts, row, None))
    cases.append(("column scales only", parts, None, col))
    # results near float32's ends: subnormal (rounded once, to the bit) and overflowing to inf
    edge = rng.integers(-(2**20), 2**20, (limbs, 5, 7), dtype=np.int64).astype(np.int32)
    cases.append(("subnormal results", edge, np.full((5, 1), -165, np.int32), None))
    cases.append(("overflow to inf", edge, None, np.full((1, 7), 120 - 8 * limbs, np.int32)))
    ties = np.zeros((limbs, 3, 4), dtype=np.int32)
    ties[-1] = (1 << 24) + np.arange(12, dtype=np.int32).reshape(3, 4)  # float32 ties at 2^24
    cases.append(("ties to even", ties, np.zeros((3, 1), np.int32), None))
    return cases


def audit_cases(
    rng: np.random.Generator,
) -> list[tuple[str, Int8Array, Int8Array, Int32Array, tuple[int, ...] | None]]:
    """(name, a, b, out, the slice the audit must name): a right batched product, then one
    error in each place the audit looks (the same cases ``tests/gpu/test_cpu_fused.py`` plants),
    each in the last slice so that every earlier slice is checked and passed first."""
    from daisychain.gpu.audit import scheduled_cells

    samples = 8  # tile (8, 8)
    a = rng.integers(-128, 128, (3, 37, 300), dtype=np.int64).astype(np.int8)
    b = rng.integers(-128, 128, (3, 300, 29), dtype=np.int64).astype(np.int8)
    right = np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)
    cases: list[tuple[str, Int8Array, Int8Array, Int32Array, tuple[int, ...] | None]] = [
        ("a right product", a, b, right, None)
    ]
    si, sj = scheduled_cells(37, 29, samples, 0, 0)[3]
    for name, cells in (
        ("a corner", [(0, 0, 1)]),
        ("the last column", [(20, 28, -1)]),
        ("a crossing of tile edges", [(16, 15, 1)]),
        ("an interior cell (the sums see it)", [(11, 12, 1 << 20)]),
        # a rectangle of errors that cancel in every row and column sum: only a cell check sees
        # it, here a scheduled cell of rotation 0
        ("cancelling errors on a scheduled cell", [
            (si, sj, 1), (si, (sj + 2) % 29, -1), ((si + 2) % 37, sj, -1),
            ((si + 2) % 37, (sj + 2) % 29, 1),
        ]),
    ):  # fmt: skip
        wrong = right.copy()
        for i, j, d in cells:
            wrong[2, i, j] += d
        cases.append((name, a, b, wrong, (2,)))
    return cases


def _audit_gate_failures(fused: FusedPasses, rng: np.random.Generator) -> list[str]:
    """The fused audit must name the slice the numpy audit names, on every case."""
    from daisychain.gpu.audit import first_failing_slice

    failures = []
    for name, a, b, out, want in audit_cases(rng):
        kw: dict[str, Any] = {"seed": 0, "rotation": 0, "tile": (8, 8)}
        ref_bad = first_failing_slice(a, b, out, 8, **kw)
        got = fused.first_failing_slice(a, b, out, 8, **kw)
        if got != want or ref_bad != want:
            failures.append(f"audit: {name} (fused {got}, numpy {ref_bad}, expected {want})")
    return failures


def evaluate(fused: FusedPasses | None = None) -> tuple[FusedPasses | None, str | None]:
    """Compile and gate the fused passes on this machine: (passes, None) when every gate case
    gives the reference's bits, else (None, why). ``fused`` replaces the real one (the
    planted-bug tests pass a wrong one)."""
    if fused is None:
        try:
            fused = FusedPasses()
        except FusedUnavailable as exc:
            return None, str(exc)
        except Exception as exc:  # a numba that cannot import or compile here: use numpy's
            return None, f"numba could not build the fused passes: {type(exc).__name__}: {exc}"
    try:
        with np.errstate(over="ignore"):  # the overflow case's reference casts to inf, as meant
            failures = gate_failures(fused)
    except Exception as exc:  # a kernel that fails to run is refused like a wrong one
        return None, f"fused passes failed on a gate case: {type(exc).__name__}: {exc}"
    if failures:
        return None, f"fused passes differ from numpy: {failures[0]} (+{len(failures) - 1} more)"
    return fused, None


_PROVEN: list[tuple[FusedPasses | None, str | None]] = []


def proven() -> tuple[FusedPasses | None, str | None]:
    """``evaluate()`` once per process (compiling and gating take a few seconds the first time,
    then numba's cache makes them quick): the passes training may use here, or why not."""
    if not _PROVEN:
        _PROVEN.append(evaluate() if available() else (None, "numba is not installed"))
    return _PROVEN[0]


def describe() -> str:
    """One line for the peer's start (``passes ...``): which quantize, dequantize and audit
    passes run around a batched GEMM's products here, and why."""
    fused, why = proven()
    if fused is not None:
        return "fused (numba): gated against numpy, bit for bit"
    return f"numpy ({why})"
