"""A follower's state sync (docs/PROTOCOL.md, "Join, leave, failover"): it asks the leader for
its state once it has channels to every roster peer (it enters the roster that follows the
checkpoint and must reach every member), then waits for the checkpoint frame."""

from __future__ import annotations

import logging
from enum import Enum

log = logging.getLogger("daisychain.p2p.machine")


class SyncState(Enum):
    IDLE = "idle"
    WANTED = "wanted"  # sync-request not sent yet: waiting for channels to the roster
    AWAITING = "awaiting"  # sync-request sent; a checkpoint frame is expected


class StateSync:
    def __init__(self) -> None:
        self.state = SyncState.IDLE

    @property
    def awaiting(self) -> bool:
        return self.state is SyncState.AWAITING

    def want(self) -> None:
        if self.state is SyncState.IDLE:
            self._set(SyncState.WANTED)

    def sent(self) -> None:
        self._set(SyncState.AWAITING)

    def done(self) -> None:
        self._set(SyncState.IDLE)

    def _set(self, new: SyncState) -> None:
        old, self.state = self.state, new
        if old is not new:
            log.debug("state sync %s -> %s", old.value, new.value)
