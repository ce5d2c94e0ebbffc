"""A GPU buffer pool that recycles buffers by size and can be poisoned.

Kernels must write every output cell they own. A kernel that instead assumes zeroed memory
(``out += ...``, or a skipped cell left at its initial 0) passes on fresh wgpu buffers, which
are zero-filled, and fails only later, on a recycled buffer, at a shape nobody tested. So before
a sweep (the gates, a re-sweep of the audit) the pool is poisoned: every free buffer is filled with
0xDEADBEEF, and while ``poisoned()`` is active freshly created buffers are too, so such a bug
shows up deterministically on the very first case.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from daisychain.gpu.counters import ROUND_TRIPS
from daisychain.gpu.device import GpuDevice

POISON_WORD = 0xDEADBEEF
_ALIGN = 16  # bytes: uniform bindings need 16, storage 4


def _storage_usage() -> int:
    import wgpu

    usage: int = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
    return usage


def _uniform_usage() -> int:
    import wgpu

    usage: int = wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
    return usage


class BufferPool:
    """Free lists of GPU buffers keyed by (size, usage)."""

    def __init__(self, gpu: GpuDevice) -> None:
        self.gpu = gpu
        self._free: dict[tuple[int, int], list[Any]] = {}
        self._poison_new = False
        self.created = 0  # buffers ever created (tests check that recycling happens)

    @staticmethod
    def _round(nbytes: int) -> int:
        return max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)

    def acquire(self, nbytes: int, *, uniform: bool = False) -> Any:
        """A buffer of at least ``nbytes`` (rounded up to 16); its contents are unspecified."""
        usage = _uniform_usage() if uniform else _storage_usage()
        key = (self._round(nbytes), usage)
        free = self._free.get(key)
        if free:
            return free.pop()
        buf = self.gpu.device.create_buffer(size=key[0], usage=usage)
        self.created += 1
        if self._poison_new:
            self._fill(buf)
        return buf

    def release(self, *buffers: Any) -> None:
        for buf in buffers:
            self._free.setdefault((int(buf.size), int(buf.usage)), []).append(buf)

    def upload(self, array: np.ndarray[Any, Any], *, uniform: bool = False) -> Any:
        """A pooled buffer holding the bytes of ``array`` (C order) at offset 0."""
        data = np.ascontiguousarray(array)
        buf = self.acquire(data.nbytes, uniform=uniform)
        self.gpu.queue.write_buffer(buf, 0, data.tobytes())
        ROUND_TRIPS.add(uploads=1, bytes_up=data.nbytes)
        return buf

    def read(self, buf: Any, nbytes: int) -> bytes:
        """The first ``nbytes`` of ``buf`` (blocks until the queued work is done)."""
        ROUND_TRIPS.add(readbacks=1, bytes_down=nbytes)
        return bytes(self.gpu.queue.read_buffer(buf, 0, nbytes))

    def _fill(self, buf: Any) -> None:
        pattern = np.full(int(buf.size) // 4, POISON_WORD, dtype="<u4")
        self.gpu.queue.write_buffer(buf, 0, pattern.tobytes())
        ROUND_TRIPS.add(uploads=1, bytes_up=pattern.nbytes)

    def poison(self) -> int:
        """Fill every free buffer with 0xDEADBEEF; returns how many were poisoned."""
        count = 0
        for free in self._free.values():
            for buf in free:
                self._fill(buf)
                count += 1
        return count

    @contextlib.contextmanager
    def poisoned(self) -> Iterator[None]:
        """Poison the free buffers, and every buffer created until the block ends."""
        self.poison()
        previous, self._poison_new = self._poison_new, True
        try:
            yield
        finally:
            self._poison_new = previous
