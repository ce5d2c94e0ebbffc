"""A training peer: the run protocol of docs/PROTOCOL.md driven by one event loop.

One ``Node`` owns a ``Mesh`` (signaling + data channels), its replica (``TrainState``) and its
view of the run. Every input (a channel message, a channel closing, a compute result, a timer)
becomes an event on one queue, handled in order by ``_handle``: protocol state never changes
from two places at once. Heavy work (forward/backward, quantization) runs in a worker thread so
the event loop keeps serving the data channels meanwhile.

The leader is a role, not a different program: the peer that leads commits rosters and serves
checkpoints; when it vanishes the lowest id of the last committed roster takes over with the
state it already holds (``run.successor``).

This module holds the ``Node`` itself: its state, the event loop, the dispatch of every event
and message, sending, and the timers. What the events do lives in one module per concept:
``membership`` (config, join, leave, failover), ``rosters`` (accepting rosters, the leader's
decisions), ``exchange`` (one step's gradient exchange), ``repair``, ``guard`` (the sync
guard), ``checkpoints`` (state sync and saves) and ``stopping`` (the stop protocol); the
node's inputs (``LeadConfig``, ``Timers``, ``Compute``, ``Faults``) live in ``options``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, cast

import numpy as np
import numpy.typing as npt

from daisychain import training
from daisychain.gpu.probe import reference_probe_hash
from daisychain.model.config import ModelConfig
from daisychain.model.params import param_shapes
from daisychain.p2p import (
    DATA_PROTOCOL_VERSION,
    checkpoints,
    codec,
    exchange,
    frames,
    guard,
    membership,
    messages,
    repair,
    rosters,
    run,
    runconfig,
    stopping,
)
from daisychain.p2p.exchange import ComputeDone, ComputeFailed, Key, StepRecord, Work
from daisychain.p2p.frames import FrameKind
from daisychain.p2p.mesh import (
    ChannelClosed,
    ChannelMessage,
    ChannelOpen,
    Mesh,
    MeshEvent,
    PeerLeft,
    SignalingLost,
)
from daisychain.p2p.options import Compute, Faults, LeadConfig, Timers
from daisychain.p2p.run import CommittedRoster, Phase
from daisychain.p2p.stopping import Outcome, StopRun

__all__ = [
    "Compute",
    "Faults",
    "LeadConfig",
    "Node",
    "Outcome",
    "StepRecord",
    "StopRun",
    "Timers",
    "replace_lead",
]

log = logging.getLogger("daisychain.p2p.node")


@dataclass(frozen=True)
class _Shutdown:
    reason: str


@dataclass(frozen=True)
class _EndRun:
    reason: str


Event = MeshEvent | ComputeDone | ComputeFailed | _Shutdown | _EndRun


class Node:
    """A headless training peer."""

    def __init__(
        self,
        mesh: Mesh,
        tokens: npt.NDArray[np.integer],
        tokenizer_sha256: str,
        vocab_size: int,
        *,
        lead: LeadConfig | None = None,
        timers: Timers | None = None,
        checkpoint_path: str | None = None,
        save_every: int = 0,
        on_step: Callable[[StepRecord], None] | None = None,
        faults: Faults | None = None,
        compute: Compute | None = None,
        limits: runconfig.Limits | None = None,
    ) -> None:
        self.mesh = mesh
        self.limits = limits or runconfig.Limits()  # what a leader may impose (--max-*)
        self.tokens = tokens
        self.tokenizer_sha256 = tokenizer_sha256
        self.vocab_size = vocab_size
        self.lead = lead
        self.timers = timers or Timers()
        self.checkpoint_path = checkpoint_path
        self.save_every = save_every  # also save every this many steps (0: only at the end)
        self._saved_step = -1
        self.on_step = on_step
        self.faults = faults or Faults()
        self.compute = compute or Compute()
        self.reference_probe = reference_probe_hash()
        self.name = mesh.name
        self.phase = run.RunPhase(self.name)
        self.inbox: asyncio.Queue[Event] = asyncio.Queue()
        self.config: messages.Config | None = None
        self.state: training.TrainState | None = None
        self.my_hash = ""
        self.leader: str | None = None
        self.greeted: set[str] = set()  # peers whose hello we accepted (gone ones included)
        self.opened_at: dict[str, float] = {}
        self.gone: set[str] = set()
        self.reassembly: dict[str, frames.Reassembler] = {}
        self.transfer_id = 0
        self.roster: CommittedRoster | None = None
        self.work: dict[Key, Work] = {}
        self.early: dict[Key, list[tuple[str, frames.Payload]]] = {}
        self.hashes: dict[Key, dict[str, str]] = {}
        self.missing_reports: dict[Key, set[str]] = {}
        self.ready: dict[str, messages.Ready] = {}
        self.sync_wanted: dict[str, list[str]] = {}
        self.awaiting_checkpoint = False
        self.want_sync = False
        self.held_rosters: dict[str, CommittedRoster] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.total_blocks = 0
        self.save_at: set[int] = set()
        self.saved: list[str] = []
        self.records: list[StepRecord] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._stats_total_bytes = 0
        self._tick_at = 0.0
        self.end_requested = ""  # leader: end the run at the next step boundary (the reason)
        self.final_stop: messages.Stop | None = None  # the stop this peer sent or received
        self.stop_from: set[str] = set()  # peers that announced the stop to this peer

    # ------------------------------------------------------------------------------------------
    # lifecycle

    @property
    def id(self) -> str:
        return self.mesh.id

    @property
    def is_leader(self) -> bool:
        return self.leader is not None and self.leader == self.id

    async def run(self) -> Outcome:
        """Train until the run stops; returns how it ended. The mesh must be connected."""
        pump = asyncio.create_task(self._pump())
        try:
            if self.lead is not None:
                membership.start_leading(self)
            while True:
                timeout = self._next_deadline() - time.monotonic()
                if timeout <= 0:
                    self._on_timers()
                elif self.inbox.empty():
                    # wait_for cancels the get() when it times out; the queue keeps the item.
                    with contextlib.suppress(TimeoutError):
                        self._handle(await asyncio.wait_for(self.inbox.get(), timeout))
                else:
                    self._handle(self.inbox.get_nowait())
                rosters.advance(self)
        except StopRun as stop:
            await stopping.finish(self, stop.outcome)
            return stop.outcome
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            for task in list(self._tasks):
                task.cancel()

    def shutdown(self, reason: str = "interrupted") -> None:
        """Leave the run cleanly (Ctrl-C): tell every peer, then stop."""
        self.inbox.put_nowait(_Shutdown(reason))

    def end_run(self, reason: str = "the leader ended the run") -> None:
        """Leader: end the whole run at the next step boundary (`stop leader-request`)."""
        self.inbox.put_nowait(_EndRun(reason))

    def agreement(self, step: int) -> tuple[int, int]:
        """(peers whose hash of ``step`` equals ours, peers that reported one)."""
        return guard.agreement(self, step)

    def request_save(self) -> None:
        """Save now (SIGUSR1 in the CLI); a leader also asks every peer to save this step."""
        if self.is_leader and self.config is not None and self.state is not None:
            self._broadcast(messages.Save(self.config.run, self.state.step))
        if self.checkpoint_path and self.state is not None:
            checkpoints.save(self, self.checkpoint_path)

    async def _pump(self) -> None:
        while True:
            self.inbox.put_nowait(await self.mesh.events.get())

    def _stop(
        self, reason: str, message: str, hashes: dict[str, str] | None = None, code: str = ""
    ) -> NoReturn:
        step = self.state.step if self.state is not None else 0
        if self.config is not None and reason in ("done", "fork", "leader-request"):
            self.final_stop = messages.Stop(
                self.config.run, cast(messages.StopReason, reason), step, message,
                dict(hashes or {}),
            )  # fmt: skip
        raise StopRun(Outcome(reason, step, self.my_hash, message, dict(hashes or {}), code))

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------------------------------
    # sending

    def _send(self, peer: str, message: messages.Message) -> None:
        self.mesh.send(peer, messages.encode(message))

    def _broadcast(self, message: messages.Message, peers: set[str] | None = None) -> None:
        text = messages.encode(message)
        for peer in peers if peers is not None else self.greeted - self.gone:
            self.mesh.send(peer, text)

    def _send_payload(
        self, peer: str, kind: FrameKind, payload: bytes, step: int, rnd: int = 0, chunk: int = 0
    ) -> int:
        self.transfer_id = (self.transfer_id + 1) & 0xFFFFFFFF
        deflate = kind is not FrameKind.CHECKPOINT
        parts = frames.fragment(
            kind, payload, transfer=self.transfer_id, step=step, round=rnd, chunk=chunk,
            deflate=deflate,
        )  # fmt: skip
        if deflate:
            # A gradient chunk is small: frame it now (its compressed size is the statistic).
            wire = list(parts)
            self.mesh.send_frames(peer, wire)
            sent = sum(len(f) for f in wire)
        else:
            # A checkpoint is cut into frames only as fast as the channel drains (flow control).
            self.mesh.send_frames(peer, parts)
            count = -(-len(payload) // frames.MAX_FRAGMENT_BYTES)
            sent = len(payload) + count * frames.HEADER_BYTES
        self._stats_total_bytes += sent
        return sent

    # ------------------------------------------------------------------------------------------
    # events

    def _handle(self, event: Event) -> None:
        if isinstance(event, ChannelOpen):
            self.opened_at[event.peer] = time.monotonic()
            self.reassembly[event.peer] = frames.Reassembler(self._limit)
            self._send(event.peer, messages.Hello(DATA_PROTOCOL_VERSION, self.name[:40]))
        elif isinstance(event, ChannelMessage):
            self._on_channel_message(event.peer, event.data)
        elif isinstance(event, ChannelClosed | PeerLeft):
            membership.peer_gone(
                self, event.peer, "left" if isinstance(event, PeerLeft) else "closed"
            )
        elif isinstance(event, SignalingLost):
            self._stop("error", f"lost the signaling server: {event.reason}")
        elif isinstance(event, ComputeDone):
            exchange.on_computed(self, event)
        elif isinstance(event, ComputeFailed):
            self._stop("error", f"step {event.key[0]}: compute failed: {event.error}")
        elif isinstance(event, _EndRun):
            if self.is_leader and self.config is not None:
                log.info("%s: ending the run at the next boundary: %s", self.name, event.reason)
                self.end_requested = event.reason or "the leader ended the run"
            else:
                log.warning("%s: only the leader can end the run", self.name)
        else:
            assert isinstance(event, _Shutdown)
            self._broadcast(messages.Leave(event.reason))
            step = self.state.step if self.state else 0
            raise StopRun(Outcome("left", step, self.my_hash, event.reason))

    def _on_channel_message(self, peer: str, data: str | bytes) -> None:
        if peer in self.gone:
            stopping.from_gone(self, peer, data)
            return
        if isinstance(data, bytes):
            if peer not in self.greeted:
                self._reject(peer, "bad-frame", "binary frame before hello")
                return
            try:
                payload = self.reassembly[peer].feed(data)
            except frames.ChecksumError as exc:
                log.warning("%s: %s from %s; asking again", self.name, exc, peer)
                repair.ask_again(self, peer, exc.head)
                return
            except frames.FrameError as exc:
                self._reject(peer, "bad-frame", str(exc))
                return
            if payload is not None:
                self._on_payload(peer, payload)
            return
        try:
            message = messages.parse(data)
        except messages.MessageError as exc:
            if exc.code == "version-mismatch":
                self._send(peer, messages.error_from(exc))
                self._fatal_peer(peer, exc.message, exc.hint)
                return
            self._reject(peer, exc.code, exc.message, exc.hint)
            return
        if isinstance(message, messages.Hello):
            self.greeted.add(peer)
            membership.on_greeted(self, peer)
            return
        if peer not in self.greeted:
            self._reject(peer, "bad-message", f"{message.type} before hello")
            return
        self._on_message(peer, message)

    def _reject(self, peer: str, code: messages.ErrorCode, why: str, hint: str = "") -> None:
        """A hostile or broken peer: say why, close its channel, drop it from the run."""
        log.warning("%s: closing channel to %s: %s: %s", self.name, peer, code, why)
        self._send(
            peer, messages.Error(code, why[:200], hint or "see docs/PROTOCOL.md, Data channels")
        )
        membership.peer_gone(self, peer, f"rejected ({code})")
        self._spawn(self.mesh.close_link(peer, drain_s=1.0))  # the error first, then the close

    def _fatal_peer(self, peer: str, message: str, hint: str) -> None:
        """The other side speaks another protocol version. A peer already in a run keeps
        training without it; a peer still in the lobby cannot join this group and exits."""
        if self.phase.phase is Phase.LOBBY and self.lead is None:
            self._stop("error", f"{message} (peer {peer}); {hint}", code="version-mismatch")
        membership.peer_gone(self, peer, "protocol version mismatch")
        self._spawn(self.mesh.close_link(peer))

    def _on_message(self, peer: str, m: messages.Message) -> None:
        cfg = self.config
        if isinstance(m, messages.Config):
            membership.on_config(self, peer, m)
            return
        if isinstance(m, messages.Leave):
            membership.peer_gone(self, peer, f"leave: {m.reason}")
            return
        if isinstance(m, messages.Error):
            if m.code == "version-mismatch":
                self._fatal_peer(peer, m.message, m.hint)
            log.warning("%s: %s says %s: %s", self.name, peer, m.code, m.message)
            return
        if cfg is None or getattr(m, "run", cfg.run) != cfg.run:
            self._reject(peer, "wrong-run", f"{m.type} for a run this peer is not in")
            return
        if isinstance(m, messages.Ready):
            self.ready[peer] = m
        elif isinstance(m, messages.SyncRequest):
            self.sync_wanted[peer] = sorted(self.mesh.open_peers())
        elif isinstance(m, messages.Roster):
            rosters.on_roster(self, peer, m)
        elif isinstance(m, messages.StepHash):
            guard.on_hash(self, peer, m)
        elif isinstance(m, messages.Missing):
            self.missing_reports.setdefault((m.step, m.round), set()).update(m.peers)
        elif isinstance(m, messages.Repair):
            repair.on_repair(self, peer, m)
        elif isinstance(m, messages.Save):
            self.save_at.add(m.step)
            checkpoints.maybe_save(self)
        elif isinstance(m, messages.Stop):
            stopping.on_stop(self, peer, m)

    # ------------------------------------------------------------------------------------------
    # state

    def _set_state(self, state: training.TrainState) -> None:
        state.ops = self.compute.ops  # never part of the identity (compare=False)
        self.state = state
        self.my_hash = training.state_hash(state)
        self._set_shapes(state.cfg)

    def _set_shapes(self, mc: ModelConfig) -> None:
        """Parameter shapes fix every frame size limit (known from the config alone)."""
        self.shapes = param_shapes(mc)
        self.total_blocks = codec.n_blocks(sum(int(np.prod(s)) for s in self.shapes.values()))

    def _limit(self, kind: FrameKind) -> int:
        if not self.shapes:
            return 0
        if kind is FrameKind.CHECKPOINT:
            n = sum(int(np.prod(s)) for s in self.shapes.values())
            return 12 * n + 1024 * 1024 if self.awaiting_checkpoint else 0
        return self.total_blocks * (codec.BLOCK + 1)

    def _on_payload(self, peer: str, p: frames.Payload) -> None:
        if p.kind is FrameKind.CHECKPOINT:
            checkpoints.on_checkpoint(self, peer, p)
            return
        exchange.on_piece(self, peer, p)

    def _current_work(self) -> Work | None:
        if self.roster is None:
            return None
        return self.work.get((self.roster.step, self.roster.round))

    # ------------------------------------------------------------------------------------------
    # timers

    def _next_deadline(self) -> float:
        soon = self._tick_at
        w = self._current_work()
        if w is not None and not w.applied:
            soon = min(soon, w.repair_at)
            if self.is_leader:
                soon = min(soon, w.deadline)
        return soon

    def _on_timers(self) -> None:
        """Periodic checks; every deadline handled here is moved forward so none can spin."""
        now = time.monotonic()
        self._tick_at = now + 0.5
        for peer, at in list(self.opened_at.items()):
            late = now - at > self.timers.hello_timeout_s
            if late and peer not in self.greeted and peer not in self.gone:
                self._reject(peer, "bad-message", "no hello in time")
        w = self._current_work()
        if w is None or w.applied or w.rank is None:
            return
        repair.on_timer(self, w, now)


def replace_lead(lead: LeadConfig, **changes: Any) -> LeadConfig:
    return dataclasses.replace(lead, **changes)
