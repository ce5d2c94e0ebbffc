"""The Python protocol machine (``p2p/machine/``): behaviour pinned by mutants that survived the
protocol tests and the trace replays (docs/TESTING.md)."""

from __future__ import annotations

from daisychain.p2p import messages
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.traces.scenarios import errors, lead_run
from daisychain.p2p.traces.script import A, B, C, Script, config, fresh_state


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
