"""``daisychain bench NAME``: benchmarks that print one JSON document.

``BENCHMARKS`` is the table of them (name -> module and one line); each module exposes
``add_arguments(parser)`` (optional) and ``measure(args) -> dict``. Every comparison against a
baseline measured in the same run is reported under a key containing ``ratio``: the machines are
shared and noisy, so absolute times are leads, ratios are the result. What benchmarks share with
the tests (Chromium, hostile clients, the FineWeb stub, step timing) is ``daisychain.bench.rig``;
``_torch_model`` is ``bench step``'s PyTorch baseline, not a benchmark.
"""

from __future__ import annotations

import argparse
import importlib
import json
from types import ModuleType

# name -> (module, one-line description); docs/BENCHMARKS.md has the figures.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "audit": ("daisychain.bench.audit", "what the live GPU audit costs next to its product"),
    "browser": ("daisychain.bench.browser", "int8 GEMM throughput in headless Chromium"),
    "converge": ("daisychain.bench.converge", "the contract's loss against a float32 reference"),
    "cpu-tier": ("daisychain.bench.cputier", "the browser CPU tier against TF.js 4.22's WASM"),
    "data": ("daisychain.bench.data", "/data's FineWeb-Edu reader, tokenizing and delivery"),
    "gemm": ("daisychain.bench.gemm", "exact int8 GEMM throughput against float32 sgemm"),
    "identity": ("daisychain.bench.identity", "every compute path trains to the same bits"),
    "kernels": ("daisychain.bench.kernels", "every int8 GEMM backend and training tier, one run"),
    "lowcomm": ("daisychain.bench.lowcomm", "outer runs against per-step runs on a slow link"),
    "mesh": ("daisychain.bench.mesh", "bytes on the wire, exchange goodput, step time split"),
    "pool": ("daisychain.bench.pool", "unequal devices together against each one alone"),
    "scale": ("daisychain.bench.scale", "N headless peers in processes: per-step figures"),
    "signaling": ("daisychain.bench.signaling", "WebSocket relay through one server; attacks"),
    "sim": ("daisychain.bench.sim", "the protocol simulator at any N, in bench scale's shape"),
    "step": ("daisychain.bench.step", "training tokens/s of the contract against PyTorch"),
    "wasm": ("daisychain.bench.wasm", "the CPU tier's WebAssembly SIMD GEMM against its JS GEMM"),
    "wasm-pool": ("daisychain.bench.wasmpool", "that GEMM on a pool of workers against one"),
}


def available() -> list[str]:
    return sorted(BENCHMARKS)


def _load(name: str) -> ModuleType:
    if name not in BENCHMARKS:
        raise SystemExit(
            f"daisychain bench: unknown benchmark {name!r}; choose one of: {', '.join(available())}"
        )
    return importlib.import_module(BENCHMARKS[name][0])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    listing = "; ".join(f"{name}: {line}" for name, (_module, line) in BENCHMARKS.items())
    parser.add_argument("name", help=f"benchmark to run ({listing})")
    parser.add_argument("--json", action="store_true", help="print only the JSON document")


def run(args: argparse.Namespace) -> int:
    # Parse in two stages so each benchmark can declare its own options.
    module = _load(args.name)
    parser = argparse.ArgumentParser(prog=f"daisychain bench {args.name}")
    parser.add_argument("--json", action="store_true", help="print only the JSON document")
    if hasattr(module, "add_arguments"):
        module.add_arguments(parser)
    bench_args = parser.parse_args(getattr(args, "extra", None) or [])
    result = module.measure(bench_args)
    print(json.dumps(result, indent=None if bench_args.json else 2, sort_keys=True))
    return 0
