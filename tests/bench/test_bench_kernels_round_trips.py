"""``daisychain bench kernels``' round-trip figures at the ``tiny`` preset: what one training step
asks of the wgpu device, batched against per slice (counts, never a timing; skipped, with the
reason, only where no wgpu adapter exists)."""

from __future__ import annotations

import pytest

from daisychain.bench.kernels import STEP_BACKENDS, step_round_trips
from daisychain.gpu.backend import epilogue_dispatches, select_backend
from daisychain.gpu.device import GpuUnavailable, acquire
from daisychain.gpu.gemm import GpuGemm
from daisychain.model.config import preset


def test_round_trips_of_a_tiny_step_batched_and_per_slice() -> None:
    try:
        acquire()
    except GpuUnavailable as exc:
        pytest.skip(f"no wgpu adapter on this machine: {exc}")
    backend = select_backend()
    assert isinstance(backend.gemm, GpuGemm), backend.demotions
    doc = step_round_trips(preset("tiny"), backend.gemm, backend.adapter)
    per_slice, batched = doc["per_slice"], doc["batched"]
    # the same slices computed, plus each chain's epilogues
    epilogues = epilogue_dispatches(backend.gemm, preset("tiny").layers)
    assert batched["dispatches"] == per_slice["dispatches"] + epilogues > 0
    assert per_slice["readbacks"] == per_slice["submits"] == per_slice["dispatches"]
    assert 0 < batched["readbacks"] == batched["submits"] < per_slice["readbacks"]
    assert batched["bytes_down"] >= per_slice["bytes_down"]  # the same results (+ alignment)
    assert doc["readbacks_ratio"] == round(per_slice["readbacks"] / batched["readbacks"], 2) > 1
    assert {"wgpu_dp4a", "wgpu_dp4a_per_slice"} <= set(STEP_BACKENDS)
