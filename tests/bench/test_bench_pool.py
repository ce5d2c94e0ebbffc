"""``daisychain bench pool`` and the CPU budgets it holds devices to (``bench.rig.cpubudget``).

The end-to-end run uses `tiny` and two steps: only the document's shape and the replicas'
identity are checked, never a time or a ratio's size (the machines are shared and noisy).
Without root the budgets cannot be set; the bench then says why it skipped, and so do these
tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from daisychain.bench import pool
from daisychain.bench.rig import cpubudget

ROOT = Path(__file__).resolve().parents[2]
NO_BUDGETS = cpubudget.unavailable()


def test_no_cgroup_file_system_is_said(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cpubudget, "ROOT", tmp_path / "absent")
    assert "no cgroup file system" in (cpubudget.unavailable() or "")
    monkeypatch.setattr(cpubudget, "ROOT", tmp_path)
    assert "no cgroup v1 cpu controller" in (cpubudget.unavailable() or "")


def test_a_cgroup_v2_root_without_the_cpu_controller_is_said(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    monkeypatch.setattr(cpubudget, "ROOT", tmp_path)
    assert "does not offer the cpu controller" in (cpubudget.unavailable() or "")


def test_an_unwritable_cgroup_asks_for_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "cpu").mkdir()
    monkeypatch.setattr(cpubudget, "ROOT", tmp_path)
    assert cpubudget.unavailable() is None
    # Root may write anywhere, so the permission check is played by os.access (a stand-in).
    monkeypatch.setattr(cpubudget.os, "access", lambda path, mode: False)
    assert "run as root" in (cpubudget.unavailable() or "")


@pytest.mark.parametrize("cores", [0.0, 0.001, 65.0, -1.0])
def test_a_budget_outside_its_range_is_refused(cores: float, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"outside 0\.01 \.\. 64"):
        cpubudget.CpuBudget("never-made", cores)


def test_a_v1_budget_writes_its_quota_and_a_v2_budget_its_cpu_max(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "cpu").mkdir()
    monkeypatch.setattr(cpubudget, "ROOT", tmp_path)
    v1 = cpubudget.CpuBudget("quarter", 0.25)
    assert (tmp_path / "cpu/quarter/cpu.cfs_quota_us").read_text() == "25000\n"
    assert (tmp_path / "cpu/quarter/cpu.cfs_period_us").read_text() == "100000\n"
    assert v1.path == tmp_path / "cpu/quarter"
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    cpubudget.CpuBudget("one-and-a-half", 1.5)
    assert (tmp_path / "one-and-a-half/cpu.max").read_text() == "150000 100000\n"


@pytest.mark.skipif(NO_BUDGETS is not None, reason=f"no CPU budgets here: {NO_BUDGETS}")
def test_a_child_started_in_a_budget_runs_inside_its_cgroup() -> None:
    budget = cpubudget.CpuBudget(f"daisychain-test-{os.getpid()}", 0.5)
    try:
        out = subprocess.run(
            [sys.executable, "-c", "print(open('/proc/self/cgroup').read())"],
            capture_output=True, text=True, check=True, preexec_fn=budget.enter, timeout=60,
        ).stdout  # fmt: skip
        assert f"/{budget.name}" in out
        quota = budget.path / ("cpu.max" if (cpubudget.ROOT / "cgroup.controllers").exists()
                               else "cpu.cfs_quota_us")  # fmt: skip
        assert quota.read_text().split()[0] == "50000"
    finally:
        budget.remove()
    assert not budget.path.exists()


@pytest.mark.parametrize("spec", ["fast", "1,x", "", "1,0", "100"])
def test_a_bad_scenario_is_refused_with_a_hint(spec: str) -> None:
    with pytest.raises(SystemExit, match="daisychain bench pool"):
        pool._budgets(spec)


def test_named_and_custom_scenarios() -> None:
    assert pool._budgets("fast-slow") == ("fast-slow", (1.0, 0.25))
    assert pool._budgets("0.5,0.25,0.25") == ("0.5,0.25,0.25", (0.5, 0.25, 0.25))


def _args(warmup: int = 1, steps: int = 2) -> argparse.Namespace:
    return argparse.Namespace(warmup=warmup, steps=steps)


def _log(name: str, steps: range, *, code: int = 0, reason: str = "done") -> pool.PeerLog:
    log = pool.PeerLog(name, 1.0, code=code)
    for s in steps:
        event = {"hash": f"h{s}", "roster": ["a", "b"], "compute_s": 0.5, "exchange_s": 0.25,
                 "exchange_work_s": 0.1, "bytes_sent": 100, "bytes_early": 40, "global_batch": 8,
                 "share": 4}  # fmt: skip
        log.steps[s] = (float(s), event)
    log.stopped = {"reason": reason, "hash": "h3"}
    return log


def test_a_summary_reads_the_leaders_clock_and_every_peers_split() -> None:
    summary = pool.summarize([_log("a", range(1, 4)), _log("b", range(1, 4))], _args(), 8)
    assert summary["seconds_per_step"] == 1.0  # steps 1 -> 3 arrived 2 s apart
    assert summary["tokens_per_step"] == 2 * 4 * 8
    assert summary["tokens_per_s"] == 64.0
    assert summary["replicas_identical_every_step"] is True
    assert summary["peers"][0]["not_computing_share"] == 0.5


def test_a_summary_refuses_a_failed_peer_missing_steps_or_a_split_hash() -> None:
    failed = pool.summarize([_log("a", range(1, 4)), _log("b", range(1, 4), code=3)], _args(), 8)
    assert "b: exit 3" in failed["error"]
    not_done = pool.summarize([_log("a", range(1, 4), reason="fork")], _args(), 8)
    assert "a: exit 0" in not_done["error"]
    short = pool.summarize([_log("a", range(1, 4)), _log("b", range(1, 3))], _args(), 8)
    assert short == {"error": "steps missing at b"}
    split = _log("b", range(1, 4))
    split.steps[3][1]["hash"] = "other"
    summary = pool.summarize([_log("a", range(1, 4)), split], _args(), 8)
    assert summary["replicas_identical_every_step"] is False


def test_bench_pool_end_to_end_at_tiny() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "bench", "pool", "--json", "--preset", "tiny",
         "--steps", "2", "--warmup", "1", "--scenario", "1,0.5", "--timeout-s", "240"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    if NO_BUDGETS is not None:
        assert report == {"skipped": NO_BUDGETS}
        pytest.skip(f"no CPU budgets here: {NO_BUDGETS}")
    scenario = report["scenarios"]["1,0.5"]
    assert scenario["cores"] == [1.0, 0.5]
    group = scenario["group"]
    assert "error" not in group, group
    assert group["replicas_identical_every_step"] is True
    assert [p["cores"] for p in group["peers"]] == [1.0, 0.5]
    assert scenario["global_batch"] == 2 * 4  # two devices x tiny's batch of 4
    assert group["tokens_per_step"] == 8 * 64  # the global batch x 64 tokens
    assert all(a["tokens_per_step"] == 8 * 64 for a in scenario["alone"]), "the same batch"
    assert sum(p["share"] for p in group["peers"]) == 8
    assert all(len(p["shares_by_step"]) == 2 for p in group["peers"]), group
    assert report["alone_warmup_steps"] == 1 and report["warmup_steps"] == 1
    assert scenario["pooling_efficiency"] > 0 and scenario["group_vs_fastest"] > 0


@pytest.mark.parametrize("field", ["steps", "warmup", "alone_warmup"])
def test_bench_pool_refuses_a_count_below_one(field: str) -> None:
    args = argparse.Namespace(preset="tiny", batch=None, seq_len=None, steps=2, warmup=1,
                              alone_warmup=1, scenario=["1"], global_batch=None)  # fmt: skip
    setattr(args, field, 0)
    with pytest.raises(SystemExit, match="--alone-warmup must be at least 1"):
        asyncio.run(pool._measure(args))
