"""Exact gates: a kernel is used only after it reproduces the reference to the bit on this device.

Each GEMM kernel runs, at backend start, boundary shapes (1 x 1 x 1, M/N at every tile edge +-1,
K = 1, 4, 5, 1023, 1024, 1025 and larger), boundary values (all -128, all 127, alternating signs,
zeros), long sums of 127 * 127 that only an int32 accumulator gets right, and seeded random
shapes (and, for a GEMM that takes batched products, batched ones with odd shapes and a broadcast
operand), on a POISONED buffer pool (so a kernel that assumes zeroed output memory fails), and
compares bit patterns: int32 results exactly, float32 results of the ``qmatmul`` path through
``.view(uint32)`` so -0 and +0 differ. The quantize kernel gets ties,
signed zeros, the scale bump and floor boundaries, subnormals and random scales. The first
mismatch is recorded (case name, shape, index, expected vs got) and the kernel is demoted.

Expected values come from plain int64 numpy arithmetic (GEMM) and from the numpy reference
``daisychain.numerics`` (quantize, qmatmul). Random operands come from the contract's PRNG, so
every device runs the very same gate inputs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from daisychain.gpu.pool import BufferPool
from daisychain.numerics import prng
from daisychain.numerics.gemm import qmatmul as ref_qmatmul
from daisychain.numerics.quant import FloatArray, IntArray, QuantizationError, quantize

GATE_SEED = 0x6A7E  # PRNG seed of every gate input (stream ids (3, purpose, case))
Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


class IntGemm(Protocol):
    """What a GEMM backend offers (GpuGemm, NumpyGemm)."""

    @property
    def name(self) -> str: ...

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array: ...

    def qmatmul(
        self, a_q: FloatArray, a_e: IntArray, b_q: FloatArray, b_e: IntArray
    ) -> FloatArray: ...


@dataclass(frozen=True)
class GateFailure:
    """The first failing gate case of a kernel."""

    kernel: str
    case: str
    shape: tuple[int, ...]
    index: tuple[int, ...] | None  # first mismatching element, None for an error
    expected: str
    got: str

    def describe(self) -> str:
        where = f"first mismatch at {self.index}" if self.index is not None else "error"
        return (
            f"{self.kernel} failed gate {self.case!r} shape {self.shape}: {where}: "
            f"expected {self.expected}, got {self.got}"
        )


@dataclass(frozen=True)
class GateReport:
    kernel: str
    cases_passed: int
    failure: GateFailure | None

    @property
    def passed(self) -> bool:
        return self.failure is None


# --- inputs ---------------------------------------------------------------------------------


def random_int8(purpose: int, case: int, shape: tuple[int, ...]) -> Int8Array:
    """Deterministic full-range int8 values from the contract PRNG (top byte of each word)."""
    n = int(np.prod(shape))
    words = prng.bits(prng.key(GATE_SEED, 3, purpose, case), n)
    return (words >> np.uint32(24)).astype(np.uint8).view(np.int8).reshape(shape)


def random_f32(purpose: int, case: int, shape: tuple[int, ...]) -> FloatArray:
    """Deterministic float32 values in (-1, 1) from the contract PRNG."""
    n = int(np.prod(shape))
    u = prng.uniform(prng.key(GATE_SEED, 4, purpose, case), n).reshape(shape)
    return (u * np.float32(2.0) - np.float32(1.0)).astype(np.float32)


def _rows(
    m: int, k: int, pattern: Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], Any]
) -> Int8Array:
    i, j = np.indices((m, k), dtype=np.int64)
    return np.asarray(pattern(i, j), dtype=np.int64).astype(np.int8)


def gemm_cases(tile: tuple[int, int] = (32, 32)) -> list[tuple[str, Int8Array, Int8Array]]:
    """Every GEMM gate case: (name, a (M, K), b (K, N))."""
    tm, tn = tile
    shapes: list[tuple[str, int, int, int]] = [
        ("1x1x1", 1, 1, 1),
        ("K=4", 1, 4, 1),
        ("K=5", 1, 5, 1),
        ("2x3x2", 2, 3, 2),
        ("3x1x5", 3, 1, 5),
        ("4x4x4", 4, 4, 4),
        ("5x5x5", 5, 5, 5),
        ("7x8x9", 7, 8, 9),
    ]
    for dm in (-1, 0, 1):
        for dn in (-1, 0, 1):
            shapes.append((f"tile edge M={tm + dm} N={tn + dn}", tm + dm, 16, tn + dn))
    shapes.append(("two tiles +-1", 2 * tm + 1, 9, 2 * tn - 1))
    for k in (1, 2, 3, 4, 5, 7, 8, 1023, 1024, 1025, 4096, 4099, 16385):
        shapes.append((f"K={k}", 5, k, 6))
    cases = [
        (name, random_int8(0, n, (m, k)), random_int8(1, n, (k, nn)))
        for n, (name, m, k, nn) in enumerate(shapes)
    ]
    # Boundary values at a shape that crosses a workgroup tile and the 1024 exactness bound.
    m, k, n = tm + 1, 1025, tn + 3
    full = np.full
    cases += [
        ("all -128", full((m, k), -128, np.int8), full((k, n), -128, np.int8)),
        ("all 127", full((m, k), 127, np.int8), full((k, n), 127, np.int8)),
        ("-128 x 127", full((m, k), -128, np.int8), full((k, n), 127, np.int8)),
        (
            "alternating signs",
            _rows(m, k, lambda i, j: np.where((i + j) % 2 == 0, 127, -128)),
            _rows(k, n, lambda i, j: np.where((i + j) % 2 == 0, -128, 127)),
        ),
        ("zeros", full((m, k), 0, np.int8), full((k, n), 0, np.int8)),
        ("random x zeros", random_int8(2, 0, (m, k)), full((k, n), 0, np.int8)),
        (
            "index pattern",
            _rows(m, k, lambda i, j: (i * 7 + j) % 256 - 128),
            random_int8(2, 1, (k, n)),
        ),
    ]
    # Long sums of odd products, tiny in M and N: +-4099 * 127 * 127 = +-66112771 is odd and past
    # 2^25, where float32 holds only multiples of 4, so no float32 accumulator returns it,
    # whatever its order; int32 holds it exactly. The boundary values above cannot show one: their
    # partial sums stay below 2^24 or (all -128) are multiples of 2^14, all exact in float32.
    kb = 4099
    cases += [
        (f"all 127, K={kb}", full((5, kb), 127, np.int8), full((kb, 6), 127, np.int8)),
        (f"127 x -127, K={kb}", full((5, kb), 127, np.int8), full((kb, 6), -127, np.int8)),
    ]
    # Seeded random shapes.
    dims = prng.below(prng.key(GATE_SEED, 3, 9), 24, 97)
    for r in range(8):
        m, k, n = (int(d) + 1 for d in dims[3 * r : 3 * r + 3])
        k = k * 5 + r  # K up to ~490, every residue mod 4
        cases.append((f"random {r}", random_int8(5, r, (m, k)), random_int8(6, r, (k, n))))
    return cases


def batched_cases(tile: tuple[int, int] = (32, 32)) -> list[tuple[str, Int8Array, Int8Array]]:
    """Batched GEMM gate cases (a GEMM with ``matmul_int_batched``): (name, a (..., M, K),
    b (..., K, N)) with equal leading axes. A broadcast operand is a stride-0 view
    (``np.broadcast_to``), as the live batched products hand one matrix to every limb or head."""
    tm, tn = tile
    r = random_int8
    k_big, m_edge, n_edge = 1025, tm + 1, tn + 3
    return [
        ("batched 3 x 5x7x9", r(7, 0, (3, 5, 7)), r(8, 0, (3, 7, 9))),
        (
            f"batched 2x3 x {m_edge}x17x{n_edge}, B broadcast",
            r(7, 1, (2, 3, m_edge, 17)),
            np.broadcast_to(r(8, 1, (17, n_edge)), (2, 3, 17, n_edge)),
        ),
        (
            "batched 4 x 6x5x3, A broadcast",
            np.broadcast_to(r(7, 2, (6, 5)), (4, 6, 5)),
            r(8, 2, (4, 5, 3)),
        ),
        (f"batched 2 x 3x{k_big}x5", r(7, 3, (2, 3, k_big)), r(8, 3, (2, k_big, 5))),
        (
            f"batched 2 x -128 @ 127, 3x{k_big}x5",
            np.full((2, 3, k_big), -128, np.int8),
            np.full((2, k_big, 5), 127, np.int8),
        ),
        ("batched 1 x 4x4x4", r(7, 4, (1, 4, 4, 4)), r(8, 4, (1, 4, 4, 4))),
    ]


def qmatmul_cases() -> list[tuple[str, FloatArray, IntArray, FloatArray, IntArray]]:
    """Float gate cases of the full quantized product: (name, a_q, a_e, b_q, b_e)."""
    specs = [
        ("float 33x64x35", 33, 64, 35, 0, 0),
        ("float K=1025 (reference path)", 5, 1025, 7, 0, 0),
        ("float tiny scales (subnormal results)", 6, 40, 5, -62, -62),
        ("float large scales", 4, 24, 9, 40, 40),
    ]
    out = []
    for n, (name, m, k, nn, sa, sb) in enumerate(specs):
        a = random_f32(0, n, (m, k)) * np.float32(2.0**sa)
        b = random_f32(1, n, (k, nn)) * np.float32(2.0**sb)
        a[0, :] = np.float32(-0.0) if m > 1 else a[0, :]  # a zero row: every product is a zero
        b[:, -1] = np.float32(0.0)  # a zero column against negative values
        a_q, a_e = quantize(a.astype(np.float32), axis=-1)
        b_q, b_e = quantize(b.astype(np.float32), axis=0)
        out.append((name, a_q, a_e, b_q, b_e))
    return out


def _f32(values: list[float] | list[int]) -> FloatArray:
    return np.array(values, dtype=np.float64).astype(np.float32)


def _from_bits(values: list[int]) -> FloatArray:
    return np.array(values, dtype=np.uint32).view(np.float32)


def quantize_cases() -> list[tuple[str, FloatArray]]:
    """Quantize gate cases: (name, x (M, K) float32), each quantized per row."""
    ties = _f32([100.0, 2.5, 3.5, -2.5, -3.5, 0.5, -0.5, 1.5, -1.5, 126.5, -125.5, 4.5])
    cases: list[tuple[str, FloatArray]] = [
        ("ties to even", ties[None, :]),
        ("ties at scale 2^-20", (ties * np.float32(2.0**-20))[None, :]),
        ("negatives rounding to zero", _f32([50.0, -0.3, -0.0, 0.0, -1e-9, -0.49, 0.49])[None, :]),
        ("all -0", np.full((3, 5), -0.0, dtype=np.float32)),
        # amax mantissa exactly at / just below the bump threshold 0x7F0000 (127.5 and below).
        ("bump boundary", _from_bits([0x42FF0000, 0x3F800000, 0xBFC00000, 0x42FE0000])[None, :]),
        ("below bump", _from_bits([0x42FEFFFF, 0xC2FEFFFF, 0x3F400000, 0x40200000])[None, :]),
        (
            "floor boundary",
            np.stack(
                [
                    _f32([2.0**-100, -(2.0**-101), 2.0**-110, -(2.0**-120)]),
                    _f32([2.0**-101 * 1.99, -(2.0**-101), 2.0**-110, -0.0]),
                    _from_bits([0x00000001, 0x80000003, 0x007FFFFF, 0x80000000]),
                ]
            ),
        ),
        ("near ceiling", _f32([2.0**99 * 1.5, -(2.0**98), 1.0, -3.0])[None, :]),
        ("K=1", _f32([-2.5, 0.0, 3.0, -0.0, 1e-30])[:, None]),
    ]
    for k in (3, 4, 5, 200):
        scales = np.exp2(np.arange(-90, 91, 15, dtype=np.float64)).astype(np.float32)
        x = random_f32(2, k, (len(scales), k)) * scales[:, None]
        cases.append((f"random scales K={k}", x.astype(np.float32)))
    cases.append(("many rows", random_f32(3, 0, (130, 37))))
    return cases


# --- comparison -----------------------------------------------------------------------------


def _first_mismatch(expected: npt.NDArray[Any], got: npt.NDArray[Any]) -> tuple[int, ...] | None:
    diff = np.argwhere(expected != got)
    return tuple(int(v) for v in diff[0]) if len(diff) else None


def _bits(a: npt.NDArray[Any]) -> npt.NDArray[np.uint32]:
    return np.ascontiguousarray(a).view(np.uint32)


def _hex(v: Any) -> str:
    return f"0x{int(v):08x}"


@contextlib.contextmanager
def _maybe_poisoned(pool: BufferPool | None) -> Iterator[None]:
    if pool is None:
        yield
    else:
        with pool.poisoned():
            yield


def _int_case(
    gemm: IntGemm,
    product: Callable[[Int8Array, Int8Array], Int32Array],
    case: str,
    a: Int8Array,
    b: Int8Array,
    pool: BufferPool | None,
) -> GateFailure | None:
    """One integer case through ``product`` (``matmul_int`` or ``matmul_int_batched``) against
    exact int64 numpy: None when every cell has the reference's bits."""
    try:
        with _maybe_poisoned(pool):
            got = product(a, b)
    except Exception as exc:
        shape = (*a.shape[:-2], a.shape[-2], a.shape[-1], b.shape[-1])
        return GateFailure(gemm.name, case, shape, None, "a result", f"{type(exc).__name__}: {exc}")
    return _exact_or_failure(gemm, case, a, b, got)


def _exact_or_failure(
    gemm: IntGemm, case: str, a: Int8Array, b: Int8Array, got: Int32Array
) -> GateFailure | None:
    """``got`` against exact int64 ``a @ b``: None when every cell has its bits, else the first
    difference (or the wrong shape or type)."""
    shape = (*a.shape[:-2], a.shape[-2], a.shape[-1], b.shape[-1])
    expected = np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)
    if got.shape != expected.shape or got.dtype != np.int32:
        return GateFailure(
            gemm.name, case, shape, None, f"int32 {expected.shape}", f"{got.dtype} {got.shape}"
        )
    index = _first_mismatch(_bits(expected), _bits(got))
    if index is not None:
        return GateFailure(gemm.name, case, shape, index, str(expected[index]), str(got[index]))
    return None


def run_gemm_gates(
    gemm: IntGemm, pool: BufferPool | None = None, tile: tuple[int, int] = (32, 32)
) -> GateReport:
    """Run every GEMM gate case through ``gemm``; stop at the first failure. A GEMM that also
    takes batched products (``matmul_int_batched``) must pass ``batched_cases`` through that
    path too: training sends every product there (``gpu.live.training_ops``)."""
    passed = 0
    for name, a, b in gemm_cases(tile):
        failure = _int_case(gemm, gemm.matmul_int, name, a, b, pool)
        if failure is not None:
            return GateReport(gemm.name, passed, failure)
        passed += 1
    for name, a_q, a_e, b_q, b_e in qmatmul_cases():
        shape = (a_q.shape[0], a_q.shape[1], b_q.shape[1])
        expected_f = ref_qmatmul(a_q, a_e, b_q, b_e)
        try:
            with _maybe_poisoned(pool):
                got_f = gemm.qmatmul(a_q, a_e, b_q, b_e)
        except Exception as exc:
            return GateReport(
                gemm.name,
                passed,
                GateFailure(
                    gemm.name, name, shape, None, "a result", f"{type(exc).__name__}: {exc}"
                ),
            )
        index = (
            _first_mismatch(_bits(expected_f), _bits(got_f))
            if got_f.shape == expected_f.shape
            else ()
        )
        if index is not None:
            exp_s = _hex(_bits(expected_f)[index]) if index else str(expected_f.shape)
            got_s = _hex(_bits(got_f)[index]) if index else str(got_f.shape)
            return GateReport(
                gemm.name, passed, GateFailure(gemm.name, name, shape, index, exp_s, got_s)
            )
        passed += 1
    batched = getattr(gemm, "matmul_int_batched", None)
    if batched is not None:
        for name, a, b in batched_cases(tile):
            failure = _int_case(gemm, batched, name, a, b, pool)
            if failure is not None:
                return GateReport(gemm.name, passed, failure)
            passed += 1
    many = getattr(gemm, "matmul_int_many", None)
    if many is not None:
        failure = _many_case(gemm, many, batched_cases(tile), pool)
        if failure is not None:
            return GateReport(gemm.name, passed, failure)
        passed += 1
    return GateReport(gemm.name, passed, None)


def _many_case(
    gemm: IntGemm,
    many: Callable[[list[tuple[Int8Array, Int8Array]]], list[Int32Array]],
    cases: list[tuple[str, Int8Array, Int8Array]],
    pool: BufferPool | None,
) -> GateFailure | None:
    """Every batched case in one ``matmul_int_many`` call (products of different shapes sharing
    one submit: training's backward pairs), each against exact int64 numpy."""
    try:
        with _maybe_poisoned(pool):
            got = many([(a, b) for _, a, b in cases])
    except Exception as exc:
        return GateFailure(
            gemm.name, "together", (), None, "a result", f"{type(exc).__name__}: {exc}"
        )
    for (name, a, b), out in zip(cases, got, strict=True):
        failure = _exact_or_failure(gemm, f"together: {name}", a, b, out)
        if failure is not None:
            return failure
    return None


class RowQuantizer(Protocol):
    @property
    def name(self) -> str: ...

    def quantize_rows(
        self, x: FloatArray
    ) -> tuple[FloatArray, IntArray, Int8Array, npt.NDArray[np.uint32]]: ...


def _reference_rows(x: FloatArray) -> tuple[FloatArray, IntArray, Int8Array] | None:
    try:
        q, e = quantize(x, axis=-1)
    except QuantizationError:
        return None
    return q, e, q.astype(np.int8)


def run_quantize_gates(quantizer: RowQuantizer, pool: BufferPool | None = None) -> GateReport:
    """Run every quantize gate case; q compared by float32 bit pattern (-0 != +0)."""
    name = quantizer.name
    passed = 0
    cases = quantize_cases()
    cases += [
        ("non-finite", _f32([1.0, float("nan"), 2.0])[None, :]),
        ("diverged", _f32([1.0, 2.0**100, 2.0])[None, :]),
    ]
    for case, x in cases:
        try:
            with _maybe_poisoned(pool):
                q, e, q_i8, status = quantizer.quantize_rows(x)
        except Exception as exc:
            return GateReport(
                name,
                passed,
                GateFailure(name, case, x.shape, None, "a result", f"{type(exc).__name__}: {exc}"),
            )
        ref = _reference_rows(x)
        if ref is None:
            if not np.any(status != 0):
                return GateReport(
                    name,
                    passed,
                    GateFailure(
                        name,
                        case,
                        x.shape,
                        None,
                        "a non-zero status (reference refuses)",
                        "status 0",
                    ),
                )
            passed += 1
            continue
        rq, re, rq_i8 = ref
        checks: list[tuple[str, npt.NDArray[Any], npt.NDArray[Any], Callable[[Any], str]]] = [
            ("q bits", _bits(rq), _bits(q), _hex),
            ("e", re, e, str),
            ("q int8", rq_i8, q_i8, str),
            ("status", np.zeros_like(status), status, str),
        ]
        for what, want, have, fmt in checks:
            index = _first_mismatch(want, have)
            if index is not None:
                return GateReport(
                    name,
                    passed,
                    GateFailure(
                        name, f"{case} ({what})", x.shape, index, fmt(want[index]), fmt(have[index])
                    ),
                )
        passed += 1
    return GateReport(name, passed, None)
