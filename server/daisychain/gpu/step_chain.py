"""A whole training step's products in one submit and one readback.

The forward chain (``forward_chain.py``) and the backward chain (``backward_chain.py``) each made
a round trip, with the host's cross-entropy between them. Here the backward is recorded after the
forward in the same encoder, on what the forward left on the GPU (docs/KERNELS.md "The step
chain"):

- ``kernels/cross_entropy_epilogue.wgsl`` makes the logits' gradient from the logits product and
  the targets (uploaded with the step);
- ``kernels/transpose_pack.wgsl`` repacks each forward operand a backward product reads as its
  transpose (the inputs of the weight gradients, P, q, k and v);
- the backward's folds are read where the forward's epilogues wrote the exponents, the norms'
  backward computes ``xhat`` and ``inv`` from the residual stream the forward kept, and P and
  the ReLU's mask are the ones the forward's epilogues wrote.

The host uploads the first block's operand, the residual stream, the weights (in both packings),
the gains and the targets; one readback brings back every product and every operand the GPU made,
forward and backward, and the kernel probe's product (what the peer publishes after the step).
Proof as for every chain: ``run_step_chain_gates`` at backend start; in training the forward's
and the backward's replays check every operand against the host's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.backward_chain import (
    BackwardChain,
    BackwardChainOut,
    BlockBackOut,
    BlockForward,
    Norm,
    PairOut,
    Quantized,
    packed_slices,
)
from daisychain.gpu.backward_chain import reference as backward_reference
from daisychain.gpu.backward_record import (
    COLUMNS,
    ROWS,
    BlockSources,
    Fold,
    NormSources,
    Packed,
    PairSources,
    Recorder,
    Shape,
    Sources,
    read_limbs,
    record_backward,
)
from daisychain.gpu.chain import (
    Outputs,
    Recording,
    epilogue_module,
    epilogue_width,
    f32_bits,
    f32_words,
    gate_exps,
    rows_grid,
    run_chain_gates,
    slot,
)
from daisychain.gpu.forward_chain import (
    BlockWeights,
    ForwardChain,
    ForwardChainOut,
    Recorded,
    forward_case,
    forward_chain_cases,
)
from daisychain.gpu.forward_chain import reference as forward_reference
from daisychain.gpu.gates import GateReport
from daisychain.gpu.gemm import aligned_words, pack_k_major
from daisychain.gpu.kernels import BindingKind, Span, compile_kernel
from daisychain.gpu.probe import (
    ELEMENTWISE_SHAPE,
    PROBE_SHAPE,
    XENT_SHAPE,
    elementwise_operand,
    probe_operands,
    xent_as_product,
    xent_operands,
)
from daisychain.model.gpt import NormCache, cross_entropy, rmsnorm_forward, softmax_causal
from daisychain.numerics.gemm import round_scaled
from daisychain.numerics.quant import quantize, quantize2, quantize3

Int8Array = npt.NDArray[np.int8]
F32Array = npt.NDArray[np.float32]
Exps = npt.NDArray[np.integer]

CROSS_ENTROPY_BINDINGS: list[BindingKind] = ["uniform", "read", "read", "read", "read", "write"]
TRANSPOSE_BINDINGS: list[BindingKind] = ["uniform", "read", "write"]
# Dispatches beyond the forward and backward chains' (besides the step's products): the
# cross-entropy, the final operand's transpose, and the step probe's product, six quantizations
# and cross-entropy; then per block the transposes of r, b, o, v, P, k, q and a.
EPILOGUES = (10, 8)
VOCAB_MAX = 2048  # the longest vocabulary row the cross-entropy epilogue holds (2 EP_ROW_MAX)
# The step probe's quantizations, in ``probe.elementwise_parts``' order: 1, 2, 3 limbs, each per
# row then per column.
PROBE_LIMBS = tuple((count, mode) for count in (1, 2, 3) for mode in (ROWS, COLUMNS))
PROBE_STEP = "probe.step."  # the probe step's names in a training step's recording


@dataclass(frozen=True)
class StepChainOut:
    forward: ForwardChainOut
    backward: BackwardChainOut  # its floats: the logits' gradient first, with ``floats``
    probe: npt.NDArray[np.int32]  # the kernel probe's product (``probe.probe_operands``)
    # the step probe's matrix (``probe.elementwise_operand``) in 1, 2 and 3 limbs, per row then
    # per column, by the limbs epilogue: (L, rows, cols) int8, the blocks' exponents, statuses
    probe_limbs: tuple[tuple[Int8Array, npt.NDArray[np.int32], npt.NDArray[np.uint32]], ...]
    # the probe's cross-entropy gradient (``probe.xent_as_product``) by the step's epilogue
    probe_dlogits: F32Array
    # the probe step's forward and backward (``probe.probe_step_parts``), recorded in the same
    # submit, when the run was given its inputs
    probe_step: tuple[ForwardChainOut, BackwardChainOut] | None = None


@dataclass(frozen=True)
class StepInputs:
    """What ``StepChain.run`` records one training step from."""

    a8: Int8Array
    a_e: Exps
    h: F32Array
    blocks: tuple[BlockWeights, ...]
    gf: F32Array
    eps: np.float32
    wte8: Int8Array
    wte_e: Exps
    batch: int
    heads: int
    scale: np.float32
    targets: npt.NDArray[np.integer]


class StepChain:
    """The chain on a forward and a backward chain's GEMM (the same GEMM, pool and tile)."""

    def __init__(
        self,
        forward: ForwardChain,
        backward: BackwardChain,
        *,
        sources: dict[str, str] | None = None,
    ) -> None:
        """``sources`` replaces a kernel's whole module by its name (the planted-bug tests)."""
        if forward.gemm is not backward.gemm:
            raise ValueError("step chain: the forward and backward chains must share one GEMM")
        self.forward, self.backward, self.gemm = forward, backward, forward.gemm
        self.name = f"{self.gemm.name}-step"
        gpu, sources = self.gemm.gpu, sources or {}

        def kernel(name: str, bindings: list[BindingKind], constants: dict[str, int]) -> Any:
            source = sources.get(name, epilogue_module(name))
            return compile_kernel(gpu, name, bindings, source, constants)

        self.cross_entropy = kernel("cross_entropy_epilogue", CROSS_ENTROPY_BINDINGS,
                                    {"EP_WG": epilogue_width(gpu)})  # fmt: skip
        self.transpose = kernel("transpose_pack", TRANSPOSE_BINDINGS, {})

    @staticmethod
    def fits(n: int, c: int, f: int, heads: int, t: int, vocab: int) -> bool:
        return (
            vocab <= VOCAB_MAX
            and ForwardChain.fits(n, c, f, heads, t, vocab)
            and BackwardChain.fits(n, c, f, t, vocab, n // t * heads)
        )

    def run(
        self,
        a8: Int8Array,
        a_e: Exps,
        h: F32Array,
        blocks: Sequence[BlockWeights],
        gf: F32Array,
        eps: np.float32,
        wte8: Int8Array,
        wte_e: Exps,
        batch: int,
        heads: int,
        scale: np.float32,
        targets: npt.NDArray[np.integer],
        floats: bool = False,
        probe_step: StepInputs | None = None,
    ) -> StepChainOut:
        """The forward chain's inputs, wte's exponents (V) and the ``targets`` (N): the
        forward, the cross-entropy's gradient and the backward in one submit and one readback
        (with ``floats``, the backward's float gradients too, the logits' first); with
        ``probe_step`` (``StepInputs``: the probe step's, ``gpu.probe``) that whole step too,
        in the same submit (``StepChainOut.probe_step``)."""
        inputs = StepInputs(a8, a_e, h, tuple(blocks), gf, eps, wte8, wte_e, batch, heads, scale,
                            targets)  # fmt: skip
        rec = Recording(self.gemm.gpu, self.gemm.pool)
        read = self._record(rec, inputs, floats)
        read_probe = None
        if probe_step is not None:
            read_probe = self._record(rec.scoped(PROBE_STEP), probe_step, False)
        r = Recorder(self.backward, rec, False)
        self._probe(rec, r)
        out = rec.run()
        forward, backward = read(out)
        pm, _, pn = PROBE_SHAPE
        acc = out.words("probe", "<i4").reshape(pm, pn).astype(np.int32)
        limbs = []
        for count, mode in PROBE_LIMBS:
            shape = (1, *ELEMENTWISE_SHAPE, count)
            values, e, status = read_limbs(out, f"probe.{count}.{mode}", shape, mode)
            limbs.append((values[:, 0], e.reshape(-1), status.reshape(-1)))
        xent = out.words("probe.dlogits", "<f4").reshape(XENT_SHAPE).copy()
        made = None if read_probe is None else read_probe(out.scoped(PROBE_STEP))
        return StepChainOut(forward, backward, acc, tuple(limbs), xent, made)

    def _record(
        self, rec: Recording, inputs: StepInputs, floats: bool
    ) -> Callable[[Outputs], tuple[ForwardChainOut, BackwardChainOut]]:
        """One training step's dispatches into ``rec`` (a recording or a scoped one): how to
        read its forward's and backward's outputs."""
        a8, a_e, h, blocks, gf, eps = (
            inputs.a8,
            inputs.a_e,
            inputs.h,
            inputs.blocks,
            inputs.gf,
            inputs.eps,
        )
        wte8, wte_e, batch, heads = inputs.wte8, inputs.wte_e, inputs.batch, inputs.heads
        scale, targets = inputs.scale, inputs.targets
        n, c = a8.shape
        f, vocab = blocks[0].w1_8.shape[1], wte8.shape[0]
        if targets.size != n or wte_e.size != vocab or not blocks:
            raise ValueError("step chain: the targets or wte's exponents do not fit")
        if n % batch or c % heads or not self.fits(n, c, f, heads, n // batch, vocab):
            raise ValueError(f"step chain: ({n}, {c}, {f}, {heads}, {vocab}) does not fit")
        fw = self.forward.record(rec, a8, a_e, h, blocks, gf, eps, wte8, batch, heads, scale)
        r = Recorder(self.backward, rec, floats)
        dlogits = r.made("dlogits", n * vocab * 4)
        col_e = rec.upload("wte.e", np.ascontiguousarray(np.ravel(wte_e), dtype="<i4"))
        params = rec.upload("ce.params", slot((
            n, vocab, 1 << (vocab - 1).bit_length(), f32_bits(n),
        )), uniform=True)  # fmt: skip
        rec.steps.append((self.cross_entropy, [
            Span(params, 0, 16), fw.logits, fw.blocks[-1].norm["next"], col_e,
            rec.upload("targets", np.ascontiguousarray(np.ravel(targets), dtype="<u4")), dlogits,
        ], rows_grid(n)))  # fmt: skip
        src = self._sources(rec, fw, dlogits, col_e, blocks, wte8, eps)
        logits, pairs = record_backward(r, src, Shape(n, c, f, vocab, batch, heads, scale))

        def read(out: Outputs) -> tuple[ForwardChainOut, BackwardChainOut]:
            backward = BackwardChainOut(
                PairOut(**r.read(out, logits)),
                tuple(
                    BlockBackOut(**{k: PairOut(**r.read(out, v)) for k, v in pairs[i].items()})
                    for i in range(len(blocks))
                ),
                tuple(out.words(name, "<f4").copy() for name in r.floats),
            )
            return fw.read(out), backward

        return read

    def _probe(self, rec: Recording, r: Recorder) -> None:
        """The step probe's GPU parts in the same submit (``gpu.probe``): the kernel probe's
        product, and the probe matrix's quantizations by the limbs epilogue, so what a peer
        publishes after the step comes from the step's own kernels with no round trip of its
        own."""
        x = rec.upload("probe.x", f32_words(elementwise_operand()))
        zero = Fold(rec.upload("probe.fold", np.zeros(max(ELEMENTWISE_SHAPE), dtype="<i4")))
        for count, mode in PROBE_LIMBS:
            r.limbs(f"probe.{count}.{mode}", x, (1, *ELEMENTWISE_SHAPE, count), zero, mode)
        acc, e = xent_as_product()
        rows, vocab = XENT_SHAPE
        params = rec.upload("probe.ce.params", slot((
            rows, vocab, 1 << (vocab - 1).bit_length(), f32_bits(rows),
        )), uniform=True)  # fmt: skip
        rec.steps.append((self.cross_entropy, [
            Span(params, 0, 16), rec.upload("probe.logits", acc.view("<u4")),
            rec.upload("probe.row_e", np.full(rows, e, dtype="<i4")),
            rec.upload("probe.col_e", np.zeros(vocab, dtype="<i4")),
            rec.upload("probe.targets", xent_operands()[1].astype("<u4")),
            rec.output("probe.dlogits", rows * vocab * 4),
        ], rows_grid(rows)))  # fmt: skip
        a, b = probe_operands()
        m, k, n = PROBE_SHAPE
        gemm = self.gemm
        out = rec.output("probe", m * n * 4)
        params = rec.upload("probe.params", slot((m, n, -(-k // 4), 0)), uniform=True)
        lut = [gemm._lut] if gemm._lut is not None else []
        tm, tn = gemm.tile
        rec.steps.append((gemm.kernel, [
            Span(params, 0, 16), rec.upload("probe.a", pack_k_major(a)),
            rec.upload("probe.b", pack_k_major(np.ascontiguousarray(b.T))), out, *lut,
        ], (-(-n // tn), -(-m // tm), 1)))  # fmt: skip

    def _transposed(
        self, rec: Recording, name: str, src: Any, slices: int, rows: int, k: int, stride: int
    ) -> Packed:
        """X^T packed (per slice) from X (rows x k) packed K-major ``stride`` words apart."""
        in_m4, out_m4 = 4 * -(-rows // 4), 4 * -(-k // 4)
        out_stride = aligned_words(-(-rows // 4) * out_m4)
        out = rec.scratch(name, slices * out_stride * 4)
        params = rec.upload(name + ".params", slot((
            slices, rows, k, stride, out_stride, in_m4, out_m4, 0,
        )), uniform=True)  # fmt: skip
        groups = -(-(slices * -(-rows // 4) * k) // 64)
        rec.steps.append((self.transpose, [Span(params, 0, 32), src, out],
                          (min(groups, 65535), -(-groups // 65535), 1)))  # fmt: skip
        return Packed(out, out_stride, slices)

    def _sources(
        self,
        rec: Recording,
        fw: Recorded,
        dlogits: Any,
        col_e: Any,
        blocks: Sequence[BlockWeights],
        wte8: Int8Array,
        eps: np.float32,
    ) -> Sources:
        """The backward's inputs: the weights uploaded in the backward's packing, everything
        else from the forward's buffers."""
        n, c = fw.n, fw.c
        qkv, core = fw.qkv, fw.qkv.core
        slices, t, hd = qkv.slices, qkv.t, qkv.hd

        def weight(name: str, b_t: Int8Array) -> Packed:
            x = np.ascontiguousarray(b_t)[None]
            stride = aligned_words(-(-x.shape[2] // 4) * 4 * -(-x.shape[1] // 4))
            return Packed(rec.upload(name, packed_slices(x, stride)), stride, 1)

        def fold(name: str, e: Exps) -> Fold:
            return Fold(rec.upload(name, np.ascontiguousarray(np.ravel(e), dtype="<i4")))

        def tokens_t(name: str, buf: Any, width: int) -> Packed:
            """An (N, width) forward operand as its transpose."""
            stride = -(-width // 4) * 4 * -(-n // 4)
            return self._transposed(rec, name, buf, 1, n, width, stride)

        last = fw.blocks[-1]
        logits = PairSources(
            Fold(col_e), weight("wte.b", wte8.T), c, Fold(last.norm["next"]),
            tokens_t("hq.t", last.norm["packed"], c), c,
        )  # fmt: skip
        made = []
        for i, (w, bufs) in enumerate(zip(blocks, fw.blocks, strict=True)):
            p = f"{i}.bw."
            q, tail, merge = bufs.qkv, bufs.tail, bufs.merge
            a_in, a_e = (fw.a0, fw.a0_e) if i == 0 else (
                fw.blocks[i - 1].norm["packed"], fw.blocks[i - 1].norm["next"])  # fmt: skip
            f = w.w1_8.shape[1]
            pairs = {
                "w2": PairSources(fold(p + "w2.e", w.w2_e), weight(p + "w2", w.w2_8), f,
                                  Fold(tail["next2"]), tokens_t(p + "r.t", tail["r_packed"], f),
                                  f),
                "w1": PairSources(fold(p + "w1.e", w.w1_e), weight(p + "w1", w.w1_8), c,
                                  Fold(tail["next"]), tokens_t(p + "b.t", tail["b_packed"], c),
                                  c),
                "wo": PairSources(fold(p + "wo.e", w.wo_e), weight(p + "wo", w.wo8), c,
                                  Fold(merge["next"]), tokens_t(p + "o.t", merge["packed"], c),
                                  c),
                # dP = dO @ v^T (B^T = v: the transpose of the forward's v^T packing), dv =
                # P^T @ dO; v_e in the split's status words, P_e in the softmax's
                "pv": PairSources(
                    Fold(q["qkv_status"], 4 * qkv.rows, 2, True),
                    self._transposed(rec, p + "v", q["b2"], slices, hd, t, qkv.v_stride), t,
                    Fold(q["status"], 0, 3, True),
                    self._transposed(rec, p + "pt", q["packed"], slices, t, t,
                                     core.packed_stride), t,
                ),
                # dq = dS @ k (B^T = k^T), dk^T = q^T @ dS; k_e after q_e in the split's scales
                "qk": PairSources(
                    Fold(q["scales"], qkv.rows, 1, True),
                    self._transposed(rec, p + "kt", q["b1"], slices, t, hd, qkv.a_stride), hd,
                    Fold(q["scales"], 0, 1, True),
                    self._transposed(rec, p + "qt", q["a1"], slices, t, hd, qkv.a_stride), hd,
                ),
                "qkv": PairSources(fold(p + "wqkv.e", w.wqkv_e), weight(p + "wqkv", w.wqkv8), c,
                                   Fold(a_e), tokens_t(p + "a.t", a_in, c), c),
            }  # fmt: skip
            g1 = (rec.upload(p + "g1", f32_words(w.g1)) if i == 0
                  else fw.blocks[i - 1].norm["g"])  # fmt: skip
            h_in = fw.h0 if i == 0 else fw.blocks[i - 1].norm["h_out"]
            made.append(BlockSources(
                pairs, tail["relu"], q["p_out"], NormSources(g1, h_in, None),
                NormSources(tail["g"], tail["h_out"], None),
            ))  # fmt: skip
        normf = NormSources(last.norm["g"], last.norm["h_out"], None)
        return Sources(dlogits, logits, normf, made, eps)


# ------------------------------------------------------------------------------------------------
# the reference and the gate


def reference(
    a8: Int8Array,
    a_e: Exps,
    h: F32Array,
    blocks: Sequence[BlockWeights],
    gf: F32Array,
    eps: np.float32,
    wte8: Int8Array,
    wte_e: Exps,
    batch: int,
    heads: int,
    scale: np.float32,
    targets: npt.NDArray[np.integer],
    floats: bool = False,
) -> StepChainOut | None:
    """The forward chain's reference, the model's cross-entropy, then the backward chain's
    reference on what the forward made: None where either refuses."""
    fw = forward_reference(a8, a_e, h, blocks, gf, eps, wte8, batch, heads, scale)
    if fw is None:
        return None
    n = a8.shape[0]
    t, slices = n // batch, batch * heads
    hq = fw.blocks[-1].a_next
    with np.errstate(over="ignore", invalid="ignore"):
        logits = round_scaled(fw.logits.astype(np.float64), hq.e + np.ravel(wte_e)[None, :])
        _, dlogits = cross_entropy(logits, np.ravel(targets).astype(np.intp))
    back: list[BlockForward] = []
    for i, (w, made) in enumerate(zip(blocks, fw.blocks, strict=True)):
        a = Quantized(a8, a_e) if i == 0 else Quantized(fw.blocks[i - 1].a_next.q8,
                                                        fw.blocks[i - 1].a_next.e)  # fmt: skip
        g1 = w.g1
        x1 = h
        o, tail, q = made.o, made.tail, made.qkv
        with np.errstate(over="ignore", invalid="ignore"):
            h1 = h + round_scaled(tail.acc_wo.astype(np.float64), o.e + w.wo_e.reshape(1, -1))
            h = h1 + round_scaled(tail.acc2.astype(np.float64), tail.r_e + w.w2_e.reshape(1, -1))
            u = round_scaled(tail.acc1.astype(np.float64), tail.b_e + w.w1_e.reshape(1, -1))
            scores = round_scaled(q.acc1.astype(np.float64), q.q_e + q.k_e.reshape(slices, 1, t))
            p = softmax_causal(scores[None], scale)[0]
        back.append(BlockForward(
            _norm(x1, g1, eps), a, Quantized(w.wqkv8, w.wqkv_e), Quantized(q.q8, q.q_e),
            Quantized(q.k8, q.k_e), Quantized(q.v8, q.v_e), p, Quantized(q.p8, q.p_e),
            Quantized(o.q8, o.e), Quantized(w.wo8, w.wo_e), _norm(h1, w.g2, eps),
            Quantized(tail.b8, tail.b_e), Quantized(w.w1_8, w.w1_e), u > 0,
            Quantized(tail.r8, tail.r_e), Quantized(w.w2_8, w.w2_e),
        ))  # fmt: skip
    bw = backward_reference(
        dlogits, Quantized(hq.q8, hq.e), Quantized(wte8, np.ravel(wte_e).reshape(-1, 1)),
        _norm(h, gf, eps), back, batch, heads, scale, floats,
    )  # fmt: skip
    if bw is None:
        return None
    if floats:
        bw = replace(bw, floats=(dlogits.reshape(-1), *bw.floats))
    pa, pb = probe_operands()
    probe = np.matmul(pa.astype(np.int64), pb.astype(np.int64)).astype(np.int32)
    logits, targets = xent_operands()
    _, xent = cross_entropy(logits.copy(), targets)
    return StepChainOut(fw, bw, probe, probe_limbs_reference(), xent)


def probe_limbs_reference() -> tuple[
    tuple[Int8Array, npt.NDArray[np.int32], npt.NDArray[np.uint32]], ...
]:
    """The step probe matrix's quantizations as ``probe.elementwise_parts`` makes them."""
    x = elementwise_operand()
    made = []
    for count, mode in PROBE_LIMBS:
        *values, e = (quantize, quantize2, quantize3)[count - 1](x.copy(), 1 if mode == ROWS else 0)
        blocks = ELEMENTWISE_SHAPE[0] if mode == ROWS else ELEMENTWISE_SHAPE[1]
        made.append((
            np.stack([v.astype(np.int8) for v in values]), e.astype(np.int32).reshape(-1),
            np.zeros(blocks, np.uint32),
        ))  # fmt: skip
    return tuple(made)


def _norm(x: F32Array, g: F32Array, eps: np.float32) -> Norm:
    _, cache = rmsnorm_forward(x, g, eps)
    assert isinstance(cache, NormCache)
    return Norm(cache.xhat, cache.inv, g)


def step_chain_cases() -> list[tuple[str, dict[str, Any]]]:
    """The forward chain's cases with wte's exponents, targets and every float gradient: two
    blocks at odd sizes, one at a tile's edge, a non-finite residual (refused), and one with
    tiny's vocabulary."""
    cases = []
    # tiny's vocabulary: the cross-entropy's rows twice the workgroup memory (the tree's first
    # level taken as the leaves are made)
    shapes = [*forward_chain_cases(), forward_case(2, 2, 8, 16, 4, 32, 2048, 1)]
    for i, (name, kwargs) in enumerate(shapes):
        n, vocab = kwargs["a8"].shape[0], kwargs["wte8"].shape[0]
        targets = (gate_exps(23, i, n, 0, vocab - 1)).astype(np.uint32)
        cases.append((name, {
            **kwargs, "wte_e": gate_exps(24, i, vocab, -9, -5), "targets": targets,
            "floats": True,
        }))  # fmt: skip
    return cases


def run_step_chain_gates(chain: StepChain) -> GateReport:
    """Every case through the chain on a poisoned pool against ``reference``: every forward and
    backward output and every float gradient exactly, a non-zero status where it refuses."""
    statuses = ["qkv_status", "status", "b_status", "r_status", "rows_status", "cols_status"]
    return run_chain_gates(
        chain.name, chain.gemm.pool, step_chain_cases(), chain.run, reference, statuses
    )
