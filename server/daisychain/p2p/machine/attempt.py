"""One attempt ``(step, round)`` of the gradient exchange at this peer.

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

from daisychain.outer.mean import weighted_mean
from daisychain.p2p import allreduce
from daisychain.p2p.run import CommittedRoster
from daisychain.wire import codec

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
    def __init__(
        self, roster: CommittedRoster, rank: int, total_blocks: int, now: float, outer: bool = False
    ) -> None:
        self.roster = roster
        # An outer run's round (docs/PROTOCOL.md, "Outer runs"): the contributions are
        # pseudo-gradients and the chunk's mean is outer.mean's token-weighted mean.
        self.outer = outer
        self.rank = rank
        self.n = len(roster.peers)
        self.total_blocks = total_blocks
        # Shares (protocol v2): who contributes, and which chunks are not empty.
        self.shares = roster.shares
        self.global_batch = sum(roster.shares)
        self.contributors = tuple(j for j in range(self.n) if roster.shares[j] > 0)
        self.chunks = tuple(k for k in range(self.n) if self.chunk_blocks(k) > 0)
        self.phase = AttemptPhase.COMPUTING
        self.contributions: dict[int, FloatArray] = {}  # for my chunk: rank -> values
        self.reduced: dict[int, FloatArray] = {}  # chunk -> values
        self.reduced_payload: dict[int, bytes] = {}  # chunk -> bytes (served for repair)
        self.sent: tuple[bytes, ...] = ()  # chunk -> my contribution bytes (served for repair)
        self.early: dict[int, bytes] = {}  # chunk -> bytes sent before the compute was done
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
        first, end = allreduce.chunk_blocks(self.total_blocks, self.shares, k)
        return end - first

    @property
    def contributes(self) -> bool:
        """This peer computes a gradient (its share is not 0)."""
        return self.shares[self.rank] > 0

    @property
    def owns_chunk(self) -> bool:
        """This peer reduces a chunk (its chunk is not empty)."""
        return self.rank in self.chunks

    def sent_early(self, chunk: int, payload: bytes) -> None:
        """Chunk ``chunk`` of our gradient is final while the rest is still being computed;
        our own chunk's contribution is its dequantized bytes, as in ``computed_with``."""
        self.early[chunk] = payload
        if chunk == self.rank:
            self.contributions[self.rank] = codec.decode(payload, self.chunk_blocks(self.rank))

    def sent_piece(self, chunk: int) -> bytes | None:
        """Our contribution to ``chunk``, once it left (None before, or when we made none)."""
        if not self.contributes or chunk not in self.chunks:
            return None
        if self.computed:
            return self.sent[chunk] if chunk < len(self.sent) else None
        return self.early.get(chunk)

    def computed_with(self, loss: float, payloads: tuple[bytes, ...], probe: str) -> None:
        """Our gradient is in (or, with a share of 0, only the probe): keep what we send, and
        our own chunk's contribution as the dequantized values of what we encoded (never the
        float gradient)."""
        self.transition(AttemptPhase.EXCHANGING)
        self.loss, self.sent, self.probe = loss, payloads, probe
        if self.contributes and self.owns_chunk and self.rank not in self.early:
            own = payloads[self.rank]
            self.contributions[self.rank] = codec.decode(own, self.chunk_blocks(self.rank))

    def reduce(self) -> bytes | None:
        """Our reduced chunk once every contributor's part is in (roster order: the pinned sum
        order, each weighted by its share); None before, when already reduced, or when our
        chunk is empty."""
        if not self.owns_chunk or self.rank in self.reduced:
            return None
        if any(j not in self.contributions for j in self.contributors):
            return None
        parts = [self.contributions[j] for j in self.contributors]
        weights = [self.shares[j] for j in self.contributors]
        if self.outer:
            # Shares are sequences of every inner step, so weighting by shares is weighting by
            # tokens; outer.mean divides them by their gcd first (docs/OUTER.md, "The mean"),
            # which the per-step rule does not (its bits stay what they were).
            reduced = weighted_mean(parts, weights)
        else:
            reduced = allreduce.reduce_chunk(parts, weights, self.global_batch)
        payload, values = codec.encode(reduced)
        self.reduced[self.rank] = values
        self.reduced_payload[self.rank] = payload
        return payload

    def complete(self) -> bool:
        return self.phase is AttemptPhase.EXCHANGING and all(k in self.reduced for k in self.chunks)

    def mean_gradient(self) -> FloatArray:
        flat = np.empty(self.total_blocks * codec.BLOCK, dtype=np.float32)
        for k in self.chunks:
            flat[allreduce.chunk_slice(self.total_blocks, self.shares, k)] = self.reduced[k]
        return flat

    def missing_from(self) -> set[str]:
        """Roster peers whose pieces this peer still waits for."""
        out: set[str] = set()
        if self.applied:
            return out
        peers = self.roster.peers
        if self.owns_chunk and self.rank not in self.reduced:
            out |= {peers[j] for j in self.contributors if j not in self.contributions}
        out |= {peers[k] for k in self.chunks if k not in self.reduced}
        return out - {peers[self.rank]}
