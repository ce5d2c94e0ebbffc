"""The outer optimizer and the shared outer state (docs/OUTER.md, "The outer step").

DiLoCo (Douillard et al. 2023, arXiv:2311.08105): every peer takes ``H`` inner AdamW steps from
the shared outer weights, the group averages the **pseudo-gradients** ``outer - local`` and
applies them with Nesterov momentum (PyTorch ``SGD(nesterov=True)``, dampening 0). Here every
operation is one correctly rounded float32 operation in the order written, element by element:

    delta = outer - local                      a peer's pseudo-gradient (then compressed)
    m     = (m * mu) + g                       g: the reduced mean of the deltas
    u     = g + (m * mu)                       the Nesterov look-ahead
    w     = w - (u * lr)

``lr`` and ``mu`` are rounded to float32 once. The shared state is the outer weights and the
momentum: every replica holds the same bits after every outer step, and ``outer_hash`` is their
identity (the weights in parameter order, then the momentum in parameter order, as
docs/NUMERICS.md section 8 hashes weights and moments). A checkpoint of an outer run carries
the momentum beside the weights (``checkpoint``). With overlap, ``add_carry`` adds a peer's
carry, the inner steps that ran beside the exchange, to the new outer weights
(docs/OUTER.md, "Overlap").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from daisychain.numerics import sha256_arrays
from daisychain.wire import codec

F32 = np.float32
FloatArray = npt.NDArray[np.float32]
Params = dict[str, FloatArray]


class OuterError(ValueError):
    """An outer configuration, state or pseudo-gradient that cannot be used."""


@dataclass(frozen=True)
class OuterConfig:
    """The outer loop: ``inner_steps`` (H) per round, Nesterov ``lr`` and ``momentum`` (DiLoCo's
    0.7 and 0.9), and ``overlap``: the fraction of a peer's inner steps that run beside its
    round's exchange (docs/OUTER.md, "Overlap"; 0: none)."""

    inner_steps: int = 50
    lr: float = 0.7
    momentum: float = 0.9
    overlap: float = 0.0
    cut: str = "share"  # p2p.shares.round_steps: "share" or "batch"

    def __post_init__(self) -> None:
        if not isinstance(self.inner_steps, int) or self.inner_steps < 1:
            raise OuterError(
                f"H (inner steps per outer step) must be an integer >= 1, got {self.inner_steps!r}"
                "; H = 1 with lr 1 and momentum 0 is per-step averaging of the updates"
            )
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise OuterError(f"outer lr must be finite and > 0, got {self.lr} (DiLoCo: 0.7)")
        if not 0.0 <= self.momentum < 1.0:
            raise OuterError(
                f"outer momentum must lie in [0, 1), got {self.momentum} (DiLoCo: 0.9)"
            )
        if not 0.0 <= self.overlap <= 1.0:
            raise OuterError(f"overlap must lie in [0, 1], got {self.overlap} (0: none)")
        if self.cut not in ("share", "batch"):
            raise OuterError(f"cut must be share or batch, got {self.cut!r}")


@dataclass
class OuterState:
    """What every replica shares: outer weights and momentum (parameter order), rounds done."""

    params: Params
    momentum: Params
    step: int = 0
    shapes: dict[str, tuple[int, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if list(self.params) != list(self.momentum):
            raise OuterError("outer weights and momentum must list the same names in order")
        for name, w in self.params.items():
            m = self.momentum[name]
            if w.dtype != np.float32 or m.dtype != np.float32 or w.shape != m.shape:
                raise OuterError(
                    f"{name}: weights {w.dtype}{w.shape} and momentum {m.dtype}{m.shape} must be "
                    "float32 of one shape"
                )
        self.shapes = {name: w.shape for name, w in self.params.items()}


def init_outer(params: Params) -> OuterState:
    """The outer state at the start of a run: a copy of the weights, zero momentum."""
    return OuterState(
        {n: np.array(w, dtype=np.float32) for n, w in params.items()},
        {n: np.zeros(w.shape, dtype=np.float32) for n, w in params.items()},
    )


def add_carry(weights: Params, carry: Params) -> Params:
    """``weights + carry`` per element, one float32 addition each (docs/OUTER.md, "Overlap": a
    round starts from the outer weights plus the progress made after the last one was
    measured)."""
    if list(weights) != list(carry):
        raise OuterError("a carry must list the weights' names in parameter order")
    return {name: np.add(w, carry[name]) for name, w in weights.items()}


def pseudo_gradient(outer: Params, local: Params) -> FloatArray:
    """``outer - local`` per element, flattened (p2p.codec's layout: parameter order, padded
    with +0 to whole blocks). Positive where the inner steps lowered a weight, like a gradient."""
    if list(outer) != list(local):
        raise OuterError(
            f"local weights list {list(local)[:3]}..., the outer state {list(outer)[:3]}...: "
            "a peer's weights must be the same model in the same parameter order"
        )
    delta: Params = {}
    for name, w in outer.items():
        mine = local[name]
        if mine.shape != w.shape or mine.dtype != np.float32:
            raise OuterError(
                f"{name}: local weights {mine.dtype}{mine.shape}, outer float32{w.shape}"
            )
        delta[name] = np.subtract(w, mine)
    return codec.flatten(delta)


def apply_outer(state: OuterState, cfg: OuterConfig, mean: FloatArray) -> None:
    """One Nesterov step with the reduced mean pseudo-gradient (flat, padded), in place."""
    size = sum(w.size for w in state.params.values())
    if mean.dtype != np.float32 or mean.ndim != 1 or not size <= mean.size < size + codec.BLOCK:
        raise OuterError(
            f"mean pseudo-gradient {mean.dtype}{mean.shape}: expected a flat float32 vector of "
            f"{size} values padded to whole blocks of {codec.BLOCK}"
        )
    if not np.all(np.isfinite(mean)):
        raise OuterError("non-finite pseudo-gradient: the inner steps diverged (lower the lr)")
    mu, lr = F32(cfg.momentum), F32(cfg.lr)
    tmp = np.empty(0, dtype=np.float32)
    pos = 0
    for name, w in state.params.items():
        g = mean[pos : pos + w.size].reshape(w.shape)
        pos += w.size
        m = state.momentum[name]
        m *= mu  # m = (m * mu) + g
        m += g
        tmp = np.multiply(m, mu, out=tmp if tmp.shape == w.shape else None)  # u = g + (m * mu)
        tmp += g
        tmp *= lr  # w = w - (u * lr)
        w -= tmp
    state.step += 1


def outer_hash(state: OuterState) -> str:
    """SHA-256 over the outer weights in parameter order, then the momentum in that order."""
    return sha256_arrays([*state.params.values(), *state.momentum.values()])
