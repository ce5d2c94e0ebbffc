"""``--backend auto|wgpu|cpu-int8|numpy``: which device computes this peer's integer products.

``wgpu`` uses the best GPU kernel that passes its gates and probe (``gpu.backend.select_backend``)
through ``gpu.live.training_ops`` (every product audited) and fails with a hint when none does.
``cpu-int8`` is the CPU's int8 dot-product units through onnxruntime (cpu/int8.py: an optional
dependency, gated and probed like a GPU kernel, since a CPU without VNNI saturates its sums).
``cpu-madd`` is an exact product on 16-bit multiply-adds that any CPU has (cpu/madd.py, numba:
the same optional dependency; what an AVX2 or NEON machine without int8 dot-product units uses).
``numpy`` is the reference. ``auto`` follows the rule the browser follows (docs/KERNELS.md,
"Backend choice"): correct first -- every wgpu kernel is gated and probed, and one that fails is
never a candidate -- then the fastest measured at start on a training step: in each of three
rounds every candidate (wgpu DP4A, wgpu LUT, cpu-int8, cpu-madd, numpy, in that preference order)
computes one
forward-backward of the ``tiny`` model with the ops it would train with (a GPU kernel audited,
as in training), stopped once it has run longer than the best so far; a candidate's figure is
its fastest round, so a moment of load beside the peer does not decide the run; ties go to the
earlier candidate. During the run peer/recheck.py measures again when the step slows down. A
software adapter (lavapipe/llvmpipe) passes every gate yet runs many times slower than BLAS, so
on such a machine numpy wins on its measured time, not by a special case. Either way the bits
are the same; the per-step kernel probe proves it to the other peers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daisychain.cpu import int8 as cpuint8
from daisychain.cpu import madd as cpumadd
from daisychain.gpu.backend import (
    GPU_ORDER,
    Backend,
    Demotion,
    chains_in_use,
    evaluate_gpu,
    select_backend,
)
from daisychain.gpu.device import GpuUnavailable, acquire
from daisychain.gpu.live import step_probe, training_ops
from daisychain.model import gpt
from daisychain.model.config import ModelConfig, preset
from daisychain.model.ops import (
    AttnOut,
    BackwardPlan,
    ForwardPlan,
    GemmOps,
    Grad,
    HeadsOf,
    Int8Array,
    MlpOut,
    QParts,
    TailOut,
)
from daisychain.model.params import init_params
from daisychain.numerics.quant import FloatArray, IntArray
from daisychain.p2p.options import Compute

CHOICES = ("auto", "wgpu", "cpu-int8", "cpu-madd", "numpy")
CPU_ORDER = (cpuint8.NAME, cpumadd.NAME)  # the CPU backends, in preference order
TIMING_PRESET = "tiny"  # a follower does not know the run's model yet when it chooses


class BackendUnavailable(Exception):
    """``--backend wgpu`` on a machine where no GPU kernel passed its gates."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Choice:
    compute: Compute
    reason: str  # printed at start: why this backend
    # ``auto`` only: every backend that passed its gates, in preference order (the run's re-check
    # measures them again; peer/recheck.py). One entry: nothing to re-check.
    candidates: tuple[Compute, ...] = ()


@dataclass(frozen=True)
class Candidate:
    """One row of the choice: a backend, whether it passed its gates, its measured step."""

    name: str
    passed: bool
    failure: str | None = None
    seconds: float | None = None
    complete: bool = True  # False: stopped once past the best so far (seconds is a lower bound)


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def choose_fastest(rows: Sequence[Candidate], rounds: int = 1) -> tuple[str, str]:
    """The rule, as a pure function of rows in preference order: (name, reason).

    Among the rows that passed their gates, the smallest measured ``seconds`` (ties: the earlier
    row); a stopped row cannot win; without a measurement of every usable row, the first usable
    row. A row that failed its gates is never chosen. ``rounds`` only names, in the reason, how
    many timings each figure is the best of. Mirrors ``chooseBackend`` in
    static/js/gpu/backend.js.
    """
    usable = [r for r in rows if r.passed]
    if not usable:
        why = "; ".join(f"{r.name}: {r.failure}" for r in rows)
        raise ValueError(f"no backend passes its gates ({why})")
    if any(r.seconds is None for r in usable):
        first = usable[0].name
        return first, f"{first}: the first backend in preference order that passes its gates"
    complete = [r for r in usable if r.complete]
    if not complete:
        raise ValueError("every step measurement was stopped early: none to compare")
    best = min(complete, key=lambda r: r.seconds or 0.0)  # min() keeps the first of equals
    assert best.seconds is not None
    for r in usable:
        if not r.complete and (r.seconds or 0.0) < best.seconds:
            raise ValueError(
                f"{r.name}: stopped below the best: the cutoff must only stop the slower"
            )
    others = ", ".join(
        f"{r.name} {'>= ' if not r.complete else ''}{_ms(r.seconds or 0.0)}"
        for r in usable
        if r is not best
    )
    failed = ", ".join(r.name for r in rows if not r.passed)
    of = f" (best of {rounds})" if rounds > 1 else ""
    reason = f"{best.name}: {_ms(best.seconds)} per step{of}, the fastest of the backends that pass"
    reason += " their gates" + (f" ({others})" if others else "")
    reason += f"; failed their gates: {failed}" if failed else ""
    return best.name, reason


class _Cutoff(Exception):
    pass


class _Deadline:
    """``ops`` that stop the step (raise _Cutoff) once a product starts or ends past a deadline."""

    def __init__(self, ops: GemmOps, deadline: float) -> None:
        self.ops, self.deadline = ops, deadline
        self.name = ops.name

    def _check(self) -> None:
        if time.perf_counter() > self.deadline:
            raise _Cutoff

    def quantize(self, x: FloatArray, axis: int) -> tuple[FloatArray, IntArray, Int8Array | None]:
        return self.ops.quantize(x, axis)

    def qmatmul(
        self,
        a_q: FloatArray,
        a_e: IntArray,
        b_q: FloatArray,
        b_e: IntArray,
        *,
        a8: Int8Array | None = None,
        b8: Int8Array | None = None,
    ) -> FloatArray:
        self._check()
        out = self.ops.qmatmul(a_q, a_e, b_q, b_e, a8=a8, b8=b8)
        self._check()
        return out

    def grad_left(
        self,
        g: FloatArray,
        fold_e: IntArray,
        b_q: FloatArray,
        limbs: int = 2,
        *,
        b8: Int8Array | None = None,
    ) -> FloatArray:
        self._check()
        out = self.ops.grad_left(g, fold_e, b_q, limbs, b8=b8)
        self._check()
        return out

    def grad_right(
        self,
        a_q: FloatArray,
        fold_e: IntArray,
        g: FloatArray,
        limbs: int = 2,
        *,
        a8: Int8Array | None = None,
    ) -> FloatArray:
        self._check()
        out = self.ops.grad_right(a_q, fold_e, g, limbs, a8=a8)
        self._check()
        return out

    def grads(self, jobs: Sequence[Grad]) -> list[FloatArray]:
        self._check()
        out = self.ops.grads(jobs)
        self._check()
        return out

    def mlp(
        self,
        b_q: FloatArray,
        b_e: IntArray,
        w1: tuple[FloatArray, IntArray, Int8Array | None],
        w2: tuple[FloatArray, IntArray, Int8Array | None],
        *,
        b8: Int8Array | None = None,
    ) -> MlpOut:
        self._check()
        out = self.ops.mlp(b_q, b_e, w1, w2, b8=b8)
        self._check()
        return out

    def attention(
        self,
        q: QParts,
        kt: QParts,
        v: QParts,
        scale: np.float32,
        softmax: Callable[[FloatArray], FloatArray],
    ) -> AttnOut:
        self._check()
        out = self.ops.attention(q, kt, v, scale, softmax)
        self._check()
        return out

    def attention_qkv(
        self,
        a: QParts,
        wqkv: QParts,
        heads_of: HeadsOf,
        shape: tuple[int, int],
        scale: np.float32,
        softmax: Callable[[FloatArray], FloatArray],
    ) -> tuple[AttnOut, QParts, QParts, QParts]:
        self._check()
        out = self.ops.attention_qkv(a, wqkv, heads_of, shape, scale, softmax)
        self._check()
        return out

    def block_tail(
        self,
        o: QParts,
        wo: QParts,
        h: FloatArray,
        g: FloatArray,
        eps: np.float32,
        norm: Callable[[FloatArray], tuple[FloatArray, Any]],
        w1: QParts,
        w2: QParts,
    ) -> TailOut:
        self._check()
        out = self.ops.block_tail(o, wo, h, g, eps, norm, w1, w2)
        self._check()
        return out

    def forward_chain(self, plan: ForwardPlan) -> None:
        self._check()
        self.ops.forward_chain(plan)
        self._check()

    def backward_chain(self, plan: BackwardPlan) -> None:
        self._check()
        self.ops.backward_chain(plan)
        self._check()

    def settle(self) -> None:
        self.ops.settle()  # the step's time includes its audits' (gpu.live's background mode)


StepTimer = Callable[[Compute, float], tuple[float, bool]]


def step_timer(cfg: ModelConfig | None = None) -> StepTimer:
    """``time_step(compute, limit_s) -> (seconds, complete)``: one forward-backward of ``cfg``
    (default the tiny preset) with ``compute.ops``, stopped past ``limit_s``. Timing input only
    (a fixed token pattern), never part of the contract."""
    cfg = cfg or preset(TIMING_PRESET)
    params = init_params(cfg, 0)
    n = np.arange(cfg.batch * cfg.seq_len, dtype=np.int64)
    x = ((n * 7919 + 13) % cfg.vocab_size).reshape(cfg.batch, cfg.seq_len)
    y = ((n * 104729 + 7) % cfg.vocab_size).reshape(cfg.batch, cfg.seq_len)

    def time_step(compute: Compute, limit_s: float) -> tuple[float, bool]:
        t0 = time.perf_counter()
        try:
            gpt.forward_backward(params, cfg, x, y, _Deadline(compute.ops, t0 + limit_s))
        except _Cutoff:
            return time.perf_counter() - t0, False
        return time.perf_counter() - t0, True

    return time_step


def gated_gpu_backends() -> tuple[list[Backend], list[Demotion]]:
    """Every wgpu kernel of this machine that passes its gates and probe, in preference order,
    and the demotions of those that do not."""
    try:
        gpu = acquire()
    except GpuUnavailable as exc:
        return [], [Demotion(f"wgpu-{kind}", str(exc)) for kind in GPU_ORDER]
    usable: list[Backend] = []
    demotions: list[Demotion] = []
    for kind in GPU_ORDER:
        gemm, reason = evaluate_gpu(gpu, kind)
        if gemm is None:
            demotions.append(Demotion(f"wgpu-{kind}", reason or "unknown"))
        else:
            usable.append(Backend(gemm, gpu.adapter_name, list(demotions)))
    return usable, demotions


def gpu_compute(backend: Backend) -> Compute:
    return Compute(backend.name, training_ops(backend), lambda: step_probe(backend))


def gated_cpu_int8() -> tuple[list[Backend], list[Demotion]]:
    """The CPU int8 GEMM (cpu/int8.py) when onnxruntime is installed and it passes its gates and
    probe here; a demotion when installed but wrong (an AVX2 CPU saturates its pair sums);
    nothing when onnxruntime is absent (an optional dependency, not a failure)."""
    if not cpuint8.available():
        return [], []
    gemm, why = cpuint8.evaluate()
    if gemm is None:
        return [], [Demotion(cpuint8.NAME, why or "failed")]
    return [Backend(gemm, "CPU int8 dot-product units (onnxruntime MatMulInteger)")], []


def gated_cpu_madd() -> tuple[list[Backend], list[Demotion]]:
    """The 16-bit multiply-add GEMM (cpu/madd.py) when numba is installed and it passes its
    gates and probe here; a demotion when it does not; nothing without numba."""
    if not cpumadd.available():
        return [], []
    gemm, why = cpumadd.evaluate()
    if gemm is None:
        return [], [Demotion(cpumadd.NAME, why or "failed")]
    return [Backend(gemm, cpumadd.DEVICE)], []


def gated_cpu_backends() -> tuple[list[Backend], list[Demotion]]:
    """Every CPU backend that passes its gates and probe here (CPU_ORDER), and the demotions."""
    int8, int8_refused = gated_cpu_int8()
    madd, madd_refused = gated_cpu_madd()
    return int8 + madd, int8_refused + madd_refused


def choose(
    choice: str,
    select: Callable[[], Backend] = select_backend,
    *,
    gated: Callable[[], tuple[list[Backend], list[Demotion]]] = gated_gpu_backends,
    gated_cpu: Callable[[], tuple[list[Backend], list[Demotion]]] = gated_cpu_backends,
    time_step: StepTimer | None = None,
    rounds: int = 3,
) -> Choice:
    """The backend for ``--backend choice``; raises BackendUnavailable for an impossible wgpu.

    ``select`` serves ``wgpu`` (the first gated kernel), ``gated`` and ``time_step`` serve
    ``auto`` (tests pass their own).
    """
    if choice not in CHOICES:
        raise ValueError(f"--backend must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "numpy":
        return Choice(Compute(), "numpy: requested with --backend numpy")
    if choice in CPU_ORDER:
        every, every_refused = gated_cpu()
        cpu = [b for b in every if b.name == choice]
        refused = [d for d in every_refused if d.name == choice]
        if not cpu:
            missing = "onnxruntime" if choice == cpuint8.NAME else "numba"
            why = refused[0].reason if refused else f"{missing} is not installed"
            hint = (
                "pip install 'daisychain[int8]' on a CPU with int8 dot-product units "
                "(AVX-512 VNNI, AVX-VNNI), or run with --backend auto, cpu-madd or numpy"
                if choice == cpuint8.NAME
                else "pip install 'daisychain[int8]' (numba), or run with --backend auto or numpy"
            )
            raise BackendUnavailable(
                f"--backend {choice}: the CPU GEMM {choice} is not usable here ({why})", hint
            )
        return Choice(gpu_compute(cpu[0]), f"{choice}: requested with --backend {choice}")
    if choice == "wgpu":
        backend = select()
        if backend.name == "numpy":
            why = "; ".join(f"{d.name}: {d.reason}" for d in backend.demotions) or "no GPU kernel"
            raise BackendUnavailable(
                f"--backend wgpu: no GPU kernel passed its gates on this machine ({why})",
                "run with --backend auto or numpy; `daisychain selftest` shows each kernel",
            )
        where = f"{backend.name} on {backend.adapter} ({chains_in_use(backend.gemm)})"
        return Choice(gpu_compute(backend), f"{where}: requested with --backend wgpu")
    usable, demotions = gated()
    cpu, cpu_refused = gated_cpu()
    usable, demotions = usable + cpu, demotions + cpu_refused
    computes = [gpu_compute(b) for b in usable] + [Compute()]
    timer = time_step or step_timer()
    rows = [Candidate(d.name, False, d.reason) for d in demotions]
    rows += measure(computes, timer, rounds)
    names = [*(f"wgpu-{k}" for k in GPU_ORDER), *CPU_ORDER, "numpy"]
    order = {name: i for i, name in enumerate(names)}
    rows.sort(key=lambda r: order.get(r.name, len(order)))
    name, reason = choose_fastest(rows, rounds)
    gemms = {b.name: b.gemm for b in usable}
    if name in gemms:  # a GPU kernel: which of its chains training uses
        reason = f"{reason} ({chains_in_use(gemms[name])})"
    chosen = next(c for c in computes if c.name == name)
    return Choice(chosen, reason, tuple(computes))


def measure(computes: Sequence[Compute], timer: StepTimer, rounds: int = 3) -> list[Candidate]:
    """One row per compute: the fastest of ``rounds`` interleaved timings of each.

    Why rounds, and interleaved: a machine that is busy for a moment (two browsers loading
    beside this peer) slows whichever candidate runs during that moment; one measurement then
    picks the wrong backend for a whole run. Each round times every candidate once, in order,
    so a burst of load spans candidates rather than all of one; a candidate keeps its fastest
    complete time (load only ever adds time). The cutoff stops a timing once it has run longer
    than the best complete time of any candidate so far: it cannot win that round, and an
    emulated GPU ten times slower costs one best time per round, not its own. A candidate with
    no complete timing keeps its longest stopped one (a lower bound, ``complete=False``).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, not {rounds}")
    done: dict[str, float] = {}
    stopped: dict[str, float] = {}
    best = float("inf")
    for _ in range(rounds):
        for compute in computes:
            seconds, complete = timer(compute, best)
            if complete:
                done[compute.name] = min(done.get(compute.name, seconds), seconds)
                best = min(best, seconds)
            else:
                stopped[compute.name] = max(stopped.get(compute.name, seconds), seconds)
    return [
        Candidate(c.name, True, None, done[c.name], True)
        if c.name in done
        else Candidate(c.name, True, None, stopped[c.name], False)
        for c in computes
    ]
