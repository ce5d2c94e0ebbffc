"""What a training peer is given: the run it leads, its timers, its compute and test faults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from daisychain.gpu.probe import reference_probe_hash
from daisychain.model.ops import NUMPY_OPS, GemmOps


@dataclass(frozen=True)
class LeadConfig:
    """What the leader broadcasts (``--preset/--steps/--lr/--seed/--batch``)."""

    preset: str = "tiny"
    steps: int = 30
    lr: float = 3e-3
    warmup: int = 0
    seed: int = 1
    batch: int | None = None
    seq_len: int | None = None
    min_peers: int = 1
    resume: str | None = None  # checkpoint file to restore the group from


@dataclass(frozen=True)
class Timers:
    """Protocol timers (shortened in tests)."""

    step_timeout_s: float = 60.0  # leader: a roster step not complete by then is re-decided
    repair_after_s: float = 10.0  # a piece still missing after this is requested again
    hello_timeout_s: float = 20.0  # a channel without a valid hello by then is closed
    # A stopping peer keeps its channels open until every peer acknowledged the stop (its own
    # `stop`, its channel closing, or the server's peer-left), at most this long.
    linger_s: float = 10.0


@dataclass(frozen=True)
class Compute:
    """Who computes this peer's products (``--backend``) and its per-step kernel probe."""

    name: str = "numpy"
    ops: GemmOps = NUMPY_OPS
    probe: Callable[[], str] = reference_probe_hash  # numpy peers publish the reference's


@dataclass
class Faults:
    """Test hooks that make this peer misbehave on purpose (never set by the CLI)."""

    # Flip one payload byte of the next contribution sent at this step, after the CRC: a frame
    # damaged in transit (the receiver must detect it and repair).
    damage_contribution_at: int | None = None
    # Send a reduced chunk with one value changed (valid CRC) to one peer only at this step:
    # a silent fork that only the sync guard can catch.
    fork_reduced_at: int | None = None
