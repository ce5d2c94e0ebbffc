"""The protocol machine: one peer's whole data-channel protocol, without I/O.

In the spirit of aioquic's ``QuicConnection`` and h11: the machine owns every piece of protocol
state and changes it only in ``handle(event)``, which returns the effects the shell must carry
out, in order; ``next_deadline()`` says when the shell must feed ``Timer``. It reads no clock
(``now`` comes with every event), opens no socket, starts no thread and awaits nothing, so any
sequence of events is a fast deterministic test, and a second implementation (the browser) is
checked against the same traces (tests/vectors/protocol/, docs/PROTOCOL.md "The protocol
machine").

The state lives in one object per concept: ``PeerTable`` (channels and their peers),
``Leadership`` (leader, committed and held rosters, what the leader heard), ``RepairStore``
(the attempts of the last steps, each an ``Attempt`` with its phase), ``SyncGuard``,
``StateSync`` and ``Stopping``; the run's phase is ``run.RunPhase``. This module holds the rules
that tie them together.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import cast

from daisychain.model.config import ModelConfig
from daisychain.model.params import param_shapes
from daisychain.p2p import DATA_PROTOCOL_VERSION, run, runconfig, shares
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.machine.attempt import Attempt, AttemptPhase
from daisychain.p2p.machine.guard import Fork, SyncGuard, Tally
from daisychain.p2p.machine.leadership import Leadership
from daisychain.p2p.machine.peers import PeerState, PeerTable
from daisychain.p2p.machine.repair import RepairStore, requests
from daisychain.p2p.machine.replica import Replica, ReplicaRefused
from daisychain.p2p.machine.settings import Settings
from daisychain.p2p.machine.statesync import StateSync, SyncState
from daisychain.p2p.machine.stopping import Stopped, Stopping
from daisychain.p2p.run import CommittedRoster, Phase
from daisychain.wire import codec, frames, messages
from daisychain.wire.frames import FrameKind

# The data-channel version whose messages commit, then audit (docs/TRUST.md, "Config and
# versions"): this machine speaks DATA_PROTOCOL_VERSION (6) and refuses them.
AUDITS_VERSION = 7
log = logging.getLogger("daisychain.p2p.machine")

MAX_ROUNDS = 256  # a step re-committed this often ends the run


class Machine:
    """One peer's data-channel protocol (docs/PROTOCOL.md, "Data channels")."""

    def __init__(self, settings: Settings, replica: Replica) -> None:
        self.settings = settings
        self.id = settings.id
        self.replica = replica
        self.phase = run.RunPhase(settings.name or settings.id)
        self.peers = PeerTable(settings.id, self._limit)
        self.leadership = Leadership(settings.id)
        self.store = RepairStore()
        self.guard = SyncGuard(settings.id, settings.reference_probe)
        self.sync = StateSync()
        self.stopping = Stopping()
        self.config: messages.Config | None = None
        self.has_state = False
        # Our gradients are of text only this device holds (user-private-data); fixed once a
        # run is configured, and said in our `ready` or `sync-request`.
        self.private_data = False
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.total_blocks = 0
        self.transfer = 0
        self.save_at: set[int] = set()
        self.saved_step = -1
        self._out: list[fx.Effect] = []
        self._now = 0.0

    # ------------------------------------------------------------------------------------------
    # the interface

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader

    @property
    def leader(self) -> str | None:
        return self.leadership.leader

    @property
    def roster(self) -> CommittedRoster | None:
        return self.leadership.roster

    @property
    def finished(self) -> bool:
        return self.stopping.finished

    def handle(self, event: ev.Event) -> list[fx.Effect]:
        """Feed one event; returns the effects to carry out, in order."""
        self._now = event.now
        if self.stopping.finished:
            return []
        try:
            if self.stopping.stopped:
                self._while_stopped(event)
            else:
                self._dispatch(event)
                self._advance()
        except Stopped as stopped:
            self._begin_stopping(stopped)
        except Fork as fork:
            self._begin_stopping(self._fork_stop(fork))
        if self.stopping.stopped and self.stopping.done(self._now):
            assert self.stopping.outcome is not None
            self._out.append(fx.Finished(self._final_outcome(self.stopping.outcome)))
        out, self._out = self._out, []
        return out

    def next_deadline(self) -> float | None:
        """When the shell must feed ``Timer`` (None: no timer is running)."""
        if self.stopping.finished:
            return None
        if self.stopping.stopped:
            return self.stopping.linger_until if self.stopping.waiting else None
        t = self.settings.timers
        soon = self.peers.next_hello_deadline(t.hello_timeout_s)
        a = self._current()
        if a is not None and a.live:
            soon = a.repair_at if soon is None else min(soon, a.repair_at)
        if a is not None and self.is_leader and self.phase.phase is Phase.TRAINING:
            soon = a.deadline if soon is None else min(soon, a.deadline)
        return soon

    def agreement(self, step: int) -> tuple[int, int]:
        return self.guard.agreement(step)

    @property
    def private_data_peers(self) -> frozenset[str]:
        """Read-only: the peers of this run known to train on private data: those whose
        ``ready`` or ``sync-request`` said so (the leader hears them), and this one."""
        ours = {self.id} if self.private_data and self.config is not None else set()
        return frozenset(self.leadership.private_data | ours)

    def tally(self, step: int, rnd: int, roster: list[str]) -> Tally | None:
        """Read-only: the guard's tally of attempt (step, rnd) over ``roster`` (guard.py)."""
        return self.guard.tally((step, rnd), roster)

    # ------------------------------------------------------------------------------------------
    # effects

    def _send(self, peer: str, message: messages.Message) -> None:
        self._out.append(fx.SendMessage(peer, message))

    def _broadcast(self, message: messages.Message) -> None:
        for peer in self.peers.live():
            self._send(peer, message)

    def _send_payload(
        self, peer: str, kind: FrameKind, payload: bytes, step: int, rnd: int = 0, chunk: int = 0
    ) -> None:
        self.transfer = (self.transfer + 1) & 0xFFFFFFFF
        deflate = kind is not FrameKind.CHECKPOINT  # checkpoints go uncompressed
        self._out.append(
            fx.SendPayload(peer, kind, step, rnd, chunk, self.transfer, deflate, payload)
        )

    def _stop(
        self, reason: str, message: str, hashes: dict[str, str] | None = None, code: str = ""
    ) -> Stopped:
        """The run ends here (raise the result). ``done``, ``fork`` and ``leader-request`` are
        announced with ``stop``; an ``error`` is this peer's own failure."""
        step = self.replica.step if self.has_state else 0
        stop = None
        if self.config is not None and reason in ("done", "fork", "leader-request"):
            announced = cast(messages.StopReason, reason)
            stop = messages.Stop(self.config.run, announced, step, message, dict(hashes or {}))
        outcome = fx.Outcome(reason, step, self._hash(), message, dict(hashes or {}), code)
        return Stopped(outcome, stop)

    def _fork_stop(self, fork: Fork) -> Stopped:
        log.error("%s: SYNC GUARD: %s", self.id, fork.message)
        return self._stop("fork", fork.message, fork.hashes)

    def _hash(self) -> str:
        return self.replica.hash if self.has_state else ""

    # ------------------------------------------------------------------------------------------
    # events

    def _dispatch(self, e: ev.Event) -> None:
        if isinstance(e, ev.ChannelOpened):
            if self.peers.state(e.peer) is None:
                self.peers.opened(e.peer, e.now)
                self._send(e.peer, messages.Hello(DATA_PROTOCOL_VERSION, self.settings.name[:40]))
        elif isinstance(e, ev.ChannelClosed):
            self.peers.channel_closed(e.peer)
            self._peer_gone(e.peer, "closed")
        elif isinstance(e, ev.PeerLeft):
            self._peer_gone(e.peer, "left")
        elif isinstance(e, ev.MessageReceived):
            self._on_text(e.peer, e.text)
        elif isinstance(e, ev.FrameReceived):
            self._on_frame(e.peer, e.data)
        elif isinstance(e, ev.ComputeDone):
            self._on_computed(e)
        elif isinstance(e, ev.ComputePartial):
            self._on_partial(e)
        elif isinstance(e, ev.ComputeFailed):
            raise self._stop("error", f"step {e.step}: compute failed: {e.error}")
        elif isinstance(e, ev.Timer):
            self._on_timer(e.now)
        elif isinstance(e, ev.UserLead):
            self._lead(e.config, e.min_peers)
        elif isinstance(e, ev.UserStop):
            if self.is_leader and self.config is not None:
                log.info("%s: ending the run at the next boundary: %s", self.id, e.reason)
                self.leadership.end_requested = e.reason or "the leader ended the run"
            else:
                log.warning("%s: only the leader can end the run", self.id)
        elif isinstance(e, ev.UserLeave):
            self._broadcast(messages.Leave(e.reason))
            raise Stopped(fx.Outcome("left", self.replica.step if self.has_state else 0,
                                     self._hash(), e.reason))  # fmt: skip
        elif isinstance(e, ev.UserSave):
            if self.is_leader and self.config is not None and self.has_state:
                self._broadcast(messages.Save(self.config.run, self.replica.step))
            if self.settings.can_save and self.has_state:
                self._save()
        elif isinstance(e, ev.UserPrivateData):
            if self.config is None:
                self.private_data = e.on
            else:  # the leader was told already: this run keeps what it said
                log.warning("%s: private data changes only between runs", self.id)
        else:
            assert isinstance(e, ev.SignalingLost)
            raise self._stop("error", f"lost the signaling server: {e.reason}")

    def _on_text(self, peer: str, text: str) -> None:
        state = self.peers.state(peer)
        if state is None:
            log.warning("%s: message from %s without a channel ignored", self.id, peer)
            return
        if state is PeerState.GONE:
            self._from_gone(peer, text)
            return
        try:
            message = messages.parse(text)
        except messages.MessageError as exc:
            if exc.code == "version-mismatch":
                self._send(peer, messages.error_from(exc))
                self._other_version(peer, exc.message, exc.hint)
                return
            self._reject(peer, exc.code, exc.message, exc.hint)
            return
        if isinstance(message, messages.Hello):
            self.peers.greet(peer)
            self._on_greeted(peer)
            return
        if state is not PeerState.GREETED:
            self._reject(peer, "bad-message", f"{message.type} before hello")
            return
        self._on_message(peer, message)

    def _on_frame(self, peer: str, data: bytes) -> None:
        entry = self.peers.get(peer)
        if entry is None or entry.state is PeerState.GONE:
            return  # only a stop is heard from a gone peer, and a stop is text
        if entry.state is not PeerState.GREETED:
            self._reject(peer, "bad-frame", "binary frame before hello")
            return
        try:
            payload = entry.reassembler.feed(data)
        except frames.ChecksumError as exc:
            log.warning("%s: %s from %s; asking again", self.id, exc, peer)
            self._ask_again(peer, exc.head)
            return
        except frames.FrameError as exc:
            self._reject(peer, "bad-frame", str(exc))
            return
        if payload is None:
            return
        if payload.kind is FrameKind.CHECKPOINT:
            self._on_checkpoint(peer, payload)
        else:
            self._on_piece(peer, payload)

    def _on_message(self, peer: str, m: messages.Message) -> None:
        cfg = self.config
        if m.type in messages.AUDIT_TYPES or (
            isinstance(m, messages.Repair) and m.piece in messages.AUDIT_PIECES
        ):
            self._refuse_audit_message(peer, m)
            return
        if isinstance(m, messages.Config):
            self._on_config(peer, m)
            return
        if isinstance(m, messages.Leave):
            self._peer_gone(peer, f"leave: {m.reason}")
            return
        if isinstance(m, messages.Error):
            if m.code == "version-mismatch":
                self._other_version(peer, m.message, m.hint)
            log.warning("%s: %s says %s: %s", self.id, peer, m.code, m.message)
            return
        if cfg is None:
            # In the lobby. Peers of a running group send their run's messages (`hash` after
            # every step, `save`, `stop`) to every greeted channel, and one can overtake the
            # leader's `config` to a newcomer; it tells this peer nothing it needs (the config
            # and the state sync do), so it is dropped, not refused: closing that channel would
            # leave the newcomer without a link to a roster member when the config arrives.
            log.debug("%s: %s from %s before any config: ignored", self.id, m.type, peer)
            return
        if getattr(m, "run", cfg.run) != cfg.run:
            self._reject(peer, "wrong-run", f"{m.type} for a run this peer is not in")
            return
        lead = self.leadership
        if isinstance(m, messages.Ready | messages.SyncRequest) and m.private_data:
            if peer not in lead.private_data:
                log.info("%s: %s trains on private data", self.id, peer)
            lead.private_data.add(peer)
        if isinstance(m, messages.Ready):
            lead.ready[peer] = m
            lead.speeds[peer] = m.seq_s
        elif isinstance(m, messages.SyncRequest):
            lead.sync_wanted.add(peer)
        elif isinstance(m, messages.Roster):
            wrong = shares.check(m.shares, len(m.peers), cfg.global_batch)
            if wrong is not None:
                self._reject(peer, "bad-message", f"roster of step {m.step}: {wrong}")
                return
            r = CommittedRoster(m.step, m.round, tuple(m.peers), tuple(m.shares))
            if peer != lead.leader:
                # Our view of who left may lag behind the sender's: hold it; if the successor
                # rule later names the sender, it is applied then.
                lead.hold(peer, r)
            else:
                self._accept_roster(r)
        elif isinstance(m, messages.StepHash):
            lead.speeds[peer] = m.seq_s
            self.guard.check_probe(peer, m.step, m.probe, m.backend)
            self.guard.record(peer, (m.step, m.round), m.hash, m.backend)
        elif isinstance(m, messages.Missing):
            lead.missing_reports.setdefault((m.step, m.round), set()).update(m.peers)
        elif isinstance(m, messages.Repair):
            served = self.store.serve(peer, m)
            if served is not None:
                self._send_payload(peer, served.kind, served.payload, m.step, m.round, m.chunk)
        elif isinstance(m, messages.Save):
            self.save_at.add(m.step)
            self._maybe_save()
        elif isinstance(m, messages.Stop):
            self._on_stop(peer, m)

    def _refuse_audit_message(self, peer: str, m: messages.Message) -> None:
        """Commit, then audit (docs/TRUST.md) is declared in messages (version 7) but this
        machine does not audit: its messages and repair pieces are what an unknown type or
        piece was before they were declared, a peer that breaks the protocol it greeted with
        (error, then close), in the lobby and in a run alike."""
        if isinstance(m, messages.Repair):
            code: messages.ErrorCode = "bad-message"
            what = f"repair of a {m.piece}"
        else:
            code, what = "unknown-type", f"control message {m.type}"
        self._reject(
            peer, code,
            f"{what} belongs to commit, then audit (data-channel version {AUDITS_VERSION}); "
            f"this peer speaks version {DATA_PROTOCOL_VERSION}",
            "every peer of a run must run the same DaisyChain version; upgrade the older one",
        )  # fmt: skip

    def _reject(self, peer: str, code: messages.ErrorCode, why: str, hint: str = "") -> None:
        """A hostile or broken peer: say why, close its channel, drop it from the run."""
        log.warning("%s: closing channel to %s: %s: %s", self.id, peer, code, why)
        hint = hint or "see docs/PROTOCOL.md, Data channels"
        self._send(peer, messages.Error(code, why[:200], hint))
        self._peer_gone(peer, f"rejected ({code})")
        self._out.append(fx.Close(peer))

    def _other_version(self, peer: str, message: str, hint: str) -> None:
        """The other side speaks another protocol version. A peer already in a run keeps
        training without it; a peer still in the lobby cannot join this group and exits."""
        if self.phase.phase is Phase.LOBBY and not self.leadership.leads_own_run:
            raise self._stop("error", f"{message} (peer {peer}); {hint}", code="version-mismatch")
        self._peer_gone(peer, "protocol version mismatch")
        self._out.append(fx.Close(peer))

    def _limit(self, kind: FrameKind) -> int:
        """The largest payload of ``kind`` accepted now (0: not expected)."""
        if not self.shapes:
            return 0
        if kind is FrameKind.CHECKPOINT:
            n = sum(_size(s) for s in self.shapes.values())
            return 12 * n + 1024 * 1024 if self.sync.awaiting else 0
        return self.total_blocks * (codec.BLOCK + 1)

    def _current(self) -> Attempt | None:
        """The attempt this peer works on: the committed roster's, or, while that roster waits
        for this peer to apply the step before it (a follower one step behind, "Rosters"), the
        live attempt of that step."""
        r = self.leadership.roster
        if r is None:
            return None
        a = self.store.get((r.step, r.round))
        return a if a is not None else self.store.live(r.step - 1)

    # ------------------------------------------------------------------------------------------
    # membership: leading, config, greeting, peers gone, failover

    def _parse(self, cfg: messages.Config) -> runconfig.RunConfig:
        """Validate once (``runconfig.parse``): the run, or ``runconfig.Incompatible``."""
        s = self.settings
        accepted = runconfig.parse(cfg, tokenizer_sha256=s.tokenizer_sha256,
                                   vocab_size=s.vocab_size, limits=s.limits,
                                   data_sources=s.data_sources,
                                   private_data=self.private_data)  # fmt: skip
        if cfg.audit is not None:
            # Last: the protocol's rules above are answered as a version-7 peer answers them;
            # only then does this peer say what it cannot do (as it would refuse a v7 run).
            raise runconfig.Incompatible(
                "audit-version",
                "this peer cannot audit contributions yet (data-channel version "
                f"{DATA_PROTOCOL_VERSION})",
                "ask the leader to start without --audit",
            )
        return accepted

    def _lead(self, config: messages.Config, min_peers: int) -> None:
        try:  # the leader trains its run too: the followers' rules and its own caps apply
            accepted = self._parse(config)
        except runconfig.Incompatible as exc:
            raise self._stop("error", f"cannot lead this run: {exc.message}; {exc.hint}",
                             code=exc.code) from None  # fmt: skip
        model = accepted.model
        self.replica.set_outer(accepted.outer)
        self.leadership.lead(min_peers)
        self.config = config
        self.has_state = True
        self._set_shapes(model)
        self.phase.transition(Phase.CONFIGURED, "leading")
        self._broadcast(config)

    def _on_config(self, peer: str, cfg: messages.Config) -> None:
        if self.leadership.leads_own_run:
            self._reject(peer, "wrong-run", "this peer leads its own run")
            return
        if self.config is not None:
            # The same run is the same canonical bytes (what machine.js's sameConfig compares):
            # every field, as encoded; 0.0 and -0.0 differ here where == would not.
            if messages.encode(cfg) != messages.encode(self.config):
                self._reject(peer, "wrong-run", "a second, different run configuration")
            return
        try:
            accepted = self._parse(cfg)
        except runconfig.Incompatible as exc:
            # Refused, not fatal: this peer stays in the lobby for the next run.
            self._reject(peer, exc.code, exc.message, exc.hint)
            return
        self.config = cfg
        self.leadership.leader = peer
        self.replica.set_outer(accepted.outer)  # before start or restore: the sync mode
        self._set_shapes(accepted.model)
        self.phase.transition(Phase.CONFIGURED, f"config from {peer}")
        if cfg.resume_step == 0:
            self.replica.start(accepted.model, accepted.optim, cfg.seed)
            self.has_state = True
            self._send(peer, self._ready())
        else:
            self._request_sync()

    def _set_shapes(self, model: ModelConfig) -> None:
        """Parameter shapes fix every frame size limit (known from the config alone)."""
        self.shapes = param_shapes(model)
        self.total_blocks = codec.n_blocks(sum(_size(s) for s in self.shapes.values()))

    def _ready(self) -> messages.Ready:
        assert self.config is not None
        return messages.Ready(
            self.config.run,
            self.replica.step,
            self.replica.hash,
            self.peers.live_open(),
            self._seq_s(),
            self.private_data,
        )

    def _seq_s(self) -> float:
        """This peer's seconds per sequence as last measured by its shell (0: never)."""
        return self.leadership.speeds.get(self.id, 0.0)

    def _on_greeted(self, peer: str) -> None:
        if self.is_leader and self.config is not None:
            # A late peer learns the run from the leader: config, then the current roster (a
            # peer not in it asks for the state and enters the roster after the checkpoint).
            self._send(peer, self.config)
            r = self.leadership.roster
            if r is not None:
                self._send(peer, messages.Roster(self.config.run, r.step, r.round, list(r.peers),
                                                 list(r.shares)))  # fmt: skip

    def _peer_gone(self, peer: str, why: str) -> None:
        if not self.peers.gone(peer):
            return
        self.leadership.forget(peer)
        log.info("%s: peer %s gone (%s)", self.id, peer, why)
        a = self._current()
        if a is not None and peer in a.roster.peers and a.live:
            a.repair_at = min(a.repair_at, self._now)
            a.deadline = min(a.deadline, self._now + self.settings.timers.repair_after_s)
        if peer == self.leadership.leader:
            self._leader_gone()

    def _leader_gone(self) -> None:
        lead = self.leadership
        if lead.roster is None:
            raise self._stop("error", "the leader left before the first step; start the run again")
        new = lead.fail_over(self.peers.gone_set)
        if new is None:
            raise self._stop("error", "every peer of the last roster left")
        if self.is_leader:
            a = self._current()
            if a is not None:
                a.deadline = min(a.deadline, self._now + self.settings.timers.repair_after_s)
            return
        if self.sync.awaiting:
            self.sync.done()
            self._request_sync()  # ask the successor
        held = lead.take_held()
        if held is not None:
            self._accept_roster(held)

    # ------------------------------------------------------------------------------------------
    # rosters

    def _accept_roster(self, r: CommittedRoster) -> None:
        self.leadership.roster = r
        if self.phase.phase is Phase.CONFIGURED:
            self.phase.transition(Phase.TRAINING, f"roster of step {r.step}")
        if not self.has_state:
            self._request_sync()
            return
        step = self.replica.step
        if self.id not in r.peers:
            if step != r.step - 1 or not self.is_leader:
                self._request_sync()
            return
        if step == r.step - 2 and self.store.live(step + 1) is not None:
            # The leader committed the next step before this peer applied the current one
            # (it waits for hashes one step late): it starts once that step is applied.
            log.debug("%s: roster of step %d waits for step %d", self.id, r.step, step + 1)
            return
        if step != r.step - 1:
            if step < r.step - 1 or (r.step, r.round) not in self.store:
                self._request_sync()
            return
        t = self.settings.timers
        outer = self.config is not None and self.config.sync == messages.SYNC_OUTER
        a = Attempt(r, r.rank(self.id), self.total_blocks, self._now, outer=outer)
        a.repair_at = self._now + t.repair_after_s
        # An outer round is H inner steps of compute: its timeout is H step timeouts.
        rounds = self.config.outer.steps if outer and self.config and self.config.outer else 1
        a.deadline = self._now + t.step_timeout_s * rounds
        if self.peers.gone_set & set(r.peers):
            # A roster peer left before this attempt began (the roster waited here for the step
            # before it): its pieces never come, so repair as if it had left now, not after the
            # whole step timer (H of them in an outer round, longer than a test or a user waits).
            a.deadline = min(a.deadline, self._now + t.repair_after_s)
        self.store.add(a)
        self.store.abandon_before(a.key)
        self._out.append(fx.Compute(r.step, r.round, a.rank, r.shares))
        for sender, payload in self.store.take_early(a.key):
            self._on_piece(sender, payload)

    def _advance(self) -> None:
        """The leader's decisions, re-evaluated after every event."""
        self._follower_sync()
        if not self.is_leader or not self.has_state or self.config is None:
            return
        if self.phase.phase is Phase.CONFIGURED:
            self._leader_start()
            return
        r = self.leadership.roster
        if self.phase.phase is not Phase.TRAINING or r is None:
            return
        a = self._current()
        gone = self.peers.gone_set
        alive = [p for p in r.peers if p not in gone]
        if a is not None and a.applied:
            # Pipelined boundary: the next step is committed once every peer still present is
            # known to hold the state of the step before this one (its hash of that step is in
            # and equal, the guard saw to that), so a slow peer applies this step while the
            # others compute the next. The last step (and a requested end) waits for every
            # hash of this step: the run ends with every replica at it.
            last = r.step >= self.config.steps or bool(self.leadership.end_requested)
            holding = [p for p in alive if self._holds(p, a, last)]
            if len(holding) < len(alive) and self._now < a.deadline:
                return
            self._boundary(holding)
            return
        if a is not None and self._now < a.deadline:
            return
        if a is not None and a.roster.step < r.step:
            # A successor one step behind: the step before the committed roster never
            # completed here. Re-commit that step (peers that applied it sync back).
            r = a.roster
        # The attempt cannot complete: re-commit the step without the peers that vanished or
        # whose pieces never arrived (at the leader or at any peer that reported). A roster peer
        # that went gone explains every missing piece (an owner cannot reduce its chunk without
        # the gone peer's contribution), so then only the gone peers are dropped: a present peer
        # is not pushed out to a checkpoint resync for a departure, and one that is really stuck
        # meets the new round's full step timer.
        drop = gone & set(r.peers)
        if not drop:
            drop = set(self.leadership.missing_reports.get((r.step, r.round), set()))
            if a is not None:
                drop |= a.missing_from()
        drop.discard(self.id)
        peers = run.make_roster([p for p in r.peers if p not in drop] + [self.id])
        log.warning("%s: step %d round %d incomplete; dropping %s", self.id, r.step, r.round,
                    sorted(drop & set(r.peers)))  # fmt: skip
        self._commit(r.step, r.round + 1, peers)

    def _holds(self, peer: str, a: Attempt, last: bool) -> bool:
        """Leader, attempt ``a`` applied: may ``peer`` enter the next roster? With ``last``
        it must hold this step's state (its hash of ``a`` equals ours); otherwise the state of
        the step before: its hash of the attempt we applied there equals ours, or it was not in
        that attempt (it entered ``a``'s roster with that state, by ``ready`` or the
        checkpoint)."""
        if last:
            return self.guard.have(a.key).get(peer) == self.replica.hash
        before = self.store.applied(a.roster.step - 1)
        if before is None or peer not in before.roster.peers:
            return True
        have = self.guard.have(before.key)
        return peer in have and have.get(peer) == have.get(self.id)

    def _leader_start(self) -> None:
        assert self.config is not None
        for peer in self._serve_syncs():
            self.leadership.ready[peer] = messages.Ready(
                self.config.run, self.replica.step, self.replica.hash, [], 0.0
            )
        candidates = [self.id, *self._eligible()]
        if len(candidates) < self.leadership.min_peers:
            return
        self._commit(self.replica.step + 1, 0, run.make_roster(candidates))

    def _eligible(self) -> list[str]:
        return self.leadership.eligible(self.peers.gone_set, self.replica.step, self.replica.hash)

    def _boundary(self, continuing: list[str]) -> None:
        """Step ``replica.step`` is complete: stop, or commit the next roster."""
        assert self.config is not None
        step = self.replica.step
        if step >= self.config.steps:
            raise self._stop("done", f"reached step {step}")
        if self.leadership.end_requested:
            raise self._stop("leader-request", f"{self.leadership.end_requested} at step {step}")
        joiners = self._serve_syncs() + self._eligible()
        self.leadership.ready.clear()
        self._commit(step + 1, 0, run.make_roster({*continuing, *joiners, self.id}))

    def _commit(self, step: int, rnd: int, peers: tuple[str, ...]) -> None:
        assert self.config is not None
        if rnd >= MAX_ROUNDS:
            raise self._stop("error", f"step {step} failed {MAX_ROUNDS} times")
        # Faster peers take more of the step's sequences, so that everyone finishes together;
        # "equal" splits as if no one were measured (allot's equal weights).
        speeds = self.leadership.speeds if self.config.shares_by == "speed" else {}
        split = shares.allot([speeds.get(p, 0.0) for p in peers], self.config.global_batch)
        self._broadcast(messages.Roster(self.config.run, step, rnd, list(peers), list(split)))
        log.info("%s: roster step %d round %d: %s", self.id, step, rnd,
                 ", ".join(f"{p} x{s}" for p, s in zip(peers, split, strict=True)))  # fmt: skip
        self._accept_roster(CommittedRoster(step, rnd, peers, split))

    # ------------------------------------------------------------------------------------------
    # the exchange

    def _on_computed(self, e: ev.ComputeDone) -> None:
        a = self.store.get((e.step, e.round))
        if a is None or a.phase is not AttemptPhase.COMPUTING:
            return  # the attempt was abandoned meanwhile
        if len(e.payloads) != a.n:
            raise self._stop("error", f"step {e.step}: compute returned {len(e.payloads)} "
                             f"chunks for {a.n} peers")  # fmt: skip
        for k in a.chunks if a.contributes else ():
            want = a.chunk_blocks(k) * (codec.BLOCK + 1)
            if len(e.payloads[k]) != want:  # a shell that computed other shares than committed
                raise self._stop("error", f"step {e.step}: compute returned {len(e.payloads[k])} "
                                 f"bytes for chunk {k} of {want}")  # fmt: skip
        for k, early in a.early.items():
            if e.payloads[k] != early:  # what left early must be what the gradient is
                raise self._stop("error", f"step {e.step}: compute returned other bytes for "
                                 f"chunk {k} than it sent early")  # fmt: skip
        if e.seq_s > 0:
            self.leadership.speeds[self.id] = e.seq_s
        a.computed_with(e.loss, e.payloads, e.probe)
        # The repair timer counts from our own gradient: the others' pieces were shaped to come
        # about when ours is ready, so a step longer than repair_after_s must not ask a slow
        # peer to send again what it is still sending (a duplicate costs it most).
        a.repair_at = max(a.repair_at, self._now + self.settings.timers.repair_after_s)
        if a.contributes:
            for k in a.chunks:
                if k != a.rank and k not in a.early:
                    peer = a.roster.peers[k]
                    self._send_payload(peer, FrameKind.CONTRIBUTION, e.payloads[k], e.step,
                                       e.round, k)  # fmt: skip
        self._try_reduce(a)
        # A peer whose own chunk is empty reduces nothing, so _try_reduce never reaches
        # _try_apply: when every reduced chunk came while it computed (a slow device that
        # follows), nothing else would apply the step. (A no-op in every other case.)
        self._try_apply(a)

    def _on_partial(self, e: ev.ComputePartial) -> None:
        """A chunk of our gradient is final before the rest (docs/PROTOCOL.md, "Early
        chunks"): a contribution leaves now, our own chunk lets the reduction start."""
        a = self.store.get((e.step, e.round))
        if a is None or a.phase is not AttemptPhase.COMPUTING:
            return  # abandoned meanwhile
        if not a.contributes or e.chunk not in a.chunks or e.chunk in a.early:
            raise self._stop("error", f"step {e.step}: compute sent chunk {e.chunk} early, "
                             "which is not one of its chunks or was sent already")  # fmt: skip
        want = a.chunk_blocks(e.chunk) * (codec.BLOCK + 1)
        if len(e.payload) != want:
            raise self._stop("error", f"step {e.step}: compute sent {len(e.payload)} bytes "
                             f"early for chunk {e.chunk} of {want}")  # fmt: skip
        a.sent_early(e.chunk, e.payload)
        if e.chunk != a.rank:
            peer = a.roster.peers[e.chunk]
            self._send_payload(peer, FrameKind.CONTRIBUTION, e.payload, e.step, e.round, e.chunk)
        else:
            self._try_reduce(a)

    def _on_piece(self, peer: str, p: frames.Payload) -> None:
        """A contribution or a reduced chunk (a checkpoint is never a piece)."""
        a = self.store.get((p.step, p.round))
        if a is None:
            if self.has_state:
                self.store.hold_early(peer, p, self.replica.step)
            return
        if peer not in a.roster.peers or not 0 <= p.chunk < a.n:
            self._reject(peer, "bad-frame", f"piece of step {p.step} from a non-roster peer")
            return
        if p.chunk not in a.chunks:
            self._reject(peer, "bad-frame", f"piece of step {p.step} for empty chunk {p.chunk}")
            return
        if p.kind is FrameKind.CONTRIBUTION and a.roster.share(peer) == 0:
            self._reject(peer, "bad-frame", f"contribution of step {p.step} from a share of 0")
            return
        try:
            values = codec.decode(p.data, a.chunk_blocks(p.chunk))
        except codec.CodecError as exc:
            self._reject(peer, "bad-frame", str(exc))
            return
        if not a.live:
            return  # applied already (a repaired duplicate) or abandoned
        if p.kind is FrameKind.CONTRIBUTION:
            if p.chunk != a.rank:
                self._reject(peer, "bad-frame", f"contribution for chunk {p.chunk} sent to me")
                return
            a.contributions.setdefault(a.roster.rank(peer), values)
            self._try_reduce(a)
        else:
            if p.chunk not in a.reduced:
                a.reduced[p.chunk] = values
                a.reduced_payload[p.chunk] = p.data
            self._try_apply(a)

    def _try_reduce(self, a: Attempt) -> None:
        if not a.live:  # computing too: our own chunk may have come early
            return
        payload = a.reduce()
        if payload is None:
            return
        step, rnd = a.key
        for k, peer in enumerate(a.roster.peers):
            if k != a.rank:
                self._send_payload(peer, FrameKind.REDUCED, payload, step, rnd, a.rank)
        self._try_apply(a)

    def _try_apply(self, a: Attempt) -> None:
        if not a.complete() or not self.has_state or self.replica.step != a.roster.step - 1:
            return
        assert self.config is not None
        self.replica.apply(a.mean_gradient())
        a.transition(AttemptPhase.APPLIED)
        step, rnd = a.key
        digest = self.replica.hash
        self._broadcast(
            messages.StepHash(self.config.run, step, rnd, digest, a.loss, a.probe,
                              self.settings.backend, self._seq_s())
        )  # fmt: skip
        self._out.append(
            fx.StepApplied(step, rnd, a.loss, digest, a.roster.peers, a.roster.shares, a.probe,
                           self.settings.backend, self.leadership.leader or "")
        )  # fmt: skip
        self.guard.check_probe(self.id, step, a.probe, self.settings.backend)
        self.guard.record(self.id, a.key, digest, self.settings.backend)
        self._maybe_save()
        r = self.leadership.roster
        waiting = r is not None and r.step == step + 1 and self.id in r.peers
        if r is not None and waiting and (r.step, r.round) not in self.store:
            self._accept_roster(r)  # the roster that waited for this step (a follower behind)

    # ------------------------------------------------------------------------------------------
    # repair and timers

    def _ask_again(self, peer: str, head: frames.Header) -> None:
        if self.config is None:
            return
        if head.kind is FrameKind.CHECKPOINT:
            self.sync.done()
            self._request_sync()
            return
        piece: messages.Piece = "contribution" if head.kind is FrameKind.CONTRIBUTION else "reduced"
        self._send(peer, messages.Repair(self.config.run, head.step, head.round, piece, head.chunk))

    def _on_timer(self, now: float) -> None:
        t = self.settings.timers
        for peer in self.peers.hello_overdue(now, t.hello_timeout_s):
            self._reject(peer, "bad-message", "no hello in time")
        a = self._current()
        if a is None or not a.live or now < a.repair_at:
            return
        # Still incomplete past repair_at: ask for what is missing, and tell the leader whose
        # pieces never arrived.
        a.repair_at = now + t.repair_after_s
        if not a.computed or self.config is None:
            return  # our own gradient is not ready yet: nothing to ask for
        for peer, m in requests(a, self.id, self.peers.gone_set, self.config.run):
            self._send(peer, m)
        leader = self.leadership.leader
        if not self.is_leader and leader is not None:
            step, rnd = a.key
            self._send(leader, messages.Missing(self.config.run, step, rnd,
                                                sorted(a.missing_from())))  # fmt: skip

    # ------------------------------------------------------------------------------------------
    # state sync and saves

    def _request_sync(self) -> None:
        if self.config is None or self.leadership.leader is None or self.is_leader:
            return
        self.sync.want()
        self._follower_sync()

    def _follower_sync(self) -> None:
        lead = self.leadership
        if self.sync.state is not SyncState.WANTED or self.config is None:
            return
        if lead.leader is None or self.is_leader:
            return
        needed = set(lead.roster.peers) if lead.roster is not None else {lead.leader}
        needed -= self.peers.gone_set | {self.id}
        if not all(self.peers.state(p) is PeerState.GREETED for p in needed):
            return
        log.info("%s: asking %s for the state", self.id, lead.leader)
        self.sync.sent()
        self._send(lead.leader, messages.SyncRequest(self.config.run, self.private_data))

    def _on_checkpoint(self, peer: str, p: frames.Payload) -> None:
        if peer != self.leadership.leader or not self.sync.awaiting:
            return
        try:
            self.replica.restore(p.data, f"checkpoint from {peer}")
        except ReplicaRefused as exc:
            raise self._stop("error", f"the leader's checkpoint was refused: {exc}") from None
        self.sync.done()
        self.has_state = True
        log.info("%s: synced to step %d (%s)", self.id, self.replica.step, self.replica.hash[:12])
        # The leader commits the next roster right after the checkpoint (same ordered channel).

    def _serve_syncs(self) -> list[str]:
        """Leader at a step boundary: send the state to every peer that asked; they may enter
        the next roster."""
        lead = self.leadership
        if not lead.sync_wanted:
            return []
        blob = self.replica.checkpoint()
        served = []
        for peer in sorted(lead.sync_wanted):
            if self.peers.state(peer) is PeerState.GREETED:
                self._send_payload(peer, FrameKind.CHECKPOINT, blob, self.replica.step)
                served.append(peer)
        lead.sync_wanted.clear()
        return served

    def _save(self) -> None:
        self._out.append(fx.Save(self.replica.step))
        self.saved_step = self.replica.step

    def _maybe_save(self) -> None:
        if not self.has_state or not self.settings.can_save:
            return
        step = self.replica.step
        asked = step in self.save_at
        self.save_at.discard(step)
        every = self.settings.save_every
        if asked or (every > 0 and step % every == 0):
            self._save()

    # ------------------------------------------------------------------------------------------
    # stopping

    def _on_stop(self, peer: str, m: messages.Stop) -> None:
        self.stopping.stop_from.add(peer)
        raise Stopped(fx.Outcome(m.reason, m.step, self._hash(), m.message, dict(m.hashes)), m)

    def _from_gone(self, peer: str, text: str) -> None:
        """A peer this one already dropped can still have messages in flight. Only one is acted
        on: a `stop` of this run is final and wins over the failover its sender's departure
        started."""
        if not self.peers.was_greeted(peer) or self.config is None:
            return
        try:
            m = messages.parse(text)
        except messages.MessageError:
            return
        if isinstance(m, messages.Stop) and m.run == self.config.run:
            log.info("%s: stop from %s, which already left: the run is over", self.id, peer)
            self._on_stop(peer, m)

    def _begin_stopping(self, stopped: Stopped) -> None:
        outcome, stop = stopped.outcome, stopped.stop
        if self.phase.phase is not Phase.STOPPED:
            self.phase.transition(Phase.STOPPED, outcome.reason)
        if stop is not None:
            # Every peer that stops repeats the stop on every open channel, the sender's
            # included: that is its acknowledgement, and it reaches a peer whose channel to
            # the original sender is already gone.
            for peer in self.peers.greeted_open():
                self._send(peer, stop)
        # A forked state is never saved; any other ending keeps the last applied step.
        unsaved = self.has_state and self.replica.step != self.saved_step
        if self.settings.can_save and unsaved and outcome.reason != "fork":
            self._save()
        until = self._now + self.settings.timers.linger_s
        self.stopping.begin(outcome, stop, set(self.peers.live()), until)

    def _while_stopped(self, e: ev.Event) -> None:
        """Stopped: acknowledgements (a stop or leave, a channel closing, the server's
        peer-left), until none is missing or the linger deadline passes, and the hashes still
        on their way. A peer sends its hash of a step before it can acknowledge a stop that
        came after that step, on the same ordered channel, so by the time every greeted peer
        has acknowledged, every hash of the last step is in (docs/PROTOCOL.md, "Stopping")."""
        if isinstance(e, ev.ChannelClosed | ev.PeerLeft):
            self.stopping.acknowledged(e.peer)
        elif isinstance(e, ev.MessageReceived):
            try:
                m = messages.parse(e.text)
            except messages.MessageError:
                return
            if isinstance(m, messages.Stop | messages.Leave):
                self.stopping.acknowledged(e.peer)
            elif isinstance(m, messages.StepHash):
                self._late_hash(e.peer, m)

    def _late_hash(self, peer: str, m: messages.StepHash) -> None:
        """A ``hash`` that reached this peer after the stop: recorded for the final agreement
        and the tally. The stop is already announced, so a hash that differs from ours no
        longer stops anything; it is counted as differing (never as agreement) and logged."""
        if self.config is None or m.run != self.config.run or not self.peers.was_greeted(peer):
            return
        try:
            self.guard.record(peer, (m.step, m.round), m.hash, m.backend)
        except Fork as fork:
            log.error("%s: after the stop: %s", self.id, fork.message)

    def _final_outcome(self, outcome: fx.Outcome) -> fx.Outcome:
        """A run that ended well (``done``, ``leader-request``) reports its final agreement:
        every peer's hash of this peer's last applied attempt that reached it, its own
        included. A differing hash stays in it as published; a peer whose hash never came is
        absent."""
        if outcome.reason not in ("done", "leader-request") or not self.has_state:
            return outcome
        last = self.store.applied(self.replica.step)
        if last is None:
            return outcome
        return replace(outcome, hashes=self.guard.have(last.key))


def _size(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
