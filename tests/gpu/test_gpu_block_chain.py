"""The block chain (``gpu/block_chain.py``, ``kernels/norm_epilogue.wgsl``): a block's tail
(attention's output product, the residual add, the RMSNorm and the MLP) in one submit and one
readback, with the reference's bits; its gate refuses each planted norm bug; in training a wrong
operand, a wrong norm output or a wrong product stops the step (docs/KERNELS.md, "The block
chain")."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest

from chain_steps import one_tiny_step
from daisychain.gpu.backend import (
    Backend,
    attach_attention_chain,
    attach_block_chain,
    attach_mlp_chain,
)
from daisychain.gpu.block_chain import (
    BlockChain,
    BlockChainOut,
    block_chain_cases,
    reference,
    run_block_chain_gates,
)
from daisychain.gpu.chain import epilogue_module
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.live import KernelAuditError, training_ops
from daisychain.gpu.mlp_chain import MlpChain
from daisychain.model.gpt import rmsnorm_forward
from daisychain.model.ops import NUMPY_OPS, GemmOps


def test_the_gate_passes_on_each_kernel(fresh_gemm: GpuGemm) -> None:
    report = run_block_chain_gates(BlockChain(MlpChain(fresh_gemm)))
    assert report.failure is None, report.failure.describe()
    assert report.cases_passed == len(block_chain_cases()) == 8


def test_the_gate_cases_reach_what_the_norm_must_get_right() -> None:
    cases = dict(block_chain_cases())
    cancel = reference(**cases["a residual that cancels the product"])  # type: ignore[arg-type]
    assert cancel is not None and np.all(cancel.b_e < -10)  # rows of ~1e-6, normalised up
    overflow = reference(**cases["a residual whose squares overflow"])  # type: ignore[arg-type]
    assert overflow is not None and np.all(overflow.b8 == 0)
    assert reference(**cases["a non-finite residual"]) is None  # type: ignore[arg-type]


PLANTS = {
    "the squares summed in another tree order": (
        "ep_tree[i] = sf_add(ep_tree[i], ep_tree[i + h]);",
        "ep_tree[i] = sf_add(ep_tree[i], ep_tree[h * 2u - 1u - i]);",
    ),
    "eps dropped": ("sf_sqrt(sf_add(ms, nm.eps_bits))", "sf_sqrt(ms)"),
    "sqrt of the reciprocal instead of the reciprocal of the sqrt": (
        "sf_div(SF_ONE, sf_sqrt(sf_add(ms, nm.eps_bits)))",
        "sf_sqrt(sf_div(SF_ONE, sf_add(ms, nm.eps_bits)))",
    ),
    "the gain dropped": (
        "let b = sf_mul(sf_mul(ep_row[c], inv), g[c]);",
        "let b = sf_mul(ep_row[c], inv);",
    ),
    "the residual dropped": ("    return sf_add(h[n * nm.c + c], y);", "    return y;"),
    "the MLP's row exponents not handed on": ("        next_scales[n] = scale.e;", ""),
    "the sign of b_q dropped": (
        "let q = select(i32(mag), -i32(mag), (x & SF_SIGN) != 0u);",
        "let q = i32(mag);",
    ),
}


@pytest.mark.parametrize("bug", list(PLANTS))
def test_the_gate_refuses_a_planted_norm(gpu: GpuDevice, bug: str) -> None:
    old, new = PLANTS[bug]
    source = epilogue_module("norm_epilogue")
    assert source.count(old) == 1, f"planting target {old!r} must occur once"
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_mlp_chain(gemm) is None
    assert attach_block_chain(gemm, source.replace(old, new)) is not None, bug
    assert gemm.block is None and gemm.mlp is not None  # the MLP chain alone is still used


def test_no_block_chain_without_an_mlp_chain(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert "no MLP chain" in (attach_block_chain(gemm) or "")
    assert gemm.block is None


def _one_step(gemm: GpuGemm) -> tuple[str, int]:
    digest, counts = one_tiny_step(gemm)
    return digest, counts.readbacks


def test_a_step_through_every_chain_makes_twenty_readbacks(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_mlp_chain(gemm) is None and attach_attention_chain(gemm) is None
    two = _one_step(gemm)
    assert attach_block_chain(gemm) is None
    three = _one_step(gemm)
    assert three[0] == two[0] == one_tiny_step(None)[0]
    assert (two[1], three[1]) == (22, 20)  # tiny (docs/BENCHMARKS.md)


class _Wrong:
    """The real chain with one value of one output changed: an operand or a checksum (only the
    host checks can see it) or a product (only the live audit can)."""

    def __init__(self, chain: BlockChain, field: str) -> None:
        self.chain, self.name, self.field = chain, chain.name, field
        self.fits = chain.fits

    def run(self, *args: Any) -> BlockChainOut:
        out = self.chain.run(*args)
        value = getattr(out, self.field).copy()
        value.reshape(value.shape[0], -1)[37, -1] += 1
        return BlockChainOut(**{**out.__dict__, self.field: value})


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("b8", "norm epilogue's operand differs"),
        ("b_sum", "norm epilogue's operand differs"),
        ("r8", "MLP epilogue's operand differs"),
        ("acc_wo", "live audit failed"),
        ("acc1", "live audit failed"),
        ("acc2", "live audit failed"),
    ],
)
def test_a_wrong_value_anywhere_stops_the_step(gpu: GpuDevice, field: str, message: str) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_mlp_chain(gemm) is None and attach_block_chain(gemm) is None
    gemm.block = _Wrong(gemm.block, field)
    with pytest.raises(KernelAuditError, match=message):
        _one_step(gemm)


def test_the_reference_ops_and_the_chain_agree_on_a_block_tail(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "lut")
    assert attach_mlp_chain(gemm) is None and attach_block_chain(gemm) is None
    ops: GemmOps = training_ops(Backend(gemm, "test"), background=False)
    rng = np.random.default_rng(9)  # inputs of this test only
    o = rng.standard_normal((20, 16)).astype(np.float32)
    wo, w1, w2 = (
        (rng.standard_normal(shape) * 0.1).astype(np.float32)
        for shape in ((16, 16), (16, 64), (64, 16))
    )
    g = (1 + rng.standard_normal(16) * 0.1).astype(np.float32)
    h0 = rng.standard_normal((20, 16)).astype(np.float32)
    eps = np.float32(1e-5)
    results = []
    for each in (NUMPY_OPS, ops):
        h = h0.copy()
        tail = each.block_tail(
            each.quantize(o, -1), each.quantize(wo, -2), h, g, eps,
            partial(rmsnorm_forward, g=g, eps=eps), each.quantize(w1, -2), each.quantize(w2, -2),
        )  # fmt: skip
        results.append((h, tail))
    (h_want, want), (h_got, got) = results
    assert h_want.tobytes() == h_got.tobytes()  # the residual added in place, same bits
    pairs = [
        (want.norm.xhat, got.norm.xhat), (want.norm.inv, got.norm.inv),
        (want.b_q, got.b_q), (want.b_e, got.b_e), (want.mlp.relu, got.mlp.relu),
        (want.mlp.r_q, got.mlp.r_q), (want.mlp.r_e, got.mlp.r_e), (want.mlp.y, got.mlp.y),
    ]  # fmt: skip
    for a, b in pairs:
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_selftest_names_each_chain_and_why_one_is_not_used(
    gpu: GpuDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daisychain.gpu import backend as backend_mod

    def refused(gemm: GpuGemm, source: str | None = None) -> str:
        gemm.block = None
        return "wgpu-dp4a-block failed gate 'planted' (a test)"

    monkeypatch.setattr(backend_mod, "attach_block_chain", refused)
    rows = {r.name: r for r in backend_mod.selftest_reports(measure=False)}
    assert rows["wgpu-dp4a-mlp"].gates_passed and rows["wgpu-dp4a-attention"].gates_passed
    assert not rows["wgpu-dp4a-block"].gates_passed
    assert "planted" in (rows["wgpu-dp4a-block"].failure or "")
    gemm = GpuGemm(gpu, "dp4a")
    assert backend_mod.chains_in_use(gemm) == "no chains"
    assert attach_mlp_chain(gemm) is None and attach_attention_chain(gemm) is None
    assert backend_mod.chains_in_use(gemm) == "chains: mlp, attention"
