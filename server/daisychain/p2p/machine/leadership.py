"""Who leads, what was committed, and what the leader has heard (docs/PROTOCOL.md, "Rosters"
and "Join, leave, failover").

The leader is a role: the peer that leads commits rosters; when it is gone every peer computes
the same successor from the last committed roster (``run.successor``), so no election is needed.
A roster from a peer that is not (yet) this peer's leader is held, and applied if the successor
rule later names its sender.
"""

from __future__ import annotations

import logging

from daisychain.p2p import run
from daisychain.p2p.machine.attempt import Key
from daisychain.p2p.run import CommittedRoster
from daisychain.wire import messages

log = logging.getLogger("daisychain.p2p.machine")


class Leadership:
    def __init__(self, me: str) -> None:
        self.me = me
        self.leader: str | None = None
        self.leads_own_run = False  # started with --lead (refuses any other config)
        self.min_peers = 1
        self.roster: CommittedRoster | None = None  # the last committed roster accepted
        self._held: dict[str, CommittedRoster] = {}
        # What the leader has heard (kept by every peer: a successor leads with it).
        self.ready: dict[str, messages.Ready] = {}
        self.sync_wanted: set[str] = set()
        self.missing_reports: dict[Key, set[str]] = {}
        # Seconds per sequence each peer last reported (ready, hash; ours from compute-done):
        # what the leader's shares are made of (p2p.shares.allot). 0: not measured.
        self.speeds: dict[str, float] = {}
        # Peers whose ready or sync-request said they train on private data: the run's record
        # of it (kept when a peer leaves: it trained on it while it was there).
        self.private_data: set[str] = set()
        self.end_requested = ""  # leader: end the run at the next boundary (the reason)

    @property
    def is_leader(self) -> bool:
        return self.leader is not None and self.leader == self.me

    def lead(self, min_peers: int) -> None:
        self.leader = self.me
        self.leads_own_run = True
        self.min_peers = min_peers

    def hold(self, sender: str, roster: CommittedRoster) -> None:
        log.info("%s: roster from %s held (leader is %s)", self.me, sender, self.leader)
        self._held[sender] = roster

    def fail_over(self, gone: set[str]) -> str | None:
        """The leader is gone: the successor of the last committed roster (None: nobody)."""
        assert self.roster is not None
        old, self.leader = self.leader, run.successor(self.roster.peers, gone)
        log.info("%s: leader %s gone; successor %s", self.me, old, self.leader)
        return self.leader

    def take_held(self) -> CommittedRoster | None:
        """The roster the new leader committed before this peer saw the old one go, if it is
        not older than the one this peer holds."""
        held = self._held.pop(self.leader, None) if self.leader is not None else None
        if held is not None and (self.roster is None or held.step >= self.roster.step):
            return held
        return None

    def forget(self, peer: str) -> None:
        self.ready.pop(peer, None)
        self.speeds.pop(peer, None)
        self.sync_wanted.discard(peer)

    def eligible(self, gone: set[str], step: int, digest: str) -> list[str]:
        """Peers whose ``ready`` state equals the leader's: they may enter the next roster."""
        return [
            p
            for p, rd in self.ready.items()
            if p not in gone and rd.step == step and rd.hash == digest
        ]
