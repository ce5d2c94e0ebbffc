"""The MLP of a block in one submit and one readback.

``u = qmatmul(bn, w1)``, ``r = relu(u)``, ``(r_q, r_e) = quantize(r per row)``, ``y =
qmatmul(r, w2)`` (docs/MODEL.md section 4, steps 8-9) took two round trips: the first product
came back so the host could dequantize, apply the ReLU and quantize its output for the second.
Here the first product, ``kernels/mlp_epilogue.wgsl`` (that work in integer instructions, so its
bits cannot depend on the device) and the second product are three dispatches of one command
encoder, and one readback brings back what the step needs: both integer products (the host
dequantizes them, and the live audit checks them), and ``r_q``/``r_e`` (the second product's
operand, which the backward reuses).

Nothing unproven leaves: ``run_mlp_chain_gates`` compares the chain with the numpy reference at
backend start (a device whose epilogue differs in one bit does not use the chain), and in
training the host recomputes ``r`` from the first product and refuses a step whose ``r_q`` or
``r_e`` differs from the GPU's in one value (``model.ops.IntGemmOps.mlp``) before trusting the
second product, which the live audit then checks against the operand the GPU used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from daisychain.gpu.chain import (
    epilogue_module,
    epilogue_width,
    gate_exps,
    rows_grid,
    run_and_read,
    run_chain_gates,
    unpack_k_major,
)
from daisychain.gpu.device import MIN_STORAGE_BINDING
from daisychain.gpu.gates import GateReport, random_int8
from daisychain.gpu.gemm import GpuGemm, pack_k_major
from daisychain.gpu.kernels import (
    SPAN_ALIGN,
    BindingKind,
    Span,
    Step,
    compile_kernel,
)
from daisychain.model.ops import relu_in_place
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import QuantizationError, quantize

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


@dataclass(frozen=True)
class MlpChainOut:
    """What one chain returns: both exact products, and the second one's operand."""

    acc1: Int32Array  # (M, F) bn_q @ w1_q
    r8: Int8Array  # (M, F) r_q, the quantized ReLU output
    r_e: Int32Array  # (M, 1) its row exponents
    status: npt.NDArray[np.uint32]  # (M,) 0 ok, 1 non-finite, 2 |r| >= 2^100 (quantize.wgsl's)
    acc2: Int32Array  # (M, C2) r_q @ w2_q


# The MLP epilogue's bindings (kernels/mlp_epilogue.wgsl): params, acc, scales, then packed,
# status, next and the ReLU's mask written.
MLP_BINDINGS: list[BindingKind] = ["uniform", "read", "read", "write", "write", "write", "write"]


class MlpChain:
    """The chain on one GEMM kernel's device (its pipeline, pool and tile)."""

    def __init__(self, gemm: GpuGemm, *, source: str | None = None) -> None:
        """``source`` replaces the epilogue's whole module (``chain.epilogue_module``: the
        planted-bug tests)."""
        self.gemm = gemm
        self.name = f"{gemm.name}-mlp"
        self.epilogue = compile_kernel(
            gemm.gpu,
            "mlp_epilogue",
            MLP_BINDINGS,
            epilogue_module("mlp_epilogue") if source is None else source,
            {"EP_WG": epilogue_width(gemm.gpu)},
        )

    @staticmethod
    def fits(m: int, c: int, f: int, c2: int) -> bool:
        """Whether every buffer of a chain of these sizes fits one storage binding."""
        widest = 4 * max(m * f, m * c2, m * c, c * f, f * c2)
        return 0 < widest <= MIN_STORAGE_BINDING

    def run(
        self,
        b8: Int8Array,
        w1_8: Int8Array,
        row_e: npt.NDArray[np.integer],
        col_e: npt.NDArray[np.integer],
        w2_8: Int8Array,
    ) -> MlpChainOut:
        """b8 (M, C) @ w1_8 (C, F), the epilogue with scales ``row_e`` (M) and ``col_e`` (F),
        then r_q (M, F) @ w2_8 (F, C2): three dispatches, one submit, one readback."""
        m, c = b8.shape
        f, c2 = w1_8.shape[1], w2_8.shape[1]
        if w1_8.shape[0] != c or w2_8.shape[0] != f:
            raise ValueError(f"mlp chain: {b8.shape} @ {w1_8.shape} then @ {w2_8.shape}")
        if row_e.size != m or col_e.size != f:
            raise ValueError(f"mlp chain: {row_e.size} row and {col_e.size} column exponents")
        if not self.fits(m, c, f, c2):
            raise ValueError(f"mlp chain: ({m}, {c}, {f}, {c2}) exceeds one storage binding")
        gemm, pool = self.gemm, self.gemm.pool
        f4, m4 = -(-f // 4), 4 * -(-m // 4)
        slot = SPAN_ALIGN // 4
        params = np.zeros(3 * slot, dtype="<u4")
        params[0:4] = (m, f, max(1, -(-c // 4)), 0)  # the first product
        params[slot : slot + 4] = (m, f, f4, m4)  # the epilogue
        params[2 * slot : 2 * slot + 4] = (m, c2, f4, 0)  # the second product
        scales = np.concatenate([row_e.reshape(-1), col_e.reshape(-1)]).astype("<i4")
        sizes = {"acc1": m * f * 4, "packed": f4 * m4 * 4, "status": 2 * m * 4, "acc2": m * c2 * 4}
        bufs = {
            "params": pool.upload(params, uniform=True),
            "a1": pool.upload(pack_k_major(b8)),
            "b1": pool.upload(pack_k_major(np.ascontiguousarray(w1_8.T))),
            "scales": pool.upload(scales),
            "b2": pool.upload(pack_k_major(np.ascontiguousarray(w2_8.T))),
            "next": pool.acquire(m * 4),  # r_e for a dequantization on the GPU: unused here
            "relu": pool.acquire(m * f * 4),  # the mask for the backward chain: unused here
            **{name: pool.acquire(size) for name, size in sizes.items()},
        }
        lut = [gemm._lut] if gemm._lut is not None else []
        tm, tn = gemm.tile
        steps: list[Step] = [
            (
                gemm.kernel,
                [Span(bufs["params"], 0, 16), bufs["a1"], bufs["b1"], bufs["acc1"], *lut],
                (-(-f // tn), -(-m // tm), 1),
            ),
            (
                self.epilogue,
                [
                    Span(bufs["params"], SPAN_ALIGN, 16),
                    bufs["acc1"],
                    bufs["scales"],
                    bufs["packed"],
                    bufs["status"],
                    bufs["next"],
                    bufs["relu"],
                ],
                rows_grid(m),
            ),
            (
                gemm.kernel,
                [
                    Span(bufs["params"], 2 * SPAN_ALIGN, 16),
                    bufs["packed"],
                    bufs["b2"],
                    bufs["acc2"],
                    *lut,
                ],
                (-(-c2 // tn), -(-m // tm), 1),
            ),
        ]
        out = run_and_read(gemm.gpu, pool, steps, bufs, sizes)
        words = out.words

        status = words("status", "<u4").reshape(m, 2)
        return MlpChainOut(
            acc1=words("acc1", "<i4").reshape(m, f).astype(np.int32),
            r8=unpack_k_major(words("packed", "<u4").reshape(f4, m4), m, f),
            r_e=status[:, 0].view(np.int32).reshape(m, 1).copy(),
            status=status[:, 1].astype(np.uint32),
            acc2=words("acc2", "<i4").reshape(m, c2).astype(np.int32),
        )


def reference(
    b8: Int8Array,
    w1_8: Int8Array,
    row_e: npt.NDArray[np.integer],
    col_e: npt.NDArray[np.integer],
    w2_8: Int8Array,
) -> MlpChainOut | None:
    """The chain from numpy and ``numerics``: None where the reference refuses r (non-finite or
    diverged), where the chain must report a non-zero status instead."""
    acc1 = np.matmul(b8.astype(np.int64), w1_8.astype(np.int64)).astype(np.int32)
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are refused below
            u = round_scaled(
                acc1.astype(np.float64),
                row_e.reshape(-1, 1).astype(np.int32) + col_e.reshape(1, -1),
            )
            relu_in_place(u)
            r_q, r_e = quantize(u, axis=-1)
    except QuantizationError:
        return None
    r8 = r_q.astype(np.int8)
    acc2 = np.matmul(r8.astype(np.int64), w2_8.astype(np.int64)).astype(np.int32)
    m = b8.shape[0]
    return MlpChainOut(acc1, r8, r_e.astype(np.int32), np.zeros(m, dtype=np.uint32), acc2)


def _int8(case: int, shape: tuple[int, ...]) -> Int8Array:
    return random_int8(6, case, shape)


def _exps(case: int, n: int, lo: int, hi: int) -> npt.NDArray[np.int32]:
    return gate_exps(7, case, n, lo, hi)


def mlp_chain_cases() -> list[tuple[str, Int8Array, Int8Array, Int32Array, Int32Array, Int8Array]]:
    """(name, b8, w1_8, row_e, col_e, w2_8): odd and tile-edge sizes, the model's exponent range,
    rows that scale into the subnormals or out of range, and rows the ReLU empties."""
    cases = []
    shapes = [(1, 4, 4, 4), (5, 7, 9, 3), (33, 64, 256, 64), (64, 16, 37, 31), (130, 8, 12, 5)]
    for i, (m, c, f, c2) in enumerate(shapes):
        cases.append((
            f"random {m}x{c}x{f}x{c2}", _int8(4 * i, (m, c)), _int8(4 * i + 1, (c, f)),
            _exps(2 * i, m, -14, -4), _exps(2 * i + 1, f, -14, -4), _int8(4 * i + 2, (f, c2)),
        ))  # fmt: skip
    # Row maxima 255, 254 and 127 at scale 1: the scale bump exactly at its threshold (255 has
    # mantissa 0x7F0000), just below it, and a power-of-two step below.
    ones = np.tril(np.ones((3, 3), dtype=np.int8))[::-1].copy()
    w_bump = np.array([[127, 1, 0], [127, 1, 0], [1, 0, 1]], dtype=np.int8)
    zero = np.zeros(3, dtype=np.int32)
    cases.append(("amax at the scale bump", ones, w_bump, zero, zero, _int8(103, (3, 5))))
    b8, w1, w2 = _int8(100, (9, 8)), _int8(101, (8, 12)), _int8(102, (12, 6))
    cases.append(("subnormal u", b8, w1, _exps(20, 9, -150, -130), _exps(21, 12, -10, 0), w2))
    cases.append(("large u", b8, w1, _exps(22, 9, 60, 80), _exps(23, 12, 20, 30), w2))
    cases.append(("overflowing u", b8, w1, _exps(24, 9, 100, 110), _exps(25, 12, 10, 20), w2))
    negative = -np.abs(b8.astype(np.int16)).clip(-127, 127).astype(np.int8)
    cases.append((
        "rows the ReLU empties", negative, np.abs(w1.astype(np.int16)).clip(0, 127).astype(np.int8),
        _exps(26, 9, -10, -5), _exps(27, 12, -10, -5), w2,
    ))  # fmt: skip
    return cases


def run_mlp_chain_gates(chain: MlpChain) -> GateReport:
    """Every case through the chain on a poisoned pool, against ``reference``: both products,
    r_q and r_e exactly, and a non-zero status where the reference refuses."""
    keys = ("b8", "w1_8", "row_e", "col_e", "w2_8")
    cases = [(case[0], dict(zip(keys, case[1:], strict=True))) for case in mlp_chain_cases()]
    return run_chain_gates(chain.name, chain.gemm.pool, cases, chain.run, reference, ["status"])
