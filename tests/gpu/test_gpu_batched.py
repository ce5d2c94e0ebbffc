"""Batched products on a real wgpu device (lavapipe on CI): ``GpuGemm.matmul_int_batched``.

Every slice of a (..., M, K) @ (..., K, N) product goes in one submit and one readback
(docs/KERNELS.md, "Batched products"). Checked here: exact int32 results against int64 numpy on
odd, broadcast and empty shapes; the device traffic, counted (``gpu/counters.py``; counts are
deterministic, so they are compared exactly, never timed); the batched gate; and the planted bug
it exists for, one cell of one slice wrong, refused by the gates and caught by the live audit.

Skipped, with the reason, only when no wgpu adapter exists at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pytest

from daisychain import training
from daisychain.bench.rig.steps import token_stream
from daisychain.gpu.backend import Backend, evaluate_gpu, select_backend
from daisychain.gpu.counters import ROUND_TRIPS, Counts
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gates import batched_cases, gemm_cases, qmatmul_cases, run_gemm_gates
from daisychain.gpu.gemm import MAX_K, GemmKind, GpuGemm, PerSliceGemm
from daisychain.gpu.live import KernelAuditError, training_ops
from daisychain.gpu.probe import probe_hash, reference_probe_hash
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from gpu_plant import OneCellPlant

KINDS: list[GemmKind] = ["dp4a", "lut"]
Int8Array = npt.NDArray[np.int8]


def _ints(seed: int, shape: tuple[int, ...]) -> Int8Array:
    return np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)


def _exact(a: Int8Array, b: Int8Array) -> npt.NDArray[np.int32]:
    return np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)


def _traffic(run: Callable[[], object]) -> Counts:
    """What ``run()`` asked of the device."""
    before = ROUND_TRIPS.snapshot()
    run()
    return ROUND_TRIPS.snapshot() - before


# (a shape, b shape): equal leading axes, a 2-D operand against a batch (either side), leading
# axes of length 1 that broadcast, odd M/N/K, tile edges, K past 1024, K = 1.
SHAPES = [
    ((3, 5, 7), (3, 7, 9)),
    ((2, 3, 33, 17), (17, 35)),
    ((5, 6), (4, 6, 3)),
    ((4, 1, 6, 5), (3, 5, 2)),
    ((2, 31, 1025), (2, 1025, 65)),
    ((6, 1, 1), (6, 1, 1)),
    ((1, 4, 4, 4), (1, 4, 4, 4)),
]


@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES, ids=[f"{a}@{b}" for a, b in SHAPES])
def test_batched_is_exact_against_int64(
    gemm: GpuGemm, a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> None:
    a, b = _ints(1, a_shape), _ints(2, b_shape)
    with gemm.pool.poisoned():  # a slice the kernel skipped would read 0xDEADBEEF, not 0
        got = gemm.matmul_int_batched(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _exact(a, b))


def test_a_stride_zero_operand_is_exact_and_uploaded_once(gemm: GpuGemm) -> None:
    # The live products hand one matrix to every limb as np.broadcast_to (stride 0).
    a = _ints(3, (4, 9, 13))
    b_one = _ints(4, (13, 11))
    b_view = np.broadcast_to(b_one, (4, 13, 11))
    b_copies = np.ascontiguousarray(b_view)
    got: list[npt.NDArray[np.int32]] = []
    shared = _traffic(lambda: got.append(gemm.matmul_int_batched(a, b_view)))
    copied = _traffic(lambda: got.append(gemm.matmul_int_batched(a, b_copies)))
    np.testing.assert_array_equal(got[0], _exact(a, b_copies))
    np.testing.assert_array_equal(got[1], got[0])
    # Each B slice of this shape takes one 256-byte region: three fewer go up.
    assert copied.bytes_up - shared.bytes_up == 3 * 256


def test_empty_products_are_zeros_without_a_round_trip(gemm: GpuGemm) -> None:
    for a_shape, b_shape in [((0, 3, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 5)), ((2, 3, 0), (0, 5))]:
        a, b = np.zeros(a_shape, np.int8), np.zeros(b_shape, np.int8)
        out: list[npt.NDArray[np.int32]] = []
        traffic = _traffic(lambda a=a, b=b, out=out: out.append(gemm.matmul_int_batched(a, b)))
        assert out[0].shape == _exact(a, b).shape and not out[0].any()
        assert traffic == Counts()


def test_a_batch_is_one_submit_and_one_readback(gemm: GpuGemm) -> None:
    a, b = _ints(5, (2, 3, 20, 30)), _ints(6, (2, 3, 30, 10))
    batched = _traffic(lambda: gemm.matmul_int_batched(a, b))
    assert (batched.submits, batched.readbacks, batched.dispatches) == (1, 1, 6)
    assert batched.uploads == 3  # params, A, B: every slice's in one buffer each
    per_slice = _traffic(lambda: PerSliceGemm(gemm).qmatmul(
        a.astype(np.float32), np.zeros((2, 3, 20, 1), np.int32),
        b.astype(np.float32), np.zeros((2, 3, 1, 10), np.int32)))  # fmt: skip
    assert (per_slice.submits, per_slice.readbacks, per_slice.dispatches) == (6, 6, 6)


def test_a_batch_larger_than_a_round_goes_in_several(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    gemm.round_bytes = 1024  # four 256-byte regions per buffer and submit
    a, b = _ints(7, (10, 8, 8)), _ints(8, (10, 8, 8))
    out: list[npt.NDArray[np.int32]] = []
    traffic = _traffic(lambda: out.append(gemm.matmul_int_batched(a, b)))
    np.testing.assert_array_equal(out[0], _exact(a, b))
    assert (traffic.submits, traffic.readbacks, traffic.dispatches) == (3, 3, 10)  # 4 + 4 + 2


def test_bad_operands_are_refused_with_the_reason(gemm: GpuGemm) -> None:
    i8 = np.zeros((2, 3, 4), np.int8)
    with pytest.raises(TypeError, match="int8 operands, got float32"):
        gemm.matmul_int_batched(i8.astype(np.float32), np.zeros((2, 4, 5), np.int8))
    with pytest.raises(ValueError, match=r"do not form \(\.\.\., M, K\) @ \(\.\.\., K, N\)"):
        gemm.matmul_int_batched(i8, np.zeros((2, 3, 5), np.int8))
    with pytest.raises(ValueError, match=r"leading axes of .* do not broadcast"):
        gemm.matmul_int_batched(i8, np.zeros((3, 4, 5), np.int8))
    k = MAX_K + 1
    with pytest.raises(ValueError, match="overflow"):
        gemm.matmul_int_batched(np.zeros((1, 1, k), np.int8), np.zeros((1, k, 1), np.int8))


def test_the_counters_refuse_a_name_they_do_not_have() -> None:
    # A misspelt counter would silently count nothing; it raises instead, naming the counters.
    with pytest.raises(KeyError, match=r"no counter 'readback'.*'readbacks'"):
        ROUND_TRIPS.add(readback=1)
    before = ROUND_TRIPS.snapshot()
    ROUND_TRIPS.add(readbacks=2, bytes_down=8)
    assert ROUND_TRIPS.snapshot() - before == Counts(readbacks=2, bytes_down=8)


# --- the gate and the plant -------------------------------------------------------------------


@dataclass(frozen=True)
class SlicePlant(OneCellPlant):
    """``OneCellPlant`` that fires only in the slice numbered ``slice_index`` of a batched
    product (``params.slice_index``; a 2-D product is slice 0, so slice 1 is never there)."""

    slice_index: int = 1

    def condition(self) -> str:
        return f"{super().condition()} && params.slice_index == {self.slice_index}u"


# Cell (2, 3) of slice 1, any shape: batched gate case 'batched 3 x 5x7x9' holds it (its slices
# are 5 x 9), and so does every batched product of a training step.
PLANT = SlicePlant(2, 3, 1)
FIRST_BATCHED = batched_cases()[0][0]


@pytest.mark.parametrize("kind", KINDS)
def test_the_gate_refuses_one_cell_of_one_slice(gpu: GpuDevice, kind: GemmKind) -> None:
    planted = GpuGemm(gpu, kind, source=PLANT.wgsl(kind))
    report = run_gemm_gates(planted, planted.pool, planted.tile)
    failure = report.failure
    assert failure is not None, "one unit in slice 1 went unseen by the gates"
    # Every 2-D case passed, and the probe (a 2-D product) too: only the batched gate sees it.
    assert report.cases_passed == len(gemm_cases(planted.tile)) + len(qmatmul_cases())
    assert probe_hash(planted.matmul_int) == reference_probe_hash()
    assert failure.case == FIRST_BATCHED
    assert failure.index == (1, PLANT.row, PLANT.col)
    assert int(failure.got) - int(failure.expected) == PLANT.delta
    usable, why = evaluate_gpu(gpu, kind, PLANT.wgsl(kind))
    assert usable is None and why is not None
    assert f"failed gate {FIRST_BATCHED!r}" in why and "first mismatch at (1, 2, 3)" in why


def test_a_kernel_wrong_in_one_slice_is_demoted(gpu: GpuDevice) -> None:
    backend = select_backend(sources={"dp4a": PLANT.wgsl("dp4a")})
    assert backend.name == "wgpu-lut"
    [demotion] = backend.demotions
    assert demotion.name == "wgpu-dp4a" and f"failed gate {FIRST_BATCHED!r}" in demotion.reason


def test_slices_keep_their_numbers_across_rounds(gpu: GpuDevice) -> None:
    # A plant names a slice by its number in the whole product, also when the batch is split
    # into several submits: slice 5 is the second slice of the second round here.
    planted = GpuGemm(gpu, "dp4a", source=SlicePlant(2, 3, 1, slice_index=5).wgsl("dp4a"))
    planted.round_bytes = 1024  # four slices per round
    a, b = _ints(9, (10, 8, 8)), _ints(10, (10, 8, 8))
    wrong = np.argwhere(planted.matmul_int_batched(a, b) != _exact(a, b))
    assert wrong.tolist() == [[5, 2, 3]]


def test_the_live_audit_catches_one_cell_of_one_slice(gpu: GpuDevice) -> None:
    # Had the kernel been used anyway (the gates are at start; a device can drift later), the
    # audit of the first batched product of the step stops it.
    planted = GpuGemm(gpu, "dp4a", source=PLANT.wgsl("dp4a"))
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(), 1)
    state.ops = training_ops(Backend(planted, gpu.adapter_name))
    x, y = training.next_batch(state, token_stream(cfg.vocab_size))
    with pytest.raises(KernelAuditError, match=r"live audit failed .*, slice \("):
        training.train_step(state, x, y)


def test_the_honest_kernel_passes_the_same_step(gpu: GpuDevice) -> None:
    # The control for the test above: the same step, the real kernel, no audit failure.
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(), 1)
    state.ops = training_ops(Backend(GpuGemm(gpu, "dp4a"), gpu.adapter_name))
    x, y = training.next_batch(state, token_stream(cfg.vocab_size))
    training.train_step(state, x, y)


# --- several products in one submit: matmul_int_many (a backward pass's pairs) ----------------


def test_products_of_different_shapes_share_one_submit_and_one_readback(gemm: GpuGemm) -> None:
    pairs = [(_ints(20 + i, a), _ints(40 + i, b)) for i, (a, b) in enumerate(SHAPES)]
    pairs.append((np.zeros((2, 0, 4), np.int8), np.zeros((2, 4, 5), np.int8)))  # empty: zeros
    with gemm.pool.poisoned():  # a region no dispatch wrote would read 0xDEADBEEF, not 0
        outs = gemm.matmul_int_many(pairs)
    for (a, b), out in zip(pairs, outs, strict=True):
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, _exact(a, b))
    traffic = _traffic(lambda: gemm.matmul_int_many(pairs))
    slices = sum(int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))) for a, b in pairs)
    assert (traffic.submits, traffic.readbacks, traffic.dispatches) == (1, 1, slices - 2)
    assert traffic.uploads == 3  # params, A, B: every product's in one buffer each


def test_products_larger_than_a_round_share_rounds_and_stay_exact(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    gemm.round_bytes = 1024  # four 256-byte regions per buffer and submit
    pairs = [
        (_ints(11, (3, 8, 8)), _ints(12, (3, 8, 8))),
        (_ints(13, (8, 8)), _ints(14, (5, 8, 8))),  # A broadcast over 5 slices
        (_ints(15, (2, 8, 8)), _ints(16, (8, 8))),
    ]
    outs: list[npt.NDArray[np.int32]] = []
    traffic = _traffic(lambda: outs.extend(gemm.matmul_int_many(pairs)))
    for (a, b), out in zip(pairs, outs, strict=True):
        np.testing.assert_array_equal(out, _exact(a, b))
    # 3 + 1 slices, then 4, then 2: a submit takes slices of several products
    assert (traffic.submits, traffic.readbacks, traffic.dispatches) == (3, 3, 10)


def test_each_product_numbers_its_own_slices_in_a_shared_submit(gpu: GpuDevice) -> None:
    planted = GpuGemm(gpu, "dp4a", source=PLANT.wgsl("dp4a"))  # slice 1, cell (2, 3)
    pairs = [
        (_ints(17, (3, 5, 7)), _ints(18, (3, 7, 9))),
        (_ints(19, (2, 6, 4)), _ints(20, (2, 4, 6))),
    ]
    outs = planted.matmul_int_many(pairs)
    wrong = [np.argwhere(o != _exact(a, b)).tolist() for (a, b), o in zip(pairs, outs, strict=True)]
    assert wrong == [[[1, 2, 3]], [[1, 2, 3]]]


class _LastProductOff(GpuGemm):
    """A host-side bug only a shared submit has: the last of several products one unit off."""

    def matmul_int_many(
        self, products: Sequence[tuple[Int8Array, Int8Array]]
    ) -> list[npt.NDArray[np.int32]]:
        outs = super().matmul_int_many(products)
        if len(outs) > 1:
            outs[-1] = outs[-1].copy()
            outs[-1][(0,) * outs[-1].ndim] += 1
        return outs


def test_the_gate_refuses_products_that_go_wrong_only_when_they_share_a_submit(
    gpu: GpuDevice,
) -> None:
    planted = _LastProductOff(gpu, "dp4a")
    report = run_gemm_gates(planted, planted.pool, planted.tile)
    failure = report.failure
    assert failure is not None, "a wrong shared submit went unseen by the gates"
    tile = planted.tile
    assert report.cases_passed == len(gemm_cases(tile)) + len(qmatmul_cases()) + len(
        batched_cases(tile)
    )  # every product alone is right
    assert failure.case == f"together: {batched_cases(tile)[-1][0]}"
    assert int(failure.got) - int(failure.expected) == 1


def test_the_live_audit_catches_one_cell_of_the_second_product_of_a_pair(gpu: GpuDevice) -> None:
    # The logits' input gradient, dy (N, V) @ W^T (V, C), is the second product of the last
    # layer's pair (its weight gradient goes first) and the only product of that shape.
    cfg = preset("tiny")
    n = cfg.batch * cfg.seq_len
    plant = OneCellPlant(1, 2, 1, m=n, k=cfg.vocab_size, n=cfg.width)
    planted = GpuGemm(gpu, "dp4a", source=plant.wgsl("dp4a"))
    state = training.init(cfg, AdamWConfig(), 1)
    state.ops = training_ops(Backend(planted, gpu.adapter_name))
    x, y = training.next_batch(state, token_stream(cfg.vocab_size))
    shape = rf"shape \(3, {n}, {cfg.vocab_size}\) @ \(3, {cfg.vocab_size}, {cfg.width}\)"
    with pytest.raises(KernelAuditError, match=rf"live audit failed at {shape}"):
        training.train_step(state, x, y)
