"""``--backend``: a peer computing on a gated wgpu kernel trains bit-identically with a numpy
peer, and every step's kernel probe is published and checked."""

from __future__ import annotations

import asyncio

import pytest

from daisychain.gpu.backend import Backend, Demotion, NumpyGemm
from daisychain.gpu.probe import reference_probe_hash
from daisychain.model.ops import NUMPY_OPS
from daisychain.p2p.node import Compute
from daisychain.peer.backend import BackendUnavailable, choose
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


def _gpu() -> Backend:
    return Backend(_FakeKernel(), "test adapter")


def _no_gpu() -> Backend:
    return Backend(NumpyGemm(), "cpu", [Demotion("wgpu-dp4a", "no adapter")])


def test_auto_prefers_numpy_unless_the_kernel_is_measured_faster() -> None:
    speeds = {"numpy": 50.0, "wgpu-dp4a": 1.5}
    slow = choose("auto", _gpu, lambda g: speeds[g.name])
    assert slow.compute.name == "numpy" and "1.5 GOP/s" in slow.reason
    speeds["wgpu-dp4a"] = 500.0
    fast = choose("auto", _gpu, lambda g: speeds[g.name])
    assert fast.compute.name == "wgpu-dp4a" and "500.0 GOP/s > numpy" in fast.reason
    assert fast.compute.probe() == reference_probe_hash()


def test_wgpu_without_a_gated_kernel_fails_with_a_hint() -> None:
    with pytest.raises(BackendUnavailable) as info:
        choose("wgpu", _no_gpu)
    assert "no adapter" in info.value.message and "--backend auto or numpy" in info.value.hint
    assert choose("auto", _no_gpu).compute.name == "numpy"
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
