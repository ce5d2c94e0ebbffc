"""Golden vectors of the outer loop's arithmetic (tests/vectors/outer/; docs/OUTER.md).

An outer run's replicas stay identical only if every peer reduces the pseudo-gradients and takes
the Nesterov step to the same bits, in whatever language it runs. These files pin both for the
JavaScript mirror (``static/js/outer/``; ``tests/js/outer.test.mjs`` checks it bit for bit):

- ``mean.json``: ``outer.mean.weighted_mean`` (docs/OUTER.md, "The mean"): the token counts,
  the peers' values in roster order and the mean, for cases chosen to catch the ways a mirror
  drifts: ties of the rounded adds and products (round half to even), a sum whose bits depend on
  roster order, counts with a gcd > 1 (6, 3, 3 and 5, 2, 1 in tokens), where dividing by the gcd
  or not changes bits (checked when the file is written), a peer with no tokens (its values, NaN
  among them, never enter), one peer alone; and the refusals, each with its message.
- ``nesterov.json``: ``outer.nesterov`` (docs/OUTER.md, "The outer step", "Identity"): a
  pseudo-gradient ``outer - local``, then runs of outer steps from given weights and momentum
  with the weights, momentum and ``outer_hash`` after every step, for DiLoCo's 0.7 and 0.9,
  plain averaging (1, 0), and a momentum that starts non-zero with constants that round.

Arrays are float32, stored as the base64 of their little-endian bytes (C order; the flat mean
is padded with +0 to whole blocks of 256, as p2p.codec.flatten pads it). Inputs come from the
contract's PRNG and exact scalings of its integers, so every regeneration is byte-identical.

    python tests/vectorgen --write outer   # regenerate tests/vectors/outer/
    python tests/vectorgen --check outer   # recompute, compare (exit 1 if different)
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.numerics import prng
from daisychain.outer.mean import MeanError, weighted_mean
from daisychain.outer.nesterov import (
    OuterConfig,
    OuterState,
    apply_outer,
    outer_hash,
    pseudo_gradient,
)
from daisychain.p2p import allreduce
from daisychain.wire import codec
from vectorgen.files import check_texts, write_texts

FORMAT = "daisychain-outer-vectors"
FORMAT_VERSION = 1
SUBDIR = "outer"
SEED = 21  # issue 21
FloatArray = npt.NDArray[np.float32]


def f32(values: list[float]) -> FloatArray:
    return np.array(values, dtype=np.float32)


def b64(a: FloatArray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f4").tobytes()).decode("ascii")


def draw(tag: int, n: int, low: int, high: int) -> FloatArray:
    """``n`` float32 values of stream ``tag``: a signed 24-bit integer times ``2^e`` with ``e``
    drawn from ``[low, high)``, so neighbours differ in exponent and their sums round. Exact:
    no float operation rounds here."""
    k = prng.key(SEED, tag)
    mant = (prng.bits(k, n).astype(np.int64) >> 8) - (1 << 23)  # [-2^23, 2^23)
    e = prng.below(prng.key(SEED, tag, 1), n, high - low) + low
    return np.ldexp(mant.astype(np.float64), e - 23).astype(np.float32)


# ---- the mean ---------------------------------------------------------------------------------

ONE = 1.0
ULP1 = 2.0**-23  # the float32 step above 1
TWO24 = float(1 << 24)

# (name, what it catches, token counts, the peers' values)
MeanCase = tuple[str, str, list[int], list[FloatArray]]


def _mean_cases() -> list[MeanCase]:
    n = 2 * codec.BLOCK
    nan_peer = draw(31, 8, -4, 4)
    nan_peer[[1, 5]] = np.float32(np.nan)
    nan_peer[3] = np.float32(3e38)
    return [
        ("one-peer", "one peer alone gives back its own values bit for bit (weight 7 / gcd 7 = 1)",
         [7], [draw(10, 16, -30, 10)]),
        ("add-ties", "adds that fall exactly halfway round to even: 1 + 2^-24 -> 1, "
         "(1 + 2^-23) + 2^-24 -> 1 + 2^-22, 2^24 + 1 -> 2^24, 2^24 + 3 -> 2^24 + 4, and signs",
         [1, 1], [f32([ONE, ONE + ULP1, -ONE, TWO24, TWO24, -TWO24 - 2, 0.5, -0.0]),
                  f32([2.0**-24, 2.0**-24, -(2.0**-24), 1.0, 3.0, -1.0, 2.0**-25, -0.0])]),
        ("product-ties", "products that round (d * f32(w) with w = 3): (1 + 2^-23) * 3 is halfway "
         "between two float32s; then the division by 4 and more ties",
         [3, 1], [f32([ONE + ULP1, ONE + 3 * ULP1, -(ONE + ULP1), 1.5 + ULP1, TWO24 - 1, 5.0]),
                  f32([0.0, 0.0, 0.0, 2.0**-23, 1.0, -(2.0**-21)])]),
        ("roster-order", "the sum runs in roster order: (1 + 2^-24) + 2^-24 is 1, the other way "
         "round 1 + 2^-23; cancelling peers with a tiny third",
         [1, 1, 1], [f32([ONE, TWO24, 2.0**-24, 1e-30]),
                     f32([2.0**-24, -TWO24, 2.0**-24, 1.0]),
                     f32([2.0**-24, 1.0, ONE, -1.0])]),
        ("equal", "three equal devices (256 tokens each: weights 1, 1, 1), exponents 40 apart",
         [256, 256, 256], [draw(11 + j, n, -30, 10) for j in range(3)]),
        ("gcd-6-3-3", "shares 6, 3, 3 are weights 2, 1, 1: multiplying by 6, 3, 3 and dividing "
         "by 12 (the per-step rule) gives other bits, and so does an unweighted mean",
         [6, 3, 3], [draw(20 + j, n, -12, 4) for j in range(3)]),
        ("uneven-5-2-1", "tokens 960, 384, 192 (5, 2, 1 sequences of 192): weights 5, 2, 1",
         [960, 384, 192], [draw(30 + j, n, -20, 0) for j in range(3)]),
        ("zero-share", "a peer with no tokens adds nothing: its values (NaN, 3e38 among them) "
         "never enter, the others weigh 1 and 1",
         [4, 0, 4], [draw(40, 8, -4, 4), nan_peer, draw(41, 8, -4, 4)]),
        ("zero-first", "the first peer has no tokens: the sum starts at the next (weights 0, 1, 2)",
         [0, 3, 6], [nan_peer, draw(42, 8, -4, 4), draw(43, 8, -4, 4)]),
        ("four-peers", "four peers, weights 3, 5, 7, 1 (tokens in units of 64), products round",
         [192, 320, 448, 64], [draw(50 + j, n, -24, 8) for j in range(4)]),
    ]  # fmt: skip


# (name, token counts, number of values) whose mean is refused
REFUSED_MEANS: tuple[tuple[str, list[int]], ...] = (
    ("negative-count", [3, -1]),
    ("no-tokens", [0, 0, 0]),
    ("weights-past-2^24", [1 << 24, 1]),
)


def _unweighted(values: list[FloatArray], tokens: list[int]) -> FloatArray:
    parts = [v for v, t in zip(values, tokens, strict=True) if t > 0]
    return weighted_mean(parts, [1] * len(parts))


def _mean_case(name: str, what: str, tokens: list[int], values: list[FloatArray]) -> dict[str, Any]:
    mean = weighted_mean(values, tokens)
    if name.startswith(("gcd-", "uneven-")):
        # The case is only worth its place if the rules a mirror could get wrong differ here.
        who = [k for k, t in enumerate(tokens) if t > 0]
        raw = allreduce.reduce_chunk([values[k] for k in who], [tokens[k] for k in who],
                                     sum(tokens))  # fmt: skip
        assert not np.array_equal(raw.view(np.uint32), mean.view(np.uint32)), name
        assert not np.array_equal(_unweighted(values, tokens), mean), name
    return {
        "name": name, "what": what, "tokens": tokens, "size": int(values[0].size),
        "values": [b64(v) for v in values], "mean": b64(mean),
    }  # fmt: skip


def _refused(name: str, tokens: list[int]) -> dict[str, Any]:
    values = [np.zeros(4, dtype=np.float32) for _ in tokens]
    try:
        weighted_mean(values, tokens)
    except MeanError as exc:
        return {"name": name, "tokens": tokens, "size": 4, "error": str(exc)}
    raise AssertionError(f"{name}: the mean of {tokens} was not refused")


def build_mean() -> dict[str, Any]:
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "generated_by": (
            "python tests/vectorgen --write outer (daisychain.outer.mean.weighted_mean)"
        ),
        "rule": "w = tokens // gcd(positive tokens); acc = d[j0] * f32(w[j0]); acc = acc + "
                "d[j] * f32(w[j]) for every further j with w[j] > 0 in roster order; "
                "mean = acc / f32(sum w); every operation one float32 rounding (docs/OUTER.md)",
        "fields": {
            "values": "float32 little-endian, base64: one array of `size` values per roster peer",
            "mean": "the expected mean, same encoding",
            "error": "the mean is refused with exactly this message",
        },
        "cases": [_mean_case(*c) for c in _mean_cases()],
        "refused": [_refused(*c) for c in REFUSED_MEANS],
    }  # fmt: skip


# ---- the outer step ---------------------------------------------------------------------------

# Two parameters of odd sizes (22 values: the flat mean is padded to one block of 256).
SHAPES: dict[str, tuple[int, ...]] = {"wte": (3, 5), "ln_f.g": (7,)}


def _params(tag: int, low: int, high: int) -> dict[str, FloatArray]:
    out = {}
    for i, (name, shape) in enumerate(SHAPES.items()):
        out[name] = draw(tag + i, int(np.prod(shape)), low, high).reshape(shape)
    return out


def _flat(tag: int, low: int, high: int) -> FloatArray:
    """A mean pseudo-gradient: the parameters' values, then +0 padding to a whole block."""
    return codec.flatten(_params(tag, low, high))


def _arrays(params: dict[str, FloatArray]) -> dict[str, str]:
    return {name: b64(a) for name, a in params.items()}


def _run(
    name: str, what: str, tag: int, cfg: OuterConfig, momentum0: bool, steps: int
) -> dict[str, Any]:
    """``steps`` outer steps from drawn weights (and momentum, or +0); streams from ``tag``."""
    w0 = _params(tag, -3, 1)
    m0 = _params(tag + 10, -8, -2) if momentum0 else {
        n: np.zeros(a.shape, dtype=np.float32) for n, a in w0.items()
    }  # fmt: skip
    state = OuterState({n: a.copy() for n, a in w0.items()}, {n: a.copy() for n, a in m0.items()})
    out_steps = []
    for s in range(steps):
        g = _flat(tag + 20 + 2 * s, -12, -2)
        apply_outer(state, cfg, g)
        out_steps.append({
            "mean": b64(g), "weights": _arrays(state.params), "momentum": _arrays(state.momentum),
            "hash": outer_hash(state),
        })  # fmt: skip
    return {
        "name": name, "what": what, "lr": cfg.lr, "momentum": cfg.momentum,
        "start": {"weights": _arrays(w0), "momentum": _arrays(m0),
                  "hash": outer_hash(OuterState(w0, m0))},
        "steps": out_steps,
    }  # fmt: skip


def _pseudo_gradient() -> dict[str, Any]:
    outer = _params(400, -3, 1)
    local = {n: (a + draw(410 + i, a.size, -14, -6).reshape(a.shape)).astype(np.float32)
             for i, (n, a) in enumerate(outer.items())}  # fmt: skip
    return {
        "what": "delta = outer - local per element (one float32 subtraction), flattened in "
        "parameter order and padded with +0 to a whole block",
        "outer": _arrays(outer), "local": _arrays(local),
        "delta": b64(pseudo_gradient(outer, local)),
    }  # fmt: skip


def build_nesterov() -> dict[str, Any]:
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "generated_by": "python tests/vectorgen --write outer (daisychain.outer.nesterov)",
        "rule": "mu = f32(momentum), lr = f32(lr); per element: M = (M * mu) + g; "
                "u = g + (M * mu); W = W - (u * lr); hash = SHA-256 of W then M, parameter "
                "order, little-endian float32 (docs/OUTER.md)",
        "shapes": {n: list(s) for n, s in SHAPES.items()},
        "fields": {
            "weights, momentum": "per parameter (in parameter order), float32 little-endian, "
                                 "base64",
            "mean": "the flat mean pseudo-gradient of the step, padded to 256 values",
            "hash": "outer_hash after the step",
        },
        "pseudo_gradient": _pseudo_gradient(),
        "runs": [
            _run("diloco", "DiLoCo's 0.7 and 0.9 from zero momentum, five steps", 100,
                 OuterConfig(4, 0.7, 0.9), False, 5),
            _run("averaging", "lr 1, momentum 0: W - g, the plain average of the peers' weights",
                 200, OuterConfig(1, 1.0, 0.0), False, 2),
            _run("momentum-start", "a non-zero momentum to start (a restored run), lr 0.1 and "
                 "momentum 0.95 (neither exact in float32)", 300, OuterConfig(10, 0.1, 0.95),
                 True, 3),
        ],
    }  # fmt: skip


def files() -> dict[str, str]:
    return {
        f"{SUBDIR}/{name}.json": json.dumps(obj, indent=1) + "\n"
        for name, obj in (("mean", build_mean()), ("nesterov", build_nesterov()))
    }


def write(directory: Path) -> str:
    return write_texts(directory, files())


def check(directory: Path) -> str:
    return check_texts(directory, files(), "run `python tests/vectorgen --write outer`")
