"""A block's tail in one submit and one readback: attention's output product, the residual add,
the RMSNorm and the MLP.

``h = h + qmatmul(o, wo)``, ``bn = rmsnorm(h, g2)``, ``(b_q, b_e) = quantize(bn)``, then the MLP
(docs/MODEL.md section 4, steps 7-9). With the MLP chain alone (``mlp_chain.py``) the output
product came back first so the host could add, normalise and quantize. Here the output product,
``kernels/norm_epilogue.wgsl`` (that work in the softfloat library's arithmetic; it also writes
the exponents the MLP's epilogue scales by) and the MLP chain's three dispatches go in one
command encoder, and one readback brings back the three integer products, ``b_q``/``b_e`` with a
checksum of ``bn``, and ``r_q``/``r_e``.

Proof as for the other chains: ``run_block_chain_gates`` at backend start; in training the host
recomputes ``h``, the norm and both quantized operands, and refuses a step whose GPU operand (or
``bn`` checksum) differs before trusting the products computed from it; every product is audited.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.attention_chain import bits_sum
from daisychain.gpu.chain import (
    ROW_MAX,
    epilogue_module,
    epilogue_width,
    f32_bits,
    gate_exps,
    rows_grid,
    run_and_read,
    run_chain_gates,
    unpack_k_major,
)
from daisychain.gpu.device import MIN_STORAGE_BINDING
from daisychain.gpu.gates import GateReport, random_f32, random_int8
from daisychain.gpu.gemm import pack_k_major
from daisychain.gpu.kernels import (
    SPAN_ALIGN,
    BindingKind,
    Span,
    Step,
    compile_kernel,
)
from daisychain.gpu.mlp_chain import MlpChain
from daisychain.gpu.mlp_chain import reference as mlp_reference
from daisychain.model.gpt import rmsnorm_forward
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import QuantizationError, quantize

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]
F32Array = npt.NDArray[np.float32]


@dataclass(frozen=True)
class BlockChainOut:
    """The three exact products and the two operands the GPU made between them."""

    acc_wo: Int32Array  # (M, C) o_q @ wo_q
    b8: Int8Array  # (M, C) b_q, the quantized norm output
    b_e: Int32Array  # (M, 1)
    b_status: npt.NDArray[np.uint32]  # (M,) 0 ok, 1 non-finite, 2 |bn| >= 2^100
    b_sum: npt.NDArray[np.uint32]  # (M,) each row's bn bit patterns summed mod 2^32
    acc1: Int32Array  # (M, F) b_q @ w1_q
    r8: Int8Array  # (M, F)
    r_e: Int32Array  # (M, 1)
    r_status: npt.NDArray[np.uint32]  # (M,)
    acc2: Int32Array  # (M, C) r_q @ w2_q


# The norm epilogue's bindings (kernels/norm_epilogue.wgsl): params, acc, scales, h, g, then
# packed, status, next and h_out written.
NORM_BINDINGS: list[BindingKind] = [
    "uniform", "read", "read", "read", "read", "write", "write", "write", "write",
]  # fmt: skip


class BlockChain:
    """The chain on an MLP chain's GEMM (its pipelines, pool and tile)."""

    def __init__(self, mlp: MlpChain, *, source: str | None = None) -> None:
        """``source`` replaces the epilogue's whole module (``chain.epilogue_module``: the
        planted-bug tests)."""
        self.mlp = mlp
        self.gemm = mlp.gemm
        self.name = f"{self.gemm.name}-block"
        self.epilogue = compile_kernel(
            self.gemm.gpu,
            "norm_epilogue",
            NORM_BINDINGS,
            epilogue_module("norm_epilogue") if source is None else source,
            {"EP_WG": epilogue_width(self.gemm.gpu)},
        )

    @staticmethod
    def fits(m: int, c: int, f: int) -> bool:
        """Whether every buffer fits one storage binding, and a token's row the epilogue's
        workgroup memory."""
        return 0 < c <= ROW_MAX and MlpChain.fits(m, c, f, c) and 4 * m * c <= MIN_STORAGE_BINDING

    def run(
        self,
        o8: Int8Array,
        wo8: Int8Array,
        o_e: npt.NDArray[np.integer],
        wo_e: npt.NDArray[np.integer],
        h: F32Array,
        g: F32Array,
        eps: np.float32,
        w1_8: Int8Array,
        w1_e: npt.NDArray[np.integer],
        w2_8: Int8Array,
    ) -> BlockChainOut:
        """o8 (M, C) @ wo8 (C, C) with exponents ``o_e`` (M), ``wo_e`` (C); the residual ``h``
        (M, C) plus it, normalised with gain ``g`` (C) and ``eps``, quantized; then the MLP with
        w1_8 (C, F) (exponents ``w1_e``, F) and w2_8 (F, C): five dispatches, one readback."""
        m, c = o8.shape
        f = w1_8.shape[1]
        if wo8.shape != (c, c) or w1_8.shape[0] != c or w2_8.shape != (f, c):
            raise ValueError(f"block chain: {o8.shape} {wo8.shape} {w1_8.shape} {w2_8.shape}")
        if h.shape != (m, c) or g.size != c or o_e.size != m or wo_e.size != c or w1_e.size != f:
            raise ValueError("block chain: the residual, gain or exponents do not fit")
        if not self.fits(m, c, f):
            raise ValueError(f"block chain: ({m}, {c}, {f}) exceeds one storage binding")
        pool = self.gemm.pool
        layout = BlockLayout(m, c, f)
        bufs = {
            "params": pool.upload(layout.params(eps), uniform=True),
            "a_o": pool.upload(pack_k_major(o8)),
            "b_wo": pool.upload(pack_k_major(np.ascontiguousarray(wo8.T))),
            "scales_o": pool.upload(
                np.concatenate([o_e.reshape(-1), wo_e.reshape(-1)]).astype("<i4")
            ),
            "h": pool.upload(np.ascontiguousarray(h, dtype=np.float32).view("<u4")),
            "g": pool.upload(np.ascontiguousarray(g, dtype=np.float32).view("<u4")),
            "next": pool.upload(layout.next_scales(w1_e)),
            "b_w1": pool.upload(pack_k_major(np.ascontiguousarray(w1_8.T))),
            "b_w2": pool.upload(pack_k_major(np.ascontiguousarray(w2_8.T))),
            "next2": pool.acquire(m * 4),  # r_e for a dequantization on the GPU: unused here
            "h_out": pool.acquire(m * c * 4),  # the residual after the add: unused here
            "relu": pool.acquire(m * f * 4),  # the ReLU's mask: unused here
            **{name: pool.acquire(size) for name, size in layout.sizes().items()},
        }
        out = run_and_read(self.gemm.gpu, pool, layout.steps(self, bufs), bufs, layout.sizes())
        return layout.read(out.words)


class BlockLayout:
    """The block chain's params, outputs, dispatches and unpacking for M tokens of width C and
    an MLP of width F: ``BlockChain.run``, and the forward chain, which records the same
    dispatches on buffers earlier epilogues wrote (``forward_chain.py``)."""

    def __init__(self, m: int, c: int, f: int) -> None:
        self.m, self.c, self.f = m, c, f
        self.c4, self.f4, self.m4 = -(-c // 4), -(-f // 4), 4 * -(-m // 4)

    def params(self, eps: np.float32) -> npt.NDArray[np.uint32]:
        """The five dispatches' params slots."""
        m, c, f, c4, f4, m4 = self.m, self.c, self.f, self.c4, self.f4, self.m4
        slot = SPAN_ALIGN // 4
        params = np.zeros(5 * slot, dtype="<u4")
        params[0:4] = (m, c, c4, 0)  # o @ wo
        params[slot : slot + 8] = norm_params(m, c, eps)
        params[2 * slot : 2 * slot + 4] = (m, f, c4, 0)  # b @ w1
        params[3 * slot : 3 * slot + 4] = (m, f, f4, m4)  # the MLP epilogue
        params[4 * slot : 4 * slot + 4] = (m, c, f4, 0)  # r @ w2
        return params

    def next_scales(self, w1_e: npt.NDArray[np.integer]) -> npt.NDArray[np.int32]:
        """The MLP epilogue's scales before the norm wrote b_e into them: w1's after M."""
        next_scales = np.zeros(self.m + self.f, dtype="<i4")
        next_scales[self.m :] = w1_e.reshape(-1)
        return next_scales

    def sizes(self) -> dict[str, int]:
        m, c, f, c4, f4, m4 = self.m, self.c, self.f, self.c4, self.f4, self.m4
        return {
            "acc_wo": m * c * 4,
            "b_status": 3 * m * 4,
            "b_packed": c4 * m4 * 4,
            "acc1": m * f * 4,
            "r_packed": f4 * m4 * 4,
            "r_status": 2 * m * 4,
            "acc2": m * c * 4,
        }

    def steps(self, chain: BlockChain, bufs: dict[str, Any]) -> list[Step]:
        """The five dispatches on ``bufs``: "params" (``params``), "a_o", "b_wo", "scales_o",
        "h", "g", "next", "b_w1", "b_w2", "next2", "h_out", "relu" and the outputs
        (``sizes``)."""
        m, c, f = self.m, self.c, self.f
        gemm = chain.gemm
        lut = [gemm._lut] if gemm._lut is not None else []
        tm, tn = gemm.tile

        def params_at(i: int, size: int = 16) -> Span:
            return Span(bufs["params"], i * SPAN_ALIGN, size)

        return [
            (gemm.kernel, [params_at(0), bufs["a_o"], bufs["b_wo"], bufs["acc_wo"], *lut],
             (-(-c // tn), -(-m // tm), 1)),
            (chain.epilogue, [params_at(1, 32), bufs["acc_wo"], bufs["scales_o"], bufs["h"],
                              bufs["g"], bufs["b_packed"], bufs["b_status"], bufs["next"],
                              bufs["h_out"]],
             rows_grid(m)),
            (gemm.kernel, [params_at(2), bufs["b_packed"], bufs["b_w1"], bufs["acc1"], *lut],
             (-(-f // tn), -(-m // tm), 1)),
            (chain.mlp.epilogue, [params_at(3), bufs["acc1"], bufs["next"], bufs["r_packed"],
                                  bufs["r_status"], bufs["next2"], bufs["relu"]],
             rows_grid(m)),
            (gemm.kernel, [params_at(4), bufs["r_packed"], bufs["b_w2"], bufs["acc2"], *lut],
             (-(-c // tn), -(-m // tm), 1)),
        ]  # fmt: skip

    def read(self, words: Callable[[str, str], npt.NDArray[Any]]) -> BlockChainOut:
        """The outputs from ``words(name, dtype)`` (``chain.Outputs.words``)."""
        m, c, f, m4 = self.m, self.c, self.f, self.m4

        def unpack(name: str, k4: int, k: int) -> Int8Array:
            return unpack_k_major(words(name, "<u4").reshape(k4, m4), m, k)

        b_status = words("b_status", "<u4").reshape(m, 3)
        r_status = words("r_status", "<u4").reshape(m, 2)
        return BlockChainOut(
            acc_wo=words("acc_wo", "<i4").reshape(m, c).astype(np.int32),
            b8=unpack("b_packed", self.c4, c),
            b_e=b_status[:, 0].view(np.int32).reshape(m, 1).copy(),
            b_status=b_status[:, 1].astype(np.uint32),
            b_sum=b_status[:, 2].astype(np.uint32),
            acc1=words("acc1", "<i4").reshape(m, f).astype(np.int32),
            r8=unpack("r_packed", self.f4, f),
            r_e=r_status[:, 0].view(np.int32).reshape(m, 1).copy(),
            r_status=r_status[:, 1].astype(np.uint32),
            acc2=words("acc2", "<i4").reshape(m, c).astype(np.int32),
        )


def norm_params(m: int, c: int, eps: np.float32) -> tuple[int, ...]:
    """The norm epilogue's params for M tokens of width C (``kernels/norm_epilogue.wgsl``)."""
    return (m, c, -(-c // 4), 4 * -(-m // 4), 1 << (c - 1).bit_length(), f32_bits(c),
            f32_bits(eps), 0)  # fmt: skip


def reference(
    o8: Int8Array,
    wo8: Int8Array,
    o_e: npt.NDArray[np.integer],
    wo_e: npt.NDArray[np.integer],
    h: F32Array,
    g: F32Array,
    eps: np.float32,
    w1_8: Int8Array,
    w1_e: npt.NDArray[np.integer],
    w2_8: Int8Array,
) -> BlockChainOut | None:
    """The chain from numpy and the model's own norm: None where the reference refuses."""
    acc_wo = np.matmul(o8.astype(np.int64), wo8.astype(np.int64)).astype(np.int32)
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            y = round_scaled(acc_wo.astype(np.float64), o_e.reshape(-1, 1) + wo_e.reshape(1, -1))
            h1 = h + y
            bn, _ = rmsnorm_forward(h1, g, eps)
            b_q, b_e = quantize(bn, axis=-1)
    except QuantizationError:
        return None
    b8 = b_q.astype(np.int8)
    mlp = mlp_reference(b8, w1_8, b_e.reshape(-1), w1_e.reshape(-1), w2_8)
    if mlp is None:
        return None
    m = o8.shape[0]
    zeros = np.zeros(m, dtype=np.uint32)
    return BlockChainOut(
        acc_wo, b8, b_e.astype(np.int32), zeros, bits_sum(bn),
        mlp.acc1, mlp.r8, mlp.r_e, mlp.status, mlp.acc2,
    )  # fmt: skip


def _int8(case: int, shape: tuple[int, ...]) -> Int8Array:
    return random_int8(10, case, shape)


def _exps(case: int, n: int, lo: int, hi: int) -> npt.NDArray[np.int32]:
    return gate_exps(11, case, n, lo, hi)


def _f32(case: int, shape: tuple[int, ...], scale: float) -> F32Array:
    return (random_f32(12, case, shape) * np.float32(scale)).astype(np.float32)


Case = tuple[str, dict[str, npt.NDArray[np.generic] | np.float32]]


def block_chain_cases() -> list[Case]:
    """(name, the run's keyword arguments): odd and tile-edge sizes, a non-power-of-two width
    (the padded tree sum), the model's exponent and residual ranges, a residual that cancels the
    product (tiny rows), one whose squares overflow (zero rows) and a non-finite one (refused)."""
    cases: list[Case] = []
    shapes = [(1, 4, 16), (5, 12, 20), (33, 64, 256), (64, 24, 96), (130, 16, 64)]
    eps = np.float32(1e-5)
    for i, (m, c, f) in enumerate(shapes):
        cases.append((f"random {m}x{c}x{f}", {
            "o8": _int8(6 * i, (m, c)), "wo8": _int8(6 * i + 1, (c, c)),
            "o_e": _exps(4 * i, m, -9, -5), "wo_e": _exps(4 * i + 1, c, -9, -5),
            "h": _f32(3 * i, (m, c), 2.0), "g": _f32(3 * i + 1, (c,), 1.5), "eps": eps,
            "w1_8": _int8(6 * i + 2, (c, f)), "w1_e": _exps(4 * i + 2, f, -9, -5),
            "w2_8": _int8(6 * i + 3, (f, c)),
        }))  # fmt: skip
    base = dict(cases[1][1])
    o8, wo8 = base["o8"], base["wo8"]
    assert isinstance(o8, np.ndarray) and isinstance(wo8, np.ndarray)
    y = round_scaled(
        np.matmul(o8.astype(np.int64), wo8.astype(np.int64)).astype(np.float64),
        np.asarray(base["o_e"], dtype=np.int32).reshape(-1, 1)
        + np.asarray(base["wo_e"], dtype=np.int32).reshape(1, -1),
    )
    cancel = (-y + _f32(40, y.shape, 1e-6)).astype(np.float32)
    cases.append(("a residual that cancels the product", {**base, "h": cancel}))
    # x * x overflows: inv is 0 and every bn +-0 (a zero row, not a refusal)
    huge = np.full(y.shape, np.float32(3e38), dtype=np.float32)
    cases.append(("a residual whose squares overflow", {**base, "h": huge}))
    broken = huge.copy()
    broken[:, 0] = np.float32(np.inf)  # inf * 0 is NaN: refused
    cases.append(("a non-finite residual", {**base, "h": broken}))
    return cases


def run_block_chain_gates(chain: BlockChain) -> GateReport:
    """Every case through the chain on a poisoned pool, against ``reference``: every product and
    operand exactly, the bn checksums, and a non-zero status where the reference refuses."""
    statuses = ["b_status", "r_status"]
    cases = block_chain_cases()
    return run_chain_gates(chain.name, chain.gemm.pool, cases, chain.run, reference, statuses)
