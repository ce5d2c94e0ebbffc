"""The kernel probe: a fixed seeded int8 GEMM through the live kernel, hashed.

Every device computes ``acc = A @ B`` for the same A (64 x 96) and B (96 x 80), drawn from the
contract PRNG (stream ``(2, 0)`` for A and ``(2, 1)`` for B under ``PROBE_SEED``, the top byte of
each 32-bit word as int8), and publishes SHA-256 over the int32 little-endian bytes of acc in C
order. The numpy reference gives ``REFERENCE_PROBE_HASH``; a device whose live kernel disagrees is
computing different bits and must stop (docs/KERNELS.md, "Kernel probe").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from daisychain.numerics import prng

PROBE_SEED = 0x9B0BE
PROBE_SHAPE = (64, 96, 80)  # M, K, N

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


def probe_operands() -> tuple[Int8Array, Int8Array]:
    """The probe's A (M, K) and B (K, N)."""
    m, k, n = PROBE_SHAPE

    def draw(stream: int, shape: tuple[int, int]) -> Int8Array:
        words = prng.bits(prng.key(PROBE_SEED, 2, stream), shape[0] * shape[1])
        return (words >> np.uint32(24)).astype(np.uint8).view(np.int8).reshape(shape)

    return draw(0, (m, k)), draw(1, (k, n))


def hash_accumulator(acc: Int32Array) -> str:
    """SHA-256 (hex) of int32 little-endian C-order bytes."""
    return hashlib.sha256(np.ascontiguousarray(acc, dtype="<i4").tobytes()).hexdigest()


def probe_hash(matmul_int: Callable[[Int8Array, Int8Array], Int32Array]) -> str:
    """Run the probe through ``matmul_int`` (the live kernel) and hash its output."""
    a, b = probe_operands()
    return hash_accumulator(matmul_int(a, b))


def reference_probe_hash() -> str:
    """The probe through plain int64 numpy arithmetic (what every device must match)."""
    a, b = probe_operands()
    return hash_accumulator((a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32))
