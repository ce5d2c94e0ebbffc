"""bench mesh's raw mesh between processes (bench/_raw_mesh.py) and its ``--processes`` list:
real aiortc channels between child processes on 127.0.0.2 (shape only; no timing asserted)."""

from __future__ import annotations

import argparse
import asyncio

import pytest

from daisychain.bench import mesh


def test_three_processes_each_send_their_part_and_receive_everyone_elses() -> None:
    out = asyncio.run(mesh.raw_mesh(3, None, 0.3, "127.0.0.2", timeout_s=120))
    assert out["processes"] == 3
    assert out["budget_skipped"] == "no budget asked for" and out["cores_each"] is None
    # 0.3 MB each, split over two channels: every process receives two halves of 0.3 MB.
    assert out["peer_bytes_received"] == [2 * (300_000 // 2)] * 3
    assert len(out["peer_goodput_mb_s"]) == 3 and min(out["peer_goodput_mb_s"]) > 0
    assert out["group_goodput_mb_s"] > 0


def test_a_mesh_of_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        asyncio.run(mesh.raw_mesh(1, None, 0.1, "127.0.0.2"))


def test_lane_batches_are_positive_integers_or_refused_with_a_hint() -> None:
    assert mesh.parse_lane_batches("8,64") == [8, 64]
    assert mesh.parse_lane_batches(" 4 , ") == [4]
    for bad in ("0", "8,x", ",", "-2"):
        with pytest.raises(SystemExit, match="hint: positive integers"):
            mesh.parse_lane_batches(bad)


def test_the_process_part_says_why_it_skipped_without_cgroups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As root on CI the budgets can be set; the refusal path is forced here, as a machine
    # without writable cgroups would give it (no peer process is started).
    from daisychain.bench.rig import cpubudget

    monkeypatch.setattr(cpubudget, "unavailable", lambda: "no cgroups here")
    args = argparse.Namespace(preset="tiny", process_cores=0.5, process_steps=1,
                              address="127.0.0.2")  # fmt: skip
    assert asyncio.run(mesh.in_processes(args, [1])) == {"skipped": "no cgroups here"}


def test_process_options_out_of_range_are_refused_before_any_work() -> None:
    parser = argparse.ArgumentParser()
    mesh.add_arguments(parser)
    for bad in (["--process-steps", "0"], ["--process-cores", "0"], ["--process-cores", "65"]):
        with pytest.raises(SystemExit, match="--process-steps must be at least 1"):
            mesh.measure(parser.parse_args(["--processes", "4", *bad]))
