"""An exact int8 x int8 -> int32 GEMM on 16-bit multiply-adds, for any CPU (``cpu-madd``).

``cpu-int8`` (cpu/int8.py) reaches the CPU's int8 dot-product units through onnxruntime, and on
a CPU without VNNI (most machines older than 2021) its gates refuse it: MLAS's u8 x s8 kernel
sums two products in a saturating int16 (``vpmaddubsw``). The peer then fell back to the numpy
reference (float32 BLAS on int8 values), slower than a browser tab's WebAssembly kernel.

The products need no VNNI. Widened to int16, two int8 products summed are at most 2^15 in
magnitude, and the 16-bit multiply-add that every x86 CPU since SSE2 has (``pmaddwd``: 16-bit
products, adjacent pairs summed into int32 lanes; NEON's ``smull``/``sadalp`` on ARM; the shape
of WebAssembly's ``i32x4.dot_i16x8_s``) keeps every sum exact in int32 while
K * 128 * 128 < 2^31. ``cpumadd_kernels`` is that product as one numba loop (numba is already
the fused passes' dependency, ``pip install 'daisychain[int8]'``, wheels only: no compiler),
compiled for the CPU it runs on and split by rows across the cores.

Never trusted by construction, like every backend: ``evaluate()`` runs every GEMM gate
(``gpu.gates``) and the kernel probe on this machine with outputs allocated POISONED (a row the
loop forgot shows the poison, not a lucky zero), every product is audited while training
(``gpu.live.AuditedMatmul``), and the step probe runs every step. docs/KERNELS.md, "cpu-madd".
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from daisychain.cpu.gemmapi import CpuGemm, Int8Array, Int32Array
from daisychain.gpu.backend import prove
from daisychain.gpu.gates import IntGemm

NAME = "cpu-madd"
MAX_K = (2**31 - 1) // (128 * 128)  # every int32 sum of K int8 products stays exact below this
POISON = np.int32(0x7F7FBEEF)  # what a gate's output holds before the loop writes it
# A product smaller than this (multiply-adds) runs on one thread: handing it out costs more.
SPLIT_WORK = 1 << 18
DEVICE = "CPU 16-bit multiply-adds (numba: pmaddwd on x86, smull/sadalp on ARM)"
Kernel = Callable[[Int8Array, Int8Array, Int32Array, int, int], None]


class MaddUnavailable(Exception):
    """numba is not installed."""


def available() -> bool:
    return importlib.util.find_spec("numba") is not None


def _kernel() -> Kernel:
    if not available():
        raise MaddUnavailable("numba is not installed (pip install 'daisychain[int8]')")
    from daisychain.cpu import madd_kernels  # compiled (or loaded from numba's cache) here

    kernel: Kernel = madd_kernels.gemm_rows
    return kernel


class MaddGemm(CpuGemm):
    """The gates' IntGemm interface (``gemmapi.CpuGemm``) on ``madd_kernels.gemm_rows``."""

    name = NAME
    max_k = MAX_K

    def __init__(self, kernel: Kernel | None = None, threads: int = 0) -> None:
        """``kernel`` replaces the real loop (the planted-bug tests pass a wrong one);
        ``threads`` 0: one per core."""
        self._kernel = kernel if kernel is not None else _kernel()
        self.threads = threads or os.cpu_count() or 1
        self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
        self._poisoned = False

    @contextlib.contextmanager
    def poisoned(self) -> Iterator[None]:
        """Outputs allocated filled with POISON instead of uninitialised (the gates)."""
        self._poisoned = True
        try:
            yield
        finally:
            self._poisoned = False

    def _product(self, a: Int8Array, b: Int8Array) -> Int32Array:
        lead, (m, k), n = a.shape[:-2], a.shape[-2:], b.shape[-1]
        batch = math.prod(lead)
        a3 = np.ascontiguousarray(a.reshape(batch, m, k))
        # b's columns as rows, so both operands of every dot product are read in order
        bt3 = np.ascontiguousarray(np.swapaxes(b.reshape(batch, k, n), -1, -2))
        shape = (batch, m, n)
        out = np.full(shape, POISON, np.int32) if self._poisoned else np.empty(shape, np.int32)
        rows = batch * m
        if self._pool is None or rows < 2 or rows * k * n < SPLIT_WORK:
            self._kernel(a3, bt3, out, 0, rows)
        else:
            parts = min(self.threads, rows)
            bounds = [rows * p // parts for p in range(parts + 1)]
            jobs = [
                self._pool.submit(self._kernel, a3, bt3, out, bounds[p], bounds[p + 1])
                for p in range(parts)
            ]
            for job in jobs:
                job.result()
        return out.reshape(*lead, m, n)


def evaluate(gemm: MaddGemm | None = None) -> tuple[IntGemm | None, str | None]:
    """Build, gate (outputs poisoned) and probe the GEMM on this machine: (gemm, None) if every
    gate and the kernel probe give the reference's bits, else (None, why). ``gemm`` replaces
    the real one (the planted-bug tests pass one with a wrong loop)."""
    if gemm is None:
        try:
            gemm = MaddGemm()
        except MaddUnavailable as exc:
            return None, str(exc)
    with gemm.poisoned():
        why = prove(gemm)
    return (gemm, None) if why is None else (None, why)
