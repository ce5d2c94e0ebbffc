"""GPU compute for the Python peer: the WGSL kernels in ``kernels/`` run through wgpu.

Nothing here is trusted by default. A kernel is used only after it passes the exact gates
(``gates.py``) on the very device it runs on; one that fails is demoted with the failing case
recorded, and the backend falls back DP4A -> LUT -> numpy (``backend.py``). During training a
continuous audit (``audit.py``) re-checks sampled output cells, and a kernel probe (``probe.py``)
hashes a fixed seeded product through the live kernel. Spec: docs/KERNELS.md.

Importing this package does not need wgpu; ``device.acquire()`` does, and says why it failed.
"""

from daisychain.gpu.device import GpuDevice, GpuUnavailable, acquire

__all__ = ["GpuDevice", "GpuUnavailable", "acquire"]
