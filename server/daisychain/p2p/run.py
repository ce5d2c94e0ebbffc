"""The run: its phases, the committed rosters, leader succession and the sync guard.

Phases (docs/PROTOCOL.md, "Run lifecycle"), changed only by ``RunPhase.transition``:

    lobby --config--> configured --first roster--> training --stop/done/fork--> stopped
    lobby/configured --stop--> stopped

Everything here is pure and deterministic: every peer applying the same rules to the same
committed roster reaches the same answer, which is what makes failover need no election.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

log = logging.getLogger("daisychain.p2p.run")

HISTORY_STEPS = 8  # steps of gradient pieces every peer keeps for repair


class Phase(Enum):
    LOBBY = "lobby"
    CONFIGURED = "configured"
    TRAINING = "training"
    STOPPED = "stopped"


_ALLOWED: dict[Phase, tuple[Phase, ...]] = {
    Phase.LOBBY: (Phase.CONFIGURED, Phase.STOPPED),
    Phase.CONFIGURED: (Phase.TRAINING, Phase.STOPPED),
    Phase.TRAINING: (Phase.STOPPED,),
    Phase.STOPPED: (),
}


class InvalidStateError(RuntimeError):
    """An action that the current phase does not allow."""


class RunPhase:
    """The phase of one peer's view of the run; the one place it changes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.phase = Phase.LOBBY

    def transition(self, new: Phase, why: str) -> None:
        old = self.phase
        if new is old:
            return
        if new not in _ALLOWED[old]:
            raise InvalidStateError(f"run is {old.value}: cannot become {new.value} ({why})")
        self.phase = new
        log.info("%s: run %s -> %s (%s)", self.name, old.value, new.value, why)

    def require(self, *phases: Phase) -> None:
        if self.phase not in phases:
            wanted = "/".join(p.value for p in phases)
            raise InvalidStateError(f"run is {self.phase.value}, expected {wanted}")


@dataclass(frozen=True)
class CommittedRoster:
    step: int  # the step this roster computes (1-based)
    round: int  # attempt; a failed attempt is re-committed with round + 1
    peers: tuple[str, ...]  # roster order = rank order = summation order
    shares: tuple[int, ...]  # sequences each peer computes, summing to the global batch

    def rank(self, peer: str) -> int:
        return self.peers.index(peer)

    def share(self, peer: str) -> int:
        return self.shares[self.rank(peer)]


def make_roster(candidates: set[str] | list[str]) -> tuple[str, ...]:
    """Roster order is ascending peer id (ASCII): any peer can recompute it, and the successor
    rule below needs no extra message."""
    return tuple(sorted(set(candidates)))


def successor(roster: tuple[str, ...], gone: set[str]) -> str | None:
    """The leader after the current one vanished: the first (lowest id) peer of the last
    committed roster that is still present."""
    for peer in roster:
        if peer not in gone:
            return peer
    return None


@dataclass(frozen=True)
class ForkReport:
    step: int
    hashes: dict[str, str]

    def describe(self) -> str:
        groups: dict[str, list[str]] = {}
        for peer, digest in sorted(self.hashes.items()):
            groups.setdefault(digest, []).append(peer)
        parts = [f"{digest[:16]} on {', '.join(peers)}" for digest, peers in groups.items()]
        return f"replicas diverged after step {self.step}: " + "; ".join(parts)


def sync_guard(step: int, hashes: dict[str, str]) -> ForkReport | None:
    """None when every reported hash of ``step`` is the same, else the report naming them."""
    if len(set(hashes.values())) <= 1:
        return None
    return ForkReport(step, dict(hashes))
