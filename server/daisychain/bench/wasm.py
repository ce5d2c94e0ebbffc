"""``daisychain bench wasm``: the CPU tier's WebAssembly SIMD GEMM against its JS GEMM.

The same measurement (``wasm_measure.mjs``) runs in one Node process (``node_wasm.mjs``) and in
one headless Chromium tab on the real app (the file served to a page of the app's origin under
``/bench/``, so the page's own CSP applies). It gates and enables the kernel as a page does
(static/js/numerics/wasmgate.js), then for each preset in ``--presets`` times, interleaved:

- ``gemm``: every product shape of one training step (forward, and its two gradient products),
  through gemm.js's public functions, with the JS GEMM and with the kernel; GOP/s (2 M K N per
  product) and ``*_ratio`` = JS time / wasm time (> 1: the kernel is faster);
- ``quant``: the quantizers of one step's largest operands with the JS loops and with the
  WebAssembly elementwise kernel (static/js/numerics/wasmeltgate.js), ``ratio`` = JS / wasm;
- ``xent``: one step's cross-entropy (static/js/numerics/xent.js), JS loop against the same
  kernel, ``ratio`` = JS / wasm;
- ``step``: the CPU tier's training step (gradients + AdamW, no hash) with the JS GEMM
  (``js``), the wasm GEMM (``wasm``), the wasm GEMM with the elementwise kernel's quantization
  but the JS cross-entropy (``wasm_quant``) and with all of the elementwise kernel
  (``wasm_elt``): medians, tokens/s, ``ratio`` = js / wasm, ``elementwise_ratio`` = wasm /
  wasm_elt, ``xent_ratio`` = wasm_quant / wasm_elt, ``total_ratio`` = js / wasm_elt.

The machines are shared and noisy: the ratios, measured side by side in one process, are the
result; absolute times are leads. A kernel refused by its gate is reported with the reason and
no figures; a runtime that is missing, as ``{"skipped": reason}``. docs/BENCHMARKS.md,
``wasm``, has the current figures.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from daisychain.bench.rig.chromium import OFFLINE_FLAGS, app_page, chromium_missing
from daisychain.bench.rig.steps import node_missing, run_node

NODE_WASM = Path(__file__).with_name("node_wasm.mjs")
MEASURE = Path(__file__).with_name("wasm_measure.mjs")
MEASURE_PATH = "/bench/wasm_measure.mjs"  # where the page finds it (served by the test route)
RUNTIMES = ("node", "chromium")

# Runs in a page of the app's origin: the app's modules and the routed measurement.
_PAGE = """
async (options) => {
  const { measure } = await import('MEASURE_PATH');
  const modules = {
    N: await import('/js/numerics/index.js'),
    M: await import('/js/model/index.js'),
    enableWasmGemm: (await import('/js/numerics/wasmgate.js')).enableWasmGemm,
    enableWasmElementwise: (await import('/js/numerics/wasmeltgate.js')).enableWasmElementwise,
  };
  const result = await measure(modules, options);
  return { user_agent: navigator.userAgent, ...result };
}
""".replace("MEASURE_PATH", MEASURE_PATH)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--presets", default="tiny,small", help="comma-separated model presets")
    parser.add_argument("--vocab", type=int, default=2048, help="vocabulary of the presets")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per product (best kept)")
    parser.add_argument("--steps", type=int, default=3, help="timed training steps each way")
    parser.add_argument(
        "--runtimes", default="node,chromium", help="where to measure: node, chromium or both"
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="give up on one runtime after this many s"
    )


async def evaluate_in_app_page(
    modules: dict[str, Path], script: str, arg: Any, timeout_s: float
) -> Any:
    """``script`` evaluated with ``arg`` in one headless Chromium tab on the real app (offline
    data), with each bench module of ``modules`` served at its URL path (so the page's
    ``import()`` finds it); ``bench wasm`` and ``bench cpu-tier`` measure this way."""
    from playwright.async_api import Route

    async with app_page(OFFLINE_FLAGS) as (base, page):
        page.set_default_timeout(timeout_s * 1e3)

        def server(file: Path) -> Callable[[Route], Awaitable[None]]:
            # One-argument handlers: Playwright passes the request too to a handler that
            # takes two parameters.
            async def serve(route: Route) -> None:
                # The app's isolation headers: a bench module may be a Worker's script, which a
                # cross-origin isolated page only runs with them.
                await route.fulfill(
                    status=200,
                    body=file.read_bytes(),
                    content_type="text/javascript",
                    headers={"cross-origin-embedder-policy": "require-corp",
                             "cross-origin-resource-policy": "same-origin"},
                )  # fmt: skip

            return serve

        for url_path, file in modules.items():
            await page.route("**" + url_path, server(file))
        # Any page of the app's origin, with its CSP (script-src 'self',
        # 'wasm-unsafe-eval'): train-check fails at once on the missing manifest and
        # then stays idle.
        await page.goto(f"{base}/train-check.html?vectors=/none")
        return await page.evaluate(script, arg)


async def _chromium(options: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """The measurement in one headless Chromium tab on the real app (offline data)."""
    result: dict[str, Any] = await evaluate_in_app_page(
        {MEASURE_PATH: MEASURE}, _PAGE, options, timeout_s
    )
    return result


def _summary(run: dict[str, Any]) -> dict[str, Any]:
    ratios = [p["step"]["ratio"] for p in run.get("presets", {}).values()]
    if ratios:
        run["step_ratio_min"] = min(ratios)
    return run


def measure(args: argparse.Namespace) -> dict[str, Any]:
    runtimes = [r for r in args.runtimes.split(",") if r]
    unknown = set(runtimes) - set(RUNTIMES)
    if unknown:
        raise SystemExit(f"bench wasm: unknown runtime(s) {sorted(unknown)}; use {RUNTIMES}")
    presets = [p for p in args.presets.split(",") if p]
    repeats, steps = max(1, args.repeats), max(1, args.steps)
    result: dict[str, Any] = {"benchmark": "wasm", "presets": presets, "vocab": args.vocab}
    if "node" in runtimes:
        missing = node_missing()
        result["node"] = (
            {"skipped": missing}
            if missing is not None
            else _summary(
                run_node(
                    NODE_WASM,
                    [",".join(presets), str(args.vocab), str(repeats), str(steps)],
                    args.timeout,
                )
            )
        )
    if "chromium" in runtimes:
        missing = chromium_missing()
        options = {"presets": presets, "vocab": args.vocab, "repeats": repeats, "steps": steps}
        result["chromium"] = (
            {"skipped": missing}
            if missing is not None
            else _summary(asyncio.run(_chromium(options, args.timeout)))
        )
    return result
