"""Float32 arithmetic in integer instructions on the GPU (``kernels/softfloat.wgsl``).

The groundwork of GPU epilogues: the work around
the products (dequantize, softmax, norms, the optimizer) is float32 arithmetic the contract pins
to correctly rounded, unfused operations, which WGSL's own ``f32`` does not promise
(docs/NUMERICS.md section 0). ``softfloat.wgsl`` computes ``+ - * / sqrt`` from the bit patterns
with integer instructions, whose results WGSL defines, so every device gives numpy's bits; and on
them the contract's own ``exp`` and ``log`` (NUMERICS.md section 5) and ``rint``.

``GpuSoftFloat.apply`` runs one operation element by element through the file's own entry point;
``softfloat_gate.run_softfloat_gates`` proves it against numpy's float32 on each device, like every
kernel. ``library_source`` is the functions without that entry point, for epilogue kernels to
build on.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from daisychain.gpu.device import GpuDevice
from daisychain.gpu.kernels import ComputeKernel, compile_kernel, kernel_source
from daisychain.gpu.pool import BufferPool

WG = 64
OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3, "sqrt": 4, "exp": 5, "log": 6, "rint": 7}
UNARY = frozenset({"sqrt", "exp", "log", "rint"})
CANONICAL_NAN = 0x7FC00000  # the one NaN the library returns
# One dispatch covers at most this many elements (65535 workgroups of WG invocations).
MAX_PER_DISPATCH = 65535 * WG
_ENTRY_MARKER = "// --- the gate's entry point"

U32Array = npt.NDArray[np.uint32]


def library_source(source: str | None = None) -> str:
    """The soft-float functions (``sf_add`` ... ``sf_sqrt``) without the gate's entry point: the
    text an epilogue kernel starts with."""
    text = kernel_source("softfloat") if source is None else source
    head, marker, _ = text.partition(_ENTRY_MARKER)
    if not marker:
        raise ValueError(
            "softfloat.wgsl has lost its entry-point marker; the library cannot be cut"
        )
    return head


class GpuSoftFloat:
    """One float32 operation per element, computed by ``softfloat.wgsl``'s integer arithmetic."""

    name = "wgpu-softfloat"

    def __init__(
        self, gpu: GpuDevice, *, source: str | None = None, pool: BufferPool | None = None
    ) -> None:
        self.gpu = gpu
        self.pool = pool if pool is not None else BufferPool(gpu)
        self.kernel: ComputeKernel = compile_kernel(
            gpu, "softfloat", ["uniform", "read", "read", "write"], source, {"WG": WG}
        )

    def apply(self, op: str, a: U32Array, b: U32Array | None = None) -> U32Array:
        """``op`` on float32 bit patterns, element by element: uint32 in, uint32 out.

        ``b`` is required for the binary operations and must have ``a``'s shape; the unary ones
        (``sqrt``, ``exp``, ``log``, ``rint``) read ``a`` only.
        """
        if op not in OPS:
            raise ValueError(f"unknown soft-float operation {op!r}; one of {sorted(OPS)}")
        if a.dtype != np.uint32:
            raise TypeError(f"soft-float operands are uint32 bit patterns, got {a.dtype}")
        if b is None:
            if op not in UNARY:
                raise ValueError(f"{op} needs two operands")
            b = a
        elif b.shape != a.shape or b.dtype != np.uint32:
            raise ValueError(f"operands differ: {a.dtype} {a.shape} and {b.dtype} {b.shape}")
        flat_a = np.ascontiguousarray(a).reshape(-1)
        flat_b = np.ascontiguousarray(b).reshape(-1)
        out = np.empty_like(flat_a)
        for start in range(0, flat_a.size, MAX_PER_DISPATCH):
            stop = min(start + MAX_PER_DISPATCH, flat_a.size)
            out[start:stop] = self._dispatch(OPS[op], flat_a[start:stop], flat_b[start:stop])
        return out.reshape(a.shape)

    def _dispatch(self, op: int, a: U32Array, b: U32Array) -> U32Array:
        n = a.size
        if n == 0:
            return a.copy()
        pool = self.pool
        bufs = [
            pool.upload(np.array([n, op, 0, 0], dtype="<u4"), uniform=True),
            pool.upload(a.astype("<u4")),
            pool.upload(b.astype("<u4")),
            pool.acquire(n * 4),
        ]
        try:
            self.kernel.dispatch(bufs, (-(-n // WG), 1, 1))
            got = np.frombuffer(pool.read(bufs[3], n * 4), dtype="<u4")
        finally:
            pool.release(*bufs)
        return got.astype(np.uint32)
