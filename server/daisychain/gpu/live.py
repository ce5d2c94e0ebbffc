"""A gated kernel in live training: every product audited, a probe hash per step.

The gates prove a kernel once, at start, on fixed shapes. In training every product a kernel
computes is also audited (``audit.audit``: the structural danger cells, then cells from a seeded
schedule that rotates per product shape so every cell is eventually checked, then the exact row
and column sums, which catch a single wrong cell anywhere on every call), and a failing audit
stops the step with ``KernelAuditError`` instead of letting a wrong bit into the weights; the
caller demotes the kernel. Batched products may be audited behind the step, on a worker thread
(``AuditedBatchedMatmul(..., background=True)``): then the step raises at its next ``settle``,
which it reaches before any value leaves it (``GemmOps.settle``). ``step_probe`` hashes the fixed
probe product through the live kernel: peers publish it with their weight hash so a device whose
kernel drifted is named, not just detected.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, Literal, Protocol, cast

import numpy as np
import numpy.typing as npt
from threadpoolctl import ThreadpoolController

from daisychain.cpu import fused as cpufused
from daisychain.gpu.attention_chain import bits_sum
from daisychain.gpu.audit import Int8Array, Int32Array, Operand, audit, first_failing_slice
from daisychain.gpu.backend import Backend
from daisychain.gpu.backward_chain import (
    BlockForward,
    Norm,
    PairOperands,
    Quantized,
    pair_operands,
)
from daisychain.gpu.forward_chain import BlockWeights, ForwardChainOut, GpuOperand
from daisychain.gpu.gates import IntGemm
from daisychain.gpu.probe import probe_step_parts, probe_step_plan, same_plan, step_probe_hash
from daisychain.gpu.replay import BackwardReplay, ForwardReplay, Inputs
from daisychain.gpu.step_chain import StepInputs
from daisychain.model.ops import (
    NUMPY_OPS,
    BackwardPlan,
    ForwardPlan,
    GemmOps,
    IntGemmOps,
    Passes,
    Product,
    QParts,
)
from daisychain.numerics.quant import FloatArray, IntArray, int8_operand, int8_operands

AUDIT_SAMPLES = 16  # scheduled cells per product, after the structural ones
# Background audits queued behind the step at most: a product past this waits for the oldest.
# Each queued audit keeps its product and limb stack alive (up to 24 MB each for ``small``'s
# logits gradient), so on a busy machine an unbounded queue would hold most of a step's
# products at once (a larger model's too); a longer queue gains nothing, since every audit must
# end before the step does. Measured on ``small`` under load: peak RSS 337-424 MB unbounded,
# 330-346 MB with 4 (294 MB with the audits in the foreground; the worker's own allocations
# add the rest).
MAX_BEHIND = 4


class KernelAuditError(RuntimeError):
    """A live product disagreed with exact arithmetic: the kernel must not be used again."""


class AuditedMatmul:
    """``gemm.matmul_int`` with every result audited.

    Each output shape (M, N) has its own rotation counter: its n-th product checks the n-th
    group of its cell schedule (``audit.scheduled_cells``), so every cell of every live shape is
    checked within ``ceil(M N / samples)`` products of that shape, on top of the checksums.
    ``checksum=False`` leaves only the sampled cells (tests use it to show what they miss).
    """

    def __init__(
        self,
        gemm: IntGemm,
        samples: int = AUDIT_SAMPLES,
        tile: tuple[int, int] = (32, 32),
        *,
        seed: int = 0,
        checksum: bool = True,
    ) -> None:
        self.gemm, self.samples, self.tile = gemm, samples, tile
        self.seed, self.checksum = seed, checksum
        self.calls = 0
        self.rotations: dict[tuple[int, int], int] = {}

    def __call__(self, a: Int8Array, b: Int8Array) -> Int32Array:
        out = self.gemm.matmul_int(a, b)
        shape = (a.shape[0], b.shape[1])
        rotation = self.rotations.get(shape, 0)
        report = audit(
            a,
            b,
            out,
            self.samples,
            seed=self.seed,
            rotation=rotation,
            tile=self.tile,
            checksum=self.checksum,
        )
        self.rotations[shape] = rotation + 1
        self.calls += 1
        if not report.ok:
            raise KernelAuditError(
                f"{self.gemm.name}: live audit failed at shape {a.shape} @ {b.shape}: "
                f"{report.describe()}; the kernel is demoted (restart to fall back to numpy)"
            )
        return out


class BatchedGemm(IntGemm, Protocol):
    """A GEMM that also takes batched operands, (..., M, K) @ (..., K, N), in one call."""

    def matmul_int_batched(self, a: Int8Array, b: Int8Array) -> Int32Array: ...


class AuditedBatchedMatmul:
    """``gemm.matmul_int_batched`` (a GEMM that takes (..., M, K) @ (..., K, N) in one call,
    as the CPU int8 GEMM does) with every 2-D slice audited, vectorized over the batch
    (``audit.first_failing_slice``): the same cells and sums as ``AuditedMatmul`` per slice,
    one rotation counter per output shape (M, N), shared by the slices of a call. Takes the
    int8-valued float32 operands the ops hold (or their int8 values, ``a8``/``b8``, or int8
    operands): the GEMM gets them as int8; the numpy audit reads the float32 values (the same
    integers) without converting them back, the fused one (``fused``) the int8 the GEMM got.

    ``background=True`` returns each product at once and audits it on one worker thread while
    the model goes on (numpy releases the GIL in the audit's BLAS products and array passes).
    Then a product is not proven when it returns: ``settle()`` waits for every audit submitted
    so far and raises the first failure, and the caller must settle before anything computed
    from the products leaves it (``gpt.forward_backward`` does). Which cells each audit checks
    is fixed when its product is computed (the rotation is taken on the caller's thread, in
    product order), so both modes check exactly the same cells.
    """

    def __init__(
        self,
        gemm: BatchedGemm,
        audited: AuditedMatmul,
        *,
        background: bool = False,
        fused: cpufused.FusedPasses | None = None,
    ) -> None:
        self.gemm, self.audited = gemm, audited
        # The same checks in a few compiled passes over the int8 operands the GEMM was given
        # (cpu/fused.py, gated against this module's numpy audit): several times cheaper than
        # numpy's thin BLAS products, sums and gathers. The report is still numpy's.
        self._fused = fused
        # The audit's float32 BLAS products are thin (M x K times K x 2-6, the danger lines):
        # one thread does them at memory speed, and a second one mostly waits -- spinning, in
        # OpenBLAS -- for a core that the int8 GEMM's threads and the numpy work want. On the
        # 2-core machine under a load average of 4, an audited ``small`` step took 2.6 s with
        # two BLAS threads and 0.64 s with one (docs/BENCHMARKS_LOG.md, 2026-12-05, ``step``).
        # Speed only: the audit's products are exact whatever the thread count.
        self._blas = ThreadpoolController().select(user_api="blas")
        # One worker, so the audits queue in product order and take one core at most.
        self._worker = (
            ThreadPoolExecutor(1, thread_name_prefix="daisychain-audit") if background else None
        )
        self._outstanding: list[Future[None]] = []
        # The last forward chain's outputs, answering the forward's calls in order (``forward``)
        self._replay: ForwardReplay | None = None
        # The last backward chain's, answering the backward's pairs in order (``backward``),
        # and one the step chain made with the forward, waiting for the backward's start
        self._back: BackwardReplay | None = None
        self._pending_back: BackwardReplay | None = None

    def __call__(
        self,
        a: FloatArray,
        b: FloatArray,
        *,
        a8: Int8Array | None = None,
        b8: Int8Array | None = None,
    ) -> Int32Array:
        return self.many([(a, b, a8, b8)])[0]

    def many(self, products: Sequence[Product]) -> list[Int32Array]:
        """Several independent products, each ``(a, b, a8, b8)`` as ``__call__`` takes them, in
        one call of the GEMM where it takes several at once (``matmul_int_many``: one submit
        and one readback on wgpu), else one call each; every product audited as ``__call__``
        audits it, in the order given."""
        # a8/b8: the operands already as int8 (made in the pass that quantized them), else cast
        # here; ``a``/``b`` may themselves be int8 (the fused passes' gradient limbs)
        operands = [int8_operands(a, b, a8, b8) for a, b, a8, b8 in products]
        together = getattr(self.gemm, "matmul_int_many", None)
        outs: list[Int32Array]
        replay = self._replay if len(operands) == 1 else None
        replayed = replay.logits(*operands[0][2:]) if replay is not None else None
        back = self._back if len(operands) == 2 else None
        pair = back.pair([(a8, b8) for _, _, a8, b8 in operands]) if back is not None else None
        if replayed is not None:  # the forward chain computed it (gpu.replay)
            name = self.gemm.forward.name  # type: ignore[attr-defined]
            self._refuse(name, "final norm", replayed[1])
            outs = [replayed[0]]
        elif pair is not None:  # a pair the backward chain computed (gpu.replay)
            self._refuse(self.gemm.backward.name, "limbs", pair[1])  # type: ignore[attr-defined]
            outs = pair[0]
        elif together is not None:
            outs = together([(a8, b8) for _, _, a8, b8 in operands])
        else:
            outs = [self.gemm.matmul_int_batched(a8, b8) for _, _, a8, b8 in operands]
        for (a, b, a8, b8), out in zip(operands, outs, strict=True):
            # the fused audit reads the int8 operands the GEMM was given, numpy's the float32
            self._audit(a8 if self._fused is not None else a,
                        b8 if self._fused is not None else b, out)  # fmt: skip
        return outs

    def forward(self, plan: ForwardPlan) -> None:
        """Run the whole forward of ``plan`` through the GEMM's forward chain (``gpu.
        forward_chain``: one submit and one readback) and keep its outputs for the calls that
        follow (``attention_qkv``, ``block_tail``, the logits product), which take them in order
        instead of running their own chains (``gpu.replay``). Each is audited and its operand
        checked against the host's when it is taken, as if it had just been computed. A shape
        the chain cannot hold leaves every call to compute as before."""
        self._replay, self._back, self._pending_back = None, None, None
        pending = getattr(self.gemm, "probe_step", None)
        self.gemm.probe_step = None  # type: ignore[attr-defined]  # taken once, or dropped
        if pending is not None and same_plan(plan, pending[0]):
            # the probe step, recorded in the last training step's submit: no run of its own
            self._replay, self._pending_back = pending[1], pending[2]
            return
        chain = self.gemm.forward  # type: ignore[attr-defined]
        n, c = plan.a[0].shape
        f, vocab = plan.w1[0][0].shape[1], plan.wte[0].shape[0]
        if n % plan.batch or not chain.fits(n, c, f, plan.heads, n // plan.batch, vocab):
            return
        inputs, first = _step_inputs(plan)
        step = getattr(self.gemm, "step", None) if plan.targets is not None else None
        if step is not None and step.fits(n, c, f, plan.heads, n // plan.batch, vocab):
            # the whole step: the backward's pairs wait for the backward (``backward``); the
            # probe step (``gpu.probe``) in the same submit, for the step probe that follows
            probe_plan = probe_step_plan()
            probe, probe_first = _step_inputs(probe_plan)
            got = step.run(*astuple_shallow(inputs), probe_step=probe)
            self._replay, self._pending_back = _replays(got.forward, got.backward, inputs, first)
            self.gemm.step_probe = got  # type: ignore[attr-defined]  # (``step_probe``)
            if got.probe_step is not None:
                forward, backward = got.probe_step
                self.gemm.probe_step = (  # type: ignore[attr-defined]
                    probe_plan,
                    *_replays(forward, backward, probe, probe_first),
                )
            return
        out = chain.run(inputs.a8, inputs.a_e, plan.h, inputs.blocks, plan.gf, plan.eps,
                        inputs.wte8, plan.batch, plan.heads, plan.scale)  # fmt: skip
        self._replay = ForwardReplay(out, Inputs(first, inputs.blocks, inputs.wte8))

    def backward(self, plan: BackwardPlan) -> None:
        """Run the whole backward of ``plan`` through the GEMM's backward chain (``gpu.
        backward_chain``: one submit and one readback) and keep its pairs for the backward's
        ``many`` calls, which take them in order (``gpu.replay``): each pair's limbs checked
        against the host's, each product audited as if it had just been computed. A shape the
        chain cannot hold leaves every pair to compute as before."""
        self._back, pending, self._pending_back = None, self._pending_back, None
        if pending is not None:  # the step chain ran it with the forward
            self._back = pending
            return
        chain = self.gemm.backward  # type: ignore[attr-defined]
        n, vocab = plan.dlogits.shape
        c = plan.hq[0].shape[1]
        f = plan.blocks[0].w1[0].shape[1] if plan.blocks else 0
        t, slices = n // plan.batch, plan.batch * plan.heads
        if not plan.blocks or n % plan.batch or not chain.fits(n, c, f, t, vocab, slices):
            return

        def q(x: QParts, per_head: bool = False) -> Quantized:
            q8, e = int8_operand(x[0], x[2]), x[1]
            if not per_head:
                return Quantized(q8, e)
            return Quantized(q8.reshape(slices, *q8.shape[-2:]), e.reshape(slices, *e.shape[-2:]))

        blocks = [
            BlockForward(
                Norm(b.xhat1, b.inv1, b.g1), q(b.a), q(b.wqkv), q(b.q, True), q(b.k, True),
                q(b.v, True), b.p.reshape(slices, t, t), q(b.pq, True), q(b.o), q(b.wo),
                Norm(b.xhat2, b.inv2, b.g2), q(b.b), q(b.w1), b.relu, q(b.r), q(b.w2),
            )
            for b in plan.blocks
        ]  # fmt: skip
        hq, wte, normf = q(plan.hq), q(plan.wte), Norm(plan.xhatf, plan.invf, plan.gf)
        out = chain.run(plan.dlogits, hq, wte, normf, blocks, plan.batch, plan.heads,
                        plan.scale)  # fmt: skip
        self._back = BackwardReplay(out, pair_operands(hq, wte, blocks))

    def mlp(
        self,
        b: FloatArray,
        w1: FloatArray,
        w2: FloatArray,
        row_e: IntArray,
        col_e: IntArray,
        operand: Callable[[Int32Array], tuple[Int8Array, IntArray]],
        *,
        b8: Int8Array | None = None,
        w1_8: Int8Array | None = None,
        w2_8: Int8Array | None = None,
    ) -> tuple[Int32Array, Int32Array] | None:
        """A block's MLP through the GEMM's chain (``gpu.mlp_chain``: both products and the
        work between them, one submit and one readback): (acc1, acc2), each audited as
        ``__call__`` audits a product. ``operand(acc1)`` is the host's own (r8, r_e) from the
        first product; the GPU's must equal it, else the step stops here (the second product
        was computed from the GPU's, so it is audited against that operand only once proven)."""
        chain = self.gemm.mlp  # type: ignore[attr-defined]
        if not chain.fits(b.shape[0], b.shape[1], w1.shape[1], w2.shape[1]):
            return None  # a shape the chain cannot hold: the caller computes it apart
        b8, w1_8, w2_8 = int8_operand(b, b8), int8_operand(w1, w1_8), int8_operand(w2, w2_8)
        out = chain.run(b8, w1_8, row_e, col_e, w2_8)
        self._audit(b8 if self._fused is not None else b,
                    w1_8 if self._fused is not None else w1, out.acc1)  # fmt: skip
        r8, r_e = operand(out.acc1)
        self._refuse(chain.name, "MLP", np.any(out.r8 != r8, axis=1) | (out.r_e != r_e).reshape(-1))
        r = r8 if self._fused is not None else r8.astype(np.float32)
        self._audit(r, w2_8 if self._fused is not None else w2, out.acc2)
        return out.acc1, out.acc2

    def attention(
        self,
        q: FloatArray,
        kt: FloatArray,
        v: FloatArray,
        q_e: IntArray,
        k_e: IntArray,
        scale: np.float32,
        operand: Callable[[Int32Array], tuple[Int8Array, IntArray, FloatArray]],
        *,
        q8: Int8Array | None = None,
        kt8: Int8Array | None = None,
        v8: Int8Array | None = None,
    ) -> tuple[Int32Array, Int32Array] | None:
        """Every head's scores, softmax and second product through the GEMM's chain
        (``gpu.attention_chain``: one submit and one readback), heads (B, H, T, hd): (acc1,
        acc2), each audited as ``__call__`` audits a batched product. ``operand(acc1)`` is the
        host's own (P8, P_e, P); the GPU's operand must equal it, and its P bits must sum to
        the same checksum (one ulp of P anywhere shows), before the second product is
        trusted."""
        chain = self.gemm.attention  # type: ignore[attr-defined]
        if not chain.fits(int(np.prod(q.shape[:-2])), q.shape[-2], q.shape[-1]):
            return None  # a shape the chain cannot hold: the caller computes it apart
        q8, kt8, v8 = int8_operand(q, q8), int8_operand(kt, kt8), int8_operand(v, v8)
        lead, t, hd = q.shape[:-2], q.shape[-2], q.shape[-1]
        heads = int(np.prod(lead))
        out = chain.run(
            q8.reshape(heads, t, hd), kt8.reshape(heads, hd, t), v8.reshape(heads, t, hd),
            q_e.reshape(-1), k_e.reshape(-1), scale,
        )  # fmt: skip
        acc1 = out.acc1.reshape(*lead, t, t)
        fused = self._fused is not None
        self._audit(q8 if fused else q, kt8 if fused else kt, acc1)
        p8, p_e, p = operand(acc1)
        self._refuse(chain.name, "attention", _softmax_differs(out, p8, p_e, p))
        acc2 = out.acc2.reshape(*lead, t, hd)
        self._audit(p8 if fused else p8.astype(np.float32), v8 if fused else v, acc2)
        return acc1, acc2

    def attention_qkv(
        self,
        a: FloatArray,
        wqkv: FloatArray,
        a_e: IntArray,
        w_e: IntArray,
        batch: int,
        heads: int,
        scale: np.float32,
        heads_operand: Callable[[Int32Array], tuple[Any, ...]],
        p_operand: Callable[[Int32Array], tuple[Int8Array, IntArray, FloatArray]],
        *,
        a8: Int8Array | None = None,
        w8: Int8Array | None = None,
    ) -> tuple[Int32Array, Int32Array, Int32Array] | None:
        """A block's attention from its input through the GEMM's qkv chain (``gpu.qkv_chain``:
        one submit and one readback): (acc_qkv, acc1, acc2), each audited. The GPU's q, k, v
        must equal the host's (``heads_operand(acc_qkv)``: q8, q_e, k8, k_e, v8, v_e) before
        the scores are trusted, and its P as ``attention`` checks it before the second
        product is."""
        chain = self.gemm.qkv  # type: ignore[attr-defined]
        if not chain.fits(a.shape[0], a.shape[1], heads, a.shape[0] // batch):
            return None  # a shape the chain cannot hold: the caller computes it apart
        a8, w8 = int8_operand(a, a8), int8_operand(wqkv, w8)
        replayed = self._replay.qkv(a8, a_e, w8, w_e) if self._replay is not None else None
        if replayed is not None:  # the forward chain ran it from its own operand (gpu.replay)
            out, wrong = replayed
            self._refuse(self.gemm.forward.name, "norm", wrong)  # type: ignore[attr-defined]
        else:
            out = chain.run(a8, w8, a_e, w_e, batch, heads, scale)
        fused = self._fused is not None
        self._audit(a8 if fused else a, w8 if fused else wqkv, out.acc_qkv)
        q8, q_e, k8, k_e, v8, v_e = heads_operand(out.acc_qkv)
        t, hd = out.q8.shape[1], out.q8.shape[2]
        slices = out.q8.shape[0]
        mine = (q8.reshape(slices, t, hd), k8.reshape(slices, t, hd), v8.reshape(slices, t, hd))
        wrong = np.any(mine[0] != out.q8, axis=-1).reshape(-1)
        wrong |= np.any(mine[1] != out.k8, axis=-1).reshape(-1)
        wrong |= (q_e.reshape(-1) != out.q_e.reshape(-1)) | (k_e.reshape(-1) != out.k_e.reshape(-1))
        wrong_v = np.any(mine[2] != out.v8, axis=1).reshape(-1) | (
            v_e.reshape(-1) != out.v_e.reshape(-1)
        )
        self._refuse(chain.name, "qkv", np.concatenate([wrong, wrong_v]))
        lead = q8.shape[:-2]
        acc1 = out.acc1.reshape(*lead, t, t)
        kt8 = np.ascontiguousarray(k8.swapaxes(-1, -2))
        q_ref = q8 if fused else q8.astype(np.float32)
        kt_ref = kt8 if fused else kt8.astype(np.float32)
        self._audit(q_ref, kt_ref, acc1)
        p8, p_e, p = p_operand(acc1)
        self._refuse(chain.name, "attention", _softmax_differs(out, p8, p_e, p))
        acc2 = out.acc2.reshape(*lead, t, hd)
        v_ref = v8 if fused else v8.astype(np.float32)
        self._audit(p8 if fused else p8.astype(np.float32), v_ref, acc2)
        return out.acc_qkv, acc1, acc2

    def block_tail(
        self,
        o: FloatArray,
        wo: FloatArray,
        w1: FloatArray,
        w2: FloatArray,
        o_e: IntArray,
        wo_e: IntArray,
        w1_e: IntArray,
        h: FloatArray,
        g: FloatArray,
        eps: np.float32,
        norm_operand: Callable[[Int32Array], tuple[Int8Array, IntArray, FloatArray]],
        mlp_operand: Callable[[Int32Array], tuple[Int8Array, IntArray]],
        *,
        o8: Int8Array | None = None,
        wo8: Int8Array | None = None,
        w1_8: Int8Array | None = None,
        w2_8: Int8Array | None = None,
    ) -> tuple[Int32Array, Int32Array, Int32Array] | None:
        """A block's tail through the GEMM's chain (``gpu.block_chain``: the output product, the
        residual and norm, the MLP; one submit and one readback): (acc_wo, acc1, acc2), each
        audited. Each GPU operand must equal the host's (``norm_operand(acc_wo)``: b8, b_e and
        bn, whose bits the chain's checksum must match; ``mlp_operand(acc1)``: r8, r_e) before
        the product computed from it is trusted."""
        chain = self.gemm.block  # type: ignore[attr-defined]
        if not chain.fits(o.shape[0], o.shape[1], w1.shape[1]):
            return None  # a shape the chain cannot hold: the caller computes it apart
        o8, wo8 = int8_operand(o, o8), int8_operand(wo, wo8)
        w1_8, w2_8 = int8_operand(w1, w1_8), int8_operand(w2, w2_8)
        weights = (wo8, wo_e, w1_8, w1_e, w2_8)
        replayed = self._replay.tail(o8, o_e, weights, g) if self._replay is not None else None
        if replayed is not None:  # the forward chain ran it from its own o (gpu.replay)
            out, wrong = replayed
            self._refuse(self.gemm.forward.name, "merge", wrong)  # type: ignore[attr-defined]
        else:
            out = chain.run(o8, wo8, o_e, wo_e, h, g, eps, w1_8, w1_e, w2_8)
        fused = self._fused is not None
        self._audit(o8 if fused else o, wo8 if fused else wo, out.acc_wo)
        b8, b_e, bn = norm_operand(out.acc_wo)
        wrong = np.any(b8 != out.b8, axis=1) | (out.b_e != b_e).reshape(-1)
        wrong |= out.b_sum != bits_sum(bn)
        self._refuse(chain.name, "norm", wrong)
        self._audit(b8 if fused else b8.astype(np.float32), w1_8 if fused else w1, out.acc1)
        r8, r_e = mlp_operand(out.acc1)
        wrong = np.any(r8 != out.r8, axis=1) | (out.r_e != r_e).reshape(-1)
        self._refuse(chain.name, "MLP", wrong)
        self._audit(r8 if fused else r8.astype(np.float32), w2_8 if fused else w2, out.acc2)
        return out.acc_wo, out.acc1, out.acc2

    @staticmethod
    def _refuse(chain: str, epilogue: str, wrong: npt.NDArray[np.bool_]) -> None:
        """Stop the step if any row of an epilogue's operand differs from the host's."""
        if wrong.any():
            raise KernelAuditError(
                f"{chain}: the {epilogue} epilogue's operand differs from the host's at row "
                f"{int(np.flatnonzero(wrong)[0])} of {wrong.size}; the kernel is demoted "
                "(restart to fall back to numpy)"
            )

    def _audit(self, a: Operand, b: Operand, out: Int32Array) -> None:
        """Audit ``out`` now, or queue it on the worker (``background``)."""
        au = self.audited
        shape = (a.shape[-2], b.shape[-1])
        rotation = au.rotations.get(shape, 0)
        au.rotations[shape] = rotation + 1
        au.calls += 1
        if self._worker is None:
            self.check(a, b, out, rotation)
            return
        if len(self._outstanding) >= MAX_BEHIND:
            # One worker runs them in order: once this one ended, all before it did, and at
            # most MAX_BEHIND are left queued with this product. A failure waits for settle.
            wait([self._outstanding[-MAX_BEHIND]])
        self._outstanding.append(self._worker.submit(self.check, a, b, out, rotation))

    def check(self, a: Operand, b: Operand, out: Int32Array, rotation: int) -> None:
        """Audit one product, (..., M, K) @ (..., K, N) -> ``out``, at ``rotation`` of its
        shape's schedule; raise ``KernelAuditError`` naming the first failing slice."""
        au = self.audited
        lead = a.shape[:-2]
        a3, b3, out3 = (a, b, out) if lead else (a[None], b[None], out[None])  # 2-D: one slice
        if self._fused is not None:
            bad = self._fused.first_failing_slice(
                a3.astype(np.int8, copy=False), b3.astype(np.int8, copy=False), out3,
                au.samples, seed=au.seed, rotation=rotation, tile=au.tile,
            )  # fmt: skip
        else:
            with self._blas.limit(limits=1):
                bad = first_failing_slice(
                    a3, b3, out3, au.samples, seed=au.seed, rotation=rotation, tile=au.tile
                )
        if bad is not None:
            at = bad if lead else ()
            report = audit(a[at], b[at], out[at], au.samples, seed=au.seed,
                           rotation=rotation, tile=au.tile)  # fmt: skip
            where = f", slice {bad}" if lead else ""
            raise KernelAuditError(
                f"{self.gemm.name}: live audit failed at shape {a.shape} @ {b.shape}{where}: "
                f"{report.describe()}; the kernel is demoted (restart to fall back to numpy)"
            )

    def settle(self) -> None:
        """Wait for every audit submitted so far (all of them, even past a failure, so none is
        left running) and raise the first failure in product order. A no-op in the foreground
        mode, where each product was audited before it returned."""
        outstanding, self._outstanding = self._outstanding, []
        failures = [f.exception() for f in outstanding]  # waits for each
        first = next((e for e in failures if e is not None), None)
        if first is not None:
            raise first


def _softmax_differs(
    out: Any, p8: Int8Array, p_e: IntArray, p: FloatArray
) -> npt.NDArray[np.bool_]:
    """Per query row of an attention chain's ``out``: whether its P_q, P_e or P checksum differ
    from the host's ``p8``, ``p_e`` and ``p`` (one ulp of P anywhere shows in the checksum)."""
    slices, t, _ = out.p8.shape
    wrong = np.any(p8.reshape(slices, t, t) != out.p8, axis=-1).reshape(-1)
    wrong |= out.p_e.reshape(-1) != p_e.reshape(-1)
    wrong |= out.p_sum.reshape(-1) != bits_sum(p.reshape(slices, t, t)).reshape(-1)
    result: npt.NDArray[np.bool_] = wrong
    return result


def _step_inputs(plan: ForwardPlan) -> tuple[StepInputs, GpuOperand]:
    """What a step (or forward) chain records from ``plan``, and the first block's operand as
    the replays check it."""
    a, a_e, a8 = plan.a
    n = a.shape[0]
    blocks = tuple(
        BlockWeights(
            int8_operand(wqkv[0], wqkv[2]), wqkv[1].reshape(-1), int8_operand(wo[0], wo[2]),
            wo[1].reshape(-1), int8_operand(w1[0], w1[2]), w1[1].reshape(-1),
            int8_operand(w2[0], w2[2]), w2[1].reshape(-1), g1, g2,
        )
        for wqkv, wo, w1, w2, g1, g2 in zip(
            plan.wqkv, plan.wo, plan.w1, plan.w2, plan.g1, plan.g2, strict=True
        )
    )  # fmt: skip
    a8 = int8_operand(a, a8)
    wte8 = int8_operand(plan.wte[0], plan.wte[2])
    zeros = np.zeros(n, np.uint32)
    first = GpuOperand(a8, a_e.reshape(n, 1).astype(np.int32), zeros, zeros)
    targets = plan.targets if plan.targets is not None else np.zeros(n, np.int64)
    inputs = StepInputs(a8, a_e, plan.h, blocks, plan.gf, plan.eps, wte8, plan.wte[1],
                        plan.batch, plan.heads, plan.scale, targets)  # fmt: skip
    return inputs, first


def astuple_shallow(inputs: StepInputs) -> tuple[Any, ...]:
    """``inputs``' fields in order, not copied (``dataclasses.astuple`` would deep-copy)."""
    return tuple(getattr(inputs, f.name) for f in dataclasses.fields(inputs))


def _replays(
    forward: ForwardChainOut, backward: Any, inputs: StepInputs, first: GpuOperand
) -> tuple[ForwardReplay, BackwardReplay]:
    """A step chain run's replays: the forward's products, then the backward's pairs."""
    made = Inputs(first, inputs.blocks, inputs.wte8)
    wte_e = np.asarray(inputs.wte_e, dtype=np.int32)
    return ForwardReplay(forward, made), BackwardReplay(
        backward, _made_operands(forward, first, inputs.blocks, inputs.wte8, wte_e)
    )


def _made_operands(
    fw: ForwardChainOut,
    first: GpuOperand,
    blocks: Sequence[BlockWeights],
    wte8: Int8Array,
    wte_e: IntArray,
) -> dict[str, PairOperands]:
    """The backward's pair operands as the step chain's forward made them (each checked against
    the host's by the forward's replay before the backward starts)."""

    def q(x: GpuOperand) -> Quantized:
        return Quantized(x.q8, x.e)

    back = []
    for i, (w, made) in enumerate(zip(blocks, fw.blocks, strict=True)):
        a = first if i == 0 else fw.blocks[i - 1].a_next
        t, qkv = made.tail, made.qkv
        back.append(BlockForward(
            _NO_NORM, q(a), Quantized(w.wqkv8, w.wqkv_e), Quantized(qkv.q8, qkv.q_e),
            Quantized(qkv.k8, qkv.k_e), Quantized(qkv.v8, qkv.v_e), _NO_P,
            Quantized(qkv.p8, qkv.p_e), q(made.o), Quantized(w.wo8, w.wo_e), _NO_NORM,
            Quantized(t.b8, t.b_e), Quantized(w.w1_8, w.w1_e), _NO_MASK,
            Quantized(t.r8, t.r_e), Quantized(w.w2_8, w.w2_e),
        ))  # fmt: skip
    hq = q(fw.blocks[-1].a_next)
    return pair_operands(hq, Quantized(wte8, np.ravel(wte_e).reshape(-1, 1)), back)


# What pair_operands does not read (the norms, P, the mask) for ``_made_operands``.
_NO_NORM = Norm(np.zeros((0, 0), np.float32), np.zeros((0, 1), np.float32), np.zeros(0, np.float32))
_NO_P = np.zeros((0, 0, 0), np.float32)
_NO_MASK = np.zeros((0, 0), np.bool_)


def training_ops(
    backend: Backend,
    samples: int = AUDIT_SAMPLES,
    *,
    background: bool = True,
    passes: Passes | Literal["proven"] | None = "proven",
) -> GemmOps:
    """The model's product implementation for ``backend`` (every product audited unless it is
    the numpy reference; batched products in one call where the GEMM takes them, audited on a
    worker thread behind the step unless ``background=False``, with the quantize and dequantize
    around them in ``passes``: by default the fused passes where numba is installed and they
    pass their gates here, ``cpufused.proven``)."""
    if backend.name == "numpy":
        return NUMPY_OPS
    tile = getattr(backend.gemm, "tile", (32, 32))
    audited = AuditedMatmul(backend.gemm, samples, tile)
    if hasattr(backend.gemm, "matmul_int_batched"):
        gemm = cast(BatchedGemm, backend.gemm)
        passes = _passes(backend, passes)
        fused = passes if isinstance(passes, cpufused.FusedPasses) else None
        batched = AuditedBatchedMatmul(gemm, audited, background=background, fused=fused)
        # Several products in one call only where the GEMM takes them so (wgpu: one submit and
        # one readback); elsewhere it would be the same calls one after the other.
        many = batched.many if hasattr(gemm, "matmul_int_many") else None
        # A block's MLP in one round trip where the kernel's chain passed its gate here.
        mlp = batched.mlp if getattr(gemm, "mlp", None) is not None else None
        # Attention's scores, softmax and second product in one round trip, likewise.
        att = batched.attention if getattr(gemm, "attention", None) is not None else None
        # A block's tail (output product, residual, norm, MLP) in one round trip, likewise.
        block = batched.block_tail if getattr(gemm, "block", None) is not None else None
        # A block's attention from its input (the qkv product first) in one round trip.
        qkv = batched.attention_qkv if getattr(gemm, "qkv", None) is not None else None
        # A whole forward in one round trip, answering the two chains above and the logits.
        forward = batched.forward if getattr(gemm, "forward", None) is not None else None
        # And a whole backward in one round trip, answering the backward's pairs.
        backward = batched.backward if getattr(gemm, "backward", None) is not None else None
        return IntGemmOps(
            backend.name,
            audited,
            batched,
            batched.settle,
            passes,
            many,
            mlp,
            att,
            block,
            qkv,
            forward,
            backward,
        )
    return IntGemmOps(backend.name, audited)


def _passes(backend: Backend, passes: Passes | Literal["proven"] | None) -> Passes | None:
    """The quantize/dequantize passes training uses with ``backend``: fused ones only around a
    batched GEMM (``IntGemmOps`` uses them there and nowhere else)."""
    if passes != "proven":
        return passes
    batched = backend.name != "numpy" and hasattr(backend.gemm, "matmul_int_batched")
    return cpufused.proven()[0] if batched else None


def step_probe(backend: Backend, passes: Passes | Literal["proven"] | None = "proven") -> str:
    """The step probe through the live kernel and the live quantizer, as ``training_ops`` picks
    them (equal on every honest device; ``probe.py``). Where the step just ran through the
    GEMM's step chain, the probe's product is the one that chain computed in the step's own
    submit, with the probe matrix's limbs and the probe's cross-entropy by its epilogues
    (``GpuGemm.step_probe``, taken once: a later probe runs the kernel and numpy again)."""
    gemm = backend.gemm
    step = getattr(gemm, "step_probe", None)
    if step is None:
        return step_probe_hash(gemm.matmul_int, _passes(backend, passes))
    gemm.step_probe = None  # type: ignore[attr-defined]

    def computed(a: Int8Array, b: Int8Array) -> Int32Array:
        return step.probe  # type: ignore[no-any-return]  # the probe's own operands, in the step

    limbs = cast(Passes, _StepLimbs(step.probe_limbs))
    # The probe step through the live ops: its plan meets the run the training step's submit
    # made of it (``AuditedBatchedMatmul.forward``), so every epilogue takes part with no
    # readback of its own; where there was none, numpy's
    made = probe_step_parts(training_ops(backend, background=False, passes=passes)) if getattr(
        gemm, "probe_step", None) is not None else None  # fmt: skip
    return step_probe_hash(computed, limbs, step.probe_dlogits, made)


class _StepLimbs:
    """The step probe's quantizer answered by the step chain's limbs epilogue on the probe
    matrix (what ``probe.elementwise_parts`` asks of a quantizer, ``quantize_limbs``), so that
    epilogue takes part in the probe a peer publishes."""

    def __init__(self, limbs: Sequence[tuple[Any, Any, Any]]) -> None:
        self._made = {
            (count, axis): made
            for (count, axis), made in zip(
                ((c, a) for c in (1, 2, 3) for a in (-1, -2)), limbs, strict=True
            )
        }

    def quantize_limbs(
        self, x: FloatArray, fold: Any, axis: int, limbs: int, floats: bool = True
    ) -> tuple[None, Any, Any]:
        values, e, _ = self._made[(limbs, axis)]
        return None, values, e
