"""Plain float oracle of the contract GPT (not the contract).

The same architecture, parameters and data as ``daisychain.model.gpt``, computed with ordinary
float math in a chosen dtype (float64 for gradient checks, float32 for convergence baselines):
``np.matmul``, ``np.exp``, ``np.log`` are allowed here. The backward is written by hand and is
checked against central finite differences in float64
(tests/model/test_gradients.py); the contract's int8 gradients are then checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.model.config import ModelConfig
from daisychain.model.params import param_shapes

Array = npt.NDArray[Any]
TokenArray = npt.NDArray[np.integer]


def cast_params(params: dict[str, Array], dtype: type[np.floating[Any]]) -> dict[str, Array]:
    """Copies of ``params`` in ``dtype`` (same order)."""
    return {k: np.asarray(v, dtype=dtype).copy() for k, v in params.items()}


@dataclass
class _Norm:
    xhat: Array
    inv: Array


def _rmsnorm(x: Array, g: Array, eps: Array) -> tuple[Array, _Norm]:
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat = x * inv
    return xhat * g, _Norm(xhat, inv)


def _rmsnorm_back(dy: Array, g: Array, c: _Norm) -> tuple[Array, Array]:
    dxhat = dy * g
    mean = np.mean(dxhat * c.xhat, axis=-1, keepdims=True)
    return (dxhat - c.xhat * mean) * c.inv, np.sum(dy * c.xhat, axis=0)


def forward_backward(
    params: dict[str, Array],
    cfg: ModelConfig,
    x: TokenArray,
    y: TokenArray | None,
    need_grads: bool = True,
) -> tuple[Array, dict[str, Array], Array]:
    """(loss, grads, logits (N, V)) in the dtype of ``params``; loss is NaN when ``y`` is None."""
    dt = params["wte"].dtype.type
    b, t = x.shape
    n, c, h, hd = b * t, cfg.width, cfg.heads, cfg.head_dim
    eps = dt(cfg.norm_eps)
    scale = dt(1.0 / np.sqrt(hd))
    mask = np.triu(np.ones((t, t), dtype=bool), k=1)
    hcur = (params["wte"][x] + params["wpe"][:t]).reshape(n, c)
    caches = []
    for i in range(cfg.layers):
        p = f"h.{i}."
        a, n1 = _rmsnorm(hcur, params[p + "g1"], eps)
        qkv = a @ params[p + "wqkv"]
        q, k, v = qkv.reshape(b, t, 3, h, hd).transpose(2, 0, 3, 1, 4)
        s = (q @ k.swapaxes(-1, -2)) * scale
        s = np.where(mask, -np.inf, s)
        e = np.exp(s - s.max(-1, keepdims=True))
        prob = e / e.sum(-1, keepdims=True)
        o = (prob @ v).transpose(0, 2, 1, 3).reshape(n, c)
        hcur = hcur + o @ params[p + "wo"]
        bn, n2 = _rmsnorm(hcur, params[p + "g2"], eps)
        u = bn @ params[p + "w1"]
        r = np.maximum(u, 0)
        hcur = hcur + r @ params[p + "w2"]
        caches.append((n1, a, q, k, v, prob, o, n2, bn, u, r))
    hf, nf = _rmsnorm(hcur, params["gf"], eps)
    logits = hf @ params["wte"].T
    if y is None:
        return np.asarray(np.nan, dtype=dt), {}, logits
    yy = y.reshape(n)
    z = logits - logits.max(-1, keepdims=True)
    s_exp = np.exp(z).sum(-1)
    loss = np.mean(np.log(s_exp) - z[np.arange(n), yy])
    if not need_grads:
        return np.asarray(loss, dtype=dt), {}, logits

    grads: dict[str, Array] = {}
    dlogits = np.exp(z) / s_exp[:, None]
    dlogits[np.arange(n), yy] -= 1
    dlogits /= n
    dwte = dlogits.T @ hf
    dh, grads["gf"] = _rmsnorm_back(dlogits @ params["wte"], params["gf"], nf)
    for i in reversed(range(cfg.layers)):
        p = f"h.{i}."
        n1, a, q, k, v, prob, o, n2, bn, u, r = caches[i]
        grads[p + "w2"] = r.T @ dh
        du = (dh @ params[p + "w2"].T) * (u > 0)
        grads[p + "w1"] = bn.T @ du
        dx, grads[p + "g2"] = _rmsnorm_back(du @ params[p + "w1"].T, params[p + "g2"], n2)
        dh = dh + dx
        grads[p + "wo"] = o.T @ dh
        do = (dh @ params[p + "wo"].T).reshape(b, t, h, hd).transpose(0, 2, 1, 3)
        dv = prob.swapaxes(-1, -2) @ do
        dp = do @ v.swapaxes(-1, -2)
        ds = prob * (dp - (dp * prob).sum(-1, keepdims=True)) * scale
        dq = ds @ k
        dk = ds.swapaxes(-1, -2) @ q
        dqkv = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(n, 3 * c)
        grads[p + "wqkv"] = a.T @ dqkv
        dx, grads[p + "g1"] = _rmsnorm_back(dqkv @ params[p + "wqkv"].T, params[p + "g1"], n1)
        dh = dh + dx
    np.add.at(dwte, x.reshape(n), dh)
    grads["wte"] = dwte
    dwpe = np.zeros_like(params["wpe"])
    dwpe[:t] = dh.reshape(b, t, c).sum(0)
    grads["wpe"] = dwpe
    ordered = {name: grads[name].astype(dt, copy=False) for name in param_shapes(cfg)}
    return np.asarray(loss, dtype=dt), ordered, logits
