"""Every instruction of the assembler's table, run under Node, against Python's own arithmetic.

A wrong opcode number usually still validates (i32.add and i32.sub have the same type), so the
table (server/daisychain/wasm/opcodes.py) is proven by running each entry: one module exports a
small function per instruction, Node calls each on edge-case inputs (signs, zero, extremes,
-0.0, infinities, subnormals, unaligned addresses), and every result is compared by bit pattern
with the value Python computes from the specification's definition (NaN results by NaN-ness). A
test shows the harness catching a swapped opcode. Skipped without Node.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daisychain.nodejs import NodeError, node_argv
from daisychain.wasm import assemble, opcodes

M32, M64 = (1 << 32) - 1, (1 << 64) - 1

RUNNER = r"""
import fs from 'node:fs';
const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf-8'));
const { instance } = await WebAssembly.instantiate(fs.readFileSync(process.argv[3]));
const e = instance.exports;
const dv = new DataView(new ArrayBuffer(8));
function arg({ t, v }) {
  if (t === 'i32') return Number(BigInt.asIntN(32, BigInt(v)));
  if (t === 'i64') return BigInt.asIntN(64, BigInt(v));
  if (t === 'f32') { dv.setUint32(0, Number(v)); return dv.getFloat32(0); }
  dv.setBigUint64(0, BigInt(v)); return dv.getFloat64(0);
}
function out(t, x) {
  if (t === 'i32') return String(x >>> 0);
  if (t === 'i64') return String(BigInt.asUintN(64, x));
  if (t === null) return null;
  if (Number.isNaN(x)) return 'nan';
  if (t === 'f32') { dv.setFloat32(0, x); return String(dv.getUint32(0)); }
  dv.setFloat64(0, x);
  return String(dv.getBigUint64(0));
}
const mem = () => new Uint8Array(e.memory.buffer);
const results = spec.map((c) => {
  mem().fill(0, 0, 64);
  mem().set(Uint8Array.from(c.mem, (b) => b), 0);
  try {
    const v = e[c.fn](...c.args.map(arg));
    return { v: out(c.result, v), mem: Array.from(mem().subarray(0, 48)) };
  } catch (exc) {
    return { trap: String(exc.message) };
  }
});
console.log(JSON.stringify(results));
"""


def _node() -> tuple[str, ...]:
    try:
        return node_argv()
    except NodeError as exc:
        pytest.skip(str(exc))


# --- values -------------------------------------------------------------------------------------

I32 = [
    0,
    1,
    2,
    7,
    31,
    32,
    33,
    100,
    0x7FFFFFFF,
    0x80000000,
    0x80000001,
    0xFFFFFFFF,
    0xFFFFFF9C,
    0x12345678,
    0xDEADBEEF,
]
I64 = [
    0,
    1,
    2,
    63,
    64,
    65,
    100,
    0x7FFFFFFFFFFFFFFF,
    0x8000000000000000,
    M64,
    M64 - 99,
    0x0123456789ABCDEF,
    0xFEDCBA9876543210,
    1 << 32,
    M32,
]
F64 = [
    0.0,
    -0.0,
    1.0,
    -1.5,
    2.5,
    3.5,
    -2.5,
    0.1,
    1e10,
    -3.75,
    1e-310,
    7.0,
    math.inf,
    -math.inf,
    123456789.75,
    -2147483648.5,
    4294967295.0,
    9.3e18,
]


def s(x: int, bits: int) -> int:
    return x - (1 << bits) if x >> (bits - 1) else x


def f32_bits(v: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", v))[0])


def f64_bits(v: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", v))[0])


def is_nan_bits(t: str, bits: int) -> bool:
    if t == "f32":
        return (bits >> 23) & 0xFF == 0xFF and bits & 0x7FFFFF != 0
    return (bits >> 52) & 0x7FF == 0x7FF and bits & ((1 << 52) - 1) != 0


def round_int(n: int, mantissa: int) -> float:
    """n rounded to ``mantissa`` significant bits, to nearest, ties to even (exact)."""
    m = abs(n)
    shift = m.bit_length() - mantissa
    if shift > 0:
        q, r = divmod(m, 1 << shift)
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
        m = q << shift
    return float(-m if n < 0 else m)


def f32(v: float) -> float:
    with np.errstate(all="ignore"):
        return float(np.float32(v))


F32 = sorted({f32(v) for v in [*F64, 1e-40]}, key=lambda v: (math.copysign(1, v), v))


# --- what each instruction must compute ----------------------------------------------------------


@dataclass(frozen=True)
class Case:
    op: str
    params: tuple[str, ...]
    result: str | None
    fn: Callable[..., Any]  # expected result from the arguments (ints unsigned, floats)
    ok: Callable[..., bool] = lambda *a: True  # inputs that do not trap


def _divides(bits: int, signed: bool) -> Callable[[int, int], bool]:
    def ok(a: int, b: int) -> bool:
        return b != 0 and not (signed and a == 1 << (bits - 1) and b == (1 << bits) - 1)

    return ok


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def integer_cases(t: str, bits: int) -> list[Case]:
    m = (1 << bits) - 1

    def rot(a: int, k: int) -> int:
        k %= bits
        return ((a << k) | (a >> (bits - k))) & m

    binary: dict[str, Callable[[int, int], int]] = {
        "add": lambda a, b: (a + b) & m,
        "sub": lambda a, b: (a - b) & m,
        "mul": lambda a, b: (a * b) & m,
        "div_u": lambda a, b: a // b,
        "rem_u": lambda a, b: a % b,
        "div_s": lambda a, b: _tdiv(s(a, bits), s(b, bits)) & m,
        "rem_s": lambda a, b: (s(a, bits) - _tdiv(s(a, bits), s(b, bits)) * s(b, bits)) & m,
        "and": lambda a, b: a & b,
        "or": lambda a, b: a | b,
        "xor": lambda a, b: a ^ b,
        "shl": lambda a, b: (a << (b % bits)) & m,
        "shr_s": lambda a, b: (s(a, bits) >> (b % bits)) & m,
        "shr_u": lambda a, b: a >> (b % bits),
        "rotl": rot,
        "rotr": lambda a, b: rot(a, bits - b % bits),
    }
    compare: dict[str, Callable[[int, int], bool]] = {
        "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b,
        "lt_u": lambda a, b: a < b,
        "gt_u": lambda a, b: a > b,
        "le_u": lambda a, b: a <= b,
        "ge_u": lambda a, b: a >= b,
        "lt_s": lambda a, b: s(a, bits) < s(b, bits),
        "gt_s": lambda a, b: s(a, bits) > s(b, bits),
        "le_s": lambda a, b: s(a, bits) <= s(b, bits),
        "ge_s": lambda a, b: s(a, bits) >= s(b, bits),
    }
    unary: dict[str, Callable[[int], int]] = {
        "clz": lambda a: bits - a.bit_length(),
        "ctz": lambda a: bits if a == 0 else (a & -a).bit_length() - 1,
        "popcnt": lambda a: bin(a).count("1"),
        "extend8_s": lambda a: s(a & 0xFF, 8) & m,
        "extend16_s": lambda a: s(a & 0xFFFF, 16) & m,
    }
    if bits == 64:
        unary["extend32_s"] = lambda a: s(a & M32, 32) & m
    cases = []
    for name, fn in binary.items():
        ok = _divides(bits, name == "div_s") if name[:3] in ("div", "rem") else lambda a, b: True
        cases.append(Case(f"{t}.{name}", (t, t), t, fn, ok))
    for name, cmp in compare.items():
        cases.append(Case(f"{t}.{name}", (t, t), "i32", lambda a, b, c=cmp: int(c(a, b))))
    for name, un in unary.items():
        cases.append(Case(f"{t}.{name}", (t,), t, un))
    cases.append(Case(f"{t}.eqz", (t,), "i32", lambda a: int(a == 0)))
    return cases


def _fmin(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0:
        return -0.0 if math.copysign(1, a) < 0 or math.copysign(1, b) < 0 else 0.0
    return min(a, b)


def _fmax(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if a == b == 0:
        return 0.0 if math.copysign(1, a) > 0 or math.copysign(1, b) > 0 else -0.0
    return max(a, b)


def float_cases(t: str, r: Callable[[float], float]) -> list[Case]:
    def div(a: float, b: float) -> float:
        if b == 0:
            return (
                math.nan
                if a == 0 or math.isnan(a)
                else math.copysign(math.inf, a) * (math.copysign(1, b))
            )
        return r(a / b) if t == "f64" else f32(float(np.float64(a) / np.float64(b)))

    def sqrt(a: float) -> float:
        if a < 0:
            return math.nan
        return math.sqrt(a) if t == "f64" else f32(math.sqrt(a))

    ftype = np.float32 if t == "f32" else np.float64
    binary: dict[str, Callable[[float, float], float]] = {
        # float32 results of +, -, *, / are the exact result rounded once: float64 holds the exact
        # sum, difference and product of two float32 values, and a quotient rounded to float64
        # first is known to round to the same float32 (53 >= 2 * 24 + 2)
        "add": lambda a, b: r(float(ftype(a) + ftype(b))),
        "sub": lambda a, b: r(float(ftype(a) - ftype(b))),
        "mul": lambda a, b: r(float(ftype(a) * ftype(b))),
        "div": div,
        "min": _fmin,
        "max": _fmax,
        "copysign": math.copysign,
    }
    unary: dict[str, Callable[[float], float]] = {
        "abs": abs,
        "neg": lambda a: -a,
        "ceil": lambda a: float(np.ceil(a)),
        "floor": lambda a: float(np.floor(a)),
        "trunc": lambda a: float(np.trunc(a)),
        "nearest": lambda a: float(np.rint(a)),
        "sqrt": sqrt,
    }
    compare: dict[str, Callable[[float, float], bool]] = {
        "eq": lambda a, b: a == b,
        "ne": lambda a, b: a != b,
        "lt": lambda a, b: a < b,
        "gt": lambda a, b: a > b,
        "le": lambda a, b: a <= b,
        "ge": lambda a, b: a >= b,
    }
    cases = [Case(f"{t}.{n}", (t, t), t, fn) for n, fn in binary.items()]
    cases += [Case(f"{t}.{n}", (t,), t, fn) for n, fn in unary.items()]
    cases += [
        Case(f"{t}.{n}", (t, t), "i32", lambda a, b, c=c: int(c(a, b))) for n, c in compare.items()
    ]
    return cases


def _truncs(bits: int, signed: bool) -> Callable[[float], bool]:
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1)) if signed else (0, 2**bits)

    def ok(a: float) -> bool:
        return math.isfinite(a) and lo <= math.trunc(a) < hi

    return ok


def conversion_cases() -> list[Case]:
    cases = [
        Case("i32.wrap_i64", ("i64",), "i32", lambda a: a & M32),
        Case("i64.extend_i32_s", ("i32",), "i64", lambda a: s(a, 32) & M64),
        Case("i64.extend_i32_u", ("i32",), "i64", lambda a: a),
        Case("f32.demote_f64", ("f64",), "f32", f32),
        Case("f64.promote_f32", ("f32",), "f64", lambda a: a),
        Case("i32.reinterpret_f32", ("f32",), "i32", f32_bits),
        Case("i64.reinterpret_f64", ("f64",), "i64", f64_bits),
        Case("f32.reinterpret_i32", ("i32",), "f32", lambda a: a),  # compared as bits
        Case("f64.reinterpret_i64", ("i64",), "f64", lambda a: a),
    ]
    for ft in ("f32", "f64"):
        for it, bits in (("i32", 32), ("i64", 64)):
            m = (1 << bits) - 1
            for sx, signed in (("s", True), ("u", False)):
                cases.append(
                    Case(
                        f"{it}.trunc_{ft}_{sx}",
                        (ft,),
                        it,
                        lambda a, m=m: math.trunc(a) & m,
                        _truncs(bits, signed),
                    )
                )
                mantissa = 24 if ft == "f32" else 53
                cases.append(
                    Case(
                        f"{ft}.convert_{it}_{sx}",
                        (it,),
                        ft,
                        lambda a, b=bits, sg=signed, mt=mantissa: round_int(
                            s(a, b) if sg else a, mt
                        ),
                    )
                )
    return cases


def scalar_cases() -> list[Case]:
    return [
        *integer_cases("i32", 32),
        *integer_cases("i64", 64),
        *float_cases("f32", f32),
        *float_cases("f64", lambda v: v),
        *conversion_cases(),
    ]


VALUES: dict[str, list[Any]] = {"i32": I32, "i64": I64, "f32": F32, "f64": F64}


def encode_arg(t: str, v: Any) -> dict[str, Any]:
    if t == "f32":
        return {"t": t, "v": str(f32_bits(v))}
    if t == "f64":
        return {"t": t, "v": str(f64_bits(v))}
    return {"t": t, "v": str(v)}


def expected_repr(t: str | None, v: Any) -> str | None:
    if t is None:
        return None
    if t in ("f32", "f64") and isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return str(f32_bits(v) if t == "f32" else f64_bits(v))
    return str(v)


# --- memory, vector and control instructions: functions of their own ---------------------------

PATTERN = [(i * 37 + 11) & 0xFF for i in range(48)]
FLOATS = [1.5, -2.25, 3.0e-5, 7.0, 0.1, -0.0, 1e30, 2.0]  # two f32x4 operands at 0 and 16


def f32_pattern() -> list[int]:
    return list(struct.pack("<8f", *FLOATS))


def lanes(data: list[int], width: int, signed: bool) -> list[int]:
    out = []
    for i in range(0, len(data), width):
        v = int.from_bytes(bytes(data[i : i + width]), "little")
        out.append(s(v, 8 * width) if signed else v)
    return out


def pack_lanes(values: list[int], width: int) -> list[int]:
    m = (1 << (8 * width)) - 1
    return list(b"".join((v & m).to_bytes(width, "little") for v in values))


def f32x4(data: list[int]) -> list[float]:
    return list(struct.unpack("<4f", bytes(data)))


def f32x4_bytes(values: list[float]) -> list[int]:
    return list(struct.pack("<4f", *values))


@dataclass(frozen=True)
class Special:
    """A function of its own: WAT text, its call, the memory before, and what must come out."""

    ops: tuple[str, ...]  # the instructions it proves
    wat: str  # the func field, exported as `name`
    args: tuple[tuple[str, Any], ...]
    result: str | None
    value: Any  # expected return (None: none)
    memory: tuple[int, ...] = ()  # expected bytes 0.. after the call (prefix)
    mem_before: tuple[int, ...] = tuple(PATTERN)


def load_case(op: str, t: str, width: int, signed: bool, addr: int) -> Special:
    v = int.from_bytes(bytes(PATTERN[addr : addr + width]), "little")
    bits = 32 if t == "i32" else 64
    if signed:
        v = s(v, 8 * width) & ((1 << bits) - 1)
    return Special(
        (op,), f"(func (param i32) (result {t}) ({op} (local.get 0)))", (("i32", addr),), t, v
    )


def store_case(op: str, t: str, width: int, value: int, addr: int) -> Special:
    after = list(PATTERN)
    after[addr : addr + width] = list((value & ((1 << (8 * width)) - 1)).to_bytes(width, "little"))
    return Special(
        (op,),
        f"(func (param i32) (param {t}) ({op} (local.get 0) (local.get 1)))",
        (("i32", addr), (t, value)),
        None,
        None,
        tuple(after),
    )


def v128_case(
    ops: tuple[str, ...], expr: str, expected: list[int], before: list[int] | None = None
) -> Special:
    """(v128.store (i32.const 32) EXPR): bytes 32..47 must become ``expected``."""
    base = list(before if before is not None else PATTERN)
    after = base[:32] + expected
    return Special(
        ("v128.store", *ops),
        f"(func (v128.store (i32.const 32) {expr}))",
        (),
        None,
        None,
        tuple(after),
        tuple(base),
    )


def special_cases() -> list[Special]:
    p = PATTERN
    cases: list[Special] = []
    for op, t, w, sg in [
        ("i32.load", "i32", 4, False),
        ("i64.load", "i64", 8, False),
        ("i32.load8_s", "i32", 1, True),
        ("i32.load8_u", "i32", 1, False),
        ("i32.load16_s", "i32", 2, True),
        ("i32.load16_u", "i32", 2, False),
        ("i64.load8_s", "i64", 1, True),
        ("i64.load8_u", "i64", 1, False),
        ("i64.load16_s", "i64", 2, True),
        ("i64.load16_u", "i64", 2, False),
        ("i64.load32_s", "i64", 4, True),
        ("i64.load32_u", "i64", 4, False),
    ]:
        for addr in (0, 3, 13):
            cases.append(load_case(op, t, w, sg, addr))
    for op, t, w in [
        ("i32.store", "i32", 4),
        ("i64.store", "i64", 8),
        ("i32.store8", "i32", 1),
        ("i32.store16", "i32", 2),
        ("i64.store8", "i64", 1),
        ("i64.store16", "i64", 2),
        ("i64.store32", "i64", 4),
    ]:
        value = 0x8899AABBCCDDEEFF & ((1 << (32 if t == "i32" else 64)) - 1)
        cases.append(store_case(op, t, w, value, 5))
    f_before = p[:20] + list(struct.pack("<f", -2.25)) + p[24:]
    f_after = f_before[:4] + list(struct.pack("<f", -2.25)) + f_before[8:]
    cases.append(
        Special(
            ("f32.load", "f32.store"),
            "(func (f32.store (i32.const 4) (f32.load (i32.const 20))))",
            (),
            None,
            None,
            tuple(f_after),
            tuple(f_before),
        )
    )
    d_before = p[:24] + list(struct.pack("<d", 1e-300)) + p[32:]
    d_after = d_before[:8] + list(struct.pack("<d", 1e-300)) + d_before[16:]
    cases.append(
        Special(
            ("f64.load", "f64.store"),
            "(func (f64.store offset=8 (i32.const 0) (f64.load (i32.const 24))))",
            (),
            None,
            None,
            tuple(d_after),
            tuple(d_before),
        )
    )
    cases.append(Special(("memory.size",), "(func (result i32) (memory.size))", (), "i32", 1))
    cases.append(
        Special(("memory.grow",), "(func (result i32) (memory.grow (i32.const 2)))", (), "i32", 1)
    )
    # constants
    cases.append(
        Special(
            ("i32.const",), "(func (result i32) (i32.const -2147483648))", (), "i32", 0x80000000
        )
    )
    cases.append(
        Special(
            ("i64.const",),
            "(func (result i64) (i64.const 0xfedcba9876543210))",
            (),
            "i64",
            0xFEDCBA9876543210,
        )
    )
    cases.append(
        Special(
            ("f32.const",),
            "(func (result f32) (f32.const -0x1.8p-126))",
            (),
            "f32",
            -1.5 * 2.0**-126,
        )
    )
    cases.append(Special(("f64.const",), "(func (result f64) (f64.const 0.1))", (), "f64", 0.1))
    # vectors
    cases.append(v128_case(("v128.load",), "(v128.load offset=3 (i32.const 0))", p[3:19]))
    cases.append(
        v128_case(
            ("v128.load8x8_s",),
            "(v128.load8x8_s (i32.const 5))",
            pack_lanes(lanes(p[5:13], 1, True), 2),
        )
    )
    cases.append(
        v128_case(
            ("v128.load8x8_u",),
            "(v128.load8x8_u (i32.const 5))",
            pack_lanes(lanes(p[5:13], 1, False), 2),
        )
    )
    cases.append(
        v128_case(
            ("v128.const",),
            "(v128.const i16x8 -1 2 -32768 32767 0 5 6 7)",
            pack_lanes([-1, 2, -32768, 32767, 0, 5, 6, 7], 2),
        )
    )
    order = [31, 0, 16, 1, 17, 2, 30, 3, 4, 5, 6, 7, 8, 9, 10, 15]
    both = p[0:16] + p[16:32]
    cases.append(
        v128_case(
            ("i8x16.shuffle",),
            f"(i8x16.shuffle {' '.join(map(str, order))} "
            "(v128.load (i32.const 0)) (v128.load (i32.const 16)))",
            [both[i] for i in order],
        )
    )
    cases.append(
        v128_case(
            ("i16x8.splat",), "(i16x8.splat (i32.const 0x12348765))", pack_lanes([0x8765] * 8, 2)
        )
    )
    cases.append(
        v128_case(("i32x4.splat",), "(i32x4.splat (i32.const -7))", pack_lanes([-7] * 4, 4))
    )
    cases.append(
        v128_case(("f32x4.splat",), "(f32x4.splat (f32.const -0.5))", f32x4_bytes([-0.5] * 4))
    )
    cases.append(
        v128_case(
            ("i32x4.replace_lane",),
            "(i32x4.replace_lane 2 (v128.load (i32.const 0)) (i32.const 99))",
            p[0:8] + pack_lanes([99], 4) + p[12:16],
        )
    )
    cases.append(
        Special(
            ("i16x8.extract_lane_s",),
            "(func (result i32) (i16x8.extract_lane_s 5 (v128.load (i32.const 0))))",
            (),
            "i32",
            lanes(p[0:16], 2, True)[5] & M32,
        )
    )
    cases.append(
        Special(
            ("i32x4.extract_lane",),
            "(func (result i32) (i32x4.extract_lane 3 (v128.load (i32.const 0))))",
            (),
            "i32",
            lanes(p[0:16], 4, False)[3],
        )
    )
    fp = f32_pattern() + p[32:]
    cases.append(
        Special(
            ("f32x4.extract_lane",),
            "(func (result f32) (f32x4.extract_lane 1 (v128.load (i32.const 16))))",
            (),
            "f32",
            f32(FLOATS[5]),
            mem_before=tuple(fp),
        )
    )
    low, high = lanes(p[0:8], 1, True), lanes(p[8:16], 1, True)
    cases.append(
        v128_case(
            ("i16x8.extend_low_i8x16_s",),
            "(i16x8.extend_low_i8x16_s (v128.load (i32.const 0)))",
            pack_lanes(low, 2),
        )
    )
    cases.append(
        v128_case(
            ("i16x8.extend_high_i8x16_s",),
            "(i16x8.extend_high_i8x16_s (v128.load (i32.const 0)))",
            pack_lanes(high, 2),
        )
    )
    for op, width, fn in [
        ("i16x8.add", 2, lambda a, b: a + b),
        ("i16x8.mul", 2, lambda a, b: a * b),
        ("i32x4.add", 4, lambda a, b: a + b),
        ("i32x4.sub", 4, lambda a, b: a - b),
        ("i32x4.mul", 4, lambda a, b: a * b),
    ]:
        x, y = lanes(p[0:16], width, True), lanes(p[16:32], width, True)
        cases.append(
            v128_case(
                (op,),
                f"({op} (v128.load (i32.const 0)) (v128.load (i32.const 16)))",
                pack_lanes([fn(a, b) for a, b in zip(x, y, strict=True)], width),
            )
        )
    x16, y16 = lanes(p[0:16], 2, True), lanes(p[16:32], 2, True)
    dots = [x16[2 * i] * y16[2 * i] + x16[2 * i + 1] * y16[2 * i + 1] for i in range(4)]
    cases.append(
        v128_case(
            ("i32x4.dot_i16x8_s",),
            "(i32x4.dot_i16x8_s (v128.load (i32.const 0)) (v128.load (i32.const 16)))",
            pack_lanes(dots, 4),
        )
    )
    # the one input where the pairwise sum leaves int32: it wraps (-32768^2 * 2 = 2^31)
    extreme = pack_lanes([-32768] * 8, 2) + pack_lanes([-32768] * 8, 2) + p[32:]
    cases.append(
        v128_case(
            ("i32x4.dot_i16x8_s",),
            "(i32x4.dot_i16x8_s (v128.load (i32.const 0)) (v128.load (i32.const 16)))",
            pack_lanes([-(2**31)] * 4, 4),
            extreme,
        )
    )
    fa, fb = [f32(v) for v in FLOATS[0:4]], [f32(v) for v in FLOATS[4:8]]
    for op, fn in [
        ("f32x4.add", lambda a, b: f32(a + b)),
        ("f32x4.sub", lambda a, b: f32(a - b)),
        ("f32x4.mul", lambda a, b: f32(a * b)),
        (
            "f32x4.div",
            lambda a, b: f32(a / b) if b else math.copysign(math.inf, a) * math.copysign(1, b),
        ),
    ]:
        cases.append(
            v128_case(
                (op,),
                f"({op} (v128.load (i32.const 0)) (v128.load (i32.const 16)))",
                f32x4_bytes([fn(a, b) for a, b in zip(fa, fb, strict=True)]),
                fp,
            )
        )
    cases.append(
        v128_case(
            ("f32x4.sqrt",),
            "(f32x4.sqrt (v128.load (i32.const 16)))",
            f32x4_bytes([f32(math.sqrt(v)) for v in fb]),
            fp,
        )
    )
    cases.extend(quantizer_vector_cases())
    cases.extend(cross_entropy_vector_cases())
    # control and variables
    cases.append(
        Special(
            ("block", "loop", "br_if", "br", "end", "local.tee", "local.set", "local.get"),
            """(func (param $n i32) (result i32) (local $s i32)
                           block $done
                             loop $again
                               (br_if $done (i32.eqz (local.get $n)))
                               (local.set $s (i32.add (local.get $s) (local.get $n)))
                               (local.tee $n (i32.sub (local.get $n) (i32.const 1)))
                               drop
                               br $again
                             end
                           end
                           local.get $s)""",
            (("i32", 100),),
            "i32",
            5050,
        )
    )
    for arg, want in ((-5, 5), (7, 7)):
        cases.append(
            Special(
                ("if", "else"),
                """(func (param $x i32) (result i32)
                               (if (result i32) (i32.lt_s (local.get $x) (i32.const 0))
                                 (then (i32.sub (i32.const 0) (local.get $x)))
                                 (else (local.get $x))))""",
                (("i32", arg & M32),),
                "i32",
                want,
            )
        )
    cases.append(
        Special(
            ("return", "nop"),
            "(func (result i32) (nop) (return (i32.const 3)) (i32.const 4))",
            (),
            "i32",
            3,
        )
    )
    cases.append(
        Special(("call",), "(func (result i32) (call $helper (i32.const 20)))", (), "i32", 41)
    )
    cases.append(
        Special(
            ("select",),
            "(func (param i32) (result i32) (select (i32.const 10) (i32.const 20) (local.get 0)))",
            (("i32", 0),),
            "i32",
            20,
        )
    )
    cases.append(
        Special(("drop",), "(func (result i32) (i32.const 1) (drop (i32.const 2)))", (), "i32", 1)
    )
    cases.append(Special(("unreachable",), "(func (unreachable))", (), None, "trap"))
    return cases


def _nearest(v: float) -> float:
    """IEEE roundToIntegralTiesToEven, sign kept (-0.3 -> -0.0); infinities pass."""
    if math.isinf(v):
        return v
    return math.copysign(float(round(v)), v)  # Python's round() on a float ties to even


def _trunc_sat(v: float) -> int:
    if math.isnan(v):
        return 0
    if v >= 2.0**31:
        return 2**31 - 1
    if v <= -(2.0**31):
        return -(2**31)
    return math.trunc(v)


def _sat(v: int, bits: int) -> int:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return max(lo, min(hi, v))


def quantizer_vector_cases() -> list[Special]:
    """The lanes the elementwise kernel uses (kernels/elementwise_f32.wat): abs, max, nearest,
    the saturating conversions and narrows, signed integer min/max; operands at 0 and 16."""
    cases: list[Special] = []

    def fmem(a: list[float], b: list[float]) -> list[int]:
        return f32x4_bytes(a) + f32x4_bytes(b) + PATTERN[32:]

    def two(op: str) -> str:
        return f"({op} (v128.load (i32.const 0)) (v128.load (i32.const 16)))"

    def one(op: str, addr: int = 0) -> str:
        return f"({op} (v128.load (i32.const {addr})))"

    def f32s(values: list[float]) -> list[float]:
        return [f32(v) for v in values]

    # abs clears the sign bit (NaN included: a bitwise operation, deterministic)
    a = f32s([-1.5, -0.0, -math.inf, 3.0e-5])
    nan_neg = list(struct.pack("<I", 0xFFC00001))
    mem = f32x4_bytes(a) + list(struct.pack("<3f", 0.0, 0.0, 0.0)) + nan_neg + PATTERN[32:]
    cases.append(v128_case(("f32x4.abs",), one("f32x4.abs"), f32x4_bytes([abs(v) for v in a]), mem))
    nan_abs = list(struct.pack("<I", 0x7FC00001))
    cases.append(
        v128_case(
            ("f32x4.abs",),
            one("f32x4.abs", 16),
            list(struct.pack("<3f", 0.0, 0.0, 0.0)) + nan_abs,
            mem,
        )
    )
    # max: -0 < +0 (both orders), infinities, subnormals
    sub = struct.unpack("<f", struct.pack("<I", 1))[0]
    for x, y in [
        ([-0.0, 0.0, 1.0, -math.inf], [0.0, -0.0, -2.0, -1e30]),
        ([sub, -sub, 127.5, 6.3e18], [0.0, 0.0, 127.49999237060547, math.inf]),
    ]:
        x, y = f32s(x), f32s(y)
        want = [
            b if (a < b or (a == b == 0 and math.copysign(1, a) < 0)) else a
            for a, b in zip(x, y, strict=True)
        ]
        cases.append(v128_case(("f32x4.max",), two("f32x4.max"), f32x4_bytes(want), fmem(x, y)))
    # nearest: ties to even on both signs, -0 kept, large values and infinities pass
    for vals in (
        [0.5, 1.5, 2.5, -0.5],
        [-2.5, -0.3, 126.5, 3.4999997615814209],
        [127.5, -127.5, 8388609.0, -math.inf],
        [1e30, 0.49999997, -1.5, -0.0],
    ):
        x = f32s(vals)
        cases.append(
            v128_case(
                ("f32x4.nearest",),
                one("f32x4.nearest"),
                f32x4_bytes([_nearest(v) for v in x]),
                fmem(x, [0.0] * 4),
            )
        )
    # float -> int32, saturating, NaN -> 0, toward zero
    for vals in (
        [1.9, -1.9, 3e9, -3e9],
        [math.nan, math.inf, -0.0, 2147483520.0],
        [-math.inf, -2147483648.0, 127.0, -127.0],
    ):
        x = f32s(vals)
        cases.append(
            v128_case(
                ("i32x4.trunc_sat_f32x4_s",),
                one("i32x4.trunc_sat_f32x4_s"),
                pack_lanes([_trunc_sat(v) for v in x], 4),
                fmem(x, [0.0] * 4),
            )
        )
    # int32 -> float32, round to nearest even above 2^24
    ints = [16777217, -16777219, 2**31 - 1, -(2**31)]
    cases.append(
        v128_case(
            ("f32x4.convert_i32x4_s",),
            one("f32x4.convert_i32x4_s"),
            f32x4_bytes([f32(float(v)) for v in ints]),
            pack_lanes(ints, 4) + pack_lanes([0] * 4, 4) + PATTERN[32:],
        )
    )
    # signed integer lanes: min, max, and the saturating narrows (a's lanes, then b's)
    xi = [5, -200, 2**31 - 1, -(2**31)]
    yi = [-7, 127, -128, 40000]
    imem = pack_lanes(xi, 4) + pack_lanes(yi, 4) + PATTERN[32:]
    for op, fn, signed in [
        ("i32x4.min_s", min, True),
        ("i32x4.max_s", max, True),
        ("i32x4.max_u", max, False),
    ]:
        mask = -1 if signed else M32  # unsigned lanes: the same bits read as 0 .. 2^32 - 1
        want = [fn(a & mask, b & mask) for a, b in zip(xi, yi, strict=True)]
        cases.append(v128_case((op,), two(op), pack_lanes(want, 4), imem))
        xs, ys = lanes(PATTERN[0:16], 4, signed), lanes(PATTERN[16:32], 4, signed)
        want = [fn(a, b) for a, b in zip(xs, ys, strict=True)]
        cases.append(v128_case((op,), two(op), pack_lanes(want, 4)))
    cases.append(
        v128_case(
            ("i16x8.narrow_i32x4_s",),
            two("i16x8.narrow_i32x4_s"),
            pack_lanes([_sat(v, 16) for v in xi + yi], 2),
            imem,
        )
    )
    x16 = [1, -1, 127, -128, 128, -129, 32767, -32768]
    y16 = [300, -300, 0, 5, -5, 126, -127, 200]
    cases.append(
        v128_case(
            ("i8x16.narrow_i16x8_s",),
            two("i8x16.narrow_i16x8_s"),
            pack_lanes([_sat(v, 8) for v in x16 + y16], 1),
            pack_lanes(x16, 2) + pack_lanes(y16, 2) + PATTERN[32:],
        )
    )
    return cases


def cross_entropy_vector_cases() -> list[Special]:
    """The lanes the cross-entropy adds (kernels/elementwise_f32.wat xent_rows): the ordered
    comparison that picks a row's maximum and the bitwise select it feeds."""
    cases: list[Special] = []
    nan = struct.unpack("<f", struct.pack("<I", 0x7FC00000))[0]
    sub = struct.unpack("<f", struct.pack("<I", 1))[0]
    # gt: all ones where a > b; false for NaN on either side and for -0 against +0
    for x, y in [
        ([1.0, -0.0, 0.0, nan], [0.5, 0.0, -0.0, 1.0]),
        ([-math.inf, 2.0, sub, 3.0], [-math.inf, nan, 0.0, math.inf]),
    ]:
        want = [M32 if a > b else 0 for a, b in zip(x, y, strict=True)]
        mem = f32x4_bytes(x) + f32x4_bytes(y) + PATTERN[32:]
        cases.append(
            v128_case(
                ("f32x4.gt",),
                "(f32x4.gt (v128.load (i32.const 0)) (v128.load (i32.const 16)))",
                pack_lanes(want, 4),
                mem,
            )
        )
    # bitselect: the first operand's bits where the mask is 1, the second's where it is 0
    mask = 0x0F0F00FF_FFFFFFFF_00000000_80000001
    a = int.from_bytes(bytes(PATTERN[0:16]), "little")
    b = int.from_bytes(bytes(PATTERN[16:32]), "little")
    want_bits = (a & mask) | (b & ~mask & ((1 << 128) - 1))
    mask_lanes = " ".join(str((mask >> (32 * i)) & M32) for i in range(4))
    cases.append(
        v128_case(
            ("v128.bitselect",),
            "(v128.bitselect (v128.load (i32.const 0)) (v128.load (i32.const 16)) "
            f"(v128.const i32x4 {mask_lanes}))",
            list(want_bits.to_bytes(16, "little")),
        )
    )
    return cases


HELPER = "(func $helper (param i32) (result i32) (i32.add (i32.add (local.get 0) (local.get 0)) (i32.const 1)))"  # noqa: E501


def build(
    scalars: list[Case], specials: list[Special]
) -> tuple[str, list[dict[str, Any]], list[tuple[str, str | None]]]:
    """The module text, the calls, and per call (what, expected) in the same order."""
    funcs = [HELPER]
    calls: list[dict[str, Any]] = []
    expect: list[tuple[str, str | None]] = []
    for n, c in enumerate(scalars):
        params = " ".join(f"(param {t})" for t in c.params)
        gets = " ".join(f"(local.get {i})" for i in range(len(c.params)))
        funcs.append(f'(func (export "s{n}") {params} (result {c.result}) ({c.op} {gets}))')
        values = [VALUES[t] for t in c.params]
        combos = (
            [(a,) for a in values[0]]
            if len(values) == 1
            else [(a, b) for a in values[0] for b in values[1]]
        )
        for args in combos:
            if not c.ok(*args):
                continue
            want = c.fn(*args)
            if c.op in ("f32.reinterpret_i32", "f64.reinterpret_i64"):
                want_repr = "nan" if is_nan_bits(c.result or "", args[0]) else str(args[0])
            else:
                want_repr = expected_repr(c.result, want)
            calls.append(
                {
                    "fn": f"s{n}",
                    "args": [encode_arg(t, a) for t, a in zip(c.params, args, strict=True)],
                    "result": c.result,
                    "mem": [],
                }
            )
            expect.append((f"{c.op}{args}", want_repr))
    for n, sp in enumerate(specials):
        _head, _, rest = sp.wat.partition("(func")
        funcs.append(f'(func (export "x{n}"){rest}')
        calls.append(
            {
                "fn": f"x{n}",
                "args": [encode_arg(t, a) for t, a in sp.args],
                "result": sp.result,
                "mem": list(sp.mem_before),
            }
        )
        expect.append((f"{'/'.join(sp.ops)} #{n}", "special"))
    text = '(module (memory (export "memory") 1)\n' + "\n".join(funcs) + ")"
    return text, calls, expect


def run_node(tmp_path: Path, text: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (tmp_path / "spec.json").write_text(json.dumps(calls))
    (tmp_path / "m.wasm").write_bytes(assemble(text, "opcodes-test.wat"))
    (tmp_path / "run.mjs").write_text(RUNNER)
    proc = subprocess.run(
        [
            *_node(),
            str(tmp_path / "run.mjs"),
            str(tmp_path / "spec.json"),
            str(tmp_path / "m.wasm"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(proc.stdout)
    return results


def mismatches(tmp_path: Path) -> tuple[list[str], int]:
    scalars, specials = scalar_cases(), special_cases()
    with np.errstate(all="ignore"):  # inf - inf, 0 * inf: NaN is the expected result
        text, calls, expect = build(scalars, specials)
    results = run_node(tmp_path, text, calls)
    wrong: list[str] = []
    special_at = 0
    for (what, want), got in zip(expect, results, strict=True):
        if want == "special":
            sp = specials[special_at]
            special_at += 1
            if sp.value == "trap":
                if "trap" not in got or "unreachable" not in got["trap"]:
                    wrong.append(f"{what}: expected a trap, got {got}")
                continue
            if "trap" in got:
                wrong.append(f"{what}: trapped: {got['trap']}")
                continue
            if sp.result is not None and got["v"] != expected_repr(sp.result, sp.value):
                wrong.append(
                    f"{what}: got {got['v']}, expected {expected_repr(sp.result, sp.value)}"
                )
            if sp.memory and got["mem"][: len(sp.memory)] != list(sp.memory):
                wrong.append(f"{what}: memory {got['mem'][:48]} != {list(sp.memory)}")
        elif got.get("v") != want:
            wrong.append(f"{what}: got {got}, expected {want}")
    return wrong, len(calls)


def test_every_instruction_computes_what_the_spec_defines(tmp_path: Path) -> None:
    wrong, count = mismatches(tmp_path)
    assert count > 2000
    assert not wrong, f"{len(wrong)} of {count} calls differ:\n" + "\n".join(wrong[:40])


def test_every_table_entry_is_exercised() -> None:
    proven = {c.op for c in scalar_cases()}
    for sp in special_cases():
        proven.update(sp.ops)
    assert set(opcodes.OPS) - proven == set(), "instructions without a semantic test"


def test_a_swapped_opcode_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # i32.sub encoded as i32.add: still a valid module, caught only by running it
    monkeypatch.setitem(opcodes.OPS, "i32.sub", opcodes.OPS["i32.add"])
    wrong, _ = mismatches(tmp_path)
    assert any(w.startswith("i32.sub(") for w in wrong), wrong[:5]
    assert not any(w.startswith("i32.add(") for w in wrong), wrong[:5]
