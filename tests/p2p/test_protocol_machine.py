"""The sans-IO protocol core (``daisychain.p2p.machine``): it imports no I/O, ``p2p`` has no
import cycle and no module uses another's private names, and failover, repair, guard and stop
behave as docs/PROTOCOL.md says, driven by events alone (no root, no network, no clock)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import pyast
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.machine.attempt import AttemptPhase
from daisychain.p2p.machine.peers import PeerState
from daisychain.wire import messages
from daisychain.wire.frames import FrameKind
from protocol_traces.scenarios import (
    ABC,
    INIT,
    errors,
    finished,
    follow,
    honest_hash,
    lead_run,
    repairs,
    rosters,
    stops,
    train,
)
from protocol_traces.script import (
    RUN,
    A,
    B,
    C,
    D,
    Script,
    config,
    contributions,
    fresh_state,
    reduced,
    roster_msg,
)
from protocol_traces.trace_replica import TraceReplica

P2P = Path(__file__).resolve().parents[2] / "server" / "daisychain" / "p2p"
BANNED = ("asyncio", "aiortc", "aioice", "time", "threading", "socket", "selectors", "subprocess")
PURE = ("run", "messages", "frames", "codec", "allreduce", "runconfig", "footprint")
CORE = [
    *sorted((P2P / "machine").glob("*.py")),
    *(P2P / f"{name}.py" for name in PURE),
    *sorted((P2P / "traces").glob("*.py")),
    # The simulator drives the machines with modelled time: no clock, socket or sleep either.
    *sorted((P2P.parent / "sim").glob("*.py")),
    P2P / "traffic.py",
]


# ---------------------------------------------------------------------------------------------
# static checks


def imported_modules(tree: ast.AST, package: str) -> set[str]:
    """Every module an AST imports (relative imports resolved against ``package``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.add(base)
            out |= {f"{base}.{alias.name}" for alias in node.names}
    return out


def banned_imports(source: str, package: str = "daisychain.p2p.machine") -> list[str]:
    found = imported_modules(pyast.parse(source), package)
    return sorted(m for m in found if m.split(".")[0] in BANNED)


def module_path(name: str) -> Path | None:
    root = P2P.parent.parent
    for candidate in (root / (name.replace(".", "/") + ".py"),
                      root / name.replace(".", "/") / "__init__.py"):  # fmt: skip
        if candidate.exists():
            return candidate
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(P2P.parent.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_core_modules_import_no_io() -> None:
    """Direct imports of every core module, and of every daisychain module they reach."""
    seen: set[str] = set()
    todo = [module_name(p) for p in CORE]
    problems = []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = module_path(name)
        if path is None:
            continue
        source = path.read_text(encoding="utf-8")
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        if bad := banned_imports(source, package):
            problems.append(f"{name}: {bad}")
        todo += [m for m in imported_modules(pyast.parse(source), package)
                 if m.startswith("daisychain.")]  # fmt: skip
    assert "daisychain.p2p.machine.machine" in seen and len(seen) > 20
    assert "daisychain.sim.driver" in seen
    assert not problems, problems


@pytest.mark.parametrize(
    "planted",
    ["import time", "from asyncio import Queue", "import threading as t", "from aiortc import x",
     "import socket", "import time as clock"],
)  # fmt: skip
def test_the_scan_fails_on_a_planted_import(planted: str) -> None:
    source = (P2P / "machine" / "machine.py").read_text(encoding="utf-8")
    assert banned_imports(source) == []
    assert banned_imports(source.replace("import logging\n", f"import logging\n{planted}\n"))


def test_the_scan_fails_on_a_clock_planted_in_the_simulator() -> None:
    source = (P2P.parent / "sim" / "driver.py").read_text(encoding="utf-8")
    assert banned_imports(source, "daisychain.sim") == []
    planted = source.replace("import math\n", "import math\nimport time\n")
    assert banned_imports(planted, "daisychain.sim") == ["time"]


def p2p_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in P2P.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = imported_modules(pyast.parse(path.read_text(encoding="utf-8")), package)
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the graph (as a path), or None; packages count as importing nothing of
    their own submodules' (``__init__`` is imported first)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if m.startswith(n + "."):
                continue  # a package re-exporting its submodule is not a cycle
            if state.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if m not in state and (cycle := visit(m)):
                return cycle
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (cycle := visit(n)):
            return cycle
    return None


def test_p2p_has_no_import_cycle() -> None:
    assert find_cycle(p2p_graph()) is None, find_cycle(p2p_graph())


def test_the_cycle_check_finds_a_planted_cycle() -> None:
    graph = p2p_graph()
    graph["daisychain.p2p.run"] = graph["daisychain.p2p.run"] | {"daisychain.p2p.machine.machine"}
    assert find_cycle(graph) is not None


def private_uses(source: str) -> list[str]:
    """Private names of other modules or objects: ``from m import _x``, ``m._x`` or ``obj._x``
    on anything but ``self``/``cls`` (dunders are public protocol)."""
    out = []
    for node in ast.walk(pyast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            out += [f"from {node.module} import {a.name}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]  # fmt: skip
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if node.attr.startswith("__"):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            out.append(f"{ast.unparse(node)} (line {node.lineno})")
    return out


def test_no_p2p_module_uses_another_modules_private_names() -> None:
    problems = {
        module_name(p): uses
        for p in sorted(P2P.rglob("*.py"))
        if (uses := private_uses(p.read_text(encoding="utf-8")))
    }
    assert not problems, problems


@pytest.mark.parametrize("planted", ["node._send(peer, m)", "from daisychain.p2p.node import _x"])
def test_the_private_name_check_finds_a_planted_use(planted: str) -> None:
    assert private_uses(f"def f(node, peer, m):\n    {planted}\n")


# ---------------------------------------------------------------------------------------------
# behaviour, event by event


def test_failover_successor_recommits_and_leads() -> None:
    s = Script("t", "failover", B)
    follow(s, A, (C,), config(3))
    train(s, A, ABC, range(1, 2))
    s.at(s.now + 1.0)
    s.send(A, roster_msg(2, 0, ABC))
    s.compute(2, 0, ABC)
    assert s.machine.leader == A and not s.machine.is_leader
    s.closed(A)
    assert s.machine.is_leader and s.machine.peers.state(A) is PeerState.GONE
    # The successor waits repair_after before it re-commits (it may still get the pieces).
    deadline = s.machine.next_deadline()
    assert deadline == s.now
    s.timer()
    out = s.timer()
    assert [(r.step, r.round) for r in rosters(out)] == [(2, 1)]


def test_a_gone_peer_is_never_readmitted() -> None:
    s = Script("t", "gone", B)
    follow(s, A, (C,), config(3))
    s.closed(C)
    assert s.feed(ev.ChannelOpened(s.now, C)) == []
    assert s.text(C, json.dumps({"type": "hello", "version": 1, "name": "again"})) == []
    assert s.machine.peers.state(C) is PeerState.GONE


def test_repair_is_served_only_from_what_is_held() -> None:
    s = Script("t", "repair", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    s.compute(1, 0, ABC)
    mine = contributions(1, 1, 0, 3)

    def payloads(out: list[fx.Effect]) -> list[tuple[str, FrameKind, bytes]]:
        return [(f.peer, f.kind, f.payload) for f in out if isinstance(f, fx.SendPayload)]

    # Our contribution to chunk 0 goes to its owner only, again, byte for byte.
    assert payloads(s.send(A, messages.Repair(RUN, 1, 0, "contribution", 0))) == [
        (A, FrameKind.CONTRIBUTION, mine[0])]  # fmt: skip
    assert payloads(s.send(C, messages.Repair(RUN, 1, 0, "contribution", 0))) == []
    # A reduced chunk we do not hold yet, an attempt we never had, a chunk out of range.
    assert payloads(s.send(C, messages.Repair(RUN, 1, 0, "reduced", 1))) == []
    assert payloads(s.send(C, messages.Repair(RUN, 9, 0, "reduced", 0))) == []
    assert payloads(s.send(C, messages.Repair(RUN, 1, 0, "reduced", 7))) == []


def test_crc_damage_is_repaired_without_closing_the_channel() -> None:
    s = Script("t", "crc", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    s.compute(1, 0, ABC)
    out = s.frames(A, FrameKind.CONTRIBUTION, contributions(0, 1, 0, 3)[1], 1, 0, 1, damage=True)
    assert repairs(out) == {(A, "contribution", 1)}
    assert not any(isinstance(f, fx.Close) for f in out)
    assert s.machine.peers.state(A) is PeerState.GREETED


def test_missing_pieces_are_asked_for_after_repair_after() -> None:
    s = Script("t", "timer", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    s.compute(1, 0, ABC)
    assert s.machine.next_deadline() == s.now + 5.0
    out = s.timer()
    assert repairs(out) >= {(A, "contribution", 1), (C, "contribution", 1)}
    missing = [f.message for f in out if isinstance(f, fx.SendMessage)
               and isinstance(f.message, messages.Missing)]  # fmt: skip
    assert missing == [messages.Missing(RUN, 1, 0, [A, C])]
    assert s.machine.next_deadline() == s.now + 5.0, "the timer moved on: it cannot spin"


def test_the_guard_stops_a_fork_and_never_saves_it() -> None:
    s = Script("t", "guard", B, can_save=True)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    digest = s.exchange(1, 0, ABC)
    out = s.hashes(1, 0, (A,), "f" * 64)
    outcome_stop = stops(out)
    assert outcome_stop and outcome_stop[0][1].reason == "fork"
    assert outcome_stop[0][1].hashes == {A: "f" * 64, B: digest}
    assert not any(isinstance(f, fx.Save) for f in out), "a forked state is never saved"


def test_a_matching_hash_does_not_stop_the_run() -> None:
    s = Script("t", "guard", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    digest = s.exchange(1, 0, ABC)
    assert digest == honest_hash(INIT, 1, 0, 3)
    assert not stops(s.hashes(1, 0, ABC, digest))


def test_stop_lingers_until_every_peer_acknowledged_or_the_deadline() -> None:
    s = Script("t", "stop", B)
    follow(s, A, (C,), config(3))
    stop = messages.Stop(RUN, "leader-request", 0, "over", {})
    out = s.send(A, stop)
    assert stops(out) == [(A, stop), (C, stop)], "repeated to everyone, the sender included"
    assert not any(isinstance(f, fx.Finished) for f in out), "C has not acknowledged"
    assert s.machine.next_deadline() == s.now + 10.0
    s.at(s.now + 9.0)
    assert s.send(C, messages.Ready(RUN, 0, INIT, [], 0.0)) == [], "not an acknowledgement"
    out = s.timer()
    assert finished(out).reason == "leader-request"
    assert s.machine.next_deadline() is None and s.feed(ev.Timer(s.now + 1)) == []


def test_a_stop_from_a_gone_leader_wins_over_failover() -> None:
    s = Script("t", "race", B)
    follow(s, A, (C,), config(10))
    train(s, A, ABC, range(1, 2))
    s.left(A)
    assert s.machine.is_leader
    stop = messages.Stop(RUN, "leader-request", 1, "ended", {})
    out = s.send(A, stop)
    assert stops(out) and s.machine.phase.phase.value == "stopped"
    # ...but only a stop of this run, and only from a peer that said hello.
    s2 = Script("t", "race", B)
    follow(s2, A, (C,), config(10))
    train(s2, A, ABC, range(1, 2))
    s2.left(A)
    other = messages.Stop("f" * 16, "leader-request", 1, "ended", {})
    assert s2.send(A, other) == []


def test_user_stop_ends_the_run_at_the_boundary_only_for_the_leader() -> None:
    s = Script("t", "user stop", A, state=fresh_state())
    lead_run(s, (B, C), steps=10)
    s.feed(ev.UserStop(s.now, "enough"))
    digest = s.exchange(1, 0, ABC)
    out = s.hashes(1, 0, ABC, digest)
    assert [m.reason for _, m in stops(out)] == ["leader-request", "leader-request"]
    follower = Script("t", "user stop", B)
    follow(follower, A, (C,), config(3))
    assert follower.feed(ev.UserStop(follower.now, "enough")) == []
    assert follower.machine.leadership.end_requested == ""


def test_hostile_config_is_refused_with_a_hint_and_the_peer_stays_up() -> None:
    s = Script("t", "hostile", B)
    s.connect(A, D)
    for bad in (config(width=65, heads=4), config(width=32, heads=1)):
        out = s.send(A if bad.model.width == 65 else D, bad)
        refused = errors(out)
        assert [e.code for _, e in refused] == ["incompatible"] and refused[0][1].hint
        assert s.machine.config is None and not s.machine.finished
    assert s.machine.phase.phase.value == "lobby"


def test_a_roster_before_the_state_asks_for_it() -> None:
    s = Script("t", "resume", B)
    s.connect(A, C)
    out = s.send(A, config(10, resume=(4, "a" * 64)))
    assert [type(f.message).__name__ for f in out if isinstance(f, fx.SendMessage)] == [
        "SyncRequest"]  # fmt: skip
    out = s.send(A, roster_msg(5, 0, ABC))
    assert not any(isinstance(f, fx.Compute) for f in out)


def test_an_unsolicited_checkpoint_frame_is_refused() -> None:
    s = Script("t", "checkpoint", B)
    follow(s, A, (C,), config(3))
    out = s.frames(C, FrameKind.CHECKPOINT, b"x" * 76, 0)
    assert [e.code for _, e in errors(out)] == ["bad-frame"]
    assert Close_of(out) == [C]


def Close_of(out: list[fx.Effect]) -> list[str]:
    return [f.peer for f in out if isinstance(f, fx.Close)]


def test_a_contribution_for_another_chunk_is_refused() -> None:
    s = Script("t", "chunk", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    s.compute(1, 0, ABC)
    out = s.frames(C, FrameKind.CONTRIBUTION, contributions(2, 1, 0, 3)[0], 1, 0, 0)
    assert [e.code for _, e in errors(out)] == ["bad-frame"] and Close_of(out) == [C]


def test_compute_for_an_abandoned_attempt_is_ignored() -> None:
    s = Script("t", "abandoned", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    s.send(A, roster_msg(1, 1, [A, B]))
    assert s.compute(1, 0, ABC) == []
    attempt = s.machine.store.get((1, 1))
    assert attempt is not None and attempt.phase is AttemptPhase.COMPUTING


def test_compute_failure_ends_the_run_with_an_error() -> None:
    s = Script("t", "failed", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    outcome = finished(s.feed(ev.ComputeFailed(s.now, 1, 0, "MemoryError()")))
    assert outcome.reason == "error" and "MemoryError" in outcome.message


def test_reduced_chunks_from_a_non_roster_peer_are_refused() -> None:
    s = Script("t", "non-roster", B)
    follow(s, A, (C, D), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    out = s.frames(D, FrameKind.REDUCED, reduced(1, 0, 3, 0), 1, 0, 0)
    assert [e.code for _, e in errors(out)] == ["bad-frame"] and Close_of(out) == [D]


def test_a_message_before_hello_is_refused() -> None:
    s = Script("t", "before hello", B)
    s.feed(ev.ChannelOpened(s.now, A))
    out = s.send(A, config(3))
    assert [(p, e.code) for p, e in errors(out)] == [(A, "bad-message")] and Close_of(out) == [A]
    assert "before hello" in errors(out)[0][1].message


def test_a_channel_without_hello_is_closed_at_the_deadline_only() -> None:
    s = Script("t", "hello timeout", B)
    s.feed(ev.ChannelOpened(s.now, A))
    assert s.machine.next_deadline() == 20.0
    assert s.feed(ev.Timer(19.5)) == []
    out = s.timer()
    assert [(p, e.message) for p, e in errors(out)] == [(A, "no hello in time")]
    assert s.machine.next_deadline() is None


def test_pieces_that_arrive_before_their_roster_are_kept() -> None:
    s = Script("t", "early", B)
    follow(s, A, (C,), config(3))
    for j, p in ((0, A), (2, C)):  # contributions and reduced chunks, all before roster 1
        s.frames(p, FrameKind.CONTRIBUTION, contributions(j, 1, 0, 3)[1], 1, 0, 1)
        s.frames(p, FrameKind.REDUCED, reduced(1, 0, 3, j), 1, 0, j)
    s.send(A, roster_msg(1, 0, ABC))
    digest = [f for f in s.compute(1, 0, ABC) if isinstance(f, fx.StepApplied)]
    assert [a.hash for a in digest] == [honest_hash(INIT, 1, 0, 3)]


def test_a_refused_checkpoint_ends_the_run_and_only_the_leaders_counts() -> None:
    s = Script("t", "checkpoint", D)
    s.connect(A, B)
    s.send(A, config(10, resume=(4, "a" * 64)))
    good = TraceReplica(4, "a" * 64).checkpoint()
    assert s.frames(B, FrameKind.CHECKPOINT, good, 4) == [], "not from the leader: ignored"
    assert s.machine.replica.step == 0
    outcome = finished(s.frames(A, FrameKind.CHECKPOINT, b"DCTRACE1" + bytes(68), 4))
    assert outcome.reason == "error" and "checkpoint was refused" in outcome.message


def test_a_step_that_never_completes_ends_the_run_after_256_rounds() -> None:
    s = Script("t", "rounds", A, state=fresh_state())
    lead_run(s, (B,), steps=3, min_peers=2)
    out: list[fx.Effect] = []
    for _ in range(2000):
        out = s.timer()
        if any(isinstance(f, fx.Finished) for f in out):
            break
    outcome = finished(out)
    assert outcome.reason == "error" and "failed 256 times" in outcome.message


# -- protocol v2: pieces a roster with shares does not allow ---------------------------------

SHARES = (8, 0, 4)  # B follows without computing: its chunk is empty, it contributes nothing


def _c_in_roster_with_b_at_zero() -> Script:
    s = Script("t", "C follows A; B's share is 0", C)
    follow(s, A, (B,), config(2))
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC, SHARES))
    return s


def test_a_contribution_from_a_share_of_zero_is_refused() -> None:
    s = _c_in_roster_with_b_at_zero()
    forged = contributions(0, 1, 0, SHARES)[2]  # well-formed bytes for C's chunk
    out = s.frames(B, FrameKind.CONTRIBUTION, forged, 1, 0, 2)
    assert [(p, e.code) for p, e in errors(out)] == [(B, "bad-frame")], out
    assert "from a share of 0" in errors(out)[0][1].message
    assert any(isinstance(f, fx.Close) and f.peer == B for f in out)


def test_a_piece_for_an_empty_chunk_is_refused() -> None:
    s = _c_in_roster_with_b_at_zero()
    out = s.frames(A, FrameKind.REDUCED, reduced(1, 0, SHARES, 0)[:257], 1, 0, 1)
    assert [(p, e.code) for p, e in errors(out)] == [(A, "bad-frame")], out
    assert "empty chunk 1" in errors(out)[0][1].message


def test_a_share_of_zero_computes_only_the_probe_and_sends_nothing() -> None:
    s = Script("t", "B follows A with C at share 0", B)
    follow(s, A, (C,), config(2))
    s.at(1.0)
    out = s.send(A, roster_msg(1, 0, ABC, SHARES))
    assert [f for f in out if isinstance(f, fx.Compute)] == [fx.Compute(1, 0, 1, SHARES)]
    out = s.compute(1, 0, ABC, SHARES, seq_s=2.0)
    assert not [f for f in out if isinstance(f, fx.SendPayload)], out
    a = s.machine.store.get((1, 0))
    assert a is not None and not a.contributes and not a.owns_chunk
    assert a.missing_from() == {A, C}, "it waits only for the two reduced chunks"
