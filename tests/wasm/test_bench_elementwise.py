"""``daisychain bench wasm --json`` reports the elementwise kernel beside the GEMM (toy effort).

Under Node: the elementwise kernel must pass the same gate a page runs, its quantizer table
must carry both times and their ratio for the four operands, and the training step must be
timed three ways (JS GEMM, wasm GEMM, wasm GEMM + elementwise kernel) with the two new ratios
consistent with the medians. No timing thresholds: the machines are shared and noisy.
(tests/bench/test_bench_wasm.py checks the GEMM's part of the same report.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daisychain.nodejs import NodeError, node_argv

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def node_report() -> dict[str, Any]:
    try:
        node_argv()
    except NodeError as exc:
        pytest.skip(str(exc))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "bench", "wasm", "--json", "--presets", "tiny",
         "--repeats", "1", "--steps", "1", "--runtimes", "node"],
        capture_output=True, text=True, env=env, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)["node"]
    return report


def test_the_elementwise_kernel_passed_its_gate(node_report: dict[str, Any]) -> None:
    gate = node_report["elementwise_gate"]
    assert gate["enabled"] is True, gate["reason"]
    assert gate["name"] == "wasm-simd-elementwise" and gate["cases"] >= 90


def test_the_quantizers_are_timed_both_ways(node_report: dict[str, Any]) -> None:
    quant = node_report["presets"]["tiny"]["quant"]
    assert set(quant) == {
        "quantizeRows 256x64",
        "quantizeCols 64x192",
        "gradLeftLimbs 3 limbs 256x2048",
        "gradRightLimbs 2 limbs 256x64",
    }
    for name, row in quant.items():
        for key in ("js_ms", "wasm_ms", "ratio"):
            assert isinstance(row[key], (int, float)) and row[key] > 0, f"{name}/{key}: {row}"


def test_the_step_is_timed_three_ways(node_report: dict[str, Any]) -> None:
    step = node_report["presets"]["tiny"]["step"]
    assert set(step["warmup_ms"]) == {"js", "wasm", "wasm_elt"}
    assert len(step["wasm_elt_ms"]) == 1 and step["wasm_elt_tokens_per_s"] > 0
    median = {side: step[f"{side}_median_ms"] for side in ("js", "wasm", "wasm_elt")}
    assert step["elementwise_ratio"] == pytest.approx(median["wasm"] / median["wasm_elt"], rel=1e-2)
    assert step["total_ratio"] == pytest.approx(median["js"] / median["wasm_elt"], rel=1e-2)
