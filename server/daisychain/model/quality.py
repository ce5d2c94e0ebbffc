"""Gradient quality against float64: the measurements of docs/NUMERICS.md section 6.

Not part of the contract (float64 and BLAS on non-integer data are used freely here). Three
measurements, shared by the suite (tests/model/test_gradients.py) and ``daisychain bench
converge``:

- ``ExactBackwardOps``: the contract's forward (same int8 activations and weights) with every
  backward product computed in float64 on the unquantized gradient. The contract's gradient minus
  this one is exactly the error of the backward's limb quantization, with the forward's own
  (deterministic, weight-dependent) quantization error taken out.
- ``bias_ratio``: over K batches, ``|mean_k err_k| / mean_k |err_k| * sqrt(K)``. Independent
  noise gives about 1; an error that repeats from batch to batch (a bias) grows like sqrt(K).
- ``logits_lost``: the share of the logits gradient's norm that its limb quantization loses,
  ``|deq(Q(G)) - G| / |G|`` for the gradient operand G of each of the logits product's two
  backward products, and the relative error that loss leaves in those products,
  ``|deq(Q(G)) @ B - G @ B| / |G @ B|`` (the larger of the two products is reported for each).
  The second is the sharper one: the lost entries (the softmax tail) are small but share a sign,
  so they add up in the product.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.model import gpt
from daisychain.model.config import ModelConfig
from daisychain.model.ops import NumpyOps
from daisychain.model.params import Params
from daisychain.numerics.quant import LO_SHIFT, quantize2, quantize3

F64 = npt.NDArray[np.float64]
FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]


def _fold(g: FloatArray, fold_e: IntArray) -> F64:
    return g.astype(np.float64) * np.ldexp(1.0, fold_e.astype(np.int64))


class ExactBackwardOps(NumpyOps):
    """The reference forward products; backward products exact in float64, no gradient limbs."""

    name = "exact-backward"

    def grad_left(
        self,
        g: FloatArray,
        fold_e: IntArray,
        b_q: FloatArray,
        limbs: int = 2,
        *,
        b8: npt.NDArray[np.int8] | None = None,
    ) -> FloatArray:
        out: FloatArray = np.matmul(_fold(g, fold_e), b_q.astype(np.float64)).astype(np.float32)
        return out

    def grad_right(
        self,
        a_q: FloatArray,
        fold_e: IntArray,
        g: FloatArray,
        limbs: int = 2,
        *,
        a8: npt.NDArray[np.int8] | None = None,
    ) -> FloatArray:
        out: FloatArray = np.matmul(a_q.astype(np.float64), _fold(g, fold_e)).astype(np.float32)
        return out


def dequantized_limbs(x: FloatArray, axis: int, limbs: int) -> F64:
    """What the products see of ``x`` after its ``limbs``-limb quantization (float64, exact)."""
    if limbs == 3:
        hi, mid, lo, e = quantize3(x.copy(), axis)
        q = (hi.astype(np.float64) * 256.0 + mid) * 256.0 + lo
        return q * np.ldexp(1.0, (e - 2 * LO_SHIFT).astype(np.int64))
    hi2, lo2, e2 = quantize2(x.copy(), axis)
    return (hi2.astype(np.float64) * 256.0 + lo2) * np.ldexp(1.0, (e2 - LO_SHIFT).astype(np.int64))


class _LogitsCapture(NumpyOps):
    """Reference products that record the lost share of each (N, V) gradient operand."""

    name = "numpy"

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.shares: list[float] = []  # operand: |deq(Q(G)) - G| / |G|
        self.product_errors: list[float] = []  # product: |deq(Q(G)) @ B - G @ B| / |G @ B|

    def _record(
        self, g: FloatArray, fold_e: IntArray, other: FloatArray, limbs: int, left: bool
    ) -> None:
        folded = _fold(g, fold_e)
        exact = folded.astype(np.float32)  # the fold is an exact power-of-two multiply
        seen = dequantized_limbs(exact, -1 if left else -2, limbs)
        lost = float(np.linalg.norm(seen - folded))
        self.shares.append(lost / max(float(np.linalg.norm(folded)), 1e-300))
        o = other.astype(np.float64)
        want, got = (folded @ o, seen @ o) if left else (o @ folded, o @ seen)
        err = float(np.linalg.norm(got - want))
        self.product_errors.append(err / max(float(np.linalg.norm(want)), 1e-300))

    def grad_left(
        self,
        g: FloatArray,
        fold_e: IntArray,
        b_q: FloatArray,
        limbs: int = 2,
        *,
        b8: npt.NDArray[np.int8] | None = None,
    ) -> FloatArray:
        if g.shape[-1] == self.vocab:
            self._record(g, fold_e, b_q, limbs, left=True)
        return super().grad_left(g, fold_e, b_q, limbs)

    def grad_right(
        self,
        a_q: FloatArray,
        fold_e: IntArray,
        g: FloatArray,
        limbs: int = 2,
        *,
        a8: npt.NDArray[np.int8] | None = None,
    ) -> FloatArray:
        if g.shape[-1] == self.vocab:
            self._record(g, fold_e, a_q, limbs, left=False)
        return super().grad_right(a_q, fold_e, g, limbs)


def logits_lost(
    params: Params, cfg: ModelConfig, x: Any, y: Any, limbs: int = gpt.LOGITS_LIMBS
) -> tuple[float, float]:
    """(lost-norm share, product error) of the logits gradient on one batch, the larger of its
    two backward products each: how much of G's norm its limbs lose, and how far the products
    of the limbs are from the products of the exact G (the part that reaches the gradients)."""
    cap = _LogitsCapture(cfg.vocab_size)
    gpt.forward_backward(params, cfg, x, y, cap, logits_limbs=limbs)
    return max(cap.shares), max(cap.product_errors)


def logits_lost_share(
    params: Params, cfg: ModelConfig, x: Any, y: Any, limbs: int = gpt.LOGITS_LIMBS
) -> float:
    """The larger lost-norm share of the logits gradient's two backward operands on one batch."""
    return logits_lost(params, cfg, x, y, limbs)[0]


def bias_ratio(errors: list[F64]) -> float:
    """``|mean err| / mean |err| * sqrt(K)`` over K flattened error vectors: ~1 for independent
    noise, growing like sqrt(K) times the bias's share of the error for a bias."""
    k = len(errors)
    if k < 2:
        raise ValueError("bias_ratio needs at least two batches")
    per = float(np.mean([np.linalg.norm(e) for e in errors]))
    if per == 0.0:
        return 0.0
    mean = np.mean(np.stack(errors), axis=0)
    return float(np.linalg.norm(mean) / per * np.sqrt(k))


def cosine(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    den = float(np.linalg.norm(a64) * np.linalg.norm(b64))
    return float(a64 @ b64 / den) if den > 0 else 1.0
