"""Private data (docs/PROTOCOL.md, "Private data"): the optional ``private_data`` flag of
``ready`` and ``sync-request`` (written only when true, absent reads as false, anything but a
JSON boolean refused as ``bad-message``), the machine that declares it (taken only before a run
is configured) and records who declared it, and the headless peer's record of it (a JSON event
once per peer, the step event's list, a line). The page's side: tests/js/privatedata.test.mjs
and tests/page/test_page_private_data.py."""

from __future__ import annotations

import json

import pytest

from daisychain.p2p.machine import events as ev
from daisychain.p2p.node import StepRecord
from daisychain.peer.main import Display
from daisychain.wire import messages
from protocol_traces.scenarios import ABC, follow, sent
from protocol_traces.script import RUN, A, B, C, D, Script, config, fresh_state, roster_msg

HASH = "ab" * 32
READY = {"type": "ready", "run": RUN, "step": 0, "hash": HASH, "peers": ["a"], "seq_s": 0.5}


def test_a_ready_without_the_flag_reads_false_and_encodes_as_before() -> None:
    m = messages.parse(json.dumps(READY))
    assert isinstance(m, messages.Ready) and m.private_data is False
    # The bytes a peer without private data writes are those of before the flag: the golden
    # traces (tests/vectors/protocol/) pin them.
    assert messages.encode(m) == (
        f'{{"run":"{RUN}","step":0,"hash":"{HASH}","peers":["a"],"seq_s":0.5,"type":"ready"}}'
    )
    assert messages.encode(messages.parse(json.dumps({**READY, "private_data": False}))) == (
        messages.encode(m)
    )


def test_a_true_flag_is_read_and_written_back() -> None:
    m = messages.parse(json.dumps({**READY, "private_data": True}))
    assert isinstance(m, messages.Ready) and m.private_data is True
    text = messages.encode(m)
    assert text.endswith(',"seq_s":0.5,"private_data":true,"type":"ready"}'), text
    assert messages.parse(text) == m
    s = messages.parse(json.dumps({"type": "sync-request", "run": RUN, "private_data": True}))
    assert s == messages.SyncRequest(RUN, private_data=True)
    assert messages.encode(s) == f'{{"run":"{RUN}","private_data":true,"type":"sync-request"}}'
    assert messages.encode(messages.SyncRequest(RUN)) == f'{{"run":"{RUN}","type":"sync-request"}}'


@pytest.mark.parametrize("value", ["true", 1, 0, None, [True], {"on": True}, 1.0])
@pytest.mark.parametrize("kind", ["ready", "sync-request"])
def test_a_flag_that_is_not_a_json_boolean_is_refused(kind: str, value: object) -> None:
    raw = {**READY, "private_data": value} if kind == "ready" else {
        "type": "sync-request", "run": RUN, "private_data": value}  # fmt: skip
    with pytest.raises(messages.MessageError) as info:
        messages.parse(json.dumps(raw))
    assert info.value.code == "bad-message"
    assert info.value.message == f"{kind}.private_data must be true, false or absent"
    assert "docs/PROTOCOL.md" in info.value.hint


def test_a_follower_declares_private_data_only_when_told_before_the_run() -> None:
    s = Script("private", "B has private data", B)
    assert s.feed(ev.UserPrivateData(s.now, True)) == []
    s.connect(A, C)
    ready = sent(s.send(A, config(3)), messages.Ready)
    assert [(p, getattr(m, "private_data", None)) for p, m in ready] == [(A, True)]
    assert s.machine.private_data_peers == {B}
    # Told otherwise once the run is configured: the run keeps what the ready said.
    assert s.feed(ev.UserPrivateData(s.now, False)) == []
    assert s.machine.private_data is True and s.machine.private_data_peers == {B}

    plain = Script("plain", "B has none", B)
    follow(plain, A, (C,), config(3))
    assert plain.machine.private_data_peers == frozenset()
    plain.feed(ev.UserPrivateData(plain.now, True))  # too late: ignored
    assert plain.machine.private_data is False


def test_a_joiner_declares_it_in_its_sync_request() -> None:
    s = Script("joiner", "D joins at step 5 with private data", D)
    s.feed(ev.UserPrivateData(s.now, True))
    follow(s, A, (B, C), config(8))
    asked = sent(s.send(A, roster_msg(5, 0, ABC)), messages.SyncRequest)
    assert asked == [(A, messages.SyncRequest(RUN, private_data=True))], asked


def test_the_leader_records_who_declared_it_itself_included() -> None:
    s = Script("leader", "A leads with private data; B declares some, C not", A,
               state=fresh_state())  # fmt: skip
    s.feed(ev.UserPrivateData(s.now, True))
    assert s.machine.private_data_peers == frozenset(), "no run yet: nothing to record"
    s.feed(ev.UserLead(s.now, config(3), 4))
    s.connect(B, C, D)
    init = fresh_state()[1]
    s.send(B, messages.Ready(RUN, 0, init, [A, C, D], 0.0, private_data=True))
    s.send(C, messages.Ready(RUN, 0, init, [A, B, D], 0.0))
    s.send(D, messages.SyncRequest(RUN, private_data=True))
    assert s.machine.private_data_peers == {A, B, D}


def record(private: tuple[str, ...]) -> StepRecord:
    return StepRecord(
        step=2, round=0, loss=3.0, hash="ab" * 32, roster=("a", "b"), shares=(8, 8), share=8,
        tokens=16 * 64, compute_s=0.5, exchange_s=0.2, exchange_work_s=0.1, bytes_sent=1000,
        bytes_early=400, leader="a", probe="cd" * 32, backend="numpy", private_data=private,
    )  # fmt: skip


def test_the_headless_leader_says_once_which_peer_has_private_data(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = Display(as_json=True)
    shown.step(record(("b",)))
    shown.step(record(("b",)))
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in events] == ["private-data", "step", "step"]
    assert events[0] == {"event": "private-data", "peer": "b", "step": 2}
    assert events[1]["private_data"] == ["b"] and events[2]["private_data"] == ["b"]
    Display(as_json=False).step(record(("b",)))
    err = capsys.readouterr().err
    assert "peer b trains on private data" in err and "only its gradients reach this run" in err
    Display(as_json=False).step(record(()))
    assert "private data" not in capsys.readouterr().err
