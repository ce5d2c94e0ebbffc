"""The conformance traces of tests/vectors/protocol/: one function per trace, each playing one
peer's view of a run. ``python tests/vectorgen --write protocol`` regenerates them; the
assertions here check that each trace shows what its name says (a regenerated trace that no
longer covers its case fails to generate)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zlib
from collections.abc import Callable

import numpy as np

from daisychain.p2p import allreduce
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.wire import codec, frames, messages
from daisychain.wire.frames import FrameKind
from protocol_traces.script import (
    OTHER_RUN,
    REFERENCE_PROBE,
    RUN,
    SEED,
    TIMERS,
    A,
    B,
    C,
    D,
    E,
    F,
    Script,
    Shares,
    applied,
    config,
    contributions,
    fresh_state,
    hello_text,
    loss_of,
    reduced,
    roster_msg,
    split,
    total_blocks,
)
from protocol_traces.trace_replica import TraceReplica, init_hash

INIT = init_hash(SEED)
H4 = hashlib.sha256(b"daisychain-trace state at step 4").hexdigest()
ABC = (A, B, C)


Sent = list[tuple[str, messages.Message]]


def sent(effects: list[fx.Effect], kind: type[messages.Message]) -> Sent:
    """(peer, message) of every message of ``kind`` the effects send."""
    return [
        (f.peer, f.message)
        for f in effects
        if isinstance(f, fx.SendMessage) and isinstance(f.message, kind)
    ]


def repairs(effects: list[fx.Effect]) -> set[tuple[str, str, int]]:
    return {(p, m.piece, m.chunk) for p, m in sent(effects, messages.Repair)
            if isinstance(m, messages.Repair)}  # fmt: skip


def errors(effects: list[fx.Effect]) -> list[tuple[str, messages.Error]]:
    return [(p, m) for p, m in sent(effects, messages.Error) if isinstance(m, messages.Error)]


def stops(effects: list[fx.Effect]) -> list[tuple[str, messages.Stop]]:
    return [(p, m) for p, m in sent(effects, messages.Stop) if isinstance(m, messages.Stop)]


def finished(effects: list[fx.Effect]) -> fx.Outcome:
    done = [f for f in effects if isinstance(f, fx.Finished)]
    assert len(done) == 1, f"expected the run to finish: {effects}"
    return done[0].outcome


def rosters(effects: list[fx.Effect]) -> list[messages.Roster]:
    """The rosters committed (each is broadcast: counted once)."""
    out: list[messages.Roster] = []
    for _, m in sent(effects, messages.Roster):
        if isinstance(m, messages.Roster) and m not in out:
            out.append(m)
    return out


def _ready(peers: list[str], step: int = 0, digest: str = INIT) -> messages.Ready:
    return messages.Ready(RUN, step, digest, peers, 0.0)


def follow(s: Script, leader: str, others: tuple[str, ...], cfg: messages.Config) -> None:
    """A follower joins: channels to everyone, the leader's config, its ready."""
    s.connect(leader, *others)
    out = s.send(leader, cfg)
    assert sent(out, messages.Ready), out


def lead_run(
    s: Script, followers: tuple[str, ...], steps: int = 3, min_peers: int = 3,
    shares_by: messages.SharesBy = "speed",
) -> None:  # fmt: skip
    s.feed(ev.UserLead(s.now, config(steps, shares_by=shares_by), min_peers))
    s.connect(*followers)
    s.at(s.now + 1.0)
    for p in followers:
        out = s.send(p, _ready([q for q in (s.me, *followers) if q != p]))
    assert rosters(out)[0].peers == sorted((s.me, *followers)), out


def stop_acks(s: Script, peers: tuple[str, ...], stop: messages.Stop) -> list[fx.Effect]:
    out: list[fx.Effect] = []
    for p in peers:
        out += s.send(p, stop)
    return out


# ---------------------------------------------------------------------------------------------


def leader_three_peers() -> Script:
    s = Script("leader-3-peers", "A leads B and C for 3 steps: config, readys, rosters, the "
               "exchange, hashes, stop done acknowledged by both.", A,
               state=fresh_state())  # fmt: skip
    lead_run(s, (B, C))
    for step in (1, 2, 3):
        s.at(s.now + 1.0)
        digest = s.exchange(step, 0, ABC)
        out = s.hashes(step, 0, ABC, digest)
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    assert stops(out) == [(B, stop), (C, stop)], out
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def follower_three_peers() -> Script:
    s = Script("follower-3-peers", "B follows leader A with C for 3 steps and stops when A "
               "says done (repeating the stop as its acknowledgement).", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    for step in (1, 2, 3):
        s.at(s.now + 1.0)
        out = s.send(A, roster_msg(step, 0, ABC))
        assert any(isinstance(f, fx.Compute) for f in out), out
        digest = s.exchange(step, 0, ABC)
        s.hashes(step, 0, ABC, digest)
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    out = s.send(A, stop)
    assert stops(out) == [(A, stop), (C, stop)], out
    assert finished(s.send(C, stop)).reason == "done"
    return s


def honest_hash(prev: str, step: int, rnd: int, n: int | Shares) -> str:
    """The hash every honest replica holds after applying ``(step, rnd)`` of ``n`` rule peers."""
    tb, of = total_blocks(), split(n)
    flat = np.empty(tb * codec.BLOCK, dtype=np.float32)
    for k in range(len(of)):
        first, end = allreduce.chunk_blocks(tb, of, k)
        if end > first:
            flat[allreduce.chunk_slice(tb, of, k)] = codec.decode(reduced(step, rnd, of, k),
                                                                  end - first)  # fmt: skip
    replica = TraceReplica(step - 1, prev)
    replica.apply(flat)
    return replica.hash


def train(s: Script, leader: str, roster: tuple[str, ...], steps: range, rnd: int = 0) -> str:
    """Follower steps: the leader's roster, the exchange, everyone's hash."""
    digest = ""
    for step in steps:
        s.at(s.now + 1.0)
        s.send(leader, roster_msg(step, rnd, roster))
        digest = s.exchange(step, rnd, roster)
        s.hashes(step, rnd, roster, digest)
    return digest


def join_with_checkpoint() -> Script:
    s = Script("join-with-checkpoint", "D joins a run of A, B, C at step 5: config, ready, the "
               "current roster without it, sync-request once its channels to the roster are "
               "open, the checkpoint of step 5, then it computes in roster 6.", D)  # fmt: skip
    s.connect(A, B, C)
    s.send(A, config(steps=6))
    out = s.send(A, roster_msg(5, 0, ABC))
    assert sent(out, messages.SyncRequest) == [(A, messages.SyncRequest(RUN))], out
    s.at(3.0)
    h5 = hashlib.sha256(b"daisychain-trace state at step 5").hexdigest()
    s.frames(A, FrameKind.CHECKPOINT, TraceReplica(5, h5).checkpoint(), 5)
    assert s.machine.replica.step == 5 and s.machine.replica.hash == h5
    roster = (A, B, C, D)
    s.send(A, roster_msg(6, 0, roster))
    digest = s.exchange(6, 0, roster)
    assert digest == honest_hash(h5, 6, 0, 4)
    s.hashes(6, 0, roster, digest)
    stop = messages.Stop(RUN, "done", 6, "reached step 6", {})
    s.send(A, stop)
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def lobby_early_hash() -> Script:
    s = Script("lobby-early-hash", "D, a newcomer in the lobby, gets C's hash of step 5, a "
               "save and a stop of another run before A's config: it drops them (no error, no "
               "close) and then joins A's run as in join-with-checkpoint, with C in its "
               "roster.", D)  # fmt: skip
    s.connect(A, B, C)
    h5 = hashlib.sha256(b"daisychain-trace state at step 5").hexdigest()
    probe = s.machine.settings.reference_probe
    for peer, m in (
        (C, messages.StepHash(RUN, 5, 0, h5, 2.5, probe, "numpy", 0.0)),
        (B, messages.Save(RUN, 5)),
        (C, messages.Stop(OTHER_RUN, "done", 3, "reached step 3", {})),
    ):
        out = s.send(peer, m)
        assert out == [], out
    s.send(A, config(steps=6))
    out = s.send(A, roster_msg(5, 0, ABC))
    assert sent(out, messages.SyncRequest) == [(A, messages.SyncRequest(RUN))], out
    s.at(3.0)
    s.frames(A, FrameKind.CHECKPOINT, TraceReplica(5, h5).checkpoint(), 5)
    roster = (A, B, C, D)
    s.send(A, roster_msg(6, 0, roster))
    digest = s.exchange(6, 0, roster)
    assert digest == honest_hash(h5, 6, 0, 4)
    s.hashes(6, 0, roster, digest)
    stop = messages.Stop(RUN, "done", 6, "reached step 6", {})
    s.send(A, stop)
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def follower_gone_mid_exchange() -> Script:
    s = Script("follower-gone-mid-exchange", "Leader A: C's channel closes during step 2 before "
               "its contribution arrived. A asks B again at once and, repair_after later, "
               "re-commits step 2 as round 1 without the gone peer only: B's reduced chunk "
               "needed C's contribution, which C's departure explains, so B stays in the roster "
               "(no checkpoint) and A and B train to the end.", A, state=fresh_state())  # fmt: skip
    lead_run(s, (B, C), steps=3)
    s.at(2.0)
    s.hashes(1, 0, ABC, s.exchange(1, 0, ABC))
    s.at(3.0)
    s.compute(2, 0, ABC)
    s.frames(B, FrameKind.CONTRIBUTION, contributions(1, 2, 0, 3)[0], 2, 0, 0)
    s.at(3.5)
    s.closed(C)
    out = s.timer()  # repair at once: every reduced chunk A lacks, from B (C is gone)
    assert repairs(out) == {
        (B, "reduced", 0), (B, "reduced", 1), (B, "reduced", 2)}, out  # fmt: skip
    out = s.timer()  # repair_after later: the attempt is re-committed without C
    assert [(r.step, r.round, r.peers) for r in rosters(out)] == [(2, 1, [A, B])], out
    s.at(s.now + 0.5)
    out = s.exchange_effects(2, 1, (A, B))
    digest = applied(out)
    kinds = {f.kind for f in out if isinstance(f, fx.SendPayload)}
    assert FrameKind.CHECKPOINT not in kinds, "B kept its state: no checkpoint"
    assert [(r.step, r.round, r.peers) for r in rosters(out)] == [(3, 0, [A, B])], out
    s.hashes(2, 1, (A, B), digest)
    s.at(s.now + 0.5)
    s.hashes(3, 0, (A, B), s.exchange(3, 0, (A, B)))
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    assert finished(stop_acks(s, (B,), stop)).reason == "done"
    return s


def leader_gone_before_roster() -> Script:
    s = Script("leader-gone-before-roster", "B got A's config and said ready; A's channel "
               "closes before the first roster: the run ends with an error (no failover "
               "without a committed roster).", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    s.at(2.0)
    outcome = finished(s.closed(A))
    assert outcome.reason == "error" and "before the first step" in outcome.message
    return s


def leader_gone_during_exchange() -> Script:
    s = Script("leader-gone-during-exchange", "B follows A with C; A's channel closes in step 2 "
               "before its pieces arrived. B is the successor (lowest id left): it asks C again, "
               "re-commits step 2 without the gone leader only (C's missing reduced chunk "
               "needed A's contribution: A's departure explains it), and leads B and C to the "
               "end with no checkpoint.", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    train(s, A, ABC, range(1, 2))
    s.at(s.now + 1.0)
    s.send(A, roster_msg(2, 0, ABC))
    s.compute(2, 0, ABC)
    s.frames(C, FrameKind.CONTRIBUTION, contributions(2, 2, 0, 3)[1], 2, 0, 1)
    s.at(s.now + 0.5)
    s.closed(A)
    assert s.machine.is_leader
    out = s.timer()
    assert repairs(out) == {
        (C, "reduced", 0), (C, "reduced", 1), (C, "reduced", 2)}, out  # fmt: skip
    out = s.timer()
    assert [(r.step, r.round, r.peers) for r in rosters(out)] == [(2, 1, [B, C])], out
    s.at(s.now + 0.5)
    out = s.exchange_effects(2, 1, (B, C))
    digest = applied(out)
    kinds = {f.kind for f in out if isinstance(f, fx.SendPayload)}
    assert FrameKind.CHECKPOINT not in kinds, "C kept its state: no checkpoint"
    assert [(r.step, r.round, r.peers) for r in rosters(out)] == [(3, 0, [B, C])], out
    s.hashes(2, 1, (B, C), digest)
    s.at(s.now + 0.5)
    s.hashes(3, 0, (B, C), s.exchange(3, 0, (B, C)))
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    assert finished(stop_acks(s, (C,), stop)).reason == "done"
    return s


def leader_gone_after_apply() -> Script:
    s = Script("leader-gone-after-apply", "A applies step 2 and publishes its hash, then leaves "
               "before committing roster 3. B (successor) holds every hash of step 2 and "
               "commits roster 3 with C at once.", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    train(s, A, ABC, range(1, 3))
    s.at(s.now + 1.0)
    s.left(A)  # the server's peer-left (after the shell's grace): A is gone
    out = s.send(A, messages.Leave("bye"))  # in flight before A left: ignored
    assert not out
    assert s.machine.is_leader
    assert s.machine.roster is not None and s.machine.roster.peers == (B, C)
    s.at(s.now + 1.0)
    s.hashes(3, 0, (B, C), s.exchange(3, 0, (B, C)))
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    assert finished(stop_acks(s, (C,), stop)).reason == "done"
    return s


def follower_held_roster() -> Script:
    s = Script("follower-held-roster", "C follows A with B. A leaves after step 1; B (its "
               "successor) commits roster 2 before C learns that A is gone: C holds it, and "
               "applies it when the server's peer-left for A makes B its leader.", C)  # fmt: skip
    follow(s, A, (B,), config(2))
    train(s, A, ABC, range(1, 2))
    s.at(s.now + 1.0)
    out = s.send(B, roster_msg(2, 0, [B, C]))
    assert not out, "held"
    out = s.left(A)
    assert any(isinstance(f, fx.Compute) for f in out), out
    s.hashes(2, 0, (B, C), s.exchange(2, 0, (B, C)))
    stop = messages.Stop(RUN, "done", 2, "reached step 2", {})
    out = s.send(B, stop)
    assert finished(out).reason == "done", "the stop's sender acknowledged it already"
    return s


def crc_damage_repair() -> Script:
    s = Script("crc-damage-repair", "B receives A's contribution damaged in transit (CRC "
               "mismatch): it asks A for it again (no channel closed) and completes the step "
               "with the repaired piece.", B)  # fmt: skip
    follow(s, A, (C,), config(1))
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.compute(1, 0, ABC)
    mine = contributions(0, 1, 0, 3)[1]
    out = s.frames(A, FrameKind.CONTRIBUTION, mine, 1, 0, 1, damage=True)
    assert sent(out, messages.Repair) == [
        (A, messages.Repair(RUN, 1, 0, "contribution", 1))], out  # fmt: skip
    assert not any(isinstance(f, fx.Close) for f in out)
    s.frames(C, FrameKind.CONTRIBUTION, contributions(2, 1, 0, 3)[1], 1, 0, 1)
    s.at(1.5)
    s.frames(A, FrameKind.CONTRIBUTION, mine, 1, 0, 1)
    s.frames(A, FrameKind.REDUCED, reduced(1, 0, 3, 0), 1, 0, 0)
    out = s.frames(C, FrameKind.REDUCED, reduced(1, 0, 3, 2), 1, 0, 2)
    digest = applied(out)
    assert digest == honest_hash(INIT, 1, 0, 3)
    s.hashes(1, 0, ABC, digest)
    stop = messages.Stop(RUN, "done", 1, "reached step 1", {})
    s.send(A, stop)
    assert finished(s.send(C, stop)).reason == "done"
    return s


def forged_reduced_guard() -> Script:
    s = Script("forged-reduced-guard", "C sends B a reduced chunk with one value changed and a "
               "valid CRC: B cannot tell, applies it, and the sync guard stops the run when A's "
               "and C's hashes differ from B's.", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.compute(1, 0, ABC)
    s.frames(A, FrameKind.CONTRIBUTION, contributions(0, 1, 0, 3)[1], 1, 0, 1)
    s.frames(C, FrameKind.CONTRIBUTION, contributions(2, 1, 0, 3)[1], 1, 0, 1)
    s.frames(A, FrameKind.REDUCED, reduced(1, 0, 3, 0), 1, 0, 0)
    forged = bytearray(reduced(1, 0, 3, 2))
    forged[-1] ^= 0x01  # one value off by one quantization step
    mine = applied(s.frames(C, FrameKind.REDUCED, bytes(forged), 1, 0, 2))
    honest = honest_hash(INIT, 1, 0, 3)
    assert mine != honest
    out = s.hashes(1, 0, (A,), honest)
    said = stops(out)
    assert [p for p, _ in said] == [A, C], out
    stop = said[0][1]
    assert isinstance(stop, messages.Stop) and stop.reason == "fork"
    assert stop.hashes == {A: honest, B: mine}, stop
    assert finished(stop_acks(s, (A, C), stop)).reason == "fork"
    return s


def hash_mismatch_fork() -> Script:
    s = Script("hash-mismatch-fork", "Leader A: every piece of step 1 is right, A commits "
               "roster 2 at its apply (hashes are checked one step late), but C publishes "
               "another hash of step 1: the sync guard stops the run (stop fork naming both "
               "hashes) before step 2 is applied anywhere.", A, state=fresh_state())  # fmt: skip
    lead_run(s, (B, C))
    s.at(2.0)
    digest = s.exchange(1, 0, ABC)
    s.hashes(1, 0, (B,), digest)
    drifted = hashlib.sha256(b"a replica that drifted").hexdigest()
    out = s.hashes(1, 0, (C,), drifted)
    assert not rosters(out)
    stop = stops(out)[0][1]
    assert isinstance(stop, messages.Stop) and stop.reason == "fork"
    assert stop.message.startswith("replicas diverged after step 1"), stop.message
    assert finished(stop_acks(s, (B, C), stop)).reason == "fork"
    return s


def probe_mismatch() -> Script:
    s = Script("probe-mismatch", "B: C's hash of step 1 carries a kernel probe that is not the "
               "reference's: the run stops (fork) naming C and its backend.", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC))
    digest = s.exchange(1, 0, ABC)
    s.hashes(1, 0, (A,), digest)
    bad = hashlib.sha256(b"a kernel that drifted").hexdigest()
    out = s.hashes(1, 0, (C,), digest, probe=bad, backend="wgpu-drifted")
    stop = stops(out)[0][1]
    assert isinstance(stop, messages.Stop) and stop.hashes == {C: bad}, stop
    assert "kernel probe mismatch" in stop.message and "wgpu-drifted" in stop.message
    assert finished(stop_acks(s, (A, C), stop)).reason == "fork"
    return s


def version_mismatch_lobby() -> Script:
    s = Script("version-mismatch-lobby", "B, still in the lobby, meets a peer speaking data "
               "protocol 99: it answers error version-mismatch and stops with a hint (it "
               "cannot join this group).", B)  # fmt: skip
    s.feed(ev.ChannelOpened(s.now, A))
    out = s.text(A, hello_text(version=99))
    refused = errors(out)
    assert refused and refused[0][1].code == "version-mismatch"
    outcome = finished(out)
    assert outcome.code == "version-mismatch" and "upgrade" in outcome.message, outcome
    return s


def version_mismatch_in_run() -> Script:
    s = Script("version-mismatch-in-run", "Leader A in a run: a newcomer D says hello with "
               "version 1 (no shares: it would train another batch and mean); A answers error "
               "version-mismatch with the upgrade hint, closes D's channel and goes on training "
               "(D is gone for good).", A, state=fresh_state())  # fmt: skip
    lead_run(s, (B, C), steps=1)
    s.at(2.0)
    s.feed(ev.ChannelOpened(s.now, D))
    out = s.text(D, hello_text(version=1))
    assert [type(f).__name__ for f in out] == ["SendMessage", "Close"], out
    assert "upgrade the older one" in errors(out)[0][1].hint, out
    digest = s.exchange(1, 0, ABC)
    out = s.hashes(1, 0, ABC, digest)
    stop = stops(out)[0][1]
    assert [p for p, _ in stops(out)] == [B, C], "not to D"
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def wrong_run() -> Script:
    s = Script("wrong-run", "B in A's run: D sends a second, different config and E a roster "
               "of another run; both are answered error wrong-run and their channels closed. "
               "The run goes on.", B)  # fmt: skip
    follow(s, A, (C, D, E), config(1))
    other = config(1).__dict__ | {"run": OTHER_RUN}
    other.pop("type")
    out = s.send(D, messages.Config(**other))
    assert [(p, m.code) for p, m in errors(out)] == [(D, "wrong-run")]
    out = s.send(E, roster_msg(1, 0, [E], run=OTHER_RUN))
    assert [(p, m.code) for p, m in errors(out)] == [(E, "wrong-run")]
    s.at(1.0)
    digest = train(s, A, ABC, range(1, 2))
    assert digest == honest_hash(INIT, 1, 0, 3)
    stop = messages.Stop(RUN, "done", 1, "reached step 1", {})
    s.send(A, stop)
    assert finished(s.send(C, stop)).reason == "done"
    return s


def hostile_config() -> Script:
    s = Script("hostile-config", "B in the lobby gets a config it cannot build (width 65 with "
               "4 heads): it answers error incompatible with a hint and closes that channel, "
               "keeps running, and joins D's valid run next.", B)  # fmt: skip
    s.connect(A, D)
    out = s.send(A, config(width=65, heads=4))
    refused = errors(out)
    assert len(refused) == 1 and refused[0][0] == A, out
    error = refused[0][1]
    assert isinstance(error, messages.Error) and error.code == "incompatible" and error.hint
    assert not any(isinstance(f, fx.Finished) for f in out), "the follower keeps running"
    out = s.send(D, config(2))
    assert sent(out, messages.Ready) == [(D, messages.Ready(RUN, 0, INIT, [D], 0.0))], out
    return s


# Commit, then audit (docs/TRUST.md) is declared on the wire (version 7) but not built into the
# machine (version 6): a config that audits is refused as a version-7 run would be, and version
# 7's messages are what an unknown message was before they were declared.
H = hashlib.sha256(b"daisychain-trace audit digest").hexdigest()
SIG = "5e" * 64
STATEMENT = "a5" * messages.MIN_STATEMENT_BYTES


def audited(cfg: messages.Config, one_in: int) -> messages.Config:
    return dataclasses.replace(cfg, audit=messages.AuditSpec(one_in))


def audit_config_refused() -> Script:
    s = Script("v6-audit-config", "B (data-channel version 6) in the lobby: A's config "
               "audits 1 in 0 (refused by rule audit-rate, which a version-7 peer checks too), "
               "D's audits 1 in 16 (refused: this peer cannot audit yet; ask the leader to start "
               "without --audit); each answered error incompatible and closed. B keeps running "
               "and joins E's run without audits.", B)  # fmt: skip
    s.connect(A, D, E)
    for peer, one_in, text in ((A, 0, "audit.one_in 0 outside [1, 65536]"),
                               (D, 16, "this peer cannot audit contributions yet (data-channel "
                                       "version 6)")):  # fmt: skip
        out = s.send(peer, audited(config(2), one_in))
        assert [(p, m.code, m.message) for p, m in errors(out)] == [(peer, "incompatible", text)], (
            out
        )
        assert [f.peer for f in out if isinstance(f, fx.Close)] == [peer], out
        assert not any(isinstance(f, fx.Finished) for f in out), "the follower keeps running"
    assert errors(out)[0][1].hint == "ask the leader to start without --audit"
    out = s.send(E, config(2))
    assert sent(out, messages.Ready) == [(E, messages.Ready(RUN, 0, INIT, [E], 0.0))], out
    return s


def audit_messages_refused() -> Script:
    s = Script("v6-audit-messages", "B (version 6) in A's run meets version 7's messages: "
               "C's commit, D's reveal, E's audit and F's proof are each answered error "
               "unknown-type (the sender breaks the protocol it greeted with) and closed, as an "
               "undeclared type was; A's roster with a carry is taken (version 6 reads no "
               "carry, as it ignored the unknown field) and step 1 trains with A.", B)  # fmt: skip
    follow(s, A, (C, D, E, F), config(1))
    v7: list[tuple[str, messages.Message]] = [
        (C, messages.ContributionCommit(run=RUN, step=1, round=0, peer=C, roster=H, prev=INIT,
                                        chunks=[H, H, H], data=H, nonce_hash=H, sig=SIG)),
        (D, messages.Reveal(run=RUN, step=1, round=0, nonce=H, seen=H, sig=SIG)),
        (E, messages.AuditResult(run=RUN, step=1, round=0, item="reduced", index=0, of=H,
                                 digests=[H], data="", sig=SIG)),
        (F, messages.Proof(run=RUN, step=1, round=0, kind="equivocation",
                           first=messages.Signed(STATEMENT, SIG),
                           second=messages.Signed(STATEMENT, SIG))),
    ]  # fmt: skip
    for peer, m in v7:
        out = s.send(peer, m)
        [(to, error)] = errors(out)
        assert (to, error.code) == (peer, "unknown-type"), out
        assert f"control message {m.type} belongs to commit, then audit" in error.message, out
        assert [f.peer for f in out if isinstance(f, fx.Close)] == [peer], out
    s.at(1.0)
    out = s.send(A, dataclasses.replace(roster_msg(1, 0, (A, B)), carry=[(0, C)]))
    assert any(isinstance(f, fx.Compute) for f in out), out
    digest = s.exchange(1, 0, (A, B))
    assert digest == honest_hash(INIT, 1, 0, 2)
    s.hashes(1, 0, (A, B), digest)
    stop = messages.Stop(RUN, "done", 1, "reached step 1", {})
    assert finished(s.send(A, stop)).reason == "done"
    return s


def audit_repair_refused() -> Script:
    s = Script("v6-audit-repair", "B (version 6) in the lobby and then in A's run: D asks "
               "for a commit and E for a reduced commit (repair pieces of version 7); each is "
               "answered error bad-message and closed (a version-6 peer serves no statement, "
               "and never a reduced chunk in their place).", B)  # fmt: skip
    s.connect(A, C, D, E)
    out = s.send(D, messages.Repair(RUN, 1, 0, "commit", 1))
    assert [(p, m.code) for p, m in errors(out)] == [(D, "bad-message")], out
    assert "repair of a commit belongs to commit, then audit" in errors(out)[0][1].message
    out = s.send(A, config(1))
    assert sent(out, messages.Ready), out
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.exchange(1, 0, ABC)
    # B holds its reduced chunk of (1, 0) now: asked for it as a reduced commit, it sends nothing.
    out = s.send(E, messages.Repair(RUN, 1, 0, "reduced-commit", 1))
    assert [(p, m.code) for p, m in errors(out)] == [(E, "bad-message")], out
    assert not [f for f in out if isinstance(f, fx.SendPayload)], out
    return s


def stop_races_failover() -> Script:
    s = Script("stop-races-failover", "The server's peer-left for leader A reaches B before "
               "A's stop (A's user ended the run after step 1). B fails over and, as successor, "
               "commits roster 2, then A's stop arrives from the gone leader: the stop wins, B "
               "repeats it and stops.", B)  # fmt: skip
    follow(s, A, (C,), config(10))
    train(s, A, ABC, range(1, 2))
    s.at(s.now + 0.5)
    out = s.left(A)
    assert [(r.step, r.peers) for r in rosters(out)] == [(2, [B, C])], out
    stop = messages.Stop(RUN, "leader-request", 1, "the leader ended the run at step 1", {})
    out = s.send(A, stop)
    assert stops(out) == [(A, stop), (C, stop)], out
    assert finished(s.send(C, stop)).reason == "leader-request"
    return s


def straggler_recommit() -> Script:
    s = Script("straggler-recommit", "Leader A: C stays connected but never sends its step-1 "
               "pieces. Every repair_after A asks again and B reports C missing; at the step "
               "timeout A re-commits step 1 as round 1 without every peer whose pieces it "
               "lacks (B's reduced chunk waited for C too): A alone. B and C ask for the state "
               "and are back in roster 2 after the checkpoint.", A,
               state=fresh_state())  # fmt: skip
    lead_run(s, (B, C), steps=2)
    s.at(2.0)
    s.compute(1, 0, ABC)
    s.frames(B, FrameKind.CONTRIBUTION, contributions(1, 1, 0, 3)[0], 1, 0, 0)
    out = s.timer()
    assert (C, "contribution", 0) in repairs(out), out
    s.send(B, messages.Missing(RUN, 1, 0, [C]))
    out = s.timer()
    assert not rosters(out), "repair_after again: still waiting"
    while not rosters(out):
        out = s.timer()
    assert [(r.step, r.round, r.peers) for r in rosters(out)] == [(1, 1, [A])], out
    s.send(B, messages.SyncRequest(RUN))
    s.send(C, messages.SyncRequest(RUN))
    s.at(s.now + 0.5)
    out = s.compute(1, 1, (A,))
    applied(out)
    assert [f.peer for f in out if isinstance(f, fx.SendPayload)] == [B, C], "checkpoints"
    assert [(r.step, r.peers) for r in rosters(out)] == [(2, [A, B, C])], out
    s.at(s.now + 1.0)
    s.hashes(2, 0, ABC, s.exchange(2, 0, ABC))
    stop = messages.Stop(RUN, "done", 2, "reached step 2", {})
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def _raw_frame(kind: int = 1, total: int = 40, offset: int = 0, data: bytes = b"x" * 40) -> bytes:
    crc = zlib.crc32(data)
    return frames.HEADER.pack(b"DC", 1, kind, 0, 0, 1, 9, 1, total, offset, crc) + data


def frames_hostile() -> Script:
    s = Script("frames-hostile", "B in a run meets four hostile peers: D sends a frame before "
               "hello, E a transfer that starts at offset 8 (out of order), F a payload of "
               "2^31 bytes (oversized), G an unknown frame kind, and H never says hello. Each is "
               "answered error and closed; the step completes.", B)  # fmt: skip
    g, h = "G" * 12, "H" * 12
    follow(s, A, (C,), config(1))
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.feed(ev.ChannelOpened(s.now, D))
    s.feed(ev.FrameReceived(s.now, D, _raw_frame()))
    s.connect(E, F, g)
    s.feed(ev.FrameReceived(s.now, E, _raw_frame(total=48, offset=8)))
    s.feed(ev.FrameReceived(s.now, F, _raw_frame(total=2**31)))
    s.feed(ev.FrameReceived(s.now, g, _raw_frame(kind=9)))
    s.feed(ev.ChannelOpened(s.now, h))
    codes = {}
    for step in s.steps:
        for f in step["effects"]:
            if f["effect"] == "send-message" and f["message"]["type"] == "error":
                codes[f["peer"]] = f["message"]["message"]
    assert set(codes) == {D, E, F, g}, codes
    assert "before hello" in codes[D] and "offset 8" in codes[E], codes
    assert "exceeds the limit" in codes[F] and "unknown frame kind 9" in codes[g], codes
    digest = s.exchange(1, 0, ABC)
    s.hashes(1, 0, ABC, digest)
    out = s.timer()  # H's hello is overdue
    assert [(p, m.message) for p, m in errors(out)] == [(h, "no hello in time")]
    stop = messages.Stop(RUN, "done", 1, "reached step 1", {})
    s.send(A, stop)
    assert finished(s.send(C, stop)).reason == "done"
    return s


def save_and_leave() -> Script:
    s = Script("save-and-leave", "B has a checkpoint path and saves every 2 steps: the "
               "leader's save request for step 1, the periodic save at step 2, then its user "
               "leaves (leave to all, no second save of step 2).", B, can_save=True,
               save_every=2)  # fmt: skip
    follow(s, A, (C,), config(5))
    train(s, A, ABC, range(1, 2))
    out = s.send(A, messages.Save(RUN, 1))
    assert [f for f in out if isinstance(f, fx.Save)] == [fx.Save(1)], out
    train(s, A, ABC, range(2, 3))
    assert any(st["effects"] == [{"effect": "save", "step": 2}] or
               {"effect": "save", "step": 2} in st["effects"] for st in s.steps)  # fmt: skip
    out = s.feed(ev.UserLeave(s.now, "interrupted"))
    assert sent(out, messages.Leave) == [(A, messages.Leave("interrupted")),
                                         (C, messages.Leave("interrupted"))], out  # fmt: skip
    assert finished(out).reason == "left" and not any(isinstance(f, fx.Save) for f in out)
    return s


def resume_leader() -> Script:
    s = Script("resume-leader", "A leads a run restored from a checkpoint of step 4: its "
               "config carries resume_step and resume_hash, B and C ask for the state, A sends "
               "each its checkpoint as it asks and commits roster 5 once both have it.", A,
               state=(4, H4))  # fmt: skip
    s.feed(ev.UserLead(s.now, config(6, resume=(4, H4)), 3))
    s.connect(B, C)
    s.at(1.0)
    out = s.send(B, messages.SyncRequest(RUN))  # served at once: the lobby has no boundary
    out += s.send(C, messages.SyncRequest(RUN))
    checkpoints = [f for f in out if isinstance(f, fx.SendPayload)]
    assert [(f.peer, f.kind, f.step) for f in checkpoints] == [
        (B, FrameKind.CHECKPOINT, 4), (C, FrameKind.CHECKPOINT, 4)], out  # fmt: skip
    assert checkpoints[0].payload == TraceReplica(4, H4).checkpoint()
    assert [(r.step, r.peers) for r in rosters(out)] == [(5, list(ABC))], out
    s.at(2.0)
    s.hashes(5, 0, ABC, s.exchange(5, 0, ABC))
    s.hashes(6, 0, ABC, s.exchange(6, 0, ABC))
    stop = messages.Stop(RUN, "done", 6, "reached step 6", {})
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def contract_mismatch() -> Script:
    s = Script("contract-mismatch", "B, in the lobby, meets a peer of the same data protocol "
               "but another numerical contract (hello.contract 2): error version-mismatch, and "
               "B stops with a hint (its replica could not stay bit-identical).", B)  # fmt: skip
    s.feed(ev.ChannelOpened(s.now, A))
    hello = json.loads(hello_text(name="trace-a"))
    hello["contract"] = hello.get("contract", 1) + 1
    out = s.text(A, json.dumps(hello))
    assert [e.code for _, e in errors(out)] == ["version-mismatch"], out
    assert finished(out).code == "version-mismatch"
    return s


def compute_failed() -> Script:
    s = Script("compute-failed", "B's own gradient computation fails in step 1 (its shell "
               "reports the exception): the run ends for B with an error, announced to no one "
               "(the others drop it by the usual rules).", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC))
    out = s.feed(ev.ComputeFailed(s.now, 1, 0, "MemoryError()"))
    outcome = finished(out)
    assert outcome.reason == "error" and not stops(out), out
    return s


# -- protocol version 2: shares ---------------------------------------------------------------


def shares_in(effects: list[fx.Effect]) -> list[tuple[int, int, list[str], list[int]]]:
    return [(r.step, r.round, r.peers, r.shares) for r in rosters(effects)]


def leader_weighted_shares() -> Script:
    s = Script("leader-weighted-shares", "A leads B and C for 5 steps and shares the step's 12 "
               "sequences by the speeds they report. A commits each roster at its own apply, "
               "so a speed reported with the hash of step S shapes roster S + 2: equal while "
               "nobody is measured (4, 4, 4); C four times slower (5, 5, 2: less than half the "
               "largest share, C owns no chunk, it sends its part and waits for the result); "
               "C slows down to "
               "20x (6, 6, 0: C follows without computing, sends no contribution and owns no "
               "chunk); B speeds up (4, 8, 0).", A, state=fresh_state())  # fmt: skip
    lead_run(s, (B, C), steps=5)
    plan = [
        ((4, 4, 4), {B: 0.1, C: 0.4}, (4, 4, 4)),
        ((4, 4, 4), {B: 0.1, C: 2.0}, (5, 5, 2)),
        ((5, 5, 2), {B: 0.05, C: 2.0}, (6, 6, 0)),
        ((6, 6, 0), {B: 0.05, C: 2.0}, (4, 8, 0)),
    ]
    digest = INIT
    for step, (now, speeds, following) in enumerate(plan, start=1):
        s.at(s.now + 1.0)
        out = s.exchange_effects(step, 0, ABC, now, seq_s=0.1)
        before, digest = digest, applied(out)
        assert digest == honest_hash(before, step, 0, now)
        assert shares_in(out) == [(step + 1, 0, list(ABC), list(following))], out
        s.hashes(step, 0, ABC, digest, speeds=speeds)
    s.at(s.now + 1.0)
    out = s.exchange_effects(5, 0, ABC, (4, 8, 0), seq_s=0.1)
    before, digest = digest, applied(out)
    assert digest == honest_hash(before, 5, 0, (4, 8, 0)) and not rosters(out), out
    out = s.hashes(5, 0, ABC, digest, speeds={B: 0.05, C: 2.0})
    stop = messages.Stop(RUN, "done", 5, "reached step 5", {})
    assert stops(out) == [(B, stop), (C, stop)], out
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def leader_equal_shares() -> Script:
    s = Script("leader-equal-shares", "A leads B and C with config.shares_by \"equal\": the "
               "speeds they report (C twenty times slower) change nothing, every roster "
               "commits 4, 4, 4.", A, state=fresh_state())  # fmt: skip
    lead_run(s, (B, C), steps=3, shares_by="equal")
    digest = INIT
    for step in (1, 2):
        s.at(s.now + 1.0)
        out = s.exchange_effects(step, 0, ABC, (4, 4, 4), seq_s=0.1)
        before, digest = digest, applied(out)
        assert digest == honest_hash(before, step, 0, (4, 4, 4))
        assert shares_in(out) == [(step + 1, 0, list(ABC), [4, 4, 4])], out
        s.hashes(step, 0, ABC, digest, speeds={B: 0.1, C: 2.0})
    s.at(s.now + 1.0)
    before, digest = digest, s.exchange(3, 0, ABC, (4, 4, 4), seq_s=0.1)
    out = s.hashes(3, 0, ABC, digest, speeds={B: 0.1, C: 2.0})
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    assert stops(out) == [(B, stop), (C, stop)], out
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def follower_share_zero() -> Script:
    s = Script("follower-share-zero", "B follows A with C; roster 2 gives B no sequences "
               "(shares 8, 0, 4): B computes only the kernel probe (its compute-done has no "
               "payload), sends no contribution, owns an empty chunk, applies A's and C's "
               "reduced chunks and publishes its hash; in step 3 both reduced chunks arrive "
               "before its compute-done, which then applies the step.", B)  # fmt: skip
    follow(s, A, (C,), config(3))
    train(s, A, ABC, range(1, 2))
    s.at(s.now + 1.0)
    out = s.send(A, roster_msg(2, 0, ABC, (8, 0, 4)))
    assert [f for f in out if isinstance(f, fx.Compute)] == [fx.Compute(2, 0, 1, (8, 0, 4))]
    out = s.compute(2, 0, ABC, (8, 0, 4), seq_s=0.5)
    assert not [f for f in out if isinstance(f, fx.SendPayload)], "nothing to contribute"
    digest = s.exchange_rest(2, 0, ABC, (8, 0, 4))
    s.hashes(2, 0, ABC, digest)
    # Step 3: every reduced chunk arrives while B still computes its probe; its compute-done
    # alone must then apply the step.
    s.at(s.now + 1.0)
    s.send(A, roster_msg(3, 0, ABC, (8, 0, 4)))
    for k, p in ((0, A), (2, C)):
        out = s.frames(p, FrameKind.REDUCED, reduced(3, 0, (8, 0, 4), k), 3, 0, k)
        assert not [f for f in out if isinstance(f, fx.StepApplied)], out
    digest = applied(s.compute(3, 0, ABC, (8, 0, 4), seq_s=0.5))
    s.hashes(3, 0, ABC, digest)
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    out = s.send(A, stop)
    assert finished(s.send(C, stop)).reason == "done"
    return s


def roster_bad_shares() -> Script:
    s = Script("roster-bad-shares", "B follows A; A's roster of step 1 gives shares that sum "
               "to 11, not the run's global batch of 12: B answers error bad-message and drops A "
               "(a leader that mis-shares the batch is not followed); with its leader gone "
               "before any step, B's run ends with an error.", B)  # fmt: skip
    follow(s, A, (C,), config(2))
    s.at(1.0)
    out = s.send(A, roster_msg(1, 0, ABC, (4, 4, 3)))
    refused = errors(out)
    assert [(p, e.code) for p, e in refused] == [(A, "bad-message")], out
    assert "global batch is 12" in refused[0][1].message, refused
    assert not [f for f in out if isinstance(f, fx.Compute)], out
    assert finished(out).reason == "error", out
    return s


def weighted_join_and_loss() -> Script:
    s = Script("weighted-join-and-loss", "A leads B; B reports it is three times slower "
               "with its hash of step 1, which shapes roster 3 (A commits roster 2 at its own "
               "apply of step 1, before that hash: 6, 6); D joins during step 2 and enters "
               "roster 3 unmeasured (the mean of the measured weights: 6, 2, 4); B leaves in "
               "the middle of step 3: D's reduced chunk needed B's part, which B's departure "
               "explains, so A re-commits step 3 as round 1 with D (6, 6: D is still "
               "unmeasured) and no checkpoint, and step 4 shares A and D evenly too.", A,
               state=fresh_state())  # fmt: skip
    ab, abd, ad = (A, B), (A, B, D), (A, D)
    lead_run(s, (B,), steps=4, min_peers=2)
    s.at(s.now + 1.0)
    out = s.exchange_effects(1, 0, ab, (6, 6), seq_s=0.1)
    assert shares_in(out) == [(2, 0, list(ab), [6, 6])], out
    s.hashes(1, 0, ab, applied(out), speeds={B: 0.3})
    s.at(s.now + 0.5)
    out = s.connect(D)
    assert sent(out, messages.Roster) == [(D, roster_msg(2, 0, ab, (6, 6)))], out
    s.send(D, messages.SyncRequest(RUN))
    s.at(s.now + 0.5)
    out = s.exchange_effects(2, 0, ab, (6, 6), seq_s=0.1)
    assert [f.peer for f in out if isinstance(f, fx.SendPayload)
            and f.kind is FrameKind.CHECKPOINT] == [D], "the checkpoint"  # fmt: skip
    assert shares_in(out) == [(3, 0, list(abd), [6, 2, 4])], out
    s.hashes(2, 0, ab, applied(out), speeds={B: 0.3})
    s.at(s.now + 1.0)
    s.compute(3, 0, abd, (6, 2, 4), seq_s=0.1)
    s.frames(D, FrameKind.CONTRIBUTION, contributions(2, 3, 0, (6, 2, 4))[0], 3, 0, 0)
    s.send(B, messages.Leave("closed the tab"))
    out = s.timer()
    while not rosters(out):
        out = s.timer()
    assert shares_in(out) == [(3, 1, list(ad), [6, 6])], out
    s.at(s.now + 0.5)
    out = s.exchange_effects(3, 1, ad, (6, 6), seq_s=0.1)
    h3 = applied(out)
    assert not [f for f in out if isinstance(f, fx.SendPayload)
                and f.kind is FrameKind.CHECKPOINT], "D kept its state"  # fmt: skip
    assert shares_in(out) == [(4, 0, list(ad), [6, 6])], out
    s.hashes(3, 1, ad, h3)
    s.at(s.now + 1.0)
    out = s.hashes(4, 0, ad, s.exchange(4, 0, ad, (6, 6), seq_s=0.1), speeds={D: 0.2})
    stop = messages.Stop(RUN, "done", 4, "reached step 4", {})
    assert stops(out) == [(B, stop), (D, stop)], "every open channel, B's too"
    assert finished(stop_acks(s, (D,), stop)).reason == "done"
    return s


# -- protocol version 3: the pipelined boundary ------------------------------------------------


def leader_hash_one_step_late() -> Script:
    s = Script("leader-hash-one-step-late", "A leads B and C for 3 steps and commits each next "
               "roster at its own apply, without this step's hashes; but it holds roster 3 "
               "until every peer's hash of step 1 is in (a peer is never more than one step "
               "behind): C's comes only after A applied step 2. The last step waits for every "
               "hash of it, so the run ends with every replica at step 3.", A,
               state=fresh_state())  # fmt: skip
    lead_run(s, (B, C))
    s.at(2.0)
    out = s.exchange_effects(1, 0, ABC)
    assert [(r.step, r.peers) for r in rosters(out)] == [(2, list(ABC))], out
    h1 = applied(out)
    s.hashes(1, 0, (B,), h1)
    s.at(3.0)
    out = s.exchange_effects(2, 0, ABC)
    assert not rosters(out), "C's hash of step 1 is not in"
    h2 = applied(out)
    out = s.hashes(1, 0, (C,), h1)
    assert [(r.step, r.peers) for r in rosters(out)] == [(3, list(ABC))], out
    s.hashes(2, 0, ABC, h2)
    s.at(4.0)
    out = s.exchange_effects(3, 0, ABC)
    assert not stops(out), "the last step waits for every hash of it"
    out = s.hashes(3, 0, (B,), applied(out))
    assert not stops(out), out
    out = s.hashes(3, 0, (C,), s.machine.replica.hash)
    stop = messages.Stop(RUN, "done", 3, "reached step 3", {})
    assert stops(out) == [(B, stop), (C, stop)], out
    assert finished(stop_acks(s, (B, C), stop)).reason == "done"
    return s


def leader_drops_laggard() -> Script:
    s = Script("leader-drops-laggard", "A leads B and C; C's hash of step 1 never comes. A "
               "applies step 2 and waits for it until its step timer expires, then commits "
               "roster 3 without C (C asks for the state and re-enters later).", A,
               state=fresh_state())  # fmt: skip
    lead_run(s, (B, C))
    s.at(2.0)
    h1 = s.exchange(1, 0, ABC)
    s.hashes(1, 0, (B,), h1)
    s.at(3.0)
    out = s.exchange_effects(2, 0, ABC)
    assert not rosters(out), out
    out = s.timer()
    while not rosters(out):
        out = s.timer()
    assert [(r.step, r.round, r.peers) for r in rosters(out)] == [(3, 0, [A, B])], out
    return s


def one_step_behind(s: Script) -> None:
    """Follower B of A with C: step 1 computed, every piece in but C's reduced chunk, and
    roster 2 arrives, which B keeps without starting (step 1 is not applied yet)."""
    s.at(1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.compute(1, 0, ABC)
    for j, p in ((0, A), (2, C)):
        s.frames(p, FrameKind.CONTRIBUTION, contributions(j, 1, 0, 3)[1], 1, 0, 1)
    s.frames(A, FrameKind.REDUCED, reduced(1, 0, 3, 0), 1, 0, 0)
    s.at(2.0)
    out = s.send(A, roster_msg(2, 0, ABC))
    assert not [f for f in out if isinstance(f, fx.Compute)], "step 1 is not applied yet"


def follower_one_step_behind() -> Script:
    s = Script("follower-one-step-behind", "B follows A with C. Roster 2 arrives while B still "
               "waits for C's reduced chunk of step 1, and C's contribution of step 2 arrives "
               "too: B holds both, starts step 2 the moment it applies step 1, and uses the "
               "held contribution.", B)  # fmt: skip
    follow(s, A, (C,), config(2))
    one_step_behind(s)
    out = s.frames(C, FrameKind.CONTRIBUTION, contributions(2, 2, 0, 3)[1], 2, 0, 1)
    assert not out, out
    out = s.frames(C, FrameKind.REDUCED, reduced(1, 0, 3, 2), 1, 0, 2)
    h1 = applied(out)
    assert [f for f in out if isinstance(f, fx.Compute)] == [fx.Compute(2, 0, 1, (4, 4, 4))], out
    s.hashes(1, 0, ABC, h1)
    s.at(3.0)
    out = s.compute(2, 0, ABC)
    s.frames(A, FrameKind.CONTRIBUTION, contributions(0, 2, 0, 3)[1], 2, 0, 1)
    for k, p in ((0, A), (2, C)):
        out = s.frames(p, FrameKind.REDUCED, reduced(2, 0, 3, k), 2, 0, k)
    h2 = applied(out)
    s.hashes(2, 0, ABC, h2)
    stop = messages.Stop(RUN, "done", 2, "reached step 2", {})
    s.send(A, stop)
    assert finished(s.send(C, stop)).reason == "done"
    return s


def successor_one_step_behind() -> Script:
    s = Script("successor-one-step-behind", "B follows A with C and is one step behind: roster 2 "
               "waits while C's reduced chunk of step 1 is missing. A leaves, B succeeds it, "
               "and C's chunk never comes: when the timer runs out B re-commits step 1 "
               "(round 1, with C: A's departure explains the missing chunk), not the roster 2 "
               "it cannot compute, and goes on from there.",
               B)  # fmt: skip
    follow(s, A, (C,), config(3))
    one_step_behind(s)
    out = s.left(A)
    assert s.machine.is_leader and not rosters(out), out
    while not rosters(out):
        out = s.timer()
    assert shares_in(out) == [(1, 1, [B, C], [6, 6])], out
    out = s.exchange_effects(1, 1, (B, C), (6, 6))
    applied(out)
    assert shares_in(out) == [(2, 0, [B, C], [6, 6])], out
    return s


def successor_starts_held_roster() -> Script:
    s = Script("successor-starts-held-roster", "B follows A with C and is one step behind: "
               "roster 2 (A, B, C) waits while C's reduced chunk of step 1 is missing. A leaves "
               "and B succeeds it; C's chunk comes, B applies step 1 and starts the held roster "
               "2, in which A is already gone. A's pieces never come: B re-commits step 2 "
               "without A once repair_after (5 s) has passed, not after the step timer (30 s; "
               "an outer round's is H of them).",
               B)  # fmt: skip
    follow(s, A, (C,), config(3))
    one_step_behind(s)
    out = s.left(A)
    assert s.machine.is_leader and not rosters(out), out
    s.at(3.0)
    out = s.frames(C, FrameKind.REDUCED, reduced(1, 0, 3, 2), 1, 0, 2)
    h1 = applied(out)
    assert [f for f in out if isinstance(f, fx.Compute)] == [fx.Compute(2, 0, 1, (4, 4, 4))], out
    s.hashes(1, 0, ABC, h1)
    started = s.now
    out = s.compute(2, 0, ABC)
    while not rosters(out):
        out = s.timer()
    assert s.now <= started + TIMERS.repair_after_s, (s.now, started)
    assert shares_in(out) == [(2, 1, [B, C], [6, 6])], out
    out = s.exchange_effects(2, 1, (B, C), (6, 6))
    applied(out)
    assert shares_in(out) == [(3, 0, [B, C], [6, 6])], out
    return s


def repair_after_own_gradient() -> Script:
    s = Script("repair-after-own-gradient", "Follower B's own compute of step 1 outlasts "
               "repair_after (7 s against 5): the repair timer counts from B's gradient, so "
               "C's contribution, still on its way from a slow device, is asked for again only "
               "repair_after after it (a duplicate would cost C most). C's piece then comes "
               "and B applies.", B)  # fmt: skip
    follow(s, A, (C,), config(1))
    s.at(s.now + 1.0)
    start = s.now
    s.send(A, roster_msg(1, 0, ABC))
    s.at(start + TIMERS.repair_after_s)
    assert not repairs(s.timer()), "nothing to ask for before our own gradient"
    s.at(start + 7.0)
    s.compute(1, 0, ABC)
    s.frames(A, FrameKind.CONTRIBUTION, contributions(0, 1, 0, 3)[1], 1, 0, 1)
    assert s.machine.next_deadline() == start + 7.0 + TIMERS.repair_after_s, "from the gradient"
    out = s.timer()
    assert (C, "contribution", 1) in repairs(out) and (A, "contribution", 1) not in repairs(out)
    s.at(s.now + 0.5)
    s.frames(C, FrameKind.CONTRIBUTION, contributions(2, 1, 0, 3)[1], 1, 0, 1)
    out = s.frames(A, FrameKind.REDUCED, reduced(1, 0, 3, 0), 1, 0, 0)
    out += s.frames(C, FrameKind.REDUCED, reduced(1, 0, 3, 2), 1, 0, 2)
    s.hashes(1, 0, ABC, applied(out))
    stop = messages.Stop(RUN, "done", 1, "reached step 1", {})
    assert stops(s.send(A, stop)) == [(A, stop), (C, stop)]
    assert finished(s.send(C, stop)).reason == "done"
    return s


def payload_sends(effects: list[fx.Effect]) -> list[tuple[str, FrameKind, int]]:
    """(peer, kind, chunk) of every payload the effects send."""
    return [(f.peer, f.kind, f.chunk) for f in effects if isinstance(f, fx.SendPayload)]


def early_chunks() -> Script:
    s = Script("early-chunks", "Follower B's backward produces its chunks from the end of the "
               "gradient: chunk 2 leaves for C at once, and with its own chunk 1 in early and "
               "A's and C's parts arrived, B reduces and sends chunk 1 while it still "
               "computes; compute-done then sends only chunk 0. At step 2 C asks again for the "
               "chunk B sent early, before B's compute is done, and B serves it.", B)  # fmt: skip
    follow(s, A, (C,), config(2))
    s.at(s.now + 1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.at(s.now + 0.5)
    assert payload_sends(s.partial(1, 0, ABC, 2)) == [(C, FrameKind.CONTRIBUTION, 2)]
    s.at(s.now + 0.2)
    assert payload_sends(s.partial(1, 0, ABC, 1)) == [], "our own chunk stays"
    s.frames(A, FrameKind.CONTRIBUTION, contributions(0, 1, 0, 3)[1], 1, 0, 1)
    out = s.frames(C, FrameKind.CONTRIBUTION, contributions(2, 1, 0, 3)[1], 1, 0, 1)
    want = [(A, FrameKind.REDUCED, 1), (C, FrameKind.REDUCED, 1)]
    assert payload_sends(out) == want, "reduced while computing"
    out = s.frames(A, FrameKind.REDUCED, reduced(1, 0, 3, 0), 1, 0, 0)
    out += s.frames(C, FrameKind.REDUCED, reduced(1, 0, 3, 2), 1, 0, 2)
    assert not [f for f in out if isinstance(f, fx.StepApplied)], "no apply before compute-done"
    s.at(s.now + 0.3)
    out = s.compute(1, 0, ABC)
    assert payload_sends(out) == [(A, FrameKind.CONTRIBUTION, 0)], out
    digest = applied(out)
    assert digest == honest_hash(INIT, 1, 0, 3)
    s.hashes(1, 0, ABC, digest)
    s.at(s.now + 1.0)
    s.send(A, roster_msg(2, 0, ABC))
    s.partial(2, 0, ABC, 2)
    out = s.send(C, messages.Repair(RUN, 2, 0, "contribution", 2))
    assert payload_sends(out) == [(C, FrameKind.CONTRIBUTION, 2)], "served before compute-done"
    out = s.send(A, messages.Repair(RUN, 2, 0, "contribution", 2))
    assert payload_sends(out) == [], "only the chunk's owner may ask"
    s.at(s.now + 0.5)
    second = s.exchange(2, 0, ABC)
    assert second == honest_hash(digest, 2, 0, 3)
    s.hashes(2, 0, ABC, second)
    stop = messages.Stop(RUN, "done", 2, "reached step 2", {})
    assert stops(s.send(A, stop)) == [(A, stop), (C, stop)]
    assert finished(s.send(C, stop)).reason == "done"
    return s


def early_chunk_differs() -> Script:
    s = Script("early-chunk-differs", "Follower B's shell sends chunk 2 early and then "
               "reports other bytes for it in compute-done: the shell is broken (what C "
               "reduces would not be B's gradient), so B ends the run with error.",
               B)  # fmt: skip
    follow(s, A, (C,), config(1))
    s.at(s.now + 1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.partial(1, 0, ABC, 2, payload=contributions(0, 1, 0, 3)[2])  # A's bytes, not B's
    out = s.compute(1, 0, ABC)
    outcome = finished(out)
    assert outcome.reason == "error" and "than it sent early" in outcome.message, outcome
    return s


def early_chunk_twice() -> Script:
    s = Script("early-chunk-twice", "Follower B's shell hands over chunk 2 early twice: a "
               "chunk leaves once, so B ends the run with error.", B)  # fmt: skip
    follow(s, A, (C,), config(1))
    s.at(s.now + 1.0)
    s.send(A, roster_msg(1, 0, ABC))
    s.partial(1, 0, ABC, 2)
    outcome = finished(s.partial(1, 0, ABC, 2))
    assert outcome.reason == "error" and "sent already" in outcome.message, outcome
    return s


def final_hashes_after_stop() -> Script:
    s = Script("final-hashes-after-stop", "B follows leader A with C, D, E and F for the last "
               "step (issue 44): F's hash of step 1 comes before A's stop done, C's and D's "
               "after it (before each one's stop acknowledgement, on the same channel), and E "
               "leaves without one (after a hash of another run; a never-greeted G sends one "
               "too: neither counts). B records the late hashes while it lingers: C's honest "
               "hash counts, D's differing hash is kept as published (the stop is final, so it "
               "stops nothing), E's is absent; finished.hashes is that final agreement.",
               B)  # fmt: skip
    peers = (A, B, C, D, E, F)
    follow(s, A, (C, D, E, F), config(1))
    s.at(s.now + 1.0)
    s.send(A, roster_msg(1, 0, peers))
    digest = s.exchange(1, 0, peers)
    s.hashes(1, 0, (A, F), digest)
    stop = messages.Stop(RUN, "done", 1, "reached step 1", {})
    out = s.send(A, stop)
    assert stops(out) == [(p, stop) for p in (A, C, D, E, F)], out
    s.hashes(1, 0, (C,), digest)
    lying = hashlib.sha256(b"a hash that lies").hexdigest()
    s.hashes(1, 0, (D,), lying)
    # Neither a hash of another run nor one from a peer never greeted enters the agreement.
    s.send(E, messages.StepHash(OTHER_RUN, 1, 0, digest, loss_of(1), REFERENCE_PROBE, "numpy",
                                0.0))  # fmt: skip
    g = "G" * 12
    s.feed(ev.ChannelOpened(s.now, g))
    s.send(g, messages.StepHash(RUN, 1, 0, digest, loss_of(1), REFERENCE_PROBE, "numpy", 0.0))
    s.send(E, messages.Leave("the user left"))
    assert not stop_acks(s, (C, D), stop), "F has not acknowledged yet"
    outcome = finished(s.send(F, stop))
    assert outcome.reason == "done", outcome
    assert outcome.hashes == {A: digest, B: digest, C: digest, D: lying, F: digest}, outcome
    return s


SCENARIOS: dict[str, Callable[[], Script]] = {
    "leader-3-peers": leader_three_peers,
    "follower-3-peers": follower_three_peers,
    "join-with-checkpoint": join_with_checkpoint,
    "lobby-early-hash": lobby_early_hash,
    "follower-gone-mid-exchange": follower_gone_mid_exchange,
    "leader-gone-before-roster": leader_gone_before_roster,
    "leader-gone-during-exchange": leader_gone_during_exchange,
    "leader-gone-after-apply": leader_gone_after_apply,
    "follower-held-roster": follower_held_roster,
    "crc-damage-repair": crc_damage_repair,
    "forged-reduced-guard": forged_reduced_guard,
    "hash-mismatch-fork": hash_mismatch_fork,
    "probe-mismatch": probe_mismatch,
    "version-mismatch-lobby": version_mismatch_lobby,
    "version-mismatch-in-run": version_mismatch_in_run,
    "wrong-run": wrong_run,
    "hostile-config": hostile_config,
    "stop-races-failover": stop_races_failover,
    "straggler-recommit": straggler_recommit,
    "frames-hostile": frames_hostile,
    "save-and-leave": save_and_leave,
    "resume-leader": resume_leader,
    "contract-mismatch": contract_mismatch,
    "compute-failed": compute_failed,
    "leader-weighted-shares": leader_weighted_shares,
    "leader-equal-shares": leader_equal_shares,
    "follower-share-zero": follower_share_zero,
    "roster-bad-shares": roster_bad_shares,
    "weighted-join-and-loss": weighted_join_and_loss,
    "leader-hash-one-step-late": leader_hash_one_step_late,
    "leader-drops-laggard": leader_drops_laggard,
    "follower-one-step-behind": follower_one_step_behind,
    "successor-one-step-behind": successor_one_step_behind,
    "successor-starts-held-roster": successor_starts_held_roster,
    "repair-after-own-gradient": repair_after_own_gradient,
    "early-chunks": early_chunks,
    "early-chunk-differs": early_chunk_differs,
    "early-chunk-twice": early_chunk_twice,
    "final-hashes-after-stop": final_hashes_after_stop,
    "v6-audit-config": audit_config_refused,
    "v6-audit-messages": audit_messages_refused,
    "v6-audit-repair": audit_repair_refused,
}
