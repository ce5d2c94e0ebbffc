"""Parameter layout and seeded initialization (docs/MODEL.md, "Parameters" and "Init").

Parameters are a plain ``dict[str, ndarray]`` of float32 arrays whose insertion order is the
canonical order (hash, optimizer, checkpoint, wire). Matrices are stored (in, out): y = x @ W.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from daisychain.model.config import ModelConfig
from daisychain.numerics import prng

F32 = np.float32
Params = dict[str, npt.NDArray[np.float32]]

INIT_STREAM = 0  # prng.key(seed, INIT_STREAM, tensor_index)
BASE_STD = F32(0.02)
WPE_STD = F32(0.01)


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape in the canonical order."""
    c, v, t, hid = cfg.width, cfg.vocab_size, cfg.seq_len, cfg.hidden
    shapes: dict[str, tuple[int, ...]] = {"wte": (v, c), "wpe": (t, c)}
    for layer in range(cfg.layers):
        p = f"h.{layer}."
        shapes[p + "g1"] = (c,)
        shapes[p + "wqkv"] = (c, 3 * c)
        shapes[p + "wo"] = (c, c)
        shapes[p + "g2"] = (c,)
        shapes[p + "w1"] = (c, hid)
        shapes[p + "w2"] = (hid, c)
    shapes["gf"] = (c,)
    return shapes


def param_names(cfg: ModelConfig) -> list[str]:
    """Parameter names in the canonical order."""
    return list(param_shapes(cfg))


def count_params(cfg: ModelConfig) -> int:
    """Number of scalar parameters (the tied wte counted once)."""
    return sum(int(np.prod(s)) for s in param_shapes(cfg).values())


def is_gain(name: str) -> bool:
    return name == "gf" or name.endswith((".g1", ".g2"))


def init_std(cfg: ModelConfig, name: str) -> np.float32:
    """Standard deviation of a weight's uniform init, as a float32 (docs/MODEL.md, "Init")."""
    if name == "wpe":
        return WPE_STD
    if name.endswith((".wo", ".w2")):
        # residual projections: 0.02 / sqrt(2L), one float32 sqrt and one division
        return F32(BASE_STD / np.sqrt(F32(2 * cfg.layers)))
    return BASE_STD


def init_params(cfg: ModelConfig, seed: int) -> Params:
    """Seeded init: tensor i draws ``prng.uniform(prng.key(seed, 0, i), numel)`` in C order.

    Weights: a = f32(std) * sqrt(f32(3)); w = (u * 2 - 1) * a, each op a float32 rounding.
    Gains: 1.0 (their stream index is consumed but unused).
    """
    params: Params = {}
    sqrt3 = np.sqrt(F32(3.0))
    for index, (name, shape) in enumerate(param_shapes(cfg).items()):
        if is_gain(name):
            params[name] = np.ones(shape, dtype=np.float32)
            continue
        amp = F32(init_std(cfg, name) * sqrt3)
        u = prng.uniform(prng.key(seed, INIT_STREAM, index), int(np.prod(shape)))
        w = u * F32(2.0)
        w -= F32(1.0)
        w *= amp
        params[name] = w.reshape(shape)
    return params
