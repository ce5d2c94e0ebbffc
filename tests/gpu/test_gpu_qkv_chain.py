"""The qkv chain (``gpu/qkv_chain.py``, ``kernels/qkv_epilogue.wgsl``): a block's attention from
its input (the qkv product, the split into heads and their quantization, then the attention
chain) in one submit and one readback, with the reference's bits; its gate refuses each planted
split bug; in training a wrong q, k or v or a wrong qkv product stops the step (docs/KERNELS.md,
"The attention chain")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chain_steps import one_tiny_step
from daisychain.gpu.attention_chain import AttentionChain
from daisychain.gpu.backend import (
    attach_attention_chain,
    attach_block_chain,
    attach_mlp_chain,
    attach_qkv_chain,
)
from daisychain.gpu.chain import epilogue_module
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.live import KernelAuditError
from daisychain.gpu.qkv_chain import QkvChain, QkvChainOut, qkv_chain_cases, run_qkv_chain_gates


def test_the_gate_passes_on_each_kernel(fresh_gemm: GpuGemm) -> None:
    report = run_qkv_chain_gates(QkvChain(AttentionChain(fresh_gemm)))
    assert report.failure is None, report.failure.describe()
    assert report.cases_passed == len(qkv_chain_cases()) == 6


PLANTS = {
    "k taken from q's columns": (
        "    let col0 = part * qp.c + (s % qp.heads) * qp.hd;",
        "    let col0 = (s % qp.heads) * qp.hd;",
    ),
    "v taken from k's columns": (
        "    let col = 2u * qp.c + (s % qp.heads) * qp.hd + d;",
        "    let col = qp.c + (s % qp.heads) * qp.hd + d;",
    ),
    "the column scale dropped": (
        "scales[n] + scales[n_tokens + col]",
        "scales[n]",
    ),
    "the exponents not handed to the softmax": (
        "    next_scales[part * qp.rows + r] = scale.e;\n",
        "",
    ),
    "v packed without its transpose": (
        "        v_out[s * qp.v_stride + w * 4u * qp.hd4 + d] = word;",
        "        v_out[s * qp.v_stride + d * qp.t4 + w] = word;",
    ),
}


@pytest.mark.parametrize("bug", list(PLANTS))
def test_the_gate_refuses_a_planted_split(gpu: GpuDevice, bug: str) -> None:
    old, new = PLANTS[bug]
    source = epilogue_module("qkv_epilogue")
    assert source.count(old) == 1, f"planting target {old!r} must occur once"
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_attention_chain(gemm) is None
    assert attach_qkv_chain(gemm, source.replace(old, new)) is not None, bug
    assert gemm.qkv is None and gemm.attention is not None  # the attention chain alone is used


def test_no_qkv_chain_without_an_attention_chain(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert "no attention chain" in (attach_qkv_chain(gemm) or "")


def test_a_step_through_every_chain_makes_eighteen_readbacks(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    for attach in (attach_mlp_chain, attach_attention_chain, attach_block_chain):
        assert attach(gemm) is None
    three = one_tiny_step(gemm)
    assert attach_qkv_chain(gemm) is None
    four = one_tiny_step(gemm)
    assert four[0] == three[0] == one_tiny_step(None)[0]
    assert (three[1].readbacks, four[1].readbacks) == (20, 18)  # tiny (docs/BENCHMARKS.md)


class _Wrong:
    """The real chain with one value of one output changed."""

    def __init__(self, chain: QkvChain, field: str) -> None:
        self.chain, self.name, self.field = chain, chain.name, field
        self.fits = chain.fits

    def run(self, *args: Any) -> QkvChainOut:
        out = self.chain.run(*args)
        value = getattr(out, self.field).copy()
        value.reshape(value.shape[0], -1)[5, -1] += 1
        return QkvChainOut(**{**out.__dict__, self.field: value})


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("q8", "qkv epilogue's operand differs"),
        ("k_e", "qkv epilogue's operand differs"),
        ("v8", "qkv epilogue's operand differs"),
        ("p8", "attention epilogue's operand differs"),
        ("acc_qkv", "live audit failed"),
        ("acc2", "live audit failed"),
    ],
)
def test_a_wrong_value_anywhere_stops_the_step(gpu: GpuDevice, field: str, message: str) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_attention_chain(gemm) is None and attach_qkv_chain(gemm) is None
    gemm.qkv = _Wrong(gemm.qkv, field)
    with pytest.raises(KernelAuditError, match=message):
        one_tiny_step(gemm)


def test_the_reference_split_is_the_models() -> None:
    """The chain's reference splits the fused qkv exactly as gpt.attention_forward does."""
    from daisychain.gpu.qkv_chain import split_heads

    qkv = np.arange(2 * 3 * 3 * 8, dtype=np.float32).reshape(6, 24)  # batch 2, T 3, C 8
    q, k, v = split_heads(qkv, batch=2, heads=2)
    assert q.shape == (2, 2, 3, 4)
    assert q[1, 1, 2, 3] == qkv[1 * 3 + 2, 0 * 8 + 1 * 4 + 3]
    assert k[0, 1, 0, 0] == qkv[0, 8 + 4]
    assert v[1, 0, 1, 2] == qkv[4, 16 + 2]


def test_a_shape_no_chain_can_hold_is_computed_apart(
    gpu: GpuDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chain says which shapes it holds (one storage binding per buffer, rows of at most
    1024 in an epilogue's workgroup memory); for any other the step computes the products one
    round trip each, the same bits, instead of failing. Here every chain refuses tiny's shapes."""
    from daisychain.gpu.block_chain import BlockChain
    from daisychain.gpu.mlp_chain import MlpChain

    gemm = GpuGemm(gpu, "dp4a")
    for attach in (attach_mlp_chain, attach_attention_chain, attach_block_chain, attach_qkv_chain):
        assert attach(gemm) is None
    for cls in (MlpChain, AttentionChain, BlockChain, QkvChain):
        monkeypatch.setattr(cls, "fits", staticmethod(lambda *shape: False))
    digest, counts = one_tiny_step(gemm)
    assert digest == one_tiny_step(None)[0]
    assert counts.readbacks == 26  # every product pair apart, as with no chain at all


def test_the_chains_hold_tiny_and_refuse_rows_past_the_workgroup_memory() -> None:
    from daisychain.gpu.block_chain import BlockChain

    assert AttentionChain.fits(16, 64, 16) and QkvChain.fits(256, 64, 4, 64)
    assert BlockChain.fits(256, 64, 256)
    assert not AttentionChain.fits(1, 1025, 16)  # a query row of 1025 keys
    assert not BlockChain.fits(8, 1028, 4112)  # a token row of 1028 channels
