"""The golden tiny run with every integer product summed by the gated wgpu kernels (lavapipe on
CI): the same loss bits and weight hashes as the numpy reference (tests/vectors, train_run.tiny),
one slice per call and batched as training sends them (``training_ops``: one submit and one
readback per product, every product audited); and how many round trips a step makes each way
(counted, never timed: the counts are deterministic).

Skips only when no wgpu adapter exists at all (no Vulkan driver); CI installs
mesa-vulkan-drivers, so there it runs on llvmpipe.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daisychain import training
from daisychain.bench.rig.steps import token_stream
from daisychain.gpu.backend import Backend
from daisychain.gpu.counters import ROUND_TRIPS, Counts
from daisychain.gpu.gemm import GpuGemm, Int8Array, Int32Array, PerSliceGemm
from daisychain.gpu.live import training_ops
from daisychain.model.config import ModelConfig, preset
from daisychain.model.ops import GemmOps, IntGemmOps
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
def gpu_backend() -> Backend:
    from daisychain.gpu.backend import select_backend
    from daisychain.gpu.device import GpuUnavailable, acquire

    try:
        acquire()
    except GpuUnavailable as exc:
        pytest.skip(f"no wgpu adapter on this machine: {exc}")
    backend = select_backend()
    # With an adapter, a numpy fallback means every kernel failed its gates: a bug, not a skip.
    assert backend.name != "numpy", backend.demotions
    return backend


@pytest.fixture(scope="module")
def gpu_ops(gpu_backend: Backend) -> IntGemmOps:
    return IntGemmOps(gpu_backend.name, gpu_backend.gemm.matmul_int)


def test_golden_tiny_run_on_the_gpu_kernel(gpu_ops: IntGemmOps) -> None:
    _golden_run(gpu_ops)


def test_golden_tiny_run_with_batched_products(gpu_backend: Backend) -> None:
    assert hasattr(gpu_backend.gemm, "matmul_int_batched")
    _golden_run(training_ops(gpu_backend))


def _golden_run(gpu_ops: GemmOps) -> None:
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


class _Counting:
    """The real kernel, with the number of products and of slices it was handed."""

    def __init__(self, gemm: GpuGemm | PerSliceGemm) -> None:
        self.gemm, self.products, self.slices = gemm, 0, 0
        self.name, self.tile, self.qmatmul = gemm.name, gemm.tile, gemm.qmatmul

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        self.products += 1
        self.slices += 1
        return self.gemm.matmul_int(a, b)


class _CountingBatched(_Counting):
    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array:
        assert isinstance(self.gemm, GpuGemm)
        self.products += 1
        self.slices += int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))
        return self.gemm.matmul_int_batched(a, b)


def _one_step_each(
    cfg: ModelConfig, paths: dict[str, Any], adapter: str
) -> tuple[dict[str, Counts], dict[str, str]]:
    """One training step of ``cfg`` through each path (a counting GEMM, audited as training
    does): the device traffic it made and its hash, by label."""
    tokens = token_stream(cfg.vocab_size)
    counted, hashes = {}, {}
    for label, path in paths.items():
        state = training.init(cfg, AdamWConfig(), 1)
        state.ops = training_ops(Backend(path, adapter))
        x, y = training.next_batch(state, tokens)
        ROUND_TRIPS.reset()
        hashes[label] = training.train_step(state, x, y).hash
        counted[label] = ROUND_TRIPS.snapshot()
    return counted, hashes


class _CountingMany(_CountingBatched):
    """``_CountingBatched`` that also takes several products in one call, as ``GpuGemm``
    does (training then hands it each backward pair at once); ``calls`` counts the calls."""

    def __init__(self, gemm: GpuGemm) -> None:
        super().__init__(gemm)
        self.calls = 0

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array:
        self.calls += 1
        return super().matmul_int_batched(a, b)

    def matmul_int_many(self, products: list[tuple[Int8Array, Int8Array]]) -> list[Int32Array]:
        assert isinstance(self.gemm, GpuGemm)
        self.calls += 1
        self.products += len(products)
        for a, b in products:
            self.slices += int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))
        return self.gemm.matmul_int_many(products)


def test_a_step_makes_one_round_trip_per_forward_product_and_per_backward_pair(
    gpu_backend: Backend,
) -> None:
    gemm = gpu_backend.gemm
    assert isinstance(gemm, GpuGemm)
    cfg = preset("tiny")
    paths = {"one by one": _CountingBatched(gemm), "paired": _CountingMany(gemm)}
    counted, hashes = _one_step_each(cfg, paths, gpu_backend.adapter)
    alone, paired = counted["one by one"], counted["paired"]
    many = paths["paired"]
    assert isinstance(many, _CountingMany)
    assert hashes["paired"] == hashes["one by one"]
    assert many.products == paths["one by one"].products  # the same products ...
    assert paired.dispatches == alone.dispatches  # ... and slices
    pairs = 6 * cfg.layers + 1  # four linear layers and attention's two per layer, the logits
    assert paired.readbacks == paired.submits == many.calls == alone.readbacks - pairs
    assert (alone.readbacks, paired.readbacks) == (39, 26)  # tiny (docs/BENCHMARKS.md)


def test_a_batched_step_makes_one_round_trip_per_product(gpu_backend: Backend) -> None:
    gemm = gpu_backend.gemm
    assert isinstance(gemm, GpuGemm)
    cfg = preset("tiny")
    paths = {"per slice": _Counting(PerSliceGemm(gemm)), "batched": _CountingBatched(gemm)}
    counted, hashes = _one_step_each(cfg, paths, gpu_backend.adapter)
    per_slice, batched = counted["per slice"], counted["batched"]
    slices = paths["per slice"].slices
    assert slices == paths["batched"].slices  # the same products, the same slices
    assert per_slice.readbacks == per_slice.submits == per_slice.dispatches == slices
    assert batched.readbacks == batched.submits == paths["batched"].products
    assert batched.dispatches == slices
    assert batched.readbacks * 4 < per_slice.readbacks  # tiny: 39 against 367 (docs)
    assert hashes["batched"] == hashes["per slice"]
