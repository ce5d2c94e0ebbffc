"""Protocol traces beyond tests/vectors/protocol/, played by the Python machine at test time.

A second implementation of the protocol machine (static/js/p2p/machine/) must answer exactly as
the Python machine on every sequence of events, not only on the stored traces. Two sources:

- ``extra_scenarios()``: runs with the events no stored trace has (``user-stop``, ``user-save``,
  ``user-private-data``, ``signaling-lost``) and refusals they do not reach (compute returning
  too few chunks, a checkpoint the replica refuses, a config the leader cannot train, a chunk the
  codec refuses);
- ``perturbed(directory, seed, variants)``: each stored trace with one to three of its events
  dropped, duplicated, swapped or delayed, or a frame bit or a text character damaged (seeded),
  fed to the Python machine, which writes the effects it hands back. A Python exception is
  reported (``crashes``) and cuts that variant there.

Both are traces in the stored format (tests/vectors/README.md, "Protocol traces"). Used by
``tests/js/protocol_traces.test.mjs`` (``python tests/protocol_variants.py`` with a JSON request
on stdin) and ``tests/browser/test_browser_protocol.py``.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import random
import sys
from pathlib import Path
from typing import Any

from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.wire import messages
from daisychain.wire.frames import FrameKind
from protocol_traces.jsonform import effect_to_json, event_from_json
from protocol_traces.scenarios import ABC, follow, lead_run, sent, stop_acks
from protocol_traces.script import (
    RUN,
    A,
    B,
    C,
    D,
    Script,
    build_machine,
    config,
    contributions,
    fresh_state,
    roster_msg,
)

Json = dict[str, Any]
TRACES = Path(__file__).resolve().parent / "vectors" / "protocol"


def extra_scenarios() -> list[Json]:
    """Ten scenarios; each asserts that it shows what its name says."""
    out: list[Json] = []

    s = Script("x-leader-stop-save", "A leads B and C; its user saves after step 1 (save_every "
               "2 saves step 2 too) and ends the run, which stops at the next boundary.", A,
               state=fresh_state(), can_save=True, save_every=2)  # fmt: skip
    lead_run(s, (B, C), steps=5)
    for step in (1, 2):
        s.at(s.now + 1.0)
        digest = s.exchange(step, 0, ABC)
        if step == 1:
            got = s.feed(ev.UserSave(s.now))
            assert [type(f) for f in got] == [fx.SendMessage, fx.SendMessage, fx.Save], got
        else:
            assert s.feed(ev.UserStop(s.now, "enough")) == []
        s.hashes(step, 0, ABC, digest)
    s.at(s.now + 1.0)
    stop = messages.Stop(RUN, "leader-request", 2, "enough at step 2", {})
    assert _outcome(stop_acks(s, (B, C), stop)).reason == "leader-request"
    out.append(s.trace())

    s = Script("x-follower-lost", "B follows A; its user-stop is ignored (only the leader ends "
               "a run), user-save saves, then the signaling server is lost.", B,
               can_save=True)  # fmt: skip
    follow(s, A, (C,), config(3))
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.exchange(1, 0, ABC)
    assert s.feed(ev.UserStop(s.now, "not mine to stop")) == []
    s.feed(ev.UserSave(s.now))
    s.at(2.0)
    assert _outcome(s.feed(ev.SignalingLost(s.now, "socket closed"))).reason == "error"
    out.append(s.trace())

    s = Script("x-chunk-count", "B: its compute returns 2 chunks for a roster of 3.", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    got = s.feed(ev.ComputeDone(s.now, 1, 0, 3.5, contributions(1, 1, 0, 2), "0" * 64, 0.0))
    assert "2 chunks for 3 peers" in _outcome(got).message
    out.append(s.trace())

    s = Script("x-chunk-size", "B: its compute returns chunks cut for shares 6, 3, 3 in a "
               "roster of 4, 4, 4.", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    got = s.feed(ev.ComputeDone(s.now, 1, 0, 3.5, contributions(1, 1, 0, (6, 3, 3)), "0" * 64,
                                0.0))  # fmt: skip
    assert "compute returned 1285 bytes for chunk 0 of 771" in _outcome(got).message
    out.append(s.trace())

    s = Script("x-bad-checkpoint", "D joins at step 5; the leader's checkpoint is refused by "
               "the replica: the run ends with error.", D)  # fmt: skip
    follow(s, A, (B, C), config(8))
    s.at(1.0)
    s.send(A, roster_msg(5, 0, ABC))
    got = s.frames(A, FrameKind.CHECKPOINT, b"DCTRACE1" + b"\0" * 68, 4)
    assert "checkpoint was refused" in _outcome(got).message
    out.append(s.trace())

    s = Script("x-cannot-lead", "A is asked to lead width 65 with 4 heads.", A,
               state=fresh_state())  # fmt: skip
    got = s.feed(ev.UserLead(s.now, config(3, width=65, heads=4), 2))
    assert _outcome(got).code == "incompatible"
    out.append(s.trace())

    s = Script("x-private-data", "B trains on private data: its user says so in the lobby, "
               "its ready says so; the user's change during the run is ignored (the leader was "
               "told already).", B)  # fmt: skip
    assert s.feed(ev.UserPrivateData(s.now, True)) == []
    s.connect(A, C)
    ready = sent(s.send(A, config(3)), messages.Ready)
    assert [(p, m.private_data) for p, m in ready if isinstance(m, messages.Ready)] == [(A, True)]
    s.send(A, roster_msg(1, 0, ABC))
    assert s.feed(ev.UserPrivateData(s.now, False)) == []
    s.exchange(1, 0, ABC)
    assert s.machine.private_data_peers == {B}, s.machine.private_data_peers
    out.append(s.trace())

    s = Script("x-private-data-joiner", "D joins at step 5 with private data: its sync-request "
               "says so.", D)  # fmt: skip
    s.feed(ev.UserPrivateData(s.now, True))
    follow(s, A, (B, C), config(8))
    s.at(1.0)
    asked = sent(s.send(A, roster_msg(5, 0, ABC)), messages.SyncRequest)
    assert asked == [(A, messages.SyncRequest(RUN, private_data=True))], asked
    out.append(s.trace())

    s = Script("x-private-data-leader", "A leads with private data of its own; B's ready says "
               "it has some too, C's does not: the same rosters as without, and A records A "
               "and B.", A, state=fresh_state())  # fmt: skip
    s.feed(ev.UserPrivateData(s.now, True))
    s.feed(ev.UserLead(s.now, config(3), 3))
    s.connect(B, C)
    s.at(s.now + 1.0)
    s.send(B, messages.Ready(RUN, 0, fresh_state()[1], [A, C], 0.0, private_data=True))
    s.send(C, messages.Ready(RUN, 0, fresh_state()[1], [A, B], 0.0))
    s.at(s.now + 1.0)
    s.hashes(1, 0, ABC, s.exchange(1, 0, ABC))
    assert s.machine.private_data_peers == {A, B}, s.machine.private_data_peers
    out.append(s.trace())

    s = Script("x-codec-refusal", "B: C's contribution carries a block exponent of 101.", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    bad = bytearray(contributions(2, 1, 0, 3)[1])
    bad[0] = 101
    got = s.frames(C, FrameKind.CONTRIBUTION, bytes(bad), 1, 0, 1)
    assert any(isinstance(f, fx.Close) for f in got), got
    s.at(30.0)
    s.feed(ev.Timer(s.now))
    out.append(s.trace())
    return out


def _outcome(effects: list[fx.Effect]) -> fx.Outcome:
    done = [f for f in effects if isinstance(f, fx.Finished)]
    assert len(done) == 1, effects
    return done[0].outcome


def perturbed(directory: Path, seed: int, variants: int) -> tuple[list[Json], list[str]]:
    rng = random.Random(seed)
    out: list[Json] = []
    crashes: list[str] = []
    for path in sorted(directory.glob("*.json")):
        base = json.loads(path.read_text(encoding="utf-8"))
        for v in range(variants):
            events, what = _perturb(rng, [copy.deepcopy(s["event"]) for s in base["steps"]])
            machine = build_machine(base["setup"])
            steps = []
            for e in events:
                try:
                    effects = [effect_to_json(f) for f in machine.handle(event_from_json(e))]
                except Exception as exc:  # a Python crash: reported, the variant is cut there
                    crashes.append(f"{base['name']} {what}: {type(exc).__name__}: {exc}")
                    break
                steps.append({"event": e, "effects": effects, "deadline": machine.next_deadline()})
            out.append({**base, "name": f"{base['name']}~{v} {' '.join(what)}", "steps": steps})
    return out, crashes


def _perturb(rng: random.Random, events: list[Json]) -> tuple[list[Json], list[str]]:
    what = []
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(events))
        kind = rng.choice(["drop", "dup", "swap", "damage", "text", "late"])
        e = events[i]
        if kind == "drop" and len(events) > 1:
            events.pop(i)
        elif kind == "dup":
            events.insert(i, copy.deepcopy(e))
        elif kind == "swap" and i + 1 < len(events):
            a, b = events[i], events[i + 1]
            a["at"], b["at"] = b["at"], a["at"]
            events[i], events[i + 1] = b, a
        elif kind == "damage" and e["event"] == "frame":
            raw = bytearray(base64.b64decode(e["data"]))
            raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
            e["data"] = base64.b64encode(bytes(raw)).decode("ascii")
        elif kind == "text" and e["event"] == "message":
            t = e["text"]
            j = rng.randrange(len(t))
            e["text"] = rng.choice([t[:j], t[:j] + rng.choice('0"x}') + t[j + 1 :]])
        elif kind == "late":
            for later in events[i:]:
                later["at"] += 7.5
        else:
            continue
        what.append(f"{kind}@{i}")
    return events, what


def main() -> None:
    """stdin: {"extra": bool, "seed": int, "variants": int}; stdout: the traces as JSON."""
    logging.disable(logging.CRITICAL)  # the scenarios provoke refusals on purpose
    request = json.load(sys.stdin)
    traces, crashes = perturbed(TRACES, request["seed"], request["variants"])
    extra = extra_scenarios() if request.get("extra") else []
    print(json.dumps({"extra": extra, "perturbed": traces, "crashes": crashes}))


if __name__ == "__main__":
    main()
