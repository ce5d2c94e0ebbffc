"""Compressing a pseudo-gradient for the outer exchange (docs/OUTER.md, "Compression").

Both codecs work on the flat vector of p2p.codec's layout: every parameter in parameter order,
row-major, concatenated and zero-padded to blocks of ``BLOCK`` = 256 values. Each block gets one
power-of-two scale from its absolute maximum, exactly as docs/NUMERICS.md section 2 (so the
scales, and every dequantized value, are the same bits on every platform):

- ``int8``: the gradient exchange's own codec (``p2p.codec.encode``): per block one int8
  exponent and 256 int8 values, 257 bytes.
- ``topk:K``: per block the ``K`` values of largest magnitude, quantized with the block's dense
  scale (the largest is among them, so it is that block's scale); everything else is sent as 0.
  Ties in magnitude go to the lower index: the selection is a total order (magnitude bits
  descending, then index ascending), so no sort algorithm's stability is relied on. Per block:
  one int8 exponent, ``K`` uint8 indices (ascending), ``K`` int8 values: ``1 + 2K`` bytes.

Error feedback (``+ef``): a peer adds what its last compression dropped before compressing again
(``a = x + r``), and keeps ``r = a - dequantized(a)``. That subtraction is exact (a dropped value
is subtracted from 0; a kept one lies within half a step of its quantized value, the Sterbenz
case of NUMERICS section 2), so ``r`` holds exactly what has not yet been sent. The residual is
the peer's own state: nobody else sees it, and it never enters the replicas' shared hash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from daisychain.numerics import dequantize, quantize
from daisychain.wire import codec

BLOCK = codec.BLOCK
F32 = np.float32
FloatArray = npt.NDArray[np.float32]
IndexArray = npt.NDArray[np.int64]

# Magnitude bits above index bits: a key per value that no two values of a block share.
_INDEX_BITS = 8
assert 1 << _INDEX_BITS == BLOCK, "top-k indices are one byte: blocks of 256"


class CompressionError(ValueError):
    """A compression spec, an input vector or a payload that cannot be used."""


@dataclass(frozen=True)
class Compression:
    """How a peer's pseudo-gradient is sent: ``int8`` or ``topk`` (``k`` per block), with or
    without error feedback. ``parse`` reads the spec strings of ``bench converge --compress``."""

    kind: Literal["int8", "topk"] = "int8"
    k: int = 0  # values kept per block of 256 (topk only)
    error_feedback: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("int8", "topk"):
            raise CompressionError(f"compression kind must be int8 or topk, got {self.kind!r}")
        if self.kind == "topk" and not 1 <= self.k <= BLOCK:
            raise CompressionError(f"topk keeps 1..{BLOCK} values per block, got k = {self.k}")
        if self.kind == "int8" and self.k != 0:
            raise CompressionError("int8 sends every value: k is for topk only")

    @classmethod
    def parse(cls, spec: str) -> Compression:
        """``int8``, ``int8+ef``, ``topk:K`` or ``topk:K+ef``."""
        m = re.fullmatch(r"(int8|topk:(\d+))(\+ef)?", spec.strip())
        if m is None:
            raise CompressionError(
                f"compression spec {spec!r}: use int8, int8+ef, topk:K or topk:K+ef "
                f"(K values kept per block of {BLOCK}, e.g. topk:4+ef)"
            )
        if m.group(2) is None:
            return cls("int8", 0, m.group(3) is not None)
        return cls("topk", int(m.group(2)), m.group(3) is not None)

    @property
    def name(self) -> str:
        base = "int8" if self.kind == "int8" else f"topk:{self.k}"
        return base + ("+ef" if self.error_feedback else "")

    def payload_bytes(self, n_values: int) -> int:
        """Bytes of one compressed vector of ``n_values`` (a whole number of blocks)."""
        blocks = _blocks(n_values)
        return blocks * (BLOCK + 1) if self.kind == "int8" else blocks * (1 + 2 * self.k)


def _blocks(n_values: int) -> int:
    if n_values % BLOCK:
        raise CompressionError(
            f"a flat vector is whole blocks of {BLOCK} values, got {n_values} "
            "(build it with p2p.codec.flatten)"
        )
    return n_values // BLOCK


def select_topk(blocks: FloatArray, k: int) -> IndexArray:
    """(n, k) indices within each block of its ``k`` largest magnitudes, ascending.

    The order: |x| descending, equal magnitudes by index ascending. |x|'s bits order like its
    value (a non-negative float32), so the key ``(0x7FFFFFFF - bits(|x|)) * 256 + index`` is a
    distinct integer per value; the k smallest keys are the chosen ones whatever the algorithm.
    """
    mag = np.abs(blocks).view(np.uint32).astype(np.int64)  # |x| exact; -0 becomes +0
    keys = (np.int64(0x7FFFFFFF) - mag) << _INDEX_BITS
    keys |= np.arange(blocks.shape[1], dtype=np.int64)[None, :]
    smallest = np.partition(keys, k - 1, axis=1)[:, :k] if k < blocks.shape[1] else keys
    chosen: IndexArray = np.sort(smallest & np.int64(BLOCK - 1), axis=1)
    return chosen


def encode(values: FloatArray, how: Compression) -> tuple[bytes, FloatArray]:
    """(payload, the dequantized values every peer uses): the sender, too, uses only these."""
    blocks = _blocks(values.size)
    if values.dtype != np.float32:
        raise CompressionError(f"pseudo-gradients are float32, got {values.dtype}")
    if how.kind == "int8":
        return codec.encode(values)
    dense = values.reshape(blocks, BLOCK)
    q, e = quantize(np.ascontiguousarray(dense), axis=1)  # q (n, 256), e (n, 1)
    idx = select_topk(dense, how.k)  # (n, k)
    kept = np.take_along_axis(q, idx, axis=1)  # (n, k)
    head = e.astype(np.int8).tobytes() + idx.astype(np.uint8).tobytes()
    payload = head + kept.astype(np.int8).tobytes()
    return payload, _scatter(idx, kept, e, blocks)


def decode(payload: bytes, n_values: int, how: Compression) -> FloatArray:
    """The dequantized values of a payload; every byte is checked (a peer's payload is input)."""
    blocks = _blocks(n_values)
    if how.kind == "int8":
        return codec.decode(payload, blocks)
    k = how.k
    if len(payload) != blocks * (1 + 2 * k):
        raise CompressionError(
            f"topk:{k} payload of {blocks} blocks must be {blocks * (1 + 2 * k)} bytes, "
            f"got {len(payload)}"
        )
    raw = np.frombuffer(payload, dtype=np.uint8)
    e = raw[:blocks].view(np.int8).astype(np.int32).reshape(blocks, 1)
    idx = raw[blocks : blocks * (1 + k)].astype(np.int64).reshape(blocks, k)
    kept = raw[blocks * (1 + k) :].view(np.int8).reshape(blocks, k)
    if blocks and (int(e.min()) < codec.E_MIN or int(e.max()) > codec.E_MAX):
        raise CompressionError(f"block exponent out of range [{codec.E_MIN}, {codec.E_MAX}]")
    if blocks and int(kept.min()) < -127:
        raise CompressionError("quantized value -128 never occurs (|q| <= 127)")
    if k > 1 and not np.all(np.diff(idx, axis=1) > 0):
        raise CompressionError("top-k indices must be strictly ascending within a block")
    return _scatter(idx, kept.astype(np.float32), e, blocks)


def _scatter(
    idx: IndexArray, kept: FloatArray, e: npt.NDArray[np.int32], blocks: int
) -> FloatArray:
    """The dense dequantized vector: q * 2^e at the kept indices (exact), +0 elsewhere."""
    q = np.zeros((blocks, BLOCK), dtype=np.float32)
    np.put_along_axis(q, idx, kept, axis=1)
    return dequantize(q, e).reshape(-1)


def compress(
    values: FloatArray, how: Compression, residual: FloatArray | None
) -> tuple[bytes, FloatArray, FloatArray | None]:
    """One peer's compression with its error feedback: (payload, dequantized, new residual).

    Without error feedback ``residual`` must be None and stays None. With it, None means a
    first round (nothing carried); the values sent are ``a = values + residual`` (one float32
    add per element) and the new residual is ``a - dequantized`` (exact)."""
    if not how.error_feedback:
        if residual is not None:
            raise CompressionError(f"{how.name} keeps no residual: pass None")
        payload, sent = encode(values, how)
        return payload, sent, None
    a = values if residual is None else _add(values, residual)
    payload, sent = encode(a, how)
    return payload, sent, np.subtract(a, sent)


def _add(values: FloatArray, residual: FloatArray) -> FloatArray:
    if residual.shape != values.shape or residual.dtype != np.float32:
        raise CompressionError(
            f"error-feedback residual {residual.dtype}{residual.shape} does not match the "
            f"pseudo-gradient float32{values.shape}: it belongs to another model"
        )
    return np.add(values, residual)
