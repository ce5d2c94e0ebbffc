"""The peer table: one entry per data channel this peer ever had, with an explicit state.

    open --hello--> greeted --leave/closed/peer-left/rejected--> gone
    open --closed/peer-left/rejected--> gone

``gone`` is final (docs/PROTOCOL.md, "Peer connections"). Whether the channel itself is still
open is tracked apart: a gone peer's channel can stay open (its `stop` may still arrive on it),
and a stopping peer repeats its `stop` on every open channel.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from daisychain.wire import frames

log = logging.getLogger("daisychain.p2p.machine")


class PeerState(Enum):
    OPEN = "open"  # channel open, no hello yet
    GREETED = "greeted"  # its hello was accepted
    GONE = "gone"


@dataclass
class PeerEntry:
    state: PeerState
    opened_at: float
    reassembler: frames.Reassembler
    greeted: bool = False  # it said hello at some point (stays true once gone)
    channel_open: bool = True


class PeerTable:
    def __init__(self, me: str, limit: frames.LimitFn) -> None:
        self.me = me
        self._limit = limit
        self._peers: dict[str, PeerEntry] = {}
        self._gone: set[str] = set()  # kept in step with the entries (read often)

    def get(self, peer: str) -> PeerEntry | None:
        return self._peers.get(peer)

    def state(self, peer: str) -> PeerState | None:
        entry = self._peers.get(peer)
        return entry.state if entry is not None else None

    def opened(self, peer: str, now: float) -> None:
        if peer in self._peers:
            return  # never re-admitted on the same connection
        self._peers[peer] = PeerEntry(PeerState.OPEN, now, frames.Reassembler(self._limit))

    def greet(self, peer: str) -> None:
        entry = self._peers[peer]
        entry.greeted = True
        self._set(peer, entry, PeerState.GREETED)

    def gone(self, peer: str) -> bool:
        """Mark ``peer`` gone; True when it was not gone before."""
        entry = self._peers.get(peer)
        if entry is None:
            entry = self._peers[peer] = PeerEntry(
                PeerState.GONE, 0.0, frames.Reassembler(self._limit), channel_open=False
            )
            self._gone.add(peer)
            log.info("%s: peer %s: -> gone", self.me, peer)
            return True
        if entry.state is PeerState.GONE:
            return False
        self._set(peer, entry, PeerState.GONE)
        return True

    def channel_closed(self, peer: str) -> None:
        entry = self._peers.get(peer)
        if entry is not None:
            entry.channel_open = False

    def _set(self, peer: str, entry: PeerEntry, new: PeerState) -> None:
        old = entry.state
        if old is new or old is PeerState.GONE:
            return
        entry.state = new
        if new is PeerState.GONE:
            self._gone.add(peer)
        log.info("%s: peer %s: %s -> %s", self.me, peer, old.value, new.value)

    def is_gone(self, peer: str) -> bool:
        return self.state(peer) is PeerState.GONE

    def was_greeted(self, peer: str) -> bool:
        entry = self._peers.get(peer)
        return entry is not None and entry.greeted

    @property
    def gone_set(self) -> set[str]:
        """Every gone peer (a live view: read it, never change it)."""
        return self._gone

    def live(self) -> list[str]:
        """Greeted peers that are not gone (sorted): who hears a broadcast."""
        return sorted(p for p, e in self._peers.items() if e.state is PeerState.GREETED)

    def live_open(self) -> list[str]:
        """Greeted, not gone, channel open: what a ``ready`` reports."""
        return [p for p in self.live() if self._peers[p].channel_open]

    def greeted_open(self) -> list[str]:
        """Every peer that said hello and whose channel is open, gone or not (a stop goes to
        all of them)."""
        return sorted(p for p, e in self._peers.items() if e.greeted and e.channel_open)

    def hello_overdue(self, now: float, timeout: float) -> list[str]:
        return sorted(
            p
            for p, e in self._peers.items()
            if e.state is PeerState.OPEN and now - e.opened_at >= timeout
        )

    def next_hello_deadline(self, timeout: float) -> float | None:
        waiting = [e.opened_at + timeout for e in self._peers.values() if e.state is PeerState.OPEN]
        return min(waiting) if waiting else None
