"""Load the WGSL kernels from ``kernels/`` and build their compute pipelines.

The browser and the Python peer read the very same files (``daisychain.assets.asset_dir``). A
kernel may also be compiled from a modified source: the planted-bug tests do exactly that and run
the result through the same gates, which must then fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from daisychain.assets import asset_dir
from daisychain.gpu.counters import ROUND_TRIPS
from daisychain.gpu.device import GpuDevice

# How a kernel declares binding i of group 0 (must match the WGSL header):
# "uniform" var<uniform>, "read" var<storage, read>, "write" var<storage, read_write>.
BindingKind = Literal["uniform", "read", "write"]


class KernelError(RuntimeError):
    """A kernel failed to compile or to dispatch on this device (the message names it)."""


def kernel_source(name: str) -> str:
    """The WGSL text of ``kernels/<name>.wgsl``."""
    path = asset_dir("kernels") / f"{name}.wgsl"
    if not path.is_file():
        raise FileNotFoundError(
            f"kernel {name!r} not found at {path}; reinstall daisychain so kernels/ is shipped"
        )
    return path.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Span:
    """``size`` bytes of ``buffer`` from ``offset`` (a multiple of ``SPAN_ALIGN``), bound as one
    binding: how the slices of a batched product share one buffer."""

    buffer: Any
    offset: int
    size: int


# WebGPU lets a device require binding offsets aligned to at most 256 bytes
# (minStorageBufferOffsetAlignment, minUniformBufferOffsetAlignment): 256 is valid everywhere.
SPAN_ALIGN = 256

# One dispatch: its bindings in order (a whole buffer, or a Span of one), and its workgroup grid.
Binding = Any
Job = tuple[Sequence[Binding], tuple[int, int, int]]


def _entry(i: int, binding: Binding) -> dict[str, Any]:
    if isinstance(binding, Span):
        resource = {"buffer": binding.buffer, "offset": binding.offset, "size": binding.size}
    else:
        resource = {"buffer": binding, "offset": 0, "size": binding.size}
    return {"binding": i, "resource": resource}


@dataclass
class ComputeKernel:
    """One compiled compute pipeline (entry point ``main``, bind group 0)."""

    name: str
    gpu: GpuDevice
    pipeline: Any
    layout: Any
    constants: dict[str, int] = field(default_factory=dict)

    def dispatch(self, buffers: Sequence[Binding], groups: tuple[int, int, int]) -> None:
        """Bind ``buffers`` to bindings 0, 1, ... in order and submit one dispatch."""
        self.dispatch_batch([(buffers, groups)])

    def dispatch_batch(self, jobs: Sequence[Job]) -> None:
        """Record every job's dispatch, in order, into ONE command encoder and submit it once.

        The device runs them in submission order; jobs that write disjoint spans of one output
        buffer need no barrier between them. One submit (and the caller's one readback) instead
        of one per job is the point (``counters.py``).
        """
        dispatch_sequence(self.gpu, [(self, bindings, groups) for bindings, groups in jobs])


# One step of ``dispatch_sequence``: a kernel, its bindings and its workgroup grid.
Step = tuple["ComputeKernel", Sequence[Binding], tuple[int, int, int]]
# A copy after the dispatches: (source buffer, source offset, destination, offset, bytes).
Copy = tuple[Any, int, Any, int, int]


def dispatch_sequence(gpu: GpuDevice, steps: Sequence[Step], copies: Sequence[Copy] = ()) -> None:
    """Several kernels' dispatches, in order, in ONE command encoder and one submit, then the
    ``copies``: a chain whose later kernels read what earlier ones wrote (WebGPU makes each
    dispatch's writes visible to the next), so nothing goes back to the host in between.
    The copies gather the results into one buffer, which the caller reads once."""
    device = gpu.device
    try:
        encoder = device.create_command_encoder()
        compute_pass = encoder.begin_compute_pass()
        for kernel, bindings, groups in steps:
            bind_group = device.create_bind_group(
                layout=kernel.layout, entries=[_entry(i, b) for i, b in enumerate(bindings)]
            )
            compute_pass.set_pipeline(kernel.pipeline)
            compute_pass.set_bind_group(0, bind_group)
            compute_pass.dispatch_workgroups(*groups)
        compute_pass.end()
        for src, src_offset, dst, dst_offset, size in copies:
            encoder.copy_buffer_to_buffer(src, src_offset, dst, dst_offset, size)
        device.queue.submit([encoder.finish()])
    except Exception as exc:
        names = " -> ".join(dict.fromkeys(kernel.name for kernel, _, _ in steps))
        grids = sorted({groups for _, _, groups in steps})
        raise KernelError(f"kernel {names}: dispatch {grids} failed: {exc}") from exc
    ROUND_TRIPS.add(submits=1, dispatches=len(steps))


def compile_kernel(
    gpu: GpuDevice,
    name: str,
    bindings: Sequence[BindingKind],
    source: str | None = None,
    constants: Mapping[str, int] | None = None,
) -> ComputeKernel:
    """Compile ``kernels/<name>.wgsl`` (or ``source``) with its ``override`` constants set.

    The bind group layout is explicit (``bindings``), not derived from the shader, so a kernel
    that stops using a buffer still binds exactly what the host passes.
    """
    import wgpu

    code = kernel_source(name) if source is None else source
    consts = dict(constants or {})
    buffer_types = {
        "uniform": wgpu.BufferBindingType.uniform,
        "read": wgpu.BufferBindingType.read_only_storage,
        "write": wgpu.BufferBindingType.storage,
    }
    try:
        layout = gpu.device.create_bind_group_layout(
            entries=[
                {
                    "binding": i,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": buffer_types[kind]},
                }
                for i, kind in enumerate(bindings)
            ]
        )
        module = gpu.device.create_shader_module(label=name, code=code)
        pipeline = gpu.device.create_compute_pipeline(
            label=name,
            layout=gpu.device.create_pipeline_layout(bind_group_layouts=[layout]),
            compute={"module": module, "entry_point": "main", "constants": consts},
        )
    except Exception as exc:
        first = str(exc).strip().splitlines()
        raise KernelError(
            f"kernel {name}: the device rejected the WGSL ({first[0] if first else exc!r}); "
            "the next backend in line is used"
        ) from exc
    return ComputeKernel(name=name, gpu=gpu, pipeline=pipeline, layout=layout, constants=consts)
