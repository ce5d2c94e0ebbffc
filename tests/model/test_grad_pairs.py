"""A layer's two backward products computed together (``GemmOps.grads``), with the bits of two
separate calls.

``IntGemmOps`` hands both products of a pair (the weight and the input gradient of a linear
layer; the two of each attention product) to a GEMM that takes several at once, one call for
both (on wgpu: one submit and one readback, ``tests/gpu/test_gpu_batched.py``). The GEMM here is
exact int64 numpy behind that interface, so what is tested is the pairing itself: the operands
each product gets, the order of the results, and the float work around them, on the fused and
on numpy's passes, against ``grad_left``/``grad_right`` one at a time and the reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from daisychain import training
from daisychain.cpu import fused as cpufused
from daisychain.model import gpt
from daisychain.model.config import preset
from daisychain.model.ops import NUMPY_OPS, Grad, IntGemmOps, NumpyOps, Passes, Product, one_by_one
from daisychain.numerics.quant import quantize
from daisychain.optim import AdamWConfig


def _exact(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
    return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)


class ExactGemm:
    """An exact int8 GEMM with the three entry points ``IntGemmOps`` uses; ``calls`` records
    how many products each call of ``many`` carried."""

    def __init__(self, plant: bool = False) -> None:
        self.calls: list[int] = []
        self.plant = plant

    def one(self, a: npt.NDArray[Any], b: npt.NDArray[Any]) -> npt.NDArray[np.int32]:
        return _exact(a, b)

    def batched(self, a: Any, b: Any, *, a8: Any = None, b8: Any = None) -> npt.NDArray[np.int32]:
        return _exact(a if a8 is None else a8, b if b8 is None else b8)

    def many(self, products: list[Product]) -> list[npt.NDArray[np.int32]]:
        self.calls.append(len(products))
        outs = [self.batched(a, b, a8=a8, b8=b8) for a, b, a8, b8 in products]
        if self.plant:  # one unit in the first cell of the last product of every call
            outs[-1] = outs[-1].copy()
            outs[-1].flat[0] += 1
        return outs


def _ops(gemm: ExactGemm, passes: Passes | None) -> IntGemmOps:
    return IntGemmOps("pairs", gemm.one, gemm.batched, None, passes, gemm.many)


@pytest.fixture(scope="module")
def fused() -> cpufused.FusedPasses | None:
    passes, why = cpufused.proven()
    if passes is None:
        pytest.skip(f"no fused passes here: {why}")
    return passes


def _f32(seed: int, shape: tuple[int, ...]) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _pair(lead: tuple[int, ...], n: int, c_in: int, c_out: int, limbs: int) -> list[Grad]:
    """dW = x^T dy and dx = dy W^T of y = x @ W (``lead`` batches them, as attention does)."""
    x_q, x_e = quantize(_f32(1, (*lead, n, c_in)), -1)
    w_q, w_e = quantize(_f32(2, (*lead, c_in, c_out)), -2)
    dy = _f32(3, (*lead, n, c_out))
    x_t, w_t = np.swapaxes(x_q, -1, -2), np.swapaxes(w_q, -1, -2)
    return [Grad(False, dy, x_e, x_t, limbs), Grad(True, dy, w_e, w_t, limbs)]


def _bits(x: npt.NDArray[Any]) -> npt.NDArray[np.uint32]:
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("which", ["fused", "numpy"])
@pytest.mark.parametrize(
    ("lead", "limbs"), [((), 2), ((), 3), ((2, 3), 2)], ids=["2-D", "3 limbs", "batched"]
)
def test_a_pair_gives_the_bits_of_two_separate_calls_in_one_gemm_call(
    fused: cpufused.FusedPasses, which: str, lead: tuple[int, ...], limbs: int
) -> None:
    gemm = ExactGemm()
    ops = _ops(gemm, fused if which == "fused" else None)
    jobs = _pair(lead, 9, 7, 5, limbs)
    together = ops.grads(jobs)
    assert gemm.calls == [2], "both products in one call"
    separately = one_by_one(ops, jobs)
    reference = one_by_one(NUMPY_OPS, jobs)
    for got, sep, want in zip(together, separately, reference, strict=True):
        assert got.shape == want.shape and got.dtype == np.float32
        assert np.array_equal(_bits(got), _bits(sep)) and np.array_equal(_bits(got), _bits(want))


def test_a_single_product_or_a_gemm_without_many_goes_one_by_one() -> None:
    gemm = ExactGemm()
    jobs = _pair((), 6, 4, 3, 2)
    ops = _ops(gemm, None)
    [alone] = ops.grads(jobs[:1])
    assert gemm.calls == [] and np.array_equal(_bits(alone), _bits(one_by_one(NUMPY_OPS, jobs)[0]))
    plain = IntGemmOps("no many", gemm.one, gemm.batched)
    assert [r.shape for r in plain.grads(jobs)] == [(4, 3), (6, 4)] and gemm.calls == []


def test_a_pair_refuses_a_limb_count_the_contract_has_not() -> None:
    gemm = ExactGemm()
    jobs = _pair((), 6, 4, 3, 4)  # 2 or 3 limbs only (docs/NUMERICS.md section 6)
    with pytest.raises(ValueError, match="limbs"):
        _ops(gemm, None).grads(jobs)
    assert gemm.calls == [], "refused before any product"


def _hashes(ops: Any, steps: int = 2) -> list[str]:
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    if ops is not None:
        state.ops = ops
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    out = []
    for _ in range(steps):
        x, y = training.next_batch(state, tokens)
        out.append(training.train_step(state, x, y).hash)
    return out


@pytest.mark.parametrize("which", ["fused", "numpy"])
def test_training_through_pairs_keeps_the_references_bits(
    fused: cpufused.FusedPasses, which: str
) -> None:
    cfg = preset("tiny")
    gemm = ExactGemm()
    got = _hashes(_ops(gemm, fused if which == "fused" else None))
    assert got == _hashes(None)
    # every backward product went in a pair: six per layer (four linear layers' and attention's
    # two) and the logits', in each step
    assert gemm.calls == [2] * (6 * cfg.layers + 1) * 2


def test_a_pair_whose_second_product_is_one_unit_off_changes_the_run() -> None:
    """The control for the test above: the hashes see one unit in one cell of the second
    product of each pair (so the comparison there can fail)."""
    assert _hashes(_ops(ExactGemm(plant=True), None), 1) != _hashes(None, 1)


def test_the_model_hands_each_layer_its_pair() -> None:
    """gpt's backward asks for its products in pairs, weight gradient first where the old
    order had it (the audit's rotation counters see the same order)."""
    cfg = preset("tiny")
    seen: list[list[bool]] = []

    class Recorder(NumpyOps):
        def grads(self, jobs: Any) -> Any:
            seen.append([j.left for j in jobs])
            return super().grads(jobs)

    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    x, y = training.next_batch(state, tokens)
    gpt.forward_backward(state.params, cfg, x, y, Recorder())
    linear, values, scores = [False, True], [False, True], [True, False]
    per_layer = [linear, linear, linear, linear, values, scores]
    assert len(seen) == 6 * cfg.layers + 1
    assert sorted(map(tuple, seen)) == sorted(map(tuple, [linear] + per_layer * cfg.layers))
