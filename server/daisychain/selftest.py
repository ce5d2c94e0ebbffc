"""``daisychain selftest``: which compute backends this machine has, and whether each is honest.

For every backend (wgpu DP4A, wgpu LUT and each one's chains, the wgpu quantize kernel, numpy)
it prints the adapter,
whether the exact gates passed (or the first failing case), the kernel probe hash (equal on every
honest device) and the int8 GEMM throughput. ``--json`` prints
``{"backends": [{"name", "adapter", "gates_passed", "failure", "probe_hash", "gops"}, ...],
"selected": NAME, "reference_probe_hash": HEX}``. Exit status 0 when the numpy reference passes
(a machine without a GPU is fine), 1 otherwise. Spec: docs/KERNELS.md.
"""

from __future__ import annotations

import argparse
import json

from daisychain.gpu.backend import GPU_ORDER, BackendReport, selftest_reports
from daisychain.gpu.probe import reference_probe_hash


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--no-gops", action="store_true", help="skip the throughput measurement (faster)"
    )


def _selected(rows: list[BackendReport]) -> str:
    gpu_names = [f"wgpu-{kind}" for kind in GPU_ORDER]
    for name in gpu_names:
        if any(r.name == name and r.gates_passed for r in rows):
            return name
    return "numpy"


def format_table(rows: list[BackendReport]) -> str:
    header = ("backend", "adapter", "gates", "probe", "GOP/s")
    lines = []
    for r in rows:
        lines.append(
            (
                r.name,
                r.adapter,
                "pass" if r.gates_passed else "FAIL",
                (r.probe_hash or "-")[:16],
                "-" if r.gops is None else f"{r.gops:.2f}",
            )
        )
    widths = [max(len(h), *(len(row[i]) for row in lines)) for i, h in enumerate(header)]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    out += [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines
    ]
    for r in rows:
        if r.failure:
            out.append(f"{r.name}: {r.failure}")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    rows = selftest_reports(measure=not args.no_gops)
    selected = _selected(rows)
    if args.json:
        doc = {
            "backends": [r.as_json() for r in rows],
            "selected": selected,
            "reference_probe_hash": reference_probe_hash(),
        }
        print(json.dumps(doc, indent=2))
    else:
        print(format_table(rows))
        print(f"selected GEMM backend: {selected}")
    reference = next(r for r in rows if r.name == "numpy")
    return 0 if reference.gates_passed else 1
