"""A training peer: the I/O shell around the protocol machine (``p2p.machine``).

The machine decides everything the protocol says (docs/PROTOCOL.md, "The protocol machine");
this shell does what it cannot: it owns the ``Mesh`` (signaling and data channels), the model
replica and the worker thread that computes gradients, the disk, the clock and the user's
signals. Every input (a mesh event, a compute result, a user request) goes on one queue and is
fed to the machine in order, stamped with ``time.monotonic()``; the effects that come back are
carried out in order; when nothing arrives before ``machine.next_deadline()`` the shell feeds
``Timer``. When the machine says ``Finished`` the shell drains its send buffers (a stop and its
acknowledgements are not lost) and returns the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from daisychain import batches, fineweb, training
from daisychain.gpu.probe import reference_step_probe
from daisychain.model.config import ModelConfig, preset
from daisychain.optim import AdamWConfig
from daisychain.outer.nesterov import OuterConfig, OuterError
from daisychain.p2p import contribution, inner, shares
from daisychain.p2p.datafeed import Address, DataUnavailable, FineWebFeed
from daisychain.p2p.machine import Machine, Settings, Timers
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.machine.effects import Outcome
from daisychain.p2p.mesh import (
    ChannelClosed,
    ChannelMessage,
    ChannelOpen,
    Mesh,
    MeshEvent,
    PeerLeft,
    SignalingLost,
)
from daisychain.p2p.modelreplica import ModelReplica
from daisychain.p2p.options import Compute, LeadConfig
from daisychain.p2p.pace import Pace
from daisychain.p2p.run import RunPhase
from daisychain.p2p.runconfig import Limits
from daisychain.p2p.traffic import MEMBERSHIP, StepTraffic, Tally
from daisychain.wire import frames, messages
from daisychain.wire.frames import FrameKind

if TYPE_CHECKING:  # the peer's re-check measures backends; the node only asks it when
    from daisychain.peer.recheck import Recheck

__all__ = ["Compute", "LeadConfig", "Limits", "Node", "Outcome", "StepRecord", "Timers"]

log = logging.getLogger("daisychain.p2p.node")

Input = Callable[[float], ev.Event]  # an event waiting for its timestamp


@dataclass(frozen=True)
class StepRecord:
    """What the node reports after applying a step."""

    step: int
    round: int
    loss: float
    hash: str
    roster: tuple[str, ...]
    shares: tuple[int, ...]  # the roster's: sequences each peer computed
    share: int  # this peer's (0: it followed without computing)
    tokens: int  # the whole group's this step (global batch x sequence length; x H: outer run)
    compute_s: float
    exchange_s: float  # wall seconds from our gradients' end to the apply (waiting included)
    exchange_work_s: float  # of those, this process's own work (p2p/pace.py; 0: share 0)
    bytes_sent: int
    bytes_early: int  # of those, sent while our gradient was still being computed (early chunks)
    leader: str
    probe: str
    backend: str
    # Roster peers known to train on private data (the leader hears every one; a follower knows
    # only itself): docs/PROTOCOL.md, "Private data".
    private_data: tuple[str, ...] = ()
    # An outer run's round (docs/PROTOCOL.md, "Outer runs"): inner steps each contributor took
    # (0: a per-step run); ``step`` is then the outer step.
    inner_steps: int = 0
    # What this peer sent that belongs to this step, counted by p2p/traffic.py's rule (the
    # simulator counts the same way): messages, frames, uncompressed and wire bytes.
    traffic: StepTraffic = dataclasses.field(default_factory=StepTraffic)


def from_mesh(e: MeshEvent) -> Input:
    if isinstance(e, ChannelOpen):
        return lambda now: ev.ChannelOpened(now, e.peer)
    if isinstance(e, ChannelMessage):
        data = e.data
        if isinstance(data, bytes):
            return lambda now: ev.FrameReceived(now, e.peer, data)
        return lambda now: ev.MessageReceived(now, e.peer, data)
    if isinstance(e, ChannelClosed):
        return lambda now: ev.ChannelClosed(now, e.peer)
    if isinstance(e, PeerLeft):
        return lambda now: ev.PeerLeft(now, e.peer)
    assert isinstance(e, SignalingLost)
    return lambda now: ev.SignalingLost(now, e.reason)


class Node:
    """A headless training peer (the mesh must be connected)."""

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
        compute: Compute | None = None,
        limits: Limits | None = None,
        data: FineWebFeed | None = None,
        early_chunks: bool = True,
        recheck: Recheck | None = None,
    ) -> None:
        assert mesh.id, "connect the mesh before building its node"
        self.mesh = mesh
        self.tokens = tokens
        self.tokenizer_sha256 = tokenizer_sha256
        self.lead = lead
        self.checkpoint_path = checkpoint_path
        self.on_step = on_step
        self.compute = compute or Compute()
        # Each chunk of our gradient leaves as soon as the backward produced it (p2p/early.py);
        # off, chunks leave with compute-done (the baseline bench mesh measures against).
        self.early_chunks = early_chunks
        # ``--backend auto``: the backend choice measured again during the run (peer/recheck.py).
        self.recheck = recheck
        self.name = mesh.name
        self.timers = timers or Timers()
        self.replica = ModelReplica(tokenizer_sha256, vocab_size, self.compute.ops)
        # FineWeb-Edu windows from the server (None: this peer reads the built-in corpus only).
        self.data = data
        self.data_error: DataUnavailable | None = None
        sources = (fineweb.BUILTIN,) + ((data.data_name,) if data is not None else ())
        settings = Settings(
            id=mesh.id, name=mesh.name, tokenizer_sha256=tokenizer_sha256,
            vocab_size=vocab_size, backend=self.compute.name,
            reference_probe=reference_step_probe(), timers=self.timers,
            can_save=bool(checkpoint_path), save_every=save_every, limits=limits or Limits(),
            data_sources=sources,
        )  # fmt: skip
        self.machine = Machine(settings, self.replica)
        self.inbox: asyncio.Queue[Input] = asyncio.Queue()
        # The link to each peer the machine has been told is open (its ChannelOpen generation).
        self._links: dict[str, int] = {}
        self.records: list[StepRecord] = []
        self.saved: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._compute_s: dict[tuple[int, int], float] = {}
        self._computed_at: dict[tuple[int, int], float] = {}
        self._bytes: dict[tuple[int, int], int] = {}
        self._early_bytes: dict[tuple[int, int], int] = {}
        self._computing: set[tuple[int, int]] = set()  # attempts whose compute-done is not in
        # An outer run: each attempt's round (its inner AdamW state and carry after its inner
        # steps), adopted by the replica when that attempt is applied (an abandoned one's is
        # dropped).
        self._inner: dict[tuple[int, int], inner.Round] = {}
        self.bytes_sent = 0
        self.traffic = Tally()  # per step, by the message's own step (p2p/traffic.py)
        # Seconds per sequence of this peer's steps, exchange work included (p2p/pace.py): what
        # the leader shares the step's sequences by.
        self.pace = Pace()

    # -- what the CLI, the demo and the tests look at -------------------------------------------

    @property
    def id(self) -> str:
        return self.mesh.id

    @property
    def state(self) -> training.TrainState | None:
        return self.replica.state

    @property
    def config(self) -> messages.Config | None:
        return self.machine.config

    @property
    def phase(self) -> RunPhase:
        return self.machine.phase

    @property
    def gone(self) -> set[str]:
        return self.machine.peers.gone_set

    @property
    def is_leader(self) -> bool:
        return self.machine.is_leader

    def agreement(self, step: int) -> tuple[int, int]:
        """(peers whose hash of ``step`` equals ours, peers that reported one)."""
        return self.machine.agreement(step)

    @property
    def private_data_peers(self) -> frozenset[str]:
        """The peers of this run known to train on private data (machine.private_data_peers)."""
        return self.machine.private_data_peers

    # -- user requests (signal handlers) --------------------------------------------------------

    def shutdown(self, reason: str = "interrupted") -> None:
        """Leave the run cleanly (Ctrl-C): tell every peer, then stop."""
        self.inbox.put_nowait(lambda now: ev.UserLeave(now, reason))

    def end_run(self, reason: str = "the leader ended the run") -> None:
        """Leader: end the whole run at the next step boundary (`stop leader-request`)."""
        self.inbox.put_nowait(lambda now: ev.UserStop(now, reason))

    def request_save(self) -> None:
        """Save now (SIGUSR1); a leader also asks every peer to save this step."""
        self.inbox.put_nowait(lambda now: ev.UserSave(now))

    # -- the loop -------------------------------------------------------------------------------

    async def run(self) -> Outcome:
        """Train until the run stops; returns how it ended."""
        pump = asyncio.create_task(self._pump())
        try:
            if self.lead is not None:
                config = self._prepare_lead(self.lead)
                min_peers = self.lead.min_peers
                self.inbox.put_nowait(lambda now: ev.UserLead(now, config, min_peers))
            while True:
                deadline = self.machine.next_deadline()
                now = time.monotonic()
                if deadline is not None and deadline <= now:
                    # A due timer first, then one waiting input: neither starves the other.
                    outcome = self._feed(ev.Timer(now))
                    if outcome is None and not self.inbox.empty():
                        outcome = self._feed(self.inbox.get_nowait()(time.monotonic()))
                    if outcome is None and self.machine.next_deadline() == deadline:
                        log.warning("%s: deadline %.3f did not move", self.name, deadline)
                        await asyncio.sleep(0.01)  # never spin
                elif not self.inbox.empty():
                    outcome = self._feed(self.inbox.get_nowait()(now))
                else:
                    timeout = None if deadline is None else deadline - now
                    # wait_for cancels the get() when it times out; the queue keeps the item.
                    try:
                        item = await asyncio.wait_for(self.inbox.get(), timeout)
                    except TimeoutError:
                        continue
                    outcome = self._feed(item(time.monotonic()))
                if outcome is not None:
                    break
            await self.mesh.drain(self.timers.linger_s)
            return outcome
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            for task in list(self._tasks):
                task.cancel()

    async def _pump(self) -> None:
        while True:
            event = await self.mesh.events.get()
            if isinstance(event, ChannelOpen):
                self.inbox.put_nowait(self._link_opened(event))
            else:
                self.inbox.put_nowait(from_mesh(event))

    def _link_opened(self, e: ChannelOpen) -> Input:
        """The machine learns of a link when it handles this input; from then on this peer's
        sends go to that link (``Mesh.send_frames``: nothing meant for an older link to the
        same peer may overtake the machine's ``hello`` on the new one)."""

        def opened(now: float) -> ev.Event:
            self._links[e.peer] = e.generation
            return ev.ChannelOpened(now, e.peer)

        return opened

    def _feed(self, event: ev.Event) -> Outcome | None:
        outcome = None
        for effect in self.machine.handle(event):
            if isinstance(effect, fx.Finished):
                outcome = effect.outcome
            else:
                self._execute(effect)
        return outcome

    def _execute(self, effect: fx.Effect) -> None:
        if isinstance(effect, fx.SendMessage):
            text = messages.encode(effect.message)
            self.mesh.send(effect.peer, text, self._links.get(effect.peer))
            self.traffic.text(effect, text)
        elif isinstance(effect, fx.SendPayload):
            sent = self.send_payload(effect)
            self.bytes_sent += sent
            if sent:  # 0: nothing left (a test's vanished peer)
                # Every frame but the last is full, so the count follows from the bytes.
                self.traffic.payload(effect, -(-sent // frames.MAX_FRAME_BYTES), sent)
            key = (effect.step, effect.round)
            if effect.kind is not FrameKind.CHECKPOINT:
                self._bytes[key] = self._bytes.get(key, 0) + sent
                if key in self._computing:  # our compute-done is still to come: early
                    self._early_bytes[key] = self._early_bytes.get(key, 0) + sent
        elif isinstance(effect, fx.Close):
            # What the link carried until the refusal: a peer refused for the order of its
            # messages (a `config` before its `hello`) shows whether the hello ever arrived.
            log.warning("%s: link to %s until now: %s", self.name, effect.peer,
                        self.mesh.history(effect.peer))  # fmt: skip
            # The refusal's error was queued just before: give it a moment to leave first.
            self._spawn(self.mesh.close_link(effect.peer, drain_s=1.0))
        elif isinstance(effect, fx.Compute):
            self._start_compute(effect)
        elif isinstance(effect, fx.Save):
            self._save()
        else:
            assert isinstance(effect, fx.StepApplied)
            self._record(effect)

    def send_payload(self, effect: fx.SendPayload) -> int:
        """Frame one payload and queue it; returns the bytes sent. (The test harness
        overrides this to damage what leaves.)"""
        parts = frames.fragment(
            effect.kind, effect.payload, transfer=effect.transfer, step=effect.step,
            round=effect.round, chunk=effect.chunk, deflate=effect.deflate,
        )  # fmt: skip
        if effect.deflate:
            # A gradient chunk is small: frame it now (its compressed size is the statistic).
            wire = list(parts)
            self.mesh.send_frames(effect.peer, wire, self._links.get(effect.peer))
            return sum(len(f) for f in wire)
        # A checkpoint is cut into frames only as fast as the channel drains (flow control).
        self.mesh.send_frames(effect.peer, parts, self._links.get(effect.peer))
        count = -(-len(effect.payload) // frames.MAX_FRAGMENT_BYTES)
        return len(effect.payload) + count * frames.HEADER_BYTES

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- leading --------------------------------------------------------------------------------

    def _prepare_lead(self, lead: LeadConfig) -> messages.Config:
        """The leader's replica (fresh, or restored from ``--resume``) and the config that
        describes it."""
        spec = lead.outer_spec
        try:
            outer = None if spec is None else OuterConfig(spec.steps, spec.lr, spec.momentum)
        except OuterError:
            # Out of range: the machine's validation refuses this lead with the rule and its
            # hint (docs/PROTOCOL.md, "Outer runs") before anything is sent.
            outer = None
        self.replica.set_outer(outer)
        if lead.resume:
            self.replica.load(lead.resume)
        else:
            changes = {"vocab_size": self.replica.vocab_size}
            if lead.batch:
                changes["batch"] = lead.batch
            if lead.seq_len:
                changes["seq_len"] = lead.seq_len
            for field in ("width", "layers", "heads"):
                if (value := getattr(lead, field)) is not None:
                    changes[field] = value
            mc = preset(lead.preset, **changes)
            opt = AdamWConfig(lr=lead.lr, warmup_steps=min(lead.warmup, max(lead.steps - 1, 0)))
            self.replica.start(mc, opt, lead.seed)
        state = self.replica.state
        assert state is not None
        mc, opt = state.cfg, state.opt_cfg
        model = messages.ModelSpec(
            vocab_size=mc.vocab_size, width=mc.width, layers=mc.layers, heads=mc.heads,
            seq_len=mc.seq_len, batch=mc.batch, mlp_mult=mc.mlp_mult,
        )  # fmt: skip
        return messages.Config(
            run=secrets.token_hex(8),
            preset=None if lead.resume or lead.custom_model else lead.preset,
            model=model,
            optim=messages.OptimSpec(opt.lr, opt.warmup_steps, opt.weight_decay, opt.clip),
            steps=lead.steps,
            seed=state.seed,
            data=lead.data,
            tokenizer_sha256=self.tokenizer_sha256,
            resume_step=self.replica.step,
            resume_hash=self.replica.hash if self.replica.step > 0 else None,
            global_batch=(
                mc.batch * max(1, lead.min_peers)
                if lead.global_batch is None
                else lead.global_batch
            ),
            shares_by=lead.shares_by,
            sync=lead.sync,
            outer=spec,
        )

    # -- compute, records, saves ----------------------------------------------------------------

    def _start_compute(self, c: fx.Compute) -> None:
        state = self.replica.state
        config = self.machine.config
        assert state is not None and config is not None
        if config.outer is not None and config.sync == messages.SYNC_OUTER:
            self._start_outer_compute(c, config.outer.steps)
            return
        # Only a page trains on private text (docs/PROTOCOL.md, "Private data"): this shell never
        # tells its machine it has some, so its lanes are always the run's.
        assert not self.machine.private_data, "the headless peer has no private text"
        revision = fineweb.revision_of(config.data)  # the data rule accepted it
        cfg = state.cfg
        count = c.shares[c.rank]
        self._computing.add((c.step, c.round))
        # Our positions of the step's global batch, cut at lane boundaries (docs/PROTOCOL.md,
        # "Gradient chunks"): at most one lane's activations at a time.
        parts = contribution.positions(c.shares, c.rank, cfg.batch)
        Rows = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]

        loop = asyncio.get_running_loop()

        def emit(chunk: int, payload: bytes) -> None:  # called on the compute thread
            def partial(now: float) -> ev.ComputePartial:
                return ev.ComputePartial(now, c.step, c.round, chunk, payload)

            if self.early_chunks:
                loop.call_soon_threadsafe(self.inbox.put_nowait, partial)

        def compute(
            rows: list[Rows], probe: Callable[[], str]
        ) -> tuple[float, tuple[bytes, ...], str, float, float]:
            t0, c0 = time.perf_counter(), time.process_time()
            computed = contribution.compute(state, rows, c.shares, c.rank, emit)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            probe_hash = probe()
            return computed.loss, computed.payloads, probe_hash, seconds, cpu

        async def lane(piece: shares.Piece) -> Rows:
            return await self._piece_rows(revision, cfg, state.seed, state.step, piece)

        async def task() -> None:
            try:
                rows = [await lane(piece) for piece in parts]
            except DataUnavailable as exc:
                # Never train on other text: leave the run cleanly and say why.
                self.data_error = exc
                reason = f"cannot read the run's training data: {exc.message}"
                self.inbox.put_nowait(lambda now: ev.UserLeave(now, reason))
                return
            try:
                await self._recheck_backend()
                work = asyncio.to_thread(compute, rows, self.compute.probe)
                loss, payloads, probe_hash, seconds, cpu = await work
            except Exception as exc:  # reported to the machine, which stops the run
                error = repr(exc)
                self.inbox.put_nowait(lambda now: ev.ComputeFailed(now, c.step, c.round, error))
            else:
                key = (c.step, c.round)
                self._compute_s[key] = seconds
                self._computed_at[key] = time.perf_counter()
                seq_s = self.pace.computed(key, count, seconds, cpu, time.process_time())
                if self.recheck is not None and count:
                    self.recheck.observe(seconds / count)

                def done(now: float) -> ev.ComputeDone:
                    self._computing.discard(key)  # what it sends from here on is not early
                    return ev.ComputeDone(now, c.step, c.round, loss, payloads, probe_hash, seq_s)

                self.inbox.put_nowait(done)

        self._spawn(task())

    async def _piece_rows(
        self, revision: str | None, cfg: ModelConfig, seed: int, index: int, piece: shares.Piece
    ) -> inner.Rows:
        """The rows of ``piece`` of batch ``index`` (a step's, or an outer round's inner step's):
        the built-in corpus sampled by (seed, index, lane), or a FineWeb-Edu window, prefetched
        while earlier steps computed (datafeed)."""
        if revision is None:
            x, y = batches.sample_batch(
                self.tokens, cfg.batch, cfg.seq_len, seed, index, piece.lane
            )
        else:
            x, y = await self._fetch_batch(Address(seed, index, piece.lane, cfg.batch, cfg.seq_len))
        return contribution.piece_rows(x, y, piece)

    def _start_outer_compute(self, c: fx.Compute, h: int) -> None:
        """An outer run's round (p2p/inner.py): this peer's positions of ``h`` batch indices,
        in inner steps cut as ``config.outer.cut`` says (``shares.round_steps``) on a copy of the
        outer state, answered with the pseudo-gradient's chunks as a gradient's would be. With
        overlap the chunks are handed over as ``compute-partial`` at the round's sync step, so
        the exchange runs beside the inner steps after it (docs/OUTER.md, "Overlap")."""
        config = self.machine.config
        assert config is not None and config.outer is not None
        overlap = config.outer.overlap
        revision = fineweb.revision_of(config.data)
        work = self.replica.inner_start()  # copied now: the outer state changes only on apply
        outer_params = {k: w.copy() for k, w in work.params.items()}
        carry = self.replica.carry  # replaced, never changed in place, on apply
        cfg = work.cfg
        count = c.shares[c.rank]
        key = (c.step, c.round)
        self._computing.add(key)
        first = shares.offsets(c.shares)[c.rank]
        indices = inner.round_indices(c.step, h)
        plan = shares.round_steps(indices, first, count, cfg.batch, config.outer.cut)
        lanes: dict[tuple[int, int], inner.Rows] = {}

        async def rows_of(p: shares.RoundPiece) -> inner.Rows:
            # Each (index, lane) is read once; an inner step's cut may split its rows.
            at = (p.index, p.lane)
            if at not in lanes:
                whole = shares.Piece(p.lane, 0, cfg.batch)
                lanes[at] = await self._piece_rows(revision, cfg, work.seed, p.index, whole)
            x, y = lanes[at]
            return x[p.row : p.row + p.rows], y[p.row : p.row + p.rows]

        loop = asyncio.get_running_loop()

        def emit(chunk: int, payload: bytes) -> None:  # called on the compute thread
            def partial(now: float) -> ev.ComputePartial:
                return ev.ComputePartial(now, c.step, c.round, chunk, payload)

            # Without overlap the round is measured after its last step: nothing to gain.
            if self.early_chunks and overlap:
                loop.call_soon_threadsafe(self.inbox.put_nowait, partial)

        def compute(
            rows: list[list[inner.Rows]], probe: Callable[[], str]
        ) -> tuple[inner.Round | None, str, float, float]:
            t0, c0 = time.perf_counter(), time.process_time()
            done = None  # a share of 0 takes no inner steps and sends nothing (the probe only)
            if count:
                done = inner.inner_round(work, outer_params, rows, c.shares, overlap, carry, emit)
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            return done, probe(), seconds, cpu

        async def task() -> None:
            try:
                rows = [[await rows_of(p) for p in pieces] for pieces in plan]
            except DataUnavailable as exc:
                self.data_error = exc
                reason = f"cannot read the run's training data: {exc.message}"
                self.inbox.put_nowait(lambda now: ev.UserLeave(now, reason))
                return
            try:
                result = await asyncio.to_thread(compute, rows, self.compute.probe)
            except Exception as exc:  # reported to the machine, which stops the run
                error = repr(exc)
                self.inbox.put_nowait(lambda now: ev.ComputeFailed(now, c.step, c.round, error))
                return
            computed, probe_hash, seconds, cpu = result
            self._compute_s[key] = seconds
            self._computed_at[key] = time.perf_counter()
            loss, payloads = 0.0, (b"",) * c.peers
            if computed is not None:
                loss, payloads = computed.loss, computed.payloads
                self._inner[key] = computed
            # Seconds per sequence of one inner step: what the leader shares sequences by.
            seq_s = self.pace.computed(key, count * h, seconds, cpu, time.process_time())

            def done(now: float) -> ev.ComputeDone:
                self._computing.discard(key)
                return ev.ComputeDone(now, c.step, c.round, loss, payloads, probe_hash, seq_s)

            self.inbox.put_nowait(done)

        self._spawn(task())

    async def _recheck_backend(self) -> None:
        """Between steps, measure the backends again when the re-check says so, and switch.

        Safe mid-run: every gated backend computes the same bits (its gates and the per-step
        probe prove it), so only who multiplies changes, and the backend the next hash names.
        """
        if self.recheck is None or (cause := self.recheck.due()) is None:
            return
        if self.replica.state is not None:  # time the run's own model, not tiny (off the loop:
            # a new model's timer builds its parameters)
            await asyncio.to_thread(self.recheck.use_model, self.replica.state.cfg)
        check = await asyncio.to_thread(self.recheck.run, self.compute, cause)
        if check.switched:
            self.compute = self.recheck.compute(check.chosen)
            self.replica.ops = self.compute.ops
            if self.replica.state is not None:
                self.replica.state.ops = self.compute.ops
            settings = self.machine.settings
            self.machine.settings = dataclasses.replace(settings, backend=self.compute.name)

    async def _fetch_batch(
        self, address: Address
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        if self.data is None:  # the data rule admits no FineWeb-Edu run without a feed
            raise DataUnavailable("this peer has no FineWeb-Edu feed", "restart the peer")
        return await self.data.batch(address)

    def _record(self, a: fx.StepApplied) -> None:
        key = (a.step, a.round)
        state = self.replica.state
        assert state is not None
        config = self.machine.config
        h = config.outer.steps if config is not None and config.outer is not None else 0
        if h:
            # This peer's inner optimizer carries on from the round that was applied; rounds
            # abandoned before it leave nothing behind.
            computed = self._inner.pop(key, None)
            if computed is not None:
                self.replica.adopt_inner(computed.opt, computed.carry)
            for old in [k for k in self._inner if k <= key]:
                del self._inner[old]
        record = StepRecord(
            step=a.step, round=a.round, loss=a.loss, hash=a.hash, roster=a.roster,
            shares=a.shares, share=a.shares[a.roster.index(self.id)] if self.id in a.roster else 0,
            tokens=sum(a.shares) * state.cfg.seq_len * max(h, 1),
            compute_s=self._compute_s.pop(key, 0.0),
            exchange_s=time.perf_counter() - self._computed_at.pop(key, time.perf_counter()),
            exchange_work_s=self.pace.applied(key, time.process_time()),
            bytes_sent=self._bytes.pop(key, 0), bytes_early=self._early_bytes.pop(key, 0),
            leader=a.leader, probe=a.probe, backend=a.backend,
            private_data=tuple(p for p in a.roster if p in self.machine.private_data_peers),
            inner_steps=h, traffic=self.traffic.take(a.step),
        )  # fmt: skip
        self.records.append(record)
        if self.on_step is not None:
            self.on_step(record)

    def membership_traffic(self) -> StepTraffic:
        """What this peer sent that belongs to no step (hello, config, ready, checkpoints,
        stop ...): p2p/traffic.py."""
        return self.traffic.steps.get(MEMBERSHIP, StepTraffic())

    def _save(self) -> None:
        assert self.checkpoint_path
        saved = self.replica.save(self.checkpoint_path)
        self.saved.append(saved)
        log.info("%s: saved %s", self.name, saved)
