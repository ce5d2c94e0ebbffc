"""The model replica a training peer's protocol machine steers (``machine.replica.Replica``).

It holds the ``TrainState`` (weights, moments, step) and its hash; the machine asks it to start,
restore, encode a checkpoint and apply the mean gradient. The shell also computes gradients on
it (in a worker thread) and saves it to disk.

In an outer run (docs/PROTOCOL.md, "Outer runs") the shared state is the outer weights ``W``, the
outer momentum ``M`` and the outer steps done (``outer.OuterState``): ``step`` counts outer steps,
``hash`` is ``outer.outer_hash``, ``apply`` takes the reduced mean pseudo-gradient and makes the
Nesterov step, checkpoints carry ``W`` and ``M``. ``state.params`` are then the outer weights
themselves and ``state.opt_state`` this peer's own inner AdamW state, which is never shared or
hashed: the shell runs each round's inner steps on a copy (``inner_start``) and hands the result
back once the round is applied (``adopt_inner``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from daisychain import checkpoint, safetensors_io, training
from daisychain.model.config import ModelConfig
from daisychain.model.ops import NUMPY_OPS, GemmOps
from daisychain.model.params import param_shapes
from daisychain.optim import AdamWConfig, AdamWState
from daisychain.outer.nesterov import OuterConfig, OuterState, Params, apply_outer, outer_hash
from daisychain.p2p.machine.replica import ReplicaRefused
from daisychain.wire import codec


def _copy_adamw(opt: AdamWState) -> AdamWState:
    return AdamWState(
        m={k: v.copy() for k, v in opt.m.items()},
        v={k: v.copy() for k, v in opt.v.items()},
        step=opt.step, p1=opt.p1, p2=opt.p2,
    )  # fmt: skip


class ModelReplica:
    def __init__(self, tokenizer_sha256: str, vocab_size: int, ops: GemmOps = NUMPY_OPS) -> None:
        self.tokenizer_sha256 = tokenizer_sha256
        self.vocab_size = vocab_size
        self.ops = ops
        self.state: training.TrainState | None = None
        self._hash = ""
        self.outer_cfg: OuterConfig | None = None  # the run's outer loop (None: per-step)
        self.outer: OuterState | None = None  # an outer run's shared state
        # With overlap, the progress after the last applied round was measured (this peer's own,
        # like its inner AdamW state: never exchanged, hashed or checkpointed).
        self.carry: Params | None = None

    @property
    def step(self) -> int:
        if self.outer is not None:
            return self.outer.step
        return self.state.step if self.state is not None else 0

    def set_outer(self, cfg: OuterConfig | None) -> None:
        """The run's outer loop (None: per-step); called before ``start``/``restore``/``load``."""
        if self.state is not None and (cfg is None) != (self.outer_cfg is None):
            raise ValueError("the sync mode is set before the replica holds a state")
        self.outer_cfg = cfg

    @property
    def hash(self) -> str:
        return self._hash

    def set_state(self, state: training.TrainState, outer: OuterState | None = None) -> None:
        state.ops = self.ops  # who multiplies is never part of the identity (compare=False)
        self.state = state
        self.outer = outer
        self.carry = None  # a new state (start, restore, sync) starts without one
        self._hash = training.state_hash(state) if outer is None else outer_hash(outer)

    def start(self, model: ModelConfig, optim: AdamWConfig, seed: int) -> None:
        state = training.init(model, optim, seed)
        if self.outer_cfg is None:
            self.set_state(state)
            return
        # M starts at +0; the outer weights are the state's weights (the same arrays).
        momentum = {k: np.zeros_like(w) for k, w in state.params.items()}
        self.set_state(state, OuterState(state.params, momentum))

    def _adopt(self, ck: checkpoint.Checkpoint, source: str) -> None:
        if (ck.outer is None) != (self.outer_cfg is None):
            mode = "an outer run" if ck.outer is not None else "a per-step run"
            run = "an outer run" if self.outer_cfg is not None else "a per-step run"
            raise ReplicaRefused(f"{source}: a checkpoint of {mode}, but this is {run}")
        self.set_state(ck.state, ck.outer)

    def load(self, path: str) -> None:
        """The leader's ``--resume``: a checkpoint file from disk."""
        ck = checkpoint.load(path, tokenizer_sha256=self.tokenizer_sha256,
                             vocab_size=self.vocab_size)  # fmt: skip
        try:
            self._adopt(ck, path)
        except ReplicaRefused as exc:
            raise checkpoint.CheckpointError(str(exc)) from None

    def restore(self, blob: bytes, source: str) -> None:
        try:
            tensors, meta = safetensors_io.decode(blob, source)
            ck = checkpoint.from_parts(tensors, meta, source, self.tokenizer_sha256,
                                       self.vocab_size)  # fmt: skip
        except (safetensors_io.CheckpointFormatError, checkpoint.CheckpointError) as exc:
            raise ReplicaRefused(str(exc)) from None
        self._adopt(ck, source)

    def checkpoint(self) -> bytes:
        assert self.state is not None
        if self.outer is not None and self.outer_cfg is not None:
            return checkpoint.encode_outer(self.state, self.outer, self.outer_cfg,
                                           self.tokenizer_sha256)  # fmt: skip
        return checkpoint.encode(self.state, self.tokenizer_sha256)

    def apply(self, flat: npt.NDArray[np.float32]) -> None:
        state = self.state
        assert state is not None
        if self.outer is not None and self.outer_cfg is not None:
            # The outer Nesterov step on W and M, in place (state.params are W). The mean came
            # through the int8 codec, which refuses non-finite values at the sender.
            apply_outer(self.outer, self.outer_cfg, flat)
            self._hash = outer_hash(self.outer)
            return
        training.apply_grads(state, codec.unflatten(flat, param_shapes(state.cfg)))
        self._hash = training.state_hash(state)

    # -- an outer run's inner steps (the shell's) ------------------------------------------------

    def inner_start(self) -> training.TrainState:
        """A private copy to take this round's inner steps on: the outer weights and this peer's
        inner AdamW state as the last applied round left it (a round computed again after a
        roster change starts from the same bits)."""
        state = self.state
        assert state is not None and self.outer is not None
        params = {k: w.copy() for k, w in self.outer.params.items()}
        return training.TrainState(state.cfg, state.opt_cfg, params,
                                   _copy_adamw(state.opt_state), state.seed, state.backend,
                                   self.ops)  # fmt: skip

    def adopt_inner(self, opt: AdamWState, carry: Params | None = None) -> None:
        """The inner AdamW state and the carry after the round just applied (this peer's own)."""
        assert self.state is not None and self.outer is not None
        self.state.opt_state = opt
        self.carry = carry

    def save(self, path: str) -> str:
        """Save atomically; returns ``path@step``."""
        assert self.state is not None
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if self.outer is not None and self.outer_cfg is not None:
            checkpoint.save_outer(target, self.state, self.outer, self.outer_cfg,
                                  self.tokenizer_sha256)  # fmt: skip
        else:
            checkpoint.save(target, self.state, self.tokenizer_sha256)
        return f"{target}@{self.step}"
