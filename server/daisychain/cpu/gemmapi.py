"""What every CPU integer GEMM of this package offers the model and the gates (the ``IntGemm``
interface of ``gpu.gates``), around one exact batched product of its own.

A backend subclasses ``CpuGemm`` and writes ``_product(a, b)``: (..., M, K) @ (..., K, N) int8
operands, already checked, to int32. The checks, the 2-D form, the float32-valued operands of
the model's ops and the quantized product are here once, so the backends cannot differ in them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from daisychain.numerics import gemm as ref
from daisychain.numerics.quant import FloatArray, IntArray, int8_operands

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


class CpuGemm:
    """``matmul_int``, ``matmul_int_batched``, ``matmul_float`` and ``qmatmul``."""

    name = ""
    max_k = 0  # the largest K whose int32 sums the backend keeps exact

    def _product(self, a: Int8Array, b: Int8Array) -> Int32Array:
        raise NotImplementedError

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """Exact ``a @ b`` of (M, K) and (K, N) int8 matrices, (M, N) int32 -- if the gates
        passed on this machine."""
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(f"matmul_int needs (M, K) @ (K, N), got {a.shape} @ {b.shape}")
        return self.matmul_int_batched(a, b)

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """``matmul_int`` of (..., M, K) and (..., K, N) with equal leading axes, in one call."""
        if a.dtype != np.int8 or b.dtype != np.int8:  # a float array viewed as bytes: garbage
            raise TypeError(f"matmul_int needs int8 operands, got {a.dtype} @ {b.dtype}")
        if a.ndim < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
            raise ValueError(
                f"matmul_int needs (..., M, K) @ (..., K, N), got {a.shape} @ {b.shape}"
            )
        if a.shape[-1] > self.max_k:
            raise ValueError(f"K = {a.shape[-1]} > {self.max_k}: the int32 sums could overflow")
        return self._product(a, b)

    def matmul_float(
        self,
        a: FloatArray,
        b: FloatArray,
        *,
        a8: Int8Array | None = None,
        b8: Int8Array | None = None,
    ) -> Int32Array:
        """``matmul_int_batched`` of int8-valued float32 operands (as the model's ops hold
        them), unaudited: ``model.ops.IntGemmOps``' batched form without the live audit
        (``bench step``'s unaudited sides). Leading axes broadcast (the limbs of a gradient
        operand against one matrix), as in ``gpu.live.AuditedBatchedMatmul``, which also takes
        ``a8``/``b8`` (the operands already cast)."""
        *_, a_int8, b_int8 = int8_operands(a, b, a8, b8)
        return self.matmul_int_batched(a_int8, b_int8)

    def qmatmul(self, a_q: FloatArray, a_e: IntArray, b_q: FloatArray, b_e: IntArray) -> FloatArray:
        acc = self.matmul_int(a_q.astype(np.int8), b_q.astype(np.int8))
        return ref.round_scaled(acc.astype(np.float64), a_e + b_e)
