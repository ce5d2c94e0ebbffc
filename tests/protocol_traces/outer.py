"""The conformance traces of outer runs (docs/PROTOCOL.md, "Outer runs"), kept apart from
``scenarios`` in their own folder, ``tests/vectors/protocol_outer/``: a machine whose replica
cannot train outer runs refuses them (rule ``page-outer``), so the JavaScript machine replays
them with a replica that can (``setOuter``, as the page's has;
``tests/js/protocol_outer.test.mjs``). They use the format and the trace replica of every other
trace (tests/vectors/README.md, "Protocol traces").

What they pin, beyond a per-step round: the ``config`` bytes of an outer run (``sync``,
``outer``); the reduction of an outer round (``outer.mean.weighted_mean``: the shares divided by
their gcd as weights), with contributions whose block exponents differ by peer, so their sums
round, and shares where the outer rule, the per-step rule and an unweighted mean give different
reduced bytes (checked when a trace is written); a join by state sync between rounds; a peer
lost mid-round, whose round is re-committed without it and whose share no longer counts; and
the leader's timer of an outer round (``H`` step timeouts).

Write: ``PYTHONPATH=tests python -m protocol_traces.outer --write``; check: ``--check`` (both
against ``tests/vectors/protocol_outer/`` of the repository, or a folder given after the flag).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from daisychain.outer.mean import weighted_mean
from daisychain.p2p import allreduce
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.wire import codec, messages
from daisychain.wire.frames import FrameKind
from protocol_traces.jsonform import Json
from protocol_traces.playback import TraceMismatch, load, replay
from protocol_traces.script import (
    REFERENCE_PROBE,
    RUN,
    SEED,
    A,
    B,
    C,
    D,
    Script,
    Shares,
    applied,
    config,
    fresh_state,
    loss_of,
    roster_msg,
    split,
    total_blocks,
)
from protocol_traces.trace_replica import TraceReplica, init_hash

SUBDIR = "protocol_outer"
SHARES = (6, 3, 3)  # gcd 3: weights 2, 1, 1 (the per-step rule multiplies by 6, 3, 3)
ABC = (A, B, C)
# Per roster rank: sums of their values round (the exponents are far apart).
EXPONENTS = (-3, -26, -5, -11)
INNER_STEPS = 4
INIT = init_hash(SEED)


def outer_config(steps: int = 2, global_batch: int | None = None) -> messages.Config:
    cfg = config(steps)
    return dataclasses.replace(
        cfg, sync=messages.SYNC_OUTER, outer=messages.OuterSpec(INNER_STEPS, 0.7, 0.9),
        global_batch=global_batch or cfg.global_batch,
    )  # fmt: skip


def pseudo_chunk(rank: int, step: int, chunk: int, blocks: int, rnd: int = 0) -> bytes:
    """Rank ``rank``'s pseudo-gradient chunk: every block exponent ``EXPONENTS[rank]``, value
    ``i`` = ((7 i + 13 rank + 5 step + 3 rnd + 11 chunk) mod 255) - 127."""
    exps = bytes([EXPONENTS[rank] & 0xFF]) * blocks
    base = 13 * rank + 5 * step + 3 * rnd + 11 * chunk
    values = bytes(((7 * i + base) % 255 - 127) & 0xFF for i in range(blocks * codec.BLOCK))
    return exps + values


def contributions(rank: int, step: int, rnd: int = 0, roster: int | Shares = SHARES
                  ) -> tuple[bytes, ...]:  # fmt: skip
    """What roster rank ``rank`` sends for each chunk (empty bytes for an empty chunk, and for
    every chunk with a share of 0)."""
    tb, of = total_blocks(), split(roster)
    out = []
    for k in range(len(of)):
        first, end = allreduce.chunk_blocks(tb, of, k)
        empty = end == first or of[rank] == 0
        out.append(b"" if empty else pseudo_chunk(rank, step, k, end - first, rnd))
    return tuple(out)


Rule = Callable[[list[np.ndarray], list[int]], np.ndarray]


def outer_rule(parts: list[np.ndarray], shares: list[int]) -> np.ndarray:
    return weighted_mean(parts, shares)


def per_step_rule(parts: list[np.ndarray], shares: list[int]) -> np.ndarray:
    return allreduce.reduce_chunk(parts, shares, sum(shares))


def unweighted_rule(parts: list[np.ndarray], shares: list[int]) -> np.ndarray:
    return weighted_mean(parts, [1] * len(parts))


def reduced(step: int, rnd: int = 0, roster: int | Shares = SHARES, chunk: int = 0,
            rule: Rule = outer_rule) -> bytes:  # fmt: skip
    """The owner's reduced chunk by the outer rule (or another ``rule``, to show they differ)."""
    of = split(roster)
    first, end = allreduce.chunk_blocks(total_blocks(), of, chunk)
    who = [r for r in range(len(of)) if of[r] > 0]
    parts = [codec.decode(contributions(r, step, rnd, of)[chunk], end - first) for r in who]
    return codec.encode(rule(parts, [of[r] for r in who]))[0]


def pins_the_rule(step: int, rnd: int, of: Shares, chunk: int, per_step: bool = True) -> None:
    """An unweighted mean (and, with ``per_step``, the per-step rule) gives other bytes for this
    chunk than the outer rule: a trace through it catches them. (The reduced chunk is quantized
    again, so the rules' last-bit differences show only where a value sits at a rounding edge;
    outer-rounds' shares 6, 3, 3 and its exponents 23 bits apart put some there.)"""
    mine = reduced(step, rnd, of, chunk)
    assert mine != reduced(step, rnd, of, chunk, unweighted_rule), (step, rnd, of, "unweighted")
    if per_step:
        assert mine != reduced(step, rnd, of, chunk, per_step_rule), (step, rnd, of, "per-step")


def outer_script(
    name: str, description: str, me: str, state: tuple[int, str] | None = None
) -> Script:
    """A script whose peers send pseudo-gradients and reduce by the outer rule."""
    return Script(name, description, me, state=state, contribute=contributions, reduce=reduced)


def stopped(s: Script, peers: tuple[str, ...], step: int) -> None:
    """The leader's stop done, repeated by the others; the run finishes."""
    stop = messages.Stop(RUN, "done", step, f"reached step {step}", {})
    for p in peers:
        s.send(p, stop)
    assert s.machine.finished


def sent_rosters(effects: list[fx.Effect]) -> list[tuple[int, int, tuple[str, ...], Shares]]:
    """Every roster the effects send (once, whoever it goes to)."""
    return sorted({(m.step, m.round, tuple(m.peers), tuple(m.shares))
                   for f in effects if isinstance(f, fx.SendMessage)
                   and isinstance(m := f.message, messages.Roster)})  # fmt: skip


def follower_outer_rounds() -> Script:
    s = outer_script("outer-rounds", "B follows leader A with C in an outer run (sync outer, 4 "
                     "inner steps a round) for 2 rounds with shares 6, 3, 3: each round B's "
                     "compute answers with its pseudo-gradient's chunks, B reduces its chunk by "
                     "the outer rule (the shares over their gcd as weights) and applies; the "
                     "run stops done.", B)  # fmt: skip
    s.connect(A, C)
    out = s.send(A, outer_config(2))
    assert any(isinstance(f, fx.SendMessage) and isinstance(f.message, messages.Ready)
               for f in out), out  # fmt: skip
    for step in (1, 2):
        pins_the_rule(step, 0, SHARES, 1)
        s.at(s.now + 1.0)
        out = s.send(A, roster_msg(step, 0, ABC, SHARES))
        assert [f for f in out if isinstance(f, fx.Compute)], out
        mine = contributions(1, step)
        s.feed(ev.ComputeDone(s.now, step, 0, loss_of(step), mine, REFERENCE_PROBE, 0.0))
        out = s.frames(A, FrameKind.CONTRIBUTION, contributions(0, step)[1], step, 0, 1)
        out += s.frames(C, FrameKind.CONTRIBUTION, contributions(2, step)[1], step, 0, 1)
        sent = [f.payload for f in out if isinstance(f, fx.SendPayload)
                and f.kind is FrameKind.REDUCED]  # fmt: skip
        assert sent == [reduced(step, 0, SHARES, 1)] * 2, "B's reduced chunk, to A and to C"
        out = s.frames(A, FrameKind.REDUCED, reduced(step, 0, SHARES, 0), step, 0, 0)
        out += s.frames(C, FrameKind.REDUCED, reduced(step, 0, SHARES, 2), step, 0, 2)
        digest = applied(out)
        for p in (A, C):
            s.send(p, messages.StepHash(RUN, step, 0, digest, loss_of(step), REFERENCE_PROBE,
                                        "numpy", 0.0))  # fmt: skip
    stop = messages.Stop(RUN, "done", 2, "reached step 2", {})
    s.send(A, stop)
    s.send(C, stop)
    assert s.machine.finished
    return s


def outer_join() -> Script:
    abcd = (A, B, C, D)
    s = outer_script("outer-join", "D joins an outer run of A, B, C between rounds 2 and 3: "
                     "the config (sync outer), the roster of round 2 without it, sync-request, "
                     "the checkpoint of round 2 (outer weights and momentum, in the trace "
                     "replica's form), then round 3 with shares 4, 2, 3, 3: D computes from the "
                     "restored state and reduces its chunk by the outer rule.",
                     D)  # fmt: skip
    s.connect(A, B, C)
    s.send(A, outer_config(3))
    out = s.send(A, roster_msg(2, 0, ABC, (4, 4, 4)))
    assert [f.message for f in out if isinstance(f, fx.SendMessage)] == [
        messages.SyncRequest(RUN)], out  # fmt: skip
    s.at(3.0)
    h2 = hashlib.sha256(b"daisychain-trace outer state at round 2").hexdigest()
    s.frames(A, FrameKind.CHECKPOINT, TraceReplica(2, h2).checkpoint(), 2)
    assert s.machine.replica.step == 2 and s.machine.replica.hash == h2
    of = (4, 2, 3, 3)
    pins_the_rule(3, 0, of, 3, per_step=False)
    s.at(4.0)
    s.send(A, roster_msg(3, 0, abcd, of))
    out = s.exchange_effects(3, 0, abcd, of)
    sent = {f.payload for f in out if isinstance(f, fx.SendPayload) and f.kind is FrameKind.REDUCED}
    assert sent == {reduced(3, 0, of, 3)}, "D's reduced chunk, by the outer rule"
    s.hashes(3, 0, abcd, applied(out))
    stopped(s, (A, B, C), 3)
    return s


def outer_peer_lost() -> Script:
    s = outer_script("outer-peer-lost", "Leader A of an outer run with B and C (4 inner steps "
                     "a round: its round timer is 4 step timeouts). Round 1 is whole; in round 2 "
                     "C's channel closes before its contribution reached A: A asks B again at "
                     "once and, repair_after later, re-commits round 2 as attempt 1 with A and B "
                     "(shares 6, 6): C's share no longer counts in A's mean (weights 1, 1). A "
                     "and B train round 3 and the run stops done.", A,
                     state=fresh_state())  # fmt: skip
    ab = (A, B)
    s.feed(ev.UserLead(s.now, outer_config(3), 3))
    s.connect(B, C)
    s.at(1.0)
    for p in (B, C):
        out = s.send(p, messages.Ready(RUN, 0, INIT, [q for q in ABC if q != p], 0.0))
    assert sent_rosters(out) == [(1, 0, ABC, (4, 4, 4))], out
    s.at(2.0)
    out = s.exchange_effects(1, 0, ABC, (4, 4, 4))
    s.hashes(1, 0, ABC, applied(out))
    s.at(3.0)
    s.compute(2, 0, ABC, (4, 4, 4))
    s.frames(B, FrameKind.CONTRIBUTION, contributions(1, 2, 0, (4, 4, 4))[0], 2, 0, 0)
    s.at(3.5)
    s.closed(C)
    s.timer()  # repair at once, from B (C is gone)
    out = s.timer()  # repair_after later: the round is re-committed without C
    assert sent_rosters(out) == [(2, 1, ab, (6, 6))], out
    # C's share would change A's mean: counted as a part of zeros (weight 4 of 16), or by the
    # per-step rule or without weights, the bytes differ.
    first, end = allreduce.chunk_blocks(total_blocks(), (6, 6), 0)
    parts = [codec.decode(contributions(r, 2, 1, (6, 6))[0], end - first) for r in (0, 1)]
    counted = weighted_mean([*parts, np.zeros_like(parts[0])], [6, 6, 4])
    assert codec.encode(counted)[0] != reduced(2, 1, (6, 6), 0)
    s.at(s.now + 0.5)
    committed = s.now  # A commits round 3 at its apply of round 2
    out = s.exchange_effects(2, 1, ab, (6, 6))
    sent = {f.payload for f in out if isinstance(f, fx.SendPayload) and f.kind is FrameKind.REDUCED}
    assert sent == {reduced(2, 1, (6, 6), 0)}, out
    assert sent_rosters(out) == [(3, 0, ab, (6, 6))], out
    s.hashes(2, 1, ab, applied(out))
    s.at(s.now + 0.5)
    out = s.exchange_effects(3, 0, ab, (6, 6))
    applied(out)
    # The last round applied: A waits for B's hash until the round's timer, 4 step timeouts
    # after it committed the round.
    assert s.machine.next_deadline() == committed + 4 * s.machine.settings.timers.step_timeout_s
    out = s.hashes(3, 0, ab, s.machine.replica.hash)
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    assert [f.peer for f in out if isinstance(f, fx.SendMessage) and f.message == stop] == [B]
    stopped(s, (B,), 3)
    return s


def outer_uneven() -> Script:
    of = (2, 5, 1)
    s = outer_script("outer-uneven", "B follows leader A with C in an outer run of 8 "
                     "sequences a round, shared unevenly: A 2, B 5, C 1. B's share is the only "
                     "one at least half the largest, so B owns every block: it reduces the whole "
                     "mean from three parts weighted 2, 5, 1 (an unweighted mean gives other "
                     "bytes), sends it to A and C and applies it, for 2 rounds.", B)  # fmt: skip
    s.connect(A, C)
    s.send(A, outer_config(2, global_batch=sum(of)))
    for step in (1, 2):
        pins_the_rule(step, 0, of, 1, per_step=False)  # gcd 1: the rules agree here
        s.at(s.now + 1.0)
        s.send(A, roster_msg(step, 0, ABC, of))
        out = s.exchange_effects(step, 0, ABC, of)
        sent = [(f.peer, f.payload) for f in out
                if isinstance(f, fx.SendPayload) and f.kind is FrameKind.REDUCED]  # fmt: skip
        assert sent == [(A, reduced(step, 0, of, 1)), (C, reduced(step, 0, of, 1))], out
        s.hashes(step, 0, ABC, applied(out))
    stopped(s, (A, C), 2)
    return s


SCENARIOS: dict[str, Callable[[], Script]] = {
    "outer-rounds": follower_outer_rounds,
    "outer-join": outer_join,
    "outer-peer-lost": outer_peer_lost,
    "outer-uneven": outer_uneven,
}


def folder() -> Path:
    return Path(__file__).resolve().parents[1] / "vectors" / SUBDIR


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
            problems.append(
                f"{path}: stale; run PYTHONPATH=tests python -m protocol_traces.outer --write"
            )
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
