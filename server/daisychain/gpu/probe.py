"""The kernel probe: a fixed seeded int8 GEMM through the live kernel, hashed.

Every device computes ``acc = A @ B`` for the same A (64 x 96) and B (96 x 80), drawn from the
contract PRNG (stream ``(2, 0)`` for A and ``(2, 1)`` for B under ``PROBE_SEED``, the top byte of
each 32-bit word as int8), and publishes SHA-256 over the int32 little-endian bytes of acc in C
order. The numpy reference gives ``REFERENCE_PROBE_HASH``; a device whose live kernel disagrees is
computing different bits and must stop (docs/KERNELS.md, "Kernel probe").

The **step probe** is what peers publish after every step and compare with one reference: the
same product's accumulator, then the block quantizations of a fixed float32 matrix (one-, two-
and three-limb, by rows and by columns), the cross-entropy of fixed logits, and the loss and
every gradient of one training step of a fixed small model (the **probe step**, ``PROBE_MODEL``:
every epilogue of a step chain takes part in it), all through the live code, hashed together. A
device whose GEMM, elementwise kernels (the browser's WebAssembly SIMD quantizer and cross-
entropy) or chain epilogues drifted publishes another step probe and is named. The headless peer
computes the elementwise part with numpy, the reference, so that part is the reference's on
every backend.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.model.config import ModelConfig
from daisychain.model.gpt import cross_entropy, forward_backward
from daisychain.model.ops import NUMPY_OPS, ForwardPlan, GemmOps, NumpyOps, Passes
from daisychain.model.params import Params, init_params, is_gain, param_names
from daisychain.numerics import prng, sha256_arrays
from daisychain.numerics.quant import FloatArray, quantize, quantize2, quantize3

PROBE_SEED = 0x9B0BE
PROBE_SHAPE = (64, 96, 80)  # M, K, N
# The elementwise part's matrix: no gate case has this shape, and 64 columns (a multiple of 4)
# send every row and column block through the browser's SIMD kernel, not its JS fallback.
ELEMENTWISE_SHAPE = (24, 64)
# The cross-entropy part's logits: N rows of V, V odd so a SIMD kernel's padded last lanes count.
XENT_SHAPE = (8, 131)

# The probe step's model: small enough to cost little on every step, and every part of a step
# chain in it (two blocks, so a norm feeds the next block; a head of 16; an MLP of 32).
PROBE_MODEL = ModelConfig(vocab_size=40, width=16, layers=2, heads=1, seq_len=6, batch=2,
                          mlp_mult=2)  # fmt: skip

Int8Array = npt.NDArray[np.int8]
Int32Array = npt.NDArray[np.int32]


def probe_operands() -> tuple[Int8Array, Int8Array]:
    """The probe's A (M, K) and B (K, N)."""
    m, k, n = PROBE_SHAPE

    def draw(stream: int, shape: tuple[int, int]) -> Int8Array:
        words = prng.bits(prng.key(PROBE_SEED, 2, stream), shape[0] * shape[1])
        return (words >> np.uint32(24)).astype(np.uint8).view(np.int8).reshape(shape)

    return draw(0, (m, k)), draw(1, (k, n))


def hash_accumulator(acc: Int32Array) -> str:
    """SHA-256 (hex) of int32 little-endian C-order bytes."""
    return hashlib.sha256(np.ascontiguousarray(acc, dtype="<i4").tobytes()).hexdigest()


def probe_hash(matmul_int: Callable[[Int8Array, Int8Array], Int32Array]) -> str:
    """Run the probe through ``matmul_int`` (the live kernel) and hash its output."""
    a, b = probe_operands()
    return hash_accumulator(matmul_int(a, b))


def reference_probe_hash() -> str:
    """The probe through plain int64 numpy arithmetic (what every device must match)."""
    a, b = probe_operands()
    return hash_accumulator((a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32))


def elementwise_operand() -> FloatArray:
    """The step probe's float32 matrix, built from PRNG words in integer arithmetic (so every
    implementation has the same bits): row 0 all zeros, row 1 subnormals, the other rows
    normals of either sign whose exponents move with the row (2^-27 .. 2^10), so the blocks
    scale differently along rows and along columns."""
    rows, cols = ELEMENTWISE_SHAPE
    words = prng.bits(prng.key(PROBE_SEED, 2, 2), rows * cols).reshape(rows, cols)
    sign = words & np.uint32(0x80000000)
    mantissa = words & np.uint32(0x007FFFFF)
    row = (np.arange(rows, dtype=np.uint32) % np.uint32(8))[:, None]
    biased = np.uint32(100) + ((words >> np.uint32(23)) & np.uint32(15)) + row * np.uint32(3)
    bits = sign | (biased << np.uint32(23)) | mantissa
    bits[0] = 0
    bits[1] = sign[1] | (mantissa[1] >> np.uint32(3))
    out: FloatArray = bits.view(np.float32)
    return out


def xent_operands() -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """The cross-entropy part's logits (float32, from PRNG words in integer arithmetic: either
    sign, magnitudes in [0.5, 8)) and targets (one per row, a word modulo V)."""
    rows, v = XENT_SHAPE
    words = prng.bits(prng.key(PROBE_SEED, 2, 3), rows * v).reshape(rows, v)
    biased = np.uint32(126) + ((words >> np.uint32(23)) & np.uint32(3))
    bits = (
        (words & np.uint32(0x80000000)) | (biased << np.uint32(23)) | (words & np.uint32(0x7FFFFF))
    )
    logits: FloatArray = bits.view(np.float32)
    targets = prng.bits(prng.key(PROBE_SEED, 2, 4), rows) % np.uint32(v)
    return logits, targets.astype(np.intp)


def xent_as_product() -> tuple[Int32Array, int]:
    """The cross-entropy part's logits as an exact integer product and one power of two
    (``logits = acc * 2^e``), the form a GPU's cross-entropy epilogue reads: each logit's
    significand shifted by its exponent (magnitudes in [0.5, 8): at most 27 bits)."""
    logits, _ = xent_operands()
    bits = logits.view(np.uint32)
    mantissa = ((bits & np.uint32(0x7FFFFF)) | np.uint32(0x800000)).astype(np.int64)
    shift = ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64) - 126  # 0 .. 3
    acc = np.where((bits >> np.uint32(31)) == 1, -1, 1) * (mantissa << shift)
    return acc.astype(np.int32), -24


def elementwise_parts(
    x: FloatArray, quantizer: Passes | None = None, dlogits: FloatArray | None = None
) -> list[npt.NDArray[np.generic]]:
    """What the step probe hashes after the product, in order: for 1, 2 and 3 limbs, the blocks
    of ``x`` along rows then along columns, each limb as int8 and then its exponents as int32;
    then the cross-entropy of ``xent_operands``: its mean loss (one float32) and its dlogits
    (the browser's ``probe.js`` produces the same arrays in the same order). ``quantizer``: the
    live quantizer when training uses one other than numpy's (its int8 limbs are hashed);
    ``dlogits``: the live cross-entropy's, where a GPU computed them (``xent_as_product``)."""
    parts: list[npt.NDArray[np.generic]] = []
    for limbs in (1, 2, 3):
        for axis in (1, 0):
            if quantizer is not None:
                _, values8, e = quantizer.quantize_limbs(x, None, axis - 2, limbs, floats=False)
                parts += list(values8)
            else:
                *values, e = (quantize, quantize2, quantize3)[limbs - 1](x.copy(), axis)
                parts += [v.astype(np.int8) for v in values]
            parts.append(np.ascontiguousarray(e, dtype=np.int32).ravel())
    logits, targets = xent_operands()
    loss, mine = cross_entropy(logits.copy(), targets)
    parts += [np.array([loss], dtype=np.float32), (mine if dlogits is None else dlogits).ravel()]
    return parts


def probe_step_inputs() -> tuple[Params, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The probe step's parameters and tokens: the contract's init of ``PROBE_MODEL`` under
    ``PROBE_SEED``, every gain moved off 1 (gain k, element i: 0.5 + ((5 i + 3 k) mod 9) / 8,
    exact in float32, so a norm that drops its gain shows), and inputs and targets (B, T) from
    PRNG words (stream (2, 5)) modulo the vocabulary."""
    cfg = PROBE_MODEL
    params = init_params(cfg, PROBE_SEED)
    gains = [name for name in param_names(cfg) if is_gain(name)]
    for k, name in enumerate(gains):
        i = np.arange(params[name].size, dtype=np.int64)
        params[name] = (0.5 + ((5 * i + 3 * k) % 9) / 8).astype(np.float32)
    count = cfg.batch * cfg.seq_len
    words = prng.bits(prng.key(PROBE_SEED, 2, 5), 2 * count) % np.uint32(cfg.vocab_size)
    tokens = words.astype(np.int64).reshape(2, cfg.batch, cfg.seq_len)
    return params, tokens[0], tokens[1]


def probe_step_parts(ops: GemmOps = NUMPY_OPS) -> list[npt.NDArray[np.generic]]:
    """What the step probe hashes last: the probe step's loss (one float32), then every
    gradient in parameter order, computed through ``ops`` (the live ones: a GPU's step chain
    computes the whole step with its epilogues, ``gpu.live.step_probe``)."""
    params, x, y = probe_step_inputs()
    loss, grads = forward_backward(params, PROBE_MODEL, x, y, ops)
    parts: list[npt.NDArray[np.generic]] = [np.array([loss], dtype=np.float32)]
    parts += [np.ascontiguousarray(grads[name], dtype=np.float32).ravel()
              for name in param_names(PROBE_MODEL)]  # fmt: skip
    return parts


class _Planned(Exception):
    """The model reached its plan (``_PlanOnly``)."""

    def __init__(self, plan: ForwardPlan) -> None:
        super().__init__("planned")
        self.plan = plan


class _PlanOnly(NumpyOps):
    """The reference's products, stopping the model at its forward's plan."""

    def forward_chain(self, plan: ForwardPlan) -> None:
        raise _Planned(plan)


@functools.cache
def probe_step_plan() -> ForwardPlan:
    """The probe step's plan (``GemmOps.forward_chain``), made once: what a step chain records
    beside every training step, and what the probe step's own plan must equal to be answered
    from it (``same_plan``). Its arrays are this module's: nothing changes them."""
    params, x, y = probe_step_inputs()
    try:
        forward_backward(params, PROBE_MODEL, x, y, _PlanOnly())
    except _Planned as planned:
        return planned.plan
    raise RuntimeError("the probe model made no plan")


def same_plan(p: ForwardPlan, q: ForwardPlan) -> bool:
    """Whether two plans are the same forward: every value equal, bit for bit (the int8 copies
    of the quantized values aside: they are the values again)."""

    def same(x: Any, y: Any) -> bool:
        if x is None or y is None:
            return x is y
        x, y = np.asarray(x), np.asarray(y)
        return bool(x.shape == y.shape and x.tobytes() == y.astype(x.dtype).tobytes())

    def quantized(x: Any, y: Any) -> bool:
        return same(x[0], y[0]) and same(x[1], y[1])

    def each(xs: Any, ys: Any, eq: Callable[[Any, Any], bool]) -> bool:
        return len(xs) == len(ys) and all(eq(x, y) for x, y in zip(xs, ys, strict=True))

    return (
        (p.batch, p.heads, p.eps, p.scale) == (q.batch, q.heads, q.eps, q.scale)
        and quantized(p.a, q.a) and same(p.h, q.h) and same(p.targets, q.targets)
        and same(p.gf, q.gf) and each(p.g1, q.g1, same) and each(p.g2, q.g2, same)
        and quantized(p.wte, q.wte)
        and all(each(getattr(p, k), getattr(q, k), quantized) for k in ("wqkv", "wo", "w1", "w2"))
    )  # fmt: skip


def step_probe_hash(
    matmul_int: Callable[[Int8Array, Int8Array], Int32Array],
    quantizer: Passes | None = None,
    dlogits: FloatArray | None = None,
    step: list[npt.NDArray[np.generic]] | None = None,
) -> str:
    """What a peer publishes after every step: the probe product through ``matmul_int`` (the
    live kernel), the elementwise part through ``quantizer`` (the live quantizer, or numpy's)
    and the probe step's parts (``step``: through the live ops; numpy's by default), hashed
    together (SHA-256 of the int32 accumulator's bytes, then every part's)."""
    a, b = probe_operands()
    acc = np.ascontiguousarray(matmul_int(a, b), dtype=np.int32)
    parts = elementwise_parts(elementwise_operand(), quantizer, dlogits)
    return sha256_arrays([acc, *parts, *(probe_step_parts() if step is None else step)])


def reference_step_probe() -> str:
    """The step probe every honest device publishes (numpy arithmetic throughout)."""
    return step_probe_hash(lambda a, b: (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32))
