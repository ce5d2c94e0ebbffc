"""``daisychain bench kernels --json --quick`` end to end in a subprocess: the JSON shape only.

One run (tiny shapes, one repeat, one timed ``tiny`` step per backend) checked for a figure or an
explicit ``{"skipped": reason}`` for every backend, and a ``<backend>_ratio`` key beside each. No
timing thresholds: the machines are shared and noisy, and --quick figures mean nothing. A backend
that crashed is reported as ``{"error": ...}`` and fails here.

Also ``daisychain bench signaling`` at toy sizes, with two of its hostile-client scenarios, and
``daisychain bench mesh --tabs cpu`` (a CPU-tier Chromium tab in the mesh) with its refusals.
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

ROOT = Path(__file__).resolve().parents[2]


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
    # The page's step chain: one readback for the step (the forward's 6 products per block and
    # the logits', and two per backward pair, one each without it).
    plain, chained = row["chromium_webgpu_round_trips"], row["chromium_webgpu_chain_round_trips"]
    if "skipped" not in row["chromium_webgpu_chain"]:
        assert plain == 3 * (6 * row["config"]["layers"] + 1) and chained == 1, (plain, chained)
        assert row["chromium_webgpu_chain_dispatches"] > 0


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


def _bench_mesh(*options: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    command = [sys.executable, "-m", "daisychain", "bench", "mesh", "--json", *options]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=400, check=False
    )


def test_bench_mesh_refuses_an_unknown_tab_kind_and_negative_followers() -> None:
    # Refused before anything runs, naming the kinds it knows.
    proc = _bench_mesh("--tabs", "webgpu,gpu")
    assert proc.returncode != 0
    assert "unknown tab kind(s) ['gpu']" in proc.stderr and "webgpu, cpu" in proc.stderr
    proc = _bench_mesh("--tabs", "cpu", "--py-followers", "-1")
    assert proc.returncode != 0 and "--py-followers must be 0 or more" in proc.stderr


@pytest.mark.skipif(
    "DAISYCHAIN_MESH_SKIP" in os.environ or not Path("/usr/bin/chromium").exists(),
    reason=os.environ.get("DAISYCHAIN_MESH_SKIP", "") or "/usr/bin/chromium is missing",
)
@pytest.mark.timeout(600)
def test_bench_mesh_with_a_cpu_tab_reports_every_peer_and_the_python_only_group() -> None:
    # ``daisychain bench mesh --tabs cpu`` at toy sizes (3 steps, batch 1 x 32): a Python leader,
    # a Python follower and a CPU-tier tab, then 3 Python peers. Shape only, no timing: every
    # peer has its bytes and times, both groups kept identical replicas (the same hashes), and
    # the ratios are there.
    proc = _bench_mesh("--steps", "3", "--batch", "1", "--seq-len", "32", "--raw-mb", "0.2",
                       "--tabs", "cpu")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["preset"] == "tiny"
    cpu = report["cpu"]
    assert {"quantize", "deflate", "dequantize", "reduce_3"} <= set(cpu["cpu_ms_per_mb"])
    assert cpu["data_channel_ms_per_mb_per_side"] > 0
    live = report["live"]
    assert live["replicas_identical"] and live["group_goodput_mb_s"] > 0
    assert live["group_vs_raw_goodput_ratio"] > 0
    browser = report["browser"]
    assert browser["config"]["peers"] == 3 and browser["config"]["tabs"] == ["cpu"]
    mixed, python_only = browser["mixed"], browser["python_only"]
    assert [p["backend"] for p in mixed["peers"]] == ["numpy", "numpy", "js-cpu"]
    assert [p["bytes_sent_counts"] for p in mixed["peers"]] == ["frames", "frames", "payloads"]
    assert [p["backend"] for p in python_only["peers"]] == ["numpy"] * 3
    for group in (mixed, python_only):  # a peer given no sequences sends nothing (shares by speed)
        assert any(p["bytes_sent_per_step"] > 0 for p in group["peers"]), group
    for peer in mixed["peers"] + python_only["peers"]:
        assert peer["steps"] == 3, peer
        assert peer["bytes_sent_per_step"] >= 0 and peer["bytes_received_per_step"] > 0, peer
        for key in ("step_s", "compute_s", "exchange_s"):
            assert isinstance(peer[key], float) and peer[key] > 0, (key, peer)
        assert 0 < peer["exchange_share_of_step"] < 1, peer
    assert mixed["replicas_identical"] and python_only["replicas_identical"]
    # Shares follow measured speeds: with the same shares the two groups must agree bit for bit.
    if python_only["same_shares_as_mixed"]:
        assert python_only["same_hashes_as_mixed"] is True
    else:
        assert python_only["same_hashes_as_mixed"] is None
    for key in ("step_s", "exchange_share", "bytes_received"):
        ratio = browser[f"{key}_ratio_mixed_vs_python_only"]
        assert isinstance(ratio, float) and ratio > 0, key
    assert set(browser["per_backend_step_s_ratio_vs_python_only"]) == {"numpy", "js-cpu"}


def test_identity_first_mismatch_names_the_first_differing_or_missing_step() -> None:
    from daisychain.bench.identity import first_mismatch

    ref = ["a", "b", "c"]
    assert first_mismatch(["a", "b", "c"], ref) is None
    assert first_mismatch(["a", "x", "c"], ref) == 2
    assert first_mismatch(["a", "b"], ref) == 3  # a path that stopped early is not identical
    assert first_mismatch(["a", "b", "c", "d"], ref) == 4
