"""The replica as the protocol machine sees it: a state with a step and a hash.

The machine never touches weights. It asks its replica to start from a config, to restore a
checkpoint it received, to encode one it serves, and to apply the mean gradient it assembled
(these run synchronously: they are deterministic and bounded). The shell's replica is the model
(``p2p.modelreplica.ModelReplica``); conformance traces use a replica defined by a few lines of
hashing (tests/protocol_traces/trace_replica.py) that any implementation can rebuild.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from daisychain.model.config import ModelConfig
from daisychain.optim import AdamWConfig
from daisychain.outer.nesterov import OuterConfig


class ReplicaRefused(ValueError):
    """A checkpoint the replica cannot restore (its message says why)."""


class Replica(Protocol):
    @property
    def step(self) -> int: ...

    @property
    def hash(self) -> str: ...

    def set_outer(self, cfg: OuterConfig | None) -> None:
        """The run's outer loop (docs/PROTOCOL.md, "Outer runs"; None: a per-step run), told
        before ``start`` or ``restore``: then ``step`` counts outer steps, ``apply`` takes the
        mean pseudo-gradient and ``hash``/``checkpoint`` cover the outer state."""

    def start(self, model: ModelConfig, optim: AdamWConfig, seed: int) -> None:
        """A fresh state (step 0) from the run's config."""

    def restore(self, blob: bytes, source: str) -> None:
        """Replace the state by a checkpoint; raises ``ReplicaRefused``."""

    def checkpoint(self) -> bytes:
        """The state as checkpoint bytes (``daisychain.checkpoint.encode``)."""

    def apply(self, flat: npt.NDArray[np.float32]) -> None:
        """Apply the flat mean gradient (every parameter, parameter order, block padded)."""
