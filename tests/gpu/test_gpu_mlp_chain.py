"""The MLP chain (``gpu/mlp_chain.py``, ``kernels/mlp_epilogue.wgsl``): a block's two MLP
products and the work between them in one submit and one readback, with the reference's bits;
its gate refuses each planted epilogue bug; in training a wrong epilogue operand or a wrong
second product stops the step (docs/KERNELS.md, "The MLP chain")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chain_steps import one_tiny_step
from daisychain.gpu.backend import Backend, attach_mlp_chain
from daisychain.gpu.chain import epilogue_module
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.live import KernelAuditError, training_ops
from daisychain.gpu.mlp_chain import (
    MlpChain,
    MlpChainOut,
    mlp_chain_cases,
    reference,
    run_mlp_chain_gates,
)
from daisychain.model.config import preset
from daisychain.model.ops import NUMPY_OPS, GemmOps


def test_the_gate_passes_on_each_kernel(fresh_gemm: GpuGemm) -> None:
    report = run_mlp_chain_gates(MlpChain(fresh_gemm))
    assert report.failure is None, report.failure.describe()
    assert report.cases_passed == len(mlp_chain_cases()) == 10


def test_the_gate_cases_reach_what_the_epilogue_must_get_right() -> None:
    """Subnormal u, rows the ReLU empties (a zero block: e = 0) and a refused overflow are among
    the inputs, or an epilogue wrong there would pass."""
    seen = {name: (b8, w1, re, ce, w2) for name, b8, w1, re, ce, w2 in mlp_chain_cases()}
    b8, w1, re, ce, _ = seen["subnormal u"]
    acc = (b8.astype(np.int64) @ w1.astype(np.int64)).astype(np.float64)
    u = np.ldexp(acc, re.reshape(-1, 1) + ce.reshape(1, -1)).astype(np.float32)
    assert np.any((u != 0) & (np.abs(u) < np.float32(2.0**-126)))
    bump = reference(*seen["amax at the scale bump"])
    assert bump is not None and bump.r_e.reshape(-1).tolist() == [2, 1, 0]  # 255, 254, 127
    empty = reference(*seen["rows the ReLU empties"])
    assert empty is not None and np.all(empty.r8 == 0) and np.all(empty.r_e == 0)
    assert reference(*seen["overflowing u"]) is None


PLANTS = {
    "ReLU keeps -0": (
        "    return select(0u, u, (u & SF_SIGN) == 0u);",
        "    return select(u & SF_SIGN, u, (u & SF_SIGN) == 0u);",
    ),
    "the column scale is dropped": (
        "scales[i] + scales[mp.m + f]",
        "scales[i]",
    ),
    "ties round away from zero": (
        "    if (rem > half || (rem == half && (qi & 1u) == 1u)) {\n        return qi + 1u;",
        "    if (rem >= half) {\n        return qi + 1u;",
    ),
    "the scale bump one unit late": (
        "(amax & SF_MANT) >= EP_MANT_BUMP",
        "(amax & SF_MANT) > EP_MANT_BUMP",
    ),
    "no status for a non-finite r": ("        st = 1u;", "        st = 0u;"),
}


@pytest.mark.parametrize("bug", list(PLANTS))
def test_the_gate_refuses_a_planted_epilogue(gpu: GpuDevice, bug: str) -> None:
    old, new = PLANTS[bug]
    source = epilogue_module("mlp_epilogue")
    assert source.count(old) == 1, f"planting target {old!r} must occur once"
    gemm = GpuGemm(gpu, "dp4a")
    why = attach_mlp_chain(gemm, source.replace(old, new))
    assert why is not None, f"the gate passed an epilogue with {bug}"
    assert gemm.mlp is None  # the MLP then goes two round trips, the GEMM stays in use
    assert attach_mlp_chain(gemm) is None and gemm.mlp is not None  # the real one passes


def _one_step(gemm: GpuGemm, adapter: str = "test") -> tuple[str, int, int]:
    digest, counts = one_tiny_step(gemm)
    return digest, counts.readbacks, counts.dispatches


def test_a_step_through_the_chain_saves_a_round_trip_per_block(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    apart = _one_step(gemm, "test")
    assert attach_mlp_chain(gemm) is None
    chained = _one_step(gemm, "test")
    layers = preset("tiny").layers
    assert chained[0] == apart[0] == one_tiny_step(None)[0]
    assert (apart[1], chained[1]) == (26, 26 - layers)  # tiny: 26 -> 24 (docs/BENCHMARKS.md)
    assert chained[2] == apart[2] + layers  # one epilogue dispatch more per block


def _step_raises(gemm: GpuGemm, adapter: str = "test") -> str:
    with pytest.raises(KernelAuditError) as err:
        _one_step(gemm, adapter)
    return str(err.value)


def test_an_epilogue_wrong_only_at_the_models_shape_is_stopped_by_the_host_check(
    gpu: GpuDevice,
) -> None:
    """One row's exponent off by one, only when M is the tiny step's 256 tokens (no gate case
    has M = 256, so the gate passes it): the host's own r_e differs, the step stops."""
    source = epilogue_module("mlp_epilogue")
    old = "        status[2u * i] = bitcast<u32>(scale.e);"
    new = "        status[2u * i] = bitcast<u32>(scale.e + select(0, 1, mp.m == 256u && i == 3u));"
    assert source.count(old) == 1
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_mlp_chain(gemm, source.replace(old, new)) is None  # the gate misses it
    assert "MLP epilogue's operand differs from the host's at row 3" in _step_raises(gemm)


class _WrongSecondProduct:
    """The real chain, with one cell of its second product off by one (what a GEMM bug at the
    chain's second dispatch would return): only the live audit can see it."""

    def __init__(self, chain: MlpChain) -> None:
        self.chain, self.name = chain, chain.name
        self.fits = chain.fits

    def run(self, *args: Any) -> MlpChainOut:
        out = self.chain.run(*args)
        acc2 = out.acc2.copy()
        acc2[5, 3] += 1
        return MlpChainOut(out.acc1, out.r8, out.r_e, out.status, acc2)


def test_a_wrong_second_product_is_caught_by_the_live_audit(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_mlp_chain(gemm) is None
    gemm.mlp = _WrongSecondProduct(gemm.mlp)
    assert "live audit failed" in _step_raises(gemm)


def test_the_reference_ops_and_the_chain_agree_on_the_mlp(gpu: GpuDevice) -> None:
    """``ops.mlp`` through the chain returns what ``mlp_separately`` returns, field by field."""
    gemm = GpuGemm(gpu, "lut")
    assert attach_mlp_chain(gemm) is None
    ops: GemmOps = training_ops(Backend(gemm, "test"), background=False)
    rng = np.random.default_rng(3)  # inputs of this test only
    bn = rng.standard_normal((20, 16)).astype(np.float32)
    w1 = rng.standard_normal((16, 64)).astype(np.float32) * np.float32(0.1)
    w2 = rng.standard_normal((64, 16)).astype(np.float32) * np.float32(0.1)
    parts = []
    for o in (NUMPY_OPS, ops):
        b_q, b_e, b8 = o.quantize(bn, -1)
        w1_t = o.quantize(w1, -2)
        w2_t = o.quantize(w2, -2)
        parts.append(o.mlp(b_q, b_e, w1_t, w2_t, b8=b8))
    want, got = parts
    for field in ("relu", "r_q", "r_e", "y"):
        a, b = getattr(want, field), getattr(got, field)
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)), field
