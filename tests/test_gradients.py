"""Gradients: the float64 oracle against finite differences, then the contract against it.

The int8 path's gradients differ from exact float gradients by its forward quantization (the
activations themselves differ) and the two-limb backward; docs/MODEL.md states the cosines.
"""

from __future__ import annotations

import numpy as np
import pytest

from daisychain.model import PRESETS, forward_backward, init_params, reference

TINY = PRESETS["tiny"].replace(vocab_size=256)
MIN_COSINE = 0.99


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (TINY.batch, TINY.seq_len)
    return rng.integers(0, TINY.vocab_size, shape), rng.integers(0, TINY.vocab_size, shape)


def test_reference_backward_matches_finite_differences() -> None:
    params = reference.cast_params(init_params(TINY, 11), np.float64)
    x, y = _data(1)
    _, grads, _ = reference.forward_backward(params, TINY, x, y)
    rng = np.random.default_rng(2)
    h = 1e-6
    worst = 0.0
    for name, g in grads.items():
        for _ in range(4):
            idx = tuple(int(rng.integers(0, s)) for s in g.shape)
            if name == "wte":  # a row that is used both as input embedding and output
                idx = (int(x[0, 0]), idx[1])
            old = params[name][idx]
            params[name][idx] = old + h
            plus = float(reference.forward_backward(params, TINY, x, y, need_grads=False)[0])
            params[name][idx] = old - h
            minus = float(reference.forward_backward(params, TINY, x, y, need_grads=False)[0])
            params[name][idx] = old
            fd = (plus - minus) / (2 * h)
            err = abs(fd - float(g[idx])) / (abs(fd) + 1e-7)
            worst = max(worst, err)
            assert err < 1e-3, f"{name}{idx}: analytic {g[idx]:.9g} vs finite difference {fd:.9g}"
    print(f"\nworst relative error against finite differences: {worst:.2e}")


@pytest.mark.parametrize("seed", [11, 12])
def test_contract_gradients_match_the_float64_reference(seed: int) -> None:
    params = init_params(TINY, seed)
    x, y = _data(seed)
    loss, grads = forward_backward(params, TINY, x, y)
    ref_loss, ref_grads, _ = reference.forward_backward(
        reference.cast_params(params, np.float64), TINY, x, y
    )
    assert abs(float(loss) - float(ref_loss)) < 1e-2 * float(ref_loss)
    print(f"\nloss contract {float(loss):.6f} reference {float(ref_loss):.6f}")
    failures = []
    for name, g in grads.items():
        a = g.astype(np.float64).ravel()
        b = ref_grads[name].ravel()
        cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
        print(f"  {name:10s} cosine {cosine:.5f}  relative error {rel:.4f}")
        if cosine < MIN_COSINE:
            failures.append(f"{name}: {cosine:.5f}")
    assert not failures, f"cosine below {MIN_COSINE}: {failures}"
