"""``--backend``: a peer computing on a gated wgpu kernel trains bit-identically with a numpy
peer, and every step's kernel probe is published and checked."""

from __future__ import annotations

import asyncio

import pytest

from daisychain.gpu.backend import Backend, Demotion, NumpyGemm
from daisychain.gpu.gemm import Int8Array, Int32Array
from daisychain.gpu.probe import reference_step_probe
from daisychain.model.config import ModelConfig
from daisychain.model.ops import NUMPY_OPS
from daisychain.p2p.node import Compute
from daisychain.peer.backend import (
    BackendUnavailable,
    Candidate,
    StepTimer,
    choose,
    choose_fastest,
    gpu_compute,
    measure,
    step_timer,
)
from daisychain.peer.recheck import Check, Recheck, RecheckPolicy
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


def _no_cpu() -> tuple[list[Backend], list[Demotion]]:
    return [], []  # the CPU int8 GEMM (cpu/int8.py) has its own tests: tests/gpu/test_cpu_int8.py


def _timer(times: dict[str, float], asked: list[str]) -> StepTimer:
    """A step timer with given times, stopping (complete=False) past the limit like the real one."""

    def time_step(compute: Compute, limit_s: float) -> tuple[float, bool]:
        asked.append(compute.name)
        t = times[compute.name]
        return (t, True) if t <= limit_s else (limit_s, False)

    return time_step


def test_auto_takes_the_fastest_measured_backend_that_passes_its_gates() -> None:
    asked: list[str] = []
    slow = choose(
        "auto",
        gated_cpu=_no_cpu,
        gated=_gated,
        time_step=_timer({"numpy": 0.05, "wgpu-dp4a": 1.5}, asked),
    )
    assert slow.compute.name == "numpy", slow.reason
    assert slow.reason == (
        "numpy: 50.0 ms per step (best of 3), the fastest of the backends that pass their gates "
        "(wgpu-dp4a 1500 ms)"
    )
    assert asked == ["wgpu-dp4a", "numpy"] * 3  # preference order, one timing each per round
    fast = choose(
        "auto",
        gated_cpu=_no_cpu,
        gated=_gated,
        time_step=_timer({"numpy": 0.05, "wgpu-dp4a": 0.01}, []),
    )
    assert fast.compute.name == "wgpu-dp4a", fast.reason
    assert "(numpy >= 10.0 ms)" in fast.reason  # stopped once slower than the best
    assert fast.compute.probe() == reference_step_probe()


def test_auto_never_measures_nor_takes_a_kernel_that_failed_its_gates() -> None:
    asked: list[str] = []
    failed = Demotion("wgpu-dp4a", "wgpu-dp4a failed gate '1x1x1'")
    chosen = choose(
        "auto",
        gated_cpu=_no_cpu,
        gated=lambda: ([], [failed]),
        time_step=_timer({"numpy": 0.05, "wgpu-dp4a": 0.0}, asked),
    )
    assert chosen.compute.name == "numpy" and asked == ["numpy"] * 3
    assert chosen.reason.endswith("; failed their gates: wgpu-dp4a"), chosen.reason


def _busy_once(times: dict[str, float], busy: str, factor: float, asked: list[str]) -> StepTimer:
    """Like _timer, but ``busy``'s first timing runs ``factor`` times slower: the machine was
    loaded for a moment (two browsers starting beside the peer)."""
    seen: set[str] = set()

    def time_step(compute: Compute, limit_s: float) -> tuple[float, bool]:
        asked.append(compute.name)
        t = times[compute.name] * (factor if compute.name == busy and busy not in seen else 1)
        seen.add(compute.name)
        return (t, True) if t <= limit_s else (limit_s, False)

    return time_step


def test_a_moment_of_load_at_start_does_not_pick_the_backend_for_the_run() -> None:
    times = {"numpy": 0.056, "wgpu-dp4a": 0.5}  # lavapipe-like: passes its gates, 10x slower
    asked: list[str] = []
    chosen = choose(
        "auto", gated_cpu=_no_cpu, gated=_gated, time_step=_busy_once(times, "numpy", 12, asked)
    )
    assert chosen.compute.name == "numpy", chosen.reason
    assert "numpy: 56.0 ms per step (best of 3)" in chosen.reason
    assert [c.name for c in chosen.candidates] == ["wgpu-dp4a", "numpy"]
    # The planted bug: one measurement (the old rule) takes the emulated GPU for the whole run.
    once = choose(
        "auto",
        gated_cpu=_no_cpu,
        gated=_gated,
        time_step=_busy_once(times, "numpy", 12, []),
        rounds=1,
    )
    assert once.compute.name == "wgpu-dp4a", once.reason


def test_measure_keeps_each_candidates_fastest_complete_time() -> None:
    numpy, gpu = Compute(), Compute("wgpu-dp4a", NUMPY_OPS, reference_step_probe)
    times = iter([0.3, 0.2, 0.1, 0.25, 0.4, 0.09])  # numpy, gpu, numpy, gpu, numpy, gpu

    def time_step(compute: Compute, limit_s: float) -> tuple[float, bool]:
        t = next(times)
        return (t, True) if t <= limit_s else (limit_s, False)

    rows = measure([numpy, gpu], time_step, rounds=3)
    assert [(r.name, r.seconds, r.complete) for r in rows] == [
        ("numpy", 0.1, True),
        ("wgpu-dp4a", 0.09, True),  # stopped in round 2 (0.25 > 0.1), fastest in round 3
    ]
    always_slow = _timer({"numpy": 0.01, "wgpu-dp4a": 0.05}, [])
    rows = measure([numpy, gpu], always_slow, rounds=2)
    assert rows[1] == Candidate("wgpu-dp4a", True, None, 0.01, False)  # a lower bound
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        measure([numpy], always_slow, rounds=0)


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
    assert choose("auto", gated_cpu=_no_cpu, gated=lambda: ([], [no_gpu])).compute.name == "numpy"
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
    assert probes == {reference_step_probe()}


@needs_namespace
async def test_a_cpu_int8_peer_and_a_numpy_peer_stay_identical_with_equal_probes() -> None:
    """The CPU int8 GEMM (cpu/int8.py) in a real mesh: every product on the CPU's int8 units,
    audited, its probe published each step and accepted by a numpy leader."""
    pytest.importorskip("onnxruntime", reason="the CPU int8 GEMM needs onnxruntime (test extras)")
    try:
        chosen = await asyncio.to_thread(choose, "cpu-int8")
    except BackendUnavailable as exc:  # tests/gpu/test_cpu_int8.py shows the refusal is true
        pytest.skip(f"the CPU int8 GEMM is refused on this CPU: {exc.message}")
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=3, min_peers=2))
        cpu = await start_peer(url, "cpu", compute=chosen.compute)
        outcomes = await finish([leader, cpu], timeout=240)
    assert [o.reason for o in outcomes] == ["done", "done"], outcomes
    assert_identical([leader, cpu], range(1, 4))
    assert {r.backend for r in cpu.records} == {"cpu-int8"}
    assert {r.probe for p in (leader, cpu) for r in p.records} == {reference_step_probe()}


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


class _CountingKernel(NumpyGemm):
    """A stand-in for a gated GPU kernel (numpy's bits, counted): the switch must reach the
    products, not only the backend's name."""

    name = "wgpu-dp4a"
    products = 0

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        _CountingKernel.products += 1
        return super().matmul_int(a, b)


@needs_namespace
async def test_a_re_check_switches_the_backend_mid_run_and_the_replicas_stay_identical() -> None:
    """The machine's load moves between checks (a fake timer: numpy slow at the odd checks,
    the GPU slow at the even ones): the peer switches backend at every step, every product on
    the backend it switched to, and stays bit-identical to a numpy leader."""
    gpu = gpu_compute(Backend(_CountingKernel(), "test adapter"))
    checks: list[Check] = []

    def loaded(compute: Compute, limit_s: float) -> tuple[float, bool]:
        numpy_slow = len(checks) % 2 == 0
        t = 0.5 if (compute.name == "numpy") == numpy_slow else 0.05
        return (t, True) if t <= limit_s else (limit_s, False)

    models: list[ModelConfig] = []  # the models a check was asked to time

    def timer_for(cfg: ModelConfig) -> StepTimer:
        models.append(cfg)
        return loaded

    every_step = RecheckPolicy(rounds=1, min_interval_s=0, periodic_s=0)
    recheck = Recheck(
        [gpu, Compute()], loaded, every_step, on_check=checks.append, timer_for=timer_for
    )
    _CountingKernel.products = 0
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=4, min_peers=2))
        follower = await start_peer(url, "switcher", recheck=recheck)
        outcomes = await finish([leader, follower], timeout=120)
    assert [o.reason for o in outcomes] == ["done", "done"], outcomes
    assert_identical([leader, follower], range(1, 5))
    # The node told the re-check the run's model once it held the run's state (Recheck.use_model).
    state = follower.node.replica.state
    assert state is not None and models == [state.cfg], models
    assert (state.cfg.width, state.cfg.seq_len) == (64, 32)  # the run's tiny, not the default
    computed = [r for r in follower.records if r.share]
    assert [c.switched for c in checks] == [True] * len(checks) and len(checks) >= 2
    # Each step's hash names the backend chosen by the check before it.
    assert {r.backend for r in computed} == {"numpy", "wgpu-dp4a"}
    # More products than the kernel probes of its steps alone: its steps trained on it.
    on_gpu = sum(r.backend == "wgpu-dp4a" for r in follower.records)
    trained = _CountingKernel.products
    _CountingKernel.products = 0
    gpu.probe()
    assert trained > on_gpu * _CountingKernel.products, (trained, on_gpu)
    assert {r.probe for r in follower.records} == {reference_step_probe()}
