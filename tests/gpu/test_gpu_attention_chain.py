"""The attention chain (``gpu/attention_chain.py``, ``kernels/attention_epilogue.wgsl``): every
head's scores, the causal softmax and the second product in one submit and one readback, with
the reference's bits; its gate refuses each planted softmax bug; in training a wrong operand or
a wrong second product stops the step (docs/KERNELS.md, "The attention chain")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chain_steps import one_tiny_step
from daisychain.gpu.attention_chain import (
    ATTENTION_BINDINGS,
    AttentionChain,
    AttentionChainOut,
    attention_chain_cases,
    reference,
    run_attention_chain_gates,
)
from daisychain.gpu.backend import Backend, attach_attention_chain, attach_mlp_chain
from daisychain.gpu.block_chain import NORM_BINDINGS, BlockChain, run_block_chain_gates
from daisychain.gpu.chain import epilogue_module, epilogue_width
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.kernels import compile_kernel
from daisychain.gpu.live import KernelAuditError, training_ops
from daisychain.gpu.mlp_chain import MLP_BINDINGS, MlpChain, run_mlp_chain_gates
from daisychain.model.config import preset
from daisychain.model.gpt import softmax_causal
from daisychain.model.ops import NUMPY_OPS, GemmOps
from daisychain.numerics.gemm import round_scaled


def test_the_gate_passes_on_each_kernel(fresh_gemm: GpuGemm) -> None:
    report = run_attention_chain_gates(AttentionChain(fresh_gemm))
    assert report.failure is None, report.failure.describe()
    assert report.cases_passed == len(attention_chain_cases()) == 9


def _scores(case: str) -> np.ndarray:
    _, q8, kt8, _, q_e, k_e, scale = next(c for c in attention_chain_cases() if c[0] == case)
    heads, t, _ = q8.shape
    acc = np.matmul(q8.astype(np.int64), kt8.astype(np.int64)).astype(np.float64)
    s = round_scaled(acc, q_e.reshape(heads, t, 1) + k_e.reshape(heads, 1, t))
    return np.asarray(s * scale, dtype=np.float32)


def test_the_gate_cases_reach_what_the_softmax_must_get_right() -> None:
    """Peaked scores give p that underflow to +0; spread scores give sums whose bits depend on
    the order of the additions (the pinned tree against a left-to-right sum), so an epilogue
    that sums in another order fails the gate (its P checksum)."""
    peaked = _scores("peaked scores")
    row = peaked[0, -1]
    assert np.any(np.exp((row - row.max()).astype(np.float64)) < 2.0**-150)
    flat = _scores("spread scores")
    t = flat.shape[-1]
    p = np.exp(flat - flat.max(axis=-1, keepdims=True)).astype(np.float32)
    p[:, np.triu_indices(t, 1)[0], np.triu_indices(t, 1)[1]] = 0
    orders_differ = 0
    for h in range(p.shape[0]):
        for i in range(t):
            seq = np.float32(0)
            for x in p[h, i]:
                seq = np.float32(seq + x)
            width = 1 << (t - 1).bit_length()
            y = np.concatenate([p[h, i], np.zeros(width - t, np.float32)])
            while y.size > 1:
                y = y[: y.size // 2] + y[y.size // 2 :]
            orders_differ += int(seq != y[0])
    assert orders_differ > 0
    assert (
        reference(*next(c for c in attention_chain_cases() if c[0] == "overflowing scores")[1:])
        is None
    )


PLANTS = {
    "the scores summed in another tree order": (
        "ep_tree[i] = sf_add(ep_tree[i], ep_tree[i + h]);",
        "ep_tree[i] = sf_add(ep_tree[i], ep_tree[h * 2u - 1u - i]);",
    ),
    "the causal mask one key late": (
        "    if (j > i) {\n        return AT_NEG_INF;",
        "    if (j > i + 1u) {\n        return AT_NEG_INF;",
    ),
    "the scale dropped": (
        "slice * at.t + j]), at.scale);",
        "slice * at.t + j]), SF_ONE);",
    ),
    "the max taken as the first score": (
        "        key = max(key, sf_key(at_score(r, j)));",
        "        key = select(key, sf_key(at_score(r, j)), j == 0u);",
    ),
    "division by multiplying with the reciprocal": (
        "        let pj = sf_div(ep_row[j], den);",
        "        let pj = sf_mul(ep_row[j], sf_div(SF_ONE, den));",
    ),
    "no status for a non-finite P": ("        st = 1u;", "        st = 0u;"),
}


@pytest.mark.parametrize("bug", list(PLANTS))
def test_the_gate_refuses_a_planted_softmax(gpu: GpuDevice, bug: str) -> None:
    old, new = PLANTS[bug]
    source = epilogue_module("attention_epilogue")
    assert source.count(old) == 1, f"planting target {old!r} must occur once"
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_attention_chain(gemm, source.replace(old, new)) is not None, bug
    assert gemm.attention is None  # attention then goes two round trips, the GEMM stays in use


def _one_step(gemm: GpuGemm) -> tuple[str, int, int]:
    digest, counts = one_tiny_step(gemm)
    return digest, counts.readbacks, counts.dispatches


def test_a_step_through_both_chains_saves_two_round_trips_per_block(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    apart = _one_step(gemm)
    assert attach_attention_chain(gemm) is None
    attention = _one_step(gemm)
    assert attach_mlp_chain(gemm) is None
    both = _one_step(gemm)
    layers = preset("tiny").layers
    assert apart[0] == attention[0] == both[0] == one_tiny_step(None)[0]
    assert (apart[1], attention[1], both[1]) == (26, 26 - layers, 26 - 2 * layers)  # 26, 24, 22
    assert attention[2] == apart[2] + layers and both[2] == apart[2] + 2 * layers


class _Wrong:
    """The real chain with one value of its output changed: P's operand (only the host check
    can see it: the second product was computed from it) or the second product (only the live
    audit can)."""

    def __init__(self, chain: AttentionChain, field: str) -> None:
        self.chain, self.name, self.field = chain, chain.name, field
        self.fits = chain.fits

    def run(self, *args: Any) -> AttentionChainOut:
        out = self.chain.run(*args)
        value = getattr(out, self.field).copy()
        value[1, 40, 3] += 1
        return AttentionChainOut(**{**out.__dict__, self.field: value})


@pytest.mark.parametrize(
    ("field", "message"),
    [("p8", "attention epilogue's operand differs from the host's"), ("acc2", "live audit failed")],
)
def test_a_wrong_operand_or_second_product_stops_the_step(
    gpu: GpuDevice, field: str, message: str
) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert attach_attention_chain(gemm) is None
    gemm.attention = _Wrong(gemm.attention, field)
    with pytest.raises(KernelAuditError, match=message):
        _one_step(gemm)


def test_the_reference_ops_and_the_chain_agree_on_attention(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "lut")
    assert attach_attention_chain(gemm) is None
    ops: GemmOps = training_ops(Backend(gemm, "test"), background=False)
    rng = np.random.default_rng(5)  # inputs of this test only
    heads = rng.standard_normal((3, 2, 3, 20, 16)).astype(np.float32)
    scale = np.float32(0.25)
    parts = []
    for o in (NUMPY_OPS, ops):
        q = o.quantize(heads[0], -1)
        k = o.quantize(heads[1], -1)
        v = o.quantize(heads[2], -2)
        kt = (
            k[0].swapaxes(-1, -2),
            k[1].swapaxes(-1, -2),
            None if k[2] is None else k[2].swapaxes(-1, -2),
        )
        parts.append(o.attention(q, kt, v, scale, lambda s: softmax_causal(s, scale)))
    want, got = parts
    for field in ("p", "p_q", "p_e", "o"):
        a, b = getattr(want, field), getattr(got, field)
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8)), field


@pytest.mark.parametrize("width", [1, 8, 64])
def test_the_bits_do_not_depend_on_how_many_invocations_share_a_row(
    gpu: GpuDevice, width: int
) -> None:
    """EP_WG is chosen per device (8 on an emulated adapter, 64 on a GPU): every epilogue gives
    the reference's bits at each width, the tree sum and the reductions included."""
    gemm = GpuGemm(gpu, "dp4a")
    layouts = {
        "attention_epilogue": ATTENTION_BINDINGS,
        "mlp_epilogue": MLP_BINDINGS,
        "norm_epilogue": NORM_BINDINGS,
    }
    kernels = {
        name: compile_kernel(gpu, name, bindings, epilogue_module(name), {"EP_WG": width})
        for name, bindings in layouts.items()
    }
    attention, mlp = AttentionChain(gemm), MlpChain(gemm)
    attention.epilogue, mlp.epilogue = kernels["attention_epilogue"], kernels["mlp_epilogue"]
    block = BlockChain(mlp)
    block.epilogue = kernels["norm_epilogue"]
    for report in (
        run_attention_chain_gates(attention),
        run_mlp_chain_gates(mlp),
        run_block_chain_gates(block),
    ):
        assert report.failure is None, report.failure.describe()


def test_an_emulated_adapter_gets_narrow_epilogues_and_a_gpu_full_ones() -> None:
    def device(adapter_type: str, name: str) -> GpuDevice:
        return GpuDevice(None, name, {}, frozenset(), adapter_type)

    assert epilogue_width(device("CPU", "llvmpipe (LLVM 15.0.6) (CPU, Vulkan)")) == 8
    assert epilogue_width(device("", "SwiftShader Device (CPU, Vulkan)")) == 8
    assert epilogue_width(device("DiscreteGPU", "NVIDIA H100 (DiscreteGPU, Vulkan)")) == 64
    assert epilogue_width(device("IntegratedGPU", "Intel Iris (IntegratedGPU, Vulkan)")) == 64
