"""The Python protocol machine (``p2p/machine/``): behaviour pinned by mutants that survived the
protocol tests and the trace replays (docs/TESTING.md)."""

from __future__ import annotations

from daisychain.p2p import messages
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.machine.peers import PeerTable
from daisychain.p2p.traces.scenarios import ABC, errors, follow, lead_run, sent, stops, train
from daisychain.p2p.traces.script import RUN, A, B, C, Script, config, fresh_state


def test_a_leader_refuses_a_run_configuration_from_another_peer() -> None:
    """A peer that leads its own run answers anyone's ``config`` with ``wrong-run`` to that
    peer, and keeps its own run (a mutant called ``_reject`` without the peer: a TypeError)."""
    s = Script("t", "leader refuses config", A, state=fresh_state())
    lead_run(s, (B, C))
    out = s.send(B, config(7))
    assert [(p, e.code) for p, e in errors(out)] == [(B, "wrong-run")]
    assert errors(out)[0][1].message == "this peer leads its own run"
    assert s.machine.config is not None and s.machine.config.steps == 3


def test_a_peer_of_another_protocol_version_is_dropped_from_a_run() -> None:
    """A ``version-mismatch`` error from a peer of a running leader drops and closes that peer
    (a mutant passed the hint as the message: a TypeError)."""
    s = Script("t", "other version", A, state=fresh_state())
    lead_run(s, (B, C))
    error = messages.Error("version-mismatch", "protocol 9 here", "upgrade this peer")
    out = s.send(C, error)
    assert fx.Close(C) in out
    assert not s.machine.finished


def test_a_leaders_save_asks_every_peer_to_save_this_step() -> None:
    """UserSave at the leader broadcasts ``save`` of its run and its current step (mutants sent
    None, or no step)."""
    s = Script("t", "save", A, state=fresh_state())
    lead_run(s, (B, C))
    out = s.feed(ev.UserSave(s.now))
    step = s.machine.replica.step
    assert sent(out, messages.Save) == [
        (B, messages.Save(RUN, step)),
        (C, messages.Save(RUN, step)),
    ]


def test_a_peer_is_marked_gone_once() -> None:
    """``PeerTable.gone`` is True only the first time (known or not): the machine acts on a
    departure once (a mutant answered True again)."""
    table = PeerTable("me", lambda kind: 0)
    assert table.gone("x") is True
    assert table.gone("x") is False
    table.opened("y", 1.0)
    table.greet("y")
    assert table.gone("y") is True
    assert table.gone("y") is False
    assert table.gone_set == {"x", "y"}


def test_a_stop_from_a_gone_leader_needs_no_acknowledgement_from_it() -> None:
    """The stop a gone leader sent is recorded as that peer's: the stopping peer does not wait
    for it to acknowledge its own stop (a mutant recorded it as None's)."""
    s = Script("t", "race", B)
    follow(s, A, (C,), config(10))
    train(s, A, ABC, range(1, 2))
    s.left(A)
    out = s.send(A, messages.Stop(RUN, "leader-request", 1, "ended", {}))
    assert stops(out) and s.machine.phase.phase.value == "stopped"
    assert A in s.machine.stopping.stop_from
    assert A not in s.machine.stopping.waiting


def test_no_repair_is_asked_before_our_own_gradient_is_computed() -> None:
    """Past repair_at, a follower whose own gradient is not computed yet asks nobody for
    pieces (a mutant asked as soon as the config was set)."""
    s = Script("t", "early repair", B)
    follow(s, A, (C,), config(3))
    s.at(s.now + 1.0)
    out = s.send(A, messages.Roster(RUN, 1, 0, list(ABC)))
    assert any(isinstance(f, fx.Compute) for f in out)
    out = s.timer()
    assert [f for f in out if isinstance(f, fx.SendMessage)] == []
