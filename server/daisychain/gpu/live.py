"""A gated kernel in live training: every product audited, a probe hash per step.

The gates prove a kernel once, at start, on fixed shapes. In training every product a kernel
computes is also audited (``audit.audit``: the structural danger cells, then cells from a seeded
schedule that rotates per product shape so every cell is eventually checked, then the exact row
and column sums, which catch a single wrong cell anywhere on every call), and a failing audit
stops the step with
``KernelAuditError`` instead of letting a wrong bit into the weights; the caller demotes the
kernel. ``step_probe`` hashes the fixed probe product through the live kernel: peers publish it
with their weight hash so a device whose kernel drifted is named, not just detected.
"""

from __future__ import annotations

from typing import Protocol, cast

import numpy as np
from threadpoolctl import ThreadpoolController

from daisychain.gpu.audit import Int8Array, Int32Array, audit, first_failing_slice
from daisychain.gpu.backend import Backend
from daisychain.gpu.gates import IntGemm
from daisychain.gpu.probe import step_probe_hash
from daisychain.model.ops import NUMPY_OPS, GemmOps, IntGemmOps
from daisychain.numerics.quant import FloatArray, to_int8_c

AUDIT_SAMPLES = 16  # scheduled cells per product, after the structural ones


class KernelAuditError(RuntimeError):
    """A live product disagreed with exact arithmetic: the kernel must not be used again."""


class AuditedMatmul:
    """``gemm.matmul_int`` with every result audited.

    Each output shape (M, N) has its own rotation counter: its n-th product checks the n-th
    group of its cell schedule (``audit.scheduled_cells``), so every cell of every live shape is
    checked within ``ceil(M N / samples)`` products of that shape, on top of the checksums.
    ``checksum=False`` leaves only the sampled cells (tests use it to show what they miss).
    """

    def __init__(
        self,
        gemm: IntGemm,
        samples: int = AUDIT_SAMPLES,
        tile: tuple[int, int] = (32, 32),
        *,
        seed: int = 0,
        checksum: bool = True,
    ) -> None:
        self.gemm, self.samples, self.tile = gemm, samples, tile
        self.seed, self.checksum = seed, checksum
        self.calls = 0
        self.rotations: dict[tuple[int, int], int] = {}

    def __call__(self, a: Int8Array, b: Int8Array) -> Int32Array:
        out = self.gemm.matmul_int(a, b)
        shape = (a.shape[0], b.shape[1])
        rotation = self.rotations.get(shape, 0)
        report = audit(
            a,
            b,
            out,
            self.samples,
            seed=self.seed,
            rotation=rotation,
            tile=self.tile,
            checksum=self.checksum,
        )
        self.rotations[shape] = rotation + 1
        self.calls += 1
        if not report.ok:
            raise KernelAuditError(
                f"{self.gemm.name}: live audit failed at shape {a.shape} @ {b.shape}: "
                f"{report.describe()}; the kernel is demoted (restart to fall back to numpy)"
            )
        return out


class BatchedGemm(IntGemm, Protocol):
    """A GEMM that also takes batched operands, (..., M, K) @ (..., K, N), in one call."""

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array: ...


class AuditedBatchedMatmul:
    """``gemm.matmul_int_batched`` (a GEMM that takes (..., M, K) @ (..., K, N) in one call,
    as the CPU int8 GEMM does) with every 2-D slice audited, vectorized over the batch
    (``audit.first_failing_slice``): the same cells and sums as ``AuditedMatmul`` per slice,
    one rotation counter per output shape (M, N), shared by the slices of a call. Takes the
    int8-valued float32 operands the ops hold: the GEMM gets them as int8, the audit reads the
    float32 values (the same integers) without converting them back."""

    def __init__(self, gemm: BatchedGemm, audited: AuditedMatmul) -> None:
        self.gemm, self.audited = gemm, audited
        # The audit's float32 BLAS products are thin (M x K times K x 2-6, the danger lines):
        # one thread does them at memory speed, and a second one mostly waits -- spinning, in
        # OpenBLAS -- for a core that the int8 GEMM's threads and the numpy work want. On the
        # 2-core machine under a load average of 4, an audited ``small`` step took 2.6 s with
        # two BLAS threads and 0.64 s with one (docs/BENCHMARKS.md, ``step``). Speed only: the
        # audit's products are exact whatever the thread count.
        self._blas = ThreadpoolController().select(user_api="blas")

    def __call__(self, a: FloatArray, b: FloatArray) -> Int32Array:
        with self._blas.limit(limits=1):
            return self._audited(a, b)

    def _audited(self, a: FloatArray, b: FloatArray) -> Int32Array:
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = np.broadcast_to(a, (*lead, *a.shape[-2:]))
        b = np.broadcast_to(b, (*lead, *b.shape[-2:]))
        out = self.gemm.matmul_int_batched(to_int8_c(a), to_int8_c(b))
        au = self.audited
        shape = (a.shape[-2], b.shape[-1])
        rotation = au.rotations.get(shape, 0)
        whole = (a, b, out) if lead else (a[None], b[None], out[None])  # a 2-D product: one slice
        bad = first_failing_slice(*whole, au.samples, seed=au.seed, rotation=rotation, tile=au.tile)
        au.rotations[shape] = rotation + 1
        au.calls += 1
        if bad is not None:
            at = bad if lead else ()
            report = audit(a[at], b[at], out[at], au.samples, seed=au.seed,
                           rotation=rotation, tile=au.tile)  # fmt: skip
            where = f", slice {bad}" if lead else ""
            raise KernelAuditError(
                f"{self.gemm.name}: live audit failed at shape {a.shape} @ {b.shape}{where}: "
                f"{report.describe()}; the kernel is demoted (restart to fall back to numpy)"
            )
        return out


def training_ops(backend: Backend, samples: int = AUDIT_SAMPLES) -> GemmOps:
    """The model's product implementation for ``backend`` (every product audited unless it is
    the numpy reference; batched products in one call where the GEMM takes them)."""
    if backend.name == "numpy":
        return NUMPY_OPS
    tile = getattr(backend.gemm, "tile", (32, 32))
    audited = AuditedMatmul(backend.gemm, samples, tile)
    if hasattr(backend.gemm, "matmul_int_batched"):
        gemm = cast(BatchedGemm, backend.gemm)
        return IntGemmOps(backend.name, audited, AuditedBatchedMatmul(gemm, audited))
    return IntGemmOps(backend.name, audited)


def step_probe(backend: Backend) -> str:
    """The step probe through the live kernel (equal on every honest device; ``probe.py``)."""
    return step_probe_hash(backend.gemm.matmul_int)
