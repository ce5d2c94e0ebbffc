"""``daisychain demo``: the first thing a new user runs, end to end in a subprocess.

A real server and three real aiortc peers on this machine's loopback (the demo offers 127.0.0.2
as the ICE host candidate, so it needs no namespace), a few tiny steps, then the loss curve and
the replica verdict.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_trains_three_identical_replicas() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "demo", "--steps", "3"],
        capture_output=True, text=True, env=env, timeout=280, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "replicas identical: yes" in proc.stdout
    steps = [line for line in proc.stdout.splitlines() if line[:4].strip().isdigit()]
    assert len(steps) == 3, proc.stdout
