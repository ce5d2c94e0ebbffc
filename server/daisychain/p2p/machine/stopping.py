"""How a run ends at this peer (docs/PROTOCOL.md, "Stopping").

A stop is final: the peer that stops announces it on every open channel, every receiver repeats
it (its acknowledgement), and a stopping peer keeps its channels until every peer it greeted has
acknowledged, at most ``linger_s``: no peer learns that another left before it learns that the
run is over. Here that is state, not a coroutine: the machine stays ``stopped``, counts the
acknowledgements as events arrive, and finishes when none is missing or the linger deadline
passes.
"""

from __future__ import annotations

import logging

from daisychain.p2p.machine.effects import Outcome
from daisychain.wire import messages

log = logging.getLogger("daisychain.p2p.machine")


class Stopped(Exception):
    """Raised inside the machine when the run ends; the machine turns it into stopping."""

    def __init__(self, outcome: Outcome, stop: messages.Stop | None = None) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome
        self.stop = stop


class Stopping:
    def __init__(self) -> None:
        self.outcome: Outcome | None = None
        self.stop: messages.Stop | None = None  # the stop this peer sent or received
        self.stop_from: set[str] = set()  # peers that announced the stop to this peer
        self.waiting: set[str] = set()
        self.linger_until = 0.0
        self.finished = False

    @property
    def stopped(self) -> bool:
        return self.outcome is not None

    def begin(self, outcome: Outcome, stop: messages.Stop | None, wait_for: set[str],
              until: float) -> None:  # fmt: skip
        self.outcome, self.stop = outcome, stop
        self.waiting = wait_for - self.stop_from if stop is not None else set()
        self.linger_until = until

    def acknowledged(self, peer: str) -> None:
        self.waiting.discard(peer)

    def done(self, now: float) -> bool:
        if self.finished:
            return False
        if self.waiting and now < self.linger_until:
            return False
        if self.waiting:
            log.warning("no stop acknowledgement from %s", sorted(self.waiting))
        self.finished = True
        return True
