"""Mutation tests: each gate must FAIL on a planted bug (docs/KERNELS.md, "Planted bugs").

A bug is planted by string substitution on the real kernel file, and the modified WGSL goes
through the very same gate code as the real kernel. Each substitution must match exactly once, so
a kernel edit that removes the target makes these tests fail loudly instead of passing vacuously.
The smallest bug of all, one cell of one shape wrong by one unit (``gpu_plant.OneCellPlant``),
must be caught by the gates when the shape is a gate case, and by the kernel probe when it is the
probe's shape (which no gate case has: the gates pass such a kernel).
"""

from __future__ import annotations

import numpy as np
import pytest

from daisychain.gpu.backend import Backend, evaluate_gpu, select_backend
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gates import GateReport, gemm_cases, run_gemm_gates, run_quantize_gates
from daisychain.gpu.gemm import KERNEL_NAMES, GemmKind, GpuGemm
from daisychain.gpu.kernels import kernel_source
from daisychain.gpu.live import step_probe
from daisychain.gpu.pool import BufferPool
from daisychain.gpu.probe import PROBE_SHAPE, probe_hash, reference_probe_hash, reference_step_probe
from daisychain.gpu.quantize import GpuQuantize
from daisychain.peer.backend import choose
from gpu_plant import OneCellPlant, planted_probe_hash, planted_step_probe

KINDS: list[GemmKind] = ["dp4a", "lut"]


def plant(kernel: str, old: str, new: str) -> str:
    source = kernel_source(kernel)
    assert source.count(old) == 1, f"planting target {old!r} must occur once in {kernel}.wgsl"
    return source.replace(old, new)


def gemm_gate(gpu: GpuDevice, kind: GemmKind, old: str, new: str) -> GateReport:
    gemm = GpuGemm(gpu, kind, source=plant(KERNEL_NAMES[kind], old, new))
    return run_gemm_gates(gemm, gemm.pool, gemm.tile)


def quantize_gate(gpu: GpuDevice, old: str, new: str) -> GateReport:
    quantizer = GpuQuantize(gpu, source=plant("quantize", old, new))
    return run_quantize_gates(quantizer, quantizer.pool)


@pytest.mark.parametrize("kind", KINDS)
def test_gate_fails_when_last_row_skipped(gpu: GpuDevice, kind: GemmKind) -> None:
    report = gemm_gate(gpu, kind, "if (i < params.m) {", "if (i + 1u < params.m) {")
    assert report.failure is not None
    assert report.failure.index is not None
    m = report.failure.shape[0]
    assert report.failure.index[0] == m - 1  # the first wrong cell is in the last row


@pytest.mark.parametrize("kind", KINDS)
def test_gate_fails_when_last_column_skipped(gpu: GpuDevice, kind: GemmKind) -> None:
    report = gemm_gate(gpu, kind, "if (j < params.n) {", "if (j + 1u < params.n) {")
    assert report.failure is not None
    assert report.failure.index is not None
    assert report.failure.index[1] == report.failure.shape[2] - 1


@pytest.mark.parametrize("kind", KINDS)
def test_gate_fails_when_k_loop_one_short(gpu: GpuDevice, kind: GemmKind) -> None:
    report = gemm_gate(gpu, kind, "k < params.k4; k++", "k + 1u < params.k4; k++")
    assert report.failure is not None
    assert report.failure.case == "1x1x1"  # K = 1: the only packed word is skipped


@pytest.mark.parametrize("kind", KINDS)
def test_gate_fails_when_output_assumed_zero(gpu: GpuDevice, kind: GemmKind) -> None:
    old, new = "out[i * params.n + j] = v[c];", "out[i * params.n + j] += v[c];"
    # Without poisoning a fresh (zero-filled) buffer hides the bug: that is why the pool exists.
    fresh = GpuGemm(gpu, kind, source=plant(KERNEL_NAMES[kind], old, new), pool=BufferPool(gpu))
    a = np.full((5, 7), 3, np.int8)
    np.testing.assert_array_equal(fresh.matmul_int(a, a.T.copy()), np.full((5, 5), 63))
    report = gemm_gate(gpu, kind, old, new)
    assert report.failure is not None
    assert report.failure.case == "1x1x1"  # caught on the very first case, by the poison


def test_gate_fails_when_ties_round_away_from_even(gpu: GpuDevice) -> None:
    report = quantize_gate(gpu, "(rem == half && (qi & 1u) == 1u)", "(rem == half)")
    assert report.failure is not None
    assert report.failure.case.startswith("ties to even")
    assert report.failure.index == (0, 1)  # 2.5 -> 3 instead of 2


def test_gate_fails_on_signed_zero(gpu: GpuDevice) -> None:
    # The contract's zero is +0 (docs/NUMERICS.md section 2: "-0 never appears in q"). The
    # planted bug keeps the sign of a negative input that rounds to zero, i.e. emits -0 where
    # +0 is due: only a bit-pattern comparison can see it (-0.0 == 0.0 in float comparison).
    report = quantize_gate(
        gpu,
        "if (mag == 0u) {\n        return 0u;",
        "if (mag == 0u) {\n        return select(0u, 0x80000000u, neg);",
    )
    assert report.failure is not None
    assert "(q bits)" in report.failure.case
    assert report.failure.expected == "0x00000000"
    assert report.failure.got == "0x80000000"


def test_planted_dp4a_bug_demotes_to_lut(gpu: GpuDevice) -> None:
    broken = plant("gemm_dp4a", "k < params.k4; k++", "k + 1u < params.k4; k++")
    backend = select_backend(sources={"dp4a": broken})
    assert backend.name == "wgpu-lut"
    assert [d.name for d in backend.demotions] == ["wgpu-dp4a"]
    assert "failed gate '1x1x1'" in backend.demotions[0].reason


def test_both_kernels_broken_falls_back_to_numpy(gpu: GpuDevice) -> None:
    sources = {
        kind: plant(KERNEL_NAMES[kind], "if (j < params.n) {", "if (j + 1u < params.n) {")
        for kind in KINDS
    }
    backend = select_backend(sources=sources)
    assert backend.name == "numpy"
    assert [d.name for d in backend.demotions] == ["wgpu-dp4a", "wgpu-lut"]


# --- one unit in one cell ------------------------------------------------------------------

# (gate case, cell, delta): an interior cell of a tile-edge shape, of a seeded random shape, and
# of the float qmatmul case (its one unit survives dequantization: |acc| < 2^24 there).
GATE_PLANTS = [
    ("two tiles +-1", (40, 17), 1),
    ("random 3", None, -1),
    ("float 33x64x35", (20, 11), 1),
]


def gate_plant(case: str, cell: tuple[int, int] | None, delta: int) -> tuple[OneCellPlant, str]:
    """The plant for ``case`` and the name of the first gate case it must fail."""
    shapes = {name: (a.shape[0], a.shape[1], b.shape[1]) for name, a, b in gemm_cases()}
    shapes["float 33x64x35"] = (33, 64, 35)
    m, k, n = shapes[case]
    row, col = cell if cell is not None else (m // 2, n // 2)
    plant = OneCellPlant(row, col, delta, m, k, n)
    first = next(name for name, s in shapes.items() if plant.fires(*s))  # gate order
    return plant, first


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("case", "cell", "delta"), GATE_PLANTS, ids=[p[0] for p in GATE_PLANTS])
def test_gate_fails_on_one_unit_in_one_cell(
    gpu: GpuDevice, kind: GemmKind, case: str, cell: tuple[int, int] | None, delta: int
) -> None:
    plant, first = gate_plant(case, cell, delta)
    gemm = GpuGemm(gpu, kind, source=plant.wgsl(kind))
    report = run_gemm_gates(gemm, gemm.pool, gemm.tile)
    failure = report.failure
    assert failure is not None, f"{case}: one unit at ({plant.row}, {plant.col}) went unseen"
    assert failure.case == first
    assert failure.index == (plant.row, plant.col)
    if failure.expected.startswith("0x"):  # float case: the float32 bits of acc * 2^e differ
        assert failure.expected != failure.got
    else:
        assert int(failure.got) - int(failure.expected) == delta


def test_one_unit_gate_failure_demotes_with_reason(gpu: GpuDevice) -> None:
    plant, first = gate_plant("random 3", None, 1)
    backend = select_backend(sources={"dp4a": plant.wgsl("dp4a")})
    assert backend.name == "wgpu-lut"
    [demotion] = backend.demotions
    assert demotion.name == "wgpu-dp4a"
    assert f"failed gate {first!r}" in demotion.reason
    assert f"first mismatch at ({plant.row}, {plant.col})" in demotion.reason


PROBE_PLANT = OneCellPlant(40, 50, 1, *PROBE_SHAPE)  # interior: no danger row or column


@pytest.mark.parametrize("kind", KINDS)
def test_probe_sees_one_unit_the_gates_cannot(gpu: GpuDevice, kind: GemmKind) -> None:
    gemm = GpuGemm(gpu, kind, source=PROBE_PLANT.wgsl(kind))
    assert run_gemm_gates(gemm, gemm.pool, gemm.tile).passed  # no gate case has this shape
    planted = planted_probe_hash(PROBE_PLANT)
    assert planted != reference_probe_hash()
    assert probe_hash(gemm.matmul_int) == planted  # the probe ran through the planted kernel
    usable, reason = evaluate_gpu(gpu, kind, PROBE_PLANT.wgsl(kind))
    assert usable is None
    assert reason == (
        f"wgpu-{kind}: kernel probe hash {planted[:16]}... != reference "
        f"{reference_probe_hash()[:16]}..."
    )


def test_probe_failure_demotes_and_the_peer_publishes_its_own_probe(gpu: GpuDevice) -> None:
    planted = planted_probe_hash(PROBE_PLANT)
    backend = select_backend(sources={"dp4a": PROBE_PLANT.wgsl("dp4a")})
    assert backend.name == "wgpu-lut"
    assert [d.name for d in backend.demotions] == ["wgpu-dp4a"]
    assert f"kernel probe hash {planted[:16]}" in backend.demotions[0].reason
    # A peer on such a kernel (had it been selected) publishes what the kernel computes, so the
    # other peers name it; publishing the reference's hash instead would fail here.
    forced = Backend(GpuGemm(gpu, "dp4a", source=PROBE_PLANT.wgsl("dp4a")), gpu.adapter_name)
    published = planted_step_probe(PROBE_PLANT)
    assert step_probe(forced) == published != reference_step_probe()
    assert choose("wgpu", select=lambda: forced).compute.probe() == published
    assert step_probe(backend) == reference_step_probe()  # the honest LUT kernel
