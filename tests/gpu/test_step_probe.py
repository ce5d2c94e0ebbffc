"""The step probe (``gpu/probe.py``; docs/KERNELS.md, "Kernel probe"): what every peer publishes
after every step, the kernel probe's product followed by the block quantizations of a fixed
matrix. Pinned here and held equal to the browser's constant; tests/js/step_probe.test.mjs shows
the browser computes it through its WebAssembly quantizer and that a quantizer one unit off on
the probe's matrix, which passes its gate, changes it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from daisychain.gpu.probe import (
    ELEMENTWISE_SHAPE,
    PROBE_SHAPE,
    XENT_SHAPE,
    elementwise_operand,
    elementwise_parts,
    reference_probe_hash,
    reference_step_probe,
    step_probe_hash,
    xent_operands,
)
from daisychain.model.gpt import cross_entropy
from gpu_plant import OneCellPlant

ROOT = Path(__file__).resolve().parents[2]
# Pinned: changing the step probe's definition must be a deliberate, visible edit.
STEP_PROBE = "a3cb5679bf27de938f3229024ecaed4620b060dc524e6e7de85e3c07b738aa19"


def _js_constant(name: str) -> str:
    text = (ROOT / "static" / "js" / "gpu" / "probe.js").read_text()
    match = re.search(rf"export const {name} =\s*'([0-9a-f]{{64}})'", text)
    assert match, f"{name} not found in probe.js"
    return match.group(1)


def test_the_step_probe_is_pinned_and_the_browser_has_the_same_constant() -> None:
    assert reference_step_probe() == STEP_PROBE == _js_constant("REFERENCE_STEP_PROBE")
    assert reference_probe_hash() == _js_constant("REFERENCE_PROBE_HASH") != STEP_PROBE


def test_the_operand_has_zeros_subnormals_and_scaled_normals() -> None:
    x = elementwise_operand()
    assert x.shape == ELEMENTWISE_SHAPE and x.dtype == np.float32
    assert not x[0].any() and not np.signbit(x[0]).any()
    assert (np.abs(x[1]) < np.finfo(np.float32).tiny).all() and x[1].any()
    rest = np.abs(x[2:])
    assert rest.min() >= 2.0**-27 and rest.max() < 2.0**10
    assert (x < 0).any() and (x > 0).any()
    # The exponent moves with the row, so row blocks get different scales.
    assert len({int(np.log2(np.abs(r).max())) for r in x[2:10]}) >= 6


def test_the_parts_cover_one_two_and_three_limbs_by_rows_and_by_columns() -> None:
    parts = elementwise_parts(elementwise_operand())
    rows, cols = ELEMENTWISE_SHAPE
    kinds = [(p.dtype.name, p.shape) for p in parts]
    q, r_e, c_e = ("int8", (rows, cols)), ("int32", (rows,)), ("int32", (cols,))
    n, v = XENT_SHAPE
    loss, dlogits = ("float32", (1,)), ("float32", (n * v,))
    assert kinds == [
        q,
        r_e,
        q,
        c_e,
        q,
        q,
        r_e,
        q,
        q,
        c_e,
        q,
        q,
        q,
        r_e,
        q,
        q,
        q,
        c_e,
        loss,
        dlogits,
    ]
    # Every limb is used: a part that were all zeros would hide its kernel's errors.
    assert all(p.any() for p in parts)


def test_the_cross_entropy_part_is_the_models_on_logits_of_both_signs() -> None:
    logits, targets = xent_operands()
    n, v = XENT_SHAPE
    assert logits.shape == (n, v) and logits.dtype == np.float32 and v % 4 != 0
    assert float(np.abs(logits).min()) >= 0.5 and float(np.abs(logits).max()) < 8.0
    assert (logits < 0).any() and (logits > 0).any()
    assert targets.shape == (n,) and ((targets >= 0) & (targets < v)).all()
    loss, dlogits = elementwise_parts(elementwise_operand())[-2:]
    want_loss, want = cross_entropy(logits.copy(), targets)
    assert loss.tobytes() == np.float32(want_loss).tobytes()
    assert dlogits.tobytes() == want.tobytes()
    assert 0 < float(loss[0]) < 20


def test_a_kernel_one_unit_off_in_the_probe_product_publishes_another_step_probe() -> None:
    planted = OneCellPlant(40, 50, 1, *PROBE_SHAPE)
    assert step_probe_hash(planted.apply) != STEP_PROBE
