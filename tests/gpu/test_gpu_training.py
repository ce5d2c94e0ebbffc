"""The golden tiny run with every integer product summed by the gated wgpu kernels (lavapipe on
CI): the same loss bits and weight hashes as the numpy reference (tests/vectors, train_run.tiny).

Skips only when no wgpu adapter exists at all (no Vulkan driver); CI installs
mesa-vulkan-drivers, so there it runs on llvmpipe.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from daisychain import training
from daisychain.model.config import ModelConfig
from daisychain.model.ops import IntGemmOps
from daisychain.optim import AdamWConfig

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


def _golden() -> tuple[dict[str, object], np.ndarray, np.ndarray, list[float], list[str]]:
    manifest = json.loads((VECTORS / "manifest.json").read_text())
    case = next(c for c in manifest["cases"] if c["name"] == "train_run.tiny")

    def blob(field: dict[str, object]) -> np.ndarray:
        data = (VECTORS / str(field["blob"])).read_bytes()
        return np.frombuffer(data, dtype=str(field["dtype"])).reshape(field["shape"])  # type: ignore[arg-type]

    x, y = blob(case["inputs"]["x"]), blob(case["inputs"]["y"])
    loss = blob(case["outputs"]["loss"])
    return case["params"], x, y, list(loss), list(case["outputs"]["hashes"]["value"])


@pytest.fixture(scope="module")
def gpu_ops() -> IntGemmOps:
    from daisychain.gpu.backend import select_backend
    from daisychain.gpu.device import GpuUnavailable, acquire

    try:
        acquire()
    except GpuUnavailable as exc:
        pytest.skip(f"no wgpu adapter on this machine: {exc}")
    backend = select_backend()
    # With an adapter, a numpy fallback means every kernel failed its gates: a bug, not a skip.
    assert backend.name != "numpy", backend.demotions
    return IntGemmOps(backend.name, backend.gemm.matmul_int)


def test_golden_tiny_run_on_the_gpu_kernel(gpu_ops: IntGemmOps) -> None:
    params, x, y, want_loss, want_hashes = _golden()
    model = dict(params["model"])  # type: ignore[call-overload]
    eps = np.array([model.pop("norm_eps_bits")], dtype=np.uint32).view(np.float32)[0]
    cfg = ModelConfig(**model, norm_eps=eps)
    state = training.init(cfg, AdamWConfig(**params["optim"]), int(params["seed"]))  # type: ignore[arg-type, call-overload]
    state.ops = gpu_ops
    for i in range(int(params["steps"])):  # type: ignore[call-overload]
        res = training.train_step(state, x[i].astype(np.int64), y[i].astype(np.int64))
        assert np.float32(res.loss).view(np.uint32) == np.float32(want_loss[i]).view(np.uint32), i
        assert res.hash == want_hashes[i], f"step {i + 1}: {gpu_ops.name} forked from numpy"
