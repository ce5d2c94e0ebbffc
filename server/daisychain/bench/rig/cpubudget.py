"""CPU budgets for child processes: a cgroup CPU quota, to emulate a slower device for real.

A benchmark that compares a fast and a slow device on one machine must hold each to its own
share of a core, by the kernel's scheduler, not by sleeps: a quota of 0.25 core lets the
process (and every thread and child it makes) run 25 ms of every 100 ms period. cgroup v1
(``/sys/fs/cgroup/cpu/NAME/cpu.cfs_quota_us``) and v2 (``/sys/fs/cgroup/NAME/cpu.max``) both
work; either needs root (or a delegated cgroup). ``unavailable()`` says why budgets cannot be
set here, for a benchmark to report instead of measuring something else.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


def _parent() -> Path:
    return ROOT if _v2() else ROOT / "cpu"


def unavailable() -> str | None:
    """Why no CPU budget can be set on this machine, or None when one can."""
    if os.name != "posix" or not ROOT.is_dir():
        return f"no cgroup file system at {ROOT} (CPU budgets need Linux cgroups)"
    parent = _parent()
    if not parent.is_dir():
        return f"no cgroup v1 cpu controller at {parent}"
    if _v2() and "cpu" not in (ROOT / "cgroup.controllers").read_text().split():
        return "the cgroup v2 root does not offer the cpu controller"
    if not os.access(parent, os.W_OK):
        return f"{parent} is not writable: run as root to hold each device to a CPU budget"
    return None


@dataclass
class CpuBudget:
    """One cgroup holding ``cores`` of CPU time (e.g. 0.25); ``enter`` moves the calling
    process into it (for ``subprocess.Popen(preexec_fn=budget.enter)``: the child is held from
    its first instruction, and everything it starts inherits the group)."""

    name: str
    cores: float

    def __post_init__(self) -> None:
        if not 0.01 <= self.cores <= 64:
            raise ValueError(f"a CPU budget of {self.cores} cores is outside 0.01 .. 64")
        self.path = _parent() / self.name
        self.path.mkdir(exist_ok=True)
        quota = round(self.cores * PERIOD_US)
        if _v2():
            (self.path / "cpu.max").write_text(f"{quota} {PERIOD_US}\n")
        else:
            (self.path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
            (self.path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        self._procs = self.path / "cgroup.procs"

    @property
    def enter(self) -> Callable[[], None]:
        procs = str(self._procs)

        def move_self() -> None:  # runs in the child between fork and exec
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return move_self

    def remove(self) -> None:
        """Remove the group (its processes must have exited); quiet if it is already gone."""
        with contextlib.suppress(OSError):
            self.path.rmdir()
