"""``daisychain bench wasm-pool``: the browser CPU tier's WebAssembly GEMM on a pool of workers.

Where a page is cross-origin isolated (the server asks for it), its training worker shares each
kernel call's rows with helper workers on one shared memory (static/js/numerics/wasmpool.js;
docs/KERNELS.md, "A pool of workers"). This bench runs ``wasmpool_worker.mjs`` as a module
Worker of one headless Chromium page on the real app (so the page's own headers and CSP apply)
and times, per preset in ``--presets``, interleaved, the CPU tier's training step (gradients +
AdamW, no hash) with the kernel on the worker's thread alone (``one``) and with a pool of as many
threads as the page allows (``pool``: its ``threads``, at most 8): medians, tokens/s and
``ratio`` = one / pool (> 1: the pool is faster). Both kernels pass the gate first. A page that
cannot start a pool (one logical core) is reported with the reason and no figures. The machines
are shared and noisy: the ratio, measured in one run, is the result. docs/BENCHMARKS.md,
``wasm-pool``, has the current figures.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from daisychain.bench.rig.chromium import chromium_missing
from daisychain.bench.wasm import evaluate_in_app_page

WORKER = Path(__file__).with_name("wasmpool_worker.mjs")
WORKER_PATH = "/bench/wasmpool_worker.mjs"

_PAGE = """
async (options) => {
  const worker = new Worker('WORKER_PATH', { type: 'module', name: 'daisychain-bench-pool' });
  try {
    const reply = await new Promise((resolve, reject) => {
      worker.onmessage = (e) => resolve(e.data);
      worker.onerror = (e) => reject(new Error(`the bench worker failed: ${e.message}`));
      worker.postMessage(options);
    });
    if (!reply.ok) throw new Error(reply.error);
    return { user_agent: navigator.userAgent, ...reply.result };
  } finally {
    worker.terminate();
  }
}
""".replace("WORKER_PATH", WORKER_PATH)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--presets", default="tiny,small", help="comma-separated model presets")
    parser.add_argument("--vocab", type=int, default=2048, help="vocabulary of the presets")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps each way")
    parser.add_argument(
        "--split-min",
        type=int,
        default=None,
        help="split a kernel call across the pool from this many 4x8x8 blocks (m2 n4 k8; "
        "default: the page's, wasmgemm.js SPLIT_MIN)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many s")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    presets = [p for p in args.presets.split(",") if p]
    result: dict[str, Any] = {"benchmark": "wasm-pool", "presets": presets, "vocab": args.vocab}
    missing = chromium_missing()
    if missing is not None:
        result["chromium"] = {"skipped": missing}
        return result
    options = {
        "presets": presets,
        "vocab": args.vocab,
        "steps": max(1, args.steps),
        "splitMin": args.split_min,
    }
    run = asyncio.run(evaluate_in_app_page({WORKER_PATH: WORKER}, _PAGE, options, args.timeout))
    ratios = [p["ratio"] for p in run.get("presets", {}).values()]
    if ratios:
        run["step_ratio_min"] = min(ratios)
    result["chromium"] = run
    return result
