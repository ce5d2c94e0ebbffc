"""The outer runs' conformance traces (tests/vectors/protocol_outer/, written by
``protocol_traces.outer``): stored as the generator writes them, replayed exactly by the
Python machine, and refused by the replay when the machine is wrong in the ways an outer round
can be: reducing with the per-step rule, taking an unweighted mean, or still counting the share
of a peer lost mid-round. (``tests/js/protocol_outer.test.mjs`` replays them on the JavaScript
machine.)"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from daisychain.p2p.machine import attempt
from daisychain.p2p.run import CommittedRoster
from protocol_traces import outer
from protocol_traces.playback import TraceMismatch, load, replay

NAMES = ("outer-rounds", "outer-join", "outer-peer-lost", "outer-uneven")


def failing_traces() -> set[str]:
    """The stored outer traces the (possibly planted) machine does not replay."""
    failed = set()
    for name in NAMES:
        try:
            replay(load(outer.folder() / f"{name}.json"))
        except TraceMismatch as exc:
            assert "effects differ" in str(exc) or "deadline" in str(exc), exc
            failed.add(name)
    return failed


def test_stored_outer_traces_are_current_and_replay() -> None:
    assert sorted(outer.SCENARIOS) == sorted(NAMES)
    assert outer.check(outer.folder()) == []
    for name in NAMES:
        trace = load(outer.folder() / f"{name}.json")
        assert replay(trace) == len(trace["steps"]) > 0
        events = [s["event"] for s in trace["steps"]]
        first = next(e for e in events if e["event"] == "lead"
                     or '"type":"config"' in e.get("text", ""))  # fmt: skip
        body = first["config"] if first["event"] == "lead" else json.loads(first["text"])
        assert body["sync"] == "outer" and body["outer"] == {"steps": 4, "lr": 0.7, "momentum": 0.9}


def test_the_per_step_rule_in_an_outer_round_fails_the_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: the machine reduces an outer round as a per-step one (shares as weights, over
    the global batch). outer-rounds' reduced chunk differs and the replay names it."""

    def per_step_rule(parts: list, weights: list) -> object:  # type: ignore[type-arg]
        return attempt.allreduce.reduce_chunk(parts, weights, sum(weights))

    monkeypatch.setattr(attempt, "weighted_mean", per_step_rule)
    with pytest.raises(TraceMismatch, match="effects differ"):
        replay(load(outer.folder() / "outer-rounds.json"))
    assert "outer-rounds" in failing_traces()


def test_an_unweighted_mean_fails_the_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: every contributor weighs 1, whatever its share. The uneven shares (2, 5, 1) and
    the joined round (4, 2, 3, 3) give other reduced bytes."""
    real = attempt.weighted_mean
    monkeypatch.setattr(attempt, "weighted_mean", lambda parts, w: real(parts, [1] * len(parts)))
    assert {"outer-uneven", "outer-join"} <= failing_traces()


@pytest.fixture
def counts_lost_shares(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Planted: a re-committed round's mean still counts the share a lost peer had in the
    step's first roster (its part as zeros, its tokens in the divisor), as a machine that fills
    a lost part with zeros instead of re-committing would."""
    first: dict[int, CommittedRoster] = {}
    real_init = attempt.Attempt.__init__
    real_reduce = attempt.Attempt.reduce
    real_mean = attempt.weighted_mean

    def init(self: attempt.Attempt, roster: CommittedRoster, *args: object, **kw: object) -> None:
        real_init(self, roster, *args, **kw)  # type: ignore[arg-type]
        first.setdefault(roster.step, roster)

    def reduce(self: attempt.Attempt) -> bytes | None:
        step = first[self.roster.step]
        lost = sum(s for p, s in zip(step.peers, step.shares, strict=True)
                   if p not in self.roster.peers)  # fmt: skip
        mean: Callable[..., np.ndarray] = real_mean
        if lost:

            def mean(parts: list[np.ndarray], w: list[int]) -> np.ndarray:
                return real_mean([*parts, np.zeros_like(parts[0])], [*w, lost])

        monkeypatch.setattr(attempt, "weighted_mean", mean)
        try:
            return real_reduce(self)
        finally:
            monkeypatch.setattr(attempt, "weighted_mean", real_mean)

    monkeypatch.setattr(attempt.Attempt, "__init__", init)
    monkeypatch.setattr(attempt.Attempt, "reduce", reduce)
    yield


def test_a_lost_peers_share_counted_fails_the_replay(counts_lost_shares: None) -> None:
    """Only the trace with a peer lost mid-round notices (no other re-commits a round)."""
    assert failing_traces() == {"outer-peer-lost"}
