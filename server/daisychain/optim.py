"""AdamW in float32 with a pinned operation sequence (docs/MODEL.md, "Optimizer").

Every replica must update its weights to the same bits, so the update is a fixed sequence of
correctly rounded float32 operations: hyper-parameters are float32 constants, bias corrections are
running products (no ``pow``), the global gradient norm is a pinned reduction (``tree_sum`` per
tensor, then a left-to-right sum in parameter order), and the learning-rate schedule is written
with float32 operations on exactly representable step counts. The same code applied to float32
reference gradients gives the float baseline of convergence runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from daisychain.numerics import tree_sum
from daisychain.numerics.reduce import sequential_sum

F32 = np.float32
FloatArray = npt.NDArray[np.float32]
Arrays = dict[str, FloatArray]

Schedule = Literal["constant", "linear"]


class OptimizerError(ValueError):
    """An optimizer configuration or state that cannot be used."""


def decays(name: str) -> bool:
    """Weight decay applies to the 2-D matrices (wte, wqkv, wo, w1, w2), not wpe nor gains."""
    return name == "wte" or name.endswith((".wqkv", ".wo", ".w1", ".w2"))


@dataclass(frozen=True)
class AdamWConfig:
    """Hyper-parameters; each float is rounded to float32 once, here (docs/MODEL.md)."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    clip: float = 1.0  # global-norm clip threshold; 0 disables clipping
    warmup_steps: int = 0
    schedule: Schedule = "constant"
    total_steps: int = 0  # end of the linear decay (required for schedule="linear")
    final_lr: float = 0.0  # learning rate reached at total_steps (linear schedule)

    def __post_init__(self) -> None:
        if not (0.0 <= self.beta1 < 1.0 and 0.0 <= self.beta2 < 1.0):
            raise OptimizerError(f"betas must lie in [0, 1), got {self.beta1}, {self.beta2}")
        if self.lr < 0 or self.eps <= 0 or self.weight_decay < 0 or self.clip < 0:
            raise OptimizerError("lr, weight_decay and clip must be >= 0 and eps > 0")
        if self.warmup_steps < 0 or self.total_steps < 0:
            raise OptimizerError("warmup_steps and total_steps must be >= 0")
        if self.schedule not in ("constant", "linear"):
            raise OptimizerError(f"schedule must be 'constant' or 'linear', got {self.schedule!r}")
        if self.schedule == "linear" and self.total_steps <= self.warmup_steps:
            raise OptimizerError(
                f"linear schedule needs total_steps ({self.total_steps}) > warmup_steps "
                f"({self.warmup_steps}); set total_steps to the run length"
            )
        if max(self.warmup_steps, self.total_steps) >= 2**24:
            raise OptimizerError("step counts must be below 2^24 (exact in float32)")


def learning_rate(cfg: AdamWConfig, step: int) -> np.float32:
    """Learning rate of 1-based ``step``, in float32 (docs/MODEL.md, "Schedule").

    warmup (step <= W):  lr * (f32(step) / f32(W))
    linear after W:      final + (lr - final) * (f32(S - min(step, S)) / f32(S - W))
    constant after W:    lr
    """
    if step < 1:
        raise OptimizerError(f"steps are counted from 1, got {step}")
    lr = F32(cfg.lr)
    w = cfg.warmup_steps
    if step <= w:
        return F32(lr * F32(F32(step) / F32(w)))
    if cfg.schedule == "constant":
        return lr
    total = cfg.total_steps
    final = F32(cfg.final_lr)
    frac = F32(F32(total - min(step, total)) / F32(total - w))
    return F32(final + F32(F32(lr - final) * frac))


def global_norm(grads: Arrays) -> np.float32:
    """sqrt of the sum over tensors (parameter order, left to right) of tree_sum(g * g)."""
    partial = [F32(tree_sum((g * g).reshape(-1), 0)) for g in grads.values()]
    return F32(np.sqrt(sequential_sum(partial)))


@dataclass
class AdamWState:
    """Moments per parameter (same order and shapes), step count and running bias products."""

    m: Arrays
    v: Arrays
    step: int = 0
    p1: np.float32 = field(default_factory=lambda: F32(1.0))  # beta1^step as a running product
    p2: np.float32 = field(default_factory=lambda: F32(1.0))  # beta2^step


@dataclass(frozen=True)
class StepStats:
    step: int  # 1-based number of the step just taken
    lr: np.float32
    grad_norm: np.float32  # before clipping
    clipped: bool


class AdamW:
    """AdamW with a pinned float32 sequence; ``step`` updates params and state in place."""

    def __init__(self, config: AdamWConfig) -> None:
        self.config = config
        self.b1 = F32(config.beta1)
        self.b2 = F32(config.beta2)
        self.omb1 = F32(F32(1.0) - self.b1)
        self.omb2 = F32(F32(1.0) - self.b2)
        self.eps = F32(config.eps)
        self.wd = F32(config.weight_decay)
        self.clip = F32(config.clip)

    def init_state(self, params: Arrays) -> AdamWState:
        zeros = {k: np.zeros_like(p, dtype=np.float32) for k, p in params.items()}
        return AdamWState(m=zeros, v={k: np.zeros_like(z) for k, z in zeros.items()})

    def step(self, params: Arrays, grads: Arrays, state: AdamWState) -> StepStats:
        """One update; ``grads`` are read, never modified."""
        if list(grads) != list(params) or list(state.m) != list(params):
            raise OptimizerError("params, grads and optimizer state must list the same names")
        t = state.step + 1
        lr = learning_rate(self.config, t)
        state.p1 = F32(state.p1 * self.b1)
        state.p2 = F32(state.p2 * self.b2)
        bc1 = F32(F32(1.0) - state.p1)
        bc2 = F32(F32(1.0) - state.p2)
        step_size = F32(lr / bc1)
        sqrt_bc2 = F32(np.sqrt(bc2))
        decay = F32(F32(1.0) - F32(lr * self.wd))

        norm = global_norm(grads)
        clipped = bool(self.clip > 0 and norm > self.clip)
        scale = F32(self.clip / norm) if clipped else F32(1.0)

        for name, w in params.items():
            g = grads[name]
            if g.shape != w.shape or g.dtype != np.float32:
                raise OptimizerError(f"gradient {name}: expected float32 {w.shape}, got {g.dtype}")
            if clipped:
                g = g * scale
            m, v = state.m[name], state.v[name]
            m *= self.b1  # m = m * b1 + g * (1 - b1)
            tmp = g * self.omb1
            m += tmp
            v *= self.b2  # v = v * b2 + (g * g) * (1 - b2)
            np.multiply(g, g, out=tmp)
            tmp *= self.omb2
            v += tmp
            np.sqrt(v, out=tmp)  # den = sqrt(v) / sqrt(bc2) + eps
            tmp /= sqrt_bc2
            tmp += self.eps
            np.divide(m, tmp, out=tmp)  # upd = (m / den) * (lr / bc1)
            tmp *= step_size
            if decays(name):
                w *= decay  # w = w * (1 - lr * wd)
            w -= tmp  # w = w - upd
        state.step = t
        return StepStats(step=t, lr=lr, grad_norm=norm, clipped=clipped)
