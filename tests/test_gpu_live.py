"""Live audit: a kernel that passes its gates but goes wrong at a live shape is caught at once.

Runs without a GPU: the "kernel" here is the numpy reference with a planted bug, which is what
the audit must catch whatever device computed the product.
"""

from __future__ import annotations

import numpy as np
import pytest

from daisychain.gpu.backend import NumpyGemm
from daisychain.gpu.live import AuditedMatmul, KernelAuditError


class LastRowSkippedAboveSize(NumpyGemm):
    """Correct on small (gate-sized) products, drops the last row once M > 100."""

    name = "planted"

    def matmul_int(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:  # type: ignore[override]
        out = super().matmul_int(a, b)
        if a.shape[0] > 100:
            out[-1] = 0
        return out


def _operands(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)  # test inputs only
    return (
        rng.integers(-128, 128, (m, k), dtype=np.int8),
        rng.integers(-128, 128, (k, n), dtype=np.int8),
    )


def test_audit_passes_an_honest_kernel() -> None:
    mm = AuditedMatmul(NumpyGemm())
    a, b = _operands(130, 70, 90)
    assert np.array_equal(mm(a, b), a.astype(np.int64) @ b.astype(np.int64))
    assert mm.calls == 1


def test_audit_catches_a_bug_the_small_shapes_hide() -> None:
    mm = AuditedMatmul(LastRowSkippedAboveSize(), samples=0)  # structural cells alone suffice
    a, b = _operands(40, 70, 90)
    mm(a, b)  # gate-sized: fine
    a, b = _operands(130, 70, 90)
    with pytest.raises(KernelAuditError, match="live audit failed"):
        mm(a, b)
