"""The soft-float gate: ``softfloat.wgsl`` against numpy's float32, to the bit, on this device.

numpy's float32 ufuncs are IEEE-754 binary32 with round to nearest, ties to even, and subnormals
kept (docs/NUMERICS.md section 1): the oracle, with the reference ``numerics.fmath`` for the
contract's exp and log. Every case is a pair of operand arrays run through
each operation; results are compared as bit patterns (-0 != +0), except that where numpy gives a
NaN the kernel must give the one canonical NaN 0x7FC00000 (a CPU's NaN payload and sign are its
own; the contract only ever refuses a NaN).

The cases go where float arithmetic goes wrong: every pair of the special values (signed zeros,
the smallest and largest subnormals and normals, infinities, NaN), random bit patterns over the
whole range, operands a few binades apart (cancellation, carries), operands with few mantissa bits
(so products, quotients and sums land exactly on halfway points), results at the subnormal and
overflow boundaries, exp's whole range and the arguments where its k changes, log of every binade
and of mantissas around the split at sqrt(2). Random inputs come from the contract's PRNG, so
every device runs the same.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from daisychain.gpu.gates import GATE_SEED, GateFailure, GateReport
from daisychain.gpu.softfloat import CANONICAL_NAN, OPS, UNARY
from daisychain.numerics import fmath, prng

U32Array = npt.NDArray[np.uint32]

SPECIALS = [
    0x00000000,  # +0
    0x80000000,  # -0
    0x00000001,  # smallest subnormal
    0x80000001,
    0x00000003,
    0x007FFFFF,  # largest subnormal
    0x807FFFFF,
    0x00400000,
    0x00800000,  # smallest normal
    0x80800000,
    0x00800001,
    0x3F800000,  # 1
    0xBF800000,  # -1
    0x3F800001,  # 1 + ulp
    0x3FC00000,  # 1.5
    0x40000000,  # 2
    0x3F7FFFFF,  # 1 - ulp/2
    0x33800000,  # 2^-24: half an ulp of 1
    0xB3800000,
    0x34000000,  # 2^-23
    0x7F000000,  # 2^127
    0x7F7FFFFF,  # largest finite
    0xFF7FFFFF,
    0x7F800000,  # +inf
    0xFF800000,  # -inf
    0x7FC00000,  # NaN
    0xFFC00001,  # another NaN
    0x7F800001,  # signalling NaN
]


class SoftFloat(Protocol):
    """What the gate runs: ``GpuSoftFloat`` or a planted copy of it."""

    @property
    def name(self) -> str: ...

    def apply(self, op: str, a: U32Array, b: U32Array | None = None) -> U32Array: ...


def _words(purpose: int, case: int, n: int) -> U32Array:
    return prng.bits(prng.key(GATE_SEED, 5, purpose, case), n).astype(np.uint32)


def _with_field(words: U32Array, field: npt.NDArray[np.integer[Any]]) -> U32Array:
    """``words``' sign and mantissa with the biased exponent ``field``."""
    return (words & np.uint32(0x807FFFFF)) | (field.astype(np.uint32) << np.uint32(23))


def _sparse(words: U32Array, keep: int) -> U32Array:
    """Keep the top ``keep`` mantissa bits only: exact products and sums, halfway points."""
    mask = np.uint32((0x7FFFFF >> (23 - keep)) << (23 - keep)) if keep else np.uint32(0)
    return (words & np.uint32(0xFF800000)) | (words & mask)


def softfloat_cases(n: int = 4096) -> list[tuple[str, U32Array, U32Array]]:
    """(name, a bits, b bits) of every gate case; each runs through every operation."""
    special = np.array(SPECIALS, dtype=np.uint32)
    cases: list[tuple[str, U32Array, U32Array]] = [
        ("special pairs", np.repeat(special, special.size), np.tile(special, special.size)),
        ("random bits", _words(0, 0, n), _words(0, 1, n)),
    ]
    # Operands within a few binades of each other, at every height of the exponent range.
    base = (_words(1, 0, n) % np.uint32(254)) + np.uint32(1)
    near = np.clip(base.astype(np.int64) + (_words(1, 1, n) % 7).astype(np.int64) - 3, 0, 254)
    cases.append(
        ("near exponents", _with_field(_words(1, 2, n), base), _with_field(_words(1, 3, n), near))
    )
    # Few mantissa bits and exponents 22-27 apart: sums on halfway points; exact products.
    ones = np.full(n, 127, dtype=np.uint32)
    apart = ones - np.uint32(22) - (_words(2, 0, n) % np.uint32(6))
    cases.append(
        (
            "halfway sums",
            _with_field(_words(2, 1, n), ones),
            _sparse(_with_field(_words(2, 2, n), apart), 3),
        )
    )
    cases.append(("few mantissa bits", _sparse(_words(3, 0, n), 12), _sparse(_words(3, 1, n), 12)))
    cases.append(
        (
            "odd short mantissas",
            _with_field(_sparse(_words(4, 0, n), 13) | np.uint32(1 << 10), ones),
            _with_field(_sparse(_words(4, 1, n), 13) | np.uint32(1 << 10), ones),
        )
    )
    # Results around the smallest normal and in the subnormals; and around the largest finite.
    tiny_a = (_words(5, 0, n) % np.uint32(40)) + np.uint32(50)
    tiny_b = (_words(5, 1, n) % np.uint32(40)) + np.uint32(40)
    cases.append(
        (
            "subnormal results",
            _with_field(_words(5, 2, n), tiny_a),
            _with_field(_words(5, 3, n), tiny_b),
        )
    )
    cases.append(
        (
            "subnormal operands",
            _words(6, 0, n) & np.uint32(0x807FFFFF),
            _words(6, 1, n) & np.uint32(0x80FFFFFF),
        )
    )
    huge_a = np.uint32(254) - (_words(7, 0, n) % np.uint32(3))
    huge_b = np.uint32(127) + (_words(7, 1, n) % np.uint32(3))
    cases.append(
        (
            "overflow boundary",
            _with_field(_words(7, 2, n), huge_a),
            _with_field(_words(7, 3, n), huge_b),
        )
    )
    # The contract's exp over its whole range, and where x * LOG2E is near a half (which k).
    u = prng.uniform(prng.key(GATE_SEED, 5, 8, 0), n).astype(np.float64)
    cases.append(("exp arguments", (u * 180.0 - 90.0).astype(np.float32).view(np.uint32), base))
    k = np.arange(-125, 128, dtype=np.float64)
    halves = ((k + 0.5) * np.log(2.0)).astype(np.float32).view(np.uint32)
    steps = np.arange(-4, 5, dtype=np.int64)
    around = halves.astype(np.int64)[:, None] + np.where(halves[:, None] >> 31, -steps, steps)
    flat = around.reshape(-1).astype(np.uint32)
    cases.append(("exp near k + 1/2", flat, flat[::-1].copy()))
    # log: positive values of every binade, and mantissas around sqrt(2)'s (where m is split).
    pos = _words(9, 0, n) & np.uint32(0x7FFFFFFF)
    mant = (np.uint32(0x3504F3) - np.uint32(8) + (_words(9, 1, n) % np.uint32(17))) & np.uint32(
        0x7FFFFF
    )
    cases.append(("log arguments", pos, pos[::-1].copy()))
    cases.append(("log around sqrt 2", _with_field(mant, base), pos))
    return cases


def reference(op: str, a: U32Array, b: U32Array) -> U32Array:
    """numpy's float32 result bits of ``op`` (NaN as the canonical NaN)."""
    x = a.view(np.float32)
    y = b.view(np.float32)
    with np.errstate(all="ignore"):
        if op == "add":
            r = np.add(x, y, dtype=np.float32)
        elif op == "sub":
            r = np.subtract(x, y, dtype=np.float32)
        elif op == "mul":
            r = np.multiply(x, y, dtype=np.float32)
        elif op == "div":
            r = np.divide(x, y, dtype=np.float32)
        elif op == "sqrt":
            r = np.sqrt(x, dtype=np.float32)
        elif op == "exp":
            r = fmath.exp(x.copy())
        elif op == "log":
            r = fmath.log(x.copy())
        elif op == "rint":
            r = np.rint(x).astype(np.float32)
        else:
            raise ValueError(f"unknown soft-float operation {op!r}")
    bits = np.ascontiguousarray(r).view(np.uint32).copy()
    bits[np.isnan(r)] = np.uint32(CANONICAL_NAN)
    return bits


def _hex(v: int) -> str:
    return f"0x{int(v):08x}"


def run_softfloat_gates(sf: SoftFloat, n: int = 4096) -> GateReport:
    """Every case through every operation; the first result whose bits differ fails the gate."""
    passed = 0
    for case, a, b in softfloat_cases(n):
        for op in OPS:
            name = f"{case} ({op})"
            try:
                got = sf.apply(op, a) if op in UNARY else sf.apply(op, a, b)
            except Exception as exc:
                failure = GateFailure(
                    sf.name, name, a.shape, None, "a result", f"{type(exc).__name__}: {exc}"
                )
                return GateReport(sf.name, passed, failure)
            want = reference(op, a, b)
            wrong = np.flatnonzero(want != got)
            if wrong.size:
                i = int(wrong[0])
                operands = _hex(a[i]) if op in UNARY else f"{_hex(a[i])}, {_hex(b[i])}"
                failure = GateFailure(
                    sf.name,
                    f"{name} of {operands}",
                    a.shape,
                    (i,),
                    _hex(want[i]),
                    _hex(got[i]),
                )
                return GateReport(sf.name, passed, failure)
            passed += 1
    return GateReport(sf.name, passed, None)
