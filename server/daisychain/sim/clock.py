"""The simulator's event queue: a min-heap of (time, sequence number, item).

The sequence number breaks ties in the order items were scheduled, so two runs from the same
seed pop the same items in the same order (a heap alone would compare the items).
"""

from __future__ import annotations

import heapq
from typing import Generic, TypeVar

T = TypeVar("T")


class EventQueue(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, T]] = []
        self._seq = 0
        self.now = 0.0

    def __len__(self) -> int:
        return len(self._heap)

    def at(self, when: float, item: T) -> None:
        """Schedule ``item`` at ``when`` (never before the current time: no event goes back)."""
        if when < self.now:
            raise ValueError(f"cannot schedule at {when:.6f} s, before now ({self.now:.6f} s)")
        heapq.heappush(self._heap, (when, self._seq, item))
        self._seq += 1

    def pop(self) -> tuple[float, T]:
        when, _seq, item = heapq.heappop(self._heap)
        self.now = when
        return when, item
