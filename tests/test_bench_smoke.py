"""``daisychain bench kernels --json --quick`` end to end in a subprocess: the JSON shape only.

One run (tiny shapes, one repeat, one timed ``tiny`` step per backend) checked for a figure or an
explicit ``{"skipped": reason}`` for every backend, and a ``<backend>_ratio`` key beside each. No
timing thresholds: the machines are shared and noisy, and --quick figures mean nothing. A backend
that crashed is reported as ``{"error": ...}`` and fails here.

Also ``daisychain bench signaling`` at toy sizes, with two of its hostile-client scenarios.
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


def test_bench_signaling_runs_small_with_its_hostile_scenarios() -> None:
    # ``daisychain bench signaling`` at toy sizes: the relay figures and, for two attacks, the
    # bystanders' latency beside their own baseline, RSS before/peak/after. Shape only.
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    command = [sys.executable, "-m", "daisychain", "bench", "signaling", "--json"]
    command += ["--clients", "20", "--group-size", "5", "--rounds", "2", "--idle-samples", "5"]
    command += ["--attack-s", "1.5", "--attacks", "nested-flood,join-flood"]
    proc = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=200, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    assert report["errors"] == 0 and report["messages_relayed"] > 0
    hostile = report["hostile"]
    assert hostile["worst_relay_p99_attack"] in ("nested-flood", "join-flood")
    for name in ("nested-flood", "join-flood"):
        row = hostile[name]
        for phase in ("baseline", "under_attack"):
            stats = row[phase]
            assert stats["sent"] > 0 and stats["delivered"] == stats["sent"], (name, stats)
            assert isinstance(stats["relay_p99_ms"], float), (name, stats)
        assert isinstance(row["relay_p50_ratio"], float) and row["relay_p50_ratio"] > 0
        assert isinstance(row["relay_p99_ratio"], float) and row["relay_p99_ratio"] > 0
        assert 0 < row["rss_start_mib"] <= row["rss_peak_mib"]
        assert row["rss_after_mib"] > 0 and row["bystander_trouble"] == []
    assert hostile["nested-flood"]["attack"]["errors"]["bad-json"] > 0
    assert hostile["join-flood"]["attack"]["errors"]["rate-limited"] > 0


def test_identity_first_mismatch_names_the_first_differing_or_missing_step() -> None:
    from daisychain.bench.identity import first_mismatch

    ref = ["a", "b", "c"]
    assert first_mismatch(["a", "b", "c"], ref) is None
    assert first_mismatch(["a", "x", "c"], ref) == 2
    assert first_mismatch(["a", "b"], ref) == 3  # a path that stopped early is not identical
    assert first_mismatch(["a", "b", "c", "d"], ref) == 4
