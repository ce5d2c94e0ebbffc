"""The contract GPT: forward and hand-written backward on the numerical contract.

Normative text: docs/MODEL.md, the model's part of the numerical contract (docs/NUMERICS.md).
Every matrix product is an exact int8 product from ``daisychain.numerics`` (forward ``qmatmul``;
backward ``grad_matmul_left`` / ``grad_matmul_right``, which reuse the forward int8 operand and
fold its power-of-two scales into the two-limb gradient). Elementwise work is float32 + - * /
sqrt in the documented order, every float reduction is ``tree_sum``, exp and log are the
contract's own. Nothing here may use float BLAS, np.sum/np.mean on floats, np.exp/np.log, or
float64: each line is mirrored bit for bit in JavaScript and WGSL.

Layout: activations are (N, C) with N = B * T tokens in row-major (b, t) order; attention tensors
are (B, H, T, hd). References: nanoGPT (architecture), llm.c (forward/backward pairs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt

from daisychain.model.config import ModelConfig
from daisychain.model.heap import keep_step_memory
from daisychain.model.ops import (
    NUMPY_OPS,
    BackwardPlan,
    BlockBackPlan,
    ForwardPlan,
    GemmOps,
    Grad,
    QParts,
)
from daisychain.model.params import Params, param_shapes
from daisychain.numerics import exp, log, tree_sum

F32 = np.float32
FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int32]
TokenArray = npt.NDArray[np.integer]

NEG_INF = F32(-np.inf)


@dataclass
class QTensor:
    """A quantized operand ``q * 2^e``; kept from the forward and reused by the backward."""

    q: FloatArray  # integers in [-127, 127] stored as float32
    e: IntArray  # scale exponents, length 1 on the summed axis
    # the same integers as int8, where the ops made them in the quantizing pass (an int8 GEMM
    # takes them as they are); None with the numpy reference
    q8: npt.NDArray[np.int8] | None = None

    @classmethod
    def of(cls, x: FloatArray, axis: int, ops: GemmOps = NUMPY_OPS) -> QTensor:
        q, e, q8 = ops.quantize(x, axis)
        return cls(q, e, q8)

    @property
    def t(self) -> QTensor:
        """Transpose of the last two axes (views, no copy)."""
        q8 = None if self.q8 is None else self.q8.swapaxes(-1, -2)
        return QTensor(self.q.swapaxes(-1, -2), self.e.swapaxes(-1, -2), q8)


# ----------------------------------------------------------------------------------------------
# layers: forward / backward pairs


@dataclass
class NormCache:
    xhat: FloatArray  # (N, C)
    inv: FloatArray  # (N, 1)


def rmsnorm_forward(x: FloatArray, g: FloatArray, eps: np.float32) -> tuple[FloatArray, NormCache]:
    """y = (x * (1 / sqrt(tree_sum(x * x) / C + eps))) * g, row by row."""
    c = F32(x.shape[-1])
    ss = tree_sum(x * x, -1, keepdims=True)  # (N, 1)
    ss /= c  # ms
    ss += eps
    d = np.sqrt(ss)  # (N, 1)
    inv: FloatArray = np.divide(F32(1.0), d, dtype=np.float32)  # (N, 1)
    xhat: FloatArray = x * inv  # (N, C)
    y: FloatArray = xhat * g  # (N, C)
    return y, NormCache(xhat, inv)


def rmsnorm_backward(
    dy: FloatArray, g: FloatArray, cache: NormCache
) -> tuple[FloatArray, FloatArray]:
    """Returns (dx, dg): dx = (dy * g - xhat * (tree_sum(dy * g * xhat) / C)) * inv."""
    c = F32(dy.shape[-1])
    dxhat = dy * g  # (N, C)
    prod = dxhat * cache.xhat  # (N, C)
    mean = tree_sum(prod, -1, keepdims=True)  # (N, 1) dot
    mean /= c
    np.multiply(cache.xhat, mean, out=prod)  # (N, C) xhat * mean
    np.subtract(dxhat, prod, out=dxhat)
    dxhat *= cache.inv  # (N, C) dx
    np.multiply(dy, cache.xhat, out=prod)  # (N, C)
    dg = tree_sum(prod, 0)  # (C,)
    return dxhat, dg


def linear_backward(
    dy: FloatArray, x: QTensor, w: QTensor, ops: GemmOps = NUMPY_OPS, limbs: int = 2
) -> tuple[FloatArray, FloatArray]:
    """y = x @ W with x quantized per row and W per column.

    dx = dy @ W^T folds W's per-output-channel scales into dy's columns;
    dW = x^T @ dy folds x's per-token scales into dy's rows. ``limbs`` is the gradient
    operand's limb count (3 for the logits gradient, 2 elsewhere: docs/NUMERICS.md section 6).
    """
    xt, wt = x.t, w.t  # views (2-D: the transposes)
    dw, dx = ops.grads([
        Grad(False, dy, x.e, xt.q, limbs, xt.q8),  # (in, out)
        Grad(True, dy, w.e, wt.q, limbs, wt.q8),  # (N, in)
    ])  # fmt: skip
    return dx, dw


@dataclass
class AttentionCache:
    q: QTensor  # (B, H, T, hd), scales (B, H, T, 1)
    k: QTensor  # (B, H, T, hd), scales (B, H, T, 1)
    v: QTensor  # (B, H, T, hd), scales (B, H, 1, hd)
    p: FloatArray  # (B, H, T, T) softmax probabilities
    pq: QTensor  # (B, H, T, T), scales (B, H, T, 1)


def causal_mask(t: int) -> FloatArray:
    """Additive mask (T, T): -inf where key j > query i, -0 elsewhere.

    ``s + mask`` is exactly "s[i, j] = -inf for j > i, unchanged otherwise": x + (-0) = x for
    every x (+0 included), and a finite x + (-inf) = -inf. (A boolean ``where`` pass would do the
    same, several times slower in numpy.)
    """
    mask = np.full((t, t), F32(-0.0), dtype=np.float32)
    mask[np.triu_indices(t, k=1)] = NEG_INF
    return mask


def attention_forward(
    a: QTensor, wqkv: QTensor, cfg: ModelConfig, b: int, t: int, ops: GemmOps = NUMPY_OPS
) -> tuple[FloatArray, AttentionCache]:
    """Causal multi-head attention of the normalised, quantized input ``a`` (N, C) through the
    fused ``wqkv``; returns merged heads (N, C)."""
    h, hd, c = cfg.heads, cfg.head_dim, cfg.width
    scale = F32(1.0) / np.sqrt(F32(hd))  # exact power of two (hd is a power of 4)

    def heads_of(qkv: FloatArray) -> tuple[QParts, QParts, QParts]:
        """qkv (N, 3C) split into heads (B, H, T, hd), each quantized."""
        # one contiguous copy so every per-head operand is a dense (T, hd) matrix for BLAS
        heads = np.ascontiguousarray(qkv.reshape(b, t, 3, h, hd).transpose(2, 0, 3, 1, 4))
        q = ops.quantize(heads[0], -1)  # per (b, h, query) over hd
        k = ops.quantize(heads[1], -1)  # per (b, h, key) over hd
        v = ops.quantize(heads[2], -2)  # per (b, h, channel) over time
        return q, k, v

    # qkv = a wqkv (N, 3C), split into heads; S = q k^T (B, H, T, T); P = softmax(S * scale),
    # causal; P quantized per (b, h, query) over keys; O = P v (B, H, T, hd)
    att, q, k, v = ops.attention_qkv(
        (a.q, a.e, a.q8), (wqkv.q, wqkv.e, wqkv.q8), heads_of, (b, h), scale,
        lambda s: softmax_causal(s, scale),
    )  # fmt: skip
    pq = QTensor(att.p_q, att.p_e, att.p8)
    merged = np.ascontiguousarray(att.o.transpose(0, 2, 1, 3)).reshape(b * t, c)  # (N, C)
    return merged, AttentionCache(QTensor(*q), QTensor(*k), QTensor(*v), att.p, pq)


def attention_backward(
    dmerged: FloatArray,
    cache: AttentionCache,
    cfg: ModelConfig,
    b: int,
    t: int,
    ops: GemmOps = NUMPY_OPS,
) -> FloatArray:
    """Gradient of the merged heads (N, C) -> gradient of the fused qkv (N, 3C)."""
    h, hd, c = cfg.heads, cfg.head_dim, cfg.width
    scale = F32(1.0) / np.sqrt(F32(hd))
    do = dmerged.reshape(b, t, h, hd).transpose(0, 2, 1, 3)  # (B, H, T, hd) view
    pqt, vt = cache.pq.t, cache.v.t
    dv, dp = ops.grads([
        Grad(False, do, cache.pq.e, pqt.q, 2, pqt.q8),  # P^T @ dO: (B, H, T, hd)
        Grad(True, do, cache.v.e, vt.q, 2, vt.q8),  # dO @ v^T: (B, H, T, T)
    ])  # fmt: skip
    p = cache.p
    tmp = dp * p  # (B, H, T, T)
    dp -= tree_sum(tmp, -1, keepdims=True)  # dP - sum(dP * P)
    np.multiply(p, dp, out=dp)  # dS = P * (...)
    dp *= scale  # (B, H, T, T) gradient of the unscaled scores
    qt = cache.q.t
    dq, dkt = ops.grads([
        Grad(True, dp, cache.k.t.e, cache.k.q, 2, cache.k.q8),  # dS @ k: (B, H, T, hd)
        Grad(False, dp, cache.q.e, qt.q, 2, qt.q8),  # q^T @ dS = dk^T: (B, H, hd, T)
    ])  # fmt: skip
    dqkv = np.empty((b, t, 3, h, hd), dtype=np.float32)  # (B, T, 3, H, hd)
    dqkv[:, :, 0] = dq.transpose(0, 2, 1, 3)
    dqkv[:, :, 1] = dkt.transpose(0, 3, 1, 2)
    dqkv[:, :, 2] = dv.transpose(0, 2, 1, 3)
    return dqkv.reshape(b * t, 3 * c)


# ----------------------------------------------------------------------------------------------
# the model


@dataclass
class BlockCache:
    norm1: NormCache
    a: QTensor  # (N, C) rows
    attn: AttentionCache
    o: QTensor  # (N, C) rows
    norm2: NormCache
    bq: QTensor  # (N, C) rows
    relu: npt.NDArray[np.bool_]  # (N, 4C) u > 0
    r: QTensor  # (N, 4C) rows


@dataclass
class Weights:
    """Every matrix quantized once per step (per output column; wte per vocab row)."""

    wte: QTensor  # (V, C), scales (V, 1)
    wqkv: list[QTensor]  # (C, 3C), scales (1, 3C)
    wo: list[QTensor]
    w1: list[QTensor]
    w2: list[QTensor]

    @classmethod
    def of(cls, params: Params, cfg: ModelConfig, ops: GemmOps = NUMPY_OPS) -> Weights:
        def cols(name: str) -> list[QTensor]:
            return [QTensor.of(params[f"h.{i}.{name}"], -2, ops) for i in range(cfg.layers)]

        wte = QTensor.of(params["wte"], -1, ops)
        return cls(wte, cols("wqkv"), cols("wo"), cols("w1"), cols("w2"))


def _check_inputs(params: Params, cfg: ModelConfig, x: TokenArray) -> tuple[int, int]:
    if x.ndim != 2:
        raise ValueError(f"tokens must be (B, T), got shape {x.shape}")
    b, t = x.shape
    if not 1 <= t <= cfg.seq_len:
        raise ValueError(f"sequence length {t} outside [1, {cfg.seq_len}] (the position table)")
    if x.size and (int(x.min()) < 0 or int(x.max()) >= cfg.vocab_size):
        raise ValueError(f"token ids must lie in [0, {cfg.vocab_size}); check the tokenizer")
    for name, shape in param_shapes(cfg).items():
        arr = params[name]
        if arr.shape != shape or arr.dtype != np.float32:
            raise ValueError(
                f"parameter {name}: expected float32 {shape}, got {arr.dtype} {arr.shape}"
            )
    return b, t


def _forward(
    params: Params,
    cfg: ModelConfig,
    x: TokenArray,
    keep: bool,
    ops: GemmOps,
    targets: TokenArray | None = None,
) -> tuple[FloatArray, Weights, list[BlockCache], NormCache, QTensor]:
    """Shared forward: logits (N, V) plus what the backward needs (when ``keep``); ``targets``
    (a training step's next tokens) only tell the ops what follows."""
    b, t = _check_inputs(params, cfg, x)
    n, c = b * t, cfg.width
    w = Weights.of(params, cfg, ops)
    h = (params["wte"][x] + params["wpe"][:t]).reshape(n, c)  # (N, C) embedding
    caches: list[BlockCache] = []

    def product(a: QTensor, b: QTensor) -> FloatArray:
        return ops.qmatmul(a.q, a.e, b.q, b.e, a8=a.q8, b8=b.q8)

    for i in range(cfg.layers):
        p = f"h.{i}."
        an, norm1 = rmsnorm_forward(h, params[p + "g1"], cfg.norm_eps)  # (N, C)
        a = QTensor.of(an, -1, ops)
        if i == 0:  # a GPU may run the whole forward from here in one submit (ops.forward_chain)
            ops.forward_chain(_plan(params, cfg, w, a, h, b, targets))
        merged, attn = attention_forward(a, w.wqkv[i], cfg, b, t, ops)  # (N, C)
        o = QTensor.of(merged, -1, ops)
        g2, wo, w1, w2 = params[p + "g2"], w.wo[i], w.w1[i], w.w2[i]
        # h += o @ wo (N, C) residual, in place; bn = rmsnorm(h, g2), quantized per token;
        # u = bn @ w1 (N, 4C); r = relu(u), quantized per token; y = r @ w2 (N, C)
        tail = ops.block_tail(
            (o.q, o.e, o.q8), (wo.q, wo.e, wo.q8), h, g2, cfg.norm_eps,
            partial(rmsnorm_forward, g=g2, eps=cfg.norm_eps),
            (w1.q, w1.e, w1.q8), (w2.q, w2.e, w2.q8),
        )  # fmt: skip
        norm2, bq = tail.norm, QTensor(tail.b_q, tail.b_e, tail.b8)
        relu, rq = tail.mlp.relu, QTensor(tail.mlp.r_q, tail.mlp.r_e, tail.mlp.r8)
        h += tail.mlp.y  # (N, C) residual
        if keep:
            caches.append(BlockCache(norm1, a, attn, o, norm2, bq, relu, rq))
    hf, normf = rmsnorm_forward(h, params["gf"], cfg.norm_eps)  # (N, C)
    hq = QTensor.of(hf, -1, ops)
    logits = product(hq, w.wte.t)  # (N, V)
    return logits, w, caches, normf, hq


def _plan(
    params: Params,
    cfg: ModelConfig,
    w: Weights,
    a: QTensor,
    h: FloatArray,
    b: int,
    targets: TokenArray | None,
) -> ForwardPlan:
    """What the forward's products depend on from the first block's operand ``a`` on."""

    def parts(x: QTensor) -> QParts:
        return (x.q, x.e, x.q8)

    layers = range(cfg.layers)
    return ForwardPlan(
        parts(a), h, [parts(x) for x in w.wqkv], [parts(x) for x in w.wo],
        [parts(x) for x in w.w1], [parts(x) for x in w.w2],
        [params[f"h.{i}.g1"] for i in layers], [params[f"h.{i}.g2"] for i in layers],
        params["gf"], cfg.norm_eps, parts(w.wte), b, cfg.heads,
        F32(1.0) / np.sqrt(F32(cfg.head_dim)), None if targets is None else targets.reshape(-1),
    )  # fmt: skip


def _back_plan(
    params: Params,
    cfg: ModelConfig,
    dlogits: FloatArray,
    hq: QTensor,
    w: Weights,
    normf: NormCache,
    caches: list[BlockCache],
    b: int,
) -> BackwardPlan:
    """What the backward's products depend on from the logits' gradient on."""

    def parts(x: QTensor) -> QParts:
        return (x.q, x.e, x.q8)

    blocks = []
    for i, c in enumerate(caches):
        blocks.append(BlockBackPlan(
            c.norm1.xhat, c.norm1.inv, params[f"h.{i}.g1"], parts(c.a), parts(w.wqkv[i]),
            parts(c.attn.q), parts(c.attn.k), parts(c.attn.v), c.attn.p, parts(c.attn.pq),
            parts(c.o), parts(w.wo[i]), c.norm2.xhat, c.norm2.inv, params[f"h.{i}.g2"],
            parts(c.bq), parts(w.w1[i]), c.relu, parts(c.r), parts(w.w2[i]),
        ))  # fmt: skip
    return BackwardPlan(
        dlogits, parts(hq), parts(w.wte), normf.xhat, normf.inv, params["gf"], blocks, b,
        cfg.heads, F32(1.0) / np.sqrt(F32(cfg.head_dim)),
    )  # fmt: skip


def forward_logits(
    params: Params, cfg: ModelConfig, x: TokenArray, ops: GemmOps = NUMPY_OPS
) -> FloatArray:
    """Logits (B, T, V) for tokens (B, T): the same forward path as training."""
    with settled(ops):
        logits, *_ = _forward(params, cfg, x, keep=False, ops=ops)
    return logits.reshape(x.shape[0], x.shape[1], cfg.vocab_size)


# Row blocks for the elementwise passes over logits and scores: every operation is row-wise, so
# blocking changes no bit, and a block that stays in cache makes exp about twice as fast.
BLOCK_ELEMENTS = 1 << 17


def _row_blocks(rows: int, width: int) -> range:
    return range(0, rows, max(1, BLOCK_ELEMENTS // max(1, width)))


def cross_entropy(logits: FloatArray, y: npt.NDArray[np.intp]) -> tuple[np.float32, FloatArray]:
    """Mean loss and dlogits for logits (N, V), targets (N,). Overwrites ``logits`` with dlogits.

    Per token: z = logits - max; p = exp(z); s = tree_sum(p); loss_t = log(s) - z[y];
    dlogits = ((p / s) - [y]) / N. Loss = tree_sum(loss_t) / N.
    """
    n, v = logits.shape
    nf = F32(n)
    loss_t = np.empty(n, dtype=np.float32)  # (N,)
    step = _row_blocks(n, v).step
    for i in _row_blocks(n, v):
        blk = logits[i : i + step]  # (n_blk, V) view
        rows = np.arange(blk.shape[0])
        yb = y[i : i + step]
        blk -= np.max(blk, axis=-1, keepdims=True)  # z = logits - m
        zy = blk[rows, yb]  # (n_blk,)
        p = exp(blk)  # (n_blk, V)
        sm = tree_sum(p, -1, keepdims=True)  # (n_blk, 1)
        loss_t[i : i + step] = log(sm[:, 0]) - zy
        np.divide(p, sm, out=blk)  # softmax
        blk[rows, yb] -= F32(1.0)
        blk /= nf  # dlogits
    loss = F32(tree_sum(loss_t, 0)[()] / nf)  # a full 1-D sum is 0-d
    return loss, logits


def softmax_causal(s: FloatArray, scale: np.float32) -> FloatArray:
    """P = softmax(s * scale with keys j > query i set to -inf) over the last axis, in place.

    s: (B, H, T, T) raw scores; per row m = max, z = S - m, p = exp(z), P = p / tree_sum(p).
    """
    t = s.shape[-1]
    mask = causal_mask(t)
    flat = s.reshape(-1, t, t)  # (B * H, T, T) view
    step = max(1, BLOCK_ELEMENTS // (t * t))
    for i in range(0, flat.shape[0], step):
        blk = flat[i : i + step]  # (n_blk, T, T)
        blk *= scale  # exact: a power of two
        blk += mask  # causal: -inf where j > i
        blk -= np.max(blk, axis=-1, keepdims=True)  # z = S - m
        p = exp(blk)
        np.divide(p, tree_sum(p, -1, keepdims=True), out=blk)  # P = p / den
    return s


GradHook = Callable[[str, FloatArray], None]


class _Grads(dict[str, FloatArray]):
    """The gradients dict, telling ``on_grad`` about each parameter as it is set (every
    parameter's gradient is set exactly once, when it is final). ``ops`` settles first: a
    gradient handed out early is on its way to the network, so every product it was computed
    from must be proven before (``GemmOps.settle``)."""

    def __init__(self, on_grad: GradHook, ops: GemmOps) -> None:
        super().__init__()
        self._on_grad = on_grad
        self._ops = ops

    def __setitem__(self, name: str, grad: FloatArray) -> None:
        super().__setitem__(name, grad)
        self._ops.settle()
        self._on_grad(name, grad)


@contextmanager
def settled(ops: GemmOps) -> Iterator[None]:
    """Settle ``ops`` when the block ends, however it ends: nothing computed from an unproven
    product leaves the block, and no check is left running behind it. A failed check raised
    while the block itself is failing chains that failure as its context: the wrong product
    may be why the block failed, and the caller must see the check (it demotes the kernel)."""
    try:
        yield
    except BaseException:
        ops.settle()
        raise
    ops.settle()


# Limb count of the logits gradient's two products (contract v2; v1 used 2, which rounds the
# softmax tail below 2^-16 of the target's p - 1 to zero and biases the output layer's gradient).
LOGITS_LIMBS = 3


def forward_backward(
    params: Params,
    cfg: ModelConfig,
    x: TokenArray,
    y: TokenArray,
    ops: GemmOps = NUMPY_OPS,
    logits_limbs: int = LOGITS_LIMBS,
    on_grad: GradHook | None = None,
) -> tuple[np.float32, dict[str, FloatArray]]:
    """Mean cross-entropy of next tokens ``y`` given ``x`` (both (B, T)) and its gradients.

    ``ops`` computes the integer products (numpy by default, or a gated GPU kernel); the bits
    are the same either way (daisychain.model.ops). ``logits_limbs`` exists so tests and
    benchmarks can run contract v1's two-limb logits gradient beside v2's; training uses the
    default. ``on_grad(name, grad)`` is called once per parameter as soon as its gradient is
    final (the last layers first, the embeddings last), so a peer can send those values while
    the backward goes on; it must not modify ``grad``. ``ops`` may check its products behind the
    step (``GemmOps.settle``): the step settles before each ``on_grad`` and before it returns
    or raises, so a failed check (``KernelAuditError``) stops it before any value leaves.
    """
    keep_step_memory()  # the step's temporaries stay mapped for the next step (heap.py)
    if y.shape != x.shape:
        raise ValueError(f"targets {y.shape} must have the tokens' shape {x.shape}")
    if y.size and (int(y.min()) < 0 or int(y.max()) >= cfg.vocab_size):
        raise ValueError(f"target ids must lie in [0, {cfg.vocab_size})")
    b, t = x.shape
    n, c = b * t, cfg.width
    with settled(ops):  # every audit done, even when the step fails
        logits, w, caches, normf, hq = _forward(params, cfg, x, keep=True, ops=ops, targets=y)
        loss, dlogits = cross_entropy(logits, y.reshape(n).astype(np.intp))  # (N, V) in place

        grads: dict[str, FloatArray] = _Grads(on_grad, ops) if on_grad is not None else {}
        # a GPU may run the whole backward from here in one submit (ops.backward_chain)
        ops.backward_chain(_back_plan(params, cfg, dlogits, hq, w, normf, caches, b))
        dhf, dwte_t = linear_backward(dlogits, hq, w.wte.t, ops, logits_limbs)  # (N, C), (C, V)
        del dlogits, logits  # (N, V) buffer no longer needed
        dh, grads["gf"] = rmsnorm_backward(dhf, params["gf"], normf)  # (N, C)
        for i in reversed(range(cfg.layers)):
            p, cache = f"h.{i}.", caches[i]
            # MLP branch: h += relu(rmsnorm(h) @ w1) @ w2
            dr, grads[p + "w2"] = linear_backward(dh, cache.r, w.w2[i], ops)  # (N, 4C), (4C, C)
            np.multiply(dr, cache.relu, out=dr)  # (N, 4C) dr * 1 or +-0 where u <= 0
            dr += F32(0.0)  # du: +0 where u <= 0 (dr itself is never -0: exact zeros are +0)
            dbn, grads[p + "w1"] = linear_backward(dr, cache.bq, w.w1[i], ops)  # (N, C), (C, 4C)
            dx, grads[p + "g2"] = rmsnorm_backward(dbn, params[p + "g2"], cache.norm2)
            dh += dx  # (N, C) residual
            # attention branch: h += attention(rmsnorm(h) @ wqkv) @ wo
            dmerged, grads[p + "wo"] = linear_backward(dh, cache.o, w.wo[i], ops)  # (N, C), (C, C)
            dqkv = attention_backward(dmerged, cache.attn, cfg, b, t, ops)  # (N, 3C)
            # (N, C), (C, 3C)
            dan, grads[p + "wqkv"] = linear_backward(dqkv, cache.a, w.wqkv[i], ops)
            dx, grads[p + "g1"] = rmsnorm_backward(dan, params[p + "g1"], cache.norm1)
            dh += dx  # (N, C) residual
        # embeddings: scatter rows of dh in flat position order onto +0, then add the logits part
        dwte = np.zeros((cfg.vocab_size, c), dtype=np.float32)  # (V, C)
        np.add.at(dwte, x.reshape(n), dh)
        dwte += dwte_t.T
        grads["wte"] = dwte
        grads["wpe"] = embed_position_grad(dh.reshape(b, t, c), cfg.seq_len)  # (T_max, C)
        ordered = {name: grads[name] for name in param_shapes(cfg)}
    return loss, ordered


def embed_position_grad(dh: FloatArray, seq_len: int) -> FloatArray:
    """dwpe[t] = tree_sum over the batch of dh[:, t]; rows past the sequence get +0."""
    _, t, c = dh.shape
    dwpe = np.zeros((seq_len, c), dtype=np.float32)
    dwpe[:t] = tree_sum(dh, 0)
    return dwpe
