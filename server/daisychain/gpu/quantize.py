"""Per-row power-of-two quantization on the GPU (``kernels/quantize.wgsl``).

Mirrors ``daisychain.numerics.quantize(x, axis=-1)`` bit for bit, computed from float32 bit
patterns with integer instructions only, and also emits q as int8 packed for the GEMM kernels.
It is gated like every kernel (``gates.run_quantize_gates``): a device whose result differs in a
single bit, -0 included, does not use it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from daisychain.gpu.device import GpuDevice
from daisychain.gpu.kernels import ComputeKernel, compile_kernel
from daisychain.gpu.pool import BufferPool
from daisychain.numerics.quant import FloatArray, IntArray, QuantizationError

WG = 64
STATUS_NONFINITE = 1
STATUS_DIVERGED = 2


class GpuQuantize:
    """``quantize(x)`` for float32 (M, K), per row, through the WGSL kernel."""

    name = "wgpu-quantize"

    def __init__(
        self, gpu: GpuDevice, *, source: str | None = None, pool: BufferPool | None = None
    ) -> None:
        self.gpu = gpu
        self.pool = pool if pool is not None else BufferPool(gpu)
        self.kernel: ComputeKernel = compile_kernel(
            gpu,
            "quantize",
            ["uniform", "read", "write", "write", "write", "write"],
            source,
            {"WG": WG},
        )

    def quantize_rows(
        self, x: FloatArray
    ) -> tuple[FloatArray, IntArray, npt.NDArray[np.int8], npt.NDArray[np.uint32]]:
        """(q float32 (M, K), e int32 (M, 1), q int8 (M, K), status uint32 (M,)) of rows of x."""
        if x.dtype != np.float32 or x.ndim != 2:
            raise TypeError(f"quantize_rows expects 2-D float32, got {x.dtype} {x.shape}")
        m, k = x.shape
        if m == 0 or k == 0:
            raise ValueError(f"quantize_rows: empty input {x.shape}")
        k4 = -(-k // 4)
        pool = self.pool
        bufs = [
            pool.upload(np.array([m, k, k4, 0], dtype="<u4"), uniform=True),
            pool.upload(np.ascontiguousarray(x).view("<u4")),
            pool.acquire(m * k * 4),
            pool.acquire(m * k4 * 4),
            pool.acquire(m * 4),
            pool.acquire(m * 4),
        ]
        try:
            self.kernel.dispatch(bufs, (-(-m // WG), 1, 1))
            q = np.frombuffer(pool.read(bufs[2], m * k * 4), dtype="<f4").reshape(m, k)
            packed = np.frombuffer(pool.read(bufs[3], m * k4 * 4), dtype=np.int8)
            e = np.frombuffer(pool.read(bufs[4], m * 4), dtype="<i4").reshape(m, 1)
            status = np.frombuffer(pool.read(bufs[5], m * 4), dtype="<u4")
        finally:
            pool.release(*bufs)
        q_i8 = packed.reshape(m, 4 * k4)[:, :k]
        return (
            q.astype(np.float32),
            e.astype(np.int32),
            np.ascontiguousarray(q_i8),
            status.astype(np.uint32),
        )

    def quantize(self, x: FloatArray) -> tuple[FloatArray, IntArray]:
        """Same contract as ``daisychain.numerics.quantize(x, axis=-1)`` for 2-D x."""
        q, e, _, status = self.quantize_rows(x)
        if np.any(status == STATUS_NONFINITE):
            raise QuantizationError(
                "non-finite value reached the quantizer; training has diverged "
                "(lower the learning rate or enable gradient clipping)"
            )
        if np.any(status == STATUS_DIVERGED):
            raise QuantizationError(
                "value of magnitude >= 2^100 reached the quantizer; training has diverged "
                "(lower the learning rate)"
            )
        return q, e
