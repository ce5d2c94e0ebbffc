"""The simulator's stand-in replica: a step and a hash chain, no model.

The simulator models time, not arithmetic: the machine still reduces and applies the mean of
the pieces it received (its arithmetic is part of the contract), and this replica folds that
mean into a SHA-256 chain, so replicas that received other pieces disagree and the sync guard
sees it. A checkpoint is the step and the hash behind a magic (76 bytes: a late joiner's sync is
timed at that size, not at the real checkpoint's, 12 bytes a parameter).
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import numpy.typing as npt

from daisychain.model.config import ModelConfig
from daisychain.optim import AdamWConfig
from daisychain.outer.nesterov import OuterConfig
from daisychain.p2p.machine.replica import ReplicaRefused

MAGIC = b"DCSIMRP1"
SIZE = len(MAGIC) + 4 + 64


class SimReplica:
    def __init__(self) -> None:
        self._step = 0
        self._hash = ""

    @property
    def step(self) -> int:
        return self._step

    @property
    def hash(self) -> str:
        return self._hash

    def set_outer(self, cfg: OuterConfig | None) -> None:
        """Both sync modes fold their mean into the same chain."""

    def start(self, model: ModelConfig, optim: AdamWConfig, seed: int) -> None:
        self._step = 0
        self._hash = hashlib.sha256(f"daisychain-sim seed={seed}".encode("ascii")).hexdigest()

    def restore(self, blob: bytes, source: str) -> None:
        if len(blob) != SIZE or not blob.startswith(MAGIC):
            raise ReplicaRefused(f"{source}: not a simulator checkpoint ({len(blob)} bytes)")
        (self._step,) = struct.unpack_from("<I", blob, len(MAGIC))
        self._hash = blob[len(MAGIC) + 4 :].decode("ascii")

    def checkpoint(self) -> bytes:
        return MAGIC + struct.pack("<I", self._step) + self._hash.encode("ascii")

    def apply(self, flat: npt.NDArray[np.float32]) -> None:
        mean = hashlib.sha256(flat.astype("<f4").tobytes()).hexdigest()
        self._step += 1
        self._hash = hashlib.sha256(f"{self._hash} {mean}".encode("ascii")).hexdigest()
