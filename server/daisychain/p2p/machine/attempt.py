"""One attempt ``(step, round)`` of the gradient exchange at this peer (today's ``Work``).

    computing --compute done--> exchanging --all reduced chunks in--> applied
    computing/exchanging --a later round of the step committed--> abandoned

The attempt holds the pieces of the exchange (docs/PROTOCOL.md, "Gradient chunks and the
exchange arithmetic"): the contributions to this peer's own chunk, the reduced chunks, and the
bytes it sent (served again on ``repair``). The arithmetic is the pure functions of
``allreduce`` and ``codec``, called here: they are exact integer and pinned float32 rules that
every implementation computes identically, so they are part of the machine's contract, not an
effect (docs/PROTOCOL.md says why).
"""

from __future__ import annotations

import logging
from enum import Enum

import numpy as np
import numpy.typing as npt

from daisychain.p2p import allreduce, codec
from daisychain.p2p.run import CommittedRoster

log = logging.getLogger("daisychain.p2p.machine")

FloatArray = npt.NDArray[np.float32]
Key = tuple[int, int]  # (step, round)


class AttemptPhase(Enum):
    COMPUTING = "computing"  # the Compute effect is out
    EXCHANGING = "exchanging"  # contributions sent; waiting for pieces
    APPLIED = "applied"
    ABANDONED = "abandoned"  # superseded by a later round: never applied (its pieces are
    # still served on request, to peers that have not seen the new roster yet)


_ALLOWED = {
    AttemptPhase.COMPUTING: (AttemptPhase.EXCHANGING, AttemptPhase.ABANDONED),
    AttemptPhase.EXCHANGING: (AttemptPhase.APPLIED, AttemptPhase.ABANDONED),
    AttemptPhase.APPLIED: (),
    AttemptPhase.ABANDONED: (),
}


class Attempt:
    def __init__(self, roster: CommittedRoster, rank: int, total_blocks: int, now: float) -> None:
        self.roster = roster
        self.rank = rank
        self.n = len(roster.peers)
        self.total_blocks = total_blocks
        self.phase = AttemptPhase.COMPUTING
        self.contributions: dict[int, FloatArray] = {}  # for my chunk: rank -> values
        self.reduced: dict[int, FloatArray] = {}  # chunk -> values
        self.reduced_payload: dict[int, bytes] = {}  # chunk -> bytes (served for repair)
        self.sent: tuple[bytes, ...] = ()  # chunk -> my contribution bytes (served for repair)
        self.loss = 0.0
        self.probe = ""
        self.repair_at = now
        self.deadline = now

    @property
    def key(self) -> Key:
        return (self.roster.step, self.roster.round)

    @property
    def computed(self) -> bool:
        return bool(self.sent)

    @property
    def live(self) -> bool:
        """Still working towards applying (not applied, not abandoned)."""
        return self.phase in (AttemptPhase.COMPUTING, AttemptPhase.EXCHANGING)

    @property
    def applied(self) -> bool:
        return self.phase is AttemptPhase.APPLIED

    def transition(self, new: AttemptPhase) -> None:
        old = self.phase
        assert new in _ALLOWED[old], f"attempt {self.key} is {old.value}: cannot become {new.value}"
        self.phase = new
        log.debug("attempt %s: %s -> %s", self.key, old.value, new.value)
        if not self.live:
            # A finished attempt takes no more pieces and serves repairs from the bytes
            # (``sent``, ``reduced_payload``): its float32 values (8 bytes a parameter, held for
            # HISTORY_STEPS steps) would be dead weight the memory cap does not count
            # (p2p.footprint). The keys stay: they say which pieces arrived.
            empty = np.zeros(0, dtype=np.float32)
            self.contributions = dict.fromkeys(self.contributions, empty)
            self.reduced = dict.fromkeys(self.reduced, empty)

    def chunk_blocks(self, k: int) -> int:
        first, end = allreduce.chunk_blocks(self.total_blocks, self.n, k)
        return end - first

    def computed_with(self, loss: float, payloads: tuple[bytes, ...], probe: str) -> None:
        """Our gradient is in: keep what we send, and our own chunk's contribution as the
        dequantized values of what we encoded (never the float gradient)."""
        self.transition(AttemptPhase.EXCHANGING)
        self.loss, self.sent, self.probe = loss, payloads, probe
        own = payloads[self.rank]
        self.contributions[self.rank] = codec.decode(own, self.chunk_blocks(self.rank))

    def reduce(self) -> bytes | None:
        """Our reduced chunk once every contribution is in (roster order: the pinned sum
        order); None before, or when already reduced."""
        if self.rank in self.reduced or len(self.contributions) < self.n:
            return None
        parts = [self.contributions[j] for j in range(self.n)]
        payload, values = codec.encode(allreduce.reduce_chunk(parts))
        self.reduced[self.rank] = values
        self.reduced_payload[self.rank] = payload
        return payload

    def complete(self) -> bool:
        return self.phase is AttemptPhase.EXCHANGING and len(self.reduced) == self.n

    def mean_gradient(self) -> FloatArray:
        flat = np.empty(self.total_blocks * codec.BLOCK, dtype=np.float32)
        for k in range(self.n):
            flat[allreduce.chunk_slice(self.total_blocks, self.n, k)] = self.reduced[k]
        return flat

    def missing_from(self) -> set[str]:
        """Roster peers whose pieces this peer still waits for."""
        out: set[str] = set()
        if self.applied:
            return out
        if self.rank not in self.reduced:
            out |= {p for j, p in enumerate(self.roster.peers) if j not in self.contributions}
        out |= {p for k, p in enumerate(self.roster.peers) if k not in self.reduced}
        return out - {self.roster.peers[self.rank]}
