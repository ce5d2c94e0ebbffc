"""``daisychain bench gemm``: exact int8 GEMM throughput against float32 sgemm on the model shapes.

Shapes are those of the ``small`` preset (width 256, 4 heads, context 128, batch 8, so N = 1024
tokens; vocabulary 4096). For each product the exact path (``qmatmul`` with its dequantizing
epilogue; backward: ``grad_matmul_left/right`` including the fold and the two-limb quantization)
and plain ``np.matmul`` on float32 run the same shapes, interleaved so machine noise hits both;
each figure is the median of ``--repeats`` runs. ``ratio`` = exact GOP/s / sgemm GOP/s (1.0 means
exactness is free). The backward breakdown times the fold, ``quantize2`` and the stacked
two-limb product separately, to show where the backward's time goes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from daisychain.numerics import gemm, quant

TOKENS, WIDTH, HEADS, CONTEXT, BATCH, VOCAB = 1024, 256, 4, 128, 8, 4096
HEAD_DIM = WIDTH // HEADS
# name -> (M, K, N) of the forward product y = x @ w, x per token, w per output channel.
LINEAR = {
    "qkv": (TOKENS, WIDTH, 3 * WIDTH),
    "attn_out": (TOKENS, WIDTH, WIDTH),
    "mlp_up": (TOKENS, WIDTH, 4 * WIDTH),
    "mlp_down": (TOKENS, 4 * WIDTH, WIDTH),
    "logits": (TOKENS, WIDTH, VOCAB),
}
# name -> (batch, M, K, N) of the batched attention products.
ATTENTION = {
    "attn_scores": (BATCH * HEADS, CONTEXT, HEAD_DIM, CONTEXT),
    "attn_values": (BATCH * HEADS, CONTEXT, CONTEXT, HEAD_DIM),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per measurement")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random operands")


def blas_threads() -> dict[str, Any]:
    """BLAS thread count: threadpoolctl when installed, else the environment."""
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        env = {
            k: os.environ[k]
            for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
            if k in os.environ
        }
        return {"source": "environment", "env": env, "cpu_count": os.cpu_count()}
    pools = [
        {"api": p.get("internal_api"), "threads": p.get("num_threads"), "version": p.get("version")}
        for p in threadpool_info()
        if p.get("user_api") == "blas"
    ]
    return {"source": "threadpoolctl", "blas": pools, "cpu_count": os.cpu_count()}


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each function, run round-robin after one warm-up call each."""
    for fn in fns.values():
        fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            samples[k].append(_time(fn))
    return {k: statistics.median(v) for k, v in samples.items()}


def _gops(ops: float, seconds: float) -> float:
    return round(ops / seconds / 1e9, 2)


def _row(ops: float, t_exact: float, t_sgemm: float) -> dict[str, float]:
    return {
        "exact_gops": _gops(ops, t_exact),
        "sgemm_gops": _gops(ops, t_sgemm),
        "exact_ms": round(t_exact * 1e3, 3),
        "sgemm_ms": round(t_sgemm * 1e3, 3),
        "ratio": round(t_sgemm / t_exact, 3),
    }


def _measure_shape(
    rng: np.random.Generator, b: int, m: int, k: int, n: int, repeats: int
) -> tuple[dict[str, float], dict[str, float], dict[str, Any]]:
    """Median seconds of the forward pair, the backward pair and the backward's parts."""
    lead = (b,) if b > 1 else ()
    x = rng.standard_normal((*lead, m, k)).astype(np.float32)
    w = (rng.standard_normal((*lead, k, n)) * 0.05).astype(np.float32)
    g = (rng.standard_normal((*lead, m, n)) * 1e-3).astype(np.float32)
    x_q, x_e = quant.quantize(x, axis=-1)  # per token: (.., M, 1)
    w_q, w_e = quant.quantize(w, axis=-2)  # per output channel: (.., 1, N)
    w_t = np.ascontiguousarray(np.swapaxes(w, -1, -2))
    w_q_t = np.ascontiguousarray(np.swapaxes(w_q, -1, -2))
    x_t = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    x_q_t = np.ascontiguousarray(np.swapaxes(x_q, -1, -2))
    fwd = _interleaved(
        {
            "exact": lambda: gemm.qmatmul(x_q, x_e, w_q, w_e),
            "sgemm": lambda: np.matmul(x, w),
        },
        repeats,
    )
    # dX = G @ W^T folds W's scales (on the summed N axis, (.., 1, N)) into G's columns;
    # dW = X^T @ G folds X's scales (on the summed M axis, (.., M, 1)) into G's rows.
    folded_left, folded_right = g * quant.pow2(w_e), g * quant.pow2(x_e)
    hi_l, lo_l, e_l = quant.quantize2(folded_left, axis=-1)
    hi_r, lo_r, e_r = quant.quantize2(folded_right, axis=-2)
    bwd = _interleaved(
        {
            "left": lambda: gemm.grad_matmul_left(g, w_e, w_q_t),
            "right": lambda: gemm.grad_matmul_right(x_q_t, x_e, g),
            "sgemm_left": lambda: np.matmul(g, w_t),
            "sgemm_right": lambda: np.matmul(x_t, g),
            "fold": lambda: (g * quant.pow2(w_e), g * quant.pow2(x_e)),
            "quantize2": lambda: (
                quant.quantize2(folded_left, axis=-1),
                quant.quantize2(folded_right, axis=-2),
            ),
            "limb_left": lambda: gemm.qmatmul_grad_left(hi_l, lo_l, e_l, w_q_t),
            "limb_right": lambda: gemm.qmatmul_grad_right(x_q_t, hi_r, lo_r, e_r),
        },
        repeats,
    )
    parts = {
        "fold_ms": round(bwd["fold"] * 1e3, 3),
        "quantize2_ms": round(bwd["quantize2"] * 1e3, 3),
        "limb_left_ms": round(bwd["limb_left"] * 1e3, 3),
        "limb_right_ms": round(bwd["limb_right"] * 1e3, 3),
        "limb_left_path": "blas" if n <= gemm.K_CHUNK else "reference",
        "limb_right_path": "blas" if m <= gemm.K_CHUNK else "reference",
        "sgemm_ms": round((bwd["sgemm_left"] + bwd["sgemm_right"]) * 1e3, 3),
    }
    return fwd, bwd, parts


def measure(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    repeats = max(1, int(args.repeats))
    forward: dict[str, dict[str, float]] = {}
    backward: dict[str, dict[str, float]] = {}
    breakdown: dict[str, dict[str, Any]] = {}
    totals = {"fwd_exact": 0.0, "fwd_sgemm": 0.0, "bwd_exact": 0.0, "bwd_sgemm": 0.0}
    shapes: dict[str, tuple[int, int, int, int]] = {
        name: (1, m, k, n) for name, (m, k, n) in LINEAR.items()
    }
    shapes.update(ATTENTION)
    for name, (b, m, k, n) in shapes.items():
        ops = 2.0 * b * m * k * n
        fwd, bwd, parts = _measure_shape(rng, b, m, k, n, repeats)
        forward[name] = _row(ops, fwd["exact"], fwd["sgemm"])
        t_exact, t_sgemm = bwd["left"] + bwd["right"], bwd["sgemm_left"] + bwd["sgemm_right"]
        backward[name] = _row(2 * ops, t_exact, t_sgemm)
        breakdown[name] = parts
        totals["fwd_exact"] += fwd["exact"]
        totals["fwd_sgemm"] += fwd["sgemm"]
        totals["bwd_exact"] += t_exact
        totals["bwd_sgemm"] += t_sgemm
    all_exact = totals["fwd_exact"] + totals["bwd_exact"]
    all_sgemm = totals["fwd_sgemm"] + totals["bwd_sgemm"]
    return {
        "benchmark": "gemm",
        "preset": "small",
        "repeats": repeats,
        "numpy": np.__version__,
        "threads": blas_threads(),
        "forward": forward,
        "backward": backward,
        "backward_breakdown": breakdown,
        "forward_ratio": round(totals["fwd_sgemm"] / totals["fwd_exact"], 3),
        "backward_ratio": round(totals["bwd_sgemm"] / totals["bwd_exact"], 3),
        "overall_ratio": round(all_sgemm / all_exact, 3),
    }
