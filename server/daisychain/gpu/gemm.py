"""Exact int8 GEMM on the GPU: the DP4A path (gemm_dp4a.wgsl) and the LUT path (gemm_lut.wgsl).

``GpuGemm.matmul_int(a, b)`` returns the exact int32 ``acc = a @ b`` of int8 operands;
``GpuGemm.matmul_int_batched(a, b)`` the same for (..., M, K) @ (..., K, N) with broadcast leading
axes, every slice in one submit and one readback (docs/KERNELS.md, "Batched products");
``GpuGemm.matmul_int_many`` several such products in one submit and one readback ("Backward
pairs");
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

from collections.abc import Sequence
from dataclasses import dataclass
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
ALIGN_WORDS = SPAN_ALIGN // 4

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


def aligned_words(words: int) -> int:
    """``words`` rounded up to a whole number of ``SPAN_ALIGN`` regions."""
    return max(1, -(-words // ALIGN_WORDS)) * ALIGN_WORDS


def side_by_side(slices: U32Array) -> tuple[U32Array, int]:
    """(S, ...) u32 -> one (S * stride) u32 array with slice s at word s * stride, stride a
    multiple of ``SPAN_ALIGN`` bytes (the binding offset every device accepts); and stride."""
    count = slices.shape[0]
    flat = slices.reshape(count, -1)
    stride = aligned_words(flat.shape[1])
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


@dataclass(frozen=True)
class _Plan:
    """One product to compute: its slice ``s`` (C order over ``lead``) is
    ``a_slices[a_of[s]] @ b_slices[b_of[s]]``; ``widest`` is the largest region, in bytes, that
    one slice takes in any of the three buffers (what bounds a submit's slices)."""

    a_slices: Int8Array  # (distinct A slices, M, K)
    b_slices: Int8Array  # (distinct B slices, K, N)
    a_of: npt.NDArray[np.intp]
    b_of: npt.NDArray[np.intp]
    lead: tuple[int, ...]
    m: int
    k: int
    n: int
    count: int  # slices to compute (0: the product is empty, or K is)
    widest: int

    @staticmethod
    def of(a: Int8Array, b: Int8Array, lead: tuple[int, ...]) -> _Plan:
        m, k = a.shape[-2:]
        n = b.shape[-1]
        count = int(np.prod(lead, dtype=np.int64))
        k4, m4, n4 = max(1, -(-k // 4)), max(1, -(-m // 4)), max(1, -(-n // 4))
        widest = 4 * max(aligned_words(4 * k4 * m4), aligned_words(4 * k4 * n4),
                         aligned_words(m * n))  # fmt: skip
        if count * m * n == 0 or k == 0:  # nothing to compute: zeros, no round trip
            none = np.zeros(0, dtype=np.intp)
            empty = np.zeros((0, m, k), np.int8), np.zeros((0, k, n), np.int8)
            return _Plan(*empty, none, none, lead, m, k, n, 0, widest)
        a, b = _distinct(a), _distinct(b)
        return _Plan(
            np.ascontiguousarray(a).reshape(-1, m, k),
            np.ascontiguousarray(b).reshape(-1, k, n),
            _slice_index(a, lead),
            _slice_index(b, lead),
            lead, m, k, n, count, widest,
        )  # fmt: skip


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
        # The MLP chain on this kernel (gpu.mlp_chain), set once its gate passed on this device
        # (backend.evaluate_gpu); None: the MLP's two products go one round trip each.
        self.mlp: Any = None
        # Likewise attention's chain (gpu.attention_chain): scores, softmax, second product.
        self.attention: Any = None
        # And a block's tail (gpu.block_chain): output product, residual and norm, the MLP.
        self.block: Any = None
        # And a block's attention from its input (gpu.qkv_chain): the qkv product first.
        self.qkv: Any = None
        # And a whole forward (gpu.forward_chain): both chains of every block and the logits.
        self.forward: Any = None
        # And a whole backward (gpu.backward_chain): every pair and the work between them.
        self.backward: Any = None
        # And a whole step (gpu.step_chain): the two above and the cross-entropy between.
        self.step: Any = None
        # The kernel probe's product the last step chain run computed, until a step probe
        # takes it (gpu.live.step_probe): a peer's step and its probe in one readback.
        self.step_probe: Any = None
        # Why a chain is not in use, by its attribute name (shown by ``daisychain selftest``).
        self.chain_failures: dict[str, str] = {}
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
        return self._products([_Plan.of(a, b, ())])[0]

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """Exact int32 (*lead, M, N) = a (..., M, K) @ b (..., K, N), leading axes broadcast
        (numpy's matmul rule), every slice in one submit and one readback: one dispatch per
        slice, recorded into one command encoder, each reading its own regions of one A and one
        B buffer and writing its own region of one output buffer. A broadcast operand's slice
        is packed and uploaded once, however many slices read it."""
        return self.matmul_int_many([(a, b)])[0]

    def matmul_int_many(self, products: Sequence[tuple[Int8Array, Int8Array]]) -> list[Int32Array]:
        """Several independent products, each as ``matmul_int_batched`` takes it (their shapes
        may differ), in one submit and one readback: every slice of every product is one
        dispatch of the same command encoder, with its own regions of the shared buffers. A
        backward pass's two gradient products of one layer need nothing from each other, so
        they make one round trip instead of two (docs/KERNELS.md, "Backward pairs")."""
        plans = []
        for a, b in products:
            _check_operands(a, b, batched=True)
            try:
                lead = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
            except ValueError:
                raise ValueError(
                    f"matmul_int_batched: the leading axes of {a.shape} @ {b.shape} do not "
                    "broadcast (each pair must be equal or one of them 1)"
                ) from None
            plans.append(_Plan.of(a, b, lead))
        return self._products(plans)

    def _products(self, plans: list[_Plan]) -> list[Int32Array]:
        """Every plan's slices, in as few submits as the buffers allow: slices join the current
        submit while the sum of their widest regions stays within ``round_bytes`` (so every
        buffer does), and at least one slice goes into each submit."""
        done: list[list[Int32Array]] = [[] for _ in plans]
        batch: list[tuple[int, int, int]] = []  # (plan, first slice, end) of the next submit
        used = 0
        for p, plan in enumerate(plans):
            start = 0
            while start < plan.count:
                room = (self.round_bytes - used) // plan.widest
                if room < 1 and batch:
                    self._submit(plans, batch, done)
                    batch, used = [], 0
                    continue
                end = min(plan.count, start + max(1, room))
                batch.append((p, start, end))
                used += (end - start) * plan.widest
                start = end
        if batch:
            self._submit(plans, batch, done)
        out = []
        for plan, parts in zip(plans, done, strict=True):
            if plan.count == 0:
                out.append(np.zeros((*plan.lead, plan.m, plan.n), dtype=np.int32))
                continue
            cells = parts[0] if len(parts) == 1 else np.concatenate(parts)
            out.append(cells.reshape(*plan.lead, plan.m, plan.n))
        return out

    def _submit(
        self,
        plans: list[_Plan],
        batch: list[tuple[int, int, int]],
        done: list[list[Int32Array]],
    ) -> None:
        """Slices ``first .. end`` of each named plan (a_slices[a_of[s]] @ b_slices[b_of[s]])
        in one submit and one readback; each plan's cells are appended to ``done``."""
        a_blocks, b_blocks, params_rows = [], [], []
        slices: list[tuple[int, int, int, int]] = []  # per dispatch: a word, b word, strides
        parts: list[tuple[int, int, int, int]] = []  # per part: plan, count, out word, stride
        a_base = b_base = out_base = 0
        for p, first, end in batch:
            plan = plans[p]
            a_of, b_of = plan.a_of[first:end], plan.b_of[first:end]
            count = end - first
            a_used, a_at = np.unique(a_of, return_inverse=True)
            b_used, b_at = np.unique(b_of, return_inverse=True)
            a_words, a_stride = side_by_side(pack_k_major_batched(plan.a_slices[a_used]))
            # B is packed from B^T: word [k][j] holds b[4k .. 4k+3, j].
            b_words, b_stride = side_by_side(
                pack_k_major_batched(plan.b_slices[b_used].transpose(0, 2, 1))
            )
            # params word 3 is the slice's index in its whole product (0 for a 2-D one). The
            # kernel computes nothing from it; a slice named in the WGSL can be told apart (the
            # plants).
            params = np.zeros((count, ALIGN_WORDS), dtype="<u4")
            params[:, :3] = (plan.m, plan.n, max(1, -(-plan.k // 4)))
            params[:, 3] = np.arange(first, end)
            out_stride = aligned_words(plan.m * plan.n)
            for s in range(count):
                slices.append((
                    a_base + int(a_at[s]) * a_stride, a_stride,
                    b_base + int(b_at[s]) * b_stride, b_stride,
                ))  # fmt: skip
            parts.append((p, count, out_base, out_stride))
            a_blocks.append(a_words)
            b_blocks.append(b_words)
            params_rows.append(params)
            a_base += a_words.size
            b_base += b_words.size
            out_base += count * out_stride
        last_p, last_count, last_out, last_stride = parts[-1]
        last = plans[last_p]
        # not the last slice's padding
        read_bytes = (last_out + (last_count - 1) * last_stride + last.m * last.n) * 4
        pool = self.pool
        bufs = [
            pool.upload(np.concatenate(params_rows), uniform=True),
            pool.upload(np.concatenate(a_blocks)),
            pool.upload(np.concatenate(b_blocks)),
            pool.acquire(out_base * 4),
        ]
        tm, tn = self.tile
        jobs: list[Job] = []
        d = 0
        for p, count, out_word, out_stride in parts:
            plan = plans[p]
            groups = (-(-plan.n // tn), -(-plan.m // tm), 1)
            for s in range(count):
                a_word, a_stride, b_word, b_stride = slices[d]
                spans: list[Any] = [
                    Span(bufs[0], d * SPAN_ALIGN, 16),
                    Span(bufs[1], a_word * 4, a_stride * 4),
                    Span(bufs[2], b_word * 4, b_stride * 4),
                    Span(bufs[3], (out_word + s * out_stride) * 4, out_stride * 4),
                ]
                if self._lut is not None:
                    spans.append(self._lut)
                jobs.append((spans, groups))
                d += 1
        try:
            self.kernel.dispatch_batch(jobs)
            raw = pool.read(bufs[3], read_bytes)
        finally:
            pool.release(*bufs)
        words = np.frombuffer(raw, dtype="<i4")
        for p, count, out_word, out_stride in parts:
            plan = plans[p]
            cells = as_strided(
                words[out_word:], (count, plan.m * plan.n), (out_stride * 4, 4), writeable=False
            )
            done[p].append(cells.astype(np.int32).reshape(count, plan.m, plan.n))

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
