"""Exact int8 GEMM on the GPU: the DP4A path (gemm_dp4a.wgsl) and the LUT path (gemm_lut.wgsl).

``GpuGemm.matmul_int(a, b)`` returns the exact int32 ``acc = a @ b`` of int8 operands;
``GpuGemm.qmatmul`` has the signature of ``daisychain.numerics.qmatmul`` and returns its float32
bits. The dequantization ``y = RNE_f32(acc * 2^(ea + eb))`` stays on the CPU: it is the reference's
own ``round_scaled`` applied to the exact accumulator (float64 holds |acc| < 2^31 exactly and the
power-of-two scaling is exact in float64; one rounding to float32). That needs no trust in the
device's float arithmetic at all (docs/KERNELS.md, "Dequantization").

Host-side packing (docs/KERNELS.md, "Layouts"): A and B^T packed K-major, four int8 along K per
little-endian u32 word, all of K, M and N zero-padded to multiples of 4 (``pack_k_major``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from daisychain.gpu.device import GpuDevice
from daisychain.gpu.kernels import BindingKind, ComputeKernel, compile_kernel
from daisychain.gpu.pool import BufferPool
from daisychain.luts import load_table
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import FloatArray, IntArray

GemmKind = Literal["dp4a", "lut"]
KERNEL_NAMES: dict[str, str] = {"dp4a": "gemm_dp4a", "lut": "gemm_lut"}
TILE = 4  # outputs per invocation along each axis (fixed in the WGSL)
WORKGROUP = (8, 8)  # (WG_X, WG_Y) override constants
# |acc| <= 128 * 128 * K must stay below 2^31: K < 2^17 (docs/NUMERICS.md section 3).
MAX_K = (1 << 17) - 1

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


def pack_k_major(x: Int8Array) -> npt.NDArray[np.uint32]:
    """(R, K) int8 -> (ceil(K / 4), 4 * ceil(R / 4)) u32, K-major.

    Word [k][r] holds x[r, 4k .. 4k + 3] as little-endian bytes; R and K are zero-padded (zero
    bytes add nothing to a dot product). The kernels read four consecutive words (four rows) as
    one vec4.
    """
    rows, k = x.shape
    k4 = max(1, -(-k // 4))
    r4 = max(1, -(-rows // 4))
    padded = np.zeros((4 * r4, 4 * k4), dtype=np.int8)
    padded[:rows, :k] = x
    return np.ascontiguousarray(padded.view("<u4").T)


def _check_operands(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> None:
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"matmul_int expects int8 operands, got {a.dtype} @ {b.dtype}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul_int: shapes {a.shape} @ {b.shape} do not form a 2-D product")
    if a.shape[1] > MAX_K:
        raise ValueError(
            f"matmul_int: K = {a.shape[1]} exceeds {MAX_K}, where int32 accumulation could "
            "overflow; split K into chunks and add the int32 results in int64"
        )


class GpuGemm:
    """One GEMM kernel (DP4A or LUT) compiled on one device, with its buffer pool."""

    def __init__(
        self,
        gpu: GpuDevice,
        kind: GemmKind,
        *,
        source: str | None = None,
        pool: BufferPool | None = None,
        workgroup: tuple[int, int] = WORKGROUP,
    ) -> None:
        if kind not in KERNEL_NAMES:
            raise ValueError(f"unknown GEMM kind {kind!r}; choose one of {sorted(KERNEL_NAMES)}")
        self.gpu = gpu
        self.kind: GemmKind = kind
        self.pool = pool if pool is not None else BufferPool(gpu)
        self.workgroup = workgroup
        bindings: list[BindingKind] = ["uniform", "read", "read", "write"]
        if kind == "lut":
            bindings.append("read")
        self.kernel: ComputeKernel = compile_kernel(
            gpu,
            KERNEL_NAMES[kind],
            bindings,
            source,
            {"WG_X": workgroup[0], "WG_Y": workgroup[1]},
        )
        self._lut: Any = None
        if kind == "lut":
            # load_table checks the file's size and SHA-256 against the manifest, and the
            # manifest's every entry is verified by `daisychain luts --check` (docs/LUTS.md).
            table = load_table("mul_i8")
            self._lut = gpu.device.create_buffer_with_data(
                data=np.ascontiguousarray(table, dtype="<i2").tobytes(),
                usage=_lut_usage(),
            )

    @property
    def name(self) -> str:
        return f"wgpu-{self.kind}"

    @property
    def tile(self) -> tuple[int, int]:
        """Output rows x columns covered by one workgroup (the audit's block edges)."""
        return (TILE * self.workgroup[1], TILE * self.workgroup[0])

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """Exact int32 (M, N) = a (M, K) @ b (K, N) for int8 operands."""
        _check_operands(a, b)
        m, k = a.shape
        n = b.shape[1]
        if m == 0 or n == 0:
            return np.zeros((m, n), dtype=np.int32)
        if k == 0:
            return np.zeros((m, n), dtype=np.int32)
        a_words = pack_k_major(a)  # (k4, M4 * 4)
        b_words = pack_k_major(b.T)  # (k4, N4 * 4)
        k4 = a_words.shape[0]
        params = np.array([m, n, k4, 0], dtype="<u4")
        pool = self.pool
        out_bytes = m * n * 4
        bufs = [
            pool.upload(params, uniform=True),
            pool.upload(a_words),
            pool.upload(b_words),
            pool.acquire(out_bytes),
        ]
        if self._lut is not None:
            bufs.append(self._lut)
        tm, tn = self.tile
        try:
            self.kernel.dispatch(bufs, (-(-n // tn), -(-m // tm), 1))
            raw = pool.read(bufs[3], out_bytes)
        finally:
            pool.release(*bufs[:4])
        return np.frombuffer(raw, dtype="<i4").astype(np.int32).reshape(m, n)

    def qmatmul(self, a_q: FloatArray, a_e: IntArray, b_q: FloatArray, b_e: IntArray) -> FloatArray:
        """Same arguments and float32 bits as ``daisychain.numerics.qmatmul`` (2-D or batched)."""
        if a_q.ndim > 2:
            lead = np.broadcast_shapes(a_q.shape[:-2], b_q.shape[:-2])
            a_b = np.broadcast_to(a_q, (*lead, *a_q.shape[-2:]))
            b_b = np.broadcast_to(b_q, (*lead, *b_q.shape[-2:]))
            acc = np.empty((*lead, a_q.shape[-2], b_q.shape[-1]), dtype=np.float64)
            for idx in np.ndindex(*lead):
                acc[idx] = self.matmul_int(_as_int8(a_b[idx]), _as_int8(b_b[idx]))
        else:
            acc = self.matmul_int(_as_int8(a_q), _as_int8(b_q)).astype(np.float64)
        return round_scaled(acc, a_e + b_e)


def _as_int8(q: npt.NDArray[Any]) -> Int8Array:
    """int8 of a float32 array holding quantized integers (refuses values outside int8)."""
    if q.size and (float(q.min()) < -128 or float(q.max()) > 127):
        raise ValueError("qmatmul: operand holds values outside int8 [-128, 127]")
    return np.ascontiguousarray(q).astype(np.int8)


def _lut_usage() -> int:
    import wgpu

    usage: int = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
    return usage
