"""``daisychain bench audit``: what the live audit costs next to the product it checks.

For each shape (the ``small`` preset's four main products and the ``tiny`` logits products) and
each exact int8 GEMM on this machine (numpy; the gated wgpu DP4A kernel when one passes its
gates), times, best of ``--repeats``: the unaudited product, the full audit
(``gpu.audit.audit``: danger cells + 16 scheduled cells + row/column sums), the cells alone and
the checksums alone. Then one ``tiny`` training step with every product audited against the same
step unaudited. Ratios (audit / product, audited step / unaudited step) are the result; the
absolute times are leads only (shared, noisy machines).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from daisychain.gpu.audit import audit, checksums
from daisychain.gpu.backend import NumpyGemm, select_backend
from daisychain.gpu.gates import IntGemm
from daisychain.gpu.live import AUDIT_SAMPLES, AuditedMatmul
from daisychain.model import gpt
from daisychain.model.config import preset
from daisychain.model.ops import IntGemmOps
from daisychain.model.params import init_params

SHAPES: list[tuple[str, int, int, int]] = [  # (name, M, K, N)
    ("small qkv", 1024, 256, 768),
    ("small mlp up", 1024, 256, 1024),
    ("small mlp down", 1024, 1024, 256),
    ("small logits", 1024, 256, 2048),
    ("tiny logits", 256, 64, 2048),
    ("tiny logits input gradient", 256, 2048, 64),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure (best kept)")


def _best(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _gemms() -> tuple[list[IntGemm], dict[str, str]]:
    gemms: list[IntGemm] = [NumpyGemm()]
    backend = select_backend(order=("dp4a",))
    if backend.name != "numpy":
        gemms.append(backend.gemm)
    return gemms, {d.name: d.reason for d in backend.demotions}


def _shape_row(gemm: IntGemm, m: int, k: int, n: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)  # timing input only
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    out = gemm.matmul_int(a, b)  # warm-up
    product = _best(lambda: gemm.matmul_int(a, b), repeats)
    full = _best(lambda: audit(a, b, out, AUDIT_SAMPLES), repeats)
    cells = _best(lambda: audit(a, b, out, AUDIT_SAMPLES, checksum=False), repeats)
    sums = _best(lambda: checksums(a, b, out), repeats)
    return {
        "product_ms": product * 1e3,
        "audit_ms": full * 1e3,
        "cells_only_ms": cells * 1e3,
        "checksums_only_ms": sums * 1e3,
        "audit_ratio_to_product": full / product,
        "checksums_ratio_to_product": sums / product,
    }


def _step_row(gemm: IntGemm, repeats: int) -> dict[str, float]:
    cfg = preset("tiny")
    params = init_params(cfg, 1)
    rng = np.random.default_rng(1)  # timing input only
    x, y = (rng.integers(0, cfg.vocab_size, (cfg.batch, cfg.seq_len)) for _ in range(2))
    plain = IntGemmOps("plain", gemm.matmul_int)
    audited = IntGemmOps("audited", AuditedMatmul(gemm, tile=getattr(gemm, "tile", (32, 32))))
    gpt.forward_backward(params, cfg, x, y, plain)  # warm-up
    t_plain = _best(lambda: gpt.forward_backward(params, cfg, x, y, plain), repeats)
    t_audit = _best(lambda: gpt.forward_backward(params, cfg, x, y, audited), repeats)
    return {
        "step_ms": t_plain * 1e3,
        "audited_step_ms": t_audit * 1e3,
        "audited_step_ratio": t_audit / t_plain,
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    gemms, demoted = _gemms()
    shapes: dict[str, Any] = {}
    for name, m, k, n in SHAPES:
        shapes[f"{name} {m}x{k}x{n}"] = {
            g.name: _shape_row(g, m, k, n, args.repeats) for g in gemms
        }
    return {
        "samples": AUDIT_SAMPLES,
        "repeats": args.repeats,
        "demoted": demoted,
        "shapes": shapes,
        "tiny_step": {g.name: _step_row(g, args.repeats) for g in gemms},
    }
