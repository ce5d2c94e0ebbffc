"""Adapter and device acquisition for the wgpu backend (one device per process).

``acquire()`` asks wgpu for an adapter, checks what the kernels need (storage buffer size,
workgroup counts) and returns a ``GpuDevice``; every failure raises ``GpuUnavailable`` with the
reason and a hint, which the backend records as the demotion reason of every GPU row. Device
loss and uncaptured errors are not silent: wgpu raises them on the next call, and the gates and
the audit turn any exception into a demotion.
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

# What the kernels assume of every device (docs/KERNELS.md): a 64 x 64 workgroup grid is the
# WebGPU default limit and covers the shapes the model uses.
MIN_STORAGE_BINDING = 64 * 1024 * 1024

_HINT = (
    "install a Vulkan driver (Debian/Ubuntu: apt-get install mesa-vulkan-drivers libvulkan1, "
    "which provides the llvmpipe CPU adapter) and wgpu (pip install wgpu); the numpy backend "
    "computes the same bits meanwhile"
)


class GpuUnavailable(RuntimeError):
    """No usable wgpu adapter/device on this machine (the message says why and what to do)."""


@dataclass(frozen=True)
class GpuDevice:
    """A wgpu device with the facts the backends report."""

    device: Any  # wgpu.GPUDevice (wgpu is an optional import, so typed loosely here)
    adapter_name: str  # e.g. "llvmpipe (LLVM 15.0.6, 256 bits) (CPU, Vulkan)"
    limits: dict[str, int]
    features: frozenset[str]
    adapter_type: str = ""  # wgpu's adapter_type: "DiscreteGPU", "IntegratedGPU", "CPU", ...

    @property
    def emulated(self) -> bool:
        """A CPU pretending to be a GPU (llvmpipe, SwiftShader): parallel work there is the same
        few cores, and workgroup barriers are expensive."""
        return self.adapter_type.lower() == "cpu" or "(cpu," in self.adapter_name.lower()

    @property
    def queue(self) -> Any:
        return self.device.queue


_lock = threading.Lock()
_cached: GpuDevice | GpuUnavailable | None = None


def _describe(info: Any) -> str:
    name = str(info.get("device") or info.get("description") or info.get("vendor") or "unknown")
    kind = str(info.get("adapter_type", "?"))
    backend = str(info.get("backend_type", "?"))
    return f"{name} ({kind}, {backend})"


def _acquire() -> GpuDevice:
    # wgpu-native's Vulkan loader warns when XDG_RUNTIME_DIR is unset; give it a private folder.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="daisychain-xdg-")
    try:
        import wgpu
    except Exception as exc:  # ImportError, or the native library failing to load
        raise GpuUnavailable(f"wgpu cannot be imported ({exc}); {_HINT}") from exc
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as exc:
        raise GpuUnavailable(f"no wgpu adapter ({exc}); {_HINT}") from exc
    if adapter is None:
        raise GpuUnavailable(f"no wgpu adapter found; {_HINT}")
    limits = {str(k): int(v) for k, v in dict(adapter.limits).items() if isinstance(v, int)}
    binding = limits.get(
        "max-storage-buffer-binding-size", limits.get("max_storage_buffer_binding_size", 0)
    )
    if binding < MIN_STORAGE_BINDING:
        raise GpuUnavailable(
            f"adapter {_describe(adapter.info)} allows storage bindings of {binding} bytes, "
            f"the kernels need {MIN_STORAGE_BINDING}; use another adapter or the numpy backend"
        )
    try:
        device = adapter.request_device_sync(
            required_limits={"max-storage-buffer-binding-size": MIN_STORAGE_BINDING}
        )
    except Exception as exc:
        raise GpuUnavailable(f"the adapter refused a device ({exc}); {_HINT}") from exc
    return GpuDevice(
        device=device,
        adapter_name=_describe(adapter.info),
        limits=limits,
        features=frozenset(str(f) for f in adapter.features),
        adapter_type=str(adapter.info.get("adapter_type", "")),
    )


def acquire() -> GpuDevice:
    """The process's GPU device, created on first use (raises ``GpuUnavailable``, cached too)."""
    global _cached
    with _lock:
        if _cached is None:
            try:
                _cached = _acquire()
            except GpuUnavailable as exc:
                _cached = exc
        if isinstance(_cached, GpuUnavailable):
            raise _cached
        return _cached
