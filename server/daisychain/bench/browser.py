"""``daisychain bench browser``: int8 GEMM throughput in headless Chromium at the small shapes.

Starts the real DaisyChain app on a loopback port and Debian's Chromium through Playwright (with
``--enable-unsafe-webgpu``: the SwiftShader WebGPU adapter on a machine without a GPU, the real
GPU elsewhere), then times ``matmulInt`` of the browser backends (static/js/gpu/): WebGPU DP4A,
WebGPU LUT and the JS CPU mirror, end to end (packing, upload, dispatch, readback), best of
``--repeats`` after a warm-up, at the ``small`` preset's shapes (``bench kernels``). Each WebGPU
kernel must pass its exact gates first; a demoted one is reported with its reason and no figure.
numpy's exact path is timed in the same run and every figure is given as ``ratio_to_numpy``.
Chromium is kept off the network by its flags.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from daisychain.bench.kernels import SMALL_SHAPES
from daisychain.numerics.gemm import int_matmul

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--no-sandbox",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-unsafe-webgpu",
]

# Runs in the page (a module context of the app's origin, so the imports pass its CSP).
_PAGE_BENCH = """
async ([shapes, repeats]) => {
  const { acquireGpu } = await import('/js/gpu/device.js');
  const { GpuGemm, CpuGemm } = await import('/js/gpu/gemm.js');
  const { runGemmGates } = await import('/js/gpu/gates.js');
  const { measureGops } = await import('/js/gpu/backend.js');
  const backends = {};
  let adapter = 'none';
  try {
    const gpu = await acquireGpu();
    adapter = gpu.adapterName;
    for (const kind of ['dp4a', 'lut']) {
      try {
        const gemm = await GpuGemm.create(gpu, kind);
        const gate = await runGemmGates(gemm, { pool: gemm.pool, tile: gemm.tile });
        backends[`webgpu-${kind}`] = gate.failure ? `demoted: ${gate.failure.describe()}` : gemm;
      } catch (exc) {
        backends[`webgpu-${kind}`] = `demoted: ${exc.message}`;
      }
    }
  } catch (exc) {
    adapter = `none (${exc.message})`;
  }
  backends['js-cpu'] = new CpuGemm();
  const out = { adapter, shapes: {} };
  for (const [name, m, k, n] of shapes) {
    const row = {};
    for (const [backend, gemm] of Object.entries(backends)) {
      row[backend] = typeof gemm === 'string'
        ? gemm : await measureGops(gemm, [m, k, n], repeats);
    }
    out.shapes[name] = row;
  }
  return out;
}
"""


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


async def _browser(repeats: int) -> dict[str, Any]:
    from aiohttp import web
    from playwright.async_api import async_playwright

    from daisychain.server.app import create_app
    from daisychain.server.config import DataConfig, ServerConfig

    config = ServerConfig(data=replace(DataConfig(), offline=True))
    runner = web.AppRunner(create_app(config))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
            try:
                page = await browser.new_page()
                await page.goto(f"{base}/train-check.html?vectors=/none")  # any app page
                shapes = [list(s) for s in SMALL_SHAPES]
                result: dict[str, Any] = await page.evaluate(_PAGE_BENCH, [shapes, repeats])
                result["user_agent"] = await page.evaluate("navigator.userAgent")
                return result
            finally:
                await browser.close()
    finally:
        await runner.cleanup()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    if not CHROMIUM.exists():
        raise SystemExit(
            "daisychain bench browser: /usr/bin/chromium is missing (apt-get install chromium)"
        )
    browser = asyncio.run(_browser(args.repeats))
    shapes: dict[str, Any] = {}
    for name, m, k, n in SMALL_SHAPES:
        numpy_gops = _numpy_gops(m, k, n, args.repeats)
        row: dict[str, Any] = {"shape": [m, k, n], "numpy": {"gops": round(numpy_gops, 3)}}
        for backend, value in browser["shapes"][name].items():
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
