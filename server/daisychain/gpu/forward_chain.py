"""A whole forward in one submit and one readback.

Per block the qkv chain (``qkv_chain.py``: the qkv product, the split into heads, the scores,
the softmax, ``P v``) and the block chain (``block_chain.py``: the output product, the residual
and norm, the MLP) each took a round trip, and the logits product one more. Here they are one
command encoder: between a block's two chains ``kernels/merge_epilogue.wgsl`` merges the heads
and quantizes them for the output product, and after the MLP the norm epilogue runs again
(``kernels/norm_epilogue.wgsl``: the residual add of the MLP's output, the next block's first
norm or the final one, quantized as the next product's operand). The host uploads the first
block's operand, the residual stream and the weights; the GPU makes every other operand; one
readback brings back every product and every operand it made (docs/KERNELS.md "The forward
chain").

Proof as for every chain: ``run_forward_chain_gates`` at backend start; in training the host
still computes every operand itself from the products (``gpu.live``: the forward's products are
taken in order as the model asks for them) and refuses the step where the GPU's operand of a
product differs, before that product is trusted; every product is audited.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.attention_chain import bits_sum
from daisychain.gpu.block_chain import (
    BlockChain,
    BlockChainOut,
    BlockLayout,
    norm_params,
)
from daisychain.gpu.block_chain import reference as block_reference
from daisychain.gpu.chain import (
    ROW_MAX,
    Outputs,
    Recording,
    epilogue_module,
    epilogue_width,
    f32_words,
    gate_exps,
    rows_grid,
    run_chain_gates,
    slot,
    unpack_k_major,
)
from daisychain.gpu.device import MIN_STORAGE_BINDING
from daisychain.gpu.gates import GateReport, random_f32, random_int8
from daisychain.gpu.gemm import pack_k_major
from daisychain.gpu.kernels import BindingKind, Span, compile_kernel
from daisychain.gpu.qkv_chain import QkvChain, QkvChainOut, QkvLayout
from daisychain.gpu.qkv_chain import reference as qkv_reference
from daisychain.model.gpt import rmsnorm_forward
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import QuantizationError, quantize

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]
U32Array = npt.NDArray[np.uint32]
F32Array = npt.NDArray[np.float32]
Exps = npt.NDArray[np.integer]

# The merge epilogue's bindings (kernels/merge_epilogue.wgsl): params, the second product, the
# softmax's and the split's status (P_e, v_e), then packed, status and next written.
MERGE_BINDINGS: list[BindingKind] = ["uniform", "read", "read", "read", "write", "write", "write"]


# Epilogue dispatches per block beyond the qkv and block chains' own: the merge, the norm after
# the MLP.
EPILOGUES = 2


@dataclass(frozen=True)
class BlockWeights:
    """One block's int8 weights with their column exponents, and its two gains."""

    wqkv8: Int8Array  # (C, 3C)
    wqkv_e: Exps  # (3C,)
    wo8: Int8Array  # (C, C)
    wo_e: Exps
    w1_8: Int8Array  # (C, F)
    w1_e: Exps
    w2_8: Int8Array  # (F, C)
    w2_e: Exps
    g1: F32Array  # (C,) the attention norm's gain
    g2: F32Array  # (C,) the MLP norm's gain


@dataclass(frozen=True)
class GpuOperand:
    """A product's A operand an epilogue made: q8 (M, K), its row exponents and statuses."""

    q8: Int8Array
    e: Int32Array  # (M, 1)
    status: U32Array  # (M,) 0 ok, 1 non-finite, 2 |x| >= 2^100
    sum: U32Array  # (M,) the row's float bit patterns summed mod 2^32 (zeros where not made)


@dataclass(frozen=True)
class ForwardBlockOut:
    qkv: QkvChainOut  # the block's attention from its operand a
    o: GpuOperand  # the merged heads, quantized (the output product's operand; no sum)
    tail: BlockChainOut  # the output product through the MLP
    a_next: GpuOperand  # the next block's a (or the final norm's output for the logits)


@dataclass(frozen=True)
class ForwardChainOut:
    blocks: tuple[ForwardBlockOut, ...]
    logits: Int32Array  # (M, V) the final operand @ wte^T


class ForwardChain:
    """The chain on a qkv chain's and a block chain's GEMM (the same GEMM, pool and tile)."""

    def __init__(self, qkv: QkvChain, block: BlockChain, *, source: str | None = None) -> None:
        """``source`` replaces the merge epilogue's whole module (the planted-bug tests)."""
        if qkv.gemm is not block.gemm:
            raise ValueError("forward chain: the qkv and block chains must share one GEMM")
        self.qkv, self.block, self.gemm = qkv, block, qkv.gemm
        self.name = f"{self.gemm.name}-forward"
        self.merge = compile_kernel(
            self.gemm.gpu,
            "merge_epilogue",
            MERGE_BINDINGS,
            epilogue_module("merge_epilogue") if source is None else source,
            {"EP_WG": epilogue_width(self.gemm.gpu)},
        )

    @staticmethod
    def fits(n: int, c: int, f: int, heads: int, t: int, vocab: int) -> bool:
        """Whether every buffer fits one storage binding and a token's row an epilogue's
        workgroup memory."""
        return (
            0 < c <= ROW_MAX
            and QkvChain.fits(n, c, heads, t)
            and BlockChain.fits(n, c, f)
            and 0 < 4 * n * vocab <= MIN_STORAGE_BINDING
            and 4 * vocab * c <= MIN_STORAGE_BINDING
        )

    def run(
        self,
        a8: Int8Array,
        a_e: Exps,
        h: F32Array,
        blocks: Sequence[BlockWeights],
        gf: F32Array,
        eps: np.float32,
        wte8: Int8Array,
        batch: int,
        heads: int,
        scale: np.float32,
    ) -> ForwardChainOut:
        """From the first block's operand a8 (N, C) (exponents ``a_e``) and the residual ``h``
        (N, C) through every block of ``blocks`` and the final norm (gain ``gf``) to the logits
        product with wte8 (V, C): one submit, one readback."""
        n, c = a8.shape
        if not blocks:
            raise ValueError("forward chain: no blocks")
        f, vocab = blocks[0].w1_8.shape[1], wte8.shape[0]
        if h.shape != (n, c) or a_e.size != n or gf.size != c or wte8.shape != (vocab, c):
            raise ValueError("forward chain: the residual, exponents, gain or wte do not fit")
        if n % batch or c % heads or not self.fits(n, c, f, heads, n // batch, vocab):
            raise ValueError(f"forward chain: ({n}, {c}, {f}, {heads}, {vocab}) does not fit")
        rec = Recording(self.gemm.gpu, self.gemm.pool)
        made = self.record(rec, a8, a_e, h, blocks, gf, eps, wte8, batch, heads, scale)
        return made.read(rec.run())

    def record(
        self,
        rec: Recording,
        a8: Int8Array,
        a_e: Exps,
        h: F32Array,
        blocks: Sequence[BlockWeights],
        gf: F32Array,
        eps: np.float32,
        wte8: Int8Array,
        batch: int,
        heads: int,
        scale: np.float32,
    ) -> Recorded:
        """``run``'s dispatches into ``rec`` (the step chain records its backward after them):
        the buffers of every block, for reading the outputs and for the backward."""
        n, c = a8.shape
        f, vocab = blocks[0].w1_8.shape[1], wte8.shape[0]
        gemm = self.gemm
        qkv, tail = QkvLayout(n, c, batch, heads, scale), BlockLayout(n, c, f)
        c4, m4 = -(-c // 4), 4 * -(-n // 4)
        upload, scratch, output, words = rec.upload, rec.scratch, rec.output, f32_words

        def exps(row: int, tail_e: Exps) -> npt.NDArray[np.int32]:
            """A scales buffer an epilogue fills with ``row`` row exponents: ``tail_e`` after."""
            out = np.zeros(row + tail_e.size, dtype="<i4")
            out[row:] = tail_e.reshape(-1)
            return out

        a_in = upload("a0", pack_k_major(a8))
        scales_in = upload("a0.e", exps(0, np.concatenate([a_e.reshape(-1), blocks[0].wqkv_e])))
        h_in = upload("h0", words(h))
        made = Recorded(n, c, vocab, qkv, tail, a_in, scales_in, h_in)
        steps = rec.steps
        lut = [gemm._lut] if gemm._lut is not None else []
        tm, tn = gemm.tile
        merge_params = slot((
            qkv.t, heads, qkv.hd, c, n, m4, c4, qkv.core.out_stride, qkv.rows,
        ))  # fmt: skip
        for i, w in enumerate(blocks):
            p = f"{i}."
            q = {
                "params": upload(p + "qkv.params", qkv.params(), uniform=True),
                "a_in": a_in,
                "w_in": upload(p + "wqkv", pack_k_major(np.ascontiguousarray(w.wqkv8.T))),
                "scales_in": scales_in,
                "scales": scratch(p + "qkv.scales", qkv.scratch()),
                "p_out": scratch(p + "p", qkv.core.scratch()["p_out"]),
                **{k: output(p + "qkv." + k, size) for k, size in qkv.sizes().items()},
            }
            steps += qkv.steps(self.qkv, q)
            merge = {
                "params": upload(p + "merge.params", merge_params, uniform=True),
                "packed": output(p + "o.packed", c4 * m4 * 4),
                "status": output(p + "o.status", 2 * n * 4),
                "next": upload(p + "o.next", exps(n, w.wo_e)),
            }
            steps.append((self.merge, [
                Span(merge["params"], 0, 48), q["acc2"], q["status"], q["qkv_status"],
                merge["packed"], merge["status"], merge["next"],
            ], rows_grid(n)))  # fmt: skip
            b = {
                "params": upload(p + "tail.params", tail.params(eps), uniform=True),
                "a_o": merge["packed"],
                "b_wo": upload(p + "wo", pack_k_major(np.ascontiguousarray(w.wo8.T))),
                "scales_o": merge["next"],
                "h": h_in,
                "g": upload(p + "g2", words(w.g2)),
                "next": upload(p + "tail.next", tail.next_scales(w.w1_e)),
                "b_w1": upload(p + "w1", pack_k_major(np.ascontiguousarray(w.w1_8.T))),
                "b_w2": upload(p + "w2", pack_k_major(np.ascontiguousarray(w.w2_8.T))),
                "next2": upload(p + "tail.next2", exps(n, w.w2_e)),
                "h_out": scratch(p + "h1", n * c * 4),
                "relu": scratch(p + "relu", n * f * 4),
                **{k: output(p + "tail." + k, size) for k, size in tail.sizes().items()},
            }
            steps += tail.steps(self.block, b)
            last = i + 1 == len(blocks)
            gain = gf if last else blocks[i + 1].g1
            after = np.zeros(0, np.int32) if last else blocks[i + 1].wqkv_e
            norm = {
                "params": upload(p + "norm.params", slot(norm_params(n, c, eps)), uniform=True),
                "g": upload(p + "norm.g", words(gain)),
                "packed": output(p + "a.packed", c4 * m4 * 4),
                "status": output(p + "a.status", 3 * n * 4),
                "next": upload(p + "a.next", exps(n, after)),
                "h_out": scratch(p + "h2", n * c * 4),
            }
            steps.append((self.block.epilogue, [
                Span(norm["params"], 0, 32), b["acc2"], b["next2"], b["h_out"], norm["g"],
                norm["packed"], norm["status"], norm["next"], norm["h_out"],
            ], rows_grid(n)))  # fmt: skip
            made.blocks.append(BlockBuffers(q, merge, b, norm))
            a_in, scales_in, h_in = norm["packed"], norm["next"], norm["h_out"]
        made.logits = output("logits", n * vocab * 4)
        logits = upload("logits.params", slot((n, vocab, c4, 0)), uniform=True)
        steps.append((gemm.kernel, [
            Span(logits, 0, 16), a_in, upload("wte", pack_k_major(wte8)), made.logits, *lut,
        ], (-(-vocab // tn), -(-n // tm), 1)))  # fmt: skip
        return made


@dataclass
class BlockBuffers:
    """One block's buffers in a recording, by the names its layouts use: the qkv chain's, the
    merge's, the block chain's and the norm's after the MLP."""

    qkv: dict[str, Any]
    merge: dict[str, Any]
    tail: dict[str, Any]
    norm: dict[str, Any]


@dataclass
class Recorded:
    """A recorded forward: its layouts, the first block's inputs, every block's buffers and the
    logits product's, and how to read its outputs."""

    n: int
    c: int
    vocab: int
    qkv: QkvLayout
    tail: BlockLayout
    a0: Any  # the first block's operand, packed
    a0_e: Any  # its exponents, then wqkv's
    h0: Any  # the residual stream before the first block
    blocks: list[BlockBuffers] = field(default_factory=list)
    logits: Any = None

    def read(self, out: Outputs) -> ForwardChainOut:
        n, c = self.n, self.c
        c4, m4 = -(-c // 4), 4 * -(-n // 4)

        def named(prefix: str) -> Callable[[str, str], npt.NDArray[Any]]:
            return lambda name, dtype: out.words(prefix + name, dtype)

        def operand(prefix: str, stride: int) -> GpuOperand:
            status = out.words(prefix + ".status", "<u4").reshape(n, stride)
            packed = out.words(prefix + ".packed", "<u4").reshape(c4, m4)
            total = status[:, 2] if stride == 3 else np.zeros(n, np.uint32)
            return GpuOperand(
                unpack_k_major(packed, n, c),
                status[:, 0].view(np.int32).reshape(n, 1).copy(),
                status[:, 1].astype(np.uint32),
                total.astype(np.uint32),
            )

        made = tuple(
            ForwardBlockOut(
                self.qkv.read(named(f"{i}.qkv.")),
                operand(f"{i}.o", 2),
                self.tail.read(named(f"{i}.tail.")),
                operand(f"{i}.a", 3),
            )
            for i in range(len(self.blocks))
        )
        acc = out.words("logits", "<i4").reshape(n, self.vocab).astype(np.int32)
        return ForwardChainOut(made, acc)


def merge_reference(acc2: Int32Array, p_e: Exps, v_e: Exps, batch: int) -> GpuOperand | None:
    """The merged heads (S, T, hd) -> (N, C) quantized per token, as the model does it (None
    where the reference refuses)."""
    slices, t, hd = acc2.shape
    heads = slices // batch
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            o = round_scaled(acc2.astype(np.float64), p_e.reshape(slices, t, 1) + v_e.reshape(
                slices, 1, hd))  # fmt: skip
            merged = o.reshape(batch, heads, t, hd).transpose(0, 2, 1, 3).reshape(batch * t, -1)
            o_q, o_e = quantize(np.ascontiguousarray(merged), -1)
    except QuantizationError:
        return None
    n = batch * t
    zeros = np.zeros(n, np.uint32)
    return GpuOperand(o_q.astype(np.int8), o_e.astype(np.int32), zeros, zeros)


def reference(
    a8: Int8Array,
    a_e: Exps,
    h: F32Array,
    blocks: Sequence[BlockWeights],
    gf: F32Array,
    eps: np.float32,
    wte8: Int8Array,
    batch: int,
    heads: int,
    scale: np.float32,
) -> ForwardChainOut | None:
    """The chain from the other chains' references and the model's own norm: None where the
    reference refuses."""
    made: list[ForwardBlockOut] = []
    for i, w in enumerate(blocks):
        q = qkv_reference(a8, w.wqkv8, a_e, w.wqkv_e, batch, heads, scale)
        o = None if q is None else merge_reference(q.acc2, q.p_e, q.v_e, batch)
        if q is None or o is None:
            return None
        t = block_reference(o.q8, w.wo8, o.e, w.wo_e, h, w.g2, eps, w.w1_8, w.w1_e, w.w2_8)
        if t is None:
            return None
        gain = gf if i + 1 == len(blocks) else blocks[i + 1].g1
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                h1 = h + round_scaled(t.acc_wo.astype(np.float64), o.e + w.wo_e.reshape(1, -1))
                h = h1 + round_scaled(t.acc2.astype(np.float64), t.r_e + w.w2_e.reshape(1, -1))
                an, _ = rmsnorm_forward(h, gain, eps)
                a_q, a_e = quantize(an, -1)
        except QuantizationError:
            return None
        a8 = a_q.astype(np.int8)
        zeros = np.zeros(a8.shape[0], np.uint32)
        made.append(ForwardBlockOut(q, o, t, GpuOperand(a8, a_e.astype(np.int32), zeros,
                                                     bits_sum(an))))  # fmt: skip
    logits = np.matmul(a8.astype(np.int64), wte8.astype(np.int64).T).astype(np.int32)
    return ForwardChainOut(tuple(made), logits)


def _blocks(case: int, layers: int, c: int, f: int) -> list[BlockWeights]:
    def w(k: int, shape: tuple[int, int]) -> Int8Array:
        return random_int8(13, 8 * (case * layers) + k, shape)

    def e(k: int, size: int) -> npt.NDArray[np.int32]:
        return gate_exps(14, 8 * (case * layers) + k, size, -9, -5)

    def g(k: int) -> F32Array:
        return (random_f32(15, 2 * (case * layers) + k, (c,)) * np.float32(1.5)).astype(np.float32)

    made = []
    for i in range(layers):
        made.append(BlockWeights(
            w(8 * i, (c, 3 * c)), e(8 * i, 3 * c), w(8 * i + 1, (c, c)), e(8 * i + 1, c),
            w(8 * i + 2, (c, f)), e(8 * i + 2, f), w(8 * i + 3, (f, c)), e(8 * i + 3, c),
            g(2 * i), g(2 * i + 1),
        ))  # fmt: skip
    return made


Case = tuple[str, dict[str, Any]]


def forward_case(
    i: int, batch: int, t: int, c: int, heads: int, f: int, vocab: int, layers: int
) -> Case:
    """Case ``i`` of these sizes: random operands, weights and gains at the model's ranges."""
    n, eps = batch * t, np.float32(1e-5)
    return (f"{layers} blocks, {batch}x{t} tokens, width {c}, vocabulary {vocab}", {
        "a8": random_int8(16, 2 * i, (n, c)), "a_e": gate_exps(17, i, n, -9, -5),
        "h": (random_f32(18, i, (n, c)) * np.float32(2.0)).astype(np.float32),
        "blocks": _blocks(i, layers, c, f),
        "gf": (random_f32(19, i, (c,)) * np.float32(1.5)).astype(np.float32), "eps": eps,
        "wte8": random_int8(16, 2 * i + 1, (vocab, c)), "batch": batch, "heads": heads,
        "scale": np.float32(1.0 / np.sqrt(c // heads)),
    })  # fmt: skip


def forward_chain_cases() -> list[Case]:
    """(name, the run's keyword arguments): two blocks at odd sizes (tokens that fill no tile,
    a sequence that is no multiple of 4, a head of 4 channels), at the model's exponent ranges;
    one block at a tile's edge; and a non-finite residual (refused)."""
    cases = [forward_case(0, 2, 5, 16, 4, 32, 24, 2), forward_case(1, 1, 32, 32, 2, 64, 40, 1)]
    broken = cases[0][1]["h"].copy()
    broken[3, 0] = np.float32(np.inf)  # inf * 0 is NaN in the norm: refused
    cases.append(("a non-finite residual", {**cases[0][1], "h": broken}))
    return cases


def run_forward_chain_gates(chain: ForwardChain) -> GateReport:
    """Every case through the chain on a poisoned pool against ``reference``: every product,
    operand and checksum exactly, and a non-zero status where the reference refuses."""
    return run_chain_gates(
        chain.name, chain.gemm.pool, forward_chain_cases(), chain.run, reference, STATUSES
    )


# Where an epilogue says it refused a row (every status field of the chain's output).
STATUSES = ["qkv_status", "status", "b_status", "r_status"]
