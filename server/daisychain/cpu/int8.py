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

from daisychain.cpu.gemmapi import CpuGemm, Int8Array, Int32Array
from daisychain.gpu.backend import prove
from daisychain.gpu.gates import IntGemm

NAME = "cpu-int8"
MAX_K = (2**31 - 1) // (255 * 128)  # the offset trick's int32 sums stay exact below this


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


class CpuInt8Gemm(CpuGemm):
    """The gates' IntGemm interface (``gemmapi.CpuGemm``) through onnxruntime."""

    name = NAME
    max_k = MAX_K

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

    def _product(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """(MLAS loops over the batch with the same kernel the gates proved.)"""
        a_u8 = np.ascontiguousarray(a).view(np.uint8) ^ np.uint8(0x80)  # a + 128
        b_c = np.ascontiguousarray(b, dtype=np.int8)
        feeds = {"A": a_u8, "B": b_c, "AZ": _ZERO_POINT}
        (acc,) = self._session.run(None, feeds)  # (A - 128) @ B, the correction inside MLAS
        return np.asarray(acc, dtype=np.int32)


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
