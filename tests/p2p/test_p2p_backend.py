"""``--backend``: a peer computing on a gated wgpu kernel trains bit-identically with a numpy
peer, and every step's kernel probe is published and checked."""

from __future__ import annotations

import asyncio

import pytest

from daisychain.gpu.backend import Backend, Demotion, NumpyGemm
from daisychain.gpu.probe import reference_probe_hash
from daisychain.model.ops import NUMPY_OPS
from daisychain.p2p.node import Compute
from daisychain.peer.backend import (
    BackendUnavailable,
    Candidate,
    StepTimer,
    choose,
    choose_fastest,
    step_timer,
)
from mesh_helpers import (
    assert_identical,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
)


class _FakeKernel(NumpyGemm):
    name = "wgpu-dp4a"


def _no_gpu() -> Backend:
    return Backend(NumpyGemm(), "cpu", [Demotion("wgpu-dp4a", "no adapter")])


def _gated() -> tuple[list[Backend], list[Demotion]]:
    return [Backend(_FakeKernel(), "test adapter")], []


def _timer(times: dict[str, float], asked: list[str]) -> StepTimer:
    """A step timer with given times, stopping (complete=False) past the limit like the real one."""

    def time_step(compute: Compute, limit_s: float) -> tuple[float, bool]:
        asked.append(compute.name)
        t = times[compute.name]
        return (t, True) if t <= limit_s else (limit_s, False)

    return time_step


def test_auto_takes_the_fastest_measured_backend_that_passes_its_gates() -> None:
    asked: list[str] = []
    slow = choose("auto", gated=_gated, time_step=_timer({"numpy": 0.05, "wgpu-dp4a": 1.5}, asked))
    assert slow.compute.name == "numpy", slow.reason
    assert slow.reason == (
        "numpy: 50.0 ms per step, the fastest of the backends that pass their gates "
        "(wgpu-dp4a 1500 ms)"
    )
    assert asked == ["wgpu-dp4a", "numpy"]  # preference order
    fast = choose("auto", gated=_gated, time_step=_timer({"numpy": 0.05, "wgpu-dp4a": 0.01}, []))
    assert fast.compute.name == "wgpu-dp4a", fast.reason
    assert "(numpy >= 10.0 ms)" in fast.reason  # stopped once slower than the best
    assert fast.compute.probe() == reference_probe_hash()


def test_auto_never_measures_nor_takes_a_kernel_that_failed_its_gates() -> None:
    asked: list[str] = []
    failed = Demotion("wgpu-dp4a", "wgpu-dp4a failed gate '1x1x1'")
    chosen = choose(
        "auto",
        gated=lambda: ([], [failed]),
        time_step=_timer({"numpy": 0.05, "wgpu-dp4a": 0.0}, asked),
    )
    assert chosen.compute.name == "numpy" and asked == ["numpy"]
    assert chosen.reason.endswith("; failed their gates: wgpu-dp4a"), chosen.reason


def test_the_rule_on_given_rows() -> None:
    rows = [
        Candidate("wgpu-dp4a", False, "failed gate", 0.001),
        Candidate("wgpu-lut", True, None, 0.2),
        Candidate("numpy", True, None, 0.2),
    ]
    assert choose_fastest(rows)[0] == "wgpu-lut"  # tie: the earlier; a failed row never wins
    with pytest.raises(ValueError, match="cutoff must only stop the slower"):
        choose_fastest(
            [Candidate("wgpu-lut", True, None, 0.1, False), Candidate("numpy", True, None, 0.2)]
        )
    with pytest.raises(ValueError, match="no backend passes its gates"):
        choose_fastest([Candidate("wgpu-lut", False, "probe")])
    name, reason = choose_fastest(
        [Candidate("wgpu-lut", True), Candidate("numpy", True, None, 0.1)]
    )
    assert name == "wgpu-lut" and "preference order" in reason  # not every usable row measured


def test_the_real_step_timer_measures_and_stops_a_step() -> None:
    time_step = step_timer()
    seconds, complete = time_step(Compute(), float("inf"))
    assert complete and seconds > 0
    seconds, complete = time_step(Compute(), 0.0)  # past the limit at the first product
    assert not complete and seconds < 1.0


def test_wgpu_without_a_gated_kernel_fails_with_a_hint() -> None:
    with pytest.raises(BackendUnavailable) as info:
        choose("wgpu", _no_gpu)
    assert "no adapter" in info.value.message and "--backend auto or numpy" in info.value.hint
    no_gpu = Demotion("wgpu-dp4a", "no adapter")
    assert choose("auto", gated=lambda: ([], [no_gpu])).compute.name == "numpy"
    assert choose("numpy", _no_gpu).compute.name == "numpy"


@needs_namespace
async def test_a_wgpu_peer_and_a_numpy_peer_stay_identical_with_equal_probes() -> None:
    try:
        chosen = await asyncio.to_thread(choose, "wgpu")
    except BackendUnavailable as exc:
        pytest.skip(f"no gated wgpu kernel here: {exc.message}")
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=3, min_peers=2))
        gpu = await start_peer(url, "gpu", compute=chosen.compute)
        outcomes = await finish([leader, gpu], timeout=240)
    assert [o.reason for o in outcomes] == ["done", "done"], outcomes
    assert_identical([leader, gpu], range(1, 4))
    assert {r.backend for r in gpu.records} == {chosen.compute.name} != {"numpy"}
    assert {r.backend for r in leader.records} == {"numpy"}
    probes = {r.probe for p in (leader, gpu) for r in p.records}
    assert probes == {reference_probe_hash()}


@needs_namespace
async def test_a_probe_mismatch_stops_the_run_naming_the_peer_and_its_backend() -> None:
    drifted = Compute("wgpu-drifted", NUMPY_OPS, lambda: "0" * 64)
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=5, min_peers=2))
        bad = await start_peer(url, "bad", compute=drifted)
        outcomes = await finish([leader, bad], timeout=120)
    assert [o.reason for o in outcomes] == ["fork", "fork"], outcomes
    report = outcomes[0].message
    assert "kernel probe mismatch after step 1" in report, report
    assert bad.node.id in report and "wgpu-drifted" in report
