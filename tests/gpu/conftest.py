"""The GPU tests' one device: acquired once per session, the tests skipped (with the reason)
where this machine has no wgpu adapter."""

from __future__ import annotations

import pytest

from daisychain.gpu.device import GpuDevice, GpuUnavailable, acquire
from daisychain.gpu.gemm import KERNEL_NAMES, GemmKind, GpuGemm


@pytest.fixture(scope="session")
def gpu() -> GpuDevice:
    try:
        return acquire()
    except GpuUnavailable as exc:
        pytest.skip(f"no wgpu adapter on this machine: {exc}")


@pytest.fixture(scope="session", params=list(KERNEL_NAMES))
def gemm(request: pytest.FixtureRequest, gpu: GpuDevice) -> GpuGemm:
    """Each wgpu GEMM kernel on the session's device."""
    return GpuGemm(gpu, request.param)


@pytest.fixture(scope="module", params=list(KERNEL_NAMES))
def fresh_gemm(request: pytest.FixtureRequest, gpu: GpuDevice) -> GpuGemm:
    """Each wgpu GEMM kernel with no chain attached (a test attaches one, or a planted one)."""
    kind: GemmKind = request.param
    return GpuGemm(gpu, kind)
