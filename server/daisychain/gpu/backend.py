"""Backend selection, best first: wgpu DP4A -> wgpu LUT -> numpy (the reference).

Each GPU candidate must compile on this device, pass every exact gate (``gates.py``) on a
poisoned pool, and reproduce the reference probe hash; the first that does is used. Every
candidate that does not is demoted with its reason kept (``Demotion``), so ``daisychain selftest``
and the peer's logs say why a device computes on the CPU. The numpy backend is the reference
itself and cannot be demoted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from daisychain.gpu import chain
from daisychain.gpu.attention_chain import AttentionChain, run_attention_chain_gates
from daisychain.gpu.backward_chain import EPILOGUES as BACKWARD_EPILOGUES
from daisychain.gpu.backward_chain import BackwardChain, run_backward_chain_gates
from daisychain.gpu.block_chain import BlockChain, run_block_chain_gates
from daisychain.gpu.device import GpuDevice, GpuUnavailable, acquire
from daisychain.gpu.forward_chain import EPILOGUES as FORWARD_EPILOGUES
from daisychain.gpu.forward_chain import ForwardChain, run_forward_chain_gates
from daisychain.gpu.gates import IntGemm, run_gemm_gates, run_quantize_gates
from daisychain.gpu.gemm import GemmKind, GpuGemm, Int8Array, Int32Array
from daisychain.gpu.mlp_chain import MlpChain, run_mlp_chain_gates
from daisychain.gpu.pool import BufferPool
from daisychain.gpu.probe import PROBE_MODEL, probe_hash, reference_probe_hash
from daisychain.gpu.qkv_chain import QkvChain, run_qkv_chain_gates
from daisychain.gpu.quantize import GpuQuantize
from daisychain.gpu.step_chain import EPILOGUES as STEP_EPILOGUES
from daisychain.gpu.step_chain import StepChain, run_step_chain_gates
from daisychain.numerics.gemm import int_matmul, qmatmul
from daisychain.numerics.quant import FloatArray, IntArray

log = logging.getLogger(__name__)

GPU_ORDER: tuple[GemmKind, ...] = ("dp4a", "lut")
GOPS_SHAPE = (256, 256, 256)  # M, K, N of the selftest's throughput figure


class NumpyGemm:
    """The reference: exact int8 products through float32 BLAS (daisychain.numerics.gemm)."""

    name = "numpy"
    adapter = "CPU (numpy float32 BLAS, exact integer path)"

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        acc = int_matmul(a.astype(np.float32), b.astype(np.float32))
        return acc.astype(np.int32)

    def qmatmul(self, a_q: FloatArray, a_e: IntArray, b_q: FloatArray, b_e: IntArray) -> FloatArray:
        return qmatmul(a_q, a_e, b_q, b_e)


@dataclass(frozen=True)
class BackendReport:
    """One row of ``daisychain selftest``."""

    name: str
    adapter: str
    gates_passed: bool
    failure: str | None
    probe_hash: str | None
    gops: float | None

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "adapter": self.adapter,
            "gates_passed": self.gates_passed,
            "failure": self.failure,
            "probe_hash": self.probe_hash,
            "gops": self.gops,
        }


@dataclass(frozen=True)
class Demotion:
    name: str
    reason: str


@dataclass
class Backend:
    """The GEMM in use and why better candidates were not."""

    gemm: IntGemm
    adapter: str
    demotions: list[Demotion] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.gemm.name


def measure_gops(
    gemm: IntGemm, shape: tuple[int, int, int] = GOPS_SHAPE, repeats: int = 3
) -> float:
    """Best-of-``repeats`` throughput of ``matmul_int`` in GOP/s (2 M K N operations)."""
    m, k, n = shape
    rng = np.random.default_rng(0)  # timing input only; never part of the contract
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    gemm.matmul_int(a, b)  # warm-up: pipeline caches, buffer pool
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        gemm.matmul_int(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * m * k * n / best / 1e9


def evaluate_gpu(
    gpu: GpuDevice, kind: GemmKind, source: str | None = None
) -> tuple[GpuGemm | None, str | None]:
    """Compile, gate and probe one GPU kernel: (gemm, None) if usable, else (None, reason).

    ``source`` replaces the kernel file's WGSL (the planted-bug tests use it).
    """
    try:
        gemm = GpuGemm(gpu, kind, source=source)
    except Exception as exc:
        return None, str(exc)
    why = prove(gemm, gemm.pool, gemm.tile)
    if why is None:
        attached = (
            ("mlp", attach_mlp_chain(gemm)),
            ("attention", attach_attention_chain(gemm)),
            ("block", attach_block_chain(gemm)),
            ("qkv", attach_qkv_chain(gemm)),
            ("forward", attach_forward_chain(gemm)),
            ("backward", attach_backward_chain(gemm)),
            ("step", attach_step_chain(gemm)),
        )
        gemm.chain_failures = {attr: reason for attr, reason in attached if reason}
    return (gemm, None) if why is None else (None, why)


CHAINS = ("mlp", "attention", "block", "qkv", "forward", "backward", "step")


def chains_in_use(gemm: object) -> str:
    """Which chains training uses on ``gemm`` ("chains: mlp, attention, block"), for the line
    that names the chosen backend."""
    used = [attr for attr in CHAINS if getattr(gemm, attr, None) is not None]
    return f"chains: {', '.join(used)}" if used else "no chains"


def epilogue_dispatches(gemm: object, layers: int) -> int:
    """The epilogue dispatches the chains in use on ``gemm`` add to a training step of
    ``layers`` blocks (the GEMM's own dispatches are the same slices with or without chains):
    one per block each for the MLP, attention, block and qkv chains, two more per block for the
    forward chain (the merge, the norm after the MLP), the backward chain's, and the step
    chain's (the cross-entropy, the transposes of the forward's operands, and the kernel probe's
    product, which the step computes for the peer's probe, with the whole probe step:
    ``probe_step_dispatches``)."""

    def used(attr: str) -> bool:
        return getattr(gemm, attr, None) is not None

    per_block = sum(used(attr) for attr in ("mlp", "attention", "block", "qkv"))
    per_block += FORWARD_EPILOGUES if used("forward") else 0
    first = BACKWARD_EPILOGUES[0] if used("backward") else 0
    per_block += BACKWARD_EPILOGUES[1] if used("backward") else 0
    if used("step"):
        first += STEP_EPILOGUES[0] + probe_step_dispatches()
        per_block += STEP_EPILOGUES[1]
    return first + layers * per_block


def probe_step_dispatches() -> int:
    """What the step chain records for the probe step beside every training step (``gpu.probe``
    ``PROBE_MODEL``): the whole step's GEMM slices (per block the qkv, output and MLP products,
    the scores and ``P v`` per head of the batch, their backward pairs in two limbs; the logits
    product and its pair in three) and its epilogues (per block the four block chains', the
    forward chain's two, the backward's and the transposes; the cross-entropy, the final
    operand's transpose and the backward's first)."""
    cfg = PROBE_MODEL
    slices, layers = cfg.batch * cfg.heads, cfg.layers
    gemms = 1 + 2 * 3 + layers * ((4 + 2 * slices) + 2 * 2 * (4 + 2 * slices))
    per_block = 4 + FORWARD_EPILOGUES + BACKWARD_EPILOGUES[1] + STEP_EPILOGUES[1]
    epilogues = 2 + BACKWARD_EPILOGUES[0] + layers * per_block
    return gemms + epilogues


def attach_mlp_chain(gemm: GpuGemm, source: str | None = None) -> str | None:
    """Compile and gate the MLP chain on ``gemm``'s device and, if it passes, let training use
    it (``gemm.mlp``): None, else why not (the GEMM stays usable, the MLP then costs two round
    trips). ``source`` replaces the epilogue's whole module (the planted-bug tests)."""
    return chain.attach(gemm, "mlp", lambda: MlpChain(gemm, source=source), run_mlp_chain_gates)


def attach_attention_chain(gemm: GpuGemm, source: str | None = None) -> str | None:
    """``attach_mlp_chain`` for attention's chain (``gemm.attention``)."""
    return chain.attach(
        gemm,
        "attention",
        lambda: AttentionChain(gemm, source=source),
        run_attention_chain_gates,
    )


def attach_block_chain(gemm: GpuGemm, source: str | None = None) -> str | None:
    """``attach_mlp_chain`` for a block's tail (``gemm.block``), which extends the MLP chain:
    none without it."""
    mlp = gemm.mlp
    if mlp is None:
        gemm.block = None
        return f"{gemm.name}-block: no MLP chain to extend"
    return chain.attach(
        gemm, "block", lambda: BlockChain(mlp, source=source), run_block_chain_gates
    )


def attach_qkv_chain(gemm: GpuGemm, source: str | None = None) -> str | None:
    """``attach_mlp_chain`` for a block's attention from its input (``gemm.qkv``), which
    extends the attention chain: none without it."""
    attention = gemm.attention
    if attention is None:
        gemm.qkv = None
        return f"{gemm.name}-qkv: no attention chain to extend"
    return chain.attach(
        gemm, "qkv", lambda: QkvChain(attention, source=source), run_qkv_chain_gates
    )


def attach_forward_chain(gemm: GpuGemm, source: str | None = None) -> str | None:
    """``attach_mlp_chain`` for a whole forward (``gemm.forward``), which extends the qkv and
    block chains (``source``: the merge epilogue's module): none without both."""
    qkv, block = gemm.qkv, gemm.block
    if qkv is None or block is None:
        gemm.forward = None
        return f"{gemm.name}-forward: no qkv and block chains to extend"
    return chain.attach(
        gemm, "forward", lambda: ForwardChain(qkv, block, source=source), run_forward_chain_gates
    )


def attach_backward_chain(gemm: GpuGemm, sources: dict[str, str] | None = None) -> str | None:
    """``attach_mlp_chain`` for a whole backward (``gemm.backward``; ``sources``: its epilogues'
    modules by kernel name)."""
    return chain.attach(
        gemm, "backward", lambda: BackwardChain(gemm, sources=sources), run_backward_chain_gates
    )


def attach_step_chain(gemm: GpuGemm, sources: dict[str, str] | None = None) -> str | None:
    """``attach_mlp_chain`` for a whole training step (``gemm.step``), which extends the forward
    and backward chains (``sources``: its kernels' modules by name): none without both."""
    forward, backward = gemm.forward, gemm.backward
    if forward is None or backward is None:
        gemm.step = None
        return f"{gemm.name}-step: no forward and backward chains to extend"
    return chain.attach(
        gemm, "step", lambda: StepChain(forward, backward, sources=sources), run_step_chain_gates
    )


def prove(
    gemm: IntGemm, pool: BufferPool | None = None, tile: tuple[int, int] = (32, 32)
) -> str | None:
    """Every GEMM gate, then the kernel probe, through ``gemm`` on this device: None when both
    give the reference's bits, else why not (the first failing gate, or the probe's hash).
    What makes any non-reference GEMM a candidate (a wgpu kernel, the CPU int8 GEMM)."""
    report = run_gemm_gates(gemm, pool, tile)
    if report.failure is not None:
        return report.failure.describe()
    try:
        got = probe_hash(gemm.matmul_int)
    except Exception as exc:
        return f"{gemm.name}: kernel probe failed: {exc}"
    expected = reference_probe_hash()
    if got != expected:
        return f"{gemm.name}: kernel probe hash {got[:16]}... != reference {expected[:16]}..."
    return None


def select_backend(
    order: Sequence[GemmKind] = GPU_ORDER, sources: Mapping[str, str] | None = None
) -> Backend:
    """The best backend that passes its gates on this machine, with the demotion reasons.

    ``sources`` maps a kind ("dp4a", "lut") to replacement WGSL (tests plant bugs with it).
    """
    sources = sources or {}
    demotions: list[Demotion] = []
    try:
        gpu = acquire()
    except GpuUnavailable as exc:
        demotions = [Demotion(f"wgpu-{kind}", str(exc)) for kind in order]
    else:
        for kind in order:
            gemm, reason = evaluate_gpu(gpu, kind, sources.get(kind))
            if gemm is not None:
                log.info("GEMM backend: %s on %s", gemm.name, gpu.adapter_name)
                return Backend(gemm, gpu.adapter_name, demotions)
            log.warning("demoted wgpu-%s: %s", kind, reason)
            demotions.append(Demotion(f"wgpu-{kind}", reason or "unknown"))
    numpy_gemm = NumpyGemm()
    return Backend(numpy_gemm, numpy_gemm.adapter, demotions)


def selftest_reports(measure: bool = True) -> list[BackendReport]:
    """Every backend on this machine, gated and probed (rows of ``daisychain selftest``)."""
    rows: list[BackendReport] = []
    try:
        gpu: GpuDevice | None = acquire()
        no_gpu = ""
    except GpuUnavailable as exc:
        gpu, no_gpu = None, str(exc)
    for kind in GPU_ORDER:
        name = f"wgpu-{kind}"
        if gpu is None:
            rows.append(BackendReport(name, "none", False, no_gpu, None, None))
            continue
        gemm, reason = evaluate_gpu(gpu, kind)
        if gemm is None:
            rows.append(BackendReport(name, gpu.adapter_name, False, reason, None, None))
            continue
        gops = measure_gops(gemm) if measure else None
        rows.append(
            BackendReport(name, gpu.adapter_name, True, None, probe_hash(gemm.matmul_int), gops)
        )
        for attr in CHAINS:  # the chains on this kernel: gated, or why not
            why = gemm.chain_failures.get(attr)
            rows.append(
                BackendReport(f"{name}-{attr}", gpu.adapter_name, why is None, why, None, None)
            )
    if gpu is None:
        rows.append(BackendReport("wgpu-quantize", "none", False, no_gpu, None, None))
    else:
        try:
            qreport = run_quantize_gates(quantizer := GpuQuantize(gpu), quantizer.pool)
            failure = None if qreport.failure is None else qreport.failure.describe()
        except Exception as exc:
            failure = str(exc)
        rows.append(
            BackendReport("wgpu-quantize", gpu.adapter_name, failure is None, failure, None, None)
        )
    ref = NumpyGemm()
    ref_report = run_gemm_gates(ref)
    rows.append(
        BackendReport(
            ref.name,
            ref.adapter,
            ref_report.passed,
            None if ref_report.failure is None else ref_report.failure.describe(),
            probe_hash(ref.matmul_int),
            measure_gops(ref) if measure else None,
        )
    )
    return rows
