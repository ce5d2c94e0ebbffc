"""Headless Chromium for tests and benchmarks: where it is, the flags that keep it quiet and off
the network, and ``chromium_session``, the in-page measurement ``bench browser`` and
``bench kernels`` share (GEMM throughput of the page's backends, then training steps in the
WebGPU and CPU tiers, the policy of ``bench.rig.steps``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from daisychain.bench.rig.shapes import Shape
from daisychain.bench.rig.steps import StepPolicy

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

# Training steps in the page, the loop of bench/rig/node_step.mjs with the products on the selected
# backend (tier 'webgpu': the best gated WebGPU kernel, every product audited as in
# /train-check; 'webgpu-chain': the same with the step chain gated and used, every step in one
# submit (gpu/step_chain.js); tier 'cpu': the CPU mirror, what a browser without WebGPU runs).
# Also counts the readbacks of one step (the GEMM's own and the chains'), and the step chain's
# dispatches.
# Resolves to {backend, adapter, warmup_ms, step_ms: [...]} or {skipped: reason}.
_PAGE_STEPS = """
async ([presetName, vocab, tier, maxSteps, budgetS, slowS]) => {
  const M = await import('/js/model/index.js');
  const { forwardBackwardAsync } = await import('/js/model/gpt.js');
  const { selectBackend, modelOps } = await import('/js/gpu/backend.js');
  const { Auditor } = await import('/js/gpu/audit.js');
  const backend = await selectBackend({ order: tier === 'cpu' ? [] : undefined });
  if (tier !== 'cpu' && !backend.onGpu) {
    const why = backend.demotions.map((d) => `${d.name}: ${d.reason}`).join('; ');
    return { skipped: `no WebGPU kernel passed its gates (${why})` };
  }
  const auditor = new Auditor({ samples: 16 });
  const ops = modelOps(backend, { audit: (p, acc) => auditor.check(p, acc) });
  let chain = null;
  let stepChain = null;
  if (tier === 'webgpu-chain') {
    const { ForwardChain } = await import('/js/gpu/forward_chain.js');
    const { StepChain } = await import('/js/gpu/step_chain.js');
    const { runStepChainGate } = await import('/js/gpu/chain_gate.js');
    chain = await ForwardChain.create(backend.gemm);
    stepChain = await StepChain.create(chain);
    const gate = await runStepChainGate(stepChain);
    if (gate.failure) return { skipped: `step chain gate: ${JSON.stringify(gate.failure)}` };
    ops.chain = chain;
    ops.stepChain = stepChain;
  }
  const trips = () => (backend.gemm.products ?? 0) + (chain?.runs ?? 0) + (stepChain?.runs ?? 0);
  const dispatches = () => stepChain?.dispatches ?? null;
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
  const before = [trips(), dispatches()];
  const warmupMs = await step();
  const roundTrips = trips() - before[0];
  const chainDispatches = stepChain ? dispatches() - before[1] : null;
  const stepMs = [];
  if (warmupMs <= slowS * 1e3) {
    let spent = 0;
    while (stepMs.length < maxSteps && spent < budgetS * 1e3) {
      stepMs.push(await step());
      spent += stepMs.at(-1);
    }
  }
  return { backend: backend.selected, adapter: backend.adapter, warmup_ms: warmupMs,
           step_ms: stepMs, round_trips: backend.onGpu ? roundTrips : null,
           dispatches: chainDispatches };
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


@asynccontextmanager
async def app_page(flags: list[str]) -> AsyncIterator[tuple[str, Any]]:
    """The real app (offline data) on a loopback port and one page of headless Chromium started
    with ``flags``: yields (the app's base URL, the Playwright page); both stop on exit."""
    from daisychain.server.app import create_app, make_runner
    from daisychain.server.config import DataConfig, ServerConfig

    config = ServerConfig(data=replace(DataConfig(), offline=True))
    async with served_page(make_runner(create_app(config)), flags) as (base, page):
        yield base, page


@asynccontextmanager
async def served_page(runner: Any, flags: list[str]) -> AsyncIterator[tuple[str, Any]]:
    """An aiohttp ``AppRunner`` (not yet set up) on a loopback port and one page of headless
    Chromium started with ``flags``: yields (its base URL, the Playwright page); both stop on
    exit. ``app_page`` serves the real app this way, ``bench cpu-tier`` its TF.js page."""
    from aiohttp import web
    from playwright.async_api import async_playwright

    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=flags)
            try:
                yield base, await browser.new_page()
            finally:
                await browser.close()
    finally:
        await runner.cleanup()


async def chromium_session(
    shapes: list[Shape], repeats: int, presets: list[str], vocab: int, policy: StepPolicy | None
) -> dict[str, Any]:
    """One app + one Chromium: GEMM throughput at ``shapes``, then (with a ``policy``) step
    times of each preset in the WebGPU and CPU tiers.

    Returns {adapter, user_agent, gemm: {name: {backend: GOP/s | reason}},
    steps: {preset: {"webgpu": ..., "webgpu-chain": ..., "cpu": ...}}} (raw page results,
    times in ms).
    """
    async with app_page(FLAGS) as (base, page):
        # Any page of the app's origin: the scripts import the modules it serves. The
        # train-check page fails at once on the missing manifest and then stays idle.
        await page.goto(f"{base}/train-check.html?vectors=/none")
        gemm: dict[str, Any] = await page.evaluate(_PAGE_GEMM, [[list(s) for s in shapes], repeats])
        steps: dict[str, Any] = {}
        if policy is not None:
            limits = [policy.max_steps, policy.budget_s, policy.slow_s]
            for name in presets:
                steps[name] = {
                    tier: await page.evaluate(_PAGE_STEPS, [name, vocab, tier, *limits])
                    for tier in ("webgpu", "webgpu-chain", "cpu")
                }
        return {
            "adapter": gemm["adapter"],
            "user_agent": await page.evaluate("navigator.userAgent"),
            "gemm": gemm["shapes"],
            "steps": steps,
        }
