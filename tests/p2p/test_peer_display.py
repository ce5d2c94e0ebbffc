"""The headless peer's step line (peer/main.py Display): its share of the step, and no loss
where it computed none."""

from __future__ import annotations

import json

import pytest

from daisychain.p2p.node import StepRecord
from daisychain.peer.main import Display


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
