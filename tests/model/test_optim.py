"""The pinned AdamW: agreement with textbook AdamW, clipping, bias products, schedule."""

from __future__ import annotations

import numpy as np
import pytest

from daisychain.optim import (
    AdamW,
    AdamWConfig,
    OptimizerError,
    decays,
    global_norm,
    learning_rate,
)

F32 = np.float32


def _problem(seed: int = 0) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    params = {
        "wte": rng.standard_normal((8, 4)).astype(F32),
        "wpe": rng.standard_normal((3, 4)).astype(F32),
        "h.0.g1": np.ones(4, dtype=F32),
        "h.0.w1": rng.standard_normal((4, 16)).astype(F32),
    }
    grads = [
        {k: (rng.standard_normal(v.shape) * 0.1).astype(F32) for k, v in params.items()}
        for _ in range(6)
    ]
    return params, grads


def _textbook(
    params: dict[str, np.ndarray], grads: list[dict[str, np.ndarray]], cfg: AdamWConfig
) -> dict[str, np.ndarray]:
    """Float64 AdamW (decoupled decay, global-norm clipping, pow bias corrections)."""
    w = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v2 = {k: np.zeros_like(v) for k, v in w.items()}
    for t, g32 in enumerate(grads, start=1):
        g = {k: x.astype(np.float64) for k, x in g32.items()}
        norm = np.sqrt(sum(float((x * x).sum()) for x in g.values()))
        if cfg.clip > 0 and norm > cfg.clip:
            g = {k: x * (cfg.clip / norm) for k, x in g.items()}
        lr = float(learning_rate(cfg, t))
        for k in w:
            m[k] = cfg.beta1 * m[k] + (1 - cfg.beta1) * g[k]
            v2[k] = cfg.beta2 * v2[k] + (1 - cfg.beta2) * g[k] ** 2
            mhat = m[k] / (1 - cfg.beta1**t)
            vhat = v2[k] / (1 - cfg.beta2**t)
            wd = cfg.weight_decay if decays(k) else 0.0
            w[k] = w[k] - lr * wd * w[k] - lr * mhat / (np.sqrt(vhat) + cfg.eps)
    return w


@pytest.mark.parametrize("clip", [0.0, 0.5])
def test_matches_textbook_adamw(clip: float) -> None:
    params, grads = _problem()
    cfg = AdamWConfig(lr=1e-2, weight_decay=0.1, clip=clip, warmup_steps=2)
    expected = _textbook(params, grads, cfg)
    opt = AdamW(cfg)
    state = opt.init_state(params)
    for g in grads:
        opt.step(params, g, state)
    assert state.step == len(grads)
    for k, w in params.items():
        assert w.dtype == F32
        # each step moves a weight by about lr; float32 rounding is far below that
        np.testing.assert_allclose(w, expected[k], rtol=0, atol=2e-6, err_msg=k)


def test_grads_are_not_modified_and_state_is_float32() -> None:
    params, grads = _problem(1)
    copies = {k: g.copy() for k, g in grads[0].items()}
    opt = AdamW(AdamWConfig(clip=0.01))
    state = opt.init_state(params)
    stats = opt.step(params, grads[0], state)
    assert stats.clipped
    for k, g in grads[0].items():
        assert g.tobytes() == copies[k].tobytes()
        assert state.m[k].dtype == F32 and state.v[k].dtype == F32
    assert state.p1.dtype == F32 and stats.lr.dtype == F32


def test_clipping_scales_by_the_pinned_global_norm() -> None:
    params, grads = _problem(2)
    g = grads[0]
    norm = global_norm(g)
    exact = np.sqrt(sum(float((x.astype(np.float64) ** 2).sum()) for x in g.values()))
    assert abs(float(norm) - exact) < 1e-6 * exact
    clip = F32(float(norm) / 4)
    # clipping with threshold clip == feeding g * (clip / norm) without clipping
    a, b = {k: v.copy() for k, v in params.items()}, {k: v.copy() for k, v in params.items()}
    opt_a, opt_b = AdamW(AdamWConfig(clip=float(clip))), AdamW(AdamWConfig(clip=0.0))
    sa, sb = opt_a.init_state(a), opt_b.init_state(b)
    stats = opt_a.step(a, g, sa)
    assert stats.clipped and stats.grad_norm == norm  # reported before clipping
    scale = F32(opt_a.clip / norm)
    opt_b.step(b, {k: x * scale for k, x in g.items()}, sb)
    for k in a:
        assert a[k].tobytes() == b[k].tobytes()
    # under the threshold nothing is clipped
    assert not AdamW(AdamWConfig(clip=float(norm) * 2)).step(a, g, sa).clipped


def test_bias_corrections_are_running_products() -> None:
    params, grads = _problem(3)
    cfg = AdamWConfig(beta1=0.9, beta2=0.95)
    opt = AdamW(cfg)
    state = opt.init_state(params)
    p1 = p2 = F32(1.0)
    for g in grads:
        opt.step(params, g, state)
        p1, p2 = F32(p1 * F32(0.9)), F32(p2 * F32(0.95))
        assert state.p1.tobytes() == p1.tobytes() and state.p2.tobytes() == p2.tobytes()
    assert abs(float(state.p1) - 0.9**6) < 1e-6 and abs(float(state.p2) - 0.95**6) < 1e-6


def test_weight_decay_skips_wpe_and_gains() -> None:
    params, _ = _problem(4)
    before = {k: v.copy() for k, v in params.items()}
    cfg = AdamWConfig(lr=0.1, weight_decay=0.5, clip=0.0)
    opt = AdamW(cfg)
    zero = {k: np.zeros_like(v) for k, v in params.items()}
    opt.step(params, zero, opt.init_state(params))
    factor = F32(F32(1) - F32(F32(0.1) * F32(0.5)))
    for k in ("wte", "h.0.w1"):
        assert params[k].tobytes() == (before[k] * factor).tobytes()
    for k in ("wpe", "h.0.g1"):
        assert params[k].tobytes() == before[k].tobytes()


def test_schedule() -> None:
    const = AdamWConfig(lr=1e-3, warmup_steps=4)
    assert [float(learning_rate(const, t)) for t in (1, 2, 4, 5, 100)] == pytest.approx(
        [2.5e-4, 5e-4, 1e-3, 1e-3, 1e-3]
    )
    assert learning_rate(const, 4) == F32(1e-3)
    lin = AdamWConfig(lr=1e-3, warmup_steps=10, schedule="linear", total_steps=110, final_lr=1e-4)
    assert learning_rate(lin, 10) == F32(1e-3)
    assert float(learning_rate(lin, 60)) == pytest.approx(5.5e-4, rel=1e-6)
    assert learning_rate(lin, 110) == F32(1e-4) and learning_rate(lin, 500) == F32(1e-4)
    values = [float(learning_rate(lin, t)) for t in range(10, 111)]
    assert values == sorted(values, reverse=True)
    assert learning_rate(AdamWConfig(lr=1e-3), 1) == F32(1e-3)
    with pytest.raises(OptimizerError, match="total_steps"):
        AdamWConfig(schedule="linear", warmup_steps=5, total_steps=5)
    with pytest.raises(OptimizerError):
        learning_rate(const, 0)
