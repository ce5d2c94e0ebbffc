"""``daisychain bench scale`` (N headless peers in processes) and ``daisychain bench sim`` (the
protocol simulator), and the check that ties them: the simulator, calibrated from a real run,
sends exactly the messages and piece bytes the real peers sent, per peer and step.

The end-to-end run is N = 4 at `tiny` with few steps; the step-time ratio is printed, never
asserted (tests hold no timing thresholds: docs/BENCHMARKS.md has the measured ratios). Without
root the CPU budgets cannot be set; the bench then says why it skipped, and so does this test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from daisychain.bench import sim
from daisychain.bench.rig import cpubudget

ROOT = Path(__file__).resolve().parents[2]
NO_BUDGETS = cpubudget.unavailable()


def bench(*argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "server")}
    return subprocess.run(
        [sys.executable, "-m", "daisychain", "bench", *argv],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.mark.timeout(900)
@pytest.mark.skipif(NO_BUDGETS is not None, reason=f"no CPU budgets here: {NO_BUDGETS}")
def test_the_simulator_sends_what_four_real_peers_sent() -> None:
    proc = bench("scale", "--json", "--peers", "4", "--steps", "2", "--warmup", "1",
                 "--compare-sim", "--timeout-s", "400", timeout=880)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["tabs"].startswith("not yet")
    real = doc["runs"]["4"]
    assert "error" not in real, real
    assert real["replicas_identical"] is True
    assert real["connections_per_peer"]["min"] == 3
    assert real["peak_memory_bytes_per_peer"]["min"] > 0
    compare = real["sim_vs_real"]
    assert "error" not in compare, compare
    # Exact: the same machines hand out the same messages (p2p/traffic.py counts both).
    assert compare["traffic_equal"] is True
    for key in ("messages_per_peer_per_step", "piece_bytes_per_peer_per_step"):
        assert compare["summary"][key] == real[key], key
    assert compare["summary"]["replicas_identical"] is True
    print(f"\nN=4 step time, simulated over real: {compare['step_s_ratio']} "
          f"(calibrated at N={doc['sim_calibrated_at']['peers']})")  # fmt: skip


def test_bench_sim_prints_bench_scales_shape() -> None:
    proc = bench("sim", "--json", "--peers", "3,5", "--steps", "2", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout)["runs"]
    for n in (3, 5):
        run = runs[str(n)]
        assert run["replicas_identical"] is True and run["outcomes"] == ["done"]
        assert run["connections_per_peer"]["max"] == n - 1
        # A follower of a full mesh: n-1 contributions, reduced chunks and hashes a step.
        assert run["messages_per_peer_per_step"]["min"] == 3 * (n - 1)
    assert runs["3"]["channels_closed"] == 0
    keys = set(runs["3"]) - {"outcomes", "simulated_s", "events", "sim_wall_s", "channels_closed"}
    assert keys == {
        "peers", "steps_measured", "step_s", "compute_s", "exchange_s", "coordination_s",
        "messages_per_peer_per_step", "frames_per_peer_per_step",
        "piece_bytes_per_peer_per_step", "text_bytes_per_peer_per_step",
        "wire_bytes_per_peer_per_step", "leader", "connections_per_peer",
        "peak_memory_bytes_per_peer", "hello_to_first_contribution_s", "replicas_identical",
    }  # fmt: skip


def test_bench_sim_with_a_calibrated_device() -> None:
    args = argparse.Namespace(
        peers="2", preset="tiny", steps=1, warmup=1, mix="laptops", seq_s=0.05, fixed_s=0.0,
        up_mb_s=10.0, recv_s_per_mb=0.01, links="loopback", wire_ratio=0.9,
        shares_by="equal", seed=1, lift_roster_cap=False, verbose=False,
    )  # fmt: skip
    doc = sim.measure(args)
    assert doc["mix"] == "calibrated" and doc["links"]["wire_ratio"] == 0.9
    run = doc["runs"]["2"]
    # One step of 4 sequences each at 0.05 s a sequence.
    assert run["compute_s"]["mean"] == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("name", "argv", "hint"),
    [
        ("scale", ["--peers", "4,x"], "not comma-separated counts"),
        ("scale", ["--peers", "1"], "2 .. 64 processes"),
        ("scale", ["--peers", "128"], "daisychain bench sim --peers 256"),
        ("sim", ["--peers", "0"], "1 .. 65535"),
        ("sim", ["--mix", "no-such-mix"], "unknown device mix"),
        ("sim", ["--seq-s", "0"], "--seq-s must be > 0"),
        ("sim", ["--wire-ratio", "5"], "wire_ratio 5.0 not in"),
        ("sim", ["--steps", "0"], "must be at least 1"),
    ],
)
def test_bad_options_are_refused_with_a_hint(name: str, argv: list[str], hint: str) -> None:
    proc = bench(name, *argv, timeout=120)
    assert proc.returncode != 0
    assert hint in proc.stderr, proc.stderr[-2000:]
