"""Audit sampling and checksums, probe and backend fallback without any GPU (pure numpy).

The audit must always check the structural danger cells first; a wrong cell there must be caught
whatever the sample; its scheduled cells must reach every cell of a shape within
ceil(M N / samples) rotations; its row/column sums must catch a single cell wrong by one unit
anywhere, on the first product; the peer's per-step probe must be computed by its own kernel.
With no adapter the selftest still reports numpy and says why the GPU rows are missing.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pytest

from daisychain import selftest
from daisychain.gpu import backend as backend_mod
from daisychain.gpu.audit import (
    audit,
    checksums,
    danger_cells,
    danger_lines,
    first_failing_slice,
    sample_cells,
    scheduled_cells,
)
from daisychain.gpu.backend import Backend, NumpyGemm
from daisychain.gpu.device import GpuUnavailable
from daisychain.gpu.gates import run_gemm_gates
from daisychain.gpu.live import (
    MAX_BEHIND,
    AuditedBatchedMatmul,
    AuditedMatmul,
    KernelAuditError,
    step_probe,
)
from daisychain.gpu.probe import (
    PROBE_SHAPE,
    probe_hash,
    probe_operands,
    reference_probe_hash,
    reference_step_probe,
)
from daisychain.model import gpt
from daisychain.model.config import preset
from daisychain.model.ops import IntGemmOps
from daisychain.model.params import init_params
from daisychain.numerics.gemm import int_matmul
from daisychain.peer.backend import choose
from gpu_plant import OneCellPlant, planted_probe_hash, planted_step_probe, quiet_cell

# Pinned: changing the probe's definition must be a deliberate, visible edit (docs/KERNELS.md).
PROBE_HASH = "fd4bd82715373741b0a6c82113567db8e5b86980ea9a296ea228cc901f4677cb"


def _product(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m + 7 * n)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    return a, b, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


def test_danger_lines_cover_ends_and_block_edges() -> None:
    assert danger_lines(70, 32) == [0, 31, 32, 63, 64, 69]
    assert danger_lines(1, 32) == [0]
    assert danger_lines(32, 32) == [0, 31]


def test_sampling_starts_with_corners_then_danger_cells() -> None:
    cells, structural = sample_cells(70, 40, (32, 32), samples=10, seed=5)
    assert cells[:4] == [(0, 0), (0, 39), (69, 0), (69, 39)]
    assert cells[:structural] == danger_cells(70, 40, (32, 32))
    assert len(cells) == structural + 10
    again, _ = sample_cells(70, 40, (32, 32), samples=10, seed=5)
    assert again == cells  # seeded: every device audits the same cells


@pytest.mark.parametrize(
    "cell", [(0, 0), (69, 39), (69, 17), (40, 39), (0, 21), (31, 32), (32, 0), (63, 32)]
)
def test_audit_catches_a_wrong_danger_cell_with_zero_random_samples(
    cell: tuple[int, int],
) -> None:
    a, b, out = _product(70, 50, 40)
    out[cell] += 1
    report = audit(a, b, out, samples=0)
    assert not report.ok
    assert (report.mismatches[0].row, report.mismatches[0].col) == cell


def test_audit_passes_a_correct_product_and_counts_cells() -> None:
    a, b, out = _product(70, 50, 40)
    report = audit(a, b, out, samples=25)
    assert report.ok, report.describe()
    assert report.cells_checked == report.danger_cells + 25


def test_audit_scheduled_cells_find_interior_corruption() -> None:
    a, b, out = _product(20, 9, 20)  # 400 cells; 400 scheduled samples are all of them
    out[10, 10] = 0 if out[10, 10] != 0 else 1
    assert not audit(a, b, out, samples=400, checksum=False).ok


@pytest.mark.parametrize(("m", "n", "samples"), [(70, 40, 16), (3, 5, 16), (33, 35, 7), (1, 1, 4)])
def test_schedule_reaches_every_cell_once_per_cycle(m: int, n: int, samples: int) -> None:
    count = min(samples, m * n)
    rounds = -(-m * n // count)
    seen = [c for r in range(rounds) for c in scheduled_cells(m, n, samples, seed=3, rotation=r)]
    assert set(seen) == {(i, j) for i in range(m) for j in range(n)}
    full = (m * n // count) * count  # rotations before the last, partial one: no repeats
    assert len(set(seen[:full])) == full
    assert scheduled_cells(m, n, samples, seed=3, rotation=rounds) == scheduled_cells(
        m, n, samples, seed=3, rotation=0
    )  # the cycle restarts


def test_sampled_cells_alone_miss_an_interior_cell_by_construction() -> None:
    """The gap the checksums close: a quiet cell is not checked by this call's cells."""
    a, b, out = _product(70, 50, 40)
    row, col = quiet_cell(70, 40, samples=16)
    out[row, col] += 1
    assert audit(a, b, out, samples=16, checksum=False).ok  # the wrong cell escapes
    report = audit(a, b, out, samples=16)
    assert not report.ok
    assert (report.bad_rows, report.bad_cols) == ([row], [col])
    wrong = report.mismatches[0]
    assert (wrong.row, wrong.col, wrong.got - wrong.expected) == (row, col, 1)
    assert f"first at [{row}, {col}]" in report.describe()


def test_checksums_catch_every_single_cell_error_by_one_unit() -> None:
    a, b, out = _product(37, 45, 41)
    for delta in (1, -1):
        for row in range(37):
            for col in range(41):
                out[row, col] += delta
                assert [list(x) for x in checksums(a, b, out)] == [[row], [col]], (row, col)
                out[row, col] -= delta
    assert [list(x) for x in checksums(a, b, out)] == [[], []]
    out[36, 0] -= 1
    report = audit(a, b, out, samples=0)
    assert not report.ok and report.mismatches[0].row == 36  # located, samples or not


def test_checksums_compared_modulo_2_32_still_catch_the_largest_single_errors() -> None:
    """The sums are compared modulo 2^32 (int32 wraps): a cell with its sign bit flipped (an
    error of 2^31) or set to the int32 extremes still changes its row and column sums."""
    a, b, out = _product(33, 40, 29)
    for wrong in (out[7, 9] ^ np.int32(-(2**31)), np.int32(2**31 - 1), np.int32(-(2**31))):
        saved = out[7, 9]
        out[7, 9] = wrong
        assert [list(x) for x in checksums(a, b, out)] == [[7], [9]], wrong
        out[7, 9] = saved


def test_checksums_see_errors_that_cancel_in_a_row() -> None:
    a, b, out = _product(70, 50, 40)
    out[40, 10] += 1
    out[40, 20] -= 1  # the row sum is unchanged; two column sums are not
    report = audit(a, b, out, samples=0)
    assert report.bad_rows == [] and report.bad_cols == [10, 20]
    assert {(x.row, x.col) for x in report.mismatches} == {(40, 10), (40, 20)}


def test_rectangle_cancels_in_every_sum_and_rotation_still_finds_it() -> None:
    """The checksums' one blind spot, +d -d -d +d on a rectangle: the schedule reaches it."""
    a, b, out = _product(70, 50, 40)
    for (i, j), d in {(20, 10): 1, (20, 25): -1, (50, 10): -1, (50, 25): 1}.items():
        out[i, j] += d
    assert [list(x) for x in checksums(a, b, out)] == [[], []]
    rounds = -(-70 * 40 // 16)
    failing = [r for r in range(rounds) if not audit(a, b, out, 16, rotation=r).ok]
    assert 1 <= len(failing) <= 4  # each corner lies in exactly one rotation of the cycle
    assert audit(a, b, out, 16, rotation=next(r for r in range(rounds) if r not in failing)).ok


def _batched(lead: tuple[int, ...], m: int, k: int, n: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(m + 7 * n + k)
    a = rng.integers(-128, 128, (*lead, m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (*lead, k, n), dtype=np.int8)
    return a, b, np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)


def test_a_batched_audit_names_the_slice_of_a_single_wrong_cell_anywhere() -> None:
    a, b, out = _batched((2, 3), 19, 21, 17)
    assert first_failing_slice(a, b, out, 16) is None
    for slice_ in ((0, 0), (1, 2), (0, 1)):
        for cell in ((0, 0), (9, 11), (18, 16)):  # a corner, an interior cell, the far corner
            for delta in (1, -1):
                out[(*slice_, *cell)] += delta
                assert first_failing_slice(a, b, out, 0) == slice_, (slice_, cell, delta)
                assert not audit(a[slice_], b[slice_], out[slice_], 0).ok
                out[(*slice_, *cell)] -= delta


def test_a_batched_audit_checks_each_slices_scheduled_cells_as_audit_does() -> None:
    """The rectangle that cancels in every sum, in one slice: found by exactly the rotations
    that find it in a 2-D audit of that slice (the same schedule, slice by slice)."""
    a, b, out = _batched((3,), 30, 20, 24)
    for (i, j), d in {(7, 5): 1, (7, 15): -1, (21, 5): -1, (21, 15): 1}.items():
        out[2, i, j] += d
    rounds = -(-30 * 24 // 16)
    batched = [r for r in range(rounds) if first_failing_slice(a, b, out, 16, rotation=r)]
    single = [r for r in range(rounds) if not audit(a[2], b[2], out[2], 16, rotation=r).ok]
    assert 1 <= len(batched) <= 4 and batched == single
    assert all(first_failing_slice(a, b, out, 16, rotation=r) == (2,) for r in batched)


@pytest.mark.parametrize("k", [1, 1023, 1024, 1025, 3000])
def test_the_audit_accepts_exact_products_of_extreme_operands(k: int) -> None:
    """Every exact value the audit computes (danger cells from small float32 products, the row
    and column sums from base-128 digits) must be exact: an exact product of all -128 operands
    (the largest sums), across K = 1024 where float32 products need chunks, passes; one unit
    off at a danger cell fails."""
    a = np.full((2, 37, k), -128, dtype=np.int8)
    b = np.full((2, k, 45), -128, dtype=np.int8)
    a[1, 5, :] = 127  # mixed signs in one slice
    out = np.matmul(a.astype(np.int64), b.astype(np.int64)).astype(np.int32)
    assert first_failing_slice(a, b, out, 16) is None
    assert audit(a[0], b[0], out[0], 16).ok and audit(a[1], b[1], out[1], 16).ok
    assert [list(x) for x in checksums(a[1], b[1], out[1])] == [[], []]
    out[1, 36, 44] -= 1  # the far corner: a danger cell
    assert first_failing_slice(a, b, out, 0) == (1,)
    assert not audit(a[1], b[1], out[1], 0).ok


def test_a_batched_audit_refuses_shapes_that_do_not_match() -> None:
    a, b, out = _batched((2,), 4, 5, 6)
    with pytest.raises(ValueError, match="do not match"):
        first_failing_slice(a, b, out[:1])


class ExactBatched(NumpyGemm):
    """An exact batched GEMM (numpy float32 BLAS, as the reference), standing in for the CPU
    int8 GEMM where onnxruntime is absent. Optional plants by call number (1-based): a cell one
    unit off in every slice of call ``wrong_at``, and a failure of the step's body at call
    ``fail_at`` (as an out-of-memory would fail a real step)."""

    name = "exact-batched"

    def __init__(self, wrong_at: int = 0, fail_at: int = 0) -> None:
        self.wrong_at, self.fail_at, self.calls = wrong_at, fail_at, 0

    def matmul_int_batched(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("planted failure in the step's body")
        out = int_matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.int32)
        if self.calls == self.wrong_at:
            out[..., 5, 3] += 1
        return out


class SlowAudit(AuditedBatchedMatmul):
    """The real background audit with each check held back 20 ms (as on a loaded core), so
    audits are still queued when the step fails; counts the checks that ended."""

    def __init__(self, gemm: ExactBatched) -> None:
        super().__init__(gemm, AuditedMatmul(gemm), background=True)
        self.ended = 0

    def check(self, a: np.ndarray, b: np.ndarray, out: np.ndarray, rotation: int) -> None:
        time.sleep(0.02)
        try:
            super().check(a, b, out, rotation)
        finally:
            self.ended += 1


def test_a_background_audit_returns_the_product_and_settle_raises_its_failure() -> None:
    """Foreground: the wrong product raises at once. Background: it comes back (unproven), the
    next products too, and ``settle`` raises the failure, naming the slice; after that the
    queue is empty and a product of the same shape checks the next rotation's cells."""
    a, b, _ = _batched((2, 3), 19, 21, 17)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    gemm = ExactBatched(wrong_at=1)
    with pytest.raises(KernelAuditError, match=r"slice \(0, 0\)"):
        AuditedBatchedMatmul(gemm, AuditedMatmul(gemm))(af, bf)
    gemm = ExactBatched(wrong_at=1)
    behind = AuditedBatchedMatmul(gemm, AuditedMatmul(gemm), background=True)
    wrong = behind(af, bf)  # no raise: the audit runs behind
    assert wrong[0, 0, 5, 3] == a[0, 0, 5].astype(np.int64) @ b[0, 0, :, 3] + 1
    behind(af, bf)
    with pytest.raises(KernelAuditError, match=r"slice \(0, 0\).*expected"):
        behind.settle()
    behind.settle()  # nothing outstanding, nothing failed since
    assert behind.audited.calls == 2 and behind.audited.rotations == {(19, 17): 2}


def test_at_most_max_behind_audits_queue_behind_the_products() -> None:
    """Slow audits (20 ms each) against fast products: the product past ``MAX_BEHIND`` queued
    audits waits for the oldest, so no more products than that are held unproven at once."""
    a, b, _ = _batched((2,), 8, 9, 7)
    audits = SlowAudit(ExactBatched())
    behind = []
    for _ in range(3 * MAX_BEHIND):
        audits(a.astype(np.float32), b.astype(np.float32))
        behind.append(audits.audited.calls - audits.ended)
    audits.settle()
    assert max(behind) == MAX_BEHIND and audits.ended == 3 * MAX_BEHIND, behind


def test_a_failure_in_the_step_waits_for_the_audits_still_running() -> None:
    """The step's body fails with audits queued behind it: ``forward_backward`` raises only
    once every audit has ended (none is left running with the step's arrays)."""
    cfg = preset("tiny")
    params = init_params(cfg, 1)
    x = (np.arange(cfg.batch * cfg.seq_len) * 7919 % cfg.vocab_size).reshape(cfg.batch, -1)
    audits = SlowAudit(ExactBatched(fail_at=6))
    ops = IntGemmOps("slow", audits.audited, audits, audits.settle)
    with pytest.raises(RuntimeError, match="planted failure"):
        gpt.forward_backward(params, cfg, x, x, ops)
    assert audits.audited.calls == 5 and audits.ended == 5


def test_a_failed_audit_wins_over_the_step_failure_it_may_have_caused() -> None:
    """An audit fails and then the body fails: the caller sees ``KernelAuditError`` (it demotes
    the kernel), with the body's failure as its context."""
    cfg = preset("tiny")
    params = init_params(cfg, 1)
    x = (np.arange(cfg.batch * cfg.seq_len) * 7919 % cfg.vocab_size).reshape(cfg.batch, -1)
    audits = SlowAudit(ExactBatched(wrong_at=2, fail_at=6))
    ops = IntGemmOps("slow", audits.audited, audits, audits.settle)
    with pytest.raises(KernelAuditError, match="live audit failed") as err:
        gpt.forward_backward(params, cfg, x, x, ops)
    assert isinstance(err.value.__context__, RuntimeError) and audits.ended == 5


class ProbeShapePlanted(NumpyGemm):
    """Exact, except one cell of the probe's product is one unit off."""

    name = "planted"
    plant = OneCellPlant(40, 50, 1, *PROBE_SHAPE)

    def matmul_int(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.plant.apply(a, b)


def test_peer_probe_is_computed_by_its_own_kernel() -> None:
    """A peer publishing the reference's probe instead of its kernel's own must fail here."""
    planted = planted_probe_hash(ProbeShapePlanted.plant)
    assert planted != PROBE_HASH
    backend = Backend(ProbeShapePlanted(), "test adapter")
    published = planted_step_probe(ProbeShapePlanted.plant)
    assert step_probe(backend) == published != reference_step_probe()
    compute = choose("wgpu", select=lambda: backend).compute
    assert compute.probe() == published


def test_probe_is_pinned_and_reference_agrees() -> None:
    a, b = probe_operands()
    assert (a.shape[0], a.shape[1], b.shape[1]) == PROBE_SHAPE
    assert a.min() == -128 and a.max() == 127
    assert reference_probe_hash() == PROBE_HASH
    assert probe_hash(NumpyGemm().matmul_int) == PROBE_HASH


def test_numpy_backend_passes_its_own_gates() -> None:
    report = run_gemm_gates(NumpyGemm())
    assert report.passed, report.failure.describe() if report.failure else ""


def test_selftest_without_adapter_reports_why_and_numpy_works(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_gpu() -> None:
        raise GpuUnavailable("no wgpu adapter found; install a Vulkan driver")

    monkeypatch.setattr(backend_mod, "acquire", no_gpu)
    assert backend_mod.select_backend().name == "numpy"
    parser = argparse.ArgumentParser()
    selftest.add_arguments(parser)
    assert selftest.run(parser.parse_args(["--json", "--no-gops"])) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in doc["backends"]}
    assert set(rows) == {"wgpu-dp4a", "wgpu-lut", "wgpu-quantize", "numpy"}
    for row in doc["backends"]:
        assert set(row) == {"name", "adapter", "gates_passed", "failure", "probe_hash", "gops"}
    assert rows["wgpu-dp4a"]["gates_passed"] is False
    assert "no wgpu adapter" in rows["wgpu-dp4a"]["failure"]
    assert rows["numpy"]["gates_passed"] is True
    assert rows["numpy"]["probe_hash"] == PROBE_HASH
    assert doc["selected"] == "numpy"
