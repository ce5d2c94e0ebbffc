"""``daisychain bench wasm --json`` end to end in a subprocess, at toy effort: the JSON shape.

Under Node (the Chromium row runs the same measurement file in a page; it is slow, so here it is
only asked for and must say it was not): the kernel must pass its gate (the same gate a page
runs), every product shape of a ``tiny`` step must carry GOP/s for both GEMMs and their ratios,
and the step its times, ratio and tokens/s; the elementwise kernel likewise (its gate, the
quantizers and the cross-entropy timed both ways, the step timed with its quantization alone and
with all of it). No timing thresholds: the machines
are shared and noisy. An unknown runtime is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench.rig.nodejs import NodeError, node_argv

ROOT = Path(__file__).resolve().parents[2]
SHAPES = {"qkv", "attn_scores", "attn_values", "attn_out", "mlp_up", "mlp_down", "logits"}


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
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
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_the_kernel_passed_its_gate(report: dict[str, Any]) -> None:
    assert "chromium" not in report
    gate = report["node"]["gate"]
    assert gate["enabled"] is True, gate["reason"]
    assert gate["probe_hash"].startswith("fd4bd827")


def test_every_product_shape_has_both_figures_and_ratios(report: dict[str, Any]) -> None:
    gemm = report["node"]["presets"]["tiny"]["gemm"]
    assert set(gemm) == SHAPES
    for name, row in gemm.items():
        for key in ("forward_js_gops", "forward_wasm_gops", "forward_ratio", "backward_js_gops",
                    "backward_wasm_gops", "backward_ratio"):  # fmt: skip
            assert isinstance(row[key], (int, float)) and row[key] > 0, f"{name}/{key}: {row}"


def test_the_step_is_timed_both_ways(report: dict[str, Any]) -> None:
    step = report["node"]["presets"]["tiny"]["step"]
    assert step["tokens_per_step"] == 4 * 64
    assert len(step["js_ms"]) == len(step["wasm_ms"]) == 1
    assert step["ratio"] > 0 and step["js_tokens_per_s"] > 0 and step["wasm_tokens_per_s"] > 0
    assert report["node"]["step_ratio_min"] == step["ratio"]


def test_the_elementwise_kernel_passed_its_gate(report: dict[str, Any]) -> None:
    gate = report["node"]["elementwise_gate"]
    assert gate["enabled"] is True, gate["reason"]
    assert gate["name"] == "wasm-simd-elementwise" and gate["cases"] >= 90


def test_the_quantizers_are_timed_both_ways(report: dict[str, Any]) -> None:
    quant = report["node"]["presets"]["tiny"]["quant"]
    assert set(quant) == {
        "quantizeRows 256x64",
        "quantizeCols 64x192",
        "gradLeftLimbs 3 limbs 256x2048",
        "gradRightLimbs 2 limbs 256x64",
    }
    for name, row in quant.items():
        for key in ("js_ms", "wasm_ms", "ratio"):
            assert isinstance(row[key], (int, float)) and row[key] > 0, f"{name}/{key}: {row}"


def test_the_cross_entropy_is_timed_both_ways(report: dict[str, Any]) -> None:
    xent = report["node"]["presets"]["tiny"]["xent"]
    assert xent["shape"] == [256, 2048]
    for key in ("js_ms", "wasm_ms", "ratio"):
        assert isinstance(xent[key], (int, float)) and xent[key] > 0, f"{key}: {xent}"


def test_the_step_is_also_timed_with_the_elementwise_kernel(report: dict[str, Any]) -> None:
    # Four ways: JS GEMM, wasm GEMM, + the elementwise kernel's quantization (JS cross-entropy),
    # + its cross-entropy too; the new ratios follow from the medians.
    step = report["node"]["presets"]["tiny"]["step"]
    sides = ("js", "wasm", "wasm_quant", "wasm_elt")
    assert set(step["warmup_ms"]) == set(sides)
    assert len(step["wasm_elt_ms"]) == 1 and step["wasm_elt_tokens_per_s"] > 0
    median = {side: step[f"{side}_median_ms"] for side in sides}
    assert step["elementwise_ratio"] == pytest.approx(median["wasm"] / median["wasm_elt"], rel=1e-2)
    assert step["xent_ratio"] == pytest.approx(median["wasm_quant"] / median["wasm_elt"], rel=1e-2)
    assert step["total_ratio"] == pytest.approx(median["js"] / median["wasm_elt"], rel=1e-2)


def test_an_unknown_runtime_is_refused() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "bench", "wasm", "--runtimes", "safari"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "unknown runtime(s) ['safari']" in proc.stderr
