"""Replaying a conformance trace on the Python machine (what every implementation does with
tests/vectors/protocol/*.json; tests/vectors/README.md, "Protocol traces")."""

from __future__ import annotations

import json
from pathlib import Path

from daisychain.p2p.versions import DATA_PROTOCOL_VERSION, FRAME_VERSION
from protocol_traces.jsonform import Json, effect_to_json, event_from_json
from protocol_traces.script import FORMAT, FORMAT_VERSION, build_machine


class TraceMismatch(AssertionError):
    """The machine's effects differ from the trace's (names the trace and the step)."""


def replay(trace: Json) -> int:
    """Feed every event; raise ``TraceMismatch`` at the first effect or deadline that differs.
    Returns the number of events replayed."""
    name = trace.get("name", "?")
    if trace.get("format") != FORMAT or trace.get("format_version") != FORMAT_VERSION:
        raise TraceMismatch(f"{name}: not a {FORMAT} version {FORMAT_VERSION} file")
    if trace.get("protocol_version") != DATA_PROTOCOL_VERSION:
        raise TraceMismatch(f"{name}: written for protocol {trace.get('protocol_version')}")
    if trace.get("frame_version") != FRAME_VERSION:
        raise TraceMismatch(f"{name}: written for frame version {trace.get('frame_version')}")
    machine = build_machine(trace["setup"])
    for i, step in enumerate(trace["steps"]):
        got = [effect_to_json(f) for f in machine.handle(event_from_json(step["event"]))]
        if got != step["effects"]:
            raise TraceMismatch(
                f"{name}: step {i} ({step['event']['event']} at {step['event']['at']}): "
                f"effects differ\n  expected {step['effects']}\n  got      {got}"
            )
        deadline = machine.next_deadline()
        if deadline != step["deadline"]:
            raise TraceMismatch(
                f"{name}: step {i}: next deadline {deadline}, expected {step['deadline']}"
            )
    return len(trace["steps"])


def load(path: Path) -> Json:
    data: Json = json.loads(path.read_text(encoding="utf-8"))
    return data
