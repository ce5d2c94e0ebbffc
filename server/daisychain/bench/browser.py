"""``daisychain bench browser``: int8 GEMM throughput in headless Chromium at the small shapes.

Starts the real DaisyChain app on a loopback port and Debian's Chromium through Playwright (with
``--enable-unsafe-webgpu``: the SwiftShader WebGPU adapter on a machine without a GPU, the real
GPU elsewhere), then times ``matmulInt`` of the browser backends (static/js/gpu/): WebGPU DP4A,
WebGPU LUT and the JS CPU mirror, end to end (packing, upload, dispatch, readback), best of
``--repeats`` after a warm-up, at the ``small`` preset's shapes (``bench kernels``). Each WebGPU
kernel must pass its exact gates first; a demoted one is reported with its reason and no figure.
numpy's exact path is timed in the same run and every figure is given as ``ratio_to_numpy``.
Chromium is kept off the network by its flags.

``chromium_session`` is the measurement itself, shared with ``bench kernels``: it also times
training steps in the page (WebGPU tier and CPU tier, the policy of ``bench/steps.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from daisychain.bench._steps import StepPolicy
from daisychain.numerics.gemm import int_matmul

CHROMIUM = Path("/usr/bin/chromium")
# Keep Chromium off the network (ENVIRONMENT.md): no QUIC, no background or component traffic.
# The browser tests use the same list.
OFFLINE_FLAGS = [
    "--no-sandbox",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WEBGPU_FLAG = "--enable-unsafe-webgpu"
# Playwright passes its own --disable-features list and Chromium keeps only the last such switch,
# so a test that must disable one more feature repeats the list that keeps Chromium quiet
# (Playwright's, for the features that matter here: no media-router discovery, optimization
# hints, network-time queries, search preconnects, HTTPS upgrades of the loopback server).
QUIET_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync", "DestroyProfileOnBrowserClose", "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable", "LensOverlay", "MediaRouter", "PaintHolding",
    "ThirdPartyStoragePartitioning", "AvoidCorsURLLoaderRestartOnRedirect", "OptimizationHints",
    "NetworkTimeServiceQuerying", "AimEnabled", "PreconnectToSearch",
)  # fmt: skip
# WebRTC between tabs and aiortc peers (ENVIRONMENT.md): host candidates as plain addresses,
# not mDNS `.local` names (aioice would stall resolving them).
WEBRTC_FLAGS = [
    "--disable-features=" + ",".join((*QUIET_DISABLED_FEATURES, "WebRtcHideLocalIpsWithMdns"))
]
FLAGS = [*OFFLINE_FLAGS, WEBGPU_FLAG]
Shape = tuple[str, int, int, int]  # (name, M, K, N)

# Runs in the page (a module context of the app's origin, so the imports pass its CSP).
# Resolves to {adapter, shapes: {name: {backend: GOP/s | "demoted: reason"}}}.
_PAGE_GEMM = """
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
    for (const kind of ['dp4a', 'lut']) backends[`webgpu-${kind}`] = `no adapter: ${exc.message}`;
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

# Training steps in the page, the loop of bench/node_step.mjs with the products on the selected
# backend (tier 'webgpu': the best gated WebGPU kernel, every product audited as in
# /train-check; tier 'cpu': the CPU mirror, what a browser without WebGPU runs).
# Resolves to {backend, adapter, warmup_ms, step_ms: [...]} or {skipped: reason}.
_PAGE_STEPS = """
async ([presetName, vocab, tier, maxSteps, budgetS, slowS]) => {
  const M = await import('/js/model/index.js');
  const { forwardBackwardAsync } = await import('/js/model/gpt.js');
  const { selectBackend, modelOps } = await import('/js/gpu/backend.js');
  const { Auditor } = await import('/js/gpu/audit.js');
  const backend = await selectBackend({ order: tier === 'cpu' ? [] : undefined });
  if (tier === 'webgpu' && !backend.onGpu) {
    const why = backend.demotions.map((d) => `${d.name}: ${d.reason}`).join('; ');
    return { skipped: `no WebGPU kernel passed its gates (${why})` };
  }
  const auditor = new Auditor({ samples: 16 });
  const ops = modelOps(backend, { audit: (p, acc) => auditor.check(p, acc) });
  const cfg = M.preset(presetName, { vocabSize: vocab });
  const state = M.init(cfg, {}, 1);
  const tokens = new Int32Array(200000);
  for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 7919 + 13) % vocab;
  const step = async () => {
    const t0 = performance.now();
    const { x, y } = M.nextBatch(state, tokens);
    const { grads } = await forwardBackwardAsync(state.params, cfg, x, y,
      { workspace: state.workspace, ops });
    M.applyGrads(state, grads);
    return performance.now() - t0;
  };
  const warmupMs = await step();
  const stepMs = [];
  if (warmupMs <= slowS * 1e3) {
    let spent = 0;
    while (stepMs.length < maxSteps && spent < budgetS * 1e3) {
      stepMs.push(await step());
      spent += stepMs.at(-1);
    }
  }
  return { backend: backend.selected, adapter: backend.adapter, warmup_ms: warmupMs,
           step_ms: stepMs };
}
"""


def chromium_missing() -> str | None:
    """Why the Chromium rows cannot run here, or None."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (pip install -e '.[test]')"
    return None


async def chromium_session(
    shapes: list[Shape], repeats: int, presets: list[str], vocab: int, policy: StepPolicy | None
) -> dict[str, Any]:
    """One app + one Chromium: GEMM throughput at ``shapes``, then (with a ``policy``) step
    times of each preset in the WebGPU and CPU tiers.

    Returns {adapter, user_agent, gemm: {name: {backend: GOP/s | reason}},
    steps: {preset: {"webgpu": ..., "cpu": ...}}} (raw page results, times in ms).
    """
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
                # Any page of the app's origin: the scripts import the modules it serves. The
                # train-check page fails at once on the missing manifest and then stays idle.
                await page.goto(f"{base}/train-check.html?vectors=/none")
                gemm: dict[str, Any] = await page.evaluate(
                    _PAGE_GEMM, [[list(s) for s in shapes], repeats]
                )
                steps: dict[str, Any] = {}
                if policy is not None:
                    limits = [policy.max_steps, policy.budget_s, policy.slow_s]
                    for name in presets:
                        steps[name] = {
                            tier: await page.evaluate(_PAGE_STEPS, [name, vocab, tier, *limits])
                            for tier in ("webgpu", "cpu")
                        }
                return {
                    "adapter": gemm["adapter"],
                    "user_agent": await page.evaluate("navigator.userAgent"),
                    "gemm": gemm["shapes"],
                    "steps": steps,
                }
            finally:
                await browser.close()
    finally:
        await runner.cleanup()


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
    from daisychain.bench.kernels import SMALL_SHAPES

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
