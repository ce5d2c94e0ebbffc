"""The step chain (``gpu/step_chain.py``, ``kernels/cross_entropy_epilogue.wgsl``,
``kernels/transpose_pack.wgsl``): a whole training step's products in one submit and one readback
(issue 20, Must show 3), with the reference's bits; its gate refuses each planted bug of the
cross-entropy and the transposes; in training a wrong operand or product anywhere stops the step,
and the backward's replay survives the settles a peer's early gradients make (docs/KERNELS.md,
"The step chain")."""

from __future__ import annotations

import numpy as np
import pytest

from chain_steps import Wrong, changed, one_tiny_step
from daisychain import training
from daisychain.bench.rig.steps import token_stream
from daisychain.gpu import backend as gpu_backend
from daisychain.gpu.backend import Backend, attach_step_chain
from daisychain.gpu.backward_chain import BackwardChain
from daisychain.gpu.chain import epilogue_module
from daisychain.gpu.counters import ROUND_TRIPS
from daisychain.gpu.device import GpuDevice
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.live import KernelAuditError, training_ops
from daisychain.gpu.step_chain import StepChain, run_step_chain_gates
from daisychain.gpu.step_chain import step_chain_cases as cases
from daisychain.model import gpt
from daisychain.model.config import preset
from daisychain.model.ops import NUMPY_OPS
from daisychain.optim import AdamWConfig

BELOW = (gpu_backend.attach_mlp_chain, gpu_backend.attach_attention_chain,
         gpu_backend.attach_block_chain, gpu_backend.attach_qkv_chain,
         gpu_backend.attach_forward_chain, gpu_backend.attach_backward_chain)  # fmt: skip


def _attached(gpu: GpuDevice) -> GpuGemm:
    gemm = GpuGemm(gpu, "dp4a")
    for attach in BELOW:
        assert attach(gemm) is None
    return gemm


def test_the_gate_passes_on_each_kernel(fresh_gemm: GpuGemm) -> None:
    for attach in BELOW:
        assert attach(fresh_gemm) is None
    report = run_step_chain_gates(StepChain(fresh_gemm.forward, BackwardChain(fresh_gemm)))
    assert report.failure is None, report.failure.describe()
    assert report.cases_passed == len(cases()) == 4


PLANTS = {
    "cross_entropy_epilogue": {
        "the target's one not subtracted": ("        g = sf_sub(g, SF_ONE);", ""),
        "the mean not divided by N": ("    return sf_div(g, ce.n_bits);", "    return g;"),
        "the max not subtracted": (
            "    let p = sf_exp(sf_sub(ce_z(n, j), m));",
            "    let p = sf_exp(ce_z(n, j));",
        ),
        # (the first level's two terms swapped would be an equivalent mutant: a + b is b + a)
        "the second half of a long row left out of the sum": (
            "            ep_tree[i] = sf_add(ce_p(n, i, m), ce_p(n, i + half, m));",
            "            ep_tree[i] = sf_add(ce_p(n, i, m), sf_mul(ce_p(n, i + half, m), 0u));",
        ),
        "the row exponent dropped": (
            "    return ep_scaled(acc[n * ce.v + j], row_e[n] + col_e[j]);",
            "    return ep_scaled(acc[n * ce.v + j], col_e[j]);",
        ),
    },
    "transpose_pack": {
        "the last row of a word dropped": (
            "        if (r < tp.r) {",
            "        if (r + 1u < tp.r) {",
        ),
        "the byte of the wrong lane": (
            "    return (word >> (8u * (k % 4u))) & 0xFFu;",
            "    return (word >> (8u * (3u - k % 4u))) & 0xFFu;",
        ),
        "every slice from the first": (
            "    let word = src[s * tp.in_stride + (k / 4u) * tp.in_m4 + r];",
            "    let word = src[(k / 4u) * tp.in_m4 + r];",
        ),
    },
}
PLANTED = [(kernel, bug) for kernel, bugs in PLANTS.items() for bug in bugs]


@pytest.mark.parametrize(("kernel", "bug"), PLANTED)
def test_the_gate_refuses_a_planted_bug(gpu: GpuDevice, kernel: str, bug: str) -> None:
    old, new = PLANTS[kernel][bug]
    source = epilogue_module(kernel)
    assert source.count(old) == 1, f"planting target {old!r} must occur once"
    gemm = _attached(gpu)
    assert attach_step_chain(gemm, {kernel: source.replace(old, new)}) is not None, bug
    assert gemm.step is None and gemm.forward is not None and gemm.backward is not None


def test_no_step_chain_without_the_chains_it_extends(gpu: GpuDevice) -> None:
    gemm = GpuGemm(gpu, "dp4a")
    assert "no forward and backward chains" in (attach_step_chain(gemm) or "")


def test_a_step_through_the_step_chain_makes_one_readback(gpu: GpuDevice) -> None:
    gemm = _attached(gpu)
    two = one_tiny_step(gemm)
    assert attach_step_chain(gemm) is None
    one = one_tiny_step(gemm)
    assert one[0] == two[0] == one_tiny_step(None)[0]
    assert (two[1].readbacks, one[1].readbacks) == (2, 1)  # tiny (docs/BENCHMARKS.md)
    assert one[1].submits == 1
    # the cross-entropy, the transposes, the kernel probe's product and its matrix's limbs, and
    # the whole probe step (its products and epilogues: 167)
    probe_step = gpu_backend.probe_step_dispatches()
    assert probe_step == 167
    assert one[1].dispatches == two[1].dispatches + 10 + 8 * preset("tiny").layers + probe_step
    assert gpu_backend.epilogue_dispatches(gemm, preset("tiny").layers) == 88 + probe_step


def test_early_gradients_keep_the_one_readback_and_the_bits(gpu: GpuDevice) -> None:
    """A peer hands each gradient to the network as soon as it is final (``on_grad``), which
    settles the audits between the backward's pairs: the step's replay must outlive them."""
    gemm = _attached(gpu)
    assert attach_step_chain(gemm) is None
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(), 1)
    x, y = training.next_batch(state, token_stream(cfg.vocab_size))
    ops = training_ops(Backend(gemm, "test"))
    seen: list[str] = []
    ROUND_TRIPS.reset()
    loss, grads = gpt.forward_backward(state.params, cfg, x, y, ops,
                                       on_grad=lambda name, _: seen.append(name))  # fmt: skip
    assert ROUND_TRIPS.snapshot().readbacks == 1
    want_loss, want = gpt.forward_backward(state.params, cfg, x, y, NUMPY_OPS)
    assert loss == want_loss and len(seen) == len(want)
    for name, value in want.items():
        assert np.array_equal(grads[name].view(np.uint32), value.view(np.uint32)), name


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("forward.blocks.0.a_next.q8", "norm epilogue's operand differs"),
        ("forward.blocks.1.o.q8", "merge epilogue's operand differs"),
        ("forward.logits", "live audit failed"),
        ("backward.logits.rows8", "limbs epilogue's operand differs"),
        ("backward.blocks.0.pv.cols8", "limbs epilogue's operand differs"),
        ("backward.blocks.1.w2.acc_b", "live audit failed"),
    ],
)
def test_a_wrong_value_anywhere_stops_the_step(gpu: GpuDevice, path: str, message: str) -> None:
    gemm = _attached(gpu)
    assert attach_step_chain(gemm) is None
    gemm.step = Wrong(gemm.step, path)
    with pytest.raises(KernelAuditError, match=message):
        one_tiny_step(gemm)


def test_a_shape_the_step_chain_cannot_hold_is_run_pass_by_pass(
    gpu: GpuDevice, monkeypatch: pytest.MonkeyPatch
) -> None:
    gemm = _attached(gpu)
    assert attach_step_chain(gemm) is None
    monkeypatch.setattr(StepChain, "fits", staticmethod(lambda *shape: False))
    digest, counts = one_tiny_step(gemm)
    assert digest == one_tiny_step(None)[0]
    assert counts.readbacks == 2  # the forward chain, then the backward chain


@pytest.mark.parametrize("width", [1, 8, 64])
def test_the_bits_do_not_depend_on_how_many_invocations_share_a_row(
    gpu: GpuDevice, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daisychain.gpu import step_chain

    gemm = _attached(gpu)
    monkeypatch.setattr(step_chain, "epilogue_width", lambda _gpu: width)
    report = run_step_chain_gates(StepChain(gemm.forward, gemm.backward))
    assert report.failure is None, report.failure.describe()


def test_a_peers_step_and_its_probe_make_one_readback(gpu: GpuDevice) -> None:
    """The step probe a peer publishes after each step (the kernel probe's product, the probe
    matrix's limbs and the probe's cross-entropy) is computed in the step's own submit, gives
    the reference's hash, and is taken once: the next probe runs the kernel again."""
    from daisychain.gpu.live import step_probe
    from daisychain.gpu.probe import reference_step_probe

    gemm = _attached(gpu)
    assert attach_step_chain(gemm) is None
    backend = Backend(gemm, "test")
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(), 1)
    state.ops = training_ops(backend)
    x, y = training.next_batch(state, token_stream(cfg.vocab_size))
    ROUND_TRIPS.reset()
    training.train_step(state, x, y)
    assert step_probe(backend) == reference_step_probe()
    assert ROUND_TRIPS.snapshot().readbacks == 1
    assert step_probe(backend) == reference_step_probe()  # the kernel again: one more
    assert ROUND_TRIPS.snapshot().readbacks == 2
    # one unit in one cell of the step's probe product, in one limb the step's limbs epilogue
    # made of the probe matrix, or in one dlogit of its cross-entropy epilogue (one ulp): another
    # probe, and the device is named
    for path in ("probe", "probe_limbs.3.0", "probe_dlogits"):
        x, y = training.next_batch(state, token_stream(cfg.vocab_size))
        training.train_step(state, x, y)
        gemm.step_probe = changed(gemm.step_probe, path)
        assert step_probe(backend) != reference_step_probe(), path


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("probe_step.0.blocks.1.o.q8", "merge epilogue's operand differs"),
        ("probe_step.0.blocks.0.qkv.p8", "operand differs"),
        ("probe_step.1.blocks.0.qk.rows8", "limbs epilogue's operand differs"),
        ("probe_step.1.logits.acc_a", "live audit failed"),
    ],
)
def test_the_probe_step_rides_in_the_steps_submit_and_a_wrong_value_stops_the_probe(
    gpu: GpuDevice, path: str, message: str
) -> None:
    """The probe step (``gpu.probe.PROBE_MODEL``) is recorded beside the training step: the
    step probe takes it from there with no readback of its own (every epilogue on the probe
    model's inputs, the same hash), and one value wrong in it, where the training step's own
    values are right, stops the probe, not the step."""
    from daisychain.gpu.live import step_probe
    from daisychain.gpu.probe import reference_step_probe

    gemm = _attached(gpu)
    assert attach_step_chain(gemm) is None
    backend = Backend(gemm, "test")
    digest, counts = one_tiny_step(gemm)
    assert digest == one_tiny_step(None)[0] and counts.readbacks == 1
    assert getattr(gemm, "probe_step", None) is not None
    ROUND_TRIPS.reset()
    assert step_probe(backend) == reference_step_probe()
    assert ROUND_TRIPS.snapshot().readbacks == 0 and gemm.probe_step is None
    gemm.step = Wrong(gemm.step, path)
    digest, _ = one_tiny_step(gemm)
    assert digest == one_tiny_step(None)[0]  # the training step's bits are right
    with pytest.raises(KernelAuditError, match=message):
        step_probe(backend)


def test_the_chains_hold_tiny_and_small_and_refuse_what_their_epilogues_cannot_hold() -> None:
    from daisychain.gpu.forward_chain import ForwardChain

    for name in ("tiny", "small"):
        c = preset(name)
        n, f = c.batch * c.seq_len, c.mlp_mult * c.width
        assert StepChain.fits(n, c.width, f, c.heads, c.seq_len, c.vocab_size), name
    # a vocabulary row past twice the workgroup memory (the cross-entropy's long rows)
    assert ForwardChain.fits(256, 64, 256, 4, 64, 2049)
    assert not StepChain.fits(256, 64, 256, 4, 64, 2049)
    # a token row of the norms' backward past the workgroup memory; a query row likewise
    assert not BackwardChain.fits(8, 1028, 4112, 64, 2048, 4)
    assert not BackwardChain.fits(2048, 64, 256, 1025, 2048, 8)


def test_a_step_whose_targets_do_not_fit_is_refused(gpu: GpuDevice) -> None:
    gemm = _attached(gpu)
    assert attach_step_chain(gemm) is None
    kwargs = dict(cases()[0][1])
    kwargs["targets"] = kwargs["targets"][:-1]  # one token short
    with pytest.raises(ValueError, match="targets"):
        gemm.step.run(**kwargs)
