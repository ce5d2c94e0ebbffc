"""The trace replica: the state a conformance trace's machine steers, defined by hashing alone.

A trace checks the protocol, not the model (tests/vectors/numerics does that), so its replica is
a few lines any implementation rebuilds (tests/vectors/README.md, "Protocol traces"):

- ``start(model, optim, seed)``: step 0, hash = SHA-256 of the ASCII text
  ``daisychain-trace init seed=<seed>``;
- ``apply(flat)``: step + 1, hash = SHA-256 of (the previous hash as 64 ASCII hex digits, then
  the flat mean gradient as little-endian float32 bytes);
- ``checkpoint()``: ``b"DCTRACE1"``, the step as u32 little-endian, the hash as 64 ASCII hex
  digits (76 bytes);
- ``restore(blob)``: the inverse; anything else is refused.
"""

from __future__ import annotations

import hashlib
import re
import struct

import numpy as np
import numpy.typing as npt

from daisychain.model.config import ModelConfig
from daisychain.optim import AdamWConfig
from daisychain.outer.nesterov import OuterConfig
from daisychain.p2p.machine.replica import ReplicaRefused

MAGIC = b"DCTRACE1"
CHECKPOINT_BYTES = len(MAGIC) + 4 + 64
_HEX64 = re.compile(rb"[0-9a-f]{64}")


def init_hash(seed: int) -> str:
    return hashlib.sha256(f"daisychain-trace init seed={seed}".encode("ascii")).hexdigest()


class TraceReplica:
    def __init__(self, step: int = 0, digest: str = "") -> None:
        self._step = step
        self._hash = digest

    @property
    def step(self) -> int:
        return self._step

    @property
    def hash(self) -> str:
        return self._hash

    def set_outer(self, cfg: OuterConfig | None) -> None:
        """The hash chain above serves both sync modes: a trace pins the protocol (the mean it
        applies is part of the chain), not the model."""

    def start(self, model: ModelConfig, optim: AdamWConfig, seed: int) -> None:
        self._step, self._hash = 0, init_hash(seed)

    def restore(self, blob: bytes, source: str) -> None:
        if len(blob) != CHECKPOINT_BYTES or not blob.startswith(MAGIC):
            raise ReplicaRefused(f"{source}: not a trace checkpoint ({len(blob)} bytes)")
        digest = blob[12:]
        if not _HEX64.fullmatch(digest):
            raise ReplicaRefused(f"{source}: the recorded hash is not 64 hex digits")
        (self._step,) = struct.unpack_from("<I", blob, 8)
        self._hash = digest.decode("ascii")

    def checkpoint(self) -> bytes:
        return MAGIC + struct.pack("<I", self._step) + self._hash.encode("ascii")

    def apply(self, flat: npt.NDArray[np.float32]) -> None:
        data = self._hash.encode("ascii") + flat.astype("<f4").tobytes()
        self._step += 1
        self._hash = hashlib.sha256(data).hexdigest()
