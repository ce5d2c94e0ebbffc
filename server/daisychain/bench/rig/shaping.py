"""A bandwidth-limited loopback for ``bench mesh --process-link RATE``.

Peers in processes of their own talk over loopback; on this machine that link is as fast as
the CPU, so nothing the exchange overlaps with compute can show. A home network is not: a
shared Wi-Fi medium carries every peer's frames at tens of Mbit/s. Inside the fresh network
namespace the bench runs in (``bench/rig/netns.py``, re-run under ``unshare -n``), the
namespace's own ``lo`` gets a token-bucket filter (``tc qdisc ... tbf``) for the part that
measures, and loses it after: every peer's frames share that one limit, as on one radio. The
host's loopback is never touched (shaping refuses to run outside the namespace).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Iterator

from daisychain.bench.rig import netns

_RATE = re.compile(r"^[1-9][0-9]{0,5}(kbit|mbit|gbit)$")
# The bucket holds 64 KiB (enough for a rate up to ~500 Mbit/s at the kernel's tick) and
# queues at most 200 ms of traffic; past that the link drops, as a congested one does.
_TBF = ("burst", "64kb", "latency", "200ms")


def parse_rate(spec: str) -> str:
    """``--process-link``: a rate as tc writes it (``40mbit``), else SystemExit with a hint."""
    rate = spec.strip().lower()
    if not _RATE.match(rate):
        raise SystemExit(
            f"daisychain bench mesh: --process-link {spec!r} is not a rate; write it as tc "
            "does, e.g. 40mbit, 500kbit or 1gbit"
        )
    return rate


def unavailable() -> str | None:
    """None when this process can shape a namespace's loopback, else why not."""
    if os.environ.get(netns.INSIDE) == "1":
        return None if shutil.which("tc") else "the shaped link needs `tc` (iproute2)"
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the shaped link needs root to create a network namespace (run as root)"
    for tool in ("unshare", "ip", "tc"):
        if shutil.which(tool) is None:
            return f"the shaped link needs `{tool}` (util-linux, iproute2)"
    return None


def _tc(*args: str) -> None:
    done = subprocess.run(["tc", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"`tc {' '.join(args)}` failed: {done.stderr.strip()}")


@contextlib.contextmanager
def shaped_loopback(rate: str) -> Iterator[None]:
    """The namespace's ``lo`` limited to ``rate`` while the block runs."""
    if os.environ.get(netns.INSIDE) != "1":
        raise RuntimeError("refusing to shape a loopback outside this run's own namespace")
    _tc("qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate, *_TBF)
    try:
        yield
    finally:
        _tc("qdisc", "del", "dev", "lo", "root")
