"""``daisychain bench kernels``: int8 GEMM throughput per backend at the ``small`` preset's shapes.

Shapes (M x K x N) of one ``small`` step's forward products, N = 1024 tokens, width 256,
vocabulary 2048: qkv 1024x256x768, mlp up 1024x256x1024, mlp down 1024x1024x256, logits
1024x256x2048. Backends: the numpy exact path (``daisychain.numerics.gemm.int_matmul``: float32
BLAS on int8 values), wgpu DP4A and wgpu LUT (whatever adapter this machine has; lavapipe on
CI). Each GPU kernel must pass its exact gates first; a demoted one is reported with its reason
and no figure. Timings are best-of-``--repeats`` of ``matmul_int`` end to end (packing, upload,
dispatch, readback), so they are what a peer's step pays. Every figure is also given as a ratio
to numpy measured in the same run (``ratio_to_numpy``): the machines are shared and noisy.
Browser rows (Chromium WebGPU, JS mirror) come from the browser harness (issue 3).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from daisychain.gpu.backend import NumpyGemm, evaluate_gpu
from daisychain.gpu.device import GpuUnavailable, acquire
from daisychain.gpu.gates import IntGemm
from daisychain.gpu.gemm import GemmKind

# (name, M, K, N) of the small preset's products (vocabulary 2048, see the module docstring).
SMALL_SHAPES = [
    ("qkv", 1024, 256, 768),
    ("mlp_up", 1024, 256, 1024),
    ("mlp_down", 1024, 1024, 256),
    ("logits", 1024, 256, 2048),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per shape (best kept)")


def _time(gemm: IntGemm, a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], repeats: int) -> float:
    gemm.matmul_int(a, b)  # warm-up: pipelines, buffer pool
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        gemm.matmul_int(a, b)
        best = min(best, time.perf_counter() - t0)
    return best


def measure(args: argparse.Namespace) -> dict[str, Any]:
    backends: dict[str, IntGemm | str] = {"numpy": NumpyGemm()}
    adapter = "none"
    try:
        gpu = acquire()
        adapter = gpu.adapter_name
        kinds: tuple[GemmKind, ...] = ("dp4a", "lut")
        for kind in kinds:
            gemm, reason = evaluate_gpu(gpu, kind)
            backends[f"wgpu-{kind}"] = gemm if gemm is not None else f"demoted: {reason}"
    except GpuUnavailable as exc:
        for kind in ("dp4a", "lut"):
            backends[f"wgpu-{kind}"] = f"unavailable: {exc}"
    rng = np.random.default_rng(0)  # timing inputs only
    results: dict[str, Any] = {}
    totals: dict[str, float] = {}
    for name, m, k, n in SMALL_SHAPES:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        ops = 2.0 * m * k * n
        row: dict[str, Any] = {"shape": [m, k, n]}
        numpy_gops = 0.0
        for backend_name, candidate in backends.items():
            if isinstance(candidate, str):
                row[backend_name] = {"error": candidate}
                continue
            seconds = _time(candidate, a, b, args.repeats)
            gops = ops / seconds / 1e9
            totals[backend_name] = totals.get(backend_name, 0.0) + seconds
            if backend_name == "numpy":
                numpy_gops = gops
            row[backend_name] = {
                "seconds": round(seconds, 6),
                "gops": round(gops, 3),
                "ratio_to_numpy": round(gops / numpy_gops, 4) if numpy_gops else None,
            }
        results[name] = row
    numpy_total = totals.get("numpy", 0.0)
    return {
        "benchmark": "kernels",
        "adapter": adapter,
        "shapes": results,
        "step_products_seconds": {k: round(v, 6) for k, v in totals.items()},
        "step_products_ratio_to_numpy": {
            k: round(numpy_total / v, 4) for k, v in totals.items() if v > 0
        },
        "note": "GOP/s counts 2*M*K*N; ratio_to_numpy > 1 means faster than numpy",
    }
