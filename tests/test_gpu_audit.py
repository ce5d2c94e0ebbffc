"""Audit sampling, probe and backend fallback without any GPU (pure numpy).

The audit must always check the structural danger cells first; a wrong cell there must be caught
whatever the random sample; with no adapter the selftest still reports numpy and says why the GPU
rows are missing.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from daisychain import selftest
from daisychain.gpu import backend as backend_mod
from daisychain.gpu.audit import audit, danger_cells, danger_lines, sample_cells
from daisychain.gpu.backend import NumpyGemm
from daisychain.gpu.device import GpuUnavailable
from daisychain.gpu.gates import run_gemm_gates
from daisychain.gpu.probe import PROBE_SHAPE, probe_hash, probe_operands, reference_probe_hash

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


def test_audit_random_cells_find_interior_corruption() -> None:
    a, b, out = _product(20, 9, 20)  # 400 cells; 400 random samples hit nearly all
    out[10, 10] = 0 if out[10, 10] != 0 else 1
    assert not audit(a, b, out, samples=400).ok


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
