"""Writing a conformance trace: drive one machine with scripted events, record every effect.

A ``Script`` owns one ``Machine`` (with a ``TraceReplica``) and plays the rest of the group
around it: the other peers' channels, messages and frames, and this peer's shell (compute
results, timers). Every event goes through its JSON form before the machine sees it, so the
trace written is exactly what was fed. Chunk payloads follow a documented rule
(``rule_chunk``), and are stored in the trace anyway: a replayer needs no generator code.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from daisychain.model.params import param_shapes
from daisychain.p2p import DATA_PROTOCOL_VERSION, allreduce, runconfig, shares
from daisychain.p2p.machine import Machine, Settings, Timers
from daisychain.p2p.machine import effects as fx
from daisychain.p2p.machine import events as ev
from daisychain.p2p.versions import FRAME_VERSION
from daisychain.wire import codec, frames, messages
from daisychain.wire.frames import FrameKind
from protocol_traces.jsonform import Json, effect_to_json, event_from_json, event_to_json
from protocol_traces.trace_replica import TraceReplica, init_hash

FORMAT = "daisychain-protocol-trace"
FORMAT_VERSION = 1

A, B, C, D, E, F = (letter * 12 for letter in "ABCDEF")  # server ids sort A < B < ...
RUN = "0123456789abcdef"
OTHER_RUN = "fedcba9876543210"
TOKENIZER = hashlib.sha256(b"daisychain-trace tokenizer").hexdigest()
REFERENCE_PROBE = hashlib.sha256(b"daisychain-trace reference probe").hexdigest()
VOCAB = 64
SEED = 7
TIMERS = Timers(step_timeout_s=30.0, repair_after_s=5.0, hello_timeout_s=20.0, linger_s=10.0)
MODEL = messages.ModelSpec(
    vocab_size=VOCAB, width=16, layers=1, heads=1, seq_len=4, batch=1, mlp_mult=1
)
# Sequences per step in every trace run: 12 splits evenly over 1, 2, 3, 4 and 6 peers, so
# the traces of unmeasured (equal) peers keep version 1's chunk bounds.
GLOBAL_BATCH = 12

Shares = tuple[int, ...]
# What the scripted peers send and reduce: ``contributions(rank, step, rnd, roster)`` and
# ``reduced(step, rnd, roster, chunk)`` below (the per-step rule), or an outer run's
# (protocol_traces.outer: pseudo-gradients, the outer mean).
Contribute = Callable[[int, int, int, "int | Shares"], tuple[bytes, ...]]
Reduce = Callable[[int, int, "int | Shares", int], bytes]


def split(roster: int | Shares) -> Shares:
    """``roster`` as shares: a peer count means the leader's split of unmeasured peers."""
    if isinstance(roster, int):
        return shares.allot([0.0] * roster, GLOBAL_BATCH)
    return roster


def roster_msg(
    step: int, rnd: int, peers: tuple[str, ...] | list[str], of: Shares | None = None,
    run: str = RUN,
) -> messages.Roster:  # fmt: skip
    """The roster message a scripted leader sends (equal shares unless ``of`` says)."""
    return messages.Roster(run, step, rnd, list(peers), list(of or split(len(peers))))


def config(
    steps: int = 3, resume: tuple[int, str] | None = None, shares_by: messages.SharesBy = "speed",
    **model: int,
) -> messages.Config:  # fmt: skip
    spec = MODEL if not model else messages.ModelSpec(**{**MODEL.__dict__, **model})
    return messages.Config(
        run=RUN, preset=None, model=spec, optim=messages.OptimSpec(0.003, 0, 0.0, 1.0),
        steps=steps, seed=SEED, data="builtin", tokenizer_sha256=TOKENIZER,
        resume_step=resume[0] if resume else 0, resume_hash=resume[1] if resume else None,
        global_batch=GLOBAL_BATCH, shares_by=shares_by,
    )  # fmt: skip


def total_blocks() -> int:
    model = runconfig.parse(config(), tokenizer_sha256=TOKENIZER, vocab_size=VOCAB).model
    size = 0
    for shape in param_shapes(model).values():
        n = 1
        for d in shape:
            n *= d
        size += n
    return codec.n_blocks(size)


def rule_chunk(rank: int, step: int, rnd: int, chunk: int, blocks: int) -> bytes:
    """The contribution of roster rank ``rank`` to ``chunk`` at ``(step, rnd)``: every block
    exponent -7, value ``i`` = ((7 i + 13 rank + 5 step + 3 rnd + 11 chunk) mod 255) - 127."""
    exps = bytes([(-7) & 0xFF]) * blocks
    base = 13 * rank + 5 * step + 3 * rnd + 11 * chunk
    values = bytes(((7 * i + base) % 255 - 127) & 0xFF for i in range(blocks * codec.BLOCK))
    return exps + values


def contributions(rank: int, step: int, rnd: int, roster: int | Shares) -> tuple[bytes, ...]:
    """What roster rank ``rank`` sends for each chunk (empty bytes for an empty chunk, and
    for every chunk with a share of 0)."""
    tb, of = total_blocks(), split(roster)
    out = []
    for k in range(len(of)):
        first, end = allreduce.chunk_blocks(tb, of, k)
        empty = end == first or of[rank] == 0
        out.append(b"" if empty else rule_chunk(rank, step, rnd, k, end - first))
    return tuple(out)


def reduced(step: int, rnd: int, roster: int | Shares, chunk: int) -> bytes:
    """The owner's reduced chunk when every contributor contributed by ``rule_chunk``."""
    tb, of = total_blocks(), split(roster)
    first, end = allreduce.chunk_blocks(tb, of, chunk)
    who = [r for r in range(len(of)) if of[r] > 0]
    parts = [codec.decode(contributions(r, step, rnd, of)[chunk], end - first) for r in who]
    payload, _ = codec.encode(allreduce.reduce_chunk(parts, [of[r] for r in who], sum(of)))
    return payload


def loss_of(step: int) -> float:
    return 4.0 - 0.125 * step


def hello_text(version: int = DATA_PROTOCOL_VERSION, name: str = "peer") -> str:
    return messages.encode(messages.Hello(version, name))


class Script:
    def __init__(
        self,
        name: str,
        description: str,
        me: str,
        *,
        state: tuple[int, str] | None = None,
        can_save: bool = False,
        save_every: int = 0,
        contribute: Contribute | None = None,
        reduce: Reduce | None = None,
    ) -> None:
        self.name = name
        self.contributions: Contribute = contribute or contributions
        self.reduced: Reduce = reduce or reduced
        self.me = me
        self.setup: Json = {
            "id": me, "name": f"trace-{me[0].lower()}", "tokenizer_sha256": TOKENIZER,
            "vocab_size": VOCAB, "backend": "numpy", "reference_probe": REFERENCE_PROBE,
            "timers": TIMERS.__dict__.copy(), "can_save": can_save, "save_every": save_every,
            "limits": runconfig.Limits().__dict__.copy(),
            "replica": None if state is None else {"step": state[0], "hash": state[1]},
        }  # fmt: skip
        self.description = description
        self.machine = build_machine(self.setup)
        self.steps: list[Json] = []
        self.now = 0.0
        self.transfers: dict[str, int] = {}

    # -- recording -------------------------------------------------------------------------------

    def feed(self, event: ev.Event) -> list[fx.Effect]:
        obj = event_to_json(event)
        effects = self.machine.handle(event_from_json(obj))
        self.steps.append({
            "event": obj, "effects": [effect_to_json(f) for f in effects],
            "deadline": self.machine.next_deadline(),
        })  # fmt: skip
        return effects

    def trace(self) -> Json:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "protocol_version": DATA_PROTOCOL_VERSION, "frame_version": FRAME_VERSION,
            "name": self.name, "description": self.description, "setup": self.setup,
            "steps": self.steps,
        }  # fmt: skip

    def at(self, t: float) -> Script:
        assert t >= self.now, "time runs forward"
        self.now = t
        return self

    # -- the other peers -----------------------------------------------------------------------

    def connect(self, *peers: str) -> list[fx.Effect]:
        out: list[fx.Effect] = []
        for p in peers:
            out += self.feed(ev.ChannelOpened(self.now, p))
            out += self.text(p, hello_text(name=f"trace-{p[0].lower()}"))
        return out

    def text(self, peer: str, raw: str) -> list[fx.Effect]:
        return self.feed(ev.MessageReceived(self.now, peer, raw))

    def send(self, peer: str, m: messages.Message) -> list[fx.Effect]:
        return self.text(peer, messages.encode(m))

    def frames(
        self, peer: str, kind: FrameKind, payload: bytes, step: int, rnd: int = 0,
        chunk: int = 0, *, damage: bool = False,
    ) -> list[fx.Effect]:  # fmt: skip
        self.transfers[peer] = self.transfers.get(peer, 0) + 1
        parts = list(
            frames.fragment(kind, payload, transfer=self.transfers[peer], step=step, round=rnd,
                            chunk=chunk, deflate=kind is not FrameKind.CHECKPOINT)
        )  # fmt: skip
        if damage:  # one byte flipped after the CRC was computed: damaged in transit
            parts[0] = parts[0][:-1] + bytes([parts[0][-1] ^ 0x5A])
        out: list[fx.Effect] = []
        for part in parts:
            out += self.feed(ev.FrameReceived(self.now, peer, part))
        return out

    def closed(self, peer: str) -> list[fx.Effect]:
        return self.feed(ev.ChannelClosed(self.now, peer))

    def left(self, peer: str) -> list[fx.Effect]:
        return self.feed(ev.PeerLeft(self.now, peer))

    def timer(self) -> list[fx.Effect]:
        deadline = self.machine.next_deadline()
        assert deadline is not None, "no timer is running"
        self.now = max(self.now, deadline)
        return self.feed(ev.Timer(self.now))

    # -- this peer's shell -------------------------------------------------------------------------

    def compute(
        self, step: int, rnd: int, roster: tuple[str, ...], of: Shares | None = None,
        *, seq_s: float = 0.0, probe: str = REFERENCE_PROBE,
    ) -> list[fx.Effect]:  # fmt: skip
        """This peer's shell answers its compute effect (``seq_s``: the speed it measured)."""
        rank, of = roster.index(self.me), of or split(len(roster))
        payloads = self.contributions(rank, step, rnd, of)
        loss = loss_of(step) if of[rank] else 0.0
        return self.feed(ev.ComputeDone(self.now, step, rnd, loss, payloads, probe, seq_s))

    def partial(
        self, step: int, rnd: int, roster: tuple[str, ...], chunk: int,
        of: Shares | None = None, payload: bytes | None = None,
    ) -> list[fx.Effect]:  # fmt: skip
        """This peer's shell hands over chunk ``chunk`` of its gradient early (the honest
        bytes unless ``payload``)."""
        rank, of = roster.index(self.me), of or split(len(roster))
        if payload is None:
            payload = self.contributions(rank, step, rnd, of)[chunk]
        return self.feed(ev.ComputePartial(self.now, step, rnd, chunk, payload))

    def exchange(
        self, step: int, rnd: int, roster: tuple[str, ...], of: Shares | None = None,
        *, skip: frozenset[str] = frozenset(), seq_s: float = 0.0,
    ) -> str:  # fmt: skip
        """One honest attempt around this peer: its compute, every other contributor's part
        of its chunk and every other non-empty chunk reduced by its owner (``skip``: peers
        that send nothing). Returns the hash this peer applied."""
        return applied(self.exchange_effects(step, rnd, roster, of, skip=skip, seq_s=seq_s))

    def exchange_effects(
        self, step: int, rnd: int, roster: tuple[str, ...], of: Shares | None = None,
        *, skip: frozenset[str] = frozenset(), seq_s: float = 0.0,
    ) -> list[fx.Effect]:  # fmt: skip
        """``exchange``'s effects (a leader's next roster is among them: it commits at its
        apply)."""
        of = of or split(len(roster))
        out = self.compute(step, rnd, roster, of, seq_s=seq_s)
        return out + self._pieces_to_me(step, rnd, roster, of, skip)

    def exchange_rest(
        self, step: int, rnd: int, roster: tuple[str, ...], of: Shares,
        *, skip: frozenset[str] = frozenset(),
    ) -> str:  # fmt: skip
        """``exchange`` after this peer's compute-done was already fed."""
        return applied(self._pieces_to_me(step, rnd, roster, of, skip))

    def _pieces_to_me(
        self, step: int, rnd: int, roster: tuple[str, ...], of: Shares, skip: frozenset[str]
    ) -> list[fx.Effect]:
        me = roster.index(self.me)
        tb = total_blocks()
        nonempty = [k for k in range(len(of)) if allreduce.chunk_blocks(tb, of, k)[1]
                    > allreduce.chunk_blocks(tb, of, k)[0]]  # fmt: skip
        out: list[fx.Effect] = []
        if me in nonempty:
            for j, p in enumerate(roster):
                if p != self.me and p not in skip and of[j] > 0:
                    part = self.contributions(j, step, rnd, of)[me]
                    out += self.frames(p, FrameKind.CONTRIBUTION, part, step, rnd, me)
        for k in nonempty:
            p = roster[k]
            if p != self.me and p not in skip:
                payload = self.reduced(step, rnd, of, k)
                out += self.frames(p, FrameKind.REDUCED, payload, step, rnd, k)
        return out

    def hashes(
        self, step: int, rnd: int, peers: tuple[str, ...], digest: str,
        probe: str = REFERENCE_PROBE, backend: str = "numpy",
        speeds: dict[str, float] | None = None,
    ) -> list[fx.Effect]:  # fmt: skip
        """Every other peer's hash of ``(step, rnd)`` (with the seconds per sequence each
        reports: ``speeds``, 0 when absent)."""
        out: list[fx.Effect] = []
        for p in peers:
            if p != self.me:
                seq_s = (speeds or {}).get(p, 0.0)
                out += self.send(p, messages.StepHash(RUN, step, rnd, digest, loss_of(step),
                                                      probe, backend, seq_s))  # fmt: skip
        return out


def applied(effects: list[fx.Effect]) -> str:
    done = [f for f in effects if isinstance(f, fx.StepApplied)]
    assert len(done) == 1, f"expected one step applied, got {effects}"
    return done[0].hash


def build_machine(setup: Json) -> Machine:
    """The machine a trace's ``setup`` describes (what a replayer builds first)."""
    settings = Settings(
        id=setup["id"], name=setup["name"], tokenizer_sha256=setup["tokenizer_sha256"],
        vocab_size=setup["vocab_size"], backend=setup["backend"],
        reference_probe=setup["reference_probe"], timers=Timers(**setup["timers"]),
        can_save=setup["can_save"], save_every=setup["save_every"],
        limits=runconfig.Limits(**setup["limits"]),
    )  # fmt: skip
    state = setup["replica"]
    replica = TraceReplica() if state is None else TraceReplica(state["step"], state["hash"])
    return Machine(settings, replica)


def fresh_state() -> tuple[int, str]:
    return (0, init_hash(SEED))
