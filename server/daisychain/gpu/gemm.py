"""Exact int8 GEMM on the GPU: the DP4A path (gemm_dp4a.wgsl) and the LUT path (gemm_lut.wgsl).

``GpuGemm.matmul_int(a, b)`` returns the exact int32 ``acc = a @ b`` of int8 operands;
``GpuGemm.matmul_int_batched(a, b)`` the same for (..., M, K) @ (..., K, N) with broadcast leading
axes, every slice in one submit and one readback (docs/KERNELS.md, "Batched products");
``GpuGemm.qmatmul`` has the signature of ``daisychain.numerics.qmatmul`` and returns its float32
bits. The dequantization ``y = RNE_f32(acc * 2^(ea + eb))`` stays on the CPU: it is the reference's
own ``round_scaled`` applied to the exact accumulator (float64 holds |acc| < 2^31 exactly and the
power-of-two scaling is exact in float64; one rounding to float32). That needs no trust in the
device's float arithmetic at all (docs/KERNELS.md, "Dequantization").

Host-side packing (docs/KERNELS.md, "Layouts"): A and B^T packed K-major, four int8 along K per
little-endian u32 word, all of K, M and N zero-padded to multiples of 4 (``pack_k_major``).
A batched product lays its slices side by side in one buffer per operand, one ``SPAN_ALIGN``-
aligned region each, and binds each slice's region (``kernels.Span``) to its own dispatch.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from daisychain.gpu.device import MIN_STORAGE_BINDING, GpuDevice
from daisychain.gpu.kernels import SPAN_ALIGN, BindingKind, ComputeKernel, Job, Span, compile_kernel
from daisychain.gpu.pool import BufferPool
from daisychain.luts import load_table
from daisychain.model.ops import IntGemmOps
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import FloatArray, IntArray

GemmKind = Literal["dp4a", "lut"]
KERNEL_NAMES: dict[str, str] = {"dp4a": "gemm_dp4a", "lut": "gemm_lut"}
TILE = 4  # outputs per invocation along each axis (fixed in the WGSL)
WORKGROUP = (8, 8)  # (WG_X, WG_Y) override constants
# |acc| <= 128 * 128 * K must stay below 2^31: K < 2^17 (docs/NUMERICS.md section 3).
MAX_K = (1 << 17) - 1

# Bytes of one operand's (or the output's) buffer per submit: every binding of the batch stays
# within the storage-binding size every device granted (device.py), and a batch larger than that
# goes in several submits.
ROUND_BYTES = MIN_STORAGE_BINDING
_ALIGN_WORDS = SPAN_ALIGN // 4

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]
U32Array = npt.NDArray[np.uint32]


def pack_k_major(x: Int8Array) -> U32Array:
    """(R, K) int8 -> (ceil(K / 4), 4 * ceil(R / 4)) u32, K-major.

    Word [k][r] holds x[r, 4k .. 4k + 3] as little-endian bytes; R and K are zero-padded (zero
    bytes add nothing to a dot product). The kernels read four consecutive words (four rows) as
    one vec4.
    """
    packed: U32Array = pack_k_major_batched(x[None])[0]
    return packed


def pack_k_major_batched(x: Int8Array) -> U32Array:
    """(S, R, K) int8 -> (S, ceil(K / 4), 4 * ceil(R / 4)) u32: ``pack_k_major`` of every slice."""
    count, rows, k = x.shape
    k4 = max(1, -(-k // 4))
    r4 = max(1, -(-rows // 4))
    padded = np.zeros((count, 4 * r4, 4 * k4), dtype=np.int8)
    padded[:, :rows, :k] = x
    return np.ascontiguousarray(padded.view("<u4").transpose(0, 2, 1))


def _aligned_words(words: int) -> int:
    """``words`` rounded up to a whole number of ``SPAN_ALIGN`` regions."""
    return max(1, -(-words // _ALIGN_WORDS)) * _ALIGN_WORDS


def _side_by_side(slices: U32Array) -> tuple[U32Array, int]:
    """(S, ...) u32 -> one (S * stride) u32 array with slice s at word s * stride, stride a
    multiple of ``SPAN_ALIGN`` bytes (the binding offset every device accepts); and stride."""
    count = slices.shape[0]
    flat = slices.reshape(count, -1)
    stride = _aligned_words(flat.shape[1])
    out = np.zeros((count, stride), dtype=np.uint32)
    out[:, : flat.shape[1]] = flat
    return out.reshape(-1), stride


def _check_operands(a: npt.NDArray[Any], b: npt.NDArray[Any], *, batched: bool = False) -> None:
    what = "matmul_int_batched" if batched else "matmul_int"
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"{what} expects int8 operands, got {a.dtype} @ {b.dtype}")
    form = "(..., M, K) @ (..., K, N)" if batched else "a 2-D product"
    dims_ok = a.ndim >= 2 and b.ndim >= 2 if batched else a.ndim == 2 and b.ndim == 2
    if not dims_ok or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{what}: shapes {a.shape} @ {b.shape} do not form {form}")
    if a.shape[-1] > MAX_K:
        raise ValueError(
            f"{what}: K = {a.shape[-1]} exceeds {MAX_K}, where int32 accumulation could "
            "overflow; split K into chunks and add the int32 results in int64"
        )


def _distinct(x: Int8Array) -> Int8Array:
    """``x`` with every repeated leading axis (stride 0: ``np.broadcast_to``) cut to length 1,
    so a matrix handed to every slice is packed and uploaded once (the batch broadcasts it)."""
    cut = tuple(
        slice(0, 1) if x.strides[i] == 0 and x.shape[i] > 1 else slice(None)
        for i in range(x.ndim - 2)
    )
    return x[cut]


def _slice_index(x: npt.NDArray[Any], lead: tuple[int, ...]) -> npt.NDArray[np.intp]:
    """For each slice of the broadcast batch ``lead`` (C order), the index of the slice of
    ``x`` (its own leading axes, flattened) that it reads."""
    own = np.arange(int(np.prod(x.shape[:-2], dtype=np.int64))).reshape(x.shape[:-2])
    return np.broadcast_to(own, lead).reshape(-1)


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
        self.round_bytes = ROUND_BYTES  # per buffer and submit (a test makes it small)
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
        return self._batched(a, b, ())

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """Exact int32 (*lead, M, N) = a (..., M, K) @ b (..., K, N), leading axes broadcast
        (numpy's matmul rule), every slice in one submit and one readback: one dispatch per
        slice, recorded into one command encoder, each reading its own regions of one A and one
        B buffer and writing its own region of one output buffer. A broadcast operand's slice
        is packed and uploaded once, however many slices read it."""
        _check_operands(a, b, batched=True)
        try:
            lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ValueError(
                f"matmul_int_batched: the leading axes of {a.shape} @ {b.shape} do not broadcast "
                "(each pair must be equal or one of them 1)"
            ) from None
        return self._batched(a, b, lead)

    def _batched(self, a: Int8Array, b: Int8Array, lead: tuple[int, ...]) -> Int32Array:
        m, k = a.shape[-2:]
        n = b.shape[-1]
        count = int(np.prod(lead, dtype=np.int64))
        if count * m * n == 0 or k == 0:
            return np.zeros((*lead, m, n), dtype=np.int32)
        a, b = _distinct(a), _distinct(b)
        a_slices = np.ascontiguousarray(a).reshape(-1, m, k)
        b_slices = np.ascontiguousarray(b).reshape(-1, k, n)
        a_of, b_of = _slice_index(a, lead), _slice_index(b, lead)
        # The widest region a slice needs in any of the three buffers bounds a round's slices.
        k4, m4, n4 = max(1, -(-k // 4)), max(1, -(-m // 4)), max(1, -(-n // 4))
        widest = 4 * max(_aligned_words(4 * k4 * m4), _aligned_words(4 * k4 * n4),
                         _aligned_words(m * n))  # fmt: skip
        per_round = max(1, self.round_bytes // widest)
        rounds = [
            self._round(a_slices, b_slices, a_of[s : s + per_round], b_of[s : s + per_round], s)
            for s in range(0, count, per_round)
        ]
        out = rounds[0] if len(rounds) == 1 else np.concatenate(rounds)
        return out.reshape(*lead, m, n)

    def _round(
        self,
        a_slices: Int8Array,
        b_slices: Int8Array,
        a_of: npt.NDArray[np.intp],
        b_of: npt.NDArray[np.intp],
        first: int,
    ) -> Int32Array:
        """Output slices ``first ..`` (a_slices[a_of[s]] @ b_slices[b_of[s]]) in one submit and
        one readback."""
        m, k = a_slices.shape[1:]
        n = b_slices.shape[2]
        count = len(a_of)
        a_used, a_at = np.unique(a_of, return_inverse=True)
        b_used, b_at = np.unique(b_of, return_inverse=True)
        a_words, a_stride = _side_by_side(pack_k_major_batched(a_slices[a_used]))
        # B is packed from B^T: word [k][j] holds b[4k .. 4k+3, j].
        b_words, b_stride = _side_by_side(pack_k_major_batched(b_slices[b_used].transpose(0, 2, 1)))
        k4 = max(1, -(-k // 4))
        # params word 3 is the slice's index in the whole product (0 for a 2-D one). The kernel
        # computes nothing from it; a slice named in the WGSL can be told apart (the plants).
        params = np.zeros((count, _ALIGN_WORDS), dtype="<u4")
        params[:, :3] = (m, n, k4)
        params[:, 3] = np.arange(first, first + count)
        out_stride = _aligned_words(m * n)
        out_bytes = count * out_stride * 4
        read_bytes = ((count - 1) * out_stride + m * n) * 4  # not the last slice's padding
        pool = self.pool
        bufs = [
            pool.upload(params, uniform=True),
            pool.upload(a_words),
            pool.upload(b_words),
            pool.acquire(out_bytes),
        ]
        tm, tn = self.tile
        groups = (-(-n // tn), -(-m // tm), 1)
        jobs: list[Job] = []
        for s in range(count):
            spans: list[Any] = [
                Span(bufs[0], s * SPAN_ALIGN, 16),
                Span(bufs[1], int(a_at[s]) * a_stride * 4, a_stride * 4),
                Span(bufs[2], int(b_at[s]) * b_stride * 4, b_stride * 4),
                Span(bufs[3], s * out_stride * 4, out_stride * 4),
            ]
            if self._lut is not None:
                spans.append(self._lut)
            jobs.append((spans, groups))
        try:
            self.kernel.dispatch_batch(jobs)
            raw = pool.read(bufs[3], read_bytes)
        finally:
            pool.release(*bufs)
        words = np.frombuffer(raw, dtype="<i4")
        cells = as_strided(words, (count, m * n), (out_stride * 4, 4), writeable=False)
        return cells.astype(np.int32).reshape(count, m, n)

    def qmatmul(self, a_q: FloatArray, a_e: IntArray, b_q: FloatArray, b_e: IntArray) -> FloatArray:
        """Same arguments and float32 bits as ``daisychain.numerics.qmatmul`` (2-D or batched)."""
        if a_q.ndim > 2 or b_q.ndim > 2:
            acc = self.matmul_int_batched(_as_int8(a_q), _as_int8(b_q))
        else:
            acc = self.matmul_int(_as_int8(a_q), _as_int8(b_q))
        return round_scaled(acc.astype(np.float64), a_e + b_e)


class PerSliceGemm:
    """A ``GpuGemm`` without its batched path: the one-round-trip-per-slice baseline.

    ``gpu.live.training_ops`` sends every product to ``matmul_int_batched`` when the GEMM has
    one; behind this wrapper it cannot, so a batched product is one ``matmul_int`` (one upload,
    submit and readback) per slice, as before batching. ``daisychain bench kernels`` times and
    counts it beside the batched path in the same run; the same kernel computes both.
    """

    def __init__(self, gemm: GpuGemm) -> None:
        self.gemm = gemm

    @property
    def name(self) -> str:
        return self.gemm.name

    @property
    def tile(self) -> tuple[int, int]:
        return self.gemm.tile

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        return self.gemm.matmul_int(a, b)

    def qmatmul(self, a_q: FloatArray, a_e: IntArray, b_q: FloatArray, b_e: IntArray) -> FloatArray:
        """The kernel's ``qmatmul``, slice by slice for batched operands."""
        if a_q.ndim == 2 and b_q.ndim == 2:
            return self.gemm.qmatmul(a_q, a_e, b_q, b_e)
        return IntGemmOps(self.name, self.matmul_int).qmatmul(a_q, a_e, b_q, b_e)


def _as_int8(q: npt.NDArray[Any]) -> Int8Array:
    """int8 of a float32 array holding quantized integers (refuses values outside int8)."""
    if q.size and (float(q.min()) < -128 or float(q.max()) > 127):
        raise ValueError("qmatmul: operand holds values outside int8 [-128, 127]")
    return np.ascontiguousarray(q).astype(np.int8)


def _lut_usage() -> int:
    import wgpu

    usage: int = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST
    return usage
