"""A whole backward in one submit and one readback (issue 20, "a GPU step that stays on the GPU").

The backward made one round trip per pair of products (``GpuGemm.matmul_int_many``): the host
quantized the gradient into limbs, the GPU computed both products, the host combined the limbs
and did the float work to the next gradient (``gpt.forward_backward``). Here every pair follows
the previous one on the GPU (docs/KERNELS.md "The backward chain"):

- ``kernels/limbs_epilogue.wgsl`` quantizes a gradient into its limbs twice, per row with the
  weight's (or the other operand's) exponents folded in for ``dA = G @ b^T`` and per column with
  the input's folded in for ``dB = a^T @ G``, packed as the two products read them;
- the GEMM computes each limb's products;
- ``kernels/combine_epilogue.wgsl`` combines the limbs of ``dA`` into the float32 gradient (in
  64-bit integers, one rounding), with the ReLU's mask where it applies, placed where the next
  step reads it (the attention's heads, the fused qkv gradient);
- ``kernels/grad_norm_epilogue.wgsl`` (RMSNorm's backward and the residual add) and
  ``kernels/grad_softmax_epilogue.wgsl`` (the softmax's) between them.

The host uploads the logits' gradient and what the forward left (the operands in the layouts the
backward's products read, the norms' ``xhat`` and ``inv``, P, the ReLU's mask); one readback
brings back every product and both limb operands of every pair. Proof as for every chain:
``run_backward_chain_gates`` at backend start; in training the host still computes every
gradient itself and refuses the step where the GPU's limbs of a product differ from its own,
before that product is trusted (``gpu.replay``); every product is audited.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.chain import (
    ROW_MAX,
    Outputs,
    Recording,
    epilogue_module,
    epilogue_width,
    f32_bits,
    f32_words,
    gate_exps,
    rows_grid,
    run_chain_gates,
    slot,
    unpack_k_major,
)
from daisychain.gpu.device import MIN_STORAGE_BINDING
from daisychain.gpu.gates import GateReport, random_f32, random_int8
from daisychain.gpu.gemm import GpuGemm, aligned_words, pack_k_major
from daisychain.gpu.kernels import BindingKind, Span, compile_kernel
from daisychain.model.gpt import NormCache, rmsnorm_backward, softmax_causal
from daisychain.numerics import tree_sum
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import (
    LO_SHIFT,
    QuantizationError,
    pow2,
    quantize,
    quantize2,
    quantize3,
)

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]
U32Array = npt.NDArray[np.uint32]
F32Array = npt.NDArray[np.float32]
Exps = npt.NDArray[np.integer]

LIMBS_BINDINGS: list[BindingKind] = ["uniform", "read", "read", "write", "write"]
COMBINE_BINDINGS: list[BindingKind] = ["uniform", "read", "read", "read", "write"]
GRAD_NORM_BINDINGS: list[BindingKind] = [
    "uniform", "read", "read", "read", "read", "read", "write",
]  # fmt: skip
GRAD_SOFTMAX_BINDINGS: list[BindingKind] = ["uniform", "read", "read", "write"]

# Epilogue dispatches: before the blocks (the logits' limbs both ways, their combine, the final
# norm's backward), and per block (six pairs' limbs both ways; the combines of du, dbn, dO, dP,
# dq, dk^T, dv and dan; two norms' backward; the softmax's).
EPILOGUES = (4, 6 * 2 + 8 + 2 + 1)

ROWS, COLUMNS = 0, 1  # the limbs epilogue's modes: per row (dA's operand), per column (dB's)


@dataclass(frozen=True)
class Norm:
    """What a norm's backward needs from its forward, and its gain."""

    xhat: F32Array  # (N, C)
    inv: F32Array  # (N, 1)
    g: F32Array  # (C,)


@dataclass(frozen=True)
class Quantized:
    """A forward operand: int8 values and their exponents."""

    q8: Int8Array
    e: Exps


@dataclass(frozen=True)
class BlockForward:
    """What one block's backward needs from its forward (``gpt.BlockCache`` and the weights)."""

    norm1: Norm
    a: Quantized  # (N, C), e (N, 1)
    wqkv: Quantized  # (C, 3C), e (3C,)
    q: Quantized  # (S, T, hd), e (S, T, 1)
    k: Quantized  # (S, T, hd), e (S, T, 1)
    v: Quantized  # (S, T, hd), e (S, 1, hd)
    p: F32Array  # (S, T, T)
    pq: Quantized  # (S, T, T), e (S, T, 1)
    o: Quantized  # (N, C), e (N, 1)
    wo: Quantized  # (C, C), e (C,)
    norm2: Norm
    b: Quantized  # (N, C), e (N, 1)
    w1: Quantized  # (C, F), e (F,)
    relu: npt.NDArray[np.bool_]  # (N, F)
    r: Quantized  # (N, F), e (N, 1)
    w2: Quantized  # (F, C), e (C,)


@dataclass(frozen=True)
class PairOut:
    """One backward pair: the gradient's limbs both ways and both products, per limb."""

    rows8: Int8Array  # (L, S, M, N) the limbs per row (dA's operand)
    rows_e: Int32Array  # (S, M)
    rows_status: U32Array  # (S, M)
    cols8: Int8Array  # (L, S, M, N) the limbs per column (dB's operand)
    cols_e: Int32Array  # (S, N)
    cols_status: U32Array  # (S, N)
    acc_a: Int32Array  # (L, S, M, K) limbs @ b^T
    acc_b: Int32Array  # (L, S, K2, N) a^T @ limbs


@dataclass(frozen=True)
class BlockBackOut:
    w2: PairOut  # g = dh: dr, dw2
    w1: PairOut  # g = du: dbn, dw1
    wo: PairOut  # g = dh: dmerged, dwo
    pv: PairOut  # g = dO: dP (dA, with v), dv (dB, with P)
    qk: PairOut  # g = dS: dq (dA, with k), dk^T (dB, with q)
    qkv: PairOut  # g = dqkv: dan, dwqkv


@dataclass(frozen=True)
class BackwardChainOut:
    logits: PairOut  # g = dlogits (three limbs): dhf, dwte^T
    blocks: tuple[BlockBackOut, ...]  # by block number
    # With ``floats``: every float gradient between the pairs, in the order they are made
    # (``FLOATS``); the gate compares them, training does not read them back.
    floats: tuple[F32Array, ...] = ()


# The float gradients the chain makes, in order: after the logits' pair, then per block from
# the last.
FLOATS_FIRST = ("dhf", "dh.f")
FLOATS_PER_BLOCK = ("du", "dbn", "dh.2", "do", "dp", "ds", "dqkv", "dan", "dh.1")


class BackwardChain:
    """The chain on one GEMM kernel's device (its pipeline, pool and tile)."""

    def __init__(self, gemm: GpuGemm, *, sources: dict[str, str] | None = None) -> None:
        """``sources`` replaces an epilogue's whole module by its kernel name (the planted-bug
        tests)."""
        sources = sources or {}
        self.gemm = gemm
        self.name = f"{gemm.name}-backward"
        width = {"EP_WG": epilogue_width(gemm.gpu)}

        def kernel(name: str, bindings: list[BindingKind], constants: dict[str, int]) -> Any:
            source = sources.get(name, epilogue_module(name))
            return compile_kernel(gemm.gpu, name, bindings, source, constants)

        self.limbs = kernel("limbs_epilogue", LIMBS_BINDINGS, width)
        self.combine = kernel("combine_epilogue", COMBINE_BINDINGS, {})
        self.grad_norm = kernel("grad_norm_epilogue", GRAD_NORM_BINDINGS, width)
        self.grad_softmax = kernel("grad_softmax_epilogue", GRAD_SOFTMAX_BINDINGS, width)

    @staticmethod
    def fits(n: int, c: int, f: int, t: int, vocab: int, slices: int) -> bool:
        """Whether every buffer fits one storage binding (three limbs of the logits' gradient
        the largest) and a row of a norm or a softmax an epilogue's workgroup memory."""
        widest = 4 * max(3 * n * vocab, 2 * n * f, 2 * slices * t * t, 3 * n * c, 3 * c * vocab)
        return 0 < c <= ROW_MAX and 0 < t <= ROW_MAX and widest <= MIN_STORAGE_BINDING

    def run(
        self,
        dlogits: F32Array,
        hq: Quantized,
        wte: Quantized,
        normf: Norm,
        blocks: Sequence[BlockForward],
        batch: int,
        heads: int,
        scale: np.float32,
        floats: bool = False,
    ) -> BackwardChainOut:
        """From the logits' gradient ``dlogits`` (N, V) through the logits' pair (with the final
        operand ``hq`` (N, C) and ``wte`` (V, C), exponents per row), the final norm's backward
        and every block's (``blocks`` by number, run last to first): one submit, one
        readback (with ``floats``, the float gradients between the pairs too)."""
        n, vocab = dlogits.shape
        c = hq.q8.shape[1]
        f = blocks[0].w1.q8.shape[1]
        t, slices = n // batch, batch * heads
        hd = c // heads
        if n % batch or c % heads or not self.fits(n, c, f, t, vocab, slices):
            raise ValueError(f"backward chain: ({n}, {c}, {f}, {vocab}) does not fit")
        run = _Run(self, Recording(self.gemm.gpu, self.gemm.pool), floats)
        operands = pair_operands(hq, wte, blocks)
        g = run.rec.upload("dlogits", f32_words(dlogits))
        logits = run.pair("logits", g, (1, n, vocab, 3), operands["logits"])
        dhf = run.combine("dhf", logits, (1, n, c), ROWS)
        dh = run.norm_backward("dh.f", dhf, normf, None, n, c)
        pairs: dict[int, dict[str, _Pair]] = {}
        for i in reversed(range(len(blocks))):
            w, p = blocks[i], f"{i}."
            mine: dict[str, _Pair] = {}
            mine["w2"] = run.pair(p + "w2", dh, (1, n, c, 2), operands[p + "w2"])
            mask = run.rec.upload(p + "relu", w.relu.astype("<u4"))
            du = run.combine(p + "du", mine["w2"], (1, n, f), ROWS, mask=mask)
            mine["w1"] = run.pair(p + "w1", du, (1, n, f, 2), operands[p + "w1"])
            dbn = run.combine(p + "dbn", mine["w1"], (1, n, c), ROWS)
            dh = run.norm_backward(p + "dh.2", dbn, w.norm2, dh, n, c)
            mine["wo"] = run.pair(p + "wo", dh, (1, n, c, 2), operands[p + "wo"])
            do = run.combine(p + "do", mine["wo"], (1, n, c), ROWS, place=(1, t, heads, hd, c, 0))
            mine["pv"] = run.pair(p + "pv", do, (slices, t, hd, 2), operands[p + "pv"])
            dp = run.combine(p + "dp", mine["pv"], (slices, t, t), ROWS)
            ds = run.softmax_backward(p + "ds", dp, w.p, slices * t, t, scale)
            mine["qk"] = run.pair(p + "qk", ds, (slices, t, t, 2), operands[p + "qk"])
            dqkv = run.made(p + "dqkv", n * 3 * c * 4)
            run.combine(p + "dq", mine["qk"], (slices, t, hd), ROWS, dqkv, (2, t, heads, hd, c, 0))
            run.combine(p + "dk", mine["qk"], (slices, hd, t), COLUMNS, dqkv,
                        (2, t, heads, hd, c, 1), transposed=True)  # fmt: skip
            run.combine(p + "dv", mine["pv"], (slices, t, hd), COLUMNS, dqkv,
                        (2, t, heads, hd, c, 2))  # fmt: skip
            mine["qkv"] = run.pair(p + "qkv", dqkv, (1, n, 3 * c, 2), operands[p + "qkv"])
            dan = run.combine(p + "dan", mine["qkv"], (1, n, c), ROWS)
            dh = run.norm_backward(p + "dh.1", dan, w.norm1, dh, n, c)
            pairs[i] = mine
        out = run.rec.run()
        return BackwardChainOut(
            run.read(out, logits),
            tuple(
                BlockBackOut(**{k: run.read(out, v) for k, v in pairs[i].items()})
                for i in range(len(blocks))
            ),
            tuple(out.words(name, "<f4").copy() for name in run.floats),
        )


@dataclass(frozen=True)
class PairOperands:
    """A pair's operands besides the gradient: dA = limbs @ B with the exponents ``fold_a``
    folded per column (n, or slices x n) and B's transpose ``b_t`` (1 or slices, k, n); dB = A @
    limbs with ``fold_b`` folded per row (slices x m) and ``a`` (1 or slices, k2, m)."""

    fold_a: Exps
    b_t: Int8Array
    k: int
    fold_b: Exps
    a: Int8Array
    k2: int


def pair_operands(
    hq: Quantized, wte: Quantized, blocks: Sequence[BlockForward]
) -> dict[str, PairOperands]:
    """Every pair's operands, by the pair's name ("logits", "<block>.w2", ...)."""
    c = hq.q8.shape[1]

    def linear(w: Quantized, x: Quantized, k: int, b_t: Int8Array) -> PairOperands:
        return PairOperands(w.e, b_t, k, x.e, x.q8.T[None], x.q8.shape[1])

    out = {"logits": linear(wte, hq, c, wte.q8.T[None])}
    for i, w in enumerate(blocks):
        p = f"{i}."
        out[p + "w2"] = linear(w.w2, w.r, w.w2.q8.shape[0], w.w2.q8[None])
        out[p + "w1"] = linear(w.w1, w.b, c, w.w1.q8[None])
        out[p + "wo"] = linear(w.wo, w.o, c, w.wo.q8[None])
        t, hd = w.v.q8.shape[1:]
        # dP = dO @ v^T (B^T = v), dv = P^T @ dO (A = P^T)
        out[p + "pv"] = PairOperands(w.v.e, w.v.q8, t, w.pq.e, w.pq.q8.swapaxes(1, 2), t)
        # dq = dS @ k (B^T = k^T), dk^T = q^T @ dS (A = q^T)
        out[p + "qk"] = PairOperands(
            w.k.e, w.k.q8.swapaxes(1, 2), hd, w.q.e, w.q.q8.swapaxes(1, 2), hd
        )
        out[p + "qkv"] = linear(w.wqkv, w.a, c, w.wqkv.q8[None])
    return out


@dataclass
class _Pair:
    """A recorded pair: its shape and the names of its outputs."""

    name: str
    slices: int
    m: int
    n: int
    limbs: int
    k: int  # dA's columns
    k2: int  # dB's rows
    rows_stride: int
    cols_stride: int
    acc_a: Any
    rows_status: Any
    cols_status: Any


class _Run:
    """One run's recording: the pairs, combines and norms as the chain calls them."""

    def __init__(self, chain: BackwardChain, rec: Recording, floats: bool) -> None:
        self.chain, self.rec = chain, rec
        self.keep_floats = floats
        self.floats: list[str] = []  # the float gradients read back, in order
        gemm = chain.gemm
        self.lut = [gemm._lut] if gemm._lut is not None else []
        self.tile = gemm.tile

    def made(self, name: str, size: int) -> Any:
        """The buffer of a float gradient the chain makes (read back with ``floats``)."""
        if not self.keep_floats:
            return self.rec.scratch(name, size)
        self.floats.append(name)
        return self.rec.output(name, size)

    def _gemm(self, name: str, m: int, n: int, k: int, a: Span, b: Span, out: Span) -> None:
        params = self.rec.upload(name, slot((m, n, max(1, -(-k // 4)), 0)), uniform=True)
        tm, tn = self.tile
        self.rec.steps.append((self.chain.gemm.kernel, [Span(params, 0, 16), a, b, out, *self.lut],
                               (-(-n // tn), -(-m // tm), 1)))  # fmt: skip

    def pair(
        self,
        name: str,
        g: Any,
        shape: tuple[int, int, int, int],
        operands: PairOperands,
    ) -> _Pair:
        """The pair of the gradient in ``g`` (slices x m x n floats, ``limbs`` limbs): its limbs
        both ways and both products."""
        slices, m, n, limbs = shape
        fold_a, b_op, k = np.ravel(operands.fold_a), np.ascontiguousarray(operands.b_t), operands.k
        fold_b, a_op, k2 = np.ravel(operands.fold_b), np.ascontiguousarray(operands.a), operands.k2
        rec = self.rec
        rows_kw, cols_kw = -(-n // 4), -(-m // 4)
        m4, n4 = 4 * -(-m // 4), 4 * -(-n // 4)
        rows_stride, cols_stride = aligned_words(rows_kw * m4), aligned_words(cols_kw * n4)
        regions = limbs * slices
        rows = rec.output(name + ".rows", regions * rows_stride * 4)
        cols = rec.output(name + ".cols", regions * cols_stride * 4)
        rows_status = rec.output(name + ".rows_status", 2 * slices * m * 4)
        cols_status = rec.output(name + ".cols_status", 2 * slices * n * 4)
        for mode, fold, out, status, kw, width, stride, blocks in (
            (ROWS, fold_a, rows, rows_status, rows_kw, m4, rows_stride, slices * m),
            (COLUMNS, fold_b, cols, cols_status, cols_kw, n4, cols_stride, slices * n),
        ):
            per = n if mode == ROWS else m
            fold_stride = per if fold.size == slices * per else 0
            params = rec.upload(f"{name}.limbs{mode}", slot((
                slices, m, n, limbs, mode, m * n, fold_stride, stride, kw, width, blocks, 0,
            )), uniform=True)  # fmt: skip
            folds = rec.upload(f"{name}.fold{mode}", np.ascontiguousarray(fold, dtype="<i4"))
            rec.steps.append((self.chain.limbs, [Span(params, 0, 48), g, folds, out, status],
                              rows_grid(blocks)))  # fmt: skip
        # dA = limbs (m, n) @ B (n, k): B packed from its transpose b_op (k, n) per slice
        b_slices, acc_a_stride = b_op.shape[0], aligned_words(m * k)
        b_stride = aligned_words(-(-n // 4) * 4 * -(-k // 4))
        b_buf = rec.upload(name + ".b", _packed(b_op, b_stride))
        acc_a = rec.output(name + ".acc_a", regions * acc_a_stride * 4)
        # dB = A (k2, m) @ limbs (m, n): A packed per slice from a_op (k2, m)
        a_slices, acc_b_stride = a_op.shape[0], aligned_words(k2 * n)
        a_stride = aligned_words(-(-m // 4) * 4 * -(-k2 // 4))
        a_buf = rec.upload(name + ".a", _packed(a_op, a_stride))
        acc_b = rec.output(name + ".acc_b", regions * acc_b_stride * 4)
        for limb in range(limbs):
            for s in range(slices):
                r = limb * slices + s
                bs, as_ = s % b_slices, s % a_slices
                self._gemm(f"{name}.ga{r}", m, k, n,
                           Span(rows, r * rows_stride * 4, rows_stride * 4),
                           Span(b_buf, bs * b_stride * 4, b_stride * 4),
                           Span(acc_a, r * acc_a_stride * 4, acc_a_stride * 4))  # fmt: skip
                self._gemm(f"{name}.gb{r}", k2, n, m,
                           Span(a_buf, as_ * a_stride * 4, a_stride * 4),
                           Span(cols, r * cols_stride * 4, cols_stride * 4),
                           Span(acc_b, r * acc_b_stride * 4, acc_b_stride * 4))  # fmt: skip
        return _Pair(name, slices, m, n, limbs, k, k2, rows_stride, cols_stride, acc_a,
                     rows_status, cols_status)  # fmt: skip

    def combine(
        self,
        name: str,
        pair: _Pair,
        shape: tuple[int, int, int],
        mode: int,
        out: Any = None,
        place: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0),
        *,
        mask: Any = None,
        transposed: bool = False,
    ) -> Any:
        """The float gradient of one of ``pair``'s products (``shape`` = slices x m x k), its
        exponents per row (``ROWS``: dA) or per column (``COLUMNS``: dB), into ``out`` (a new
        buffer by default) at ``place`` = (place, t, heads, hd, c, part)."""
        slices, m, k = shape
        rec = self.rec
        if mode == ROWS:
            acc, stride, status = pair.acc_a, aligned_words(m * k), pair.rows_status
        else:
            acc, status = rec.owned[pair.name + ".acc_b"], pair.cols_status
            stride = aligned_words(m * k)
        total = slices * m * k
        out = self.made(name, total * 4) if out is None else out
        params = rec.upload(name + ".params", slot((
            slices, m, k, pair.limbs, mode, stride, *place[:1], *place[1:5], place[5],
            int(transposed), int(mask is not None), 0, 0,
        )), uniform=True)  # fmt: skip
        mask_buf = mask if mask is not None else status  # bound, never read
        groups = -(-total // 64)
        rec.steps.append((self.chain.combine, [Span(params, 0, 64), acc, status, mask_buf, out],
                          (min(groups, 65535), -(-groups // 65535), 1)))  # fmt: skip
        return out

    def norm_backward(self, name: str, dy: Any, norm: Norm, dh: Any, n: int, c: int) -> Any:
        """RMSNorm's backward of ``dy`` (n x c), added to ``dh`` unless it is None."""
        rec = self.rec
        params = rec.upload(name + ".params", slot((
            n, c, 1 << (c - 1).bit_length(), f32_bits(c), int(dh is not None), 0, 0, 0,
        )), uniform=True)  # fmt: skip
        g = rec.upload(name + ".g", f32_words(norm.g))
        xhat = rec.upload(name + ".xhat", f32_words(norm.xhat))
        inv = rec.upload(name + ".inv", f32_words(norm.inv))
        out = self.made(name, n * c * 4)
        rec.steps.append((self.chain.grad_norm, [
            Span(params, 0, 32), dy, g, xhat, inv, dh if dh is not None else dy, out,
        ], rows_grid(n)))  # fmt: skip
        return out

    def softmax_backward(
        self, name: str, dp: Any, p: F32Array, rows: int, t: int, scale: np.float32
    ) -> Any:
        rec = self.rec
        params = rec.upload(name + ".params", slot((
            rows, t, 1 << (t - 1).bit_length(), f32_bits(scale),
        )), uniform=True)  # fmt: skip
        p_buf = rec.upload(name + ".p", f32_words(p))
        out = self.made(name, rows * t * 4)
        rec.steps.append((self.chain.grad_softmax, [Span(params, 0, 16), dp, p_buf, out],
                          rows_grid(rows)))  # fmt: skip
        return out

    def read(self, out: Outputs, pair: _Pair) -> PairOut:
        s, m, n, limbs, k, k2 = pair.slices, pair.m, pair.n, pair.limbs, pair.k, pair.k2
        words = out.words
        rows_w = words(pair.name + ".rows", "<u4").reshape(limbs * s, pair.rows_stride)
        cols_w = words(pair.name + ".cols", "<u4").reshape(limbs * s, pair.cols_stride)
        m4, n4 = 4 * -(-m // 4), 4 * -(-n // 4)
        rows8 = np.stack([
            unpack_k_major(rows_w[r, : -(-n // 4) * m4].reshape(-1, m4), m, n)
            for r in range(limbs * s)
        ]).reshape(limbs, s, m, n)  # fmt: skip
        cols8 = np.stack([
            unpack_k_major(cols_w[r, : -(-m // 4) * n4].reshape(-1, n4), n, m).T
            for r in range(limbs * s)
        ]).reshape(limbs, s, m, n)  # fmt: skip
        rows_st = words(pair.name + ".rows_status", "<u4").reshape(s, m, 2)
        cols_st = words(pair.name + ".cols_status", "<u4").reshape(s, n, 2)
        acc_a = words(pair.name + ".acc_a", "<i4").reshape(limbs * s, -1)[:, : m * k]
        acc_b = words(pair.name + ".acc_b", "<i4").reshape(limbs * s, -1)[:, : k2 * n]
        return PairOut(
            rows8=np.ascontiguousarray(rows8),
            rows_e=rows_st[..., 0].view(np.int32).copy(),
            rows_status=rows_st[..., 1].astype(np.uint32),
            cols8=np.ascontiguousarray(cols8),
            cols_e=cols_st[..., 0].view(np.int32).copy(),
            cols_status=cols_st[..., 1].astype(np.uint32),
            acc_a=acc_a.reshape(limbs, s, m, k).astype(np.int32),
            acc_b=acc_b.reshape(limbs, s, k2, n).astype(np.int32),
        )


def _packed(x: Int8Array, stride: int) -> U32Array:
    """Each slice of ``x`` (S, R, K) packed K-major, slices ``stride`` words apart."""
    out = np.zeros((x.shape[0], stride), dtype="<u4")
    for s in range(x.shape[0]):
        words = pack_k_major(np.ascontiguousarray(x[s])).reshape(-1)
        out[s, : words.size] = words
    return out.reshape(-1)


# ------------------------------------------------------------------------------------------------
# the reference: the model's own backward, recording what the chain returns


def _limbs(g: F32Array, fold: Exps, axis: int, limbs: int) -> tuple[Int8Array, Int32Array]:
    """(L, ...) int8 limbs and their exponents, as ``IntGemmOps`` makes them."""
    quant = quantize3 if limbs == 3 else quantize2
    *parts, e = quant(np.multiply(g, pow2(np.asarray(fold, dtype=np.int32))), axis)
    return np.stack([p.astype(np.int8) for p in parts]), e.astype(np.int32)


def _combine(acc: npt.NDArray[np.int64], e: Exps, limbs: int) -> F32Array:
    total = acc[0].astype(np.float64)
    for part in acc[1:]:
        total = total * float(1 << LO_SHIFT) + part
    return round_scaled(total, np.asarray(e, dtype=np.int32) - (limbs - 1) * LO_SHIFT)


def _pair_reference(
    g: F32Array, fold_a: Exps, b: Int8Array, fold_b: Exps, a: Int8Array, limbs: int
) -> tuple[PairOut, F32Array, F32Array]:
    """g (S, M, N); fold_a (S or 1, 1, N); b (S or 1, N, K); fold_b (S, M, 1); a (S or 1, K2,
    M): the pair and both products' gradients (dA rows' exponents, dB columns')."""
    rows8, rows_e = _limbs(g, fold_a, -1, limbs)
    cols8, cols_e = _limbs(g, fold_b, -2, limbs)
    acc_a = np.matmul(rows8.astype(np.int64), b.astype(np.int64))
    acc_b = np.matmul(a.astype(np.int64), cols8.astype(np.int64))
    s, m, n = g.shape
    zeros_m, zeros_n = np.zeros((s, m), np.uint32), np.zeros((s, n), np.uint32)
    out = PairOut(rows8, rows_e.reshape(s, m), zeros_m, cols8, cols_e.reshape(s, n), zeros_n,
                  acc_a.astype(np.int32), acc_b.astype(np.int32))  # fmt: skip
    return out, _combine(acc_a, rows_e, limbs), _combine(acc_b, cols_e, limbs)


def reference(
    dlogits: F32Array,
    hq: Quantized,
    wte: Quantized,
    normf: Norm,
    blocks: Sequence[BlockForward],
    batch: int,
    heads: int,
    scale: np.float32,
    floats: bool = False,
) -> BackwardChainOut | None:
    """The chain from numpy and the model's own norm and softmax backward: None where the
    reference refuses (a gradient that is not finite or has diverged)."""
    made: list[F32Array] = []  # the float gradients, in the chain's order (FLOATS_*)
    n = dlogits.shape[0]
    c = hq.q8.shape[1]
    t, slices, hd = n // batch, batch * heads, c // heads

    def norm_back(dy: F32Array, norm: Norm) -> F32Array:
        return rmsnorm_backward(dy, norm.g, NormCache(norm.xhat, norm.inv))[0]

    def linear(g: F32Array, wq: Quantized, x: Quantized) -> tuple[PairOut, F32Array]:
        out, da, _ = _pair_reference(
            g[None], wq.e.reshape(1, 1, -1), wq.q8.T[None], x.e.reshape(1, -1, 1),
            x.q8.T[None], 2,
        )  # fmt: skip
        return out, da[0]

    pairs: dict[int, BlockBackOut] = {}
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            logits, dhf, _ = _pair_reference(
                dlogits[None], wte.e.reshape(1, 1, -1), wte.q8[None], hq.e.reshape(1, -1, 1),
                hq.q8.T[None], 3,
            )  # fmt: skip
            dh = norm_back(dhf[0], normf)
            made += [dhf[0], dh]
            for i in reversed(range(len(blocks))):
                w = blocks[i]
                w2, dr = linear(dh, w.w2, w.r)
                du = np.multiply(dr, w.relu) + np.float32(0.0)
                w1, dbn = linear(du, w.w1, w.b)
                dh = dh + norm_back(dbn, w.norm2)
                made += [du, dbn, dh]
                wo, dmerged = linear(dh, w.wo, w.o)
                do = np.ascontiguousarray(
                    dmerged.reshape(batch, t, heads, hd).transpose(0, 2, 1, 3)
                ).reshape(slices, t, hd)
                pv, dp, dv = _pair_reference(
                    do, w.v.e.reshape(slices, 1, hd), w.v.q8.swapaxes(1, 2),
                    w.pq.e.reshape(slices, t, 1), w.pq.q8.swapaxes(1, 2), 2,
                )  # fmt: skip
                ds = (w.p * (dp - _tree_rows(dp * w.p))) * scale
                made += [do, dp, ds]
                qk, dq, dkt = _pair_reference(
                    ds, w.k.e.reshape(slices, 1, t), w.k.q8, w.q.e.reshape(slices, t, 1),
                    w.q.q8.swapaxes(1, 2), 2,
                )  # fmt: skip
                dqkv = np.empty((batch, t, 3, heads, hd), dtype=np.float32)
                dqkv[:, :, 0] = dq.reshape(batch, heads, t, hd).transpose(0, 2, 1, 3)
                dqkv[:, :, 1] = dkt.reshape(batch, heads, hd, t).transpose(0, 3, 1, 2)
                dqkv[:, :, 2] = dv.reshape(batch, heads, t, hd).transpose(0, 2, 1, 3)
                qkv, dan = linear(dqkv.reshape(n, 3 * c), w.wqkv, w.a)
                dh = dh + norm_back(dan, w.norm1)
                made += [dqkv.reshape(n, 3 * c), dan, dh]
                pairs[i] = BlockBackOut(w2, w1, wo, pv, qk, qkv)
    except QuantizationError:
        return None
    kept = tuple(np.ascontiguousarray(x, dtype=np.float32).reshape(-1) for x in made)
    return BackwardChainOut(
        logits, tuple(pairs[i] for i in range(len(blocks))), kept if floats else ()
    )


def _tree_rows(x: F32Array) -> F32Array:
    return tree_sum(x, -1, keepdims=True)


# ------------------------------------------------------------------------------------------------
# the gate


def _case(
    index: int, batch: int, t: int, c: int, heads: int, f: int, vocab: int, layers: int
) -> dict[str, Any]:
    """Random inputs of the chain's shapes, from the contract PRNG (streams 20-22)."""
    n, slices, hd = batch * t, batch * heads, c // heads
    counter = [0]

    def nxt() -> int:
        counter[0] += 1
        return 1000 * index + counter[0]

    def i8(*shape: int) -> Int8Array:
        return random_int8(20, nxt(), shape)

    def exps(*shape: int) -> npt.NDArray[np.int32]:
        return gate_exps(21, nxt(), int(np.prod(shape)), -9, -4).reshape(shape)

    def f32(scale: float, *shape: int) -> F32Array:
        return (random_f32(22, nxt(), shape) * np.float32(scale)).astype(np.float32)

    def q(*shape: int, e_shape: tuple[int, ...]) -> Quantized:
        return Quantized(i8(*shape), exps(*e_shape))

    def norm() -> Norm:
        inv = (np.abs(f32(1.0, n, 1)) + np.float32(0.5)).astype(np.float32)
        return Norm(f32(1.5, n, c), inv, f32(1.5, c))

    blocks = []
    for _ in range(layers):
        scores = f32(4.0, 1, slices, t, t)
        p = softmax_causal(scores, np.float32(1.0))[0]
        p_q, p_e = quantize(p, -1)
        blocks.append(BlockForward(
            norm(), q(n, c, e_shape=(n, 1)), q(c, 3 * c, e_shape=(3 * c,)),
            q(slices, t, hd, e_shape=(slices, t, 1)), q(slices, t, hd, e_shape=(slices, t, 1)),
            q(slices, t, hd, e_shape=(slices, 1, hd)), p,
            Quantized(p_q.astype(np.int8), p_e.astype(np.int32)),
            q(n, c, e_shape=(n, 1)), q(c, c, e_shape=(c,)), norm(), q(n, c, e_shape=(n, 1)),
            q(c, f, e_shape=(f,)), f32(1.0, n, f) > 0, q(n, f, e_shape=(n, 1)),
            q(f, c, e_shape=(c,)),
        ))  # fmt: skip
    return {
        "dlogits": f32(1e-3, n, vocab), "hq": q(n, c, e_shape=(n, 1)),
        "wte": q(vocab, c, e_shape=(vocab, 1)), "normf": norm(), "blocks": blocks,
        "batch": batch, "heads": heads, "scale": np.float32(1.0 / np.sqrt(hd)),
    }  # fmt: skip


def backward_chain_cases() -> list[tuple[str, dict[str, Any]]]:
    """Two blocks at odd sizes (a sequence no multiple of 4, 4-channel heads, a vocabulary of
    24), one block at a tile's edge, one with tiny's vocabulary, and a non-finite logits
    gradient (refused)."""
    cases = [
        ("2 blocks, 2x5 tokens, width 16, 4 heads", _case(0, 2, 5, 16, 4, 32, 24, 2)),
        ("1 block, 1x32 tokens, width 32, 2 heads", _case(1, 1, 32, 32, 2, 64, 40, 1)),
        # a vocabulary as tiny's: the logits' three limbs combine past 31 bits (the rounding)
        ("1 block, 4x16 tokens, vocabulary 2048", _case(2, 4, 16, 32, 4, 64, 2048, 1)),
    ]
    for _, kwargs in cases:
        kwargs["floats"] = True  # every float gradient between the pairs compared too
    broken = dict(cases[0][1])
    dlogits = broken["dlogits"].copy()
    dlogits[3, 4] = np.float32(np.nan)
    cases.append(("a non-finite logits gradient", {**broken, "dlogits": dlogits}))
    return cases


# Where an epilogue says it refused a block of a gradient.
STATUSES = ["rows_status", "cols_status"]


def run_backward_chain_gates(chain: BackwardChain) -> GateReport:
    """Every case through the chain on a poisoned pool against ``reference``: every limb, its
    exponent and every product exactly, and a non-zero status where the reference refuses."""
    return run_chain_gates(
        chain.name, chain.gemm.pool, backward_chain_cases(), chain.run, reference, STATUSES
    )
