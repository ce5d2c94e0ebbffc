"""Pace: this peer's seconds per sequence, the number the leader shares a step's sequences by.

A step costs a peer its gradients (seconds that grow with its share) and its own part of the
exchange and the apply (decode, reduce, quantize, the data channel, the optimizer, the hash:
seconds that do not). If the leader shared by the gradients alone, a slow device would finish
its gradients with the others and then still spend seconds of its small CPU on the exchange
while the fast ones wait (measured on a quarter core: 2.8 s a step on ``small``). So the pace
reported (``ready.seq_s``, ``hash.seq_s``) is the whole step's work per sequence computed:
``(gradient seconds + exchange work) / share``. The leader's proportional split of these paces
settles where every contributor's gradients plus its exchange take the same time (the split
that makes ``share * gradient_per_seq + exchange`` equal), a few steps after a change.

Exchange *work*, not exchange wall time: a fast peer's exchange wall time is mostly waiting for a
slow one, and counting waiting would hand the fast one less work, which makes it wait more. Work
is the process's CPU seconds from the gradients' end to the step's apply, scaled by how much
slower than its CPU time the gradients ran in wall time (``max(1, wall / cpu)``): a process held
to a quarter of a core by a quota gets a quarter of each wall second for the exchange too.
Both averages are exponential, the newest step weighted 1/2; a step with a share of 0 (the peer
followed) changes neither, so the leader keeps its last pace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Key = tuple[int, int]  # (step, round)


@dataclass
class Pace:
    seq_s: float = 0.0  # seconds per sequence, exchange work included; 0: never measured
    exchange_work_s: float = 0.0  # the exchange's work per step (wall-equivalent seconds)
    _slowdown: dict[Key, float] = field(default_factory=dict)  # wall / CPU of the gradients
    _cpu_at: dict[Key, float] = field(default_factory=dict)  # process CPU when they ended

    def computed(self, key: Key, count: int, wall_s: float, cpu_s: float, cpu_now: float) -> float:
        """The gradients of ``count`` sequences took ``wall_s`` (``cpu_s`` of process CPU);
        returns the pace to report with them."""
        if count > 0:
            self._slowdown[key] = max(1.0, wall_s / cpu_s) if cpu_s > 0 else 1.0
            self._cpu_at[key] = cpu_now
            newest = (wall_s + self.exchange_work_s) / count
            self.seq_s = newest if self.seq_s == 0 else (self.seq_s + newest) / 2
        return self.seq_s

    def applied(self, key: Key, cpu_now: float) -> float:
        """The attempt ``key`` was applied; returns its exchange work (0 when it computed
        nothing, or was not computed here)."""
        start = self._cpu_at.pop(key, None)
        slowdown = self._slowdown.pop(key, 1.0)
        for stale in [k for k in self._cpu_at if k[0] <= key[0]]:  # rounds never applied
            del self._cpu_at[stale], self._slowdown[stale]
        if start is None:
            return 0.0
        work = max(0.0, cpu_now - start) * slowdown
        self.exchange_work_s = (
            work if self.exchange_work_s == 0 else (self.exchange_work_s + work) / 2
        )
        return work
