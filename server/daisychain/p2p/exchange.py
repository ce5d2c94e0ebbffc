"""One step's gradient exchange at a training peer (docs/PROTOCOL.md, "Gradient chunks and the
exchange arithmetic").

Each attempt (step, round) of a committed roster is a ``Work``: the peer computes its gradient
in a worker thread, sends every other roster peer its quantized contribution to that peer's
chunk, reduces its own chunk once every contribution arrived (in roster order: the pinned sum
order), sends the reduced chunk to everyone, and applies the step once it holds every reduced
chunk. Then it publishes its state hash for the sync guard.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from daisychain import training
from daisychain.p2p import allreduce, checkpoints, codec, frames, guard, messages
from daisychain.p2p.frames import FrameKind
from daisychain.p2p.run import CommittedRoster

if TYPE_CHECKING:
    from daisychain.p2p.node import Node

log = logging.getLogger("daisychain.p2p.node")

FloatArray = npt.NDArray[np.float32]
Key = tuple[int, int]  # (step, round)


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
class ComputeDone:
    key: Key
    loss: float
    payloads: list[bytes]  # per chunk, what we send to its owner
    own: FloatArray  # dequantized values of our own chunk (our contribution to it)
    seconds: float
    probe: str  # the kernel probe through the backend that computed this step


@dataclass(frozen=True)
class ComputeFailed:
    key: Key
    error: str


class Work:
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


def start_compute(node: Node, w: Work) -> None:
    state = node.state
    assert state is not None and w.rank is not None
    w.computing = True
    x, y = training.next_batch(state, node.tokens, w.rank)
    key, n, total_blocks, rank = w.key, w.n, node.total_blocks, w.rank
    probe = node.compute.probe

    def compute() -> ComputeDone:
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
        return ComputeDone(key, float(loss), payloads, own, seconds, probe_hash)

    async def task() -> None:
        try:
            done = await asyncio.to_thread(compute)
        except Exception as exc:  # reported to the event loop, which stops the run
            node.inbox.put_nowait(ComputeFailed(key, repr(exc)))
        else:
            node.inbox.put_nowait(done)

    node._spawn(task())


def on_computed(node: Node, done: ComputeDone) -> None:
    w = node.work.get(done.key)
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
        if node.faults.damage_contribution_at == step:
            node.faults.damage_contribution_at = None
            w.bytes_sent += _send_damaged(node, peer, payload, step, rnd, k)
            continue
        w.bytes_sent += node._send_payload(peer, FrameKind.CONTRIBUTION, payload, step, rnd, k)
    w.contributions[w.rank] = done.own
    try_reduce(node, w)


def _send_damaged(node: Node, peer: str, payload: bytes, step: int, rnd: int, k: int) -> int:
    node.transfer_id += 1
    sent = 0
    for i, frame in enumerate(
        frames.fragment(
            FrameKind.CONTRIBUTION,
            payload,
            transfer=node.transfer_id,
            step=step,
            round=rnd,
            chunk=k,
            deflate=True,
        )
    ):
        if i == 0:
            frame = frame[:-1] + bytes([frame[-1] ^ 0x5A])
        node.mesh.send(peer, frame)
        sent += len(frame)
    log.warning("%s: FAULT: damaged contribution to %s at step %d", node.name, peer, step)
    return sent


def on_piece(node: Node, peer: str, p: frames.Payload) -> None:
    """A contribution or a reduced chunk (a checkpoint is never a piece)."""
    key = (p.step, p.round)
    w = node.work.get(key)
    if w is None:
        assert node.state is not None
        buffered = sum(len(v) for v in node.early.values())
        if node.state.step < p.step <= node.state.step + 2 and buffered < 256:
            node.early.setdefault(key, []).append((peer, p))
        return
    if peer not in w.roster.peers or not 0 <= p.chunk < w.n:
        node._reject(peer, "bad-frame", f"piece of step {p.step} from a non-roster peer")
        return
    try:
        values = codec.decode(p.data, w.chunk_blocks(p.chunk))
    except codec.CodecError as exc:
        node._reject(peer, "bad-frame", str(exc))
        return
    if p.kind is FrameKind.CONTRIBUTION:
        if p.chunk != w.rank:
            node._reject(peer, "bad-frame", f"contribution for chunk {p.chunk} sent to me")
            return
        w.contributions.setdefault(w.roster.rank(peer), values)
        try_reduce(node, w)
    else:
        if p.chunk not in w.reduced:
            w.reduced[p.chunk] = values
            w.reduced_payload[p.chunk] = p.data
        try_apply(node, w)


def try_reduce(node: Node, w: Work) -> None:
    if w.rank is None or w.rank in w.reduced or len(w.contributions) < w.n:
        return
    parts = [w.contributions[j] for j in range(w.n)]  # roster order: the pinned sum order
    payload, values = codec.encode(allreduce.reduce_chunk(parts))
    w.reduced[w.rank] = values
    w.reduced_payload[w.rank] = payload
    step, rnd = w.key
    fork_peer = None
    if node.faults.fork_reduced_at == step and w.n > 1:
        node.faults.fork_reduced_at = None
        fork_peer = next(p for p in w.roster.peers if p != node.id)
    for k, peer in enumerate(w.roster.peers):
        if k == w.rank:
            continue
        data = payload
        if peer == fork_peer:
            bad = bytearray(payload)
            bad[w.chunk_blocks(w.rank) + 7] ^= 0x01  # one value off by one step
            data = bytes(bad)
            log.warning("%s: FAULT: forked reduced chunk to %s", node.name, peer)
        w.bytes_sent += node._send_payload(peer, FrameKind.REDUCED, data, step, rnd, w.rank)
    try_apply(node, w)


def try_apply(node: Node, w: Work) -> None:
    state = node.state
    if w.applied or not w.computed or len(w.reduced) < w.n or state is None:
        return
    if state.step != w.roster.step - 1:
        return
    flat = np.empty(node.total_blocks * codec.BLOCK, dtype=np.float32)
    for k in range(w.n):
        flat[allreduce.chunk_slice(node.total_blocks, w.n, k)] = w.reduced[k]
    training.apply_grads(state, codec.unflatten(flat, node.shapes))
    w.applied = True
    node.my_hash = training.state_hash(state)
    assert node.config is not None
    step, rnd = w.key
    node.hashes.setdefault(w.key, {})[node.id] = node.my_hash
    node._broadcast(
        messages.StepHash(
            node.config.run, step, rnd, node.my_hash, w.loss, w.probe, node.compute.name
        )
    )
    start = w.exchange_start
    record = StepRecord(
        step=step, round=rnd, loss=w.loss, hash=node.my_hash, roster=w.roster.peers,
        tokens=state.cfg.tokens * w.n, compute_s=w.compute_s,
        exchange_s=time.perf_counter() - start, bytes_sent=w.bytes_sent,
        leader=node.leader or "", probe=w.probe, backend=node.compute.name,
    )  # fmt: skip
    node.records.append(record)
    if node.on_step is not None:
        node.on_step(record)
    guard.check_probe(node, node.id, step, w.probe, node.compute.name)
    guard.check_guard(node, w.key)
    checkpoints.maybe_save(node)
