"""Token buckets and the log throttle, driven by an injected clock (no sleeps)."""

from __future__ import annotations

import logging

import pytest

from daisychain.server.logs import Throttle
from daisychain.server.ratelimit import KeyedLimiter, TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_bucket_spends_its_burst_then_refuses() -> None:
    clock = Clock()
    bucket = TokenBucket(rate_per_s=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    assert bucket.retry_after_s() == pytest.approx(0.5)


def test_bucket_refills_at_its_rate_and_no_further_than_its_burst() -> None:
    clock = Clock()
    bucket = TokenBucket(rate_per_s=2.0, burst=3, clock=clock)
    for _ in range(3):
        assert bucket.take()
    clock.now += 0.49  # 0.98 of a token: still nothing
    assert not bucket.take()
    clock.now += 0.02  # now 1.02 tokens
    assert bucket.take()
    assert not bucket.take()
    clock.now += 3600.0  # an hour idle refills the burst, not 7200 tokens
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


def test_bucket_cost_and_a_refused_take_spends_nothing() -> None:
    clock = Clock()
    bucket = TokenBucket(rate_per_s=1.0, burst=5, clock=clock)
    assert bucket.take(cost=4)
    assert not bucket.take(cost=2)  # 1 left: refused, and the 1 is kept
    assert bucket.take(cost=1)


def test_keyed_limiter_keeps_one_bucket_per_key() -> None:
    clock = Clock()
    limiter = KeyedLimiter(rate_per_s=1.0, burst=2, clock=clock)
    assert [limiter.take("v4:11.0.0.1") for _ in range(3)] == [True, True, False]
    assert limiter.take("v4:11.0.0.2")  # another address has its own burst
    clock.now += 1.0
    assert limiter.take("v4:11.0.0.1") and not limiter.take("v4:11.0.0.1")


def test_keyed_limiter_forgets_only_the_least_recently_seen_key() -> None:
    clock = Clock()
    limiter = KeyedLimiter(rate_per_s=0.001, burst=1, max_keys=2, clock=clock)
    assert limiter.take("a") and limiter.take("b")
    assert not limiter.take("a")  # "a" is now the most recent; "b" the least
    assert limiter.take("c")  # evicts "b"
    assert not limiter.take("a")  # "a" was kept, still empty
    assert limiter.take("b")  # "b" was forgotten: a fresh bucket


def test_keyed_limiter_forgets_a_key_once_its_bucket_is_full_again() -> None:
    # a full bucket is what a new one would be: its key (a client's network) is not kept
    clock = Clock()
    limiter = KeyedLimiter(rate_per_s=1.0, burst=2, clock=clock)
    assert limiter.take("v4:11.0.0.1") and limiter.take("v4:11.0.0.2")
    clock.now += 0.5  # 1.5 tokens each: not full, both kept
    assert limiter.take("v4:11.0.0.3")
    assert len(limiter) == 3
    clock.now += 1.0  # .1 and .2 are full again (and the oldest): forgotten at the next call
    assert limiter.take("v4:11.0.0.4")
    assert len(limiter) == 2
    # a bucket in use is kept, so the limit still holds for its client
    assert limiter.take("v4:11.0.0.4") and not limiter.take("v4:11.0.0.4")
    assert len(limiter) <= 2


def test_throttle_lets_a_burst_through_then_counts(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    throttle = Throttle(burst=2, every_s=60.0, clock=clock)
    logger = logging.getLogger("test.throttle")
    caplog.set_level(logging.INFO, logger="test.throttle")
    for n in range(10):
        throttle.log(logger, logging.INFO, "bad input %d", n)
    assert [r.getMessage() for r in caplog.records] == ["bad input 0", "bad input 1"]
    assert throttle.suppressed == 8
    clock.now += 59.0
    throttle.log(logger, logging.INFO, "bad input %d", 10)
    assert len(caplog.records) == 2 and throttle.suppressed == 9
    clock.now += 1.0  # one line per minute after the burst, carrying the count
    throttle.log(logger, logging.INFO, "bad input %d", 11)
    assert caplog.records[-1].getMessage() == "bad input 11 (9 similar lines suppressed)"
    assert throttle.suppressed == 0
