"""The backend re-check during a run (peer/recheck.py): when it measures, what it keeps, and
what it costs. A fake clock and timer stand in for time so the rules are exact; the mesh test
in test_p2p_backend.py switches a real run's backend with them."""

from __future__ import annotations

import pytest

from daisychain.gpu.probe import reference_step_probe
from daisychain.model.config import ModelConfig, preset
from daisychain.model.ops import NUMPY_OPS
from daisychain.p2p.node import Compute
from daisychain.peer.backend import StepTimer
from daisychain.peer.recheck import Check, Recheck, RecheckPolicy

NUMPY = Compute()
GPU = Compute("wgpu-dp4a", NUMPY_OPS, reference_step_probe)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timer(times: dict[str, float], clock: Clock, asked: list[str] | None = None) -> StepTimer:
    """Each timing advances the fake clock by the time it reports, as a real one would."""

    def time_step(compute: Compute, limit_s: float) -> tuple[float, bool]:
        if asked is not None:
            asked.append(compute.name)
        t = times[compute.name]
        spent = min(t, limit_s)
        clock.now += spent
        return (t, True) if t <= limit_s else (limit_s, False)

    return time_step


def recheck(times: dict[str, float], **policy: float) -> tuple[Recheck, Clock]:
    clock = Clock()
    r = Recheck([GPU, NUMPY], timer(times, clock), RecheckPolicy(**policy), clock)  # type: ignore[arg-type]
    return r, clock


def test_no_check_before_the_interval_then_a_slowdown_asks_for_one() -> None:
    r, clock = recheck({"numpy": 0.05, "wgpu-dp4a": 0.5}, min_interval_s=30, periodic_s=300)
    r.observe(0.010)
    r.observe(0.012)  # within the slowdown factor: not slowed
    clock.now = 31
    assert r.due() is None
    r.observe(0.016)  # 1.6x the best: slowed
    clock.now = 29
    assert r.due() is None  # slowed, but not before min_interval_s
    clock.now = 31
    assert r.due() == "slowdown"


def test_a_periodic_check_even_when_nothing_slowed() -> None:
    r, clock = recheck({"numpy": 0.05, "wgpu-dp4a": 0.5}, periodic_s=300)
    r.observe(0.01)
    clock.now = 299
    assert r.due() is None
    clock.now = 300
    assert r.due() == "periodic"


def test_checks_are_spaced_by_their_own_cost() -> None:
    # A check costs 2 x (5 + 5) s = 20 s; at max_overhead 0.05 the next waits 400 s, past the
    # 30 s interval and the 300 s period.
    r, clock = recheck({"numpy": 5.0, "wgpu-dp4a": 5.0}, max_overhead=0.05)
    check = r.run(NUMPY, "slowdown")
    assert check.cost_s == pytest.approx(20.0)
    start = clock.now
    r.observe(1.0)
    r.observe(2.0)  # slowed
    clock.now = start + 399
    assert r.due() is None
    clock.now = start + 400
    assert r.due() == "slowdown"
    # The cost at start counts the same way.
    at_start = Clock()
    costly = Recheck([GPU, NUMPY], timer({}, at_start), clock=at_start, start_cost_s=30)
    costly.observe(1.0)
    costly.observe(2.0)
    at_start.now = 599
    assert costly.due() is None
    at_start.now = 600
    assert costly.due() == "slowdown"


def test_one_candidate_is_never_checked() -> None:
    clock = Clock()
    r = Recheck([NUMPY], timer({"numpy": 0.05}, clock), clock=clock)
    r.observe(0.01)
    r.observe(1.0)
    clock.now = 10_000
    assert r.due() is None


def test_switches_to_a_backend_faster_by_the_margin_and_names_it() -> None:
    asked: list[str] = []
    clock = Clock()
    seen: list[Check] = []
    times = {"numpy": 0.60, "wgpu-dp4a": 0.05}  # numpy is now slow (the machine is busy)
    r = Recheck([GPU, NUMPY], timer(times, clock, asked), clock=clock, on_check=seen.append)
    check = r.run(NUMPY, "slowdown")
    assert asked == ["numpy", "wgpu-dp4a"] * 2  # the current backend first, two rounds
    assert check.switched and check.chosen == "wgpu-dp4a" and seen == [check]
    assert check.figures() == {"numpy": 0.60, "wgpu-dp4a": 0.05}
    assert check.reason() == (
        "switched numpy -> wgpu-dp4a after a slowdown check (numpy 600.0 ms, wgpu-dp4a 50.0 ms)"
    )
    assert r.compute(check.chosen) is GPU


def test_keeps_the_current_backend_unless_the_other_is_faster_by_the_margin() -> None:
    # 1.15x faster is within the 1.2 margin: keep, so two equal backends do not flap.
    r, _ = recheck({"numpy": 0.115, "wgpu-dp4a": 0.100})
    check = r.run(NUMPY, "periodic")
    assert not check.switched and check.chosen == "numpy"
    assert check.reason().startswith("kept numpy after a periodic check (numpy 115.0 ms, ")
    # The planted bug: margin 1 (switch on any gain) flips to the other backend.
    flappy, _ = recheck({"numpy": 0.115, "wgpu-dp4a": 0.100}, margin=1.0)
    assert flappy.run(NUMPY).switched
    # Stopped rows are shown as lower bounds and never win.
    slow, _ = recheck({"numpy": 0.05, "wgpu-dp4a": 0.5})
    kept = slow.run(NUMPY)
    assert not kept.switched and "wgpu-dp4a >= 50.0 ms" in kept.reason()


def test_a_check_clears_the_slowdown_and_a_switch_resets_the_baseline() -> None:
    r, clock = recheck({"numpy": 0.60, "wgpu-dp4a": 0.05})
    r.observe(0.01)
    r.observe(0.10)  # slowed on numpy
    clock.now = 100
    assert r.due() == "slowdown"
    assert r.run(NUMPY, "slowdown").switched
    clock.now += 100  # past the 30 s interval, short of the 300 s period
    assert r.due() is None  # the check cleared it
    # The new backend's first steps are 3x numpy's best: not a slowdown of the new backend.
    r.observe(0.03)
    r.observe(0.03)
    assert r.due() is None
    r.observe(0.05)  # 1.67x the new backend's best
    assert r.due() == "slowdown"


def test_bad_policies_are_refused() -> None:
    for bad in ({"rounds": 0}, {"max_overhead": 0}, {"slowdown": 1.0}, {"margin": 0.9}):
        with pytest.raises(ValueError):
            RecheckPolicy(**bad)  # type: ignore[arg-type]


def test_once_the_run_model_is_known_a_check_times_it() -> None:
    """The start timed ``tiny``, where numpy wins; on the run's model the GPU is 2x faster.
    After ``use_model`` the check times the run's model (one timer per model, made once) and
    switches; a recheck without a way to time other models keeps its fixed timer."""
    clock = Clock()
    small = preset("small")
    made: list[ModelConfig] = []

    def timer_for(cfg: ModelConfig) -> StepTimer:
        made.append(cfg)
        return timer({"numpy": 0.60, "wgpu-dp4a": 0.30}, clock)

    tiny_times = {"numpy": 0.05, "wgpu-dp4a": 0.08}
    r = Recheck([GPU, NUMPY], timer(tiny_times, clock), clock=clock, timer_for=timer_for)
    assert not r.run(NUMPY).switched  # tiny: numpy is faster
    r.use_model(small)
    r.use_model(small)
    assert made == [small] and r.model == small
    check = r.run(NUMPY)
    assert check.switched and check.figures() == {"numpy": 0.60, "wgpu-dp4a": 0.30}
    r.use_model(preset("tiny"))  # a new model: a new timer
    assert made == [small, preset("tiny")]
    fixed = Recheck([GPU, NUMPY], timer(tiny_times, clock), clock=clock)
    fixed.use_model(small)
    assert fixed.model is None and not fixed.run(NUMPY).switched
