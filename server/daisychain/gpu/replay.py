"""A forward chain's outputs handed out in the model's order (``gpu.live``, ``forward_chain.py``).

The forward chain runs every product of a forward before the host asks for one. The model then
asks as it always does: per block ``attention_qkv`` and ``block_tail``, then the logits product.
``ForwardReplay`` answers each call from the chain's outputs, after two checks:

- the call's inputs that the host uploaded (the weights, their exponents, the gains went in with
  the plan) are the ones the chain used; if not, the call is not the one the chain ran, and the
  replay is dropped (the caller computes as if there were none: nothing is trusted by position);
- the operand the GPU made for that product (a later block's ``a``, the merged heads ``o``, the
  final norm's output) equals the host's own, row by row; the rows that differ are returned and
  the caller refuses the step before trusting a product computed from them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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
