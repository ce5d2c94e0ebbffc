"""``daisychain bench lowcomm``: outer runs against per-step runs on a shaped link (issue 21).

The end-to-end run uses `tiny`, one measured step and round: only the document's shape, the
replicas' identity and the bytes arithmetic are checked, never a time or a ratio's size. Without
root (cgroups, a network namespace) the bench says why it skipped, and so do these tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from daisychain.bench import lowcomm, pool
from daisychain.bench.rig import cpubudget, shaping

ROOT = Path(__file__).resolve().parents[2]
WHY_NOT = cpubudget.unavailable() or shaping.unavailable()


@pytest.mark.parametrize("spec", ["", "0", "1001", "five", "5,,x", "-3"])
def test_a_bad_h_is_refused_with_an_example(spec: str) -> None:
    with pytest.raises(SystemExit, match=r"e\.g\. --H 5,10"):
        lowcomm.parse_h(spec)


def test_h_lists_are_read_in_order() -> None:
    assert lowcomm.parse_h("10") == [10]
    assert lowcomm.parse_h("5, 20,1") == [5, 20, 1]


@pytest.mark.parametrize("spec", ["", "-0.1", "1.5", "half", "0,,x"])
def test_a_bad_overlap_is_refused_with_an_example(spec: str) -> None:
    with pytest.raises(SystemExit, match=r"e\.g\. --overlap 0,0\.5"):
        lowcomm.parse_overlap(spec)


def test_overlap_lists_are_read_in_order() -> None:
    assert lowcomm.parse_overlap("0") == [0.0]
    assert lowcomm.parse_overlap("0, 0.5,1") == [0.0, 0.5, 1.0]


def test_bytes_per_token_is_the_most_any_peer_sent() -> None:
    summary = {"peers": [{"bytes_sent_per_step": 300}, {"bytes_sent_per_step": 900}]}
    assert lowcomm.bytes_per_token(summary, 3.0) == 300.0


def _args(**changes: object) -> argparse.Namespace:
    base = dict(preset="tiny", peers=3, cores=0.5, link="10mbit", batch=2, H="2", overlap="0",
                steps=1, warmup=1, rounds=1, warmup_rounds=1, address="127.0.0.2",
                timeout_s=60.0)  # fmt: skip
    return argparse.Namespace(**{**base, **changes})


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("peers", 1, "--peers must be 2-4"),
        ("peers", 5, "--peers must be 2-4"),
        ("cores", 0.0, "--cores 0.01"),
        ("rounds", 0, "at least 1"),
        ("warmup_rounds", 0, "at least 1"),
        ("preset", "huge", "unknown preset"),
        ("link", "10 Mbit/s", r"e\.g\. 40mbit"),
    ],
)
def test_bad_options_are_refused_before_anything_runs(
    field: str, value: object, match: str
) -> None:
    with pytest.raises(SystemExit, match=match):
        lowcomm.measure(_args(**{field: value}))


def test_the_namespace_rerun_gets_every_option_back() -> None:
    argv = lowcomm._argv(_args(H="2,5", overlap="0,0.5"))
    parser = argparse.ArgumentParser()
    lowcomm.add_arguments(parser)
    again = parser.parse_args(argv)
    assert again.H == "2,5" and again.warmup_rounds == 1 and again.link == "10mbit"
    assert again.overlap == "0,0.5"
    assert again.timeout_s == 60.0 and again.cores == 0.5


@pytest.mark.skipif(cpubudget.unavailable() is not None, reason="no CPU budgets here")
def test_a_leader_that_exits_with_an_error_ends_its_group_at_once() -> None:
    # Without the stop the two followers would wait for a run until --timeout-s (here 120 s).
    args = argparse.Namespace(preset="tiny", steps=1, warmup=1, address="127.0.0.2",
                              timeout_s=120.0)  # fmt: skip
    started = time.monotonic()
    logs = asyncio.run(
        pool.run_group((0.5, 0.5, 0.5), args, 2, 64, 6, lead_options=("--no-such-option",))
    )
    assert time.monotonic() - started < 100, "the followers were left waiting"
    assert logs[0].code not in (0, None)
    summary = pool.summarize(logs, args, 64)
    assert "device0: exit" in summary["error"]


@pytest.mark.skipif(cpubudget.unavailable() is not None, reason="no CPU budgets here")
def test_a_group_past_its_timeout_says_where_each_peer_was() -> None:
    # 400 steps cannot finish in 3 s: the group is ended at --timeout-s and every peer's log
    # names the limit and the last step it reached, instead of the bench dying on a bare
    # TimeoutError with no peer's output (as a group once did in a loaded full suite).
    args = argparse.Namespace(preset="tiny", steps=400, warmup=1, address="127.0.0.2",
                              timeout_s=3.0)  # fmt: skip
    logs = asyncio.run(pool.run_group((0.5, 0.5), args, 2, 64, 4))
    for log in logs:
        assert log.code not in (0, None), log
        assert any("still running after --timeout-s 3 (last step" in e for e in log.errors)
    error = pool.summarize(logs, args, 64)["error"]
    assert error.count("still running after --timeout-s 3") == 2, error


def test_bench_lowcomm_end_to_end_at_tiny() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "bench", "lowcomm", "--json", "--preset", "tiny",
         "--batch", "2", "--steps", "1", "--warmup", "1", "--rounds", "1", "--warmup-rounds",
         "1", "--H", "2", "--overlap", "0,0.5", "--link", "20mbit", "--timeout-s", "240"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    if WHY_NOT is not None:
        assert report == {"skipped": WHY_NOT}
        pytest.skip(f"cannot shape a link here: {WHY_NOT}")
    per_step, outer = report["per_step"], report["outer"]["H=2"]
    assert "error" not in per_step and "error" not in outer, report
    assert per_step["replicas_identical_every_step"] is True
    assert outer["replicas_identical_every_step"] is True
    assert report["global_batch"] == 6 and report["link"] == "20mbit"
    assert per_step["tokens_per_step"] == 6 * 64
    assert outer["tokens_per_step"] == 2 * 6 * 64, "a round is H inner steps of the batch"
    # The same exchange once per round: about H times fewer bytes per token (frames, headers
    # and deflate make it inexact, so only the direction is checked).
    assert outer["bytes_per_token"] < per_step["bytes_per_token"]
    assert outer["tokens_per_s_ratio"] > 0
    # With overlap: the same run shape, replicas identical, compared with the run without.
    lapped = report["outer"]["H=2 overlap=0.5"]
    assert "error" not in lapped and lapped["replicas_identical_every_step"] is True
    assert lapped["overlap"] == 0.5 and outer["overlap"] == 0.0
    assert lapped["tokens_per_s_vs_no_overlap"] > 0
    assert report["best_tokens_per_s_ratio"] == max(
        outer["tokens_per_s_ratio"], lapped["tokens_per_s_ratio"]
    )
