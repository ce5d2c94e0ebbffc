"""A block's attention from its input in one submit and one readback: the fused qkv product,
the split into heads and their quantization, then the attention chain.

``qkv = qmatmul(a, wqkv)``, then q and k quantized per (b, h, t) over d and v per (b, h, d) over t
(docs/MODEL.md section 4, steps 2-3): with the attention chain alone (``attention_chain.py``) the
qkv product came back so the host could split and quantize. Here the qkv product,
``kernels/qkv_epilogue.wgsl`` (which writes the three operands in the layouts the scores' and the
second product's GEMMs read, and the exponents where the softmax epilogue reads them) and the
attention chain's dispatches go in one command encoder, with one readback.

Proof as for every chain: ``run_qkv_chain_gates`` at backend start; in training the host
recomputes q, k and v from the qkv product and refuses a step whose GPU operands differ in one
value, then checks P as the attention chain does; every product is audited.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.attention_chain import AttentionChain, AttentionCore
from daisychain.gpu.attention_chain import reference as attention_reference
from daisychain.gpu.chain import (
    SLOT_WORDS,
    epilogue_module,
    gate_exps,
    run_and_read,
    run_chain_gates,
    unpack_k_major,
)
from daisychain.gpu.device import MIN_STORAGE_BINDING
from daisychain.gpu.gates import GateReport, random_int8
from daisychain.gpu.gemm import aligned_words, pack_k_major
from daisychain.gpu.kernels import SPAN_ALIGN, Span, Step, compile_kernel
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import QuantizationError, quantize

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]
U32Array = npt.NDArray[np.uint32]


@dataclass(frozen=True)
class QkvChainOut:
    """The qkv product, the operands the GPU made from it, and the attention chain's outputs."""

    acc_qkv: Int32Array  # (N, 3C) a_q @ wqkv_q
    q8: Int8Array  # (S, T, hd)
    q_e: Int32Array  # (S, T, 1)
    k8: Int8Array  # (S, T, hd)
    k_e: Int32Array  # (S, T, 1)
    v8: Int8Array  # (S, T, hd)
    v_e: Int32Array  # (S, 1, hd)
    qkv_status: U32Array  # (2 S T + S hd,) q rows, k rows, v columns: 0 ok, else refused
    acc1: Int32Array  # the attention chain's, as AttentionChainOut
    p8: Int8Array
    p_e: Int32Array
    status: U32Array
    p_sum: U32Array
    acc2: Int32Array


class QkvChain:
    """The chain on an attention chain's GEMM (its pipelines, pool and tile)."""

    def __init__(self, attention: AttentionChain, *, source: str | None = None) -> None:
        """``source`` replaces the epilogue's whole module (the planted-bug tests)."""
        self.attention = attention
        self.gemm = attention.gemm
        self.name = f"{self.gemm.name}-qkv"
        self.epilogue = compile_kernel(
            self.gemm.gpu,
            "qkv_epilogue",
            ["uniform", "read", "read", "write", "write", "write", "write", "write"],
            epilogue_module("qkv_epilogue") if source is None else source,
            {},
        )

    @staticmethod
    def fits(n: int, c: int, heads: int, t: int) -> bool:
        hd = c // heads
        return AttentionChain.fits(n // t * heads, t, hd) and 0 < 12 * n * c <= MIN_STORAGE_BINDING

    def run(
        self,
        a8: Int8Array,
        wqkv8: Int8Array,
        a_e: npt.NDArray[np.integer],
        w_e: npt.NDArray[np.integer],
        batch: int,
        heads: int,
        scale: np.float32,
    ) -> QkvChainOut:
        """a8 (N, C) @ wqkv8 (C, 3C) with exponents ``a_e`` (N) and ``w_e`` (3C), N = batch * T
        tokens in (b, t) order; split into ``heads`` heads and quantized; then the attention
        chain with softmax scale ``scale``: one submit, one readback."""
        n, c = a8.shape
        t = n // batch
        if wqkv8.shape != (c, 3 * c) or n % batch or c % heads:
            raise ValueError(f"qkv chain: {a8.shape} @ {wqkv8.shape}, {batch} x {heads} heads")
        if a_e.size != n or w_e.size != 3 * c:
            raise ValueError(f"qkv chain: {a_e.size} and {w_e.size} exponents")
        if not self.fits(n, c, heads, t):
            raise ValueError(f"qkv chain: ({n}, {c}, {heads}) exceeds a storage binding")
        pool = self.gemm.pool
        layout = QkvLayout(n, c, batch, heads, scale)
        bufs = {
            "params": pool.upload(layout.params(), uniform=True),
            "a_in": pool.upload(pack_k_major(a8)),
            "w_in": pool.upload(pack_k_major(np.ascontiguousarray(wqkv8.T))),
            "scales_in": pool.upload(
                np.concatenate([a_e.reshape(-1), w_e.reshape(-1)]).astype("<i4")
            ),
            "scales": pool.acquire(layout.scratch()),
            **{name: pool.acquire(size) for name, size in layout.core.scratch().items()},
            **{name: pool.acquire(size) for name, size in layout.sizes().items()},
        }
        out = run_and_read(self.gemm.gpu, pool, layout.steps(self, bufs), bufs, layout.sizes())
        return layout.read(out.words)


class QkvLayout:
    """The qkv chain's params, outputs, dispatches and unpacking for N = batch x T tokens of
    width C in ``heads`` heads: ``QkvChain.run``, and the forward chain, which records the same
    dispatches on the operand and exponents an earlier epilogue wrote (``forward_chain.py``)."""

    def __init__(self, n: int, c: int, batch: int, heads: int, scale: np.float32) -> None:
        self.n, self.c, self.heads = n, c, heads
        self.t, self.hd = n // batch, c // heads
        self.slices, self.rows = batch * heads, n * heads
        self.hd4, self.t4 = -(-self.hd // 4), -(-self.t // 4)
        self.a_stride = aligned_words(self.hd4 * 4 * self.t4)
        self.v_stride = aligned_words(self.t4 * 4 * self.hd4)
        strides = (self.a_stride, self.a_stride, self.v_stride)
        self.core = AttentionCore(self.slices, self.t, self.hd, scale, strides)

    def params(self) -> npt.NDArray[np.uint32]:
        """The qkv product's slot, the split's, then the attention core's."""
        params = np.zeros((2, SLOT_WORDS), dtype="<u4")
        params[0, :4] = (self.n, 3 * self.c, max(1, -(-self.c // 4)), 0)  # the qkv product
        params[1, :12] = (
            self.t, self.heads, self.hd, self.c, self.slices, self.a_stride, self.v_stride,
            self.hd4, self.t4, self.rows, 0, 0,
        )  # fmt: skip
        return np.concatenate([params, self.core.params()]).reshape(-1)

    def scratch(self) -> int:
        """Bytes of "scales", the q and k exponents the softmax reads (never read back)."""
        return 2 * self.rows * 4

    def sizes(self) -> dict[str, int]:
        return {
            "acc_qkv": self.n * 3 * self.c * 4,
            "a1": self.slices * self.a_stride * 4,
            "b1": self.slices * self.a_stride * 4,
            "b2": self.slices * self.v_stride * 4,
            "qkv_status": (4 * self.rows + 2 * self.slices * self.hd) * 4,
            **self.core.sizes(),
        }

    def steps(self, chain: QkvChain, bufs: dict[str, Any]) -> list[Step]:
        """The dispatches on ``bufs``: "params" (``params``), "a_in", "w_in", "scales_in",
        "scales" and the outputs (``sizes``)."""
        gemm, n, c = chain.gemm, self.n, self.c
        lut = [gemm._lut] if gemm._lut is not None else []
        tm, tn = gemm.tile
        return [
            (gemm.kernel, [Span(bufs["params"], 0, 16), bufs["a_in"], bufs["w_in"],
                           bufs["acc_qkv"], *lut], (-(-3 * c // tn), -(-n // tm), 1)),
            (chain.epilogue, [Span(bufs["params"], SPAN_ALIGN, 48), bufs["acc_qkv"],
                              bufs["scales_in"], bufs["a1"], bufs["b1"], bufs["b2"],
                              bufs["scales"], bufs["qkv_status"]],
             (-(-(self.rows + self.slices * self.hd) // 64), 1, 1)),
            *self.core.steps(chain.attention, bufs, 2),
        ]  # fmt: skip

    def read(self, words: Callable[[str, str], npt.NDArray[Any]]) -> QkvChainOut:
        """The outputs from ``words(name, dtype)`` (``chain.Outputs.words``)."""
        slices, t, hd, rows, hd4, t4 = self.slices, self.t, self.hd, self.rows, self.hd4, self.t4

        def unpack(name: str, stride: int, k4: int, m4: int, r: int, k: int) -> Int8Array:
            per = words(name, "<u4").reshape(slices, stride)[:, : k4 * m4].reshape(slices, k4, m4)
            return np.stack([unpack_k_major(per[s], r, k) for s in range(slices)])

        status = words("qkv_status", "<u4")
        exps = status[0::2].view(np.int32)
        att = self.core.read(words)
        return QkvChainOut(
            acc_qkv=words("acc_qkv", "<i4").reshape(self.n, 3 * self.c).astype(np.int32),
            q8=unpack("a1", self.a_stride, hd4, 4 * t4, t, hd),
            q_e=exps[:rows].reshape(slices, t, 1).copy(),
            k8=unpack("b1", self.a_stride, hd4, 4 * t4, t, hd),
            k_e=exps[rows : 2 * rows].reshape(slices, t, 1).copy(),
            v8=np.ascontiguousarray(
                unpack("b2", self.v_stride, t4, 4 * hd4, hd, t).transpose(0, 2, 1)
            ),
            v_e=exps[2 * rows :].reshape(slices, 1, hd).copy(),
            qkv_status=status[1::2].astype(np.uint32),
            acc1=att.acc1, p8=att.p8, p_e=att.p_e, status=att.status, p_sum=att.p_sum,
            acc2=att.acc2,
        )  # fmt: skip


def split_heads(
    qkv: npt.NDArray[np.float32], batch: int, heads: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """q, k, v (B, H, T, hd) of the fused (N, 3C), as the model splits them (MODEL.md step 3)."""
    n, c3 = qkv.shape
    t, hd = n // batch, c3 // 3 // heads
    parts = np.ascontiguousarray(qkv.reshape(batch, t, 3, heads, hd).transpose(2, 0, 3, 1, 4))
    return parts[0], parts[1], parts[2]


def reference(
    a8: Int8Array,
    wqkv8: Int8Array,
    a_e: npt.NDArray[np.integer],
    w_e: npt.NDArray[np.integer],
    batch: int,
    heads: int,
    scale: np.float32,
) -> QkvChainOut | None:
    """The chain from numpy, the model's split and the attention chain's reference: None where
    the reference refuses."""
    n, c = a8.shape
    t, hd, slices = n // batch, c // heads, batch * heads
    acc_qkv = np.matmul(a8.astype(np.int64), wqkv8.astype(np.int64)).astype(np.int32)
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            exps = a_e.reshape(-1, 1).astype(np.int32) + w_e.reshape(1, -1).astype(np.int32)
            qkv = round_scaled(acc_qkv.astype(np.float64), exps)
            q, k, v = split_heads(qkv, batch, heads)
            (q_q, q_e), (k_q, k_e), (v_q, v_e) = quantize(q, -1), quantize(k, -1), quantize(v, -2)
    except QuantizationError:
        return None
    q8 = q_q.astype(np.int8).reshape(slices, t, hd)
    k8 = k_q.astype(np.int8).reshape(slices, t, hd)
    v8 = v_q.astype(np.int8).reshape(slices, t, hd)
    att = attention_reference(
        q8, np.ascontiguousarray(k8.transpose(0, 2, 1)), v8, q_e.reshape(-1), k_e.reshape(-1), scale
    )
    if att is None:
        return None
    return QkvChainOut(
        acc_qkv, q8, q_e.astype(np.int32).reshape(slices, t, 1), k8,
        k_e.astype(np.int32).reshape(slices, t, 1), v8, v_e.astype(np.int32).reshape(slices, 1, hd),
        np.zeros(2 * slices * t + slices * hd, dtype=np.uint32),
        att.acc1, att.p8, att.p_e, att.status, att.p_sum, att.acc2,
    )  # fmt: skip


def qkv_chain_cases() -> list[tuple[str, dict[str, object]]]:
    """(name, the run's keyword arguments): odd sizes, one head of one token, the ``tiny`` step's
    shape, and a diverged input (refused)."""
    cases: list[tuple[str, dict[str, object]]] = []
    shapes = [(1, 1, 1, 4), (2, 5, 2, 16), (4, 64, 4, 64), (1, 33, 4, 256), (3, 7, 1, 16)]
    for i, (batch, t, heads, c) in enumerate(shapes):
        hd = c // heads
        cases.append((f"random {batch}x{t}x{heads}x{c}", {
            "a8": random_int8(13, 3 * i, (batch * t, c)),
            "wqkv8": random_int8(13, 3 * i + 1, (c, 3 * c)),
            "a_e": gate_exps(14, 2 * i, batch * t, -9, -5),
            "w_e": gate_exps(14, 2 * i + 1, 3 * c, -9, -5),
            "batch": batch, "heads": heads, "scale": np.float32(1.0 / np.sqrt(hd)),
        }))  # fmt: skip
    base = dict(cases[1][1])
    cases.append(("a diverged input", {**base, "a_e": np.full(10, 120, dtype=np.int32)}))
    return cases


def run_qkv_chain_gates(chain: QkvChain) -> GateReport:
    """Every case through the chain on a poisoned pool, against ``reference``: every product and
    operand exactly, and a non-zero status where the reference refuses."""
    statuses = ["qkv_status", "status"]
    cases = qkv_chain_cases()
    return run_chain_gates(chain.name, chain.gemm.pool, cases, chain.run, reference, statuses)
