"""The 16-bit multiply-add GEMM (``daisychain.cpu.madd``, ``cpu-madd``): exact on full-range
operands, the reference's bits through a training run, and gated like every backend: planted
loops with the bugs such a kernel can have (a saturating pair sum, as onnxruntime's kernel has
without VNNI; a lost row; float32 accumulation in another order, which only the gates' long
sums of odd products see) are each refused by the gates, and a lost row shows the gates' poison.
Skips only without numba (the test extras install it).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from daisychain import training
from daisychain.gpu.backend import Backend, Demotion
from daisychain.gpu.gates import gemm_cases
from daisychain.gpu.live import training_ops
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from daisychain.p2p.options import Compute
from daisychain.peer.backend import BackendUnavailable, choose

pytest.importorskip("numba", reason="cpu-madd's loop needs numba (test extras)")

from numba import njit

from daisychain.cpu import madd as cpumadd

Int8Array = npt.NDArray[np.int8]


@njit(cache=False, nogil=True)
def _saturating_pairs(a, bt, out, r0, r1):  # type: ignore[no-untyped-def]
    """Each pair of products summed in a saturating int16 (``vpmaddubsw``'s flaw)."""
    m, kk = a.shape[1], a.shape[2]
    for t in range(r0, r1):
        b, i = t // m, t % m
        for j in range(bt.shape[1]):
            s = np.int32(0)
            for k in range(0, kk, 2):
                p = np.int32(a[b, i, k]) * np.int32(bt[b, j, k])
                if k + 1 < kk:
                    p += np.int32(a[b, i, k + 1]) * np.int32(bt[b, j, k + 1])
                s += min(max(p, -32768), 32767)
            out[b, i, j] = s


@njit(cache=False, nogil=True)
def _lost_row(a, bt, out, r0, r1):  # type: ignore[no-untyped-def]
    """The last row of every call never written (an off-by-one in the row split)."""
    m, kk = a.shape[1], a.shape[2]
    for t in range(r0, r1 - 1):
        b, i = t // m, t % m
        for j in range(bt.shape[1]):
            s = np.int32(0)
            for k in range(kk):
                s += np.int32(a[b, i, k]) * np.int32(bt[b, j, k])
            out[b, i, j] = s


@njit(cache=False, nogil=True)
def _float_from_the_end(a, bt, out, r0, r1):  # type: ignore[no-untyped-def]
    """Summed in float32 from the last k down: exact while every partial sum is below 2^24,
    rounded past it, so the order matters exactly where the sums are large."""
    m, kk = a.shape[1], a.shape[2]
    for t in range(r0, r1):
        b, i = t // m, t % m
        for j in range(bt.shape[1]):
            s = np.float32(0)
            for k in range(kk - 1, -1, -1):
                s += np.float32(a[b, i, k]) * np.float32(bt[b, j, k])
            out[b, i, j] = np.int32(s)


def _full_range(m: int, k: int, n: int, seed: int) -> tuple[Int8Array, Int8Array]:
    rng = np.random.default_rng(seed)  # test input only
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    a[0, :] = -128  # the largest products, in the first row and the last column
    b[:, -1] = -128
    return a, b


@pytest.fixture(scope="module")
def gemm() -> cpumadd.MaddGemm:
    return cpumadd.MaddGemm()


def test_the_gates_pass_and_the_products_are_exact_on_full_range_operands(
    gemm: cpumadd.MaddGemm,
) -> None:
    gated, why = cpumadd.evaluate(gemm)
    assert gated is gemm and why is None, why
    shapes = [(64, 256, 48, 1), (33, 1024, 17, 2), (128, 2048, 64, 3), (7, 16385, 5, 4)]
    for m, k, n, seed in shapes:
        a, b = _full_range(m, k, n, seed)
        want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
        assert np.array_equal(gemm.matmul_int(a, b), want), (m, k, n)
    a, b = _full_range(96, 300, 40, 5)  # enough work to be split between threads
    batched = gemm.matmul_int_batched(np.stack([a, a[::-1].copy()]), np.stack([b, b]))
    assert np.array_equal(batched[1], gemm.matmul_int(a[::-1].copy(), b))


@pytest.mark.parametrize(
    ("kernel", "what", "gate"),
    [
        (_saturating_pairs, "a saturating pair sum", "all -128"),  # 2 * 16384 > int16
        (_lost_row, "a lost row", "1x1x1"),
        # exact while every partial sum is below 2^24: only the long sums of odd products see it
        (_float_from_the_end, "float32 accumulation in another order", "all 127, K=4099"),
    ],
)
def test_each_planted_loop_is_refused_by_the_gates(kernel: object, what: str, gate: str) -> None:
    planted = cpumadd.MaddGemm(kernel=kernel, threads=1)  # type: ignore[arg-type]
    gemm, why = cpumadd.evaluate(planted)
    assert gemm is None and why is not None, f"{what} passed the gates"
    assert f"failed gate {gate!r}" in why and "expected" in why, why


def test_a_lost_row_shows_the_poison_not_a_lucky_zero() -> None:
    planted = cpumadd.MaddGemm(kernel=_lost_row, threads=1)  # type: ignore[arg-type]
    gemm, why = cpumadd.evaluate(planted)
    assert gemm is None and why is not None
    assert f"got {int(cpumadd.POISON)}" in why, why  # the first gate: 1x1x1, its only row lost


def test_the_float_order_plant_is_refused_by_the_long_sums_and_by_nothing_else() -> None:
    """The plant is a real bug, not a broken loop: it gives every other gate case (and small
    full-range products) exactly; each long-sum gate case alone refuses it."""
    planted = cpumadd.MaddGemm(kernel=_float_from_the_end, threads=1)  # type: ignore[arg-type]
    a, b = _full_range(9, 64, 7, 6)
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    assert np.array_equal(planted.matmul_int(a, b), want)
    wrong = [
        name
        for name, a, b in gemm_cases()
        if not np.array_equal(
            planted.matmul_int(a, b), (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
        )
    ]
    assert wrong == ["all 127, K=4099", "127 x -127, K=4099"]


def test_wrong_operands_are_refused_with_what_was_given(gemm: cpumadd.MaddGemm) -> None:
    with pytest.raises(TypeError, match="int8 operands, got float32"):
        gemm.matmul_int(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(M, K\) @ \(K, N\)"):
        gemm.matmul_int(np.zeros((2, 3), np.int8), np.zeros((4, 2), np.int8))
    k = cpumadd.MAX_K + 1
    with pytest.raises(ValueError, match="int32 sums could overflow"):
        gemm.matmul_int(np.zeros((1, k), np.int8), np.zeros((k, 1), np.int8))


def test_a_training_run_keeps_numpys_bits(gemm: cpumadd.MaddGemm) -> None:
    cfg = preset("tiny")
    runs = []
    for ops in (None, training_ops(Backend(gemm, cpumadd.DEVICE), background=True)):
        state = training.init(cfg, AdamWConfig(lr=3e-3), 5)
        if ops is not None:
            state.ops = ops
        tokens = (np.arange(50_000, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
        hashes = []
        for _ in range(2):
            x, y = training.next_batch(state, tokens)
            hashes.append(training.train_step(state, x, y).hash)
        runs.append(hashes)
    assert runs[1] == runs[0], "cpu-madd forked from numpy"


def _no_gpu() -> tuple[list[Backend], list[Demotion]]:
    return [], []


def test_without_int8_units_auto_measures_and_takes_cpu_madd(gemm: cpumadd.MaddGemm) -> None:
    """The choice on a CPU without VNNI: cpu-int8 refused by its gates, cpu-madd measured
    against numpy and taken when faster; asking for cpu-int8 says to use cpu-madd."""
    saturated = Demotion("cpu-int8", "cpu-int8 failed gate '5x5x5': expected 2193, got 6982")

    def no_vnni() -> tuple[list[Backend], list[Demotion]]:
        return [Backend(gemm, cpumadd.DEVICE)], [saturated]

    asked: list[str] = []

    def time_step(compute: Compute, limit_s: float) -> tuple[float, bool]:
        asked.append(compute.name)
        return {"cpu-madd": 0.02, "numpy": 0.05}[compute.name], True

    chosen = choose("auto", gated=_no_gpu, gated_cpu=no_vnni, time_step=time_step)
    assert chosen.compute.name == "cpu-madd", chosen.reason
    assert "; failed their gates: cpu-int8" in chosen.reason, chosen.reason
    assert asked == ["cpu-madd", "numpy"] * 3
    slower = choose(
        "auto",
        gated=_no_gpu,
        gated_cpu=no_vnni,
        time_step=lambda c, _: ({"cpu-madd": 0.09, "numpy": 0.05}[c.name], True),
    )
    assert slower.compute.name == "numpy", slower.reason  # measured, not preferred blindly
    assert choose("cpu-madd", gated_cpu=no_vnni).compute.name == "cpu-madd"
    with pytest.raises(BackendUnavailable) as info:
        choose("cpu-int8", gated_cpu=no_vnni)
    assert "expected 2193, got 6982" in info.value.message
    assert "--backend auto, cpu-madd" in info.value.hint


def test_asking_for_a_refused_cpu_madd_says_why() -> None:
    refused = Demotion("cpu-madd", "cpu-madd failed gate '1x1x1': expected 7, got 8")
    with pytest.raises(BackendUnavailable) as info:
        choose("cpu-madd", gated_cpu=lambda: ([], [refused]))
    assert "expected 7, got 8" in info.value.message and "numba" in info.value.hint
