"""``daisychain bench browser``: int8 GEMM throughput in headless Chromium at the small shapes.

Starts the real DaisyChain app on a loopback port and Debian's Chromium through Playwright (with
``--enable-unsafe-webgpu``: the SwiftShader WebGPU adapter on a machine without a GPU, the real
GPU elsewhere), then times ``matmulInt`` of the browser backends (static/js/gpu/): WebGPU DP4A,
WebGPU LUT and the JS CPU mirror, end to end (packing, upload, dispatch, readback), best of
``--repeats`` after a warm-up, at the ``small`` preset's shapes (``bench kernels``). Each WebGPU
kernel must pass its exact gates first; a demoted one is reported with its reason and no figure.
numpy's exact path is timed in the same run and every figure is given as ``ratio_to_numpy``.
Chromium is kept off the network by its flags.

``chromium_session`` (``daisychain.bench.rig.chromium``) is the measurement itself, shared with
``bench kernels``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import numpy as np

from daisychain.bench.rig.chromium import chromium_missing, chromium_session
from daisychain.bench.rig.shapes import SMALL_SHAPES
from daisychain.numerics.gemm import int_matmul


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repeats", type=int, default=1, help="timed runs per shape after a warm-up (best kept)"
    )


def _numpy_gops(m: int, k: int, n: int, repeats: int) -> float:
    rng = np.random.default_rng(0)  # timing input only
    a = rng.integers(-128, 128, (m, k)).astype(np.float32)
    b = rng.integers(-128, 128, (k, n)).astype(np.float32)
    int_matmul(a, b)
    best = float("inf")
    for _ in range(max(3, repeats)):
        t0 = time.perf_counter()
        int_matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * m * k * n / best / 1e9


def measure(args: argparse.Namespace) -> dict[str, Any]:
    missing = chromium_missing()
    if missing is not None:
        raise SystemExit(f"daisychain bench browser: {missing}")
    browser = asyncio.run(chromium_session(SMALL_SHAPES, args.repeats, [], 0, None))
    shapes: dict[str, Any] = {}
    for name, m, k, n in SMALL_SHAPES:
        numpy_gops = _numpy_gops(m, k, n, args.repeats)
        row: dict[str, Any] = {"shape": [m, k, n], "numpy": {"gops": round(numpy_gops, 3)}}
        for backend, value in browser["gemm"][name].items():
            if isinstance(value, str):
                row[backend] = {"gops": None, "reason": value}
            else:
                row[backend] = {
                    "gops": round(float(value), 4),
                    "ratio_to_numpy": round(float(value) / numpy_gops, 5),
                }
        shapes[name] = row
    return {
        "benchmark": "browser",
        "adapter": browser["adapter"],
        "user_agent": browser["user_agent"],
        "repeats": args.repeats,
        "timing": "best of --repeats after a warm-up, end to end: pack, upload, dispatch, readback",
        "shapes": shapes,
    }
