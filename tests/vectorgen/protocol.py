"""The protocol conformance traces (tests/vectors/protocol/*.json), one per scenario of
``protocol_traces.scenarios``: ``python tests/vectorgen --write protocol`` regenerates them,
``--check protocol`` replays every stored trace on the Python machine."""

from __future__ import annotations

import json
from pathlib import Path

from protocol_traces.playback import TraceMismatch, load, replay
from protocol_traces.scenarios import SCENARIOS
from vectorgen.files import Stale

SUBDIR = "protocol"


def write(directory: Path) -> str:
    directory = directory / SUBDIR
    directory.mkdir(parents=True, exist_ok=True)
    names = set()
    for name, scenario in SCENARIOS.items():
        text = json.dumps(scenario().trace(), indent=1, sort_keys=False) + "\n"
        (directory / f"{name}.json").write_text(text, encoding="utf-8")
        names.add(f"{name}.json")
    for stale in directory.glob("*.json"):
        if stale.name not in names:
            stale.unlink()
    return f"wrote {len(names)} traces to {directory}"


def check(directory: Path) -> str:
    directory = directory / SUBDIR
    paths = sorted(directory.glob("*.json"))
    if {p.stem for p in paths} != set(SCENARIOS):
        raise Stale(
            f"{directory}: traces {sorted(p.stem for p in paths)} do not match the scenarios "
            f"{sorted(SCENARIOS)}; run `python tests/vectorgen --write protocol`"
        )
    for path in paths:
        try:
            replay(load(path))
        except TraceMismatch as exc:
            raise Stale(f"{path.name}: {exc}") from exc
    return f"{len(paths)} traces replayed, every effect matched"
