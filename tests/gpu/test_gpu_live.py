"""Live audit: a kernel that passes its gates but goes wrong at a live shape is caught at once.

The model's live shapes are not a list kept by hand: ``gpu_plant.live_products`` records the
first product of every distinct shape in one real ``tiny`` training step (forward, both backward
directions, attention, logits: 14 shapes today). For EVERY one of them a kernel wrong by one unit
in one interior cell that the sampled cells do not check (``gpu_plant.quiet_cell``) must be
caught by the audit on its first product of that shape:

- without a GPU, the "kernel" is the numpy reference with the plant, run through a whole training
  step with ``training_ops`` (so the test also proves no product path skips the audit);
- with a wgpu adapter (lavapipe on CI), the plant is compiled into the real WGSL (DP4A and LUT)
  and run on the recorded live operands, and one whole training step on the planted DP4A kernel
  must stop before the weights change.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from daisychain import training
from daisychain.gpu.audit import Int8Array, Int32Array
from daisychain.gpu.backend import Backend, NumpyGemm
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gates import IntGemm
from daisychain.gpu.gemm import GemmKind, GpuGemm
from daisychain.gpu.live import AuditedMatmul, KernelAuditError, training_ops
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from gpu_plant import LiveProduct, OneCellPlant, live_products, quiet_cell

LIVE = live_products("tiny")
SHAPES = [p.shape for p in LIVE]


class LastRowSkippedAboveSize(NumpyGemm):
    """Correct on small (gate-sized) products, drops the last row once M > 100."""

    name = "planted"

    def matmul_int(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:  # type: ignore[override]
        out = super().matmul_int(a, b)
        if a.shape[0] > 100:
            out[-1] = 0
        return out


class OneCellGemm(NumpyGemm):
    """The numpy reference wrong by ``plant.delta`` in one cell of one shape."""

    name = "planted"

    def __init__(self, plant: OneCellPlant) -> None:
        self.plant = plant

    def matmul_int(self, a: Int8Array, b: Int8Array) -> Int32Array:
        return self.plant.apply(a, b)


def quiet_plant(shape: tuple[int, int, int], delta: int = 1) -> OneCellPlant:
    m, k, n = shape
    row, col = quiet_cell(m, n)
    return OneCellPlant(row, col, delta, m, k, n)


def _operands(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)  # test inputs only
    return (
        rng.integers(-128, 128, (m, k), dtype=np.int8),
        rng.integers(-128, 128, (k, n), dtype=np.int8),
    )


def test_audit_passes_an_honest_kernel() -> None:
    mm = AuditedMatmul(NumpyGemm())
    a, b = _operands(130, 70, 90)
    assert np.array_equal(mm(a, b), a.astype(np.int64) @ b.astype(np.int64))
    assert mm.calls == 1


def test_audit_catches_a_bug_the_small_shapes_hide() -> None:
    mm = AuditedMatmul(LastRowSkippedAboveSize(), samples=0)  # structural cells alone suffice
    a, b = _operands(40, 70, 90)
    mm(a, b)  # gate-sized: fine
    a, b = _operands(130, 70, 90)
    with pytest.raises(KernelAuditError, match="live audit failed"):
        mm(a, b)


def test_live_shapes_cover_every_product_kind() -> None:
    cfg = preset("tiny")
    n, c, v, t, hd = cfg.tokens, cfg.width, cfg.vocab_size, cfg.seq_len, cfg.head_dim
    kinds = {
        "qkv forward": (n, c, 3 * c),
        "logits forward": (n, c, v),
        "mlp up forward": (n, c, cfg.hidden),
        "scores forward": (t, hd, t),
        "attention output forward": (t, t, hd),
        "weight gradient of the logits": (c, n, v),
        "input gradient of the logits": (n, v, c),
        "input gradient of w2": (n, c, cfg.hidden),
        "weight gradient of w1": (c, n, cfg.hidden),
        "dk^T = q^T dS": (hd, t, t),
    }
    missing = {name: s for name, s in kinds.items() if s not in SHAPES}
    assert not missing, missing
    assert len(SHAPES) == len(set(SHAPES)) == 14


def test_rotation_alone_reaches_a_quiet_cell_within_one_cycle() -> None:
    """Without the checksums the schedule still finds the cell, but only eventually."""
    a, b = _operands(40, 30, 48)
    plant = quiet_plant((40, 30, 48))
    mm = AuditedMatmul(OneCellGemm(plant), samples=16, checksum=False)
    cycle = -(-40 * 48 // 16)
    for _ in range(cycle):
        try:
            mm(a, b)
        except KernelAuditError as exc:
            assert f"[{plant.row}, {plant.col}]" in str(exc)
            break
    else:
        pytest.fail(f"{cycle} rotations never checked cell ({plant.row}, {plant.col})")
    assert mm.calls > 1  # the first product of the shape did not see it


def _step(gemm: IntGemm | None) -> tuple[np.float32, str]:
    """(loss, state hash) of one tiny step: the reference, or audited products of ``gemm``."""
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(), 1)
    if gemm is not None:
        state.ops = training_ops(Backend(gemm, "test adapter"))
    rng = np.random.default_rng(2)  # test tokens only
    x, y = (rng.integers(0, cfg.vocab_size, (cfg.batch, cfg.seq_len)) for _ in range(2))
    result = training.train_step(state, x, y)
    return result.loss, result.hash


class ExactGemm(NumpyGemm):
    """The reference under another name, so training_ops audits it like a GPU kernel."""

    name = "exact"


def test_audited_step_on_an_exact_kernel_has_no_false_alarm() -> None:
    assert _step(ExactGemm()) == _step(None)


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
@pytest.mark.parametrize("delta", [1, -1])
def test_training_step_audit_catches_one_unit_in_one_cell(
    shape: tuple[int, int, int], delta: int
) -> None:
    plant = quiet_plant(shape, delta)
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(), 1)
    state.ops = training_ops(Backend(OneCellGemm(plant), "test adapter"))
    before = training.state_hash(state)
    rng = np.random.default_rng(2)  # test tokens only
    x, y = (rng.integers(0, cfg.vocab_size, (cfg.batch, cfg.seq_len)) for _ in range(2))
    m, k, n = shape
    with pytest.raises(KernelAuditError) as caught:
        training.train_step(state, x, y)
    message = str(caught.value)
    assert f"shape {(m, k)} @ {(k, n)}" in message
    cell = re.search(
        rf"first at \[{plant.row}, {plant.col}\]: expected (-?\d+), got (-?\d+)", message
    )
    assert cell is not None, message
    assert int(cell[2]) - int(cell[1]) == delta
    assert training.state_hash(state) == before and state.step == 0  # never reached the weights


# --- on a real wgpu device ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["dp4a", "lut"])
@pytest.mark.parametrize("product", LIVE, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
def test_wgpu_kernel_one_unit_off_at_a_live_shape_is_caught(
    gpu: GpuDevice, kind: GemmKind, product: LiveProduct
) -> None:
    plant = quiet_plant(product.shape)
    honest = GpuGemm(gpu, kind)
    AuditedMatmul(honest, tile=honest.tile)(product.a, product.b)  # the real kernel passes
    gemm = GpuGemm(gpu, kind, source=plant.wgsl(kind))
    out = gemm.matmul_int(product.a, product.b)
    assert np.array_equal(out, plant.apply(product.a, product.b))  # the plant is live
    # The cell is quiet: the sampled cells alone pass this product ...
    AuditedMatmul(gemm, tile=gemm.tile, checksum=False)(product.a, product.b)
    # ... the full audit stops it on the first product of the shape.
    with pytest.raises(KernelAuditError, match=rf"\[{plant.row}, {plant.col}\]"):
        AuditedMatmul(gemm, tile=gemm.tile)(product.a, product.b)
    other = next(
        p for p in LIVE if p.shape[0] != product.shape[0] or p.shape[2] != product.shape[2]
    )
    AuditedMatmul(gemm, tile=gemm.tile)(other.a, other.b)  # exact elsewhere: confined


def test_wgpu_audited_step_on_the_honest_kernel_matches_numpy(gpu: GpuDevice) -> None:
    assert _step(GpuGemm(gpu, "dp4a")) == _step(None)  # every product audited, no false alarm


def test_wgpu_training_step_stops_before_the_weights(gpu: GpuDevice) -> None:
    shape = (256, 2048, 64)  # input gradient of the logits: backward, K = vocabulary
    plant = quiet_plant(shape)
    gemm = GpuGemm(gpu, "dp4a", source=plant.wgsl("dp4a"))
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(), 1)
    state.ops = training_ops(Backend(gemm, gpu.adapter_name))
    before = training.state_hash(state)
    rng = np.random.default_rng(2)  # test tokens only
    x, y = (rng.integers(0, cfg.vocab_size, (cfg.batch, cfg.seq_len)) for _ in range(2))
    # The wgpu GEMM takes batched products: the limbs of the gradient arrive as one (L, M, K).
    lim = r"(\d+, )?"
    with pytest.raises(KernelAuditError, match=rf"shape \({lim}256, 2048\) @ \({lim}2048, 64\)"):
        training.train_step(state, x, y)
    assert training.state_hash(state) == before and state.step == 0
