"""Keep a training step's freed memory mapped for the next step (glibc's malloc only).

A ``small`` step allocates and frees about 130 MB of short-lived numpy arrays (quantized operands,
limbs, products, softmax blocks). With glibc's default policy most of them come back fresh from
the kernel every step: blocks above the mmap threshold are mapped and unmapped per array, and the
top of the heap is trimmed as soon as it is free, so the next step page-faults all of it again
(about 35,000 minor faults per ``small`` step, 10-15% of its time, measured on the project's
2-core machine). Raising the three thresholds below keeps those pages in the process between
steps — what a buffer pool kept between steps would do, without threading buffers through every
function. Peak RSS is unchanged (the same arrays are live at the peak); freed memory is simply
not returned to the kernel until the process ends.

The policy is process-wide, so it is applied once, on the first training step (``gpt.
forward_backward`` calls ``keep_step_memory``). It changes where arrays live, never a value.
``DAISYCHAIN_KEEP_HEAP=0`` in the environment leaves the allocator alone (a host short of memory).
"""

from __future__ import annotations

import ctypes
import os
import sys

# mallopt parameter numbers (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
# Arrays up to 32 MiB (glibc's largest allowed threshold on 64-bit) come from the heap, where a
# freed block is reused; the heap's free top is kept up to 256 MiB, and grown 64 MiB at a time.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20
TOP_PAD = 64 << 20
ENV_OPT_OUT = "DAISYCHAIN_KEEP_HEAP"

_applied: bool | None = None  # None: not tried yet; the policy is per process, so is this


def keep_step_memory() -> bool:
    """Apply the policy once per process; returns whether it is in force."""
    global _applied
    if _applied is None:
        _applied = _apply()
    return _applied


def _apply() -> bool:
    if os.environ.get(ENV_OPT_OUT, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc; musl and others have no mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (M_TOP_PAD, TOP_PAD),
    )
    return all(mallopt(param, value) == 1 for param, value in settings)
