"""The exact gates and the live audit (``gpu/gates.py``, ``gpu/live.py``): behaviour pinned by
mutants that survived the rest of the suite (docs/TESTING.md). No GPU needed: the kernels here
are numpy stand-ins that fail in one chosen way."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from daisychain.gpu import live
from daisychain.gpu.backend import Backend, NumpyGemm
from daisychain.gpu.gates import (
    gemm_cases,
    qmatmul_cases,
    quantize_cases,
    run_gemm_gates,
    run_quantize_gates,
)
from daisychain.model.ops import NUMPY_OPS, IntGemmOps
from daisychain.numerics.quant import quantize


def digest(cases: list[Any]) -> str:
    """sha256 over every case's name, then each operand's dtype, shape and bytes."""
    h = hashlib.sha256()
    for case in cases:
        h.update(case[0].encode() + b"\0")
        for arr in case[1:]:
            arr = np.ascontiguousarray(arr)
            h.update(f"{arr.dtype.str}{arr.shape}".encode())
            h.update(arr.tobytes())
    return h.hexdigest()


def test_the_gate_inputs_are_pinned() -> None:
    """Every device runs the very same gate inputs (GATE_SEED): their names, shapes and values
    are a contract, so a change to any boundary shape (K=1023, a tile edge, a subnormal scale,
    a tie) is a visible change of this digest, not a silent weakening of the gates. Mutants that
    moved one shape or one value passed every other test."""
    assert len(gemm_cases()) == 48
    assert digest(gemm_cases()) == (
        "9e9d7c0275dd20803dbb9cb77ee2e1d54441e52aa5ffccd3b9493d2b7cd119e5"
    )
    assert digest(gemm_cases((16, 8))) == (
        "794db760e694fa16f7d4dddb25846da2ad903a62da3064e90fc2f423e1f1f374"
    )
    assert digest(qmatmul_cases()) == (
        "b7f0f500776619e4be3234f17e27bccb18f0b559aefe8233bb7f3fd153f07dcf"
    )
    assert digest(quantize_cases()) == (
        "5474b67f7da5fe14654e5c0e2e31d3317454e9b1534efe6e12474487bb8f47f5"
    )


class Pool:
    """A stand-in BufferPool that records whether each product ran poisoned."""

    def __init__(self) -> None:
        self.active = False

    @contextlib.contextmanager
    def poisoned(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False


class Recording(NumpyGemm):
    name = "recording"

    def __init__(self, pool: Pool) -> None:
        super().__init__()
        self.pool = pool
        self.unpoisoned: list[str] = []

    def matmul_int(self, a: Any, b: Any) -> Any:
        if not self.pool.active:
            self.unpoisoned.append("matmul_int")
        return super().matmul_int(a, b)

    def qmatmul(self, a_q: Any, a_e: Any, b_q: Any, b_e: Any) -> Any:
        if not self.pool.active:
            self.unpoisoned.append("qmatmul")
        return super().qmatmul(a_q, a_e, b_q, b_e)


def test_every_gate_product_runs_on_the_poisoned_pool() -> None:
    """The float (qmatmul) cases too: a kernel that assumes zeroed output memory must meet
    poisoned buffers there (a mutant ran them on a clean pool)."""
    pool = Pool()
    gemm = Recording(pool)
    report = run_gemm_gates(gemm, pool)  # type: ignore[arg-type]
    assert report.passed and report.cases_passed == 48 + 4
    assert gemm.unpoisoned == []


class Raising(NumpyGemm):
    name = "raising"

    def matmul_int(self, a: Any, b: Any) -> Any:
        raise RuntimeError("boom")


class RaisingFloat(NumpyGemm):
    name = "raising-float"

    def qmatmul(self, a_q: Any, a_e: Any, b_q: Any, b_e: Any) -> Any:
        raise RuntimeError("no float path")


class WrongDtype(NumpyGemm):
    name = "wrong-dtype"

    def matmul_int(self, a: Any, b: Any) -> Any:
        return super().matmul_int(a, b).astype(np.int64)


class WrongFloatBit(NumpyGemm):
    name = "wrong-float-bit"

    def qmatmul(self, a_q: Any, a_e: Any, b_q: Any, b_e: Any) -> Any:
        out = np.array(super().qmatmul(a_q, a_e, b_q, b_e), dtype=np.float32)
        out.view(np.uint32)[1, 1] ^= 1
        return out


def test_a_failing_gemm_gate_names_kernel_case_and_what_was_expected() -> None:
    """The failure record of each way to fail: an exception, a wrong dtype, a wrong float bit
    (mutants dropped the kernel name, or put None / the shape where the values belong)."""
    failure = run_gemm_gates(Raising()).failure
    assert failure is not None
    assert (failure.kernel, failure.case, failure.shape, failure.index) == (
        "raising",
        "1x1x1",
        (1, 1, 1),
        None,
    )
    assert (failure.expected, failure.got) == ("a result", "RuntimeError: boom")

    failure = run_gemm_gates(RaisingFloat()).failure
    assert failure is not None
    assert (failure.kernel, failure.case, failure.shape) == (
        "raising-float",
        "float 33x64x35",
        (33, 64, 35),
    )
    assert (failure.expected, failure.got) == ("a result", "RuntimeError: no float path")

    failure = run_gemm_gates(WrongDtype()).failure
    assert failure is not None
    assert (failure.expected, failure.got) == ("int32 (1, 1)", "int64 (1, 1)")

    failure = run_gemm_gates(WrongFloatBit()).failure
    assert failure is not None and failure.case == "float 33x64x35"
    assert failure.index == (1, 1)
    assert failure.got.startswith("0x") and failure.expected.startswith("0x")
    assert int(failure.got, 16) ^ int(failure.expected, 16) == 1


class NumpyQuantizer:
    """The reference per-row quantizer, optionally wrong in one way."""

    def __init__(self, name: str, fault: str = "") -> None:
        self.name, self.fault = name, fault

    def quantize_rows(self, x: Any) -> tuple[Any, Any, Any, Any]:
        if self.fault == "raise":
            raise ValueError("bad input")
        status = np.zeros(x.shape[0], dtype=np.uint32)
        try:
            q, e = quantize(x, axis=-1)
        except Exception:
            z = np.zeros_like(x)
            if self.fault != "no-status":
                status[:] = 1  # the refusal the gate expects
            return z, np.zeros((x.shape[0], 1), np.int32), z.astype(np.int8), status
        q_i8 = q.astype(np.int8)
        if self.fault == "int8":
            q_i8 = q_i8.copy()
            q_i8[0, 0] ^= 1
        return q, e, q_i8, status


def test_a_failing_quantize_gate_names_case_and_check() -> None:
    """Each failure names the case, its shape and which output differs (mutants dropped the
    shape, and changed the check's name and the refusal's words)."""
    failure = run_quantize_gates(NumpyQuantizer("raising", "raise")).failure  # type: ignore[arg-type]
    assert failure is not None
    assert (failure.case, failure.shape, failure.expected) == ("ties to even", (1, 12), "a result")
    assert failure.got == "ValueError: bad input"

    failure = run_quantize_gates(NumpyQuantizer("int8", "int8")).failure  # type: ignore[arg-type]
    assert failure is not None and failure.case == "ties to even (q int8)"
    assert failure.index == (0, 0)

    failure = run_quantize_gates(NumpyQuantizer("silent", "no-status")).failure  # type: ignore[arg-type]
    assert failure is not None and failure.case == "non-finite"
    assert (failure.expected, failure.got) == ("a non-zero status (reference refuses)", "status 0")


def test_the_reference_quantizer_passes_every_gate() -> None:
    """The stand-in itself is honest: only its planted fault fails a gate."""
    report = run_quantize_gates(NumpyQuantizer("numpy"))  # type: ignore[arg-type]
    assert report.passed, report.failure


# --- gpu/live.py ----------------------------------------------------------------------------


def test_each_output_shape_audits_the_next_group_of_its_own_schedule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AuditedMatmul keeps one rotation counter per output shape (M, N), starting at 0 and
    counting up, with the default schedule seed 0 and the kernel's tile: so every cell of every
    live shape is checked within ceil(M N / samples) products of that shape. Mutants shared one
    counter, keyed it by (M, K), started it at 1, counted down, changed the seed or dropped the
    tile (falling back to the audit's 32 x 32 danger cells): every test still passed."""
    calls: list[tuple[tuple[int, int], int, int, tuple[int, int]]] = []
    real = live.audit

    def spy(a: Any, b: Any, out: Any, samples: int, **kw: Any) -> Any:
        calls.append(((a.shape[0], b.shape[1]), kw["rotation"], kw["seed"], kw["tile"]))
        return real(a, b, out, samples, **kw)

    monkeypatch.setattr(live, "audit", spy)
    matmul = live.AuditedMatmul(NumpyGemm(), 4, (16, 8))
    ones = np.ones
    a_k3, b_k3 = ones((2, 3), np.int8), ones((3, 4), np.int8)  # (2, 4) through K = 3
    a_k5, b_k5 = ones((2, 5), np.int8), ones((5, 4), np.int8)  # (2, 4) through K = 5
    c, d = ones((3, 3), np.int8), ones((3, 2), np.int8)  # (3, 2)
    for a, b in ((a_k3, b_k3), (c, d), (a_k5, b_k5), (a_k3, b_k3), (c, d)):
        assert (matmul(a, b) == a.astype(np.int32) @ b.astype(np.int32)).all()
    assert calls == [
        ((2, 4), 0, 0, (16, 8)),
        ((3, 2), 0, 0, (16, 8)),
        ((2, 4), 1, 0, (16, 8)),
        ((2, 4), 2, 0, (16, 8)),
        ((3, 2), 1, 0, (16, 8)),
    ]
    assert matmul.rotations == {(2, 4): 3, (3, 2): 2} and matmul.calls == 5


class TiledGemm(NumpyGemm):
    name = "tiled"
    tile = (16, 8)


def test_training_ops_audit_a_kernel_with_its_tile_and_leave_numpy_alone() -> None:
    """numpy trains with the plain reference ops; any other kernel through an AuditedMatmul
    with the kernel's own tile (mutants audited numpy, or ignored the kernel's tile)."""
    assert live.training_ops(Backend(NumpyGemm(), "cpu")) is NUMPY_OPS
    ops = live.training_ops(Backend(TiledGemm(), "test"), samples=5)
    assert isinstance(ops, IntGemmOps) and ops.name == "tiled"
    audited = ops._matmul_int
    assert isinstance(audited, live.AuditedMatmul)
    assert (audited.tile, audited.samples, audited.seed) == ((16, 8), 5, 0)
