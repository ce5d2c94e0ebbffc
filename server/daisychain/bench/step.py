"""``daisychain bench step``: training tokens/s of the contract against PyTorch float32 eager.

Both sides train the same architecture (docs/MODEL.md) with the same batch shape on the same
machine in the same run, each round of each side in a fresh subprocess so their peak resident
memory (ru_maxrss) is measured separately and no side inherits another's warm state. The sides
alternate for ``--rounds`` rounds, the order rotated every round so that no side always follows
the same one, and machine noise hits them all. Each round reports the median of its timed steps.

Reported per side: ``step_ms`` (median over rounds), ``min_step_ms`` (fastest round),
``round_ms`` (every round, so a bimodal side is visible), tokens/s, peak RSS and the RSS growth
over the process's state after imports. PyTorch's step is bimodal on the project's 2-core machine
(the same child takes ~150 ms in one start and ~300 ms in the next), so one ratio against one
draw would be luck: ``tokens_per_s_ratio`` (contract / torch, both medians; target >= 1.0) is
reported beside ``tokens_per_s_ratio_vs_torch_min`` (the contract's median against torch's
fastest round: the honest floor). With onnxruntime installed two more sides run: ``cpu-int8``
(the same contract with its integer products on the CPU's int8 units, cpu/int8.py, gated and
audited as in training, with the fused passes of cpu/fused.py where numba is installed and they
pass their gates, as in training; or why its gates refused it here) and ``cpu-int8-unaudited``
(gates, fused passes and per-step probe only: what the live audit costs), each with
``*_tokens_per_s_ratio`` and ``*_tokens_per_s_ratio_vs_torch_min`` (against torch) and
``*_vs_numpy_ratio``.
With ``--wgpu`` two more: ``wgpu`` (the contract with its products on the best gated wgpu kernel,
audited as in training: a batched product is one submit and one readback) and
``wgpu-per-slice`` (the same kernel, one round trip per slice: ``gpu.gemm.PerSliceGemm``), each
with ``*_vs_numpy_ratio`` and its device traffic per step (``readbacks_per_step``,
``submits_per_step``, ``dispatches_per_step``: ``gpu/counters.py``), and
``wgpu_batched_vs_per_slice_ratio`` (tokens/s of the one over the other). On a machine where no
wgpu kernel passes its gates they say why.
Without torch (``pip install torch==2.13.0`` gives the CPU build) only the contract side runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

from daisychain.bench.rig import cpufeatures

_CHILD = r"""
import json, resource, sys, time
import numpy as np
side, preset_name, steps, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
from daisychain.model.config import preset
cfg = preset(preset_name, vocab_size=vocab)
tokens = (np.arange(200_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
if side == "torch":
    import torch
    from daisychain.bench._torch_model import make_trainer
    model, opt = make_trainer(cfg, 1e-3, 1)
    def step(i):
        from daisychain.batches import sample_batch
        x, y = sample_batch(tokens, cfg.batch, cfg.seq_len, 1, i)
        loss = model(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
else:
    from daisychain import training
    from daisychain.optim import AdamWConfig
    state = training.init(cfg, AdamWConfig(lr=1e-3), 1)
    if side.startswith(("cpu-int8", "cpu-madd")):  # a gated CPU GEMM
        from daisychain.cpu import int8 as cpuint8, madd as cpumadd
        from daisychain.gpu.backend import Backend
        from daisychain.gpu.live import training_ops
        from daisychain.model.ops import IntGemmOps
        gemm, why = (cpumadd if side.startswith("cpu-madd") else cpuint8).evaluate()
        if gemm is None:
            print(json.dumps({"refused": why})); sys.exit(0)
        # audited as in training; "-unaudited": gates and probe only (what the audit costs)
        audited = not side.endswith("-unaudited")
        from daisychain.cpu import fused as cpufused
        raw = IntGemmOps(side, gemm.matmul_int, gemm.matmul_float, None, cpufused.proven()[0])
        state.ops = training_ops(Backend(gemm, "cpu")) if audited else raw
    if side.startswith("wgpu"):  # the best gated wgpu kernel, batched or one slice at a time
        from daisychain.gpu.backend import Backend, select_backend
        from daisychain.gpu.gemm import PerSliceGemm
        from daisychain.gpu.live import training_ops
        backend = select_backend()
        if backend.name == "numpy":
            why = "; ".join(f"{d.name}: {d.reason}" for d in backend.demotions)
            print(json.dumps({"refused": why})); sys.exit(0)
        gemm = backend.gemm if side == "wgpu" else PerSliceGemm(backend.gemm)
        state.ops = training_ops(Backend(gemm, backend.adapter))
    def step(i):
        x, y = training.next_batch(state, tokens)
        training.train_step(state, x, y, with_hash=False)
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
step(0)  # warm-up: first-touch allocations, BLAS init
from daisychain.gpu.counters import ROUND_TRIPS
ROUND_TRIPS.reset()
times = []
for i in range(1, steps + 1):
    t0 = time.perf_counter(); step(i); times.append(time.perf_counter() - t0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
traffic = ROUND_TRIPS.snapshot()
state_hash = "" if side == "torch" else training.state_hash(state)  # after the timing
print(json.dumps({"step_s": sorted(times)[len(times) // 2], "times_s": times,
                  "state_hash": state_hash,
                  "peak_rss_kb": peak, "base_rss_kb": base_rss,
                  "readbacks": traffic.readbacks / steps, "submits": traffic.submits / steps,
                  "dispatches": traffic.dispatches / steps}))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small", help="model preset (default small)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round")
    parser.add_argument(
        "--rounds", type=int, default=5, help="alternating rounds per side (fresh processes)"
    )
    parser.add_argument("--vocab", type=int, default=0, help="vocabulary (default: tokenizer's)")
    parser.add_argument(
        "--wgpu",
        action="store_true",
        help="also time the contract on the gated wgpu kernel, batched and per slice",
    )
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="SIDE",
        help="leave a side out (repeatable): --without cpu-int8 times what a peer on a CPU "
        "without VNNI would choose from, on any machine",
    )
    parser.add_argument(
        "--isa",
        default="host",
        choices=sorted(ISA_ENV),
        help="the vector instructions every side may use: host (all this CPU has) or avx2 "
        "(numba, OpenBLAS and PyTorch limited to AVX2 and FMA: no AVX-512, no VNNI, the code "
        "a 2013-2020 x86 machine runs)",
    )


def _run_side(side: str, args: argparse.Namespace, vocab: int) -> dict[str, Any]:
    cmd = [sys.executable, "-c", _CHILD, side, args.preset, str(args.steps), str(vocab)]
    env = {**os.environ, **ISA_ENV[getattr(args, "isa", "host")]}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"bench step ({side}) failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# Each library's own switch for the instructions it may use (read when it loads): numba's LLVM
# target CPU, OpenBLAS's kernel set, oneDNN's and MKL's instruction ceiling (PyTorch's CPU
# products). onnxruntime has none: leave ``cpu-int8`` out (``--without cpu-int8``) to see what a
# peer without VNNI chooses from.
ISA_ENV: dict[str, dict[str, str]] = {
    "host": {},
    "avx2": {
        "NUMBA_CPU_NAME": "haswell",
        "OPENBLAS_CORETYPE": "Haswell",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}


def _cpu_int8_available() -> bool:
    from daisychain.cpu import int8 as cpuint8

    return cpuint8.available()


def _cpu_madd_available() -> bool:
    from daisychain.cpu import madd as cpumadd

    return cpumadd.available()


# Where each side computes its integer products (the report's ``product_paths``).
PRODUCT_PATHS = {
    "contract": "numpy reference: float32 BLAS on int8 values (exact for K <= 1024)",
    "cpu-int8": "onnxruntime MatMulInteger on int8 dot-product units (VNNI), audited",
    "cpu-int8-unaudited": "onnxruntime MatMulInteger on int8 dot-product units (VNNI)",
    "cpu-madd": "numba loop on 16-bit multiply-adds (pmaddwd on x86, no VNNI needed), audited",
    "wgpu": "the best gated wgpu kernel, batched, audited",
    "wgpu-per-slice": "the best gated wgpu kernel, one round trip per slice, audited",
    "torch": "PyTorch float32 eager",
}


def _torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from daisychain.model.config import preset

    vocab = args.vocab
    if not vocab:
        from daisychain.tokenizer import load_default

        vocab = load_default().vocab_size
    cfg = preset(args.preset, vocab_size=vocab)
    sides = ["contract", "torch"] if _torch_available() else ["contract"]
    if _cpu_int8_available():
        sides[1:1] = ["cpu-int8", "cpu-int8-unaudited"]
    if _cpu_madd_available():
        sides[1:1] = ["cpu-madd"]
    if getattr(args, "wgpu", False):
        sides[1:1] = list(WGPU_SIDES)
    sides = without(sides, getattr(args, "without", []))
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for r in range(args.rounds):
        for side in rotated(sides, r):
            runs[side].append(_run_side(side, args, vocab))
    out = report(args, cfg.batch * cfg.seq_len, runs)
    if "torch" in runs:
        import torch

        out["torch"]["version"] = torch.__version__
        out["torch"]["threads"] = torch.get_num_threads()
    return out


WGPU_SIDES = ("wgpu", "wgpu-per-slice")


def without(sides: list[str], names: list[str]) -> list[str]:
    """``sides`` less each of ``names`` (a side and its ``-unaudited`` twin); a name that is no
    side is refused, so a typo does not time the very side it meant to leave out."""
    for name in names:
        if name not in PRODUCT_PATHS or name == "contract":
            known = ", ".join(k for k in PRODUCT_PATHS if k != "contract")
            raise ValueError(f"--without {name!r}: not a side that can be left out ({known})")
    return [s for s in sides if s not in names and s.removesuffix("-unaudited") not in names]


def rotated(sides: list[str], round_index: int) -> list[str]:
    """Round ``round_index``'s order: the sides rotated by one per round, so each side follows
    each other side in turn (the previous child's caches and clock state hit them all)."""
    k = round_index % len(sides) if sides else 0
    return sides[k:] + sides[:k]


def _side_summary(results: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    rounds_s = [float(r["step_s"]) for r in results]
    step_s = statistics.median(rounds_s)
    return {
        "step_ms": round(step_s * 1e3, 2),
        "min_step_ms": round(min(rounds_s) * 1e3, 2),
        "round_ms": [round(x * 1e3, 1) for x in rounds_s],
        "tokens_per_s": round(tokens / step_s, 1),
        "peak_rss_mb": round(max(r["peak_rss_kb"] for r in results) / 1024, 1),
        "rss_growth_mb": round(max(r["peak_rss_kb"] - r["base_rss_kb"] for r in results) / 1024, 1),
    }


def report(
    args: argparse.Namespace, tokens: int, runs: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """The JSON document from every side's per-round results (``measure``'s second half)."""
    out: dict[str, Any] = {
        "benchmark": "step",
        "preset": args.preset,
        "tokens_per_step": tokens,
        "timed_steps_per_round": args.steps,
        "rounds": args.rounds,
        "machine": cpufeatures.describe(),
        "isa": getattr(args, "isa", "host"),
        "isa_env": ISA_ENV[getattr(args, "isa", "host")],
        "left_out": list(getattr(args, "without", [])),
        "product_paths": {side: PRODUCT_PATHS[side] for side in runs if side in PRODUCT_PATHS},
    }
    runs = dict(runs)
    refused = [r["refused"] for r in runs.get("cpu-int8", []) if "refused" in r]
    if refused:  # the gates said no on this CPU: report why, time nothing
        out["cpu-int8"] = f"refused by its gates here: {refused[0]}"
        del runs["cpu-int8"], runs["cpu-int8-unaudited"]
    refused = [r["refused"] for r in runs.get("cpu-madd", []) if "refused" in r]
    if refused:
        out["cpu-madd"] = f"refused by its gates here: {refused[0]}"
        del runs["cpu-madd"]
    refused = [r["refused"] for r in runs.get("wgpu", []) if "refused" in r]
    if refused:  # no wgpu kernel passed its gates (or no adapter): say why
        out["wgpu"] = f"refused by its gates here: {refused[0]}"
        del runs["wgpu"], runs["wgpu-per-slice"]
    hashes = {r.get("state_hash", "") for side, rs in runs.items() if side != "torch" for r in rs}
    if hashes - {""}:  # every contract side, every round, after the same steps: one hash
        out["hashes_identical"] = len(hashes) == 1
        out["state_hash"] = sorted(hashes)[0] if len(hashes) == 1 else sorted(hashes)
    for side, results in runs.items():
        out[side] = _side_summary(results, tokens)
        if side in WGPU_SIDES:  # the same code gives the same counts every round
            out[side]["readbacks_per_step"] = results[0]["readbacks"]
            out[side]["submits_per_step"] = results[0]["submits"]
            out[side]["dispatches_per_step"] = results[0]["dispatches"]
    if "torch" in runs:
        torch_med = out["torch"]["tokens_per_s"]
        torch_fast = tokens / (out["torch"]["min_step_ms"] / 1e3)
        for side, prefix in (
            ("contract", ""),
            ("cpu-int8", "cpu_int8_"),
            ("cpu-int8-unaudited", "cpu_int8_unaudited_"),
            ("cpu-madd", "cpu_madd_"),
        ):
            if side in runs:
                tps = out[side]["tokens_per_s"]
                out[prefix + "tokens_per_s_ratio"] = round(tps / torch_med, 3)
                out[prefix + "tokens_per_s_ratio_vs_torch_min"] = round(tps / torch_fast, 3)
    else:
        out["torch"] = "not installed (pip install torch==2.13.0 for the baseline)"
    for side in ("cpu-int8", "cpu-int8-unaudited", "cpu-madd", *WGPU_SIDES):
        if side in runs:
            key = side.replace("-", "_") + "_vs_numpy_ratio"
            out[key] = round(out[side]["tokens_per_s"] / out["contract"]["tokens_per_s"], 3)
    if "wgpu" in runs:
        batched, per_slice = out["wgpu"]["tokens_per_s"], out["wgpu-per-slice"]["tokens_per_s"]
        out["wgpu_batched_vs_per_slice_ratio"] = round(batched / per_slice, 3)
    return out
