"""Attention's two products and the softmax between them in one submit and one readback (issue
20, "a GPU step that stays on the GPU").

Per head, ``S = qmatmul(q, k^T)``, ``P = softmax(S * c)`` with the causal mask, ``(P_q, P_e) =
quantize(P per query)``, ``O = qmatmul(P, v)`` (docs/MODEL.md section 4, steps 4-6) took two round
trips: the scores came back so the host could compute the softmax. Here every head's score
product, ``kernels/attention_epilogue.wgsl`` (the softmax in the softfloat library's arithmetic:
the contract's exp, the pinned tree sum, correctly rounded division) and every head's second
product are dispatches of one command encoder, and one readback brings back both integer
products and ``P_q``/``P_e``.

Proof as for the MLP chain (``mlp_chain.py``): ``run_attention_chain_gates`` at backend start; in
training the host recomputes ``P`` from the scores (the backward needs it) and refuses a step
whose ``P_q`` or ``P_e`` differs from the GPU's before trusting the second product, and the live
audit checks both products.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.chain import (
    ROW_MAX,
    SLOT_WORDS,
    epilogue_module,
    epilogue_width,
    f32_bits,
    gate_exps,
    rows_grid,
    run_and_read,
    run_chain_gates,
)
from daisychain.gpu.device import MIN_STORAGE_BINDING
from daisychain.gpu.gates import GateReport, random_int8
from daisychain.gpu.gemm import GpuGemm, aligned_words, pack_k_major_batched, side_by_side
from daisychain.gpu.kernels import (
    SPAN_ALIGN,
    BindingKind,
    Span,
    Step,
    compile_kernel,
)
from daisychain.model.gpt import softmax_causal
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import QuantizationError, quantize

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


def _transposed(x: Int8Array) -> Int8Array:
    return np.ascontiguousarray(x.transpose(0, 2, 1))


@dataclass(frozen=True)
class AttentionChainOut:
    """What one chain returns for S heads of T queries: both exact products and P's operand."""

    acc1: Int32Array  # (S, T, T) q_q @ k_q^T
    p8: Int8Array  # (S, T, T) P_q
    p_e: Int32Array  # (S, T, 1)
    status: npt.NDArray[np.uint32]  # (S, T) 0 ok, 1 non-finite, 2 |P| >= 2^100
    p_sum: npt.NDArray[np.uint32]  # (S, T) each row's P bit patterns summed mod 2^32
    acc2: Int32Array  # (S, T, hd) P_q @ v_q


# The softmax epilogue's bindings (kernels/attention_epilogue.wgsl): params, acc, scales, then
# packed, status and P's floats written.
ATTENTION_BINDINGS: list[BindingKind] = ["uniform", "read", "read", "write", "write", "write"]


class AttentionChain:
    """The chain on one GEMM kernel's device (its pipeline, pool and tile)."""

    def __init__(self, gemm: GpuGemm, *, source: str | None = None) -> None:
        """``source`` replaces the epilogue's whole module (``chain.epilogue_module``: the
        planted-bug tests)."""
        self.gemm = gemm
        self.name = f"{gemm.name}-attention"
        self.epilogue = compile_kernel(
            gemm.gpu,
            "attention_epilogue",
            ATTENTION_BINDINGS,
            epilogue_module("attention_epilogue") if source is None else source,
            {"EP_WG": epilogue_width(gemm.gpu)},
        )

    @staticmethod
    def fits(heads: int, t: int, hd: int) -> bool:
        """Whether every buffer of a chain of these sizes fits one storage binding, and a row
        of keys the epilogue's workgroup memory."""
        if not 0 < t <= ROW_MAX:
            return False
        words = aligned_words(t * t) + aligned_words(t * max(hd, 4))
        return bool(0 < 4 * heads * words <= MIN_STORAGE_BINDING)

    def run(
        self,
        q8: Int8Array,
        kt8: Int8Array,
        v8: Int8Array,
        q_e: npt.NDArray[np.integer],
        k_e: npt.NDArray[np.integer],
        scale: np.float32,
    ) -> AttentionChainOut:
        """Heads q8 (S, T, hd) @ kt8 (S, hd, T) with row exponents ``q_e`` (S*T) and column
        exponents ``k_e`` (S*T), the softmax scaled by ``scale``, then P_q (S, T, T) @ v8
        (S, T, hd): one submit, one readback."""
        heads, t, hd = q8.shape
        if kt8.shape != (heads, hd, t) or v8.shape != (heads, t, hd):
            raise ValueError(f"attention chain: {q8.shape}, {kt8.shape}, {v8.shape}")
        if q_e.size != heads * t or k_e.size != heads * t:
            raise ValueError(f"attention chain: {q_e.size} and {k_e.size} exponents")
        if not self.fits(heads, t, hd):
            raise ValueError(f"attention chain: ({heads}, {t}, {hd}) exceeds a storage binding")
        pool = self.gemm.pool
        # B operands are packed from B^T: k for the scores, v^T for the second product
        a1, a1_stride = side_by_side(pack_k_major_batched(q8))
        b1, b1_stride = side_by_side(pack_k_major_batched(_transposed(kt8)))
        b2, b2_stride = side_by_side(pack_k_major_batched(_transposed(v8)))
        core = AttentionCore(heads, t, hd, scale, (a1_stride, b1_stride, b2_stride))
        bufs = {
            "params": pool.upload(core.params().reshape(-1), uniform=True),
            "a1": pool.upload(a1),
            "b1": pool.upload(b1),
            "b2": pool.upload(b2),
            "scales": pool.upload(np.concatenate([q_e.reshape(-1), k_e.reshape(-1)]).astype("<i4")),
            **{name: pool.acquire(size) for name, size in core.sizes().items()},
            **{name: pool.acquire(size) for name, size in core.scratch().items()},
        }
        steps = core.steps(self, bufs, 0)
        out = run_and_read(self.gemm.gpu, pool, steps, bufs, core.sizes())
        return core.read(out.words)


class AttentionCore:
    """The scores, the softmax and the second product of S heads: their params, output sizes,
    dispatches and outputs, for ``AttentionChain.run`` and for a chain that makes the operands
    on the GPU first (``qkv_chain.QkvChain``)."""

    def __init__(
        self, heads: int, t: int, hd: int, scale: np.float32, strides: tuple[int, int, int]
    ) -> None:
        self.heads, self.t, self.hd, self.scale = heads, t, hd, scale
        self.a1_stride, self.b1_stride, self.b2_stride = strides
        self.t4, self.m4 = -(-t // 4), 4 * -(-t // 4)
        self.acc_stride = aligned_words(t * t)
        self.packed_stride = aligned_words(self.t4 * self.m4)
        self.out_stride = aligned_words(t * hd)
        self.rows = heads * t

    def params(self) -> npt.NDArray[np.uint32]:
        """Its params slots: one per score product, the epilogue's, one per second product."""
        heads, t, hd = self.heads, self.t, self.hd
        params = np.zeros((2 * heads + 1, SLOT_WORDS), dtype="<u4")
        params[:heads, :4] = (t, t, max(1, -(-hd // 4)), 0)
        params[:heads, 3] = np.arange(heads)
        width = 1 << (t - 1).bit_length()
        params[heads, :8] = (
            t, self.rows, self.acc_stride, self.packed_stride, self.t4, self.m4, width,
            f32_bits(self.scale),
        )  # fmt: skip
        params[heads + 1 :, :4] = (t, hd, self.t4, 0)
        params[heads + 1 :, 3] = np.arange(heads)
        return params

    def sizes(self) -> dict[str, int]:
        return {
            "acc1": self.heads * self.acc_stride * 4,
            "packed": self.heads * self.packed_stride * 4,
            "status": 3 * self.rows * 4,
            "acc2": self.heads * self.out_stride * 4,
        }

    def scratch(self) -> dict[str, int]:
        """Buffers the dispatches write but a chain of its own does not read back: P's floats."""
        return {"p_out": self.rows * self.t * 4}

    def steps(self, chain: AttentionChain, bufs: dict[str, Any], slot: int) -> list[Step]:
        """The dispatches, reading ``bufs`` "a1", "b1", "b2", "scales", the params slots from
        ``slot`` on, and writing the outputs (``sizes``) and ``scratch``."""
        gemm, heads, t, hd = chain.gemm, self.heads, self.t, self.hd
        lut = [gemm._lut] if gemm._lut is not None else []
        tm, tn = gemm.tile

        def params_at(i: int, size: int = 16) -> Span:
            return Span(bufs["params"], (slot + i) * SPAN_ALIGN, size)

        def region(name: str, s: int, stride: int) -> Span:
            return Span(bufs[name], s * stride * 4, stride * 4)

        steps: list[Step] = []
        for s in range(heads):
            steps.append((gemm.kernel, [
                params_at(s), region("a1", s, self.a1_stride), region("b1", s, self.b1_stride),
                region("acc1", s, self.acc_stride), *lut,
            ], (-(-t // tn), -(-t // tm), 1)))  # fmt: skip
        steps.append((chain.epilogue, [
            params_at(heads, 32), bufs["acc1"], bufs["scales"], bufs["packed"], bufs["status"],
            bufs["p_out"],
        ], rows_grid(self.rows)))  # fmt: skip
        for s in range(heads):
            steps.append((gemm.kernel, [
                params_at(heads + 1 + s), region("packed", s, self.packed_stride),
                region("b2", s, self.b2_stride), region("acc2", s, self.out_stride), *lut,
            ], (-(-hd // tn), -(-t // tm), 1)))  # fmt: skip
        return steps

    def read(self, words: Callable[[str, str], npt.NDArray[Any]]) -> AttentionChainOut:
        """The outputs from ``words(name, dtype)`` (``chain.Outputs.words``)."""
        heads, t, hd, t4, m4 = self.heads, self.t, self.hd, self.t4, self.m4
        acc1 = words("acc1", "<i4").reshape(heads, self.acc_stride)[:, : t * t]
        packed = words("packed", "<u4").reshape(heads, self.packed_stride)[:, : t4 * m4]
        p_words = np.ascontiguousarray(packed.reshape(heads, t4, m4).transpose(0, 2, 1))
        p8 = p_words.view(np.int8).reshape(heads, m4, 4 * t4)[:, :t, :t]
        status = words("status", "<u4").reshape(heads, t, 3)
        acc2 = words("acc2", "<i4").reshape(heads, self.out_stride)[:, : t * hd]
        return AttentionChainOut(
            acc1=acc1.reshape(heads, t, t).astype(np.int32),
            p8=np.ascontiguousarray(p8),
            p_e=status[..., 0].view(np.int32).reshape(heads, t, 1).copy(),
            status=status[..., 1].astype(np.uint32),
            p_sum=status[..., 2].astype(np.uint32),
            acc2=acc2.reshape(heads, t, hd).astype(np.int32),
        )


def reference(
    q8: Int8Array,
    kt8: Int8Array,
    v8: Int8Array,
    q_e: npt.NDArray[np.integer],
    k_e: npt.NDArray[np.integer],
    scale: np.float32,
) -> AttentionChainOut | None:
    """The chain from numpy and the model's own softmax: None where the reference refuses P."""
    heads, t, _ = q8.shape
    acc1 = np.matmul(q8.astype(np.int64), kt8.astype(np.int64)).astype(np.int32)
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are refused below
            s = round_scaled(
                acc1.astype(np.float64),
                q_e.reshape(heads, t, 1).astype(np.int32) + k_e.reshape(heads, 1, t),
            )
            p = softmax_causal(s[None], np.float32(scale))[0]
            p_q, p_e = quantize(p, axis=-1)
    except QuantizationError:
        return None
    p8 = p_q.astype(np.int8)
    acc2 = np.matmul(p8.astype(np.int64), v8.astype(np.int64)).astype(np.int32)
    status = np.zeros((heads, t), np.uint32)
    return AttentionChainOut(acc1, p8, p_e.astype(np.int32), status, bits_sum(p), acc2)


def bits_sum(p: npt.NDArray[np.float32]) -> npt.NDArray[np.uint32]:
    """Each row's float32 bit patterns summed mod 2^32 (the epilogue's checksum of P)."""
    total = np.ascontiguousarray(p).view(np.uint32).sum(axis=-1, dtype=np.uint64)
    out: npt.NDArray[np.uint32] = (total & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return out


def _int8(case: int, shape: tuple[int, ...]) -> Int8Array:
    return random_int8(8, case, shape)


def _exps(case: int, n: int, lo: int, hi: int) -> npt.NDArray[np.int32]:
    return gate_exps(9, case, n, lo, hi)


Case = tuple[
    str, Int8Array, Int8Array, Int8Array, npt.NDArray[np.int32], npt.NDArray[np.int32], np.float32
]


def attention_chain_cases() -> list[Case]:
    """(name, q8, kt8, v8, q_e, k_e, scale): odd and tile-edge sizes, a non-power-of-two T (the
    padded tree sum), the model's exponent range, scores large enough that most p underflow to
    +0, and overflowing scores (refused)."""
    cases: list[Case] = []
    shapes = [(1, 1, 4), (2, 5, 16), (3, 17, 4), (16, 64, 16), (2, 33, 64), (1, 100, 16)]
    for i, (heads, t, hd) in enumerate(shapes):
        scale = np.float32(1.0 / np.sqrt(hd))
        cases.append((
            f"random {heads}x{t}x{hd}", _int8(3 * i, (heads, t, hd)),
            _int8(3 * i + 1, (heads, hd, t)), _int8(3 * i + 2, (heads, t, hd)),
            _exps(2 * i, heads * t, -9, -4), _exps(2 * i + 1, heads * t, -9, -4), scale,
        ))  # fmt: skip
    q, kt, v = _int8(50, (2, 24, 16)), _int8(51, (2, 16, 24)), _int8(52, (2, 24, 16))
    quarter = np.float32(0.25)
    for name, lo, hi, case in (
        ("peaked scores", -2, 0, 20),  # most p underflow to +0
        ("spread scores", -7, -5, 22),  # p across (0, 1]: the tree's order shows in the sum
        ("overflowing scores", 60, 70, 24),  # refused
    ):
        q_e, k_e = _exps(case, 48, lo, hi), _exps(case + 1, 48, lo, hi)
        cases.append((name, q, kt, v, q_e, k_e, quarter))
    return cases


def run_attention_chain_gates(chain: AttentionChain) -> GateReport:
    """Every case through the chain on a poisoned pool, against ``reference``: both products,
    P_q, P_e and the P checksums exactly, and a non-zero status where the reference refuses."""
    keys = ("q8", "kt8", "v8", "q_e", "k_e", "scale")
    cases = [(c[0], dict(zip(keys, c[1:], strict=True))) for c in attention_chain_cases()]
    return run_chain_gates(chain.name, chain.gemm.pool, cases, chain.run, reference, ["status"])
