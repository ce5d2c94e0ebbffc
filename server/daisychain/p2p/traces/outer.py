"""The conformance trace of an outer run's round (docs/PROTOCOL.md, "Outer runs"), kept apart
from ``scenarios``: the JavaScript machine (static/js/p2p/machine/) does not train outer runs
yet (its page refuses them with rule ``page-outer``), so this trace lives in its own folder,
``tests/vectors/protocol_outer/``, for the mirror that will. It uses the format and the trace
replica of every other trace (tests/vectors/README.md, "Protocol traces").

What it pins, beyond a per-step round: the ``config`` bytes of an outer run (``sync``,
``outer``), and the reduction of an outer round (``outer.mean.weighted_mean``: the shares divided
by their gcd as weights). The contributions here have block exponents that differ by peer, so
their sums round, and with shares 6, 3, 3 the outer rule and the per-step rule give different
reduced bytes (checked when the trace is written): a machine reducing an outer round with the
per-step rule fails the replay.

Write: ``python -m daisychain.p2p.traces.outer --write``; check: ``--check`` (both against
``tests/vectors/protocol_outer/`` of the repository, or a folder given after the flag).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from daisychain.outer.mean import weighted_mean
from daisychain.p2p import allreduce, codec, messages
from daisychain.p2p.frames import FrameKind
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.traces.jsonform import Json
from daisychain.p2p.traces.replay import TraceMismatch, load, replay
from daisychain.p2p.traces.script import (
    REFERENCE_PROBE,
    RUN,
    A,
    B,
    C,
    Script,
    applied,
    config,
    loss_of,
    roster_msg,
    total_blocks,
)

SUBDIR = "protocol_outer"
SHARES = (6, 3, 3)  # gcd 3: weights 2, 1, 1 (the per-step rule multiplies by 6, 3, 3)
ABC = (A, B, C)
EXPONENTS = (-3, -26, -5)  # per roster rank: sums of their values round (23 bits apart)


def outer_config(steps: int = 2) -> messages.Config:
    return dataclasses.replace(
        config(steps), sync=messages.SYNC_OUTER, outer=messages.OuterSpec(4, 0.7, 0.9)
    )


def pseudo_chunk(rank: int, step: int, chunk: int, blocks: int) -> bytes:
    """Rank ``rank``'s pseudo-gradient chunk: every block exponent ``EXPONENTS[rank]``, value
    ``i`` = ((7 i + 13 rank + 5 step + 11 chunk) mod 255) - 127."""
    exps = bytes([EXPONENTS[rank] & 0xFF]) * blocks
    base = 13 * rank + 5 * step + 11 * chunk
    values = bytes(((7 * i + base) % 255 - 127) & 0xFF for i in range(blocks * codec.BLOCK))
    return exps + values


def contributions(rank: int, step: int) -> tuple[bytes, ...]:
    tb = total_blocks()
    out = []
    for k in range(len(SHARES)):
        first, end = allreduce.chunk_blocks(tb, SHARES, k)
        out.append(b"" if end == first else pseudo_chunk(rank, step, k, end - first))
    return tuple(out)


def reduced(step: int, chunk: int, *, outer: bool = True) -> bytes:
    """The owner's reduced chunk by the outer rule (or, ``outer=False``, the per-step rule)."""
    first, end = allreduce.chunk_blocks(total_blocks(), SHARES, chunk)
    parts = [codec.decode(contributions(r, step)[chunk], end - first) for r in range(3)]
    if outer:
        mean = weighted_mean(parts, list(SHARES))
    else:
        mean = allreduce.reduce_chunk(parts, list(SHARES), sum(SHARES))
    return codec.encode(mean)[0]


def follower_outer_rounds() -> Script:
    s = Script("outer-rounds", "B follows leader A with C in an outer run (sync outer, 4 inner "
               "steps a round) for 2 rounds with shares 6, 3, 3: each round B's compute answers "
               "with its pseudo-gradient's chunks, B reduces its chunk by the outer rule (the "
               "shares over their gcd as weights) and applies; the run stops done.", B)  # fmt: skip
    s.connect(A, C)
    out = s.send(A, outer_config(2))
    assert any(isinstance(f, fx.SendMessage) and isinstance(f.message, messages.Ready)
               for f in out), out  # fmt: skip
    for step in (1, 2):
        assert reduced(step, 1) != reduced(step, 1, outer=False), "the rules must differ here"
        s.at(s.now + 1.0)
        out = s.send(A, roster_msg(step, 0, ABC, SHARES))
        assert [f for f in out if isinstance(f, fx.Compute)], out
        mine = contributions(1, step)
        s.feed(ev.ComputeDone(s.now, step, 0, loss_of(step), mine, REFERENCE_PROBE, 0.0))
        out = s.frames(A, FrameKind.CONTRIBUTION, contributions(0, step)[1], step, 0, 1)
        out += s.frames(C, FrameKind.CONTRIBUTION, contributions(2, step)[1], step, 0, 1)
        sent = [f.payload for f in out if isinstance(f, fx.SendPayload)
                and f.kind is FrameKind.REDUCED]  # fmt: skip
        assert sent == [reduced(step, 1)] * 2, "B's reduced chunk, to A and to C"
        out = s.frames(A, FrameKind.REDUCED, reduced(step, 0), step, 0, 0)
        out += s.frames(C, FrameKind.REDUCED, reduced(step, 2), step, 0, 2)
        digest = applied(out)
        for p in (A, C):
            s.send(p, messages.StepHash(RUN, step, 0, digest, loss_of(step), REFERENCE_PROBE,
                                        "numpy", 0.0))  # fmt: skip
    stop = messages.Stop(RUN, "done", 2, "reached step 2", {})
    s.send(A, stop)
    s.send(C, stop)
    assert s.machine.finished
    return s


SCENARIOS = {"outer-rounds": follower_outer_rounds}


def folder() -> Path:
    return Path(__file__).resolve().parents[4] / "tests" / "vectors" / SUBDIR


def trace_text(name: str) -> str:
    return json.dumps(SCENARIOS[name]().trace(), indent=1, sort_keys=False) + "\n"


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in SCENARIOS:
        path = directory / f"{name}.json"
        path.write_text(trace_text(name), encoding="utf-8")
        paths.append(path)
    return paths


def check(directory: Path) -> list[str]:
    """What is stale or does not replay (empty: every trace is current and replays)."""
    problems = []
    for name in SCENARIOS:
        path = directory / f"{name}.json"
        if not path.exists() or path.read_text(encoding="utf-8") != trace_text(name):
            problems.append(f"{path}: stale; run python -m daisychain.p2p.traces.outer --write")
            continue
        trace: Json = load(path)
        try:
            replay(trace)
        except TraceMismatch as exc:
            problems.append(str(exc))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="write the traces")
    group.add_argument("--check", action="store_true", help="check and replay them")
    parser.add_argument("directory", nargs="?", type=Path, default=None)
    args = parser.parse_args(argv)
    directory = args.directory or folder()
    if args.write:
        for path in write(directory):
            print(f"wrote {path}")
        return 0
    problems = check(directory)
    print("\n".join(problems) or f"{len(SCENARIOS)} outer traces current and replayed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
