"""``daisychain bench kernels``: every int8 GEMM backend and every training tier, in one run.

GEMM: GOP/s (2 M K N operations) at the shapes (M x K x N) of one ``small`` step's forward
products, N = 1024 tokens, width 256, vocabulary 2048: qkv 1024x256x768, mlp up 1024x256x1024,
mlp down 1024x1024x256, logits 1024x256x2048. Backends:

- ``numpy``: the exact path (``daisychain.numerics.gemm.int_matmul``, float32 BLAS on int8
  values), the baseline;
- ``wgpu_dp4a``, ``wgpu_lut``: the WGSL kernels from Python (whatever adapter this machine has;
  lavapipe on CI);
- ``chromium_webgpu_dp4a``, ``chromium_webgpu_lut``, ``chromium_js``: the same kernels and the JS
  CPU mirror in headless Chromium (``bench/rig/chromium.py``; SwiftShader WebGPU without a GPU);
- ``node_js``: the JS CPU mirror under Node (``node_gemm.mjs``).

Each GPU kernel must pass its exact gates first; a demoted or unavailable backend is reported as
``{"skipped": reason}``, a backend that crashed as ``{"error": message}``. Timings are best of
``--repeats`` after a warm-up, end to end (packing, upload, dispatch, readback): what a peer's
step pays.

Steps: training step time (``bench/rig/steps.py``) of each preset in ``--presets`` for
``numpy`` (the Python reference), ``wgpu_dp4a`` (Python, products through ``training_ops``,
audited; a batched product is one submit and one readback, ``GpuGemm.matmul_int_batched``),
``wgpu_dp4a_per_slice`` (the same kernel behind ``PerSliceGemm``: one round trip per slice, the
baseline), ``node_js``,
``chromium_webgpu`` (the best gated WebGPU kernel, audited), ``chromium_webgpu_chain`` (the same
with the page's step chain: every step in one submit and one readback,
``static/js/gpu/step_chain.js``) and ``chromium_cpu`` (the CPU tier);
``chromium_webgpu_round_trips`` and ``chromium_webgpu_chain_round_trips`` count the readbacks of
one step of each (the GEMM's, plus one per chain run), ``chromium_webgpu_chain_dispatches`` the
step chain's dispatches.
``wgpu_dp4a_round_trips`` counts what one step of each wgpu path asks of the device
(``gpu/counters.py``: submits, dispatches, uploads, readbacks, bytes), and
``wgpu_dp4a_batched_vs_per_slice_ratio`` is the per-slice step time over the batched one.

Every figure comes with ``<backend>_ratio``: its speed relative to numpy measured in the same run
(> 1 is faster than numpy; null when skipped). The machines are shared and noisy: the ratios are
the result, absolute times are leads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from daisychain import training
from daisychain.bench.rig import chromium
from daisychain.bench.rig.shapes import QUICK_SHAPES, SMALL_SHAPES, Shape
from daisychain.bench.rig.steps import (
    StepPolicy,
    node_missing,
    run_node,
    time_node_steps,
    time_python_steps,
    token_stream,
)
from daisychain.gpu.backend import Backend, NumpyGemm, evaluate_gpu
from daisychain.gpu.counters import ROUND_TRIPS
from daisychain.gpu.device import GpuUnavailable, acquire
from daisychain.gpu.gates import IntGemm
from daisychain.gpu.gemm import GemmKind, GpuGemm, PerSliceGemm
from daisychain.gpu.live import training_ops
from daisychain.model.config import ModelConfig, preset
from daisychain.model.ops import NUMPY_OPS
from daisychain.optim import AdamWConfig

GEMM_BACKENDS = (
    "numpy",
    "wgpu_dp4a",
    "wgpu_lut",
    "chromium_webgpu_dp4a",
    "chromium_webgpu_lut",
    "chromium_js",
    "node_js",
)
STEP_BACKENDS = (
    "numpy",
    "wgpu_dp4a",
    "wgpu_dp4a_per_slice",
    "node_js",
    "chromium_webgpu",
    "chromium_webgpu_chain",
    "chromium_cpu",
)
_PAGE_GEMM_NAMES = {
    "webgpu-dp4a": "chromium_webgpu_dp4a",
    "webgpu-lut": "chromium_webgpu_lut",
    "js-cpu": "chromium_js",
}
NODE_GEMM = Path(__file__).with_name("node_gemm.mjs")

# One backend's figure: {"gops": ...} / {"step_ms": ...}, or {"skipped": ...} / {"error": ...}.
Figure = dict[str, Any]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per shape (best kept)")
    parser.add_argument(
        "--presets",
        default=None,
        help="comma-separated presets to time training steps of (default tiny,small; "
        "tiny with --quick; 'none' for GEMM only)",
    )
    parser.add_argument("--vocab", type=int, default=2048, help="vocabulary of the step presets")
    parser.add_argument("--max-steps", type=int, default=3, help="timed steps after a warm-up")
    parser.add_argument(
        "--step-budget", type=float, default=20.0, help="stop timing steps after this many seconds"
    )
    parser.add_argument(
        "--slow", type=float, default=60.0, help="time no step after a warm-up slower than this (s)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: small shapes, 1 repeat, 1 timed tiny step (figures mean nothing)",
    )


def _time_python_gemm(gemm: IntGemm, shapes: list[Shape], repeats: int) -> Figure:
    """Best-of-``repeats`` seconds of ``matmul_int`` per shape, after a warm-up."""
    rng = np.random.default_rng(0)  # timing inputs only
    out: Figure = {}
    for name, m, k, n in shapes:
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        gemm.matmul_int(a, b)  # warm-up: pipelines, buffer pool
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            gemm.matmul_int(a, b)
            best = min(best, time.perf_counter() - t0)
        out[name] = 2.0 * m * k * n / best / 1e9
    return out


def _wgpu_kernels() -> tuple[dict[str, GpuGemm | str], str]:
    """The gated wgpu kernels by backend name (or why not), and the adapter's name."""
    kinds: tuple[GemmKind, ...] = ("dp4a", "lut")
    try:
        gpu = acquire()
    except GpuUnavailable as exc:
        return {f"wgpu_{kind}": f"no adapter: {exc}" for kind in kinds}, "none"
    kernels: dict[str, GpuGemm | str] = {}
    for kind in kinds:
        gemm, reason = evaluate_gpu(gpu, kind)
        kernels[f"wgpu_{kind}"] = gemm if gemm is not None else f"demoted: {reason}"
    return kernels, gpu.adapter_name


def step_round_trips(cfg: ModelConfig, gemm: GpuGemm, adapter: str) -> dict[str, Any]:
    """What one training step of ``cfg`` asks of the device, batched (``gemm`` as training uses
    it) and per slice (``PerSliceGemm``): the counts of each (``gpu/counters.py``) and the
    per-slice / batched ratios. Counts, not times: the same on every run of the same code."""
    paths: dict[str, IntGemm] = {"per_slice": PerSliceGemm(gemm), "batched": gemm}
    out: dict[str, Any] = {}
    for label, path in paths.items():
        state = training.init(cfg, AdamWConfig(), 1)
        state.ops = training_ops(Backend(path, adapter))
        x, y = training.next_batch(state, token_stream(cfg.vocab_size))
        ROUND_TRIPS.reset()
        training.train_step(state, x, y, with_hash=False)
        out[label] = ROUND_TRIPS.snapshot().as_json()
    for key in ("readbacks", "submits"):
        out[f"{key}_ratio"] = round(out["per_slice"][key] / max(1, out["batched"][key]), 2)
    out["counted"] = "one training step (gradients + AdamW update), this process, wgpu-dp4a"
    return out


def _chromium(
    shapes: list[Shape], repeats: int, presets: list[str], vocab: int, policy: StepPolicy
) -> dict[str, Any]:
    """The Chromium rows: {"gemm": {backend: per-shape GOP/s or reason}, "steps", "info"}."""
    missing = chromium.chromium_missing()
    if missing is not None:
        return {"skipped": missing}
    try:
        return asyncio.run(chromium.chromium_session(shapes, repeats, presets, vocab, policy))
    except Exception as exc:
        return {"error": f"Chromium session failed: {type(exc).__name__}: {exc}"}


def _gops_at(figure: Figure, shape: str) -> float | Figure:
    """A backend's GOP/s at one shape, or why there is none."""
    if "skipped" in figure or "error" in figure:
        return figure
    value = figure.get(shape)
    if isinstance(value, int | float) and value > 0:
        return float(value)
    return {"error": f"no figure for shape {shape}: {value!r}"}


def _gemm_row(shape: list[int], figures: dict[str, float | Figure]) -> Figure:
    base = figures["numpy"]
    assert isinstance(base, float), f"numpy is the baseline and always runs, got {base}"
    row: Figure = {"shape": shape}
    for backend in GEMM_BACKENDS:
        value = figures[backend]
        if isinstance(value, float):
            row[backend] = {"gops": round(value, 4)}
            row[f"{backend}_ratio"] = round(value / base, 4)
        else:
            row[backend] = value
            row[f"{backend}_ratio"] = None
    return row


def _gemm_table(shapes: list[Shape], gops: dict[str, Figure]) -> dict[str, Any]:
    """Per shape, then over all shapes (total operations over total best time): each
    backend's GOP/s and its ratio to numpy."""
    table: dict[str, Any] = {}
    for name, m, k, n in shapes:
        table[name] = _gemm_row([m, k, n], {b: _gops_at(gops[b], name) for b in GEMM_BACKENDS})
    overall: dict[str, float | Figure] = {}
    for backend in GEMM_BACKENDS:
        per_shape = [(2.0 * m * k * n, _gops_at(gops[backend], name)) for name, m, k, n in shapes]
        missing = [g for _, g in per_shape if not isinstance(g, float)]
        if missing:
            overall[backend] = missing[0]
        else:
            seconds = sum(ops / g for ops, g in per_shape if isinstance(g, float))
            overall[backend] = sum(ops for ops, _ in per_shape) / seconds
    table["all_shapes"] = _gemm_row([], overall)
    return table


def _step_row(cfg_name: str, vocab: int, figures: dict[str, Figure]) -> dict[str, Any]:
    cfg = preset(cfg_name, vocab_size=vocab)
    base = figures["numpy"].get("step_ms")
    row: dict[str, Any] = {
        "config": {
            "vocab_size": cfg.vocab_size,
            "width": cfg.width,
            "layers": cfg.layers,
            "heads": cfg.heads,
            "seq_len": cfg.seq_len,
            "batch": cfg.batch,
        },
        "tokens_per_step": cfg.batch * cfg.seq_len,
    }
    for backend in STEP_BACKENDS:
        figure = figures[backend]
        row[backend] = figure
        ms = figure.get("step_ms")
        row[f"{backend}_ratio"] = round(base / ms, 4) if base and ms else None
    return row


def _page_steps(result: Figure, policy: StepPolicy) -> Figure:
    from daisychain.bench.rig.steps import summarize

    if "skipped" in result or "error" in result:
        return result
    figure = summarize(float(result["warmup_ms"]), [float(v) for v in result["step_ms"]], policy)
    figure["kernel"] = result["backend"]
    figure["adapter"] = result["adapter"]
    return figure


def _guarded(what: str, run: Any, *args: Any) -> Figure:
    """``run(*args)``, or {"error": ...}: one crashing backend must not cost the others' rows."""
    try:
        result: Figure = run(*args)
        return result
    except Exception as exc:
        return {"error": f"{what}: {type(exc).__name__}: {exc}"}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    shapes = QUICK_SHAPES if args.quick else SMALL_SHAPES
    repeats = 1 if args.quick else args.repeats
    presets_arg = args.presets or ("tiny" if args.quick else "tiny,small")
    presets = [] if presets_arg == "none" else [p for p in presets_arg.split(",") if p]
    for name in presets:
        preset(name)  # an unknown name fails now, with the list of presets, not after minutes
    policy = StepPolicy(
        max_steps=1 if args.quick else args.max_steps, budget_s=args.step_budget, slow_s=args.slow
    )

    info: dict[str, Any] = {"numpy": {"adapter": NumpyGemm.adapter}}
    gops: dict[str, Figure] = {"numpy": _time_python_gemm(NumpyGemm(), shapes, repeats)}
    kernels, adapter = _wgpu_kernels()
    for backend, gemm in kernels.items():
        if isinstance(gemm, str):
            gops[backend] = info[backend] = {"skipped": gemm}
        else:
            info[backend] = {"adapter": adapter}
            gops[backend] = _guarded(backend, _time_python_gemm, gemm, shapes, repeats)

    no_node = node_missing()
    if no_node is not None:
        gops["node_js"] = info["node_js"] = {"skipped": no_node}
    else:
        shapes_json = json.dumps([list(s) for s in shapes])
        node = _guarded("node_gemm.mjs", run_node, NODE_GEMM, [shapes_json, str(repeats)], 900)
        gops["node_js"] = node.get("shapes", node)
        info["node_js"] = {"node": node["node"]} if "node" in node else node

    page = _chromium(shapes, repeats, presets, args.vocab, policy)
    for page_name, backend in _PAGE_GEMM_NAMES.items():
        if "gemm" not in page:
            gops[backend] = info[backend] = page
            continue
        per_shape = {s: page["gemm"][s][page_name] for s, *_ in shapes}
        reason = next((v for v in per_shape.values() if isinstance(v, str)), None)
        gops[backend] = {"skipped": reason} if reason else per_shape
        info[backend] = {"adapter": page["adapter"], "user_agent": page["user_agent"]}
        if backend == "chromium_js":
            info[backend]["adapter"] = "CPU (JS mirror)"

    steps: dict[str, Any] = {}
    for name in presets:
        cfg = preset(name, vocab_size=args.vocab)
        figures: dict[str, Figure] = {
            "numpy": time_python_steps(cfg, NUMPY_OPS, policy),
        }
        dp4a = kernels["wgpu_dp4a"]
        round_trips: Figure
        if isinstance(dp4a, str):
            figures["wgpu_dp4a"] = figures["wgpu_dp4a_per_slice"] = {"skipped": dp4a}
            round_trips = {"skipped": dp4a}
        else:
            ops = training_ops(Backend(dp4a, adapter))
            figures["wgpu_dp4a"] = _guarded("wgpu_dp4a", time_python_steps, cfg, ops, policy)
            ops = training_ops(Backend(PerSliceGemm(dp4a), adapter))
            figures["wgpu_dp4a_per_slice"] = _guarded(
                "wgpu_dp4a_per_slice", time_python_steps, cfg, ops, policy
            )
            round_trips = _guarded("round trips", step_round_trips, cfg, dp4a, adapter)
        if no_node is not None:
            figures["node_js"] = {"skipped": no_node}
        else:
            figures["node_js"] = _guarded(
                "node_step.mjs", time_node_steps, name, args.vocab, policy
            )
        for tier in ("webgpu", "webgpu-chain", "cpu"):
            figures["chromium_" + tier.replace("-", "_")] = (
                _page_steps(page["steps"][name][tier], policy) if "steps" in page else page
            )
        steps[name] = _step_row(name, args.vocab, figures)
        for tier in ("webgpu", "webgpu-chain"):
            raw = page["steps"][name][tier] if "steps" in page else {}
            key = "chromium_" + tier.replace("-", "_") + "_round_trips"
            steps[name][key] = raw.get("round_trips")
        raw = page["steps"][name]["webgpu-chain"] if "steps" in page else {}
        steps[name]["chromium_webgpu_chain_dispatches"] = raw.get("dispatches")
        steps[name]["wgpu_dp4a_round_trips"] = round_trips
        batched_ms = figures["wgpu_dp4a"].get("step_ms")
        per_slice_ms = figures["wgpu_dp4a_per_slice"].get("step_ms")
        steps[name]["wgpu_dp4a_batched_vs_per_slice_ratio"] = (
            round(per_slice_ms / batched_ms, 4) if batched_ms and per_slice_ms else None
        )

    return {
        "benchmark": "kernels",
        "quick": args.quick,
        "repeats": repeats,
        "machine": {
            "cpus": os.cpu_count(),
            "note": "shared and noisy: the ratios (same run) are the result, times are leads",
        },
        "backends": info,
        "gemm": {
            "timing": "best of repeats after a warm-up, end to end: pack, upload, dispatch, "
            "readback; GOP/s counts 2*M*K*N",
            "shapes": _gemm_table(shapes, gops),
        },
        "steps": {
            "timing": "median of up to max_steps steps after a warm-up step; a step is "
            "gradients + AdamW update, no state hash; GPU products audited",
            "policy": {
                "max_steps": policy.max_steps,
                "budget_s": policy.budget_s,
                "slow_s": policy.slow_s,
            },
            "presets": steps,
        },
        "ratio": "<backend>_ratio = speed relative to numpy in this run (> 1: faster)",
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
