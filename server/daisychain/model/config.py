"""Model configuration and presets (docs/MODEL.md, "Configuration").

The configuration is the whole architecture: a run is reproducible from it plus a seed. Every
replica validates it up front so an impossible shape fails with a hint, not deep in a product.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

# Vocabulary of the shipped tokenizer (luts/tokenizer.json, chosen by measurement: TOKENIZER.md).
DEFAULT_VOCAB = 2048


class ConfigError(ValueError):
    """The model configuration cannot be built under the numerical contract.

    ``rule`` names the invariant that failed (stable: a peer answering a leader's config with
    ``error incompatible`` reports it, and tests refer to it)."""

    def __init__(self, message: str, rule: str = "model") -> None:
        super().__init__(message)
        self.rule = rule


def _is_power_of_four(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0 and (n.bit_length() - 1) % 2 == 0


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of the contract GPT (docs/MODEL.md)."""

    vocab_size: int
    width: int  # C
    layers: int  # L
    heads: int  # H
    seq_len: int  # T (also the size of the position table)
    batch: int  # B, sequences per device per step
    mlp_mult: int = 4
    norm_eps: np.float32 = dataclasses.field(default_factory=lambda: np.float32(1e-5))

    def __post_init__(self) -> None:
        for name in ("vocab_size", "width", "layers", "heads", "seq_len", "batch", "mlp_mult"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}", "positive")
        if self.width % self.heads != 0:
            raise ConfigError(
                f"width {self.width} is not divisible by heads {self.heads}; "
                "choose heads so that width / heads is a power of 4 (16, 64, 256)",
                "heads-divide-width",
            )
        if not _is_power_of_four(self.head_dim):
            raise ConfigError(
                f"head dim width/heads = {self.head_dim} must be a power of 4 (16, 64, 256) so "
                "the attention scale 1/sqrt(head dim) is an exact power of two; change width or "
                "heads",
                "head-dim",
            )
        if self.vocab_size >= 2**24:
            raise ConfigError(f"vocab_size {self.vocab_size} must be below 2^24", "vocab-range")
        if self.batch * self.seq_len >= 2**24:
            raise ConfigError(
                "batch * seq_len must be below 2^24 (1/N is taken in float32)", "tokens-range"
            )
        eps = np.float32(self.norm_eps)
        if not (np.isfinite(eps) and eps > 0):
            raise ConfigError(
                f"norm_eps must be a positive finite float32, got {self.norm_eps!r}", "norm-eps"
            )
        object.__setattr__(self, "norm_eps", eps)

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    @property
    def hidden(self) -> int:
        """Width of the MLP hidden layer (mlp_mult * C)."""
        return self.mlp_mult * self.width

    @property
    def tokens(self) -> int:
        """Tokens per device step, N = B * T."""
        return self.batch * self.seq_len

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(vocab_size=DEFAULT_VOCAB, width=64, layers=2, heads=4, seq_len=64, batch=4),
    "small": ModelConfig(
        vocab_size=DEFAULT_VOCAB, width=256, layers=4, heads=4, seq_len=128, batch=8
    ),
    "medium": ModelConfig(
        vocab_size=DEFAULT_VOCAB, width=512, layers=8, heads=8, seq_len=256, batch=8
    ),
}


def preset(name: str, **changes: Any) -> ModelConfig:
    """A preset by name, optionally with fields changed (e.g. vocab_size)."""
    try:
        cfg = PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}", "preset"
        ) from None
    return cfg.replace(**changes) if changes else cfg
