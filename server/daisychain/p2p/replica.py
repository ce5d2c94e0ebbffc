"""The model replica a training peer's protocol machine steers (``machine.replica.Replica``).

It holds the ``TrainState`` (weights, moments, step) and its hash; the machine asks it to start,
restore, encode a checkpoint and apply the mean gradient. The shell also computes gradients on
it (in a worker thread) and saves it to disk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from daisychain import checkpoint, safetensors_io, training
from daisychain.model.config import ModelConfig
from daisychain.model.ops import NUMPY_OPS, GemmOps
from daisychain.model.params import param_shapes
from daisychain.optim import AdamWConfig
from daisychain.p2p import codec
from daisychain.p2p.machine.replica import ReplicaRefused


class ModelReplica:
    def __init__(self, tokenizer_sha256: str, vocab_size: int, ops: GemmOps = NUMPY_OPS) -> None:
        self.tokenizer_sha256 = tokenizer_sha256
        self.vocab_size = vocab_size
        self.ops = ops
        self.state: training.TrainState | None = None
        self._hash = ""

    @property
    def step(self) -> int:
        return self.state.step if self.state is not None else 0

    @property
    def hash(self) -> str:
        return self._hash

    def set_state(self, state: training.TrainState) -> None:
        state.ops = self.ops  # who multiplies is never part of the identity (compare=False)
        self.state = state
        self._hash = training.state_hash(state)

    def start(self, model: ModelConfig, optim: AdamWConfig, seed: int) -> None:
        self.set_state(training.init(model, optim, seed))

    def load(self, path: str) -> None:
        """The leader's ``--resume``: a checkpoint file from disk."""
        ck = checkpoint.load(path, tokenizer_sha256=self.tokenizer_sha256,
                             vocab_size=self.vocab_size)  # fmt: skip
        self.set_state(ck.state)

    def restore(self, blob: bytes, source: str) -> None:
        try:
            tensors, meta = safetensors_io.decode(blob, source)
            ck = checkpoint.from_parts(tensors, meta, source, self.tokenizer_sha256,
                                       self.vocab_size)  # fmt: skip
        except (safetensors_io.CheckpointFormatError, checkpoint.CheckpointError) as exc:
            raise ReplicaRefused(str(exc)) from None
        self.set_state(ck.state)

    def checkpoint(self) -> bytes:
        assert self.state is not None
        return checkpoint.encode(self.state, self.tokenizer_sha256)

    def apply(self, flat: npt.NDArray[np.float32]) -> None:
        state = self.state
        assert state is not None
        training.apply_grads(state, codec.unflatten(flat, param_shapes(state.cfg)))
        self._hash = training.state_hash(state)

    def save(self, path: str) -> str:
        """Save atomically; returns ``path@step``."""
        assert self.state is not None
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.save(target, self.state, self.tokenizer_sha256)
        return f"{target}@{self.state.step}"
