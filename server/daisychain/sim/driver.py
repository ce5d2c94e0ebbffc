"""The simulator's driver: N unchanged protocol machines, one modelled network, one event queue.

Every peer is a ``p2p.machine.Machine`` with a ``SimReplica``. The driver is their shell, as
``p2p.node`` is a real peer's, with the clock and the network replaced by models:

- ``SendMessage`` is encoded (``messages.encode``) and delivered as ``MessageReceived`` after
  the sender's uplink had time for it and the link's latency (``network``); ``SendPayload`` is
  cut into real frames (``frames.fragment``, not deflated: ``Links.wire_ratio`` stands for
  deflate on the wire) and each arrives as ``FrameReceived``; ``Close`` closes both ends.
- ``Compute`` is answered by ``ComputeDone`` after the device profile's compute time, with
  payloads of the exact size the roster's chunks take (zeros: the simulator models time, not
  arithmetic) and, like the real shell's early chunks, ``ComputePartial`` for each chunk the
  backward finishes before the end.
- ``next_deadline()`` becomes a ``Timer`` event; churn (``joins``, ``leaves``) feeds
  ``UserLeave``, ``ChannelOpened`` and ``PeerLeft`` at their times.

What each peer sends is counted by ``p2p.traffic``, as the real shell counts it. A run that
stops progressing (no peer applies a step for ``stall_s`` simulated seconds, or nothing is left
to happen while peers wait) raises ``Stall`` with what every waiting peer waits for, instead of
hanging.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from daisychain.model.config import preset
from daisychain.model.params import param_shapes
from daisychain.optim import AdamWConfig
from daisychain.p2p import allreduce, shares
from daisychain.p2p.machine import Machine, Settings, Timers
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.run import Phase
from daisychain.p2p.traffic import Tally
from daisychain.sim.clock import EventQueue
from daisychain.sim.network import Links
from daisychain.sim.profiles import Device
from daisychain.sim.replica import SimReplica
from daisychain.sim.report import PeerFigures, StepFigures
from daisychain.wire import codec, frames, messages

log = logging.getLogger("daisychain.sim")

TOKENIZER_SHA256 = hashlib.sha256(b"daisychain-sim tokenizer").hexdigest()
PROBE = hashlib.sha256(b"daisychain-sim probe").hexdigest()  # the kernel probe every peer reports
BACKEND = "sim"

MachineFactory = Callable[[Settings, SimReplica], Machine]


class Stall(RuntimeError):
    """The simulated run stopped progressing; ``waits`` says, per waiting peer, what for."""

    def __init__(self, now: float, why: str, waits: dict[str, str]) -> None:
        lines = "\n".join(f"  {peer}: {what}" for peer, what in sorted(waits.items()))
        super().__init__(f"simulated run stalled at {now:.3f} s: {why}\n{lines}")
        self.now = now
        self.waits = waits


@dataclass(frozen=True)
class Scenario:
    """One simulated run. Peer 0 leads; ``devices`` has one profile per peer."""

    devices: tuple[Device, ...]
    links: Links
    preset: str = "tiny"
    steps: int = 4
    seed: int = 1
    global_batch: int = 0  # 0: the preset's batch per peer (at most shares.MAX_GLOBAL_BATCH)
    shares_by: messages.SharesBy = "equal"
    timers: Timers = field(default_factory=Timers)
    ids: tuple[str, ...] = ()  # the peers' ids (default sim-00000000 ...), 12 characters each
    joins: dict[int, float] = field(default_factory=dict)  # peer -> when it says hello (else 0)
    leaves: dict[int, float] = field(default_factory=dict)  # peer -> when its user leaves
    early_chunks: bool = True
    stall_s: float = 0.0  # 0: the step timeout plus the repair interval
    # A what-if: the wire's cap on peers in a roster (messages.MAX_ROSTER, 64) lifted to this
    # many for the run, to see what today's full mesh would cost beyond it (0: the cap holds,
    # and a group above it is refused as a real one is).
    roster_cap: int = 0

    @property
    def n(self) -> int:
        return len(self.devices)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("a scenario needs at least one device")
        if self.steps < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")
        if self.ids and (len(self.ids) != self.n or len(set(self.ids)) != self.n):
            raise ValueError(f"ids: {self.n} distinct ids needed, got {len(self.ids)}")
        for name, table in (("joins", self.joins), ("leaves", self.leaves)):
            bad = [i for i, t in table.items() if not 0 <= i < self.n or t < 0]
            if bad:
                raise ValueError(f"{name}: peers {bad} are not 0..{self.n - 1} at a time >= 0")
        if 0 in self.leaves:
            raise ValueError("leaves: the leader (peer 0) cannot be scheduled to leave")
        if self.roster_cap and not messages.MAX_ROSTER <= self.roster_cap <= 0xFFFF:
            raise ValueError(
                f"roster_cap {self.roster_cap}: between the wire's {messages.MAX_ROSTER} and "
                "65535 (a frame's chunk index is 16 bits), or 0 for the wire's own"
            )


@dataclass
class SimResult:
    peers: list[PeerFigures]
    outcomes: dict[str, fx.Outcome]
    end_s: float  # simulated seconds until the last peer finished
    events: int  # events fed to machines
    closed: int  # channels a machine closed (a refusal, another version): 0 in a healthy run


# queue items: (kind, peer, payload)
_DELIVER, _TIMER, _JOIN, _LEAVE, _OPEN = range(5)


class Simulator:
    def __init__(self, scenario: Scenario, machine: MachineFactory = Machine) -> None:
        self.s = scenario
        n = scenario.n
        self.ids = scenario.ids or tuple(f"sim-{i:08d}" for i in range(n))
        self.index = {pid: i for i, pid in enumerate(self.ids)}
        self.model = preset(scenario.preset)
        self.params = sum(math.prod(s) for s in param_shapes(self.model).values())
        self.total_blocks = codec.n_blocks(self.params)
        # The first parameter's gradient comes last in the backward (wte: early.py); a chunk
        # that holds any of it is final only at the end.
        first = next(iter(param_shapes(self.model).values()))
        self.first_param_blocks = math.prod(first) / codec.BLOCK
        self.rng = random.Random(scenario.seed)
        timers = scenario.timers
        self.stall_s = scenario.stall_s or timers.step_timeout_s + timers.repair_after_s
        self.replicas = [SimReplica() for _ in range(n)]
        self.machines = [
            machine(
                Settings(
                    id=pid,
                    name=f"sim{i}",
                    tokenizer_sha256=TOKENIZER_SHA256,
                    vocab_size=self.model.vocab_size,
                    backend=BACKEND,
                    reference_probe=PROBE,
                    timers=timers,
                ),
                self.replicas[i],
            )
            for i, pid in enumerate(self.ids)
        ]
        self.queue: EventQueue[tuple[int, int, object]] = EventQueue()
        self.present = [False] * n  # joined and not finished
        self.open: list[set[int]] = [set() for _ in range(n)]
        self.up_free = [0.0] * n
        self.cpu_free = [0.0] * n
        self.timer_at: list[float | None] = [None] * n
        self.tally = [Tally() for _ in range(n)]
        self.figures = [PeerFigures(pid, 0.0, leader=i == 0) for i, pid in enumerate(self.ids)]
        self.computing: dict[tuple[int, int, int], tuple[float, float]] = {}  # start, end
        self.computed_at: dict[tuple[int, int, int], float] = {}
        self.outcomes: dict[str, fx.Outcome] = {}
        self.last_progress = 0.0
        self.events = 0
        self.closed = 0
        self._zeros: dict[int, bytes] = {}
        self._bounds: dict[tuple[int, ...], list[tuple[int, int]]] = {}

    # -- running --------------------------------------------------------------------------------

    def run(self) -> SimResult:
        cap, size = messages.MAX_ROSTER, messages.MAX_MESSAGE_BYTES
        if self.s.roster_cap:
            # Read by the parser at every call. A roster message lists every peer (an id of 12
            # characters and its share): the text cap grows with it.
            messages.MAX_ROSTER = self.s.roster_cap
            messages.MAX_MESSAGE_BYTES = max(size, 32 * self.s.roster_cap)
        try:
            return self._run()
        finally:
            messages.MAX_ROSTER, messages.MAX_MESSAGE_BYTES = cap, size

    def _run(self) -> SimResult:
        s = self.s
        for i in range(s.n):
            self.queue.at(s.joins.get(i, 0.0), (_JOIN, i, None))
        for i, t in s.leaves.items():
            self.queue.at(t, (_LEAVE, i, None))
        while len(self.outcomes) < s.n:
            if not len(self.queue):
                raise Stall(self.queue.now, "nothing is left to happen", self._waits())
            now, (kind, i, payload) = self.queue.pop()
            if now - self.last_progress > self.stall_s:
                raise Stall(now, f"no peer applied a step for {self.stall_s:g} s", self._waits())
            self._step(now, kind, i, payload)
        return SimResult(self.figures, self.outcomes, self.queue.now, self.events, self.closed)

    def _step(self, now: float, kind: int, i: int, payload: object) -> None:
        if kind == _JOIN:
            self._join(now, i)
        elif self.ids[i] in self.outcomes:
            return  # finished: it hears nothing more
        elif kind == _TIMER:
            if self.timer_at[i] == now:
                self.timer_at[i] = None
                self._feed(i, ev.Timer(now))
        elif kind == _LEAVE:
            self._feed(i, ev.UserLeave(now, "the scenario's churn"))
        elif kind == _OPEN:
            j = int(payload)  # type: ignore[call-overload]
            if self.present[j] or self.ids[j] in self.outcomes:
                self.open[i].add(j)
                self._feed(i, ev.ChannelOpened(now, self.ids[j]))
        else:
            assert callable(payload)
            event = payload(now)
            if isinstance(event, ev.ComputeDone | ev.ComputePartial) or self._channel_up(i, event):
                self._feed(i, event)

    def _channel_up(self, i: int, event: object) -> bool:
        peer = getattr(event, "peer", None)
        return peer is None or self.index[peer] in self.open[i] or isinstance(event, ev.PeerLeft)

    def _join(self, now: float, i: int) -> None:
        """Peer ``i`` says hello: channels to every present peer open after the handshakes."""
        self.present[i] = True
        self.figures[i].joined_at = now
        self.last_progress = max(self.last_progress, now)
        for j in range(self.s.n):
            if j != i and self.present[j]:
                t = now + self.s.links.connect_s(i, j)
                self.queue.at(t, (_OPEN, i, j))
                self.queue.at(t, (_OPEN, j, i))
        if i == 0:  # the leader's shell readies its replica before it leads (as p2p.node does)
            config = self._config()
            self.replicas[0].start(self.model, AdamWConfig(), config.seed)
            # The first roster waits for every peer that is there from the start.
            first = sum(1 for j in range(self.s.n) if self.s.joins.get(j, 0.0) == 0.0)
            self._feed(i, ev.UserLead(now, config, first))

    def _config(self) -> messages.Config:
        mc, s = self.model, self.s
        g = s.global_batch or min(mc.batch * s.n, shares.MAX_GLOBAL_BATCH)
        spec = messages.ModelSpec(
            vocab_size=mc.vocab_size, width=mc.width, layers=mc.layers, heads=mc.heads,
            seq_len=mc.seq_len, batch=mc.batch, mlp_mult=mc.mlp_mult,
        )  # fmt: skip
        run = hashlib.sha256(f"sim run {s.seed}".encode()).hexdigest()[:16]
        return messages.Config(
            run=run, preset=s.preset, model=spec,
            optim=messages.OptimSpec(1e-3, 0, 0.0, 1.0), steps=s.steps, seed=s.seed,
            data="builtin", tokenizer_sha256=TOKENIZER_SHA256, resume_step=0, resume_hash=None,
            global_batch=g, shares_by=s.shares_by,
        )  # fmt: skip

    def _feed(self, i: int, event: ev.Event) -> None:
        self.events += 1
        m = self.machines[i]
        for effect in m.handle(event):
            self._execute(i, effect, event.now)
        deadline = m.next_deadline()
        if deadline is not None and deadline != self.timer_at[i] and not m.finished:
            self.timer_at[i] = max(deadline, event.now)
            self.queue.at(self.timer_at[i], (_TIMER, i, None))  # type: ignore[arg-type]

    # -- effects --------------------------------------------------------------------------------

    def _execute(self, i: int, effect: fx.Effect, now: float) -> None:
        if isinstance(effect, fx.SendMessage):
            text = messages.encode(effect.message)
            self.tally[i].text(effect, text)
            size = len(text.encode("utf-8"))
            peer = self.ids[i]
            self._send(i, effect.peer, now, size, lambda t: ev.MessageReceived(t, peer, text))
        elif isinstance(effect, fx.SendPayload):
            self._send_payload(i, effect, now)
        elif isinstance(effect, fx.Close):
            self.closed += 1
            self._close(i, self.index[effect.peer], now)
        elif isinstance(effect, fx.Compute):
            self._compute(i, effect, now)
        elif isinstance(effect, fx.StepApplied):
            self._applied(i, effect, now)
        elif isinstance(effect, fx.Finished):
            self._finished(i, effect.outcome, now)
        # fx.Save: no simulated peer has a checkpoint path

    def _send(
        self, i: int, peer: str, now: float, size: int, make: Callable[[float], ev.Event]
    ) -> None:
        """Queue ``size`` bytes on ``i``'s uplink towards ``peer``; the receiver's shell takes
        them in after the link's latency and its own per-byte time."""
        j = self.index[peer]
        if j not in self.open[i]:
            return  # the channel is not open: the real mesh's send returns False too
        device = self.s.devices[i]
        self.up_free[i] = max(now, self.up_free[i]) + size / device.up_bytes_s
        arrive = self.up_free[i] + self.s.links.latency(i, j)
        cost = size * self.s.devices[j].recv_s_per_byte
        if cost:
            self.cpu_free[j] = max(arrive, self.cpu_free[j]) + cost
            arrive = self.cpu_free[j]
        self.queue.at(arrive, (_DELIVER, j, make))

    def _send_payload(self, i: int, effect: fx.SendPayload, now: float) -> None:
        parts = list(frames.fragment(
            effect.kind, effect.payload, transfer=effect.transfer, step=effect.step,
            round=effect.round, chunk=effect.chunk, deflate=False,
        ))  # fmt: skip
        ratio = self.s.links.wire_ratio if effect.deflate else 1.0
        body = len(effect.payload) * ratio
        count = max(1, math.ceil(body / frames.MAX_FRAGMENT_BYTES))
        wire = round(body) + count * frames.HEADER_BYTES
        self.tally[i].payload(effect, count, wire)
        peer = self.ids[i]
        # The modelled wire bytes travel; the real frames are what the receiver reassembles.
        share = wire / len(parts)
        for part in parts:
            self._send(i, effect.peer, now, round(share), _frame(peer, part))

    def _close(self, i: int, j: int, now: float) -> None:
        for a, b in ((i, j), (j, i)):
            if b in self.open[a]:
                self.open[a].discard(b)
                if a != i and self.ids[a] not in self.outcomes:
                    t = now + self.s.links.latency(i, j)
                    closed = self.ids[b]
                    self.queue.at(t, (_DELIVER, a, lambda t, c=closed: ev.ChannelClosed(t, c)))

    def _zero(self, size: int) -> bytes:
        if size not in self._zeros:
            self._zeros[size] = bytes(size)
        return self._zeros[size]

    def _compute(self, i: int, c: fx.Compute, now: float) -> None:
        device = self.s.devices[i]
        count = c.shares[c.rank]
        seconds = device.fixed_s + count * device.seq_s(self.params, self.model.seq_len)
        if device.straggle and self.rng.random() < device.straggle:
            seconds *= device.straggle_x
        key = (i, c.step, c.round)
        now += device.overhead_s  # the shell's work before the compute starts
        self.computing[key] = (now, now + seconds)
        bounds = self._chunks(c.shares)
        sizes = [(end - first) * (codec.BLOCK + 1) if count else 0 for first, end in bounds]
        payloads = tuple(self._zero(size) for size in sizes)
        if count and self.s.early_chunks:
            # The backward (two thirds of a step) produces the last parameters first: a chunk is
            # final once the backward of the last lane piece has passed its first block.
            last_piece = min(count, self.model.batch) / count
            for k, size in enumerate(sizes):
                first = bounds[k][0]
                if size == 0 or first < self.first_param_blocks:
                    continue
                left = first / self.total_blocks  # of the backward still to run
                t = now + seconds * (1 - last_piece * (2 / 3) * left)
                payload = payloads[k]
                self.queue.at(t, (_DELIVER, i, lambda t, k=k, p=payload:
                                  ev.ComputePartial(t, c.step, c.round, k, p)))  # fmt: skip
        seq_s = seconds / count if count else 0.0
        loss = round(5.0 + 1.0 / (1 + c.step), 6)

        def done(t: float) -> ev.ComputeDone:
            self.computed_at[key] = t
            return ev.ComputeDone(t, c.step, c.round, loss, payloads, PROBE, seq_s)

        self.queue.at(now + seconds, (_DELIVER, i, done))

    def _chunks(self, peer_shares: tuple[int, ...]) -> list[tuple[int, int]]:
        """[first, end) blocks of every chunk of a roster with these shares (cached: one roster
        is computed by every peer, and each call walks the whole roster)."""
        if peer_shares not in self._bounds:
            ends = allreduce.chunk_blocks
            self._bounds[peer_shares] = [
                ends(self.total_blocks, peer_shares, k) for k in range(len(peer_shares))
            ]
        return self._bounds[peer_shares]

    def _applied(self, i: int, a: fx.StepApplied, now: float) -> None:
        self.last_progress = now
        key = (i, a.step, a.round)
        start, end = self.computing.pop(key, (now, now))
        done = self.computed_at.pop(key, end)
        t = self.tally[i].take(a.step)
        share = a.shares[a.roster.index(self.ids[i])] if self.ids[i] in a.roster else 0
        self.figures[i].steps[a.step] = StepFigures(
            at=now, compute_s=end - start, exchange_s=now - done, share=share, hash=a.hash,
            messages=t.messages, frames=t.frames, text_bytes=t.text_bytes,
            piece_bytes=t.piece_bytes, wire_bytes=t.wire_bytes, connections=len(self.open[i]),
        )  # fmt: skip

    def _finished(self, i: int, outcome: fx.Outcome, now: float) -> None:
        self.outcomes[self.ids[i]] = outcome
        self.figures[i].final_hash = outcome.hash
        self.present[i] = False
        self.timer_at[i] = None
        for j in sorted(self.open[i]):
            self._close(i, j, now)
            t = now + self.s.links.latency(i, j)
            gone = self.ids[i]
            self.queue.at(t, (_DELIVER, j, lambda t, g=gone: ev.PeerLeft(t, g)))

    # -- a stall --------------------------------------------------------------------------------

    def _waits(self) -> dict[str, str]:
        """What every unfinished peer waits for, read from its machine (read-only)."""
        out = {}
        for i, m in enumerate(self.machines):
            pid = self.ids[i]
            if pid in self.outcomes:
                continue
            out[pid] = _waiting_for(m, self.s.n)
        return out


def _frame(peer: str, data: bytes) -> Callable[[float], ev.Event]:
    return lambda t: ev.FrameReceived(t, peer, data)


def _waiting_for(m: Machine, n: int) -> str:
    phase = m.phase.phase
    if phase is Phase.LOBBY:
        greeted = len(m.peers.live())
        return f"in the lobby: no config yet ({greeted} of {n - 1} peers greeted)"
    r = m.roster
    if r is None:
        if m.is_leader:
            ready = sorted(m.leadership.ready)
            return f"leader without a roster: ready from {len(ready)} peers {ready[:8]}"
        return f"{phase.value}: no roster yet from leader {m.leader}"
    a = m.store.get((r.step, r.round))
    if a is None:
        return f"roster of step {r.step} round {r.round} committed, no attempt here (state step " \
               f"{m.replica.step})"  # fmt: skip
    if not a.computed:
        return f"step {r.step} round {r.round}: computing"
    if a.applied:
        if m.is_leader:
            tally = m.tally(r.step, r.round, list(r.peers))
            return f"step {r.step} applied; leader waits for step hashes ({tally})"
        return f"step {r.step} applied; waits for the next roster from {m.leader}"
    missing = sorted(a.missing_from())
    more = " ..." if len(missing) > 8 else ""
    return f"step {r.step} round {r.round} {a.phase.value}: pieces missing from {missing[:8]}{more}"
