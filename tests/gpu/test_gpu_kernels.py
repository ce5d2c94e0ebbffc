"""The WGSL kernels on a real wgpu device (lavapipe on CI): exactness, gates, probe, pool.

Skipped, with the reason, only when no wgpu adapter exists at all. Integers are compared exactly
and floats by bit pattern (-0 != +0). The planted-bug tests are in test_gpu_planted.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from daisychain.gpu.audit import audit
from daisychain.gpu.backend import NumpyGemm, select_backend
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gates import (
    batched_cases,
    gemm_cases,
    qmatmul_cases,
    run_gemm_gates,
    run_quantize_gates,
)
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.pool import POISON_WORD, BufferPool
from daisychain.gpu.probe import probe_hash, reference_probe_hash
from daisychain.gpu.quantize import GpuQuantize
from daisychain.numerics import QuantizationError, qmatmul, quantize


@pytest.fixture(scope="session")
def quantizer(gpu: GpuDevice) -> GpuQuantize:
    return GpuQuantize(gpu)


def _ints(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.integers(-128, 128, shape, dtype=np.int8)


def test_gemm_gates_pass(gemm: GpuGemm) -> None:
    report = run_gemm_gates(gemm, gemm.pool, gemm.tile)
    assert report.passed, report.failure.describe() if report.failure else ""
    # The batched cases too: the GEMM has ``matmul_int_batched``, which training uses; and all
    # of them once more in one ``matmul_int_many`` call (training's backward pairs).
    cases = len(gemm_cases(gemm.tile)) + len(qmatmul_cases()) + len(batched_cases(gemm.tile)) + 1
    assert report.cases_passed == cases


def test_quantize_gates_pass(quantizer: GpuQuantize) -> None:
    report = run_quantize_gates(quantizer, quantizer.pool)
    assert report.passed, report.failure.describe() if report.failure else ""


@pytest.mark.parametrize("shape", [(1, 1, 1), (31, 33, 65), (128, 256, 96), (2, 16389, 3)])
def test_matmul_int_exact_against_int64(gemm: GpuGemm, shape: tuple[int, int, int]) -> None:
    m, k, n = shape
    rng = np.random.default_rng(m * 1000 + k)
    a, b = _ints(rng, (m, k)), _ints(rng, (k, n))
    got = gemm.matmul_int(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_matmul_int_refuses_wrong_dtype_and_large_k(gemm: GpuGemm) -> None:
    with pytest.raises(TypeError, match="int8"):
        gemm.matmul_int(np.zeros((2, 2), np.int16), np.zeros((2, 2), np.int8))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="split K"):
        gemm.matmul_int(np.zeros((1, 1 << 17), np.int8), np.zeros((1 << 17, 1), np.int8))


def test_qmatmul_same_bits_as_reference(gemm: GpuGemm) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 40, 72)).astype(np.float32)  # batched (B, M, K)
    w = rng.standard_normal((72, 24)).astype(np.float32)
    x[0, 0] = -0.0  # a zero row: +0 everywhere in the reference
    a_q, a_e = quantize(x, axis=-1)
    b_q, b_e = quantize(w, axis=0)
    want = qmatmul(a_q, a_e, b_q, b_e)
    got = gemm.qmatmul(a_q, a_e, b_q, b_e)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_probe_hash_equals_reference(gemm: GpuGemm) -> None:
    assert probe_hash(gemm.matmul_int) == reference_probe_hash()
    assert probe_hash(NumpyGemm().matmul_int) == reference_probe_hash()


def test_audit_passes_on_live_output(gemm: GpuGemm) -> None:
    rng = np.random.default_rng(3)
    a, b = _ints(rng, (70, 300)), _ints(rng, (300, 66))
    report = audit(a, b, gemm.matmul_int(a, b), samples=32, tile=gemm.tile)
    assert report.ok, report.describe()
    assert report.cells_checked == report.danger_cells + 32


def test_quantize_kernel_matches_reference_and_refuses_divergence(
    quantizer: GpuQuantize,
) -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((9, 50)) * np.exp2(rng.integers(-40, 40, (9, 1)))).astype(np.float32)
    q, e = quantizer.quantize(x)
    rq, re = quantize(x, axis=-1)
    np.testing.assert_array_equal(q.view(np.uint32), rq.view(np.uint32))
    np.testing.assert_array_equal(e, re)
    x[4, 7] = np.inf
    with pytest.raises(QuantizationError, match="non-finite"):
        quantizer.quantize(x)


def test_pool_recycles_buffers_by_size(gpu: GpuDevice) -> None:
    g = GpuGemm(gpu, "dp4a", pool=BufferPool(gpu))
    a = np.ones((8, 8), np.int8)
    g.matmul_int(a, a)
    created = g.pool.created
    for _ in range(3):
        g.matmul_int(a, a)
    assert g.pool.created == created


def test_pool_poison_fills_free_buffers(gpu: GpuDevice) -> None:
    pool = BufferPool(gpu)
    buf = pool.upload(np.zeros(64, dtype=np.uint32))
    pool.release(buf)
    assert pool.poison() == 1
    words = np.frombuffer(pool.read(buf, 256), dtype="<u4")
    assert np.all(words == POISON_WORD)
    with pool.poisoned():
        fresh = pool.acquire(1024)
    assert np.all(np.frombuffer(pool.read(fresh, 1024), dtype="<u4") == POISON_WORD)


def test_select_backend_prefers_dp4a(gpu: GpuDevice) -> None:
    backend = select_backend()
    assert backend.name == "wgpu-dp4a"
    assert backend.demotions == []
    assert backend.adapter == gpu.adapter_name


def test_selftest_json_on_this_device(capsys: pytest.CaptureFixture[str], gpu: GpuDevice) -> None:
    import argparse
    import json

    from daisychain import selftest

    parser = argparse.ArgumentParser()
    selftest.add_arguments(parser)
    assert selftest.run(parser.parse_args(["--json", "--no-gops"])) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in doc["backends"]}
    assert rows["wgpu-dp4a"]["gates_passed"] is True
    assert rows["wgpu-dp4a"]["adapter"] == gpu.adapter_name
    assert rows["wgpu-dp4a"]["probe_hash"] == rows["numpy"]["probe_hash"]
    assert rows["wgpu-lut"]["probe_hash"] == rows["numpy"]["probe_hash"]
    assert doc["selected"] == "wgpu-dp4a"
