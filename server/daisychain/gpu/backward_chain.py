"""A whole backward in one submit and one readback.

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

from daisychain.gpu.backward_record import (
    BLOCK_PAIRS,
    BlockSources,
    Fold,
    NormSources,
    Packed,
    PairSources,
    Recorder,
    Shape,
    Sources,
    record_backward,
)
from daisychain.gpu.chain import (
    ROW_MAX,
    Recording,
    epilogue_module,
    epilogue_width,
    f32_words,
    gate_exps,
    run_chain_gates,
)
from daisychain.gpu.device import MIN_STORAGE_BINDING
from daisychain.gpu.gates import GateReport, random_f32, random_int8
from daisychain.gpu.gemm import GpuGemm, aligned_words, pack_k_major
from daisychain.gpu.kernels import BindingKind, compile_kernel
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
    # With ``floats``: every float gradient between the pairs, in the order
    # ``backward_record.record_backward`` makes them; the gate compares them, training does not
    # read them back.
    floats: tuple[F32Array, ...] = ()


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
        if n % batch or c % heads or not self.fits(n, c, f, t, vocab, slices):
            raise ValueError(f"backward chain: ({n}, {c}, {f}, {vocab}) does not fit")
        rec = Recording(self.gemm.gpu, self.gemm.pool)
        r = Recorder(self, rec, floats)
        src = _uploaded(rec, dlogits, hq, wte, normf, blocks)
        logits, pairs = record_backward(r, src, Shape(n, c, f, vocab, batch, heads, scale))
        out = rec.run()
        return BackwardChainOut(
            PairOut(**r.read(out, logits)),
            tuple(
                BlockBackOut(**{k: PairOut(**r.read(out, v)) for k, v in pairs[i].items()})
                for i in range(len(blocks))
            ),
            tuple(out.words(name, "<f4").copy() for name in r.floats),
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


def _uploaded(
    rec: Recording,
    dlogits: F32Array,
    hq: Quantized,
    wte: Quantized,
    normf: Norm,
    blocks: Sequence[BlockForward],
) -> Sources:
    """The backward's inputs uploaded from the host's forward."""

    def pair(name: str, op: PairOperands) -> PairSources:
        def packed(tag: str, x: Int8Array) -> Packed:
            stride = aligned_words(-(-x.shape[2] // 4) * 4 * -(-x.shape[1] // 4))
            return Packed(rec.upload(f"{name}.{tag}", packed_slices(x, stride)), stride, x.shape[0])

        def fold(tag: str, e: Exps, per: int) -> Fold:
            flat = np.ascontiguousarray(np.ravel(e), dtype="<i4")
            return Fold(rec.upload(f"{name}.{tag}", flat), per_slice=flat.size > per)

        b_t, a = np.ascontiguousarray(op.b_t), np.ascontiguousarray(op.a)
        return PairSources(
            fold("fold_a", op.fold_a, b_t.shape[2]), packed("b", b_t), op.k,
            fold("fold_b", op.fold_b, a.shape[2]), packed("a", a), op.k2,
        )  # fmt: skip

    def norm(name: str, x: Norm) -> NormSources:
        return NormSources(
            rec.upload(name + ".g", f32_words(x.g)), rec.upload(name + ".xhat", f32_words(x.xhat)),
            rec.upload(name + ".inv", f32_words(x.inv)),
        )  # fmt: skip

    operands = pair_operands(hq, wte, blocks)
    made = []
    for i, w in enumerate(blocks):
        p = f"{i}."
        made.append(BlockSources(
            {name: pair(p + name, operands[p + name]) for name in BLOCK_PAIRS},
            rec.upload(p + "relu", w.relu.astype("<u4")), rec.upload(p + "p", f32_words(w.p)),
            norm(p + "norm1", w.norm1), norm(p + "norm2", w.norm2),
        ))  # fmt: skip
    return Sources(
        rec.upload("dlogits", f32_words(dlogits)), pair("logits", operands["logits"]),
        norm("normf", normf), made, np.float32(0.0),
    )  # fmt: skip


def packed_slices(x: Int8Array, stride: int) -> U32Array:
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
    made: list[F32Array] = []  # the float gradients, in the chain's order (record_backward)
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
                ds = (w.p * (dp - tree_sum(dp * w.p, -1, keepdims=True))) * scale
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
