"""The backward chain's dispatches on GPU buffers (``backward_chain.py``, ``step_chain.py``).

``record_backward`` records a whole backward into a ``chain.Recording`` from ``Sources``: every
input as a buffer already on the device, with where to read it. The backward chain makes them by
uploading what the host's forward left; the step chain hands over the buffers its own forward
wrote (the operands repacked as their transposes, the exponents where the forward's epilogues
wrote them, the norms' inputs, P, the ReLU's mask, the cross-entropy's gradient).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.gpu.chain import (
    Outputs,
    Recording,
    f32_bits,
    rows_grid,
    slot,
    unpack_k_major,
)
from daisychain.gpu.gemm import aligned_words
from daisychain.gpu.kernels import Span

ROWS, COLUMNS = 0, 1  # the limbs epilogue's modes: per row (dA's operand), per column (dB's)

# The pairs of a block, in the model's order, and their limbs.
BLOCK_PAIRS = ("w2", "w1", "wo", "pv", "qk", "qkv")


@dataclass(frozen=True)
class Fold:
    """Exponents in a buffer: index f at ``buf[at + step * f]``; ``per_slice`` when each slice
    has its own (else one set serves every slice)."""

    buf: Any
    at: int = 0
    step: int = 1
    per_slice: bool = False


@dataclass(frozen=True)
class Packed:
    """An int8 operand packed K-major per slice, ``stride`` words apart, ``slices`` of them (1:
    one serves every slice)."""

    buf: Any
    stride: int
    slices: int


@dataclass(frozen=True)
class PairSources:
    """A pair's inputs besides the gradient: dA = limbs @ B (B packed from its transpose, K =
    the gradient's columns; ``fold_a`` folded per column; ``k`` dA's columns) and dB = A @ limbs
    (A packed K-major over the gradient's rows; ``fold_b`` per row; ``k2`` dB's rows)."""

    fold_a: Fold
    b: Packed
    k: int
    fold_b: Fold
    a: Packed
    k2: int


@dataclass(frozen=True)
class NormSources:
    """A norm's backward inputs: its gain, and either the forward's xhat and inv or (``inv``
    None) the norm's input x, from which the kernel computes both as the forward did."""

    g: Any
    x: Any
    inv: Any | None


@dataclass(frozen=True)
class BlockSources:
    pairs: dict[str, PairSources]  # by BLOCK_PAIRS
    relu: Any  # (N, F) u32: 1 where u > 0
    p: Any  # (S, T, T) float32 bits
    norm1: NormSources
    norm2: NormSources


@dataclass(frozen=True)
class Sources:
    dlogits: Any  # (N, V) float32 bits
    logits: PairSources
    normf: NormSources
    blocks: list[BlockSources]  # by block number
    eps: np.float32  # for a norm computed from its input


@dataclass(frozen=True)
class Shape:
    n: int  # tokens
    c: int
    f: int
    vocab: int
    batch: int
    heads: int
    scale: np.float32  # the attention scores'

    @property
    def t(self) -> int:
        return self.n // self.batch

    @property
    def slices(self) -> int:
        return self.batch * self.heads

    @property
    def hd(self) -> int:
        return self.c // self.heads


@dataclass
class Pair:
    """A recorded pair: its shape and the names of its outputs."""

    name: str
    slices: int
    m: int
    n: int
    limbs: int
    k: int  # dA's columns
    k2: int  # dB's rows
    acc_a: Any
    acc_b: Any
    rows_status: Any
    cols_status: Any


class Recorder:
    """One recording of the backward's dispatches: pairs, combines and norms as the model calls
    them, on the chain's kernels (``limbs``, ``combine``, ``grad_norm``, ``grad_softmax``)."""

    def __init__(self, kernels: Any, rec: Recording, floats: bool) -> None:
        self.kernels, self.rec = kernels, rec
        self.keep_floats = floats
        self.floats: list[str] = []  # the float gradients read back, in order
        gemm = kernels.gemm
        self.lut = [gemm._lut] if gemm._lut is not None else []
        self.tile = gemm.tile

    def made(self, name: str, size: int) -> Any:
        """The buffer of a float gradient the chain makes (read back with ``floats``)."""
        if not self.keep_floats:
            return self.rec.scratch(name, size)
        self.floats.append(name)
        return self.rec.output(name, size)

    def _gemm(self, name: str, m: int, n: int, k: int, a: Span, b: Span, out: Span) -> None:
        params = self.rec.upload(name, slot((m, n, max(1, -(-k // 4)), 0)), uniform=True)
        tm, tn = self.tile
        self.rec.steps.append((self.kernels.gemm.kernel, [
            Span(params, 0, 16), a, b, out, *self.lut,
        ], (-(-n // tn), -(-m // tm), 1)))  # fmt: skip

    def limbs(
        self, name: str, g: Any, shape: tuple[int, int, int, int], fold: Fold, mode: int
    ) -> tuple[Any, Any, int]:
        """The limbs of the gradient in ``g`` (slices x m x n floats, ``limbs`` limbs) per row
        (``ROWS``) or per column (``COLUMNS``), read back as ``name`` and ``name_status``:
        (the packed limbs, their status buffer, words per (limb, slice) region)."""
        slices, m, n, limbs = shape
        rec = self.rec
        kw, width, blocks = (-(-n // 4), 4 * -(-m // 4), slices * m) if mode == ROWS else (
            -(-m // 4), 4 * -(-n // 4), slices * n)  # fmt: skip
        stride = aligned_words(kw * width)
        out = rec.output(name, limbs * slices * stride * 4)
        status = rec.output(name + "_status", 2 * blocks * 4)
        per = n if mode == ROWS else m
        params = rec.upload(name + ".params", slot((
            slices, m, n, limbs, mode, m * n, per if fold.per_slice else 0, stride, kw, width,
            blocks, fold.at, fold.step, 0, 0, 0,
        )), uniform=True)  # fmt: skip
        rec.steps.append((self.kernels.limbs, [
            Span(params, 0, 64), g, fold.buf, out, status,
        ], rows_grid(blocks)))  # fmt: skip
        return out, status, stride

    def pair(self, name: str, g: Any, shape: tuple[int, int, int, int], src: PairSources) -> Pair:
        """The pair of the gradient in ``g`` (slices x m x n floats, ``limbs`` limbs): its limbs
        both ways and both products for every limb and slice."""
        slices, m, n, limbs = shape
        rec = self.rec
        regions = limbs * slices
        rows, rows_status, rows_stride = self.limbs(name + ".rows", g, shape, src.fold_a, ROWS)
        cols, cols_status, cols_stride = self.limbs(name + ".cols", g, shape, src.fold_b, COLUMNS)
        acc_a_stride, acc_b_stride = aligned_words(m * src.k), aligned_words(src.k2 * n)
        acc_a = rec.output(name + ".acc_a", regions * acc_a_stride * 4)
        acc_b = rec.output(name + ".acc_b", regions * acc_b_stride * 4)
        for limb in range(limbs):
            for s in range(slices):
                r = limb * slices + s
                b, a = src.b, src.a
                bs, as_ = s % b.slices, s % a.slices
                # dA = limbs (m, n) @ B (n, k)
                self._gemm(f"{name}.ga{r}", m, src.k, n,
                           Span(rows, r * rows_stride * 4, rows_stride * 4),
                           Span(b.buf, bs * b.stride * 4, b.stride * 4),
                           Span(acc_a, r * acc_a_stride * 4, acc_a_stride * 4))  # fmt: skip
                # dB = A (k2, m) @ limbs (m, n)
                self._gemm(f"{name}.gb{r}", src.k2, n, m,
                           Span(a.buf, as_ * a.stride * 4, a.stride * 4),
                           Span(cols, r * cols_stride * 4, cols_stride * 4),
                           Span(acc_b, r * acc_b_stride * 4, acc_b_stride * 4))  # fmt: skip
        return Pair(name, slices, m, n, limbs, src.k, src.k2, acc_a, acc_b, rows_status,
                    cols_status)  # fmt: skip

    def combine(
        self,
        name: str,
        pair: Pair,
        shape: tuple[int, int, int],
        mode: int,
        out: Any = None,
        place: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0),
        *,
        mask: Any = None,
        transposed: bool = False,
    ) -> Any:
        """The float gradient of one of ``pair``'s products (``shape`` = slices x m x k), its
        exponents per row (``ROWS``: dA) or per column (``COLUMNS``: dB), into ``out`` (a new
        buffer by default) at ``place`` = (place, t, heads, hd, c, part)."""
        slices, m, k = shape
        rec = self.rec
        acc, status = (pair.acc_a, pair.rows_status) if mode == ROWS else (
            pair.acc_b, pair.cols_status)  # fmt: skip
        total = slices * m * k
        out = self.made(name, total * 4) if out is None else out
        params = rec.upload(name + ".params", slot((
            slices, m, k, pair.limbs, mode, aligned_words(m * k), *place, int(transposed),
            int(mask is not None), 0, 0,
        )), uniform=True)  # fmt: skip
        mask_buf = mask if mask is not None else status  # bound, never read
        groups = -(-total // 64)
        rec.steps.append((self.kernels.combine, [
            Span(params, 0, 64), acc, status, mask_buf, out,
        ], (min(groups, 65535), -(-groups // 65535), 1)))  # fmt: skip
        return out

    def norm_backward(
        self, name: str, dy: Any, norm: NormSources, dh: Any, n: int, c: int, eps: np.float32
    ) -> Any:
        """RMSNorm's backward of ``dy`` (n x c), added to ``dh`` unless it is None."""
        rec = self.rec
        params = rec.upload(name + ".params", slot((
            n, c, 1 << (c - 1).bit_length(), f32_bits(c), int(dh is not None),
            int(norm.inv is None), f32_bits(eps), 0,
        )), uniform=True)  # fmt: skip
        out = self.made(name, n * c * 4)
        inv = norm.inv if norm.inv is not None else norm.x  # bound, never read
        rec.steps.append((self.kernels.grad_norm, [
            Span(params, 0, 32), dy, norm.g, norm.x, inv, dh if dh is not None else dy, out,
        ], rows_grid(n)))  # fmt: skip
        return out

    def softmax_backward(
        self, name: str, dp: Any, p: Any, rows: int, t: int, scale: np.float32
    ) -> Any:
        rec = self.rec
        params = rec.upload(name + ".params", slot((
            rows, t, 1 << (t - 1).bit_length(), f32_bits(scale),
        )), uniform=True)  # fmt: skip
        out = self.made(name, rows * t * 4)
        rec.steps.append((self.kernels.grad_softmax, [Span(params, 0, 16), dp, p, out],
                          rows_grid(rows)))  # fmt: skip
        return out

    def read(self, out: Outputs, pair: Pair) -> dict[str, npt.NDArray[Any]]:
        """A pair's outputs from the readback, as ``backward_chain.PairOut``'s fields."""
        s, m, n, limbs, k, k2 = pair.slices, pair.m, pair.n, pair.limbs, pair.k, pair.k2
        shape = (s, m, n, limbs)
        rows8, rows_e, rows_status = read_limbs(out, pair.name + ".rows", shape, ROWS)
        cols8, cols_e, cols_status = read_limbs(out, pair.name + ".cols", shape, COLUMNS)
        acc_a = out.words(pair.name + ".acc_a", "<i4").reshape(limbs * s, -1)[:, : m * k]
        acc_b = out.words(pair.name + ".acc_b", "<i4").reshape(limbs * s, -1)[:, : k2 * n]
        return {
            "rows8": rows8, "rows_e": rows_e, "rows_status": rows_status,
            "cols8": cols8, "cols_e": cols_e, "cols_status": cols_status,
            "acc_a": acc_a.reshape(limbs, s, m, k).astype(np.int32),
            "acc_b": acc_b.reshape(limbs, s, k2, n).astype(np.int32),
        }  # fmt: skip


def read_limbs(
    out: Outputs, name: str, shape: tuple[int, int, int, int], mode: int
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int32], npt.NDArray[np.uint32]]:
    """``Recorder.limbs``' outputs from the readback: the limbs (L, S, M, N) as int8, and per
    block (a row (S, M) or a column (S, N)) the exponent and the status."""
    s, m, n, limbs = shape
    m4, n4 = 4 * -(-m // 4), 4 * -(-n // 4)
    kw, width = (-(-n // 4), m4) if mode == ROWS else (-(-m // 4), n4)
    words = out.words(name, "<u4").reshape(limbs * s, aligned_words(kw * width))
    regions = [words[r, : kw * width].reshape(kw, width) for r in range(limbs * s)]
    if mode == ROWS:
        values = np.stack([unpack_k_major(w, m, n) for w in regions])
    else:
        values = np.stack([unpack_k_major(w, n, m).T for w in regions])
    status = out.words(name + "_status", "<u4").reshape(s, m if mode == ROWS else n, 2)
    return (
        np.ascontiguousarray(values.reshape(limbs, s, m, n)),
        status[..., 0].view(np.int32).copy(),
        status[..., 1].astype(np.uint32),
    )


def record_backward(
    r: Recorder, src: Sources, sh: Shape
) -> tuple[Pair, dict[int, dict[str, Pair]]]:
    """The whole backward, in ``gpt.forward_backward``'s order: the logits' pair (three limbs),
    the final norm's backward, then per block from the last its six pairs with the work between
    them. Returns the logits' pair and every block's by name."""
    n, c, f, t, heads, hd, slices = sh.n, sh.c, sh.f, sh.t, sh.heads, sh.hd, sh.slices
    logits = r.pair("logits", src.dlogits, (1, n, sh.vocab, 3), src.logits)
    dhf = r.combine("dhf", logits, (1, n, c), ROWS)
    dh = r.norm_backward("dh.f", dhf, src.normf, None, n, c, src.eps)
    pairs: dict[int, dict[str, Pair]] = {}
    for i in reversed(range(len(src.blocks))):
        w, p = src.blocks[i], f"{i}."
        mine: dict[str, Pair] = {}
        mine["w2"] = r.pair(p + "w2", dh, (1, n, c, 2), w.pairs["w2"])
        du = r.combine(p + "du", mine["w2"], (1, n, f), ROWS, mask=w.relu)
        mine["w1"] = r.pair(p + "w1", du, (1, n, f, 2), w.pairs["w1"])
        dbn = r.combine(p + "dbn", mine["w1"], (1, n, c), ROWS)
        dh = r.norm_backward(p + "dh.2", dbn, w.norm2, dh, n, c, src.eps)
        mine["wo"] = r.pair(p + "wo", dh, (1, n, c, 2), w.pairs["wo"])
        do = r.combine(p + "do", mine["wo"], (1, n, c), ROWS, place=(1, t, heads, hd, c, 0))
        mine["pv"] = r.pair(p + "pv", do, (slices, t, hd, 2), w.pairs["pv"])
        dp = r.combine(p + "dp", mine["pv"], (slices, t, t), ROWS)
        ds = r.softmax_backward(p + "ds", dp, w.p, slices * t, t, sh.scale)
        mine["qk"] = r.pair(p + "qk", ds, (slices, t, t, 2), w.pairs["qk"])
        dqkv = r.made(p + "dqkv", n * 3 * c * 4)
        r.combine(p + "dq", mine["qk"], (slices, t, hd), ROWS, dqkv, (2, t, heads, hd, c, 0))
        r.combine(p + "dk", mine["qk"], (slices, hd, t), COLUMNS, dqkv,
                  (2, t, heads, hd, c, 1), transposed=True)  # fmt: skip
        r.combine(p + "dv", mine["pv"], (slices, t, hd), COLUMNS, dqkv, (2, t, heads, hd, c, 2))
        mine["qkv"] = r.pair(p + "qkv", dqkv, (1, n, 3 * c, 2), w.pairs["qkv"])
        dan = r.combine(p + "dan", mine["qkv"], (1, n, c), ROWS)
        dh = r.norm_backward(p + "dh.1", dan, w.norm1, dh, n, c, src.eps)
        pairs[i] = mine
    return logits, pairs
