"""How often the wgpu backend talks to its device: submits, dispatches, uploads, readbacks.

On a discrete GPU (and on lavapipe, whose "device" is other CPU threads) what a training step
pays beyond the arithmetic is the round trips: every blocking readback waits for the queue to
drain, and every submit is a trip through the driver. ``ROUND_TRIPS`` counts them for the whole
process, incremented where they happen (``pool.BufferPool.upload``/``read``,
``kernels.ComputeKernel.dispatch``/``dispatch_batch``), so ``daisychain bench kernels`` and the
tests can state how many a step makes. Counting is deterministic (no clock), so tests compare
counts exactly; one lock keeps the increments whole when a background thread also computes.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Counts:
    """A snapshot of ``RoundTrips`` (or the difference of two)."""

    submits: int = 0  # queue.submit calls of the kernels (command buffers handed to the device)
    dispatches: int = 0  # dispatch_workgroups calls recorded into those command buffers
    uploads: int = 0  # queue.write_buffer calls (asynchronous: they ride the next submit)
    readbacks: int = 0  # blocking reads of a result: each waits for the queue to drain
    bytes_up: int = 0
    bytes_down: int = 0

    def __sub__(self, other: Counts) -> Counts:
        mine, theirs = asdict(self), asdict(other)
        return Counts(**{k: mine[k] - theirs[k] for k in mine})

    def as_json(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class RoundTrips:
    """Process-wide counters of the device traffic (see the module docstring)."""

    _counts: dict[str, int] = field(default_factory=lambda: asdict(Counts()))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, **deltas: int) -> None:
        with self._lock:
            for key, value in deltas.items():
                if key not in self._counts:
                    raise KeyError(f"RoundTrips has no counter {key!r}: {sorted(self._counts)}")
                self._counts[key] += value

    def snapshot(self) -> Counts:
        with self._lock:
            return Counts(**self._counts)

    def reset(self) -> None:
        with self._lock:
            self._counts = asdict(Counts())


ROUND_TRIPS = RoundTrips()
