"""A training peer: the run protocol of docs/PROTOCOL.md driven by one event loop.

One ``Node`` owns a ``Mesh`` (signaling + data channels), its replica (``TrainState``) and its
view of the run. Every input (a channel message, a channel closing, a compute result, a timer)
becomes an event on one queue, handled in order by ``_handle``: protocol state never changes
from two places at once. Heavy work (forward/backward, quantization) runs in a worker thread so
the event loop keeps serving the data channels meanwhile.

The leader is a role, not a different program: the peer that leads commits rosters and serves
checkpoints; when it vanishes the lowest id of the last committed roster takes over with the
state it already holds (``run.successor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast

import numpy as np
import numpy.typing as npt

from daisychain import checkpoint, safetensors_io, training
from daisychain.gpu.probe import reference_probe_hash
from daisychain.model.config import ModelConfig, preset
from daisychain.model.ops import NUMPY_OPS, GemmOps
from daisychain.model.params import param_shapes
from daisychain.optim import AdamWConfig
from daisychain.p2p import DATA_PROTOCOL_VERSION, allreduce, codec, frames, messages, run
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
from daisychain.p2p.run import CommittedRoster, Phase

log = logging.getLogger("daisychain.p2p.node")

FloatArray = npt.NDArray[np.float32]
Key = tuple[int, int]  # (step, round)


@dataclass(frozen=True)
class LeadConfig:
    """What the leader broadcasts (``--preset/--steps/--lr/--seed/--batch``)."""

    preset: str = "tiny"
    steps: int = 30
    lr: float = 3e-3
    warmup: int = 0
    seed: int = 1
    batch: int | None = None
    seq_len: int | None = None
    min_peers: int = 1
    resume: str | None = None  # checkpoint file to restore the group from


@dataclass(frozen=True)
class Timers:
    """Protocol timers (shortened in tests)."""

    step_timeout_s: float = 60.0  # leader: a roster step not complete by then is re-decided
    repair_after_s: float = 10.0  # a piece still missing after this is requested again
    hello_timeout_s: float = 20.0  # a channel without a valid hello by then is closed
    # A stopping peer keeps its channels open until every peer acknowledged the stop (its own
    # `stop`, its channel closing, or the server's peer-left), at most this long.
    linger_s: float = 10.0


@dataclass(frozen=True)
class Compute:
    """Who computes this peer's products (``--backend``) and its per-step kernel probe."""

    name: str = "numpy"
    ops: GemmOps = NUMPY_OPS
    probe: Callable[[], str] = reference_probe_hash  # numpy peers publish the reference's


@dataclass
class Faults:
    """Test hooks that make this peer misbehave on purpose (never set by the CLI)."""

    # Flip one payload byte of the next contribution sent at this step, after the CRC: a frame
    # damaged in transit (the receiver must detect it and repair).
    damage_contribution_at: int | None = None
    # Send a reduced chunk with one value changed (valid CRC) to one peer only at this step:
    # a silent fork that only the sync guard can catch.
    fork_reduced_at: int | None = None


@dataclass(frozen=True)
class StepRecord:
    """What the node reports after applying a step."""

    step: int
    round: int
    loss: float
    hash: str
    roster: tuple[str, ...]
    tokens: int
    compute_s: float
    exchange_s: float
    bytes_sent: int
    leader: str
    probe: str
    backend: str


@dataclass(frozen=True)
class Outcome:
    """How the run ended for this peer."""

    reason: str  # done | fork | error | left | leader-request
    step: int
    hash: str
    message: str
    hashes: dict[str, str] = field(default_factory=dict)
    code: str = ""  # machine-readable cause for errors (version-mismatch, ...)


@dataclass(frozen=True)
class _ComputeDone:
    key: Key
    loss: float
    payloads: list[bytes]  # per chunk, what we send to its owner
    own: FloatArray  # dequantized values of our own chunk (our contribution to it)
    seconds: float
    probe: str  # the kernel probe through the backend that computed this step


@dataclass(frozen=True)
class _ComputeFailed:
    key: Key
    error: str


@dataclass(frozen=True)
class _Shutdown:
    reason: str


@dataclass(frozen=True)
class _EndRun:
    reason: str


Event = MeshEvent | _ComputeDone | _ComputeFailed | _Shutdown | _EndRun


class StopRun(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


class _Work:
    """One attempt (step, round) of the gradient exchange at this peer."""

    def __init__(self, roster: CommittedRoster, me: str, total_blocks: int, now: float) -> None:
        self.roster = roster
        self.rank = roster.peers.index(me) if me in roster.peers else None
        self.n = len(roster.peers)
        self.total_blocks = total_blocks
        self.started = now
        self.contributions: dict[int, FloatArray] = {}  # for my chunk: rank -> values
        self.reduced: dict[int, FloatArray] = {}  # chunk -> values
        self.reduced_payload: dict[int, bytes] = {}  # chunk -> bytes (served for repair)
        self.sent: list[bytes] = []  # chunk -> my contribution bytes (served for repair)
        self.computing = False
        self.computed = False
        self.applied = False
        self.loss = 0.0
        self.probe = ""
        self.compute_s = 0.0
        self.bytes_sent = 0
        self.repair_at = now
        self.deadline = now
        self.exchange_start = 0.0

    @property
    def key(self) -> Key:
        return (self.roster.step, self.roster.round)

    def chunk_blocks(self, k: int) -> int:
        first, end = allreduce.chunk_blocks(self.total_blocks, self.n, k)
        return end - first

    def missing_from(self) -> set[str]:
        """Roster peers whose pieces this peer still waits for."""
        out: set[str] = set()
        if self.rank is None or self.applied:
            return out
        if self.rank not in self.reduced:
            out |= {p for j, p in enumerate(self.roster.peers) if j not in self.contributions}
        out |= {p for k, p in enumerate(self.roster.peers) if k not in self.reduced}
        return out - {self.roster.peers[self.rank]}


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
    ) -> None:
        self.mesh = mesh
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
        self.work: dict[Key, _Work] = {}
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
                self._start_leading()
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
                self._advance()
        except StopRun as stop:
            await self._finish(stop.outcome)
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

    async def _pump(self) -> None:
        while True:
            self.inbox.put_nowait(await self.mesh.events.get())

    async def _finish(self, outcome: Outcome) -> None:
        """Stopped: announce the stop, save, and keep the channels open until every peer has
        acknowledged it (docs/PROTOCOL.md, "Stopping"), so that no peer can learn that this
        one left (the server's peer-left) before it learns that the run is over."""
        if self.phase.phase is not Phase.STOPPED:
            self.phase.transition(Phase.STOPPED, outcome.reason)
        stop = self.final_stop
        waiting: set[str] = set()
        if stop is not None:
            # Every peer that stops repeats the stop to every open channel, the sender
            # included: that is its acknowledgement, and it reaches a peer whose channel to the
            # original sender is already gone.
            text = messages.encode(stop)
            for peer in sorted(self.greeted & self.mesh.open_peers()):
                self.mesh.send(peer, text)
            waiting = self.greeted - self.gone - self.stop_from
        # A forked state is never saved; any other ending (done, Ctrl-C, error) keeps the last
        # applied step, which every replica agreed on or will be checked against.
        state = self.state
        unsaved = state is not None and state.step != self._saved_step
        if self.checkpoint_path and unsaved and outcome.reason != "fork":
            self._save(self.checkpoint_path)
        deadline = time.monotonic() + self.timers.linger_s
        while waiting and (left := deadline - time.monotonic()) > 0:
            try:
                event = await asyncio.wait_for(self.inbox.get(), left)
            except TimeoutError:
                break
            if isinstance(event, ChannelClosed | PeerLeft):
                waiting.discard(event.peer)
            elif isinstance(event, ChannelMessage) and isinstance(event.data, str):
                with contextlib.suppress(messages.MessageError):
                    if isinstance(messages.parse(event.data), messages.Stop | messages.Leave):
                        waiting.discard(event.peer)
        if waiting:
            log.warning("%s: no stop acknowledgement from %s", self.name, sorted(waiting))
        await self.mesh.drain(self.timers.linger_s)

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
            self._peer_gone(event.peer, "left" if isinstance(event, PeerLeft) else "closed")
        elif isinstance(event, SignalingLost):
            self._stop("error", f"lost the signaling server: {event.reason}")
        elif isinstance(event, _ComputeDone):
            self._on_computed(event)
        elif isinstance(event, _ComputeFailed):
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
            self._from_gone(peer, data)
            return
        if isinstance(data, bytes):
            if peer not in self.greeted:
                self._reject(peer, "bad-frame", "binary frame before hello")
                return
            try:
                payload = self.reassembly[peer].feed(data)
            except frames.ChecksumError as exc:
                log.warning("%s: %s from %s; asking again", self.name, exc, peer)
                self._ask_again(peer, exc.head)
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
            self._on_greeted(peer)
            return
        if peer not in self.greeted:
            self._reject(peer, "bad-message", f"{message.type} before hello")
            return
        self._on_message(peer, message)

    def _from_gone(self, peer: str, data: str | bytes) -> None:
        """A peer this one already dropped (it left, the server said so, or it was rejected)
        can still have messages in flight. Only one is acted on: a `stop` of this run is final
        and wins over the failover that its sender's departure started."""
        if peer not in self.greeted or self.config is None or not isinstance(data, str):
            return
        try:
            m = messages.parse(data)
        except messages.MessageError:
            return
        if isinstance(m, messages.Stop) and m.run == self.config.run:
            log.info("%s: stop from %s, which already left: the run is over", self.name, peer)
            self._on_stop(peer, m)

    def _on_stop(self, peer: str, m: messages.Stop) -> NoReturn:
        self.final_stop = m
        self.stop_from.add(peer)
        raise StopRun(Outcome(m.reason, m.step, self.my_hash, m.message, m.hashes))

    def _reject(self, peer: str, code: messages.ErrorCode, why: str, hint: str = "") -> None:
        """A hostile or broken peer: say why, close its channel, drop it from the run."""
        log.warning("%s: closing channel to %s: %s: %s", self.name, peer, code, why)
        self._send(
            peer, messages.Error(code, why[:200], hint or "see docs/PROTOCOL.md, Data channels")
        )
        self._peer_gone(peer, f"rejected ({code})")
        self._spawn(self.mesh.close_link(peer))

    def _fatal_peer(self, peer: str, message: str, hint: str) -> None:
        """The other side speaks another protocol version. A peer already in a run keeps
        training without it; a peer still in the lobby cannot join this group and exits."""
        if self.phase.phase is Phase.LOBBY and self.lead is None:
            self._stop("error", f"{message} (peer {peer}); {hint}", code="version-mismatch")
        self._peer_gone(peer, "protocol version mismatch")
        self._spawn(self.mesh.close_link(peer))

    def _on_greeted(self, peer: str) -> None:
        if self.is_leader and self.config is not None:
            # A late peer learns the run from the leader: config, then the current roster (a
            # peer not in it asks for the state and enters the roster after the checkpoint).
            self._send(peer, self.config)
            if self.roster is not None:
                r = self.roster
                self._send(peer, messages.Roster(self.config.run, r.step, r.round, list(r.peers)))

    def _on_message(self, peer: str, m: messages.Message) -> None:
        cfg = self.config
        if isinstance(m, messages.Config):
            self._on_config(peer, m)
            return
        if isinstance(m, messages.Leave):
            self._peer_gone(peer, f"leave: {m.reason}")
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
            self._on_roster(peer, m)
        elif isinstance(m, messages.StepHash):
            self._on_hash(peer, m)
        elif isinstance(m, messages.Missing):
            self.missing_reports.setdefault((m.step, m.round), set()).update(m.peers)
        elif isinstance(m, messages.Repair):
            self._on_repair(peer, m)
        elif isinstance(m, messages.Save):
            self.save_at.add(m.step)
            self._maybe_save()
        elif isinstance(m, messages.Stop):
            self._on_stop(peer, m)

    # ------------------------------------------------------------------------------------------
    # configuration and state

    def _model_config(self, cfg: messages.Config) -> ModelConfig:
        spec = cfg.model
        return ModelConfig(
            vocab_size=spec.vocab_size, width=spec.width, layers=spec.layers, heads=spec.heads,
            seq_len=spec.seq_len, batch=spec.batch, mlp_mult=spec.mlp_mult,
        )  # fmt: skip

    def _start_leading(self) -> None:
        lead = self.lead
        assert lead is not None
        self.leader = self.id
        if lead.resume:
            ck = checkpoint.load(
                lead.resume, tokenizer_sha256=self.tokenizer_sha256, vocab_size=self.vocab_size
            )
            state = ck.state
        else:
            changes = {"vocab_size": self.vocab_size}
            if lead.batch:
                changes["batch"] = lead.batch
            if lead.seq_len:
                changes["seq_len"] = lead.seq_len
            mc = preset(lead.preset, **changes)
            opt = AdamWConfig(lr=lead.lr, warmup_steps=min(lead.warmup, max(lead.steps - 1, 0)))
            state = training.init(mc, opt, lead.seed)
        self._set_state(state)
        mc, opt = state.cfg, state.opt_cfg
        self.config = messages.Config(
            run=secrets.token_hex(8),
            preset=None if lead.resume else lead.preset,
            model=messages.ModelSpec(
                vocab_size=mc.vocab_size,
                width=mc.width,
                layers=mc.layers,
                heads=mc.heads,
                seq_len=mc.seq_len,
                batch=mc.batch,
                mlp_mult=mc.mlp_mult,
            ),
            optim=messages.OptimSpec(opt.lr, opt.warmup_steps, opt.weight_decay, opt.clip),
            steps=lead.steps,
            seed=state.seed,
            data="builtin",
            tokenizer_sha256=self.tokenizer_sha256,
            resume_step=state.step,
            resume_hash=self.my_hash if state.step > 0 else None,
        )
        self.phase.transition(Phase.CONFIGURED, "leading")
        self._broadcast(self.config)

    def _on_config(self, peer: str, cfg: messages.Config) -> None:
        if self.lead is not None:
            self._reject(peer, "wrong-run", "this peer leads its own run")
            return
        if self.config is not None:
            if cfg != self.config:
                self._reject(peer, "wrong-run", "a second, different run configuration")
            return
        if cfg.tokenizer_sha256 != self.tokenizer_sha256 or cfg.model.vocab_size != self.vocab_size:
            self._stop(
                "error",
                f"the leader's tokenizer is {cfg.tokenizer_sha256[:12]}... with "
                f"{cfg.model.vocab_size} tokens; this peer has {self.tokenizer_sha256[:12]}... "
                f"with {self.vocab_size}",
            )
        self.config = cfg
        self.leader = peer
        self._set_shapes(self._model_config(cfg))
        self.phase.transition(Phase.CONFIGURED, f"config from {peer}")
        if cfg.resume_step == 0:
            opt = AdamWConfig(
                lr=cfg.optim.lr, warmup_steps=cfg.optim.warmup_steps,
                weight_decay=cfg.optim.weight_decay, clip=cfg.optim.clip,
            )  # fmt: skip
            self._set_state(training.init(self._model_config(cfg), opt, cfg.seed))
            self._send(peer, self._ready())
        else:
            self._request_sync()

    def _set_state(self, state: training.TrainState) -> None:
        state.ops = self.compute.ops  # never part of the identity (compare=False)
        self.state = state
        self.my_hash = training.state_hash(state)
        self._set_shapes(state.cfg)

    def _set_shapes(self, mc: ModelConfig) -> None:
        """Parameter shapes fix every frame size limit (known from the config alone)."""
        self.shapes = param_shapes(mc)
        self.total_blocks = codec.n_blocks(sum(int(np.prod(s)) for s in self.shapes.values()))

    def _ready(self) -> messages.Ready:
        assert self.config is not None and self.state is not None
        peers = sorted((self.mesh.open_peers() & self.greeted) - self.gone)
        return messages.Ready(self.config.run, self.state.step, self.my_hash, peers)

    def _request_sync(self) -> None:
        """Ask the leader for its state once this peer has channels to the whole roster (it
        enters the roster that follows the checkpoint and must reach every member)."""
        if self.config is None or self.leader is None or self.is_leader:
            return
        if not self.awaiting_checkpoint:
            self.want_sync = True
        self._follower_advance()

    def _follower_advance(self) -> None:
        if not self.want_sync or self.config is None or self.leader is None or self.is_leader:
            return
        needed = set(self.roster.peers) if self.roster is not None else {self.leader}
        if not needed - self.gone - {self.id} <= self.greeted:
            return
        log.info("%s: asking %s for the state", self.name, self.leader)
        self.want_sync = False
        self.awaiting_checkpoint = True
        self._send(self.leader, messages.SyncRequest(self.config.run))

    def _limit(self, kind: FrameKind) -> int:
        if not self.shapes:
            return 0
        if kind is FrameKind.CHECKPOINT:
            n = sum(int(np.prod(s)) for s in self.shapes.values())
            return 12 * n + 1024 * 1024 if self.awaiting_checkpoint else 0
        return self.total_blocks * (codec.BLOCK + 1)

    # ------------------------------------------------------------------------------------------
    # rosters and the exchange

    def _on_roster(self, peer: str, m: messages.Roster) -> None:
        if peer != self.leader:
            # A roster from someone we do not consider leader: our view of who left may lag
            # behind the sender's. Hold it; if the successor rule later names the sender, it
            # is applied then.
            log.info("%s: roster from %s held (leader is %s)", self.name, peer, self.leader)
            self.held_rosters[peer] = CommittedRoster(m.step, m.round, tuple(m.peers))
            return
        self._accept_roster(CommittedRoster(m.step, m.round, tuple(m.peers)))

    def _accept_roster(self, r: CommittedRoster) -> None:
        assert self.state is not None
        self.roster = r
        if self.phase.phase is Phase.CONFIGURED:
            self.phase.transition(Phase.TRAINING, f"roster of step {r.step}")
        if self.id not in r.peers:
            if self.state.step != r.step - 1 or not self.is_leader:
                self._request_sync()
            return
        if self.state.step != r.step - 1:
            if self.state.step < r.step - 1 or (r.step, r.round) not in self.work:
                self._request_sync()
            return
        now = time.monotonic()
        w = _Work(r, self.id, self.total_blocks, now)
        w.repair_at = now + self.timers.repair_after_s
        w.deadline = now + self.timers.step_timeout_s
        self.work[w.key] = w
        for old in [k for k in self.work if k[0] <= r.step - run.HISTORY_STEPS]:
            del self.work[old]
        for old in [k for k in self.early if k[0] < r.step]:
            del self.early[old]
        self._start_compute(w)
        for sender, payload in self.early.pop(w.key, []):
            self._on_payload(sender, payload)

    def _start_compute(self, w: _Work) -> None:
        state = self.state
        assert state is not None and w.rank is not None
        w.computing = True
        x, y = training.next_batch(state, self.tokens, w.rank)
        key, n, total_blocks, rank = w.key, w.n, self.total_blocks, w.rank
        probe = self.compute.probe

        def compute() -> _ComputeDone:
            t0 = time.perf_counter()
            loss, grads = training.compute_grads(state, x, y)
            probe_hash = probe()
            flat = codec.flatten(grads)
            payloads: list[bytes] = []
            own = np.zeros(0, dtype=np.float32)
            for k in range(n):
                payload, deq = codec.encode(flat[allreduce.chunk_slice(total_blocks, n, k)])
                payloads.append(payload)
                if k == rank:
                    own = deq
            seconds = time.perf_counter() - t0
            return _ComputeDone(key, float(loss), payloads, own, seconds, probe_hash)

        async def task() -> None:
            try:
                done = await asyncio.to_thread(compute)
            except Exception as exc:  # reported to the event loop, which stops the run
                self.inbox.put_nowait(_ComputeFailed(key, repr(exc)))
            else:
                self.inbox.put_nowait(done)

        self._spawn(task())

    def _on_computed(self, done: _ComputeDone) -> None:
        w = self.work.get(done.key)
        if w is None or w.rank is None:
            return  # the attempt was abandoned meanwhile
        w.computing, w.computed = False, True
        w.loss, w.compute_s, w.sent, w.probe = done.loss, done.seconds, done.payloads, done.probe
        w.exchange_start = time.perf_counter()
        step, rnd = w.key
        for k, peer in enumerate(w.roster.peers):
            if k == w.rank:
                continue
            payload = done.payloads[k]
            if self.faults.damage_contribution_at == step:
                self.faults.damage_contribution_at = None
                w.bytes_sent += self._send_damaged(peer, payload, step, rnd, k)
                continue
            w.bytes_sent += self._send_payload(peer, FrameKind.CONTRIBUTION, payload, step, rnd, k)
        w.contributions[w.rank] = done.own
        self._try_reduce(w)

    def _send_damaged(self, peer: str, payload: bytes, step: int, rnd: int, k: int) -> int:
        self.transfer_id += 1
        sent = 0
        for i, frame in enumerate(
            frames.fragment(
                FrameKind.CONTRIBUTION,
                payload,
                transfer=self.transfer_id,
                step=step,
                round=rnd,
                chunk=k,
                deflate=True,
            )
        ):
            if i == 0:
                frame = frame[:-1] + bytes([frame[-1] ^ 0x5A])
            self.mesh.send(peer, frame)
            sent += len(frame)
        log.warning("%s: FAULT: damaged contribution to %s at step %d", self.name, peer, step)
        return sent

    def _on_payload(self, peer: str, p: frames.Payload) -> None:
        if p.kind is FrameKind.CHECKPOINT:
            self._on_checkpoint(peer, p)
            return
        key = (p.step, p.round)
        w = self.work.get(key)
        if w is None:
            assert self.state is not None
            buffered = sum(len(v) for v in self.early.values())
            if self.state.step < p.step <= self.state.step + 2 and buffered < 256:
                self.early.setdefault(key, []).append((peer, p))
            return
        if peer not in w.roster.peers or not 0 <= p.chunk < w.n:
            self._reject(peer, "bad-frame", f"piece of step {p.step} from a non-roster peer")
            return
        try:
            values = codec.decode(p.data, w.chunk_blocks(p.chunk))
        except codec.CodecError as exc:
            self._reject(peer, "bad-frame", str(exc))
            return
        if p.kind is FrameKind.CONTRIBUTION:
            if p.chunk != w.rank:
                self._reject(peer, "bad-frame", f"contribution for chunk {p.chunk} sent to me")
                return
            w.contributions.setdefault(w.roster.rank(peer), values)
            self._try_reduce(w)
        else:
            if p.chunk not in w.reduced:
                w.reduced[p.chunk] = values
                w.reduced_payload[p.chunk] = p.data
            self._try_apply(w)

    def _try_reduce(self, w: _Work) -> None:
        if w.rank is None or w.rank in w.reduced or len(w.contributions) < w.n:
            return
        parts = [w.contributions[j] for j in range(w.n)]  # roster order: the pinned sum order
        payload, values = codec.encode(allreduce.reduce_chunk(parts))
        w.reduced[w.rank] = values
        w.reduced_payload[w.rank] = payload
        step, rnd = w.key
        fork_peer = None
        if self.faults.fork_reduced_at == step and w.n > 1:
            self.faults.fork_reduced_at = None
            fork_peer = next(p for p in w.roster.peers if p != self.id)
        for k, peer in enumerate(w.roster.peers):
            if k == w.rank:
                continue
            data = payload
            if peer == fork_peer:
                bad = bytearray(payload)
                bad[w.chunk_blocks(w.rank) + 7] ^= 0x01  # one value off by one step
                data = bytes(bad)
                log.warning("%s: FAULT: forked reduced chunk to %s", self.name, peer)
            w.bytes_sent += self._send_payload(peer, FrameKind.REDUCED, data, step, rnd, w.rank)
        self._try_apply(w)

    def _try_apply(self, w: _Work) -> None:
        state = self.state
        if w.applied or not w.computed or len(w.reduced) < w.n or state is None:
            return
        if state.step != w.roster.step - 1:
            return
        flat = np.empty(self.total_blocks * codec.BLOCK, dtype=np.float32)
        for k in range(w.n):
            flat[allreduce.chunk_slice(self.total_blocks, w.n, k)] = w.reduced[k]
        training.apply_grads(state, codec.unflatten(flat, self.shapes))
        w.applied = True
        self.my_hash = training.state_hash(state)
        assert self.config is not None
        step, rnd = w.key
        self.hashes.setdefault(w.key, {})[self.id] = self.my_hash
        self._broadcast(
            messages.StepHash(
                self.config.run, step, rnd, self.my_hash, w.loss, w.probe, self.compute.name
            )
        )
        start = w.exchange_start
        record = StepRecord(
            step=step, round=rnd, loss=w.loss, hash=self.my_hash, roster=w.roster.peers,
            tokens=state.cfg.tokens * w.n, compute_s=w.compute_s,
            exchange_s=time.perf_counter() - start, bytes_sent=w.bytes_sent,
            leader=self.leader or "", probe=w.probe, backend=self.compute.name,
        )  # fmt: skip
        self.records.append(record)
        if self.on_step is not None:
            self.on_step(record)
        self._check_probe(self.id, step, w.probe, self.compute.name)
        self._check_guard(w.key)
        self._maybe_save()

    def _on_hash(self, peer: str, m: messages.StepHash) -> None:
        key = (m.step, m.round)
        self._check_probe(peer, m.step, m.probe, m.backend)
        self.hashes.setdefault(key, {})[peer] = m.hash
        for old in [k for k in self.hashes if k[0] <= m.step - run.HISTORY_STEPS]:
            del self.hashes[old]
        self._check_guard(key)

    def _check_probe(self, peer: str, step: int, probe: str, backend: str) -> None:
        """Every device's kernel probe equals the reference's: a device whose kernel computes
        other bits is named with its backend (its weights would fork next)."""
        if probe == self.reference_probe:
            return
        who = "this peer" if peer == self.id else "peer"
        message = (
            f"kernel probe mismatch after step {step}: {who} {peer} (backend {backend}) "
            f"published {probe[:16]}..., every device must publish {self.reference_probe[:16]}"
            f"...; restart {peer} with --backend numpy"
        )
        log.error("%s: SYNC GUARD: %s", self.name, message)
        self._stop("fork", message, {peer: probe})

    def _check_guard(self, key: Key) -> None:
        have = self.hashes.get(key, {})
        if self.id not in have:
            return
        report = run.sync_guard(key[0], have)
        if report is not None:
            log.error("%s: SYNC GUARD: %s", self.name, report.describe())
            self._stop("fork", report.describe(), report.hashes)

    # ------------------------------------------------------------------------------------------
    # repair

    def _ask_again(self, peer: str, head: frames.Header) -> None:
        if self.config is None:
            return
        if head.kind is FrameKind.CHECKPOINT:
            self._request_sync()
            return
        piece: messages.Piece = "contribution" if head.kind is FrameKind.CONTRIBUTION else "reduced"
        self._send(
            peer,
            messages.Repair(self.config.run, head.step, head.round, piece, head.chunk),
        )

    def _on_repair(self, peer: str, m: messages.Repair) -> None:
        w = self.work.get((m.step, m.round))
        if w is None or not 0 <= m.chunk < w.n:
            return
        if m.piece == "contribution":
            if w.computed and m.chunk < len(w.sent) and w.roster.peers[m.chunk] == peer:
                self._send_payload(
                    peer, FrameKind.CONTRIBUTION, w.sent[m.chunk], m.step, m.round, m.chunk
                )
        elif m.chunk in w.reduced_payload:
            self._send_payload(
                peer, FrameKind.REDUCED, w.reduced_payload[m.chunk], m.step, m.round, m.chunk
            )

    def _request_repairs(self, w: _Work) -> None:
        assert self.config is not None and w.rank is not None
        step, rnd = w.key
        run_id = self.config.run
        if w.rank not in w.reduced:
            for j, peer in enumerate(w.roster.peers):
                if j not in w.contributions and peer not in self.gone:
                    self._send(peer, messages.Repair(run_id, step, rnd, "contribution", w.rank))
        for k in range(w.n):
            if k not in w.reduced:
                # Anyone who applied this attempt holds every reduced chunk: ask them all.
                for peer in w.roster.peers:
                    if peer != self.id and peer not in self.gone:
                        self._send(peer, messages.Repair(run_id, step, rnd, "reduced", k))

    # ------------------------------------------------------------------------------------------
    # membership

    def _peer_gone(self, peer: str, why: str) -> None:
        if peer in self.gone:
            return
        self.gone.add(peer)
        self.ready.pop(peer, None)
        self.sync_wanted.pop(peer, None)
        log.info("%s: peer %s gone (%s)", self.name, peer, why)
        now = time.monotonic()
        w = self._current_work()
        if w is not None and peer in w.roster.peers and not w.applied:
            w.repair_at = min(w.repair_at, now)
            w.deadline = min(w.deadline, now + self.timers.repair_after_s)
        if peer == self.leader:
            self._leader_gone()

    def _leader_gone(self) -> None:
        if self.roster is None:
            self._stop("error", "the leader left before the first step; start the run again")
        assert self.roster is not None
        new = run.successor(self.roster.peers, self.gone)
        old, self.leader = self.leader, new
        log.info("%s: leader %s gone; successor %s", self.name, old, new)
        if new is None:
            self._stop("error", "every peer of the last roster left")
        if self.is_leader:
            w = self._current_work()
            if w is not None:
                w.deadline = min(w.deadline, time.monotonic() + self.timers.repair_after_s)
        else:
            if self.awaiting_checkpoint:
                self.awaiting_checkpoint = False
                self._request_sync()
            held = self.held_rosters.pop(new, None) if new is not None else None
            if held is not None and (self.roster is None or held.step >= self.roster.step):
                self._accept_roster(held)

    def _current_work(self) -> _Work | None:
        if self.roster is None:
            return None
        return self.work.get((self.roster.step, self.roster.round))

    # ------------------------------------------------------------------------------------------
    # checkpoints

    def _on_checkpoint(self, peer: str, p: frames.Payload) -> None:
        if peer != self.leader or not self.awaiting_checkpoint:
            return
        try:
            tensors, meta = safetensors_io.decode(p.data, f"checkpoint from {peer}")
            ck = checkpoint.from_parts(
                tensors, meta, f"checkpoint from {peer}", self.tokenizer_sha256, self.vocab_size
            )
        except (safetensors_io.CheckpointFormatError, checkpoint.CheckpointError) as exc:
            self._stop("error", f"the leader's checkpoint was refused: {exc}")
            return
        self.awaiting_checkpoint = False
        self._set_state(ck.state)
        log.info("%s: synced to step %d (%s)", self.name, ck.step, self.my_hash[:12])
        # The leader commits the next roster right after the checkpoint (same ordered channel).

    def _serve_syncs(self) -> list[str]:
        """Leader at a step boundary: send the state to every peer that asked; they may enter
        the next roster if they have channels to everyone in it."""
        assert self.state is not None
        if not self.sync_wanted:
            return []
        blob = checkpoint.encode(self.state, self.tokenizer_sha256)
        served = []
        for peer in sorted(self.sync_wanted):
            if peer in self.gone or peer not in self.greeted:
                continue
            self._send_payload(peer, FrameKind.CHECKPOINT, blob, self.state.step)
            served.append(peer)
        self.sync_wanted.clear()
        return served

    def _save(self, path: str) -> None:
        assert self.state is not None
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.save(target, self.state, self.tokenizer_sha256)
        self.saved.append(f"{target}@{self.state.step}")
        self._saved_step = self.state.step
        log.info("%s: saved %s at step %d", self.name, target, self.state.step)

    def _maybe_save(self) -> None:
        state = self.state
        if state is None or not self.checkpoint_path:
            return
        asked = state.step in self.save_at
        self.save_at.discard(state.step)
        periodic = self.save_every > 0 and state.step % self.save_every == 0
        if asked or periodic:
            self._save(self.checkpoint_path)

    def agreement(self, step: int) -> tuple[int, int]:
        """(peers whose hash of ``step`` equals ours, peers that reported one)."""
        for (s, _r), have in self.hashes.items():
            if s == step and self.id in have:
                mine = have[self.id]
                return sum(1 for h in have.values() if h == mine), len(have)
        return (0, 0)

    def request_save(self) -> None:
        """Save now (SIGUSR1 in the CLI); a leader also asks every peer to save this step."""
        if self.is_leader and self.config is not None and self.state is not None:
            self._broadcast(messages.Save(self.config.run, self.state.step))
        if self.checkpoint_path and self.state is not None:
            self._save(self.checkpoint_path)

    # ------------------------------------------------------------------------------------------
    # timers and the leader's decisions

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
        if now >= w.repair_at:
            w.repair_at = now + self.timers.repair_after_s
            if not w.computed:
                return  # our own gradient is not ready yet: nothing to ask for
            self._request_repairs(w)
            if not self.is_leader and self.leader is not None and self.config is not None:
                step, rnd = w.key
                missing = sorted(w.missing_from())
                self._send(self.leader, messages.Missing(self.config.run, step, rnd, missing))

    def _advance(self) -> None:
        """The leader's decisions, re-evaluated after every event."""
        self._follower_advance()
        if not self.is_leader or self.state is None or self.config is None:
            return
        if self.phase.phase is Phase.CONFIGURED:
            self._leader_start()
            return
        if self.phase.phase is not Phase.TRAINING or self.roster is None:
            return
        r = self.roster
        w = self.work.get((r.step, r.round))
        now = time.monotonic()
        alive = [p for p in r.peers if p not in self.gone]
        if w is not None and w.applied:
            have = self.hashes.get(w.key, {})
            if not all(p in have for p in alive) and now < w.deadline:
                return
            self._boundary([p for p in alive if have.get(p) == self.my_hash])
            return
        if w is not None and now < w.deadline:
            return
        # The attempt cannot complete: re-commit the step without the peers that vanished or
        # whose pieces never arrived (at the leader or at any peer that reported).
        drop = set(self.gone) | self.missing_reports.get((r.step, r.round), set())
        if w is not None:
            drop |= w.missing_from()
        drop.discard(self.id)
        peers = run.make_roster([p for p in r.peers if p not in drop] + [self.id])
        log.warning(
            "%s: step %d round %d incomplete; dropping %s", self.name, r.step, r.round,
            sorted(drop & set(r.peers)),
        )  # fmt: skip
        self._commit(r.step, r.round + 1, peers)

    def _eligible(self) -> list[str]:
        assert self.state is not None
        return [
            p
            for p, rd in self.ready.items()
            if p not in self.gone and rd.step == self.state.step and rd.hash == self.my_hash
        ]

    def _leader_start(self) -> None:
        lead = self.lead
        assert self.state is not None and self.config is not None
        served = self._serve_syncs()
        for peer in served:
            self.ready[peer] = messages.Ready(self.config.run, self.state.step, self.my_hash, [])
        candidates = [self.id, *self._eligible()]
        need = lead.min_peers if lead is not None else 1
        if len(candidates) < need:
            return
        self._commit(self.state.step + 1, 0, run.make_roster(candidates))

    def _boundary(self, continuing: list[str]) -> None:
        """Step ``state.step`` is complete: stop, or commit the next roster."""
        assert self.state is not None and self.config is not None
        step = self.state.step
        if step >= self.config.steps:
            self._stop("done", f"reached step {step}")
        if self.end_requested:
            self._stop("leader-request", f"{self.end_requested} at step {step}")
        joiners = self._serve_syncs()
        for peer in self._eligible():
            joiners.append(peer)
        self.ready.clear()
        peers = run.make_roster({*continuing, *joiners, self.id})
        self._commit(step + 1, 0, peers)

    def _commit(self, step: int, rnd: int, peers: tuple[str, ...]) -> None:
        assert self.config is not None
        if rnd > 255:
            self._stop("error", f"step {step} failed 256 times")
        self._broadcast(messages.Roster(self.config.run, step, rnd, list(peers)))
        log.info("%s: roster step %d round %d: %s", self.name, step, rnd, ", ".join(peers))
        self._accept_roster(CommittedRoster(step, rnd, peers))

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def replace_lead(lead: LeadConfig, **changes: Any) -> LeadConfig:
    return dataclasses.replace(lead, **changes)
