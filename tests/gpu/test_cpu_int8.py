"""The CPU int8 GEMM (``daisychain.cpu.int8``, onnxruntime's MatMulInteger on the CPU's int8
dot-product units): gated like a GPU kernel, because on a CPU without VNNI its u8 x s8 kernel
saturates int16 pair sums and returns wrong products.

Whichever CPU runs these tests, each asserts something real: where the gates pass, the products
are exact on full-range operands and a training run keeps numpy's bits; where they refuse, the
refusal is true (the raw product is wrong on a full-range input). Planted one-unit bugs show the
gates, the probe and the live audit firing. Skips only without onnxruntime (the test extras
install it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from daisychain import training
from daisychain.cpu import int8 as cpuint8
from daisychain.gpu.backend import Backend, Demotion
from daisychain.gpu.gates import IntGemm
from daisychain.gpu.live import KernelAuditError, training_ops
from daisychain.gpu.probe import PROBE_SHAPE
from daisychain.model import gpt
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from daisychain.p2p.options import Compute
from daisychain.peer.backend import BackendUnavailable, StepTimer, choose
from gpu_plant import live_products

pytest.importorskip("onnxruntime", reason="the CPU int8 GEMM needs onnxruntime (test extras)")

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


def _full_range(m: int, k: int, n: int, seed: int) -> tuple[Int8Array, Int8Array]:
    rng = np.random.default_rng(seed)  # test input only
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    a[0, :] = -128  # the corner the offset trick and the pair sums meet hardest
    b[:, -1] = -128
    return a, b


def _exact(a: Int8Array, b: Int8Array) -> Int32Array:
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


Gated = tuple[cpuint8.CpuInt8Gemm, IntGemm | None, str | None]  # (raw, gated or None, why)


@pytest.fixture(scope="module")
def gated() -> Gated:
    raw = cpuint8.CpuInt8Gemm()
    gemm, why = cpuint8.evaluate(raw)
    return raw, gemm, why


def test_the_gates_tell_the_truth_about_this_cpu(gated: Gated) -> None:
    raw, gemm, why = gated
    shapes = [(64, 256, 48, 1), (33, 1024, 17, 2), (128, 2048, 64, 3)]  # K up to the vocab
    wrong = [s for s in shapes if not np.array_equal(raw.matmul_int(*_full_range(*s)),
                                                     _exact(*_full_range(*s)))]  # fmt: skip
    if gemm is not None:
        assert why is None and wrong == [], f"gated, yet wrong on full-range {wrong}"
    else:
        # Refused: say why, and be right that it is wrong (an AVX2 CPU's saturation).
        assert why is not None and "failed gate" in why, why
        assert wrong, f"refused ({why}) but exact on every full-range shape tried"


def test_a_training_run_keeps_numpys_bits(gated: Gated) -> None:
    _, gemm, why = gated
    if gemm is None:
        pytest.skip(f"the gates refused the CPU int8 GEMM here (asserted above): {why}")
    cfg = preset("tiny")
    runs = []
    cpu = Backend(gemm, "cpu")
    # numpy; each product audited before it returns; audited behind the step (as trained)
    for ops in (None, training_ops(cpu, background=False), training_ops(cpu, background=True)):
        state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
        if ops is not None:
            state.ops = ops
        tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
        hashes = []
        for _ in range(3):
            x, y = training.next_batch(state, tokens)
            hashes.append(training.train_step(state, x, y).hash)
        runs.append(hashes)
    assert runs[1] == runs[0], "cpu-int8 forked from numpy"
    assert runs[2] == runs[0], "cpu-int8 with its audits behind the step forked from numpy"


@dataclass
class _OneCellOff:
    """The real CPU GEMM, wrong by one unit in one cell of products of one shape (None: any)."""

    inner: cpuint8.CpuInt8Gemm
    shape: tuple[int | None, int | None, int | None]
    cell: tuple[int, int] = (0, -1)
    name: str = cpuint8.NAME
    first_slice: bool = False  # plant the first slice of a batched call instead of the last

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        return self.matmul_int_batched(a, b)

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array:
        """Batched products too (training sends them in one call): the cell of the LAST
        slice is planted, so an audit that checked only the first slice would miss it."""
        out = self.inner.matmul_int_batched(a, b)
        got = (*a.shape[-2:], b.shape[-1])
        if all(want in (None, have) for want, have in zip(self.shape, got, strict=True)):
            lead = (0 if self.first_slice else d - 1 for d in out.shape[:-2])
            out[(*lead, *self.cell)] += 1
        return out

    qmatmul = cpuint8.CpuInt8Gemm.qmatmul


@dataclass
class _OffAtCall:
    """The real CPU GEMM, wrong by one unit in one interior cell of the last slice of its
    ``call``-th batched product (0-based), noting which gradients had left the step by then."""

    inner: cpuint8.CpuInt8Gemm
    call: int
    sent: list[str]
    sent_by_then: list[str] | None = None
    calls: int = 0
    name: str = cpuint8.NAME

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        return self.inner.matmul_int(a, b)

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array:
        out = self.inner.matmul_int_batched(a, b)
        if self.calls == self.call:
            out[(*(d - 1 for d in out.shape[:-2]), 5, 3)] += 1
            self.sent_by_then = list(self.sent)
        self.calls += 1
        return out


# The 28th batched product of a ``tiny`` step: layer 0's w2 weight gradient, in the middle of
# the backward (layer 1's gradients have left by then, layer 0's are still to come).
MID_BACKWARD_CALL = 27


def test_a_wrong_product_mid_step_stops_it_before_a_gradient_from_it_leaves(
    gated: Gated,
) -> None:
    """Audits behind the step: the product comes back unproven and the step goes on, but the
    step settles before each early gradient, so the gradient computed from the wrong product
    (and every one after it) never reaches ``on_grad``, and the step raises."""
    raw, gemm, why = gated
    if gemm is None:
        pytest.skip(f"the gates refused the CPU int8 GEMM here: {why}")
    cfg = preset("tiny")
    sent: list[str] = []
    planted = _OffAtCall(raw, MID_BACKWARD_CALL, sent)
    ops = training_ops(Backend(planted, "cpu"), background=True)
    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    x, y = training.next_batch(state, tokens)
    with pytest.raises(KernelAuditError, match="live audit failed"):
        gpt.forward_backward(state.params, cfg, x, y, ops, on_grad=lambda n, _: sent.append(n))
    assert planted.sent_by_then is not None, "the planted product was never computed"
    assert 0 < len(planted.sent_by_then) < len(state.params), "the plant must be mid-backward"
    left = sent[len(planted.sent_by_then) :]
    assert sent == planted.sent_by_then, f"left after the wrong product: {left}"


def test_a_one_unit_bug_is_refused_by_the_gates(gated: Gated) -> None:
    raw = gated[0]
    gemm, why = cpuint8.evaluate(_OneCellOff(raw, (None, None, None)))
    assert gemm is None and why is not None and "failed gate" in why, why
    assert "expected" in why and "got" in why


def test_a_bug_only_at_the_probe_shape_is_refused_by_the_probe(gated: Gated) -> None:
    raw, gemm, why = gated
    if gemm is None:
        pytest.skip(f"the gates refused the CPU int8 GEMM here: {why}")
    gemm, why = cpuint8.evaluate(_OneCellOff(raw, PROBE_SHAPE))
    assert gemm is None and why is not None and "kernel probe hash" in why, why


def test_a_bug_only_at_a_live_training_shape_is_caught_by_the_audit(gated: Gated) -> None:
    raw, gemm, why = gated
    if gemm is None:
        pytest.skip(f"the gates refused the CPU int8 GEMM here: {why}")
    cfg = preset("tiny")
    live = live_products("tiny")[0].shape  # the first product of a real training step
    planted = _OneCellOff(raw, live)
    assert cpuint8.evaluate(planted)[0] is not None, "the plant must slip past the gates"
    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    state.ops = training_ops(Backend(planted, "cpu"))
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    x, y = training.next_batch(state, tokens)
    with pytest.raises(KernelAuditError, match="live audit failed"):
        training.train_step(state, x, y)


def test_k_beyond_the_offset_sums_is_refused(gated: Gated) -> None:
    k = cpuint8.MAX_K + 1
    with pytest.raises(ValueError, match="int32 sums could overflow"):
        gated[0].matmul_int(np.zeros((1, k), np.int8), np.zeros((k, 1), np.int8))
    with pytest.raises(ValueError, match=r"\(M, K\) @ \(K, N\)"):
        gated[0].matmul_int(np.zeros((2, 3), np.int8), np.zeros((4, 1), np.int8))
    with pytest.raises(TypeError, match="int8 operands, got float32"):  # bytes of floats
        gated[0].matmul_int_batched(np.zeros((2, 3), np.float32), np.zeros((3, 1), np.int8))


def test_backend_cpu_int8_refused_here_says_what_to_do() -> None:
    refused = Demotion(cpuint8.NAME, "cpu-int8 failed gate 'full-range'")
    with pytest.raises(BackendUnavailable) as err:
        choose(cpuint8.NAME, gated_cpu=lambda: ([], [refused]))
    assert "failed gate" in err.value.message and "--backend auto" in err.value.hint
    with pytest.raises(BackendUnavailable, match="onnxruntime is not installed"):
        choose(cpuint8.NAME, gated_cpu=lambda: ([], []))


def test_auto_measures_cpu_int8_beside_numpy_and_keeps_the_faster(gated: Gated) -> None:
    _, gemm, why = gated
    if gemm is None:
        pytest.skip(f"the gates refused the CPU int8 GEMM here: {why}")
    cpu = [Backend(gemm, "cpu")]
    asked: list[str] = []

    def timer(times: dict[str, float]) -> StepTimer:
        def time_step(compute: Compute, limit_s: float) -> tuple[float, bool]:
            asked.append(compute.name)
            t = times[compute.name]
            return (t, True) if t <= limit_s else (limit_s, False)

        return time_step

    def no_gpu() -> tuple[list[Backend], list[Demotion]]:
        return [], []

    fast = choose("auto", gated=no_gpu, gated_cpu=lambda: (cpu, []),
                  time_step=timer({"cpu-int8": 0.01, "numpy": 0.05}))  # fmt: skip
    assert fast.compute.name == cpuint8.NAME and asked[:2] == [cpuint8.NAME, "numpy"]
    assert [c.name for c in fast.candidates] == [cpuint8.NAME, "numpy"]
    slow = choose("auto", gated=no_gpu, gated_cpu=lambda: (cpu, []),
                  time_step=timer({"cpu-int8": 0.09, "numpy": 0.05}))  # fmt: skip
    assert slow.compute.name == "numpy"


def test_a_bug_in_one_head_of_a_batched_product_is_caught_by_the_audit(gated: Gated) -> None:
    raw, gemm, why = gated
    if gemm is None:
        pytest.skip(f"the gates refused the CPU int8 GEMM here: {why}")
    cfg = preset("tiny")
    head = cfg.width // cfg.heads
    scores = (cfg.seq_len, head, cfg.seq_len)  # q @ k^T, one slice per (sequence, head)
    planted = _OneCellOff(raw, scores, cell=(5, 3))  # an interior cell, no danger line
    assert cpuint8.evaluate(planted)[0] is not None, "the plant must slip past the gates"
    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    state.ops = training_ops(Backend(planted, "cpu"))
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    x, y = training.next_batch(state, tokens)
    last = f"slice ({cfg.batch - 1}, {cfg.heads - 1})"
    with pytest.raises(KernelAuditError, match=re.escape(last)):
        training.train_step(state, x, y)


def test_a_bug_in_the_high_limb_of_a_gradient_product_is_caught_by_the_audit(
    gated: Gated,
) -> None:
    """The limbs of a gradient operand go to the GEMM as one batched call (``IntGemmOps``):
    a one-unit error in an interior cell of the most significant limb's slice (slice 0 of the
    logits input gradient's three limbs, a shape only the backward uses) stops the step."""
    raw, gemm, why = gated
    if gemm is None:
        pytest.skip(f"the gates refused the CPU int8 GEMM here: {why}")
    cfg = preset("tiny")
    n = cfg.batch * cfg.seq_len
    dlogits_at_wte = (n, cfg.vocab_size, cfg.width)  # (N, V) @ (V, C)
    planted = _OneCellOff(raw, dlogits_at_wte, cell=(5, 3), first_slice=True)
    assert cpuint8.evaluate(planted)[0] is not None, "the plant must slip past the gates"
    state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
    state.ops = training_ops(Backend(planted, "cpu"))
    tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
    x, y = training.next_batch(state, tokens)
    with pytest.raises(KernelAuditError, match=re.escape("slice (0,)")):
        training.train_step(state, x, y)
