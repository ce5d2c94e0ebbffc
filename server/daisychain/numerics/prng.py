"""The contract's integer PRNG (docs/NUMERICS.md, "Random numbers").

Counter-based, 32-bit, so numpy (uint32 wraps), JavaScript (``Math.imul`` and ``>>> 0``) and WGSL
(u32 wraps) compute it identically and any element can be generated independently:

    mix32(x)       = murmur3 fmix32: x ^= x>>16; x *= 0x85EBCA6B; x ^= x>>13; x *= 0xC2B2AE35;
                     x ^= x>>16                                  (all mod 2^32)
    key(seed, ids) = k = mix32(seed ^ 0x6A09E667);
                     for id in ids: k = mix32(k ^ mix32(id + 0x9E3779B9))
    bits(k, i)     = mix32(mix32(i ^ k) + 0x9E3779B9)            for counter i = 0, 1, 2, ...
    uniform(k, i)  = (bits(k, i) >> 8) * 2^-24                   exact float32 in [0, 1)
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

U32 = np.uint32
U32Array = npt.NDArray[np.uint32]

GOLDEN = 0x9E3779B9
KEY_SALT = 0x6A09E667


def mix32(x: U32Array) -> U32Array:
    shape = np.shape(x)
    # Work on a 1-D array: numpy wraps uint32 arrays silently but warns on 0-d scalars.
    x = np.asarray(x, dtype=np.uint32).reshape(-1)
    x = x ^ (x >> U32(16))
    x = x * U32(0x85EBCA6B)
    x = x ^ (x >> U32(13))
    x = x * U32(0xC2B2AE35)
    x = x ^ (x >> U32(16))
    return x.reshape(shape)


def _mix_int(x: int) -> int:
    return int(mix32(np.array([x & 0xFFFFFFFF], dtype=np.uint32))[0])


def key(seed: int, *ids: int) -> int:
    """Stream key for (seed, ids...): every purpose draws from its own stream."""
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be in [0, 2^32), got {seed}")
    k = _mix_int(seed ^ KEY_SALT)
    for i in ids:
        if not 0 <= i < 2**32:
            raise ValueError(f"stream id must be in [0, 2^32), got {i}")
        k = _mix_int(k ^ _mix_int(i + GOLDEN))
    return k


def bits(k: int, n: int, start: int = 0) -> U32Array:
    """``n`` 32-bit values of stream ``k`` for counters start .. start + n - 1."""
    i = np.arange(start, start + n, dtype=np.uint64).astype(np.uint32)
    return mix32(mix32(i ^ U32(k)) + U32(GOLDEN))


def uniform(k: int, n: int, start: int = 0) -> npt.NDArray[np.float32]:
    """``n`` float32 values in [0, 1) with 24 random bits each (exact)."""
    return (bits(k, n, start) >> U32(8)).astype(np.float32) * np.float32(2.0**-24)


def below(k: int, n: int, bound: int, start: int = 0) -> npt.NDArray[np.int64]:
    """``n`` integers in [0, bound) as ``bits mod bound`` (bias < bound / 2^32, documented)."""
    if not 0 < bound <= 2**32:
        raise ValueError(f"bound must be in (0, 2^32], got {bound}")
    return (bits(k, n, start).astype(np.int64)) % bound
