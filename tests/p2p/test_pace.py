"""The pace a peer reports (p2p/pace.py): seconds per sequence of its whole step's work, its
exchange work included and its waiting not."""

from __future__ import annotations

import pytest

from daisychain.p2p import shares
from daisychain.p2p.pace import Pace


def test_the_first_step_reports_the_gradients_alone() -> None:
    pace = Pace()
    assert pace.computed((1, 0), 4, wall_s=2.0, cpu_s=2.0, cpu_now=10.0) == 0.5


def test_exchange_work_is_cpu_scaled_by_the_gradients_slowdown() -> None:
    """A quarter-core quota: the gradients took 4 s of wall time for 1 s of CPU, so each CPU
    second of the exchange cost 4 s of the step."""
    pace = Pace()
    pace.computed((1, 0), 8, wall_s=4.0, cpu_s=1.0, cpu_now=100.0)
    assert pace.applied((1, 0), cpu_now=100.5) == pytest.approx(2.0)
    assert pace.exchange_work_s == pytest.approx(2.0)
    # The next step's pace counts it: (4 s of gradients + 2 s of exchange) / 8, averaged with
    # the first step's 0.5 (newest weighted 1/2).
    assert pace.computed((2, 0), 8, 4.0, 1.0, 200.0) == pytest.approx((0.5 + 0.75) / 2)


def test_waiting_is_not_work() -> None:
    """The fast peer of a group waits for a slow one: wall seconds pass, its CPU does not."""
    pace = Pace()
    pace.computed((1, 0), 4, 1.0, 1.0, cpu_now=50.0)
    assert pace.applied((1, 0), cpu_now=50.0) == 0.0
    assert pace.computed((2, 0), 4, 1.0, 1.0, 60.0) == pytest.approx(0.25)


def test_more_cpu_than_wall_is_no_speed_up() -> None:
    """Several BLAS threads: more CPU seconds than wall seconds; the exchange runs on one."""
    pace = Pace()
    pace.computed((1, 0), 4, wall_s=1.0, cpu_s=2.0, cpu_now=0.0)
    assert pace.applied((1, 0), cpu_now=0.3) == pytest.approx(0.3)


def test_a_share_of_zero_keeps_the_last_pace() -> None:
    pace = Pace()
    pace.computed((1, 0), 4, 2.0, 2.0, 0.0)
    pace.applied((1, 0), 0.4)
    before = (pace.seq_s, pace.exchange_work_s)
    assert pace.computed((2, 0), 0, 0.01, 0.01, 1.0) == before[0]
    assert pace.applied((2, 0), 5.0) == 0.0, "a follower's exchange is not a contributor's"
    assert (pace.seq_s, pace.exchange_work_s) == before


def test_rounds_never_applied_are_forgotten() -> None:
    pace = Pace()
    pace.computed((3, 0), 4, 1.0, 1.0, 0.0)  # round 0 failed, round 1 was applied
    pace.computed((3, 1), 4, 1.0, 1.0, 1.0)
    assert pace.applied((3, 1), 1.5) == pytest.approx(0.5)
    assert pace.applied((3, 0), 9.0) == 0.0


def test_paces_with_exchange_work_settle_where_everyone_finishes_together() -> None:
    """The leader's proportional split of these paces, step after step, for a fast device
    (0.1 s a sequence, 0.7 s of exchange work) and a slow one (0.5 s, 2.8 s), G = 64: it
    settles where gradients plus exchange take about the same time on both (the slow device
    computes fewer sequences than its gradient speed alone would give it: 10.7 of 64)."""
    grad, work, g = (0.1, 0.5), (0.7, 2.8), 64
    pace = [Pace(), Pace()]
    split = shares.allot([0.0, 0.0], g)
    for step in range(1, 12):
        cpu = float(step * 100)
        for k in (0, 1):  # one full core: wall = CPU
            pace[k].computed((step, 0), split[k], grad[k] * split[k], grad[k] * split[k], cpu)
            pace[k].applied((step, 0), cpu + work[k])
        split = shares.allot([p.seq_s for p in pace], g)
    busy = [grad[k] * split[k] + work[k] for k in (0, 1)]
    assert split[1] < g * (1 / grad[1]) / (1 / grad[0] + 1 / grad[1]), split
    assert abs(busy[0] - busy[1]) <= grad[1] + 0.05, (split, busy)
