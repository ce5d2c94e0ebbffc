"""``--backend auto|wgpu|numpy``: which device computes this peer's integer products.

``wgpu`` uses the best GPU kernel that passes its gates and probe (``gpu.backend.select_backend``)
through ``gpu.live.training_ops`` (every product audited) and fails with a hint when none does.
``numpy`` is the reference. ``auto`` takes the faster correct one: a gated kernel only when its
measured throughput (``gpu.backend.measure_gops``, once at start) beats numpy's, since a software
adapter (lavapipe/llvmpipe) passes every gate yet runs many times slower than BLAS. Either way
the bits are the same (docs/KERNELS.md); the per-step kernel probe proves it to the other peers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from daisychain.gpu.backend import Backend, NumpyGemm, measure_gops, select_backend
from daisychain.gpu.gates import IntGemm
from daisychain.gpu.live import step_probe, training_ops
from daisychain.p2p.node import Compute

CHOICES = ("auto", "wgpu", "numpy")


class BackendUnavailable(Exception):
    """``--backend wgpu`` on a machine where no GPU kernel passed its gates."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Choice:
    compute: Compute
    reason: str  # printed at start: why this backend


def _gpu(backend: Backend) -> Compute:
    return Compute(backend.name, training_ops(backend), lambda: step_probe(backend))


def choose(
    choice: str,
    select: Callable[[], Backend] = select_backend,
    measure: Callable[[IntGemm], float] = measure_gops,
) -> Choice:
    """The backend for ``--backend choice``; raises BackendUnavailable for an impossible wgpu."""
    if choice not in CHOICES:
        raise ValueError(f"--backend must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "numpy":
        return Choice(Compute(), "numpy: requested with --backend numpy")
    backend = select()
    if backend.name == "numpy":
        why = "; ".join(f"{d.name}: {d.reason}" for d in backend.demotions) or "no GPU kernel"
        if choice == "wgpu":
            raise BackendUnavailable(
                f"--backend wgpu: no GPU kernel passed its gates on this machine ({why})",
                "run with --backend auto or numpy; `daisychain selftest` shows each kernel",
            )
        return Choice(Compute(), f"numpy: no gated GPU kernel ({why})")
    where = f"{backend.name} on {backend.adapter}"
    if choice == "wgpu":
        return Choice(_gpu(backend), f"{where}: requested with --backend wgpu")
    gpu_gops, cpu_gops = measure(backend.gemm), measure(NumpyGemm())
    if gpu_gops > cpu_gops:
        return Choice(_gpu(backend), f"{where}: {gpu_gops:.1f} GOP/s > numpy {cpu_gops:.1f} GOP/s")
    return Choice(
        Compute(), f"numpy: {cpu_gops:.1f} GOP/s >= {where} {gpu_gops:.1f} GOP/s (gated, slower)"
    )
