"""The outer round's conformance trace (tests/vectors/protocol_outer/, written by
``daisychain.p2p.traces.outer``): stored as the generator writes it, replayed exactly by the
Python machine, and refused when the machine reduces an outer round with the per-step rule."""

from __future__ import annotations

import json

import pytest

from daisychain.p2p.machine import attempt
from daisychain.p2p.traces import outer
from daisychain.p2p.traces.replay import TraceMismatch, load, replay

PATH = outer.folder() / "outer-rounds.json"


def test_stored_outer_trace_is_current_and_replays() -> None:
    assert outer.check(outer.folder()) == []
    trace = load(PATH)
    assert replay(trace) == len(trace["steps"]) > 0
    config = next(
        f for s in trace["steps"] for f in [s["event"]] if f.get("event") == "message"
        and '"type":"config"' in f.get("text", "")
    )  # fmt: skip
    body = json.loads(config["text"])
    assert body["sync"] == "outer" and body["outer"] == {"steps": 4, "lr": 0.7, "momentum": 0.9}


def test_the_per_step_rule_in_an_outer_round_fails_the_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: the machine reduces an outer round as a per-step one (shares as weights, over
    the global batch). The trace's reduced chunk differs and the replay names it."""

    def per_step_rule(parts: list, weights: list) -> object:  # type: ignore[type-arg]
        return attempt.allreduce.reduce_chunk(parts, weights, sum(weights))

    monkeypatch.setattr(attempt, "weighted_mean", per_step_rule)
    with pytest.raises(TraceMismatch, match="effects differ"):
        replay(load(PATH))
