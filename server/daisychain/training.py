"""The training core: one replica's state and its step (docs/MODEL.md, "Training step").

A step is: gradients of the contract model on a batch (``compute_grads``), then the pinned AdamW
update (``apply_grads``). Peers that average gradients across devices call the two halves with
their combination in between; a single device calls ``train_step``. The identity of a replica is
``state_hash``: SHA-256 over every parameter in order, then every first moment m in order, then
every second moment v in order (canonical little-endian float32 bytes).

``backend="reference"`` trains the float32 oracle (``daisychain.model.reference``) with the same
init, optimizer and batches: the baseline of convergence comparisons.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from daisychain import batches
from daisychain.model import gpt, reference
from daisychain.model.config import ModelConfig
from daisychain.model.ops import NUMPY_OPS, GemmOps
from daisychain.model.params import Params, init_params
from daisychain.numerics import sha256_arrays
from daisychain.optim import AdamW, AdamWConfig, AdamWState, StepStats
from daisychain.wire.codec import flatten

Backend = Literal["contract", "reference"]
TokenArray = npt.NDArray[np.integer]


@dataclass
class TrainState:
    """Everything that defines a replica. ``params``, ``opt_state.m``/``.v`` are plain ordered
    dicts of float32 arrays (parameter order)."""

    cfg: ModelConfig
    opt_cfg: AdamWConfig
    params: Params
    opt_state: AdamWState
    seed: int
    backend: Backend = "contract"
    # Who sums the integer products (numpy, or a gated GPU kernel): never part of the identity.
    ops: GemmOps = field(default=NUMPY_OPS, compare=False, repr=False)

    @property
    def step(self) -> int:
        """Number of completed steps."""
        return self.opt_state.step


@dataclass(frozen=True)
class StepResult:
    step: int  # 1-based number of the step just completed
    loss: np.float32
    grad_norm: np.float32  # global norm before clipping
    lr: np.float32
    hash: str  # state_hash after the update ("" when not requested)


def init(
    cfg: ModelConfig, opt_cfg: AdamWConfig, seed: int, backend: Backend = "contract"
) -> TrainState:
    """Fresh state: seeded parameters, zero moments, step 0."""
    if backend not in ("contract", "reference"):
        raise ValueError(f"backend must be 'contract' or 'reference', got {backend!r}")
    params = init_params(cfg, seed)
    opt_state = AdamW(opt_cfg).init_state(params)
    return TrainState(cfg, opt_cfg, params, opt_state, seed, backend)


def state_hash(state: TrainState) -> str:
    """SHA-256 over all params, then all m, then all v, each in parameter order."""
    arrays = [
        *state.params.values(),
        *state.opt_state.m.values(),
        *state.opt_state.v.values(),
    ]
    return sha256_arrays(arrays)


def next_batch(
    state: TrainState, tokens: TokenArray, rank: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The batch of the coming step for ``rank`` (seeded by the state's seed and step)."""
    cfg = state.cfg
    return batches.sample_batch(tokens, cfg.batch, cfg.seq_len, state.seed, state.step, rank)


def compute_grads(
    state: TrainState, x: TokenArray, y: TokenArray, on_grad: gpt.GradHook | None = None
) -> tuple[np.float32, dict[str, npt.NDArray[np.float32]]]:
    """(loss, grads) of the state's model on one batch; the state is not modified.
    ``on_grad`` hears of each parameter's gradient as soon as it is final (the contract
    backend; the float reference reports nothing early)."""
    if state.backend == "contract":
        return gpt.forward_backward(state.params, state.cfg, x, y, state.ops, on_grad=on_grad)
    loss, grads, _ = reference.forward_backward(state.params, state.cfg, x, y)
    return np.float32(loss), grads


def apply_grads(state: TrainState, grads: dict[str, npt.NDArray[np.float32]]) -> StepStats:
    """The pinned AdamW update, in place; returns the optimizer's step statistics."""
    return AdamW(state.opt_cfg).step(state.params, grads, state.opt_state)


def train_step(
    state: TrainState, x: TokenArray, y: TokenArray, with_hash: bool = True
) -> StepResult:
    """compute_grads, then apply_grads; returns the step's loss, norm, lr and the new hash."""
    loss, grads = compute_grads(state, x, y)
    stats = apply_grads(state, grads)
    digest = state_hash(state) if with_hash else ""
    return StepResult(stats.step, loss, stats.grad_norm, stats.lr, digest)


def eval_loss(state: TrainState, tokens: TokenArray, n_batches: int = 4) -> float:
    """Mean loss over a fixed set of validation batches (seeded apart from training batches).

    The validation loss of ``daisychain train --eval-every``, the page's live panel and the
    benchmarks (docs/MODEL.md, "Validation loss"): batch ``i`` is
    ``sample_batch(tokens, batch, seq_len, seed ^ 0x5EED, i)``, the loss the contract model's.
    """
    cfg = state.cfg
    losses = []
    for i in range(n_batches):
        x, y = batches.sample_batch(tokens, cfg.batch, cfg.seq_len, state.seed ^ 0x5EED, i)
        logits = gpt.forward_logits(state.params, cfg, x)
        loss, _ = gpt.cross_entropy(logits.reshape(-1, cfg.vocab_size), y.reshape(-1))
        losses.append(float(loss))
    return float(np.mean(losses))


# Told of the last piece's backward: the sum of the earlier pieces' weighted gradients (None
# when there is one piece) and the last piece's weight; answers the hook for its gradients.
LastPieceWatch = Callable[[npt.NDArray[np.float32] | None, np.float32], gpt.GradHook]


def mean_gradient(
    state: TrainState,
    rows: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]],
    count: int,
    watch: LastPieceWatch | None = None,
) -> tuple[float, npt.NDArray[np.float32] | None]:
    """(loss, flat mean gradient) over ``count`` sequences given as lane pieces (None for a
    share of 0): a protocol-v2 contributor's part of the step. Pieces combine as
    ``sum(g * rows) / count`` in float32, piece order (docs/PROTOCOL.md, "A contributor's mean
    gradient"); one piece is the model's own mean. ``watch`` sees the last piece's backward
    (``p2p.early``: values of the mean are final as soon as the last piece's are)."""
    if not rows:
        return 0.0, None
    flat: npt.NDArray[np.float32] | None = None
    loss = np.float32(0)
    for i, (x, y) in enumerate(rows):
        last = i == len(rows) - 1
        hook = watch(flat, np.float32(len(x))) if watch is not None and last else None
        piece_loss, grads = compute_grads(state, x, y, hook)
        g = flatten(grads)
        if len(rows) == 1:
            return float(piece_loss), g
        r = np.float32(len(x))
        if flat is None:
            flat, loss = g * r, np.float32(piece_loss * r)
        else:
            np.add(flat, g * r, out=flat)
            loss = np.float32(loss + np.float32(piece_loss * r))
    assert flat is not None
    np.divide(flat, np.float32(count), out=flat)
    return float(np.float32(loss / np.float32(count))), flat
