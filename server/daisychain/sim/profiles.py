"""Device profiles: how long a device computes and how fast it sends (the simulator's model).

A device computes a sequence of a model with ``P`` parameters and ``T`` positions in
``6 * P * T / (gflops * 1e9)`` seconds (forward and backward: the usual 6 flops per parameter
per token), plus ``fixed_s`` per step (the kernel probe, reading the batch). ``calibrated``
builds a profile from a real run's measured compute seconds per sequence, which is how the
simulator is checked against ``daisychain bench scale`` (docs/BENCHMARKS.md).

``MIXES`` are named device mixes for the large-N figures: the shares are fractions of the
peers, assigned in a seeded order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    name: str
    gflops: float  # sustained training throughput of the contract's kernels
    up_bytes_s: float  # uplink: what this device sends shares it
    fixed_s: float = 0.0  # per step, whatever the share (probe, batch)
    # per step, before the compute starts (the shell's own work between steps: reading the
    # batch, starting the compute thread); counted as coordination, not compute
    overhead_s: float = 0.0
    recv_s_per_byte: float = 0.0  # the shell's CPU time to take in one received byte
    straggle: float = 0.0  # probability that a step's compute takes straggle_x as long
    straggle_x: float = 3.0

    def __post_init__(self) -> None:
        if not self.gflops > 0 or not self.up_bytes_s > 0:
            raise ValueError(f"device {self.name!r}: gflops and up_bytes_s must be > 0")
        if min(self.fixed_s, self.overhead_s, self.recv_s_per_byte) < 0 or not (
            0 <= self.straggle <= 1
        ):
            raise ValueError(
                f"device {self.name!r}: fixed_s, overhead_s and recv_s_per_byte must be >= 0 and "
                "straggle a probability in [0, 1]"
            )

    def seq_s(self, params: int, seq_len: int) -> float:
        """Seconds to compute one sequence of that model."""
        return 6.0 * params * seq_len / (self.gflops * 1e9)


def calibrated(
    name: str,
    seq_s: float,
    params: int,
    seq_len: int,
    *,
    up_bytes_s: float,
    fixed_s: float = 0.0,
    recv_s_per_byte: float = 0.0,
    overhead_s: float = 0.0,
) -> Device:
    """A device that computes one sequence of that model in ``seq_s`` seconds (measured)."""
    if not seq_s > 0:
        raise ValueError(f"a measured {seq_s} s per sequence cannot calibrate a device")
    gflops = 6.0 * params * seq_len / (seq_s * 1e9)
    return Device(name, gflops, up_bytes_s, fixed_s, overhead_s, recv_s_per_byte)


MB = 1e6
LAPTOP = Device("laptop", gflops=20.0, up_bytes_s=5 * MB, fixed_s=0.01)
PHONE = Device("phone", gflops=4.0, up_bytes_s=2 * MB, fixed_s=0.03, straggle=0.05)
DESKTOP = Device("desktop", gflops=80.0, up_bytes_s=12.5 * MB, fixed_s=0.005)

MIXES: dict[str, tuple[tuple[Device, float], ...]] = {
    "laptops": ((LAPTOP, 1.0),),
    "home": ((LAPTOP, 0.5), (PHONE, 0.3), (DESKTOP, 0.2)),
}


def assign(mix: str, n: int, seed: int) -> tuple[Device, ...]:
    """``n`` devices of the named mix, in a seeded order (peer 0 leads: the first drawn)."""
    if mix not in MIXES:
        raise ValueError(f"unknown device mix {mix!r}; choose one of: {', '.join(MIXES)}")
    devices: list[Device] = []
    parts = MIXES[mix]
    for k, (device, share) in enumerate(parts):
        count = n - len(devices) if k == len(parts) - 1 else round(share * n)
        devices += [device] * max(0, min(count, n - len(devices)))
    random.Random(seed).shuffle(devices)
    return tuple(devices)
