"""The Python protocol machine (``p2p/machine/``): behaviour pinned by mutants that survived the
protocol tests and the trace replays (docs/TESTING.md)."""

from __future__ import annotations

import math

from daisychain.model.params import param_shapes
from daisychain.p2p import runconfig
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.machine.guard import SyncGuard
from daisychain.p2p.machine.peers import PeerState, PeerTable
from daisychain.wire import frames, messages
from daisychain.wire.frames import FrameKind
from protocol_traces.scenarios import (
    ABC,
    INIT,
    errors,
    finished,
    follow,
    lead_run,
    repairs,
    rosters,
    sent,
    stops,
    train,
)
from protocol_traces.script import (
    REFERENCE_PROBE,
    RUN,
    TOKENIZER,
    VOCAB,
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
    out = s.send(A, roster_msg(1, 0, ABC))
    assert any(isinstance(f, fx.Compute) for f in out)
    out = s.timer()
    assert [f for f in out if isinstance(f, fx.SendMessage)] == []


# ---------------------------------------------------------------------------------------------
# second sample (seed 23)


def payloads_sent(out: list[fx.Effect]) -> list[tuple[str, FrameKind, int, int, int, bytes]]:
    return [
        (f.peer, f.kind, f.step, f.round, f.chunk, f.payload)
        for f in out
        if isinstance(f, fx.SendPayload)
    ]


def closes(out: list[fx.Effect]) -> list[str]:
    return [f.peer for f in out if isinstance(f, fx.Close)]


def test_missing_names_a_peer_whose_contribution_never_came_though_its_chunk_did() -> None:
    """Past repair_at, ``missing`` to the leader names every roster peer whose pieces this
    peer still waits for: C's reduced chunk arrived but its contribution to ours did not, so C
    is named (a mutant counted only the reduced chunks)."""
    s = Script("t", "missing", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    s.compute(1, 0, ABC)
    s.frames(A, FrameKind.CONTRIBUTION, contributions(0, 1, 0, 3)[1], 1, 0, 1)
    s.frames(A, FrameKind.REDUCED, reduced(1, 0, 3, 0), 1, 0, 0)
    s.frames(C, FrameKind.REDUCED, reduced(1, 0, 3, 2), 1, 0, 2)
    out = s.timer()
    assert sent(out, messages.Missing) == [(A, messages.Missing(RUN, 1, 0, [C]))]
    assert (C, "contribution", 1) in repairs(out)


def test_a_hash_recorded_without_a_backend_is_tallied_unknown() -> None:
    """``SyncGuard.record`` without a backend keeps none: the tally says ``unknown`` (a mutant
    defaulted the backend to a made-up name)."""
    guard = SyncGuard(A, REFERENCE_PROBE)
    guard.record(B, (1, 0), "h" * 64)
    guard.record(A, (1, 0), "h" * 64, "numpy")
    tally = guard.tally((1, 0), [A, B])
    assert tally is not None and tally.same == [A, B]
    assert tally.by_peer == {A: "numpy", B: "unknown"}


def test_a_peer_has_no_leader_until_a_config_names_one() -> None:
    """``Machine.leader`` is None in the lobby (no leader), then the config's sender (a
    mutant started it as the empty string)."""
    s = Script("t", "no leader", B)
    s.connect(A, C)
    assert s.machine.leader is None and not s.machine.is_leader
    s.send(A, config(3))
    assert s.machine.leader == A


def test_only_peers_ready_with_the_leaders_step_and_hash_enter_the_first_roster() -> None:
    """A ``ready`` with another hash does not make its sender eligible: the first roster waits
    for enough peers whose state equals the leader's (a mutant took any peer not gone)."""
    s = Script("t", "eligible", A, state=fresh_state())
    s.feed(ev.UserLead(s.now, config(3), 2))
    s.connect(B, C)
    out = s.send(C, messages.Ready(RUN, 0, "b" * 64, [A, B], 0.0))
    assert rosters(out) == []
    out = s.send(B, messages.Ready(RUN, 0, INIT, [A, C], 0.0))
    assert [r.peers for r in rosters(out)] == [[A, B]]


def test_a_followers_save_saves_only_itself() -> None:
    """UserSave at a follower asks no other peer to save (only the leader broadcasts ``save``;
    a mutant let any peer with a config and a state broadcast it)."""
    s = Script("t", "follower save", B, can_save=True)
    follow(s, A, (C,), config(3))
    out = s.feed(ev.UserSave(s.now))
    assert sent(out, messages.Save) == []
    assert fx.Save(0) in out


def test_losing_the_signaling_server_ends_the_run_with_an_error_that_says_why() -> None:
    """SignalingLost ends the run with reason ``error`` (the code the shell reads) and the
    shell's reason in the message (mutants: ``ERROR``, no message)."""
    s = Script("t", "signaling", B)
    follow(s, A, (C,), config(3))
    outcome = finished(s.feed(ev.SignalingLost(s.now, "socket reset by peer")))
    assert outcome.reason == "error"
    assert "socket reset by peer" in outcome.message


def test_a_malformed_message_closes_the_channel_of_its_sender() -> None:
    """Text that is not a message is refused to the peer that sent it: an error, its channel
    closed, the peer gone (a mutant refused ``None``)."""
    s = Script("t", "malformed", B)
    follow(s, A, (C,), config(3))
    out = s.text(C, "{not json")
    assert [p for p, _ in errors(out)] == [C]
    assert closes(out) == [C]
    assert s.machine.peers.state(C) is PeerState.GONE
    assert s.machine.peers.state(A) is PeerState.GREETED


def test_a_reduced_chunk_is_served_with_its_own_chunk_index_and_bytes() -> None:
    """A ``repair`` for reduced chunk 2 of an applied attempt is answered with that chunk's
    bytes, labelled chunk 2 (mutants sent no bytes, or labelled it chunk 0)."""
    s = Script("t", "serve reduced", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    s.exchange(1, 0, ABC)
    out = s.send(A, messages.Repair(RUN, 1, 0, "reduced", 2))
    assert payloads_sent(out) == [(A, FrameKind.REDUCED, 1, 0, 2, reduced(1, 0, 3, 2))]


def test_a_follower_in_a_run_drops_a_peer_of_another_version_and_keeps_training() -> None:
    """A follower past the lobby that hears ``version-mismatch`` from a peer drops and closes
    that peer and keeps its run (a mutant ended every follower's run)."""
    s = Script("t", "other version follower", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    out = s.send(C, messages.Error("version-mismatch", "protocol 9 here", "upgrade this peer"))
    assert closes(out) == [C]
    assert not any(isinstance(f, fx.Finished) for f in out) and not s.machine.stopping.stopped
    assert s.machine.peers.state(C) is PeerState.GONE


def test_a_checkpoint_may_be_12_bytes_a_parameter_plus_1_mib_and_no_more() -> None:
    """While a sync is awaited the leader's checkpoint may be ``12 * parameters + 1 MiB``
    bytes (docs/PROTOCOL.md): a transfer announcing exactly that is taken, one byte more is
    refused at its first fragment (a mutant allowed 1 KiB more)."""
    s = Script("t", "checkpoint limit", D)
    s.connect(A, B, C)
    s.send(A, config(steps=6))
    out = s.send(A, roster_msg(5, 0, ABC))
    assert sent(out, messages.SyncRequest) == [(A, messages.SyncRequest(RUN))]
    model = runconfig.parse(config(), tokenizer_sha256=TOKENIZER, vocab_size=VOCAB).model
    params = sum(math.prod(shape) for shape in param_shapes(model).values())
    limit = 12 * params + 1024 * 1024

    def first_fragment(size: int, transfer: int) -> bytes:
        kw = {"transfer": transfer, "step": 5, "deflate": False}
        return next(frames.fragment(FrameKind.CHECKPOINT, bytes(size), **kw))

    assert s.feed(ev.FrameReceived(s.now, A, first_fragment(limit, 1))) == []
    out = s.feed(ev.FrameReceived(s.now, A, first_fragment(limit + 1, 2)))
    assert [(p, e.code) for p, e in errors(out)] == [(A, "bad-frame")]
    assert closes(out) == [A]


def test_a_late_peer_learns_the_config_and_the_current_roster_from_the_leader() -> None:
    """A peer greeted by a leader mid-run is sent the config, then the committed roster (a
    mutant built the roster without its run: a TypeError)."""
    s = Script("t", "late peer", A, state=fresh_state())
    lead_run(s, (B, C))
    out = s.connect(D)
    assert sent(out, messages.Config) == [(D, config(3))]
    assert sent(out, messages.Roster) == [(D, roster_msg(1, 0, ABC))]


def test_when_every_peer_of_the_last_roster_left_the_run_ends_with_an_error() -> None:
    """A joiner outside the roster whose every roster peer left has nobody to follow: the run
    ends with reason ``error`` (a mutant: ``ERROR``)."""
    s = Script("t", "everyone left", D)
    s.connect(A, B, C)
    s.send(A, config(steps=6))
    s.send(A, roster_msg(5, 0, ABC))
    s.left(B)
    s.left(C)
    assert finished(s.left(A)).reason == "error"


def test_a_compute_with_the_wrong_number_of_chunks_ends_the_run_with_an_error() -> None:
    """ComputeDone with fewer chunks than roster peers ends the run with reason ``error`` (a
    mutant raised a TypeError instead)."""
    s = Script("t", "chunks", B)
    follow(s, A, (C,), config(3))
    s.send(A, roster_msg(1, 0, ABC))
    payloads = contributions(1, 1, 0, 3)[:2]
    out = s.feed(ev.ComputeDone(s.now, 1, 0, 3.0, payloads, REFERENCE_PROBE, 0.0))
    assert finished(out).reason == "error"
    assert payloads_sent(out) == []


def test_a_stop_from_a_peer_that_never_said_hello_is_ignored() -> None:
    """A gone peer is heard only if it was greeted: a ``stop`` from a channel that closed
    before its hello does not end the run (a mutant let it through)."""
    s = Script("t", "ungreeted stop", B)
    s.connect(A)
    s.feed(ev.ChannelOpened(s.now, C))
    s.send(A, config(3))
    s.closed(C)
    assert s.send(C, messages.Stop(RUN, "leader-request", 0, "over", {})) == []
    assert not s.machine.stopping.stopped


def test_a_closed_channel_or_a_departure_acknowledges_a_stop() -> None:
    """While stopping, a peer whose channel closes, or that the server says left, no longer
    holds the stop up: the run finishes at once (a mutant acknowledged ``None``)."""
    for gone in (ev.ChannelClosed, ev.PeerLeft):
        s = Script("t", "ack by close", B)
        follow(s, A, (C,), config(3))
        out = s.send(A, messages.Stop(RUN, "leader-request", 0, "over", {}))
        assert not any(isinstance(f, fx.Finished) for f in out)
        assert finished(s.feed(gone(s.now + 1.0, C))).reason == "leader-request"
