"""How much memory a training peer needs for a run configuration (docs/PROTOCOL.md, "Config
validation").

A follower checks what a leader would make it allocate before it allocates anything: the
estimate below is computed from the configuration alone (no arrays). It is an upper bound for
the numpy reference, the heaviest backend (it stores the contract's int8 operands as float32 for
BLAS, docs/MODEL.md "Configuration"); the coefficients were measured with ``tracemalloc`` over
one training step for a grid of shapes and rounded up, and ``tests/p2p/test_p2p_config.py`` checks
the step part against a fresh measurement.

Terms, with ``P`` parameters, ``N = B * T`` tokens per step, ``V`` vocabulary, ``C`` width,
``L`` layers, ``H`` heads, ``F = mlp_mult C`` (bytes):
- state: parameters and the two AdamW moments, float32: ``12 P``;
- step: the gradients (``4 P``), the once-per-step quantized weight copies (``4 P``) and the
  transients of the embedding gradient (``4 P``);
- activations: the logits and their gradient buffer with its three limbs (contract v2,
  docs/NUMERICS.md section 6) ``12 N V``, the float64 accumulators of the three-limb products
  ``24 C V``; per layer ``44 N C + 8 N F``
  (norm outputs and int8 operands kept as float32, the MLP's ``(N, F)`` operand and ReLU mask)
  and ``12 B H T^2`` (attention probabilities, their quantized copy, the scores); transients of
  the backward ``16 N C + 16 N F + 16 B H T^2``;
- exchange: the flat gradient and the reduced vector of the current step (``8 P``), plus the
  int8 pieces kept for repair (contributions sent and reduced chunks, ``257/256`` bytes a
  value each) for ``HISTORY_STEPS`` steps;
- checkpoint: a received checkpoint is held whole while it is validated: ``12 P + 1 MiB``
  (the frame limit of docs/PROTOCOL.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from daisychain.model.config import ModelConfig
from daisychain.model.params import param_shapes
from daisychain.p2p.run import HISTORY_STEPS

MIB = 1024 * 1024


def count_params(cfg: ModelConfig) -> int:
    """Scalar parameters of ``cfg`` in Python integers: a hostile config may ask for more than
    an int64 holds, and a wrapped count would slip under every cap."""
    return sum(math.prod(shape) for shape in param_shapes(cfg).values())


@dataclass(frozen=True)
class Footprint:
    """Estimated bytes, by what holds them."""

    params: int
    state: int
    step: int
    activations: int
    exchange: int
    checkpoint: int

    @property
    def total(self) -> int:
        return self.state + self.step + self.activations + self.exchange + self.checkpoint

    @property
    def total_mb(self) -> float:
        return self.total / MIB


def estimate(cfg: ModelConfig) -> Footprint:
    """Upper bound of the memory a peer takes to train ``cfg`` (see the module docstring)."""
    p = count_params(cfg)
    b, t, c, v, h = cfg.batch, cfg.seq_len, cfg.width, cfg.vocab_size, cfg.heads
    n = b * t
    attention = b * h * t * t  # (B, H, T, T) elements of one layer's probabilities
    f = cfg.hidden
    per_layer = 44 * n * c + 8 * n * f + 12 * attention
    logits = 12 * n * v + 24 * c * v  # three-limb logits gradient (contract v2)
    activations = logits + cfg.layers * per_layer + 16 * n * c + 16 * n * f + 16 * attention
    piece_bytes = -(-p * 257 // 256)  # int8 values plus one exponent per 256
    return Footprint(
        params=p,
        state=12 * p,
        step=12 * p,
        activations=activations,
        exchange=8 * p + HISTORY_STEPS * 2 * piece_bytes,
        checkpoint=12 * p + MIB,
    )
