"""The contract GPT: shapes, seeded init, config validation, forward consistency, dtypes."""

from __future__ import annotations

import numpy as np
import pytest

import pyast
from daisychain.model import (
    PRESETS,
    ConfigError,
    ModelConfig,
    count_params,
    forward_backward,
    forward_logits,
    gpt,
    init_params,
    param_names,
    param_shapes,
    preset,
)
from daisychain.model.params import init_std
from daisychain.numerics import prng

TINY = PRESETS["tiny"].replace(vocab_size=256)


def _batch(cfg: ModelConfig, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (cfg.batch, cfg.seq_len)
    return rng.integers(0, cfg.vocab_size, shape), rng.integers(0, cfg.vocab_size, shape)


def test_param_order_and_shapes() -> None:
    cfg = TINY
    names = param_names(cfg)
    assert names[:2] == ["wte", "wpe"] and names[-1] == "gf"
    assert names[2:8] == [f"h.0.{n}" for n in ("g1", "wqkv", "wo", "g2", "w1", "w2")]
    params = init_params(cfg, 1)
    assert list(params) == names
    c = cfg.width
    assert params["wte"].shape == (cfg.vocab_size, c)
    assert params["h.1.wqkv"].shape == (c, 3 * c)
    assert params["h.1.w2"].shape == (4 * c, c)
    assert count_params(cfg) == sum(p.size for p in params.values())


def test_preset_sizes() -> None:
    assert 3_500_000 < count_params(PRESETS["small"]) < 4_500_000
    assert PRESETS["medium"].head_dim == 64 and PRESETS["tiny"].head_dim == 16
    with pytest.raises(ConfigError, match="unknown model preset"):
        preset("huge")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"width": 96}, "power of 4"),  # head dim 24
        ({"width": 128}, "power of 4"),  # head dim 32 is a power of 2 but not of 4
        ({"heads": 3}, "not divisible"),
        ({"layers": 0}, "positive integer"),
        ({"vocab_size": 2**24}, "below 2\\^24"),
    ],
)
def test_config_validation(changes: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TINY.replace(**changes)


def test_init_reproducible_and_follows_the_spec() -> None:
    a, b, c = init_params(TINY, 5), init_params(TINY, 5), init_params(TINY, 6)
    for name in a:
        assert a[name].tobytes() == b[name].tobytes()
    assert a["wte"].tobytes() != c["wte"].tobytes()
    # tensor 5 in order is h.0.wo: std 0.02 / sqrt(2L), uniform amplitude std * sqrt(3)
    index = param_names(TINY).index("h.0.wo")
    u = prng.uniform(prng.key(5, 0, index), a["h.0.wo"].size)
    amp = np.float32(init_std(TINY, "h.0.wo") * np.sqrt(np.float32(3)))
    expected = ((u * np.float32(2)) - np.float32(1)) * amp
    assert a["h.0.wo"].reshape(-1).tobytes() == expected.tobytes()
    assert np.all(a["gf"] == 1) and np.all(a["h.1.g2"] == 1)
    assert float(np.abs(a["wpe"]).max()) <= 0.01 * 3**0.5


def test_forward_logits_equal_the_logits_of_the_loss() -> None:
    params = init_params(TINY, 2)
    x, y = _batch(TINY)
    logits = forward_logits(params, TINY, x)
    assert logits.shape == (TINY.batch, TINY.seq_len, TINY.vocab_size)
    n = TINY.tokens
    loss_from_logits, _ = gpt.cross_entropy(logits.reshape(n, -1).copy(), y.reshape(n))
    loss, _ = forward_backward(params, TINY, x, y)
    assert loss.tobytes() == loss_from_logits.tobytes()
    # causal: the first positions do not see later tokens
    x2 = x.copy()
    x2[:, -1] = (x2[:, -1] + 1) % TINY.vocab_size
    logits2 = forward_logits(params, TINY, x2)
    assert logits2[:, :-1].tobytes() == logits[:, :-1].tobytes()


def test_float32_everywhere_and_repeatable() -> None:
    params = init_params(TINY, 3)
    x, y = _batch(TINY, 1)
    loss, grads = forward_backward(params, TINY, x, y)
    loss2, grads2 = forward_backward(params, TINY, x, y)
    assert isinstance(loss, np.float32)
    assert list(grads) == param_names(TINY)
    for name, g in grads.items():
        assert g.dtype == np.float32, name
        assert params[name].dtype == np.float32, name
        assert g.shape == param_shapes(TINY)[name]
        assert np.all(np.isfinite(g)), name
        assert g.tobytes() == grads2[name].tobytes(), name
    assert loss.tobytes() == loss2.tobytes()
    assert abs(float(loss) - np.log(TINY.vocab_size)) < 0.5  # near uniform at init


def test_short_sequences_and_bad_inputs() -> None:
    params = init_params(TINY, 3)
    x, y = _batch(TINY, 2)
    loss, grads = forward_backward(params, TINY, x[:, :10], y[:, :10])
    assert np.isfinite(loss)
    assert np.all(grads["wpe"][10:] == 0)
    with pytest.raises(ValueError, match="token ids"):
        forward_logits(params, TINY, x + TINY.vocab_size)
    with pytest.raises(ValueError, match="outside"):
        forward_logits(params, TINY, np.zeros((1, TINY.seq_len + 1), dtype=np.int64))


def test_scatter_add_runs_in_flat_position_order() -> None:
    """np.add.at on float32 adds the rows one by one in index order (the spec's order)."""
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 5, 400)
    rows = (rng.standard_normal((400, 7)) * 10.0 ** rng.integers(-6, 6, (400, 1))).astype(
        np.float32
    )
    fast = np.zeros((5, 7), dtype=np.float32)
    np.add.at(fast, idx, rows)
    slow = np.zeros((5, 7), dtype=np.float32)
    for i, row in zip(idx, rows, strict=True):
        slow[i] = slow[i] + row
    assert fast.tobytes() == slow.tobytes()
    # and the order matters for these values, so the check above is not vacuous
    rev = np.zeros((5, 7), dtype=np.float32)
    for i, row in zip(idx[::-1], rows[::-1], strict=True):
        rev[i] = rev[i] + row
    assert rev.tobytes() != slow.tobytes()


def test_row_blocking_changes_no_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    params = init_params(TINY, 4)
    x, y = _batch(TINY, 3)
    loss, grads = forward_backward(params, TINY, x, y)
    for block in (1, 1 << 30):  # one row (or head) per block; everything in one block
        monkeypatch.setattr(gpt, "BLOCK_ELEMENTS", block)
        loss2, grads2 = forward_backward(params, TINY, x, y)
        assert loss2.tobytes() == loss.tobytes()
        for name, g in grads.items():
            assert grads2[name].tobytes() == g.tobytes(), name


FORBIDDEN = {
    "exp", "log", "log1p", "expm1", "tanh", "power", "pow", "float_power", "sum", "mean",
    "matmul", "dot", "einsum", "inner", "tensordot", "float64", "double", "exp2", "cumsum",
}  # fmt: skip


@pytest.mark.parametrize("module", ["daisychain.model.gpt", "daisychain.optim"])
def test_contract_code_uses_only_pinned_operations(module: str) -> None:
    """No platform transcendental, float BLAS, unpinned reduction or float64 in contract code."""
    import ast
    import importlib
    import inspect

    tree = pyast.parse(inspect.getsource(importlib.import_module(module)))
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            bad.append(f"line {node.lineno}: @")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "np"
            and node.attr in FORBIDDEN
        ):
            bad.append(f"line {node.lineno}: np.{node.attr}")
        if isinstance(node, ast.Attribute) and node.attr in ("sum", "mean", "dot", "cumsum"):
            bad.append(f"line {node.lineno}: .{node.attr}")
    assert not bad, bad
