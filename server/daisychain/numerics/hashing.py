"""The weight hash (docs/NUMERICS.md, "Identity").

SHA-256 over the canonical little-endian bytes of named float32 arrays in a fixed order. Replicas
publish it every step; any difference means a fork. The browser computes the same digest with
``crypto.subtle.digest("SHA-256", ...)`` over the same byte sequence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt


def canonical_bytes(a: npt.NDArray[np.generic]) -> bytes:
    """C-order little-endian bytes of ``a`` (its dtype kept: float32 parameters stay 4 bytes)."""
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()


def sha256_arrays(arrays: Iterable[npt.NDArray[np.generic]]) -> str:
    """Hex SHA-256 of the concatenated canonical bytes of ``arrays`` in the order given."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(canonical_bytes(a))
    return h.hexdigest()
