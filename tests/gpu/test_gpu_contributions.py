"""Contributions recomputed bit for bit by each gated wgpu kernel (docs/TRUST.md, "What an
auditor recomputes, and its cost"): tests/vectors/audit/contributions.json through
``p2p.contribution`` with every product summed by the kernel, as a headless peer on that backend
computes (``training_ops``: batched, every product audited). The same check as
tests/p2p/test_audit_contributions.py (numpy and the CPU backends), ``contribution_mismatches``.

Skips when no wgpu adapter exists (no Vulkan driver), and for a kernel this adapter's gates
refuse (the gates' own tests say why); lavapipe/llvmpipe runs it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import audit_vectors
from daisychain.gpu.backend import GPU_ORDER, Backend, Demotion
from daisychain.gpu.device import GpuUnavailable, acquire
from daisychain.gpu.live import training_ops
from daisychain.peer.backend import gated_gpu_backends

VECTORS: dict[str, Any] = json.loads(
    (audit_vectors.FOLDER / "contributions.json").read_text(encoding="utf-8")
)


@pytest.fixture(scope="module")
def gated() -> tuple[list[Backend], list[Demotion]]:
    """Every wgpu kernel's gate result here, once for the module."""
    try:
        acquire()
    except GpuUnavailable as exc:
        pytest.skip(f"no wgpu adapter on this machine: {exc}")
    return gated_gpu_backends()


@pytest.mark.parametrize("kind", GPU_ORDER)
def test_each_gated_wgpu_kernel_gives_the_vectors(
    gated: tuple[list[Backend], list[Demotion]], kind: str
) -> None:
    usable, refused = gated
    name = f"wgpu-{kind}"
    backend = next((b for b in usable if b.name == name), None)
    if backend is None:
        why = [d.reason for d in refused if d.name == name]
        pytest.skip(f"{name} failed its gates here: {why}")
    ops = training_ops(backend)
    assert ops.name == name
    assert audit_vectors.contribution_mismatches(VECTORS, ops) == []
