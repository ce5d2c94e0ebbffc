"""An exact int8 x int8 -> int32 GEMM on the CPU's int8 dot-product units (``cpu-int8``).

NumPy has no fast integer GEMM, so the reference runs its int8 products through float32 BLAS
(exact for K <= 1024). CPUs with int8 dot-product instructions (x86 AVX-512 VNNI and AVX-VNNI:
``vpdpbusd``, four u8 x s8 products summed into an int32 lane; ARM SDOT/I8MM) do the same sums
several times faster. onnxruntime's ``MatMulInteger`` reaches them (its MLAS library picks the
kernel for the CPU it runs on); this module feeds it.

The trick and its trap:
- MLAS is fastest with an unsigned left operand, so ``a`` (int8) goes in as ``a + 128`` (uint8,
  one XOR of the sign bit) with zero point 128, and MLAS subtracts ``128 * colsum(b)`` itself:
  ``(a + 128) @ b - 128 * 1^T b = a @ b`` exactly, in int32 while K * 255 * 128 < 2^31.
- On CPUs without VNNI, MLAS's u8 x s8 kernel uses ``vpmaddubsw``, which saturates the int16 sum
  of two products: full-range operands then come back wrong (measured: off by up to 69555 on an
  AVX2 machine). So this GEMM is never trusted by construction: like every GPU kernel it must
  pass the exact gates (``gpu.gates.run_gemm_gates``, full-range and boundary cases) on this very
  machine before it is a candidate, every product is audited while training
  (``gpu.live.AuditedMatmul``), and its kernel probe must equal the reference's every step.

The ONNX model (one ``MatMulInteger`` node) is written here as protobuf bytes, so the only
dependency is onnxruntime itself (``pip install 'daisychain[int8]'``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.backend import prove
from daisychain.gpu.gates import IntGemm
from daisychain.numerics import gemm as ref
from daisychain.numerics.quant import FloatArray, IntArray, int8_operands

NAME = "cpu-int8"
MAX_K = (2**31 - 1) // (255 * 128)  # the offset trick's int32 sums stay exact below this
Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


class Int8Unavailable(Exception):
    """onnxruntime is not installed, or refused the model."""


def available() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


# -- a minimal protobuf writer for one ONNX model ------------------------------------------------
# Field numbers from onnx.proto (ModelProto, GraphProto, NodeProto, ValueInfoProto, TypeProto).


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


_UINT8, _INT8, _INT32 = 2, 3, 6  # onnx TensorProto.DataType
_ZERO_POINT = np.array(128, dtype=np.uint8)


def _value_info(name: str, elem_type: int) -> bytes:
    tensor_type = _field(1, elem_type)  # TypeProto.Tensor.elem_type (shape left open)
    return _field(1, name) + _field(2, _field(1, tensor_type))


def matmul_integer_model() -> bytes:
    """ModelProto bytes: Y (int32) = MatMulInteger(A uint8, B int8, A's zero point), opset 13."""
    node = (
        _field(1, "A") + _field(1, "B") + _field(1, "AZ") + _field(2, "Y")
        + _field(4, "MatMulInteger")
    )  # fmt: skip
    graph = (
        _field(1, node)
        + _field(2, "daisychain-int8")
        + _field(11, _value_info("A", _UINT8))
        + _field(11, _value_info("B", _INT8))
        + _field(11, _value_info("AZ", _UINT8))  # A's zero point: 128, so A - 128 = a
        + _field(12, _value_info("Y", _INT32))
    )
    opset = _field(1, "") + _field(2, 13)
    return _field(1, 8) + _field(8, opset) + _field(7, graph)  # ir_version 8


class CpuInt8Gemm:
    """``matmul_int`` and ``qmatmul`` (the gates' IntGemm interface) through onnxruntime."""

    name = NAME

    def __init__(self, threads: int = 0) -> None:
        try:
            import onnxruntime as ort  # an optional dependency: imported only when used
        except ImportError as exc:
            raise Int8Unavailable(
                "onnxruntime is not installed (pip install 'daisychain[int8]')"
            ) from exc
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads  # 0: onnxruntime's default (the cores)
        options.log_severity_level = 3
        # No busy-waiting between products: the numpy work around every product (quantize,
        # audit, BLAS) runs on the same cores, and spinning threads would take them from it.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session: Any = ort.InferenceSession(
                matmul_integer_model(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # an onnxruntime that cannot run the model
            raise Int8Unavailable(f"onnxruntime refused MatMulInteger: {exc}") from exc
        self.version = str(ort.__version__)

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """Exact ``a @ b`` of (M, K) and (K, N) int8 matrices, (M, N) int32 -- if the gates
        passed on this machine (see the module docstring)."""
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
            raise ValueError(f"matmul_int needs (M, K) @ (K, N), got {a.shape} @ {b.shape}")
        return self.matmul_int_batched(a, b)

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """``matmul_int`` of (..., M, K) and (..., K, N) with equal leading axes, in one call
        (MLAS loops over the batch with the same kernel the gates proved)."""
        if a.dtype != np.int8 or b.dtype != np.int8:  # a float array viewed as bytes: garbage
            raise TypeError(f"matmul_int needs int8 operands, got {a.dtype} @ {b.dtype}")
        if a.ndim < 2 or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
            raise ValueError(
                f"matmul_int needs (..., M, K) @ (..., K, N), got {a.shape} @ {b.shape}"
            )
        if a.shape[-1] > MAX_K:
            raise ValueError(f"K = {a.shape[-1]} > {MAX_K}: the offset sums would overflow int32")
        a_u8 = np.ascontiguousarray(a).view(np.uint8) ^ np.uint8(0x80)  # a + 128
        b_c = np.ascontiguousarray(b, dtype=np.int8)
        feeds = {"A": a_u8, "B": b_c, "AZ": _ZERO_POINT}
        (acc,) = self._session.run(None, feeds)  # (A - 128) @ B, the correction inside MLAS
        return np.asarray(acc, dtype=np.int32)

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
        (``bench step``'s ``cpu-int8-unaudited`` side). Leading axes broadcast (the limbs of a
        gradient operand against one matrix), as in ``gpu.live.AuditedBatchedMatmul``, which
        also takes ``a8``/``b8`` (the operands already cast)."""
        *_, a_int8, b_int8 = int8_operands(a, b, a8, b8)
        return self.matmul_int_batched(a_int8, b_int8)

    def qmatmul(self, a_q: FloatArray, a_e: IntArray, b_q: FloatArray, b_e: IntArray) -> FloatArray:
        acc = self.matmul_int(a_q.astype(np.int8), b_q.astype(np.int8))
        return ref.round_scaled(acc.astype(np.float64), a_e + b_e)


def evaluate(gemm: IntGemm | None = None) -> tuple[IntGemm | None, str | None]:
    """Build, gate and probe the CPU int8 GEMM on this machine: (gemm, None) if every gate and
    the kernel probe give the reference's bits, else (None, why). ``gemm`` replaces the real
    one (the planted-bug tests pass a wrong one)."""
    if gemm is None:
        try:
            gemm = CpuInt8Gemm()
        except Int8Unavailable as exc:
            return None, str(exc)
    why = prove(gemm)
    return (gemm, None) if why is None else (None, why)
