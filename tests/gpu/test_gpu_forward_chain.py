"""The forward chain (``gpu/forward_chain.py``, ``kernels/merge_epilogue.wgsl``, ``gpu/replay.py``):
a whole forward (every block's qkv and block chains, the merged heads and the norms between them,
the logits product) in one submit and one readback, with the reference's bits; its gate refuses
each planted bug of the merge epilogue and of the parts only it uses (the MLP epilogue's row
exponents, the norm epilogue's residual out); in training a wrong operand or product anywhere
in it stops the step, and a call the chain did not run is computed apart (docs/KERNELS.md, "The
forward chain")."""

from __future__ import annotations

import numpy as np
import pytest

from chain_steps import Wrong, one_tiny_step
from daisychain.gpu import forward_chain
from daisychain.gpu.attention_chain import AttentionChain
from daisychain.gpu.backend import (
    attach_attention_chain,
    attach_block_chain,
    attach_forward_chain,
    attach_mlp_chain,
    attach_qkv_chain,
)
from daisychain.gpu.block_chain import BlockChain
from daisychain.gpu.chain import epilogue_module
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.forward_chain import (
    ForwardChain,
    forward_chain_cases,
    reference,
    run_forward_chain_gates,
)
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.live import KernelAuditError
from daisychain.gpu.mlp_chain import MlpChain
from daisychain.gpu.qkv_chain import QkvChain
from daisychain.gpu.replay import ForwardReplay, Inputs

CHAINS = (attach_mlp_chain, attach_attention_chain, attach_block_chain, attach_qkv_chain)


def _chain(gemm: GpuGemm) -> ForwardChain:
    return ForwardChain(QkvChain(AttentionChain(gemm)), BlockChain(MlpChain(gemm)))


def test_the_gate_passes_on_each_kernel(fresh_gemm: GpuGemm) -> None:
    report = run_forward_chain_gates(_chain(fresh_gemm))
    assert report.failure is None, report.failure.describe()
    assert report.cases_passed == len(forward_chain_cases()) == 3


@pytest.mark.parametrize("width", [1, 8, 64])
def test_the_bits_do_not_depend_on_how_many_invocations_share_a_row(
    gpu: GpuDevice, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forward_chain, "epilogue_width", lambda _gpu: width)
    report = run_forward_chain_gates(_chain(GpuGemm(gpu, "dp4a")))
    assert report.failure is None, report.failure.describe()


MERGE_PLANTS = {
    "P's exponent dropped": (
        "    return ep_scaled(acc[s * mg.out_stride + i * mg.hd + d], p_e + v_e);",
        "    return ep_scaled(acc[s * mg.out_stride + i * mg.hd + d], v_e);",
    ),
    "v's exponent read from its status word": (
        "v_status[4u * mg.rows + 2u * (s * mg.hd + d)]",
        "v_status[4u * mg.rows + 2u * (s * mg.hd + d) + 1u]",
    ),
    "the heads merged in the wrong order": (
        "    let s = (n / mg.t) * mg.heads + c / mg.hd;",
        "    let s = (n / mg.t) * mg.heads + (mg.heads - 1u - c / mg.hd);",
    ),
    "the amax of signed values": (
        "        amax = max(amax, mg_o(n, c) & SF_ABS);",
        "        amax = max(amax, select(mg_o(n, c), 0u, (mg_o(n, c) & SF_SIGN) != 0u));",
    ),
    "o_e not handed to the output product": ("        next_scales[n] = scale.e;\n", ""),
    "the last token's row not written": (
        "        packed[w * mg.m4 + n] = word;",
        "        if (n + 1u < mg.m) { packed[w * mg.m4 + n] = word; }",
    ),
}


def _attached(gpu: GpuDevice, mlp: str | None = None, norm: str | None = None) -> GpuGemm:
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_mlp_chain(gemm, mlp) is None  # the plants below pass the chains they extend
    assert attach_attention_chain(gemm) is None
    assert attach_block_chain(gemm, norm) is None
    assert attach_qkv_chain(gemm) is None
    return gemm


@pytest.mark.parametrize("bug", list(MERGE_PLANTS))
def test_the_gate_refuses_a_planted_merge(gpu: GpuDevice, bug: str) -> None:
    old, new = MERGE_PLANTS[bug]
    source = epilogue_module("merge_epilogue")
    assert source.count(old) == 1, f"planting target {old!r} must occur once"
    gemm = _attached(gpu)
    assert attach_forward_chain(gemm, source.replace(old, new)) is not None, bug
    assert gemm.forward is None and gemm.qkv is not None and gemm.block is not None


# Bugs in what the per-block chains compute but never read, which only the forward chain uses.
UNREAD_PLANTS = {
    "the MLP's row exponents not handed on": (
        "mlp_epilogue",
        "        next_scales[i] = scale.e;\n",
        "",
    ),
    "the MLP's row exponents one too large": (
        "mlp_epilogue",
        "        next_scales[i] = scale.e;\n",
        "        next_scales[i] = scale.e + 1;\n",
    ),
    "the residual not written out": (
        "norm_epilogue",
        "            h_out[n * nm.c + c] = x;\n",
        "",
    ),
    "the residual written before the add": (
        "norm_epilogue",
        "            h_out[n * nm.c + c] = x;\n",
        "            h_out[n * nm.c + c] = h[n * nm.c + c];\n",
    ),
}


@pytest.mark.parametrize("bug", list(UNREAD_PLANTS))
def test_the_gate_refuses_a_planted_bug_the_block_chains_never_see(
    gpu: GpuDevice, bug: str
) -> None:
    name, old, new = UNREAD_PLANTS[bug]
    source = epilogue_module(name)
    assert source.count(old) == 1, f"planting target {old!r} must occur once"
    planted = source.replace(old, new)
    gemm = _attached(gpu, **{"mlp" if name == "mlp_epilogue" else "norm": planted})
    assert attach_forward_chain(gemm) is not None, bug
    assert gemm.forward is None


def test_no_forward_chain_without_the_chains_it_extends(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_mlp_chain(gemm) is None and attach_block_chain(gemm) is None
    assert "no qkv and block chains" in (attach_forward_chain(gemm) or "")


def test_a_step_through_the_forward_chain_makes_fourteen_readbacks(gpu: GpuDevice) -> None:
    gemm = _attached(gpu)
    four = one_tiny_step(gemm)
    assert attach_forward_chain(gemm) is None
    five = one_tiny_step(gemm)
    assert five[0] == four[0] == one_tiny_step(None)[0]
    # tiny: the forward's five round trips (two per block, the logits) are one (BENCHMARKS.md)
    assert (four[1].readbacks, five[1].readbacks) == (18, 14)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("blocks.0.a_next.q8", "norm epilogue's operand differs"),  # block 1's a
        ("blocks.1.a_next.q8", "final norm epilogue's operand differs"),  # the logits'
        ("blocks.0.a_next.e", "norm epilogue's operand differs"),
        ("blocks.0.o.q8", "merge epilogue's operand differs"),
        ("blocks.1.o.e", "merge epilogue's operand differs"),
        ("blocks.1.qkv.p8", "attention epilogue's operand differs"),
        ("blocks.0.tail.b8", "norm epilogue's operand differs"),
        ("blocks.1.qkv.acc_qkv", "live audit failed"),
        ("blocks.0.tail.acc2", "live audit failed"),
        ("logits", "live audit failed"),
    ],
)
def test_a_wrong_value_anywhere_stops_the_step(gpu: GpuDevice, path: str, message: str) -> None:
    gemm = _attached(gpu)
    assert attach_forward_chain(gemm) is None
    gemm.forward = Wrong(gemm.forward, path)
    with pytest.raises(KernelAuditError, match=message):
        one_tiny_step(gemm)


def _replay() -> tuple[ForwardReplay, Inputs]:
    case = forward_chain_cases()[0][1]
    out = reference(**case)
    assert out is not None
    n = case["a8"].shape[0]
    zeros = np.zeros(n, np.uint32)
    first = forward_chain.GpuOperand(case["a8"], case["a_e"].reshape(n, 1), zeros, zeros)
    inputs = Inputs(first, tuple(case["blocks"]), case["wte8"])
    return ForwardReplay(out, inputs), inputs


def test_the_replay_hands_out_each_output_once_in_the_models_order() -> None:
    replay, inputs = _replay()
    w0 = inputs.blocks[0]
    got = replay.qkv(inputs.a.q8, inputs.a.e, w0.wqkv8, w0.wqkv_e)
    assert got is not None and not got[1].any()
    o = replay.out.blocks[0].o
    tail = (w0.wo8, w0.wo_e, w0.w1_8, w0.w1_e, w0.w2_8)
    assert replay.tail(o.q8, o.e, tail, w0.g2) is not None
    assert not replay.done
    # the same call again is not what the chain ran next (block 1's qkv): the replay is dropped
    assert replay.tail(o.q8, o.e, tail, w0.g2) is None
    assert replay.dropped and replay.done
    w1 = inputs.blocks[1]
    assert replay.qkv(inputs.a.q8, inputs.a.e, w1.wqkv8, w1.wqkv_e) is None


def test_the_replay_is_dropped_for_other_weights_and_names_a_differing_row() -> None:
    replay, inputs = _replay()
    w0 = inputs.blocks[0]
    other = w0.wqkv8.copy()
    other[0, 0] ^= 1
    assert replay.qkv(inputs.a.q8, inputs.a.e, other, w0.wqkv_e) is None and replay.dropped
    replay, inputs = _replay()
    a8 = inputs.a.q8.copy()
    a8[3, 2] ^= 1
    got = replay.qkv(a8, inputs.a.e, w0.wqkv8, w0.wqkv_e)
    assert got is not None and np.flatnonzero(got[1]).tolist() == [3]


def test_a_shape_the_forward_chain_cannot_hold_is_run_block_by_block(
    gpu: GpuDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    gemm = _attached(gpu)
    assert attach_forward_chain(gemm) is None
    monkeypatch.setattr(ForwardChain, "fits", staticmethod(lambda *shape: False))
    digest, counts = one_tiny_step(gemm)
    assert digest == one_tiny_step(None)[0]
    assert counts.readbacks == 18  # the per-block chains, as without the forward chain


@pytest.mark.parametrize("shape", [(1, 7), (3, 1), (2, 64)])
def test_a_forward_for_generation_is_one_readback_with_the_references_bits(
    gpu: GpuDevice, shape: tuple[int, int]
) -> None:
    """``forward_logits`` (in-page generation's and the checkpoint tools' forward) at odd sizes:
    one token, a sequence no multiple of 4, a full one."""
    from daisychain.gpu.backend import Backend
    from daisychain.gpu.counters import ROUND_TRIPS
    from daisychain.gpu.live import training_ops
    from daisychain.model.config import preset
    from daisychain.model.gpt import forward_logits
    from daisychain.model.params import init_params

    gemm = _attached(gpu)
    assert attach_forward_chain(gemm) is None
    cfg = preset("tiny")
    params = init_params(cfg, 3)
    x = (np.arange(shape[0] * shape[1]) * 37 % cfg.vocab_size).reshape(shape)
    ROUND_TRIPS.reset()
    got = forward_logits(params, cfg, x, training_ops(Backend(gemm, "test")))
    assert ROUND_TRIPS.snapshot().readbacks == 1
    assert np.array_equal(got.view(np.uint32), forward_logits(params, cfg, x).view(np.uint32))
