"""A forward or backward chain's outputs handed out in the model's order (``gpu.live``,
``forward_chain.py``, ``backward_chain.py``).

The forward chain runs every product of a forward before the host asks for one. The model then
asks as it always does: per block ``attention_qkv`` and ``block_tail``, then the logits product.
``ForwardReplay`` answers each call from the chain's outputs, after two checks:

- the call's inputs that the host uploaded (the weights, their exponents, the gains went in with
  the plan) are the ones the chain used; if not, the call is not the one the chain ran, and the
  replay is dropped (the caller computes as if there were none: nothing is trusted by position);
- the operand the GPU made for that product (a later block's ``a``, the merged heads ``o``, the
  final norm's output; a gradient's limbs) equals the host's own, row by row; the rows that
  differ are returned and the caller refuses the step before trusting a product computed from
  them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from daisychain.gpu.backward_chain import BackwardChainOut, PairOperands, PairOut
from daisychain.gpu.block_chain import BlockChainOut
from daisychain.gpu.forward_chain import BlockWeights, ForwardChainOut, GpuOperand
from daisychain.gpu.qkv_chain import QkvChainOut

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]
Rows = npt.NDArray[np.bool_]  # per row of an operand: whether the GPU's differs from the host's
Exps = npt.NDArray[np.integer]


@dataclass(frozen=True)
class Inputs:
    """What the host uploaded for one forward chain run: the first block's operand, the blocks'
    weights and wte (V, C)."""

    a: GpuOperand
    blocks: tuple[BlockWeights, ...]
    wte8: Int8Array


def _differs(op: GpuOperand, q8: Int8Array, e: Exps) -> Rows:
    """Rows where the GPU's operand (or its status) differs from the host's ``q8``/``e``."""
    wrong: Rows = np.any(op.q8 != q8.reshape(op.q8.shape), axis=1)
    wrong |= op.e.reshape(-1) != np.asarray(e).reshape(-1)
    wrong |= op.status != 0
    return wrong


def _same(*pairs: tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]]) -> bool:
    return all(np.array_equal(np.ravel(x), np.ravel(y)) for x, y in pairs)


class ForwardReplay:
    """One forward chain run's outputs, each taken once, in order: per block ("qkv", "tail"),
    then "logits"."""

    def __init__(self, out: ForwardChainOut, inputs: Inputs) -> None:
        self.out, self.inputs = out, inputs
        self._next: deque[tuple[str, int]] = deque()
        for i in range(len(out.blocks)):
            self._next += [("qkv", i), ("tail", i)]
        self._next.append(("logits", len(out.blocks)))
        self.dropped = False

    def _take(self, kind: str) -> int | None:
        """The block of the next output if it is a ``kind``; else the replay is dropped (the
        model asked for something the chain did not run in this order)."""
        if self.dropped or not self._next:
            return None
        if self._next[0][0] != kind:
            self._drop()
            return None
        return self._next.popleft()[1]

    def _drop(self) -> None:
        self.dropped = True

    @property
    def done(self) -> bool:
        """Every output was taken (or the replay was dropped)."""
        return self.dropped or not self._next

    def _a_operand(self, i: int) -> GpuOperand:
        return self.inputs.a if i == 0 else self.out.blocks[i - 1].a_next

    def qkv(
        self, a8: Int8Array, a_e: Exps, w8: Int8Array, w_e: Exps
    ) -> tuple[QkvChainOut, Rows] | None:
        """Block i's qkv chain outputs for the host's operand ``a8``/``a_e`` and weights, with
        the rows where the GPU's ``a`` differs; None if this is not the call the chain ran."""
        i = self._take("qkv")
        if i is None:
            return None
        w = self.inputs.blocks[i]
        if not _same((w8, w.wqkv8), (w_e, w.wqkv_e)):
            self._drop()
            return None
        return self.out.blocks[i].qkv, _differs(self._a_operand(i), a8, a_e)

    def tail(
        self,
        o8: Int8Array,
        o_e: Exps,
        weights: tuple[Int8Array, Exps, Int8Array, Exps, Int8Array],
        g: npt.NDArray[np.float32],
    ) -> tuple[BlockChainOut, Rows] | None:
        """Block i's block chain outputs for the host's merged heads ``o8``/``o_e``, weights
        (wo8, wo_e, w1_8, w1_e, w2_8) and gain ``g``, with the rows where the GPU's ``o``
        differs; None if this is not the call the chain ran."""
        i = self._take("tail")
        if i is None:
            return None
        w = self.inputs.blocks[i]
        wo8, wo_e, w1_8, w1_e, w2_8 = weights
        if not _same((wo8, w.wo8), (wo_e, w.wo_e), (w1_8, w.w1_8), (w1_e, w.w1_e),
                     (w2_8, w.w2_8), (g, w.g2)):  # fmt: skip
            self._drop()
            return None
        return self.out.blocks[i].tail, _differs(self.out.blocks[i].o, o8, o_e)

    def logits(self, a8: Int8Array, b8: Int8Array) -> tuple[Int32Array, Rows] | None:
        """The logits product for the host's final operand ``a8`` (N, C) and ``b8`` = wte^T
        (C, V), with the rows where the GPU's operand differs; None if this is not it."""
        if a8.ndim != 2 or b8.shape != self.inputs.wte8.T.shape:
            return None
        i = self._take("logits")
        if i is None:
            return None
        if not np.array_equal(b8, self.inputs.wte8.T):
            self._drop()
            return None
        last = self.out.blocks[i - 1].a_next
        wrong: Rows = np.any(last.q8 != a8, axis=1) | (last.status != 0)
        return self.out.logits, wrong


# The backward's pairs in the model's order, per block from the last (``gpt.forward_backward``).
BLOCK_PAIRS = ("w2", "w1", "wo", "pv", "qk", "qkv")


class BackwardReplay:
    """One backward chain run's pairs, each taken once, in the model's order: the logits', then
    per block from the last ``BLOCK_PAIRS``."""

    def __init__(self, out: BackwardChainOut, inputs: dict[str, PairOperands]) -> None:
        self.out, self.inputs = out, inputs
        self._next: deque[str] = deque(["logits"])
        for i in reversed(range(len(out.blocks))):
            self._next += [f"{i}.{name}" for name in BLOCK_PAIRS]
        self.dropped = False

    @property
    def done(self) -> bool:
        return self.dropped or not self._next

    def _pair_out(self, key: str) -> PairOut:
        if key == "logits":
            return self.out.logits
        block, name = key.split(".")
        pair: PairOut = getattr(self.out.blocks[int(block)], name)
        return pair

    def pair(
        self, operands: list[tuple[Int8Array, Int8Array]]
    ) -> tuple[list[Int32Array], Rows] | None:
        """The next pair's two products for the host's int8 operands ((a8, b8) each: dA's are
        (limbs, B), dB's (A, limbs), in either order), with the gradient's rows (then columns)
        where the GPU's limbs differ; None if this is not the pair the chain ran (the replay is
        dropped)."""
        if self.dropped or not self._next or len(operands) != 2:
            return None
        key = self._next.popleft()
        pair, up = self._pair_out(key), self.inputs[key]
        limbs, slices, m, n = pair.rows8.shape
        outs: list[Int32Array] = []
        wrong_rows = pair.rows_status.reshape(-1) != 0
        wrong_cols = pair.cols_status.reshape(-1) != 0
        for a8, b8 in operands:
            # the forward operand says which product it is (an int8 GEMM's operands come
            # broadcast to one shape: the limbs' axis first)
            if _is(b8, a8.ndim, up.b_t, transposed=True):  # dA = limbs @ B
                mine = a8.reshape(limbs, slices, m, n)
                wrong_rows |= np.any(mine != pair.rows8, axis=(0, 3)).reshape(-1)
                outs.append(pair.acc_a.reshape(limbs, *a8.shape[1:-1], -1))
            elif _is(a8, b8.ndim, up.a, transposed=False):  # dB = A @ limbs
                mine = b8.reshape(limbs, slices, m, n)
                wrong_cols |= np.any(mine != pair.cols8, axis=(0, 2)).reshape(-1)
                outs.append(pair.acc_b.reshape(limbs, *b8.shape[1:-2], -1, n))
            else:
                break
        if len(outs) != 2:
            self.dropped = True
            return None
        return outs, np.concatenate([wrong_rows, wrong_cols])


def _is(other: Int8Array, ndim: int, uploaded: Int8Array, *, transposed: bool) -> bool:
    """Whether a product's forward operand (possibly broadcast over the limbs' axis, when it has
    the limbs' ``ndim``) is the one the chain uploaded (B's transpose or A, (S or 1, rows,
    columns))."""
    one = other[0] if other.ndim == ndim else other
    slices = one.reshape(-1, *one.shape[-2:])
    if transposed:
        slices = np.swapaxes(slices, 1, 2)
    return slices.shape == uploaded.shape and bool(np.array_equal(slices, uploaded))
