"""The backward chain (``gpu/backward_chain.py``, ``kernels/limbs_epilogue.wgsl``,
``combine_epilogue.wgsl``, ``grad_norm_epilogue.wgsl``, ``grad_softmax_epilogue.wgsl``,
``gpu/replay.py``): a whole backward in one submit and one readback, with the reference's bits;
its gate refuses each planted bug of each epilogue; in training a wrong limb or product anywhere
stops the step, and a pair the chain did not run is computed apart (docs/KERNELS.md, "The
backward chain")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chain_steps import Wrong, one_tiny_step
from daisychain.gpu import backward_chain
from daisychain.gpu.backend import (
    attach_attention_chain,
    attach_backward_chain,
    attach_block_chain,
    attach_forward_chain,
    attach_mlp_chain,
    attach_qkv_chain,
)
from daisychain.gpu.backward_chain import (
    BackwardChain,
    backward_chain_cases,
    pair_operands,
    reference,
    run_backward_chain_gates,
)
from daisychain.gpu.chain import epilogue_module
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.live import KernelAuditError
from daisychain.gpu.replay import BackwardReplay

FORWARD = (attach_mlp_chain, attach_attention_chain, attach_block_chain, attach_qkv_chain,
           attach_forward_chain)  # fmt: skip


def test_the_gate_passes_on_each_kernel(fresh_gemm: GpuGemm) -> None:
    report = run_backward_chain_gates(BackwardChain(fresh_gemm))
    assert report.failure is None, report.failure.describe()
    assert report.cases_passed == len(backward_chain_cases()) == 4


@pytest.mark.parametrize("width", [1, 8, 64])
def test_the_bits_do_not_depend_on_how_many_invocations_share_a_row(
    gpu: GpuDevice, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backward_chain, "epilogue_width", lambda _gpu: width)
    report = run_backward_chain_gates(BackwardChain(GpuGemm(gpu, "dp4a")))
    assert report.failure is None, report.failure.describe()


PLANTS = {
    "limbs_epilogue": {
        "the fold dropped": (
            "    return sf_mul(v, lb_pow2(fold[lp.fold_at + lp.fold_step * "
            "(s * lp.fold_stride + f)]));",
            "    return v;",
        ),
        "the fold of another slice": (
            "lp.fold_step * (s * lp.fold_stride + f)",
            "lp.fold_step * f",
        ),
        "the third limb not rounded": (
            "        lo = lb_clamp(sf_rint_to_int(sf_rint(r2)));",
            "        lo = lb_clamp(sf_rint_to_int(r2));",
        ),
        "the second limb not clamped": (
            "    let mid = lb_clamp(sf_rint_to_int(sf_rint(r)));",
            "    let mid = sf_rint_to_int(sf_rint(r));",
        ),
        # (y * 256 - hi * 256 for (y - hi) * 256 would be an equivalent mutant: both are exact)
        "the residual of the unscaled value": (
            "    let r = sf_mul(sf_sub(y, hi), LB_256);",
            "    let r = sf_mul(sf_sub(x, hi), LB_256);",
        ),
        "the amax of signed values": (
            "        amax = max(amax, lb_x(s, idx, k) & SF_ABS);",
            "        amax = max(amax, select(lb_x(s, idx, k), 0u, "
            "(lb_x(s, idx, k) & SF_SIGN) != 0u));",
        ),
    },
    "combine_epilogue": {
        "one limb shift too many": (
            "    return cb_round64(hi, lo, e - 8 * i32(cp.limbs - 1u));",
            "    return cb_round64(hi, lo, e - 8 * i32(cp.limbs));",
        ),
        "the carry dropped": (
            "select(0u, 1u, sum < lo);",
            "0u;",
        ),
        "the sticky bit dropped": (
            "        sig = sig | select(0u, 1u, lost != 0u);",
            "",
        ),
        "the ReLU's mask ignored": (
            "    if (cp.mask_on == 1u && mask[x] == 0u) {",
            "    if (false) {",
        ),
        "k^T placed untransposed": ("        if (cp.transposed == 1u) {", "        if (false) {"),
    },
    "grad_norm_epilogue": {
        "the gain dropped": (
            "            let d = sf_mul(dy[row + c], g[c]);",
            "            let d = dy[row + c];",
        ),
        "the mean not divided by C": (
            "    let mean = sf_div(ep_wg_tree(lid, gn.width), gn.c_bits);",
            "    let mean = ep_wg_tree(lid, gn.width);",
        ),
        "the residual not added": (
            "            v = sf_add(dh[row + c], dx);",
            "            v = dx;",
        ),
    },
    "grad_softmax_epilogue": {
        "the scale dropped": (
            "        ds[row + j] = sf_mul(v, gs.scale_bits);",
            "        ds[row + j] = v;",
        ),
        "the row's sum not subtracted": (
            "        let v = sf_mul(p[row + j], sf_sub(dp[row + j], total));",
            "        let v = sf_mul(p[row + j], dp[row + j]);",
        ),
    },
}

PLANTED = [(kernel, bug) for kernel, bugs in PLANTS.items() for bug in bugs]


@pytest.mark.parametrize(("kernel", "bug"), PLANTED)
def test_the_gate_refuses_a_planted_bug(gpu: GpuDevice, kernel: str, bug: str) -> None:
    old, new = PLANTS[kernel][bug]
    source = epilogue_module(kernel)
    assert source.count(old) == 1, f"planting target {old!r} must occur once"
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_backward_chain(gemm, {kernel: source.replace(old, new)}) is not None, bug
    assert gemm.backward is None


def _attached(gpu: GpuDevice) -> GpuGemm:
    gemm = GpuGemm(gpu, "dp4a")
    for attach in FORWARD:
        assert attach(gemm) is None
    return gemm


def test_a_step_through_both_chains_makes_two_readbacks(gpu: GpuDevice) -> None:
    gemm = _attached(gpu)
    forward = one_tiny_step(gemm)
    assert attach_backward_chain(gemm) is None
    both = one_tiny_step(gemm)
    assert both[0] == forward[0] == one_tiny_step(None)[0]
    # tiny: the backward's 13 pairs are one round trip (BENCHMARKS.md)
    assert (forward[1].readbacks, both[1].readbacks) == (14, 2)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("logits.rows8", "limbs epilogue's operand differs"),
        ("logits.cols8", "limbs epilogue's operand differs"),
        ("blocks.1.w2.rows8", "limbs epilogue's operand differs"),
        ("blocks.0.pv.cols8", "limbs epilogue's operand differs"),
        ("blocks.1.qk.rows8", "limbs epilogue's operand differs"),
        ("blocks.0.qkv.cols8", "limbs epilogue's operand differs"),
        ("logits.acc_a", "live audit failed"),
        ("blocks.1.w1.acc_b", "live audit failed"),
        ("blocks.0.qk.acc_a", "live audit failed"),
    ],
)
def test_a_wrong_value_anywhere_stops_the_step(gpu: GpuDevice, path: str, message: str) -> None:
    gemm = _attached(gpu)
    assert attach_backward_chain(gemm) is None
    gemm.backward = Wrong(gemm.backward, path)
    with pytest.raises(KernelAuditError, match=message):
        one_tiny_step(gemm)


def _replay() -> tuple[BackwardReplay, dict[str, Any]]:
    case = backward_chain_cases()[0][1]
    out = reference(**case)
    assert out is not None
    operands = pair_operands(case["hq"], case["wte"], case["blocks"])
    return BackwardReplay(out, operands), operands


def test_the_replay_answers_a_pair_in_either_order_and_names_a_differing_row() -> None:
    replay, operands = _replay()
    pair, up = replay.out.logits, operands["logits"]
    b = up.b_t[0].T  # B = wte (V, C), as the host passes it
    a = up.a[0]  # A = hq^T (C, N)
    got = replay.pair([(pair.rows8[:, 0], b), (a, pair.cols8[:, 0])][::-1])
    assert got is not None and not got[1].any()
    assert [x.shape for x in got[0]] == [pair.acc_b[:, 0].shape, pair.acc_a[:, 0].shape]
    w2 = replay.out.blocks[1].w2
    rows = w2.rows8[:, 0].copy()
    rows[1, 3, 0] ^= 1  # the second limb of row 3
    up = operands["1.w2"]
    got = replay.pair([(up.a[0], w2.cols8[:, 0]), (rows, up.b_t[0].T)])
    assert got is not None and np.flatnonzero(got[1]).tolist() == [3]


def test_the_replay_is_dropped_for_another_operand_or_order() -> None:
    replay, operands = _replay()
    pair, up = replay.out.logits, operands["logits"]
    other = up.a[0].copy()
    other[0, 0] ^= 1
    assert replay.pair([(pair.rows8[:, 0], up.b_t[0].T), (other, pair.cols8[:, 0])]) is None
    assert replay.dropped and replay.done
    replay, operands = _replay()
    w2, up = replay.out.blocks[1].w2, operands["1.w2"]  # block 1's w2 pair before the logits'
    assert replay.pair([(w2.rows8[:, 0], up.b_t[0].T), (up.a[0], w2.cols8[:, 0])]) is None


def test_a_shape_the_backward_chain_cannot_hold_is_run_pair_by_pair(
    gpu: GpuDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    gemm = _attached(gpu)
    assert attach_backward_chain(gemm) is None
    monkeypatch.setattr(BackwardChain, "fits", staticmethod(lambda *shape: False))
    digest, counts = one_tiny_step(gemm)
    assert digest == one_tiny_step(None)[0]
    assert counts.readbacks == 14  # the forward chain, then a round trip per pair
