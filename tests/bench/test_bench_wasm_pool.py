"""``daisychain bench wasm-pool --json`` end to end in a subprocess, at toy effort: the JSON shape.

One ``tiny`` step each way in headless Chromium on the real app: the page is cross-origin
isolated, the bench worker starts a pool of as many threads as Chromium reports cores (at most
8), both kernels pass the gate, and the step carries its times, tokens/s and ratio. No timing
thresholds: the machines are shared and noisy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench.rig.chromium import chromium_missing

ROOT = Path(__file__).resolve().parents[2]


def test_the_pool_bench_reports_both_sides_of_a_tiny_step() -> None:
    missing = chromium_missing()
    if missing is not None:
        pytest.skip(missing)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "bench", "wasm-pool", "--json", "--presets", "tiny",
         "--steps", "1"],
        capture_output=True, text=True, env=env, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    run = report["chromium"]
    assert run["isolated"] is True, run
    if run["cores"] < 2:
        assert run["skipped"].startswith("one thread"), run
        return
    assert run["threads"] == min(run["cores"], 8) and run["elementwise"] is True, run
    step = run["presets"]["tiny"]
    for key in ("one_median_ms", "pool_median_ms", "one_tokens_per_s", "pool_tokens_per_s"):
        assert isinstance(step[key], (int, float)) and step[key] > 0, (key, step)
    assert step["ratio"] > 0 and run["step_ratio_min"] == step["ratio"]
