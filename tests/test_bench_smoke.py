"""``daisychain bench kernels --json --quick`` end to end in a subprocess: the JSON shape only.

One run (tiny shapes, one repeat, one timed ``tiny`` step per backend) checked for a figure or an
explicit ``{"skipped": reason}`` for every backend, and a ``<backend>_ratio`` key beside each. No
timing thresholds: the machines are shared and noisy, and --quick figures mean nothing. A backend
that crashed is reported as ``{"error": ...}`` and fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench.kernels import GEMM_BACKENDS, QUICK_SHAPES, STEP_BACKENDS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "bench", "kernels", "--json", "--quick"],
        capture_output=True, text=True, env=env, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _check_figure(figure: Any, value_key: str, where: str) -> None:
    assert isinstance(figure, dict), f"{where}: {figure!r}"
    assert "error" not in figure, f"{where} crashed: {figure['error']}"
    if "skipped" in figure:
        assert isinstance(figure["skipped"], str) and figure["skipped"], where
    else:
        value = figure.get(value_key)
        assert isinstance(value, float) and value > 0, f"{where}: {figure!r}"


def _check_ratios(row: dict[str, Any], backends: tuple[str, ...], where: str) -> None:
    assert row["numpy_ratio"] == 1.0, where
    for backend in backends:
        ratio = row[f"{backend}_ratio"]
        if "skipped" in row[backend]:
            assert ratio is None, f"{where}/{backend}: a skipped backend has no ratio"
        else:
            assert isinstance(ratio, float) and ratio > 0, f"{where}/{backend}: {ratio!r}"


def test_every_gemm_backend_has_a_figure_or_a_reason(report: dict[str, Any]) -> None:
    shapes = report["gemm"]["shapes"]
    assert set(shapes) == {name for name, *_ in QUICK_SHAPES} | {"all_shapes"}
    for name, row in shapes.items():
        for backend in GEMM_BACKENDS:
            _check_figure(row[backend], "gops", f"gemm/{name}/{backend}")
        _check_ratios(row, GEMM_BACKENDS, f"gemm/{name}")


def test_every_step_backend_has_a_time_or_a_reason(report: dict[str, Any]) -> None:
    presets = report["steps"]["presets"]
    assert list(presets) == ["tiny"]
    row = presets["tiny"]
    assert row["tokens_per_step"] == row["config"]["batch"] * row["config"]["seq_len"]
    for backend in STEP_BACKENDS:
        _check_figure(row[backend], "step_ms", f"steps/tiny/{backend}")
    _check_ratios(row, STEP_BACKENDS, "steps/tiny")


def test_backends_say_what_ran(report: dict[str, Any]) -> None:
    # Each backend names its adapter or runtime, or says why it was skipped.
    info = report["backends"]
    assert set(info) == set(GEMM_BACKENDS)
    for backend, entry in info.items():
        assert entry.keys() & {"adapter", "node", "skipped"}, f"{backend}: {entry!r}"
