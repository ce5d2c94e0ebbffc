"""The sync guard's state (docs/PROTOCOL.md, "Sync guard"): every peer's published hash of
every recent attempt, and the reference kernel probe every device must publish."""

from __future__ import annotations

from dataclasses import dataclass, field

from daisychain.p2p import run
from daisychain.p2p.machine.attempt import Key


class Fork(Exception):
    """The guard fired: ``message`` and ``hashes`` go into ``stop fork``."""

    def __init__(self, message: str, hashes: dict[str, str]) -> None:
        super().__init__(message)
        self.message = message
        self.hashes = hashes


@dataclass
class Tally:
    """What the guard heard of one attempt, over a roster (``SyncGuard.tally``)."""

    step: int
    round: int
    hash: str  # ours
    same: list[str] = field(default_factory=list)  # ours included
    differ: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    by_peer: dict[str, str] = field(default_factory=dict)  # peer -> backend its hash named

    @property
    def backends(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for backend in self.by_peer.values():
            counts[backend] = counts.get(backend, 0) + 1
        return counts


class SyncGuard:
    def __init__(self, me: str, reference_probe: str) -> None:
        self.me = me
        self.reference_probe = reference_probe
        self._hashes: dict[Key, dict[str, str]] = {}
        self._backends: dict[Key, dict[str, str]] = {}  # for tally only

    def have(self, key: Key) -> dict[str, str]:
        return dict(self._hashes.get(key, {}))

    def check_probe(self, peer: str, step: int, probe: str, backend: str) -> None:
        """Every device's kernel probe equals the reference's: a device whose kernel computes
        other bits is named with its backend (its weights would fork next)."""
        if probe == self.reference_probe:
            return
        who = "this peer" if peer == self.me else "peer"
        raise Fork(
            f"kernel probe mismatch after step {step}: {who} {peer} (backend {backend}) "
            f"published {probe[:16]}..., every device must publish {self.reference_probe[:16]}"
            f"...; restart {peer} with --backend numpy",
            {peer: probe},
        )

    def record(self, peer: str, key: Key, digest: str, backend: str = "") -> None:
        """A hash of attempt ``key``, with the backend its ``hash`` message named (kept for
        ``tally`` only); raises ``Fork`` once ours is in and any differs."""
        self._hashes.setdefault(key, {})[peer] = digest
        self._backends.setdefault(key, {})[peer] = backend
        for old in [k for k in self._hashes if k[0] <= key[0] - run.HISTORY_STEPS]:
            del self._hashes[old]
            self._backends.pop(old, None)
        have = self._hashes.get(key, {})
        if self.me not in have:
            return
        report = run.sync_guard(key[0], have)
        if report is not None:
            raise Fork(report.describe(), report.hashes)

    def agreement(self, step: int) -> tuple[int, int]:
        """(peers whose hash of ``step`` equals ours, peers that reported one)."""
        for (s, _r), have in self._hashes.items():
            if s == step and self.me in have:
                mine = have[self.me]
                return sum(1 for h in have.values() if h == mine), len(have)
        return (0, 0)

    def tally(self, key: Key, roster: list[str]) -> Tally | None:
        """Read-only (a display's hash read-out, the twin of guard.js ``tally``): of ``roster``,
        whose hash of attempt ``key`` equals ours, differs or is not in yet, and the backend
        each published hash named. None while our own hash of it is not in."""
        have = self._hashes.get(key, {})
        if self.me not in have:
            return None
        out = Tally(key[0], key[1], have[self.me])
        backends = self._backends.get(key, {})
        for peer in roster:
            if peer not in have:
                out.missing.append(peer)
                continue
            (out.same if have[peer] == out.hash else out.differ).append(peer)
            out.by_peer[peer] = backends.get(peer) or "unknown"
        return out
