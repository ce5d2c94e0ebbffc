"""The model's three product kinds, behind one small interface so any exact int8 GEMM can
compute them (docs/KERNELS.md, "In training (Python)").

``GemmOps`` is the seam: ``qmatmul``, the two backward products (docs/NUMERICS.md sections 3
and 6) and the quantization of their operands. ``NUMPY_OPS`` is the reference
(``daisychain.numerics``: exact integer products through float32 BLAS). ``IntGemmOps`` builds
the same products from any exact int8 x int8 -> int32 GEMM (the gated wgpu kernels of
``daisychain.gpu``, the CPU's int8 units of ``cpuint8``), with the quantization and
dequantization around it done by the reference's functions or by fused passes gated to the
same bits (``Passes``: ``cpufused``). Where a GPU offers them, chains run a block's or a whole
step's products and the work between them in one submit (``ForwardPlan``, ``BackwardPlan``:
what they depend on; the ``*_separately`` functions: the same work one product at a time), and
the host checks every operand they return. The bits are the contract's whichever device did
the work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from daisychain.numerics import gemm as ref
from daisychain.numerics.quant import (
    LO_SHIFT,
    FloatArray,
    IntArray,
    pow2,
    quantize,
    quantize2,
    quantize3,
)

MatmulInt = Callable[[npt.NDArray[np.int8], npt.NDArray[np.int8]], npt.NDArray[np.int32]]
# (..., M, K) @ (..., K, N) of int8-valued float32 operands (as the ops hold them) in one call,
# exact int32 out: a GEMM that takes whole batches (the CPU int8 GEMM, gpu.live's audited form).
# Keywords ``a8``/``b8``: the same operands already as C-contiguous int8, when the caller has
# them (the fused quantizer writes both), so the GEMM does not cast them again.
MatmulBatched = Callable[..., npt.NDArray[np.int32]]
# One product for a ``MatmulMany``: (a, b, a8, b8) as a ``MatmulBatched`` takes them (a8/b8 None
# where the caller has no int8 values), and the GEMM taking several of them in one call.
Product = tuple[Any, Any, npt.NDArray[np.int8] | None, npt.NDArray[np.int8] | None]
MatmulMany = Callable[[Sequence[Product]], list[npt.NDArray[np.int32]]]


class Passes(Protocol):
    """The quantize and dequantize around a batched product done in fused passes, the same bits
    as ``numerics.quant`` and ``numerics.gemm.round_scaled`` (``cpufused.FusedPasses``, gated)."""

    def quantize_limbs(
        self,
        g: FloatArray,
        fold_e: IntArray | None,
        axis: int,
        limbs: int,
        *,
        floats: bool = True,
    ) -> tuple[FloatArray | None, npt.NDArray[np.int8], IntArray]: ...

    def dequantize(
        self, parts: npt.NDArray[np.int32], row_e: IntArray | None, col_e: IntArray | None
    ) -> FloatArray: ...


Int8Array = npt.NDArray[np.int8]


@dataclass(frozen=True)
class Grad:
    """One backward product for ``GemmOps.grads``: ``grad_left(g, fold_e, other, limbs,
    b8=other8)`` when ``left``, else ``grad_right(other, fold_e, g, limbs, a8=other8)``."""

    left: bool
    g: FloatArray
    fold_e: IntArray
    other: FloatArray
    limbs: int = 2
    other8: Int8Array | None = None


@dataclass(frozen=True)
class MlpOut:
    """The MLP of a block between its input and the residual add (docs/MODEL.md section 4,
    steps 8-9): what the forward adds and what the backward keeps."""

    relu: npt.NDArray[np.bool_]  # (N, F) u > 0
    r_q: FloatArray  # (N, F) r = relu(u), quantized per row (integers as float32)
    r_e: IntArray  # (N, 1)
    r8: Int8Array | None  # r_q as int8 where the ops made it (see GemmOps.quantize)
    y: FloatArray  # (N, C) qmatmul(r, w2)


def relu_in_place(u: FloatArray) -> npt.NDArray[np.bool_]:
    """``u`` becomes r = u where u > 0, else +0 (negatives and -0 alike); returns u > 0."""
    relu = u > 0
    np.multiply(u, relu, out=u)  # u * 1 = u; u * 0 = -0 for negative u
    u += np.float32(0.0)  # -0 + 0 = +0; any other value unchanged
    return relu


def mlp_separately(
    ops: GemmOps,
    b_q: FloatArray,
    b_e: IntArray,
    w1: tuple[FloatArray, IntArray, Int8Array | None],
    w2: tuple[FloatArray, IntArray, Int8Array | None],
    *,
    b8: Int8Array | None = None,
) -> MlpOut:
    """``ops.mlp`` as its two products, one after the other, with the work between them here."""
    u = ops.qmatmul(b_q, b_e, w1[0], w1[1], a8=b8, b8=w1[2])
    relu = relu_in_place(u)
    r_q, r_e, r8 = ops.quantize(u, -1)
    y = ops.qmatmul(r_q, r_e, w2[0], w2[1], a8=r8, b8=w2[2])
    return MlpOut(relu, r_q, r_e, r8, y)


@dataclass(frozen=True)
class AttnOut:
    """Attention between its operands and the merge of heads (docs/MODEL.md section 4, steps
    4-6): the softmax the backward keeps, its quantized form, and the heads' outputs."""

    p: FloatArray  # (B, H, T, T) softmax probabilities
    p_q: FloatArray  # (B, H, T, T) P quantized per query (integers as float32)
    p_e: IntArray  # (B, H, T, 1)
    p8: Int8Array | None  # p_q as int8 where the ops made it
    o: FloatArray  # (B, H, T, hd) qmatmul(P, v)


# A quantized operand as the model holds it: (q, e, q8), q8 None where the ops made no int8.
QParts = tuple[FloatArray, IntArray, Int8Array | None]


def attention_separately(
    ops: GemmOps, q: QParts, kt: QParts, v: QParts, softmax: Callable[[FloatArray], FloatArray]
) -> AttnOut:
    """``ops.attention`` as its two products, one after the other, ``softmax`` (the model's
    causal softmax, in place) between them."""
    s = ops.qmatmul(q[0], q[1], kt[0], kt[1], a8=q[2], b8=kt[2])
    p = softmax(s)
    p_q, p_e, p8 = ops.quantize(p, -1)
    o = ops.qmatmul(p_q, p_e, v[0], v[1], a8=p8, b8=v[2])
    return AttnOut(p, p_q, p_e, p8, o)


HeadsOf = Callable[[FloatArray], tuple[QParts, QParts, QParts]]


def transposed(k: QParts) -> QParts:
    """k^T of a quantized (..., T, hd) operand: its last two axes swapped (views)."""
    k8 = None if k[2] is None else k[2].swapaxes(-1, -2)
    return k[0].swapaxes(-1, -2), k[1].swapaxes(-1, -2), k8


def attention_qkv_separately(
    ops: GemmOps,
    a: QParts,
    wqkv: QParts,
    heads_of: HeadsOf,
    scale: np.float32,
    softmax: Callable[[FloatArray], FloatArray],
) -> tuple[AttnOut, QParts, QParts, QParts]:
    """``ops.attention_qkv`` one step after the other: the qkv product, ``heads_of`` (the model's
    split into heads and their quantization), then ``ops.attention``."""
    qkv = ops.qmatmul(a[0], a[1], wqkv[0], wqkv[1], a8=a[2], b8=wqkv[2])
    q, k, v = heads_of(qkv)
    return ops.attention(q, transposed(k), v, scale, softmax), q, k, v


# Each chain function below returns None for a shape its chain cannot hold (a buffer past one
# storage binding, a row longer than an epilogue's workgroup memory): the ops then compute it
# apart, the same bits.
# The qkv chain of a GPU (gpu.live's audited ``QkvChain``): (a, wqkv, a_e, w_e, batch, heads,
# scale, heads_operand, p_operand, a8=, w8=) -> (acc_qkv, acc1, acc2); ``heads_operand(acc_qkv)``
# is the host's (q8, q_e, k8, k_e, v8, v_e), ``p_operand(acc1)`` its (P8, P_e, P).
QkvChainFn = Callable[..., tuple[Any, Any, npt.NDArray[np.int32]] | None]


# The attention chain of a GPU (gpu.live's audited ``AttentionChain``): (q, kt, v, q_e, k_e,
# scale, operand, q8=, kt8=, v8=) -> (acc1, acc2), both exact integer products, batched over
# heads; ``operand(acc1)`` is the host's own (P8, P_e, P), checked against the chain's.
AttentionChainFn = Callable[..., tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]] | None]


@dataclass(frozen=True)
class TailOut:
    """A block after attention (docs/MODEL.md section 4, steps 7-9): what the backward keeps of
    the norm and its quantized output, and the MLP's."""

    norm: Any  # what ``norm`` returned besides its output (gpt's NormCache)
    b_q: FloatArray  # (N, C) the norm's output quantized per token (integers as float32)
    b_e: IntArray  # (N, 1)
    b8: Int8Array | None
    mlp: MlpOut


@dataclass(frozen=True)
class ForwardPlan:
    """Everything a whole forward's products depend on, from the first block's operand on
    (``GemmOps.forward_chain``): the weights quantized per output column (wte per vocab row:
    the logits product's B is its transpose), the gains, and the first block's operand ``a``
    and residual stream ``h`` (N, C) as the host made them. A GPU that runs the forward in one
    submit makes every later operand itself; the host checks each one against its own."""

    a: QParts  # (N, C) the first block's normalised input, quantized per token
    h: FloatArray  # (N, C) the residual stream before the first block (uploaded as it is now)
    wqkv: Sequence[QParts]  # per block (C, 3C)
    wo: Sequence[QParts]  # (C, C)
    w1: Sequence[QParts]  # (C, F)
    w2: Sequence[QParts]  # (F, C)
    g1: Sequence[FloatArray]  # per block (C,): the attention norm's gain
    g2: Sequence[FloatArray]  # the MLP norm's
    gf: FloatArray  # (C,) the final norm's
    eps: np.float32
    wte: QParts  # (V, C)
    batch: int
    heads: int
    scale: np.float32  # the attention scores' scale
    # The next tokens (N,) when a training step follows (its cross-entropy and backward): a GPU
    # may then run the whole step in one submit; None for a forward alone.
    targets: npt.NDArray[np.integer] | None = None


@dataclass(frozen=True)
class BlockBackPlan:
    """What one block's backward products depend on (``BackwardPlan``): its forward's operands
    (quantized), the norms' ``xhat`` (N, C) and ``inv`` (N, 1) with their gains, P and the
    ReLU's mask."""

    xhat1: FloatArray
    inv1: FloatArray
    g1: FloatArray
    a: QParts  # (N, C)
    wqkv: QParts  # (C, 3C)
    q: QParts  # (B, H, T, hd)
    k: QParts
    v: QParts
    p: FloatArray  # (B, H, T, T)
    pq: QParts
    o: QParts  # (N, C)
    wo: QParts
    xhat2: FloatArray
    inv2: FloatArray
    g2: FloatArray
    b: QParts  # (N, C)
    w1: QParts
    relu: npt.NDArray[np.bool_]  # (N, F)
    r: QParts  # (N, F)
    w2: QParts


@dataclass(frozen=True)
class BackwardPlan:
    """Everything a whole backward's products depend on, from the logits' gradient on
    (``GemmOps.backward_chain``): a GPU that runs the backward in one submit makes every later
    gradient itself; the host checks each one's limbs against its own."""

    dlogits: FloatArray  # (N, V)
    hq: QParts  # (N, C) the final norm's output, quantized
    wte: QParts  # (V, C)
    xhatf: FloatArray
    invf: FloatArray
    gf: FloatArray
    blocks: Sequence[BlockBackPlan]  # by block number
    batch: int
    heads: int
    scale: np.float32


def block_tail_separately(
    ops: GemmOps,
    o: QParts,
    wo: QParts,
    h: FloatArray,
    norm: Callable[[FloatArray], tuple[FloatArray, Any]],
    w1: QParts,
    w2: QParts,
) -> TailOut:
    """``ops.block_tail`` one step after the other: ``h += o @ wo`` (in place), the norm, its
    quantization, then ``ops.mlp``."""
    h += ops.qmatmul(o[0], o[1], wo[0], wo[1], a8=o[2], b8=wo[2])
    bn, cache = norm(h)
    b_q, b_e, b8 = ops.quantize(bn, -1)
    return TailOut(cache, b_q, b_e, b8, ops.mlp(b_q, b_e, w1, w2, b8=b8))


# The block chain of a GPU (gpu.live's audited ``BlockChain``): (o, wo, w1, w2, o_e, wo_e, w1_e,
# h, g, eps, norm_operand, mlp_operand, o8=, wo8=, w1_8=, w2_8=) -> (acc_wo, acc1, acc2);
# ``norm_operand(acc_wo)`` is the host's (b8, b_e, bn), ``mlp_operand(acc1)`` its (r8, r_e).
BlockChainFn = Callable[..., tuple[Any, Any, npt.NDArray[np.int32]] | None]


# The MLP chain of a GPU (gpu.live's audited ``MlpChain``): (b, w1, w2, row_e, col_e, operand,
# b8=, w1_8=, w2_8=) -> (acc1, acc2), the two exact integer products; ``operand(acc1)`` is the
# host's own (r8, r_e), against which the chain's are checked before acc2 is trusted.
MlpChainFn = Callable[..., tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]] | None]


def one_by_one(ops: GemmOps, jobs: Sequence[Grad]) -> list[FloatArray]:
    """``ops.grads`` as one ``grad_left``/``grad_right`` call per product, in order."""
    return [
        ops.grad_left(j.g, j.fold_e, j.other, j.limbs, b8=j.other8)
        if j.left
        else ops.grad_right(j.other, j.fold_e, j.g, j.limbs, a8=j.other8)
        for j in jobs
    ]


class GemmOps(Protocol):
    """qmatmul and the two backward products of docs/NUMERICS.md sections 3 and 6, and the
    one-limb quantization of their operands.

    ``quantize`` returns the operand's int8 values too where this implementation makes them in
    the same pass (``IntGemmOps`` with fused passes), else None; the model hands them back with
    the float32 values (``a8``/``b8``: the same integers, possibly as a transposed view) so an
    int8 GEMM does not cast them again. An implementation may ignore them.
    """

    name: str

    def quantize(
        self, x: FloatArray, axis: int
    ) -> tuple[FloatArray, IntArray, Int8Array | None]: ...

    def qmatmul(
        self,
        a_q: FloatArray,
        a_e: IntArray,
        b_q: FloatArray,
        b_e: IntArray,
        *,
        a8: Int8Array | None = None,
        b8: Int8Array | None = None,
    ) -> FloatArray: ...

    def grad_left(
        self,
        g: FloatArray,
        fold_e: IntArray,
        b_q: FloatArray,
        limbs: int = 2,
        *,
        b8: Int8Array | None = None,
    ) -> FloatArray: ...

    def grad_right(
        self,
        a_q: FloatArray,
        fold_e: IntArray,
        g: FloatArray,
        limbs: int = 2,
        *,
        a8: Int8Array | None = None,
    ) -> FloatArray: ...

    def grads(self, jobs: Sequence[Grad]) -> list[FloatArray]:
        """Independent backward products (a layer's weight and input gradients: neither reads
        the other), with the bits of one ``grad_left``/``grad_right`` call each (``one_by_one``).
        An implementation whose GEMM takes several products at once computes them together:
        on wgpu, one submit and one readback for the pair instead of two."""
        ...

    def mlp(
        self,
        b_q: FloatArray,
        b_e: IntArray,
        w1: tuple[FloatArray, IntArray, Int8Array | None],
        w2: tuple[FloatArray, IntArray, Int8Array | None],
        *,
        b8: Int8Array | None = None,
    ) -> MlpOut:
        """A block's MLP, ``qmatmul(relu(qmatmul(b, w1)) quantized per row, w2)``, with the
        bits of ``mlp_separately``; ``w1``/``w2`` are (q, e, q8) of the quantized weights. An
        implementation whose GPU runs the chain does it in one submit and one readback."""
        ...

    def attention(
        self,
        q: QParts,
        kt: QParts,
        v: QParts,
        scale: np.float32,
        softmax: Callable[[FloatArray], FloatArray],
    ) -> AttnOut:
        """Every head's scores, ``softmax`` (the model's causal softmax with scale ``scale``) and
        second product, with the bits of ``attention_separately``. An implementation whose GPU
        runs the chain does it in one submit and one readback."""
        ...

    def attention_qkv(
        self,
        a: QParts,
        wqkv: QParts,
        heads_of: HeadsOf,
        shape: tuple[int, int],
        scale: np.float32,
        softmax: Callable[[FloatArray], FloatArray],
    ) -> tuple[AttnOut, QParts, QParts, QParts]:
        """A block's attention from its normalised input: ``qmatmul(a, wqkv)``, ``heads_of`` (the
        model's split into the (batch, heads) = ``shape`` heads and their quantization), then
        ``attention``; with the bits of ``attention_qkv_separately``. Returns the attention's
        output and the quantized q, k, v."""
        ...

    def block_tail(
        self,
        o: QParts,
        wo: QParts,
        h: FloatArray,
        g: FloatArray,
        eps: np.float32,
        norm: Callable[[FloatArray], tuple[FloatArray, Any]],
        w1: QParts,
        w2: QParts,
    ) -> TailOut:
        """A block after attention: ``h += qmatmul(o, wo)`` (in place), ``norm`` (the model's
        RMSNorm with gain ``g`` and ``eps``), its quantization and the MLP, with the bits of
        ``block_tail_separately``. The MLP's output is not added to ``h``: the caller adds it."""
        ...

    def forward_chain(self, plan: ForwardPlan) -> None:
        """A hint that a forward as ``plan`` describes follows: the calls of ``attention_qkv``,
        ``block_tail`` (per block) and ``qmatmul`` (the logits) in the model's order. An
        implementation whose GPU runs the whole forward in one submit and one readback does it
        here and answers those calls from it, with the same bits and the same checks; any other
        does nothing."""
        ...

    def backward_chain(self, plan: BackwardPlan) -> None:
        """A hint that the backward ``plan`` describes follows: the calls of ``grads`` in the
        model's order (the logits' pair, then per block from the last the pairs of w2, w1, wo,
        attention's two and wqkv). Like ``forward_chain``: a GPU may run it all here and answer
        those calls from it; any other implementation does nothing."""
        ...

    def settle(self) -> None:
        """Wait until every product returned so far is proven; raise if one was wrong.

        An implementation may hand a product back before its check is done (``gpu.live``'s
        background audit), so a caller settles before any value derived from the products leaves
        its hands (``gpt.forward_backward`` does, before each early gradient and at the end).
        The operands and the products must stay unmodified until then: the check reads them.
        """
        ...


class NumpyOps:
    """The reference implementation (float32 BLAS on integer-valued operands)."""

    name = "numpy"

    def quantize(self, x: FloatArray, axis: int) -> tuple[FloatArray, IntArray, Int8Array | None]:
        q, e = quantize(x, axis)
        return q, e, None

    def qmatmul(
        self,
        a_q: FloatArray,
        a_e: IntArray,
        b_q: FloatArray,
        b_e: IntArray,
        *,
        a8: Int8Array | None = None,
        b8: Int8Array | None = None,
    ) -> FloatArray:
        return ref.qmatmul(a_q, a_e, b_q, b_e)

    def grad_left(
        self,
        g: FloatArray,
        fold_e: IntArray,
        b_q: FloatArray,
        limbs: int = 2,
        *,
        b8: Int8Array | None = None,
    ) -> FloatArray:
        return ref.grad_matmul_left(g, fold_e, b_q, limbs)

    def grad_right(
        self,
        a_q: FloatArray,
        fold_e: IntArray,
        g: FloatArray,
        limbs: int = 2,
        *,
        a8: Int8Array | None = None,
    ) -> FloatArray:
        return ref.grad_matmul_right(a_q, fold_e, g, limbs)

    def grads(self, jobs: Sequence[Grad]) -> list[FloatArray]:
        return one_by_one(self, jobs)  # subclasses' grad_left/grad_right included

    def mlp(
        self,
        b_q: FloatArray,
        b_e: IntArray,
        w1: tuple[FloatArray, IntArray, Int8Array | None],
        w2: tuple[FloatArray, IntArray, Int8Array | None],
        *,
        b8: Int8Array | None = None,
    ) -> MlpOut:
        return mlp_separately(self, b_q, b_e, w1, w2, b8=b8)

    def attention(
        self,
        q: QParts,
        kt: QParts,
        v: QParts,
        scale: np.float32,
        softmax: Callable[[FloatArray], FloatArray],
    ) -> AttnOut:
        return attention_separately(self, q, kt, v, softmax)

    def attention_qkv(
        self,
        a: QParts,
        wqkv: QParts,
        heads_of: HeadsOf,
        shape: tuple[int, int],
        scale: np.float32,
        softmax: Callable[[FloatArray], FloatArray],
    ) -> tuple[AttnOut, QParts, QParts, QParts]:
        return attention_qkv_separately(self, a, wqkv, heads_of, scale, softmax)

    def block_tail(
        self,
        o: QParts,
        wo: QParts,
        h: FloatArray,
        g: FloatArray,
        eps: np.float32,
        norm: Callable[[FloatArray], tuple[FloatArray, Any]],
        w1: QParts,
        w2: QParts,
    ) -> TailOut:
        return block_tail_separately(self, o, wo, h, norm, w1, w2)

    def forward_chain(self, plan: ForwardPlan) -> None:
        """Nothing to prepare: the reference computes each product when it is asked."""

    def backward_chain(self, plan: BackwardPlan) -> None:
        """Nothing to prepare, likewise."""

    def settle(self) -> None:
        """Nothing to wait for: the reference is its own proof."""


NUMPY_OPS = NumpyOps()


class IntGemmOps:
    """The three products from an exact int8 GEMM (e.g. a gated GPU kernel), same bits."""

    def __init__(
        self,
        name: str,
        matmul_int: MatmulInt,
        matmul_batched: MatmulBatched | None = None,
        settle: Callable[[], None] | None = None,
        passes: Passes | None = None,
        matmul_many: MatmulMany | None = None,
        mlp_chain: MlpChainFn | None = None,
        attention_chain: AttentionChainFn | None = None,
        block_chain: BlockChainFn | None = None,
        qkv_chain: QkvChainFn | None = None,
        forward_chain: Callable[[ForwardPlan], None] | None = None,
        backward_chain: Callable[[BackwardPlan], None] | None = None,
    ) -> None:
        self.name = name
        # Likewise a whole backward (every pair of products and the work between them), which
        # then answers ``grads`` in order (gpu.live).
        self._backward_chain = backward_chain
        # A GPU that runs a whole forward (every block's chains, the operands between them and
        # the logits product) in one submit and one readback, then answers the qkv and block
        # chains' calls and the logits product from it (gpu.live).
        self._forward_chain = forward_chain
        # A GPU that runs a block's attention from its input (the qkv product, the split and
        # quantization, then the attention chain) in one submit and one readback.
        self._qkv_chain = qkv_chain
        # A GPU that runs a block's tail (attention's output product, the residual add, the
        # norm, the MLP) in one submit and one readback (gpu.block_chain).
        self._block_chain = block_chain
        # A GPU that runs attention's scores, softmax and second product in one submit and one
        # readback (gpu.attention_chain): ``attention`` hands it every head at once.
        self._attention_chain = attention_chain
        # A GPU that runs a block's MLP (both products and the work between) in one submit and
        # one readback (gpu.mlp_chain): ``mlp`` hands it the whole block.
        self._mlp_chain = mlp_chain
        # A GEMM that takes several batched products in one call (gpu.live's audited wgpu GEMM:
        # one submit and one readback): ``grads`` hands it a backward pair at once.
        self._matmul_many = matmul_many if matmul_batched is not None else None
        # With a batched GEMM: the quantize and dequantize around its products in fused passes
        # (cpu/fused.py) instead of numpy's one pass per operation. Same bits (gated).
        self._passes = passes if matmul_batched is not None else None
        self._matmul_int = matmul_int
        # A GEMM that takes (..., M, K) @ (..., K, N) in one call (the CPU int8 GEMM): one call
        # per product instead of one per attention head.
        self._matmul_batched = matmul_batched
        # What ``settle`` waits for: the checks still running on products already returned
        # (gpu.live's background audit); None when every product is checked before it returns.
        self._settle = settle

    def forward_chain(self, plan: ForwardPlan) -> None:
        if self._forward_chain is not None and plan.a[0].ndim == 2:
            self._forward_chain(plan)

    def backward_chain(self, plan: BackwardPlan) -> None:
        if self._backward_chain is not None:
            self._backward_chain(plan)

    def settle(self) -> None:
        if self._settle is not None:
            self._settle()

    def _int(
        self, a: FloatArray, b: FloatArray, a8: Int8Array | None = None, b8: Int8Array | None = None
    ) -> npt.NDArray[Any]:
        """Exact integer (..., M, N) of int8-valued float32 operands: float64 batch by batch, or
        int32 from a batched GEMM in one call (every use below scales or adds it in float64, to
        which numpy promotes int32 exactly, so no float64 copy is made). Every use makes a new
        array and never writes into this one or the operands: a background audit may still be
        reading them (``settle``)."""
        if self._matmul_batched is not None:
            given = {k: v for k, v in (("a8", a8), ("b8", b8)) if v is not None}
            return self._matmul_batched(a, b, **given)
        lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a_b = np.broadcast_to(a, (*lead, *a.shape[-2:]))
        b_b = np.broadcast_to(b, (*lead, *b.shape[-2:]))
        acc = np.empty((*lead, a.shape[-2], b.shape[-1]), dtype=np.float64)
        for idx in np.ndindex(*lead):
            acc[idx] = self._matmul_int(a_b[idx].astype(np.int8), b_b[idx].astype(np.int8))
        return acc

    def quantize(self, x: FloatArray, axis: int) -> tuple[FloatArray, IntArray, Int8Array | None]:
        """``numerics.quantize`` (one limb); with the fused passes, in one pass that writes the
        int8 values too (the bits are the same: gated)."""
        if self._passes is None:
            q, e = quantize(x, axis)
            return q, e, None
        q4, q8, e = self._passes.quantize_limbs(x, None, axis, 1)
        assert q4 is not None
        return q4[0], e, q8[0]

    def qmatmul(
        self,
        a_q: FloatArray,
        a_e: IntArray,
        b_q: FloatArray,
        b_e: IntArray,
        *,
        a8: Int8Array | None = None,
        b8: Int8Array | None = None,
    ) -> FloatArray:
        if self._passes is not None:
            return self._passes.dequantize(self._int(a_q, b_q, a8, b8)[None], a_e, b_e)
        return ref.round_scaled(self._int(a_q, b_q, a8, b8), a_e + b_e)

    def _grad_operands(self, j: Grad) -> tuple[Product, Callable[[npt.NDArray[Any]], FloatArray]]:
        """A backward product through the batched GEMM, cut in two: the operands it takes
        (``g`` quantized into limbs, stacked on a new leading axis, times ``other``), and what
        turns the limbs' integer products into the gradient. With the fused passes: the limbs
        straight into int8 (what the GEMM takes, and what the fused audit reads) in one pass,
        and the limbs' products combined and scaled in one more. Same operations either way."""
        axis = -1 if j.left else -2
        if self._passes is not None:
            passes = self._passes
            _, stack8, e = passes.quantize_limbs(j.g, j.fold_e, axis, j.limbs, floats=False)
            s = e - (j.limbs - 1) * LO_SHIFT
            if j.left:
                return (stack8, j.other, None, j.other8), lambda p: passes.dequantize(p, s, None)
            return (j.other, stack8, j.other8, None), lambda p: passes.dequantize(p, None, s)
        # numpy's passes: the other operand is cast once for the whole stack, as before
        stack, e = self._limbs(np.multiply(j.g, pow2(j.fold_e)), axis, j.limbs)
        scale = e - (j.limbs - 1) * LO_SHIFT

        def finish(parts: npt.NDArray[Any]) -> FloatArray:
            return ref.round_scaled(self._combine(parts), scale)

        operands: Product = (stack, j.other, None, None) if j.left else (j.other, stack, None, None)
        return operands, finish

    def _batched_grad(self, j: Grad) -> FloatArray:
        """One backward product through the batched GEMM (one call for all limbs: a batch of
        ``limbs`` slices sharing ``other``, cast once and audited in one call)."""
        assert self._matmul_batched is not None
        (a, b, a8, b8), finish = self._grad_operands(j)
        given = {k: v for k, v in (("a8", a8), ("b8", b8)) if v is not None}
        return finish(self._matmul_batched(a, b, **given))

    def grads(self, jobs: Sequence[Grad]) -> list[FloatArray]:
        if self._matmul_many is None or len(jobs) < 2:
            return one_by_one(self, jobs)
        for j in jobs:
            ref._check_limbs(j.limbs)
        prepared = [self._grad_operands(j) for j in jobs]
        parts = self._matmul_many([operands for operands, _ in prepared])
        return [finish(p) for (_, finish), p in zip(prepared, parts, strict=True)]

    def _dequantize(self, acc: npt.NDArray[Any], row_e: IntArray, col_e: IntArray) -> FloatArray:
        """``qmatmul``'s dequantization of an exact 2-D integer product."""
        if self._passes is not None:
            return self._passes.dequantize(acc[None], row_e, col_e)
        return ref.round_scaled(acc, row_e + col_e)

    def mlp(
        self,
        b_q: FloatArray,
        b_e: IntArray,
        w1: tuple[FloatArray, IntArray, Int8Array | None],
        w2: tuple[FloatArray, IntArray, Int8Array | None],
        *,
        b8: Int8Array | None = None,
    ) -> MlpOut:
        """Through the GPU's chain where there is one (a 2-D block): the host still computes r
        from the first product, as ``mlp_separately`` does, and the chain refuses the step unless
        the GPU's operand of the second product equals it (``operand``)."""
        if self._mlp_chain is None or b_q.ndim != 2:
            return mlp_separately(self, b_q, b_e, w1, w2, b8=b8)
        kept: dict[str, Any] = {}

        def operand(acc1: npt.NDArray[np.int32]) -> tuple[Int8Array, IntArray]:
            u = self._dequantize(acc1, b_e, w1[1])
            kept["relu"] = relu_in_place(u)
            r_q, r_e, r8 = self.quantize(u, -1)
            kept.update(r_q=r_q, r_e=r_e, r8=r8)
            return (r8 if r8 is not None else r_q.astype(np.int8)), r_e

        got = self._mlp_chain(b_q, w1[0], w2[0], b_e, w1[1], operand, b8=b8, w1_8=w1[2], w2_8=w2[2])
        if got is None:  # the chain cannot hold this shape
            return mlp_separately(self, b_q, b_e, w1, w2, b8=b8)
        acc2 = got[1]
        y = self._dequantize(acc2, kept["r_e"], w2[1])
        return MlpOut(kept["relu"], kept["r_q"], kept["r_e"], kept["r8"], y)

    def attention(
        self,
        q: QParts,
        kt: QParts,
        v: QParts,
        scale: np.float32,
        softmax: Callable[[FloatArray], FloatArray],
    ) -> AttnOut:
        """Through the GPU's chain where there is one (heads (B, H, T, hd)): the host still
        computes P from the scores, as ``attention_separately`` does, and the chain refuses the
        step unless the GPU's operand of the second product equals it (``operand``)."""
        if self._attention_chain is None or q[0].ndim != 4:
            return attention_separately(self, q, kt, v, softmax)
        kept: dict[str, Any] = {}
        scores = (*q[0].shape[:-1], kt[0].shape[-1])

        def operand(acc1: npt.NDArray[np.int32]) -> tuple[Int8Array, IntArray, FloatArray]:
            p = softmax(self._dequantize(acc1.reshape(scores), q[1], kt[1]))
            p_q, p_e, p8 = self.quantize(p, -1)
            kept.update(p=p, p_q=p_q, p_e=p_e, p8=p8)
            return (p8 if p8 is not None else p_q.astype(np.int8)), p_e, p

        got = self._attention_chain(
            q[0], kt[0], v[0], q[1], kt[1], scale, operand, q8=q[2], kt8=kt[2], v8=v[2]
        )
        if got is None:  # the chain cannot hold this shape
            return attention_separately(self, q, kt, v, softmax)
        acc2 = got[1]
        o = self._dequantize(acc2.reshape(v[0].shape), kept["p_e"], v[1])
        return AttnOut(kept["p"], kept["p_q"], kept["p_e"], kept["p8"], o)

    def attention_qkv(
        self,
        a: QParts,
        wqkv: QParts,
        heads_of: HeadsOf,
        shape: tuple[int, int],
        scale: np.float32,
        softmax: Callable[[FloatArray], FloatArray],
    ) -> tuple[AttnOut, QParts, QParts, QParts]:
        """Through the GPU's qkv chain where there is one: the host still splits and quantizes
        the heads from the qkv product and computes P from the scores, and the chain refuses the
        step unless each GPU operand equals the host's (``heads_operand``, ``p_operand``)."""
        if self._qkv_chain is None or a[0].ndim != 2:
            return attention_qkv_separately(self, a, wqkv, heads_of, scale, softmax)
        kept: dict[str, Any] = {}

        def int8(x: QParts) -> Int8Array:
            return x[2] if x[2] is not None else x[0].astype(np.int8)

        def heads_operand(acc_qkv: npt.NDArray[np.int32]) -> tuple[Any, ...]:
            q, k, v = heads_of(self._dequantize(acc_qkv, a[1], wqkv[1]))
            kept.update(q=q, k=k, v=v)
            return int8(q), q[1], int8(k), k[1], int8(v), v[1]

        def p_operand(acc1: npt.NDArray[np.int32]) -> tuple[Int8Array, IntArray, FloatArray]:
            q, kt = kept["q"], transposed(kept["k"])
            scores = (*q[0].shape[:-1], kt[0].shape[-1])
            p = softmax(self._dequantize(acc1.reshape(scores), q[1], kt[1]))
            p_q, p_e, p8 = self.quantize(p, -1)
            kept.update(p=p, p_q=p_q, p_e=p_e, p8=p8)
            return (p8 if p8 is not None else p_q.astype(np.int8)), p_e, p

        got = self._qkv_chain(
            a[0], wqkv[0], a[1], wqkv[1], shape[0], shape[1], scale, heads_operand, p_operand,
            a8=a[2], w8=wqkv[2],
        )  # fmt: skip
        if got is None:  # the chain cannot hold this shape
            return attention_qkv_separately(self, a, wqkv, heads_of, scale, softmax)
        acc2 = got[2]
        v = kept["v"]
        o = self._dequantize(acc2.reshape(v[0].shape), kept["p_e"], v[1])
        att = AttnOut(kept["p"], kept["p_q"], kept["p_e"], kept["p8"], o)
        return att, kept["q"], kept["k"], v

    def block_tail(
        self,
        o: QParts,
        wo: QParts,
        h: FloatArray,
        g: FloatArray,
        eps: np.float32,
        norm: Callable[[FloatArray], tuple[FloatArray, Any]],
        w1: QParts,
        w2: QParts,
    ) -> TailOut:
        """Through the GPU's chain where there is one: the host still adds, normalises and
        quantizes from the output product and computes r from the MLP's first, as
        ``block_tail_separately`` does, and the chain refuses the step unless the GPU's
        operands equal the host's (``norm_operand``, ``mlp_operand``)."""
        if self._block_chain is None or o[0].ndim != 2:
            return block_tail_separately(self, o, wo, h, norm, w1, w2)
        kept: dict[str, Any] = {}

        def norm_operand(acc_wo: npt.NDArray[np.int32]) -> tuple[Int8Array, IntArray, FloatArray]:
            np.add(h, self._dequantize(acc_wo, o[1], wo[1]), out=h)  # the residual, in place
            bn, cache = norm(h)
            b_q, b_e, b8 = self.quantize(bn, -1)
            kept.update(cache=cache, b_q=b_q, b_e=b_e, b8=b8)
            return (b8 if b8 is not None else b_q.astype(np.int8)), b_e, bn

        def mlp_operand(acc1: npt.NDArray[np.int32]) -> tuple[Int8Array, IntArray]:
            u = self._dequantize(acc1, kept["b_e"], w1[1])
            kept["relu"] = relu_in_place(u)
            r_q, r_e, r8 = self.quantize(u, -1)
            kept.update(r_q=r_q, r_e=r_e, r8=r8)
            return (r8 if r8 is not None else r_q.astype(np.int8)), r_e

        # The chain uploads h as it is now (it adds the product itself); norm_operand adds it to
        # h in place only after the chain returned, so no copy is needed.
        got = self._block_chain(
            o[0], wo[0], w1[0], w2[0], o[1], wo[1], w1[1], h, g, eps,
            norm_operand, mlp_operand, o8=o[2], wo8=wo[2], w1_8=w1[2], w2_8=w2[2],
        )  # fmt: skip
        if got is None:  # the chain cannot hold this shape (h is untouched: nothing ran)
            return block_tail_separately(self, o, wo, h, norm, w1, w2)
        acc2 = got[2]
        y = self._dequantize(acc2, kept["r_e"], w2[1])
        mlp = MlpOut(kept["relu"], kept["r_q"], kept["r_e"], kept["r8"], y)
        return TailOut(kept["cache"], kept["b_q"], kept["b_e"], kept["b8"], mlp)

    def _limbs(self, x: FloatArray, axis: int, limbs: int) -> tuple[FloatArray, IntArray]:
        """``x`` quantized in ``limbs`` limbs along ``axis`` (``x`` is overwritten), stacked on a
        new leading axis (``(limbs, *x.shape)``, most significant first) for one batched call."""
        stack = np.empty((limbs, *x.shape), dtype=np.float32)
        quant = quantize3 if limbs == 3 else quantize2
        *_, e = quant(x, axis, overwrite=True, out=stack)
        return stack, e

    @staticmethod
    def _combine(parts: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
        """The exact integer sum_i 256^(n-1-i) parts[i] of the limbs' products, in float64 (every
        partial value below 2^53, as in the per-limb form)."""
        acc: npt.NDArray[np.float64] = parts[0] * float(1 << LO_SHIFT) + parts[1]
        for part in parts[2:]:
            acc *= float(1 << LO_SHIFT)
            acc += part
        return acc

    def grad_left(
        self,
        g: FloatArray,
        fold_e: IntArray,
        b_q: FloatArray,
        limbs: int = 2,
        *,
        b8: Int8Array | None = None,
    ) -> FloatArray:
        ref._check_limbs(limbs)
        if self._matmul_batched is not None:
            return self._batched_grad(Grad(True, g, fold_e, b_q, limbs, b8))
        if limbs == 3:
            h3, m3, l3, e3 = quantize3(g * pow2(fold_e), axis=-1)
            acc = (self._int(h3, b_q) * float(1 << LO_SHIFT) + self._int(m3, b_q)) * float(
                1 << LO_SHIFT
            ) + self._int(l3, b_q)  # exact (below 2^53)
            return ref.round_scaled(acc, e3 - 2 * LO_SHIFT)
        hi, lo, e = quantize2(g * pow2(fold_e), axis=-1)
        acc = self._int(hi, b_q) * float(1 << LO_SHIFT) + self._int(lo, b_q)  # exact
        return ref.round_scaled(acc, e - LO_SHIFT)

    def grad_right(
        self,
        a_q: FloatArray,
        fold_e: IntArray,
        g: FloatArray,
        limbs: int = 2,
        *,
        a8: Int8Array | None = None,
    ) -> FloatArray:
        ref._check_limbs(limbs)
        if self._matmul_batched is not None:
            return self._batched_grad(Grad(False, g, fold_e, a_q, limbs, a8))
        if limbs == 3:
            h3, m3, l3, e3 = quantize3(g * pow2(fold_e), axis=-2)
            acc = (self._int(a_q, h3) * float(1 << LO_SHIFT) + self._int(a_q, m3)) * float(
                1 << LO_SHIFT
            ) + self._int(a_q, l3)  # exact (below 2^53)
            return ref.round_scaled(acc, e3 - 2 * LO_SHIFT)
        hi, lo, e = quantize2(g * pow2(fold_e), axis=-2)
        acc = self._int(a_q, hi) * float(1 << LO_SHIFT) + self._int(a_q, lo)  # exact
        return ref.round_scaled(acc, e - LO_SHIFT)
