"""Config equality on the Python machine: tests/vectors/config_equality.json, written by
tests/config_vectors.py.

A second config from another peer is the run's own exactly when its parsed record encodes to the
run's bytes; one that differs in any field of the record is ``wrong-run``. Every case replays on
the real machine (the stored start, then the case's step, effects compared exactly); the file
is what the generator writes now, and names every field the ``Config`` record has today.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

import config_vectors as cv
from daisychain.p2p.machine import Machine
from daisychain.wire import messages
from protocol_traces.playback import TraceMismatch, replay

VECTORS: dict[str, Any] = json.loads(cv.FILE.read_text(encoding="utf-8"))
CASES = VECTORS["cases"]


def case_trace(case: dict[str, Any]) -> dict[str, Any]:
    """The stored start with the case's step appended: one protocol trace."""
    trace = VECTORS["trace"]
    return {**trace, "name": case["name"], "steps": [*trace["steps"], case["step"]]}


def test_the_file_is_what_the_generator_writes() -> None:
    assert cv.FILE.read_text(encoding="utf-8") == cv.text(), (
        "tests/vectors/config_equality.json is stale: python tests/config_vectors.py --write"
    )


def test_every_field_of_the_config_record_has_a_wrong_run_case() -> None:
    leaves = cv.fields()
    assert VECTORS["fields"] == leaves
    assert {"outer.overlap", "outer.cut", "resume_hash", "model.mlp_mult"} <= set(leaves)
    assert {"audit.one_in", "audit.private"} <= set(leaves)
    changed = {c["field"] for c in CASES if c["expect"] == cv.WRONG_RUN}
    assert set(leaves) <= changed, f"fields without a case: {set(leaves) - changed}"
    assert [c["name"] for c in CASES if c["expect"] == cv.ACCEPTED] == [
        "identical", "identical record, other JSON text",
    ]  # fmt: skip


def test_a_field_without_a_case_fails_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(cv.OTHER, "outer.cut")
    with pytest.raises(AssertionError, match=r"config fields without a case: \['outer.cut'\]"):
        cv.build()


@dataclasses.dataclass(frozen=True)
class _GrownOuter(messages.OuterSpec):
    pace: float = 0.0


@dataclasses.dataclass(frozen=True)
class _Grown(messages.Config):
    outer: _GrownOuter | None = None


def test_a_field_the_record_gains_is_enumerated() -> None:
    fields = cv.fields()
    at = fields.index("outer.cut") + 1  # outer's fields, before audit's
    assert cv.fields(_Grown) == [*fields[:at], "outer.pace", *fields[at:]]


def test_a_change_that_does_not_survive_parsing_is_no_case(monkeypatch: pytest.MonkeyPatch) -> None:
    # resume_hash is read only when resume_step > 0: with 0 the change would vanish.
    monkeypatch.setattr(cv, "BASE", dataclasses.replace(cv.BASE, resume_step=0, resume_hash=None))
    with pytest.raises(AssertionError, match=r"resume_hash: .* does not survive the round trip"):
        cv.variant("resume_hash")
    monkeypatch.setitem(cv.OTHER, "outer.overlap", 2.0)  # a run no peer trains
    with pytest.raises(AssertionError, match=r"outer\.overlap: 2\.0 is no run a peer trains"):
        cv.variant("outer.overlap")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_python_machine_answers_every_case(case: dict[str, Any]) -> None:
    effects = case["step"]["effects"]
    if case["expect"] == cv.WRONG_RUN:
        assert [(f["effect"], f.get("message", {}).get("code")) for f in effects] == [
            ("send-message", "wrong-run"), ("close", None),
        ]  # fmt: skip
    else:
        assert effects == []
    assert replay(case_trace(case)) == len(VECTORS["trace"]["steps"]) + 1


def test_a_machine_comparing_records_with_equality_misses_the_signed_zero(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cases fire on the rule they replace: dataclass == takes -0.0 for 0.0."""
    real = Machine._on_config

    def by_equality(self: Machine, peer: str, cfg: messages.Config) -> None:
        if self.config is not None and not self.leadership.leads_own_run and cfg == self.config:
            return
        real(self, peer, cfg)

    monkeypatch.setattr(Machine, "_on_config", by_equality)
    missed = []
    for case in CASES:
        try:
            replay(case_trace(case))
        except TraceMismatch:
            missed.append(case["name"])
    assert missed == ["optim.weight_decay -0.0 (0.0 in the run)"]
