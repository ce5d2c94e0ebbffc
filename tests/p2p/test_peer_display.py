"""The headless peer's step line (peer/main.py Display): its share of the step, and no loss
where it computed none; a backend re-check's event and line; the final agreement it prints when
a run ends."""

from __future__ import annotations

import dataclasses
import json

import pytest

from daisychain.p2p.machine.effects import Outcome
from daisychain.p2p.node import StepRecord
from daisychain.peer.backend import Candidate
from daisychain.peer.main import Display, confirmed
from daisychain.peer.recheck import Check


def record(share: int, loss: float) -> StepRecord:
    return StepRecord(
        step=7, round=0, loss=loss, hash="ab" * 32, roster=("a", "b"), shares=(16 - share, share),
        share=share, tokens=16 * 64, compute_s=0.5, exchange_s=0.2, exchange_work_s=0.1,
        bytes_sent=1000, bytes_early=400, leader="a", probe="cd" * 32, backend="numpy",
    )  # fmt: skip


def test_a_contributing_step_says_its_share_and_loss(capsys: pytest.CaptureFixture[str]) -> None:
    Display(as_json=False).step(record(3, 2.5))
    line = capsys.readouterr().err
    assert "computes 3 of 16 sequences" in line and "loss  2.5000" in line, line


def test_a_following_step_shows_no_loss(capsys: pytest.CaptureFixture[str]) -> None:
    Display(as_json=False).step(record(0, 0.0))
    line = capsys.readouterr().err
    assert "follows without computing (0 of 16 sequences)" in line, line
    assert "loss       -" in line and "0.0000" not in line, line


def test_the_json_event_has_the_share_and_the_exchange_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    Display(as_json=True).step(record(3, 2.5))
    event = json.loads(capsys.readouterr().out)
    assert (event["share"], event["global_batch"], event["exchange_work_s"]) == (3, 16, 0.1)


def test_an_outer_round_says_round_inner_steps_and_bytes_per_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An outer run (docs/PROTOCOL.md, "Outer runs"): the line names the round, the inner steps
    and the bytes this peer sent over the tokens it trained (3 sequences x 64 tokens x H 10)."""
    outer = dataclasses.replace(record(3, 2.5), tokens=16 * 64 * 10, inner_steps=10,
                                bytes_sent=3840)  # fmt: skip
    Display(as_json=False).step(outer)
    line = capsys.readouterr().err
    assert line.startswith("round     7") and "10 inner steps  2.00 B/token" in line, line
    Display(as_json=True).step(outer)
    event = json.loads(capsys.readouterr().out)
    assert (event["inner_steps"], event["bytes_per_token"]) == (10, 2.0)
    Display(as_json=True).step(record(3, 2.5))
    assert "inner_steps" not in json.loads(capsys.readouterr().out), "per-step: unchanged"


def check(chosen: str) -> Check:
    rows = (Candidate("numpy", True, None, 0.6), Candidate("wgpu-dp4a", True, None, 0.05))
    return Check(rows, "numpy", chosen, 1.3, "slowdown")


def test_a_backend_switch_is_printed_and_a_kept_one_is_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    Display(as_json=False).backend_check(check("wgpu-dp4a"))
    assert capsys.readouterr().err == (
        "backend switched numpy -> wgpu-dp4a after a slowdown check "
        "(numpy 600.0 ms, wgpu-dp4a 50.0 ms)\n"
    )
    Display(as_json=False).backend_check(check("numpy"))
    assert capsys.readouterr().err == ""


def test_every_backend_check_is_a_json_event(capsys: pytest.CaptureFixture[str]) -> None:
    Display(as_json=True).backend_check(check("numpy"))
    event = json.loads(capsys.readouterr().out)
    assert event == {
        "event": "backend-check", "cause": "slowdown", "current": "numpy", "backend": "numpy",
        "switched": False, "cost_s": 1.3, "figures": {"numpy": 0.6, "wgpu-dp4a": 0.05},
        "reason": "kept numpy after a slowdown check (numpy 600.0 ms, wgpu-dp4a 50.0 ms)",
    }  # fmt: skip


def test_the_final_agreement_counts_only_equal_hashes() -> None:
    mine, other = "ab" * 32, "cd" * 32
    agree = Outcome("done", 5, mine, "reached step 5", {"a": mine, "b": mine, "c": mine})
    assert confirmed(agree) == "3 replicas identical at step 5"
    lied = Outcome("done", 5, mine, "reached step 5", {"a": mine, "b": other, "c": mine})
    assert confirmed(lied) == "2 replicas identical at step 5, 1 differ from this one"
    alone = Outcome("done", 5, mine, "reached step 5", {"a": mine})
    assert confirmed(alone) == "1 replica identical at step 5"
