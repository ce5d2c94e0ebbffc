"""Token buckets: a burst allowance that refills at a steady rate.

Used per WebSocket connection (messages, and strikes for rejected messages) and per client
address (``KeyedLimiter``: hellos and join requests on ``/ws``, requests to ``/data``). Time
comes from a monotonic clock passed in, so tests can drive it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class TokenBucket:
    def __init__(
        self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        assert rate_per_s > 0 and burst >= 1, f"bad bucket rate={rate_per_s} burst={burst}"
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def take(self, cost: float = 1.0) -> bool:
        """Spend ``cost`` tokens if available; False means over the limit."""
        if self.available() >= cost:
            self._tokens -= cost
            return True
        return False

    def available(self) -> float:
        """Tokens there now (refilled up to this moment), without spending any."""
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate_per_s)
        self._last = now
        return self._tokens

    def retry_after_s(self, cost: float = 1.0) -> float:
        return max(0.0, (cost - self._tokens) / self.rate_per_s)


class KeyedLimiter:
    """One bucket per key (a client address), keeping at most ``max_keys`` most recent keys.

    Forgetting the least recently seen key hands that client a full bucket if it comes back:
    harmless, since only a client idle while ``max_keys`` others arrived is forgotten.
    """

    def __init__(
        self,
        rate_per_s: float,
        burst: float,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_keys = max_keys
        self._clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def take(self, key: str, cost: float = 1.0) -> bool:
        """Spend from ``key``'s bucket; False means that key is over the limit."""
        return self.bucket(key).take(cost)

    def __len__(self) -> int:
        return len(self._buckets)

    def bucket(self, key: str) -> TokenBucket:
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            bucket = TokenBucket(self.rate_per_s, self.burst, self._clock)
            if len(self._buckets) >= self.max_keys:
                self._buckets.popitem(last=False)  # forget the least recently seen client
        self._forget_full()
        self._buckets[key] = bucket
        return bucket

    def _forget_full(self, at_most: int = 2) -> None:
        """Drop the oldest buckets that have refilled completely: a full bucket is what a new
        one would be, so keeping its key (a client's network) would only keep an address in
        memory (docs/SERVER.md, "What the server keeps"). A few per call keeps it O(1)."""
        for _ in range(at_most):
            if not self._buckets:
                return
            oldest = next(iter(self._buckets.values()))
            if oldest.available() < self.burst:
                return
            self._buckets.popitem(last=False)
