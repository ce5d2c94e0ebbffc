"""What a training peer is given: the run it leads and its compute (its protocol timers are
``machine.settings.Timers``, re-exported here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from daisychain.gpu.probe import reference_step_probe
from daisychain.model.ops import NUMPY_OPS, GemmOps
from daisychain.p2p.machine.settings import Timers
from daisychain.wire.messages import SYNC_OUTER, OuterSpec, SharesBy

__all__ = ["Compute", "LeadConfig", "Timers"]


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
    # A custom model size: any of these replaces the preset's (the config then names no preset;
    # every peer checks the architecture and its memory estimate, runconfig.parse)
    width: int | None = None
    layers: int | None = None
    heads: int | None = None
    min_peers: int = 1
    # Sequences per step, shared out by capacity (config.global_batch); None: the batch per
    # device times min_peers (what min_peers equal devices computed in protocol version 1).
    global_batch: int | None = None
    # config.shares_by: "speed" (faster peers compute more) or "equal" (reproducible hashes)
    shares_by: SharesBy = "speed"
    resume: str | None = None  # checkpoint file to restore the group from
    # config.data: "builtin", or "fineweb@REV" (FineWeb-Edu at the server's revision REV)
    data: str = "builtin"
    # config.sync: "step" (per-step exchange) or "outer" (DiLoCo-style rounds of outer_steps
    # inner steps, then the outer Nesterov step; docs/PROTOCOL.md, "Outer runs"). In an outer
    # run ``steps`` counts outer rounds.
    sync: str = "step"
    outer_steps: int = 10
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    outer_overlap: float = 0.0  # config.outer.overlap (docs/OUTER.md, "Overlap")
    outer_cut: str = "share"  # config.outer.cut (docs/PROTOCOL.md, "A round at a peer")

    @property
    def outer_spec(self) -> OuterSpec | None:
        """config.outer of this lead (None for a per-step run)."""
        if self.sync != SYNC_OUTER:
            return None
        return OuterSpec(
            self.outer_steps, self.outer_lr, self.outer_momentum, self.outer_overlap, self.outer_cut
        )

    @property
    def custom_model(self) -> bool:
        """The architecture is not the preset's (width, layers or heads given)."""
        return any(v is not None for v in (self.width, self.layers, self.heads))


@dataclass(frozen=True)
class Compute:
    """Who computes this peer's products (``--backend``) and its per-step kernel probe."""

    name: str = "numpy"
    ops: GemmOps = NUMPY_OPS
    probe: Callable[[], str] = reference_step_probe  # numpy peers publish the reference's
