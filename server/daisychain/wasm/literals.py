"""Number literals of the text format (core spec 6.3.2): integers and float32 constants.

Integers: an optional sign, then decimal digits or ``0x`` and hex digits, with ``_`` allowed
between digits. Floats: decimal or hex floats (``0x1.8p-3``), ``inf``, ``nan`` and ``nan:0x...``
(a payload). Float64 literals are rounded to nearest (Python's parsers round correctly). A
float32 literal must be exactly a float32: the spec rounds a decimal literal to nearest, but
parsing it as a Python float first would round twice, so an inexact literal is refused instead
of being given a value that could differ from another assembler's.
"""

from __future__ import annotations

import re
import struct

from daisychain.wasm.errors import WatError
from daisychain.wasm.sexpr import Atom

_INT = re.compile(r"[+-]?(?:0x[0-9a-fA-F](?:_?[0-9a-fA-F])*|[0-9](?:_?[0-9])*)")
_FLOAT = re.compile(
    r"[+-]?(?:[0-9](?:_?[0-9])*(?:\.(?:[0-9](?:_?[0-9])*)?)?(?:[eE][+-]?[0-9](?:_?[0-9])*)?"
    r"|0x[0-9a-fA-F](?:_?[0-9a-fA-F])*(?:\.(?:[0-9a-fA-F](?:_?[0-9a-fA-F])*)?)?"
    r"(?:[pP][+-]?[0-9](?:_?[0-9])*)?)"
)


def is_int(text: str) -> bool:
    return _INT.fullmatch(text) is not None


def integer(atom: Atom, lo: int, hi: int, what: str) -> int:
    """The integer ``atom`` spells, which must lie in [lo, hi]."""
    if atom.string is not None or not is_int(atom.text):
        raise WatError(f"{what}: expected an integer, got {atom.text!r}", atom.at)
    value = int(atom.text.replace("_", ""), 0)
    if not lo <= value <= hi:
        raise WatError(f"{what}: {value} is outside [{lo}, {hi}]", atom.at)
    return value


def wrap_signed(value: int, bits: int) -> int:
    """``value`` (signed or unsigned spelling) as the signed ``bits``-bit integer it denotes."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def float64_bits(atom: Atom) -> int:
    """The IEEE-754 binary64 bit pattern of the float literal ``atom`` (rounded to nearest, as
    the spec says: Python's float() and float.fromhex round decimal and hex literals correctly).
    """
    text = atom.text.replace("_", "")
    sign = 0
    body = text
    if body[:1] in "+-":
        sign = 1 << 63 if body[0] == "-" else 0
        body = body[1:]
    if body == "inf":
        return sign | 0x7FF0000000000000
    if body == "nan":
        return sign | 0x7FF8000000000000
    if body.startswith("nan:0x"):
        payload = int(body[6:], 16)
        if not 0 < payload < 1 << 52:
            raise WatError(f"f64 NaN payload {body[4:]} is not in [1, 2^52)", atom.at)
        return sign | 0x7FF0000000000000 | payload
    if atom.string is not None or _FLOAT.fullmatch(atom.text) is None:
        raise WatError(f"expected a float literal, got {atom.text!r}", atom.at)
    value = float.fromhex(body) if body.lower().startswith("0x") else float(body)
    if value == float("inf"):
        raise WatError(f"f64 literal {atom.text} exceeds the float64 range", atom.at)
    bits: int = struct.unpack("<Q", struct.pack("<d", value))[0]
    return sign | bits


def float32_bits(atom: Atom) -> int:
    """The IEEE-754 binary32 bit pattern of the float literal ``atom``."""
    text = atom.text.replace("_", "")
    sign = 0
    body = text
    if body[:1] in "+-":
        sign = 0x80000000 if body[0] == "-" else 0
        body = body[1:]
    if body == "inf":
        return sign | 0x7F800000
    if body == "nan":
        return sign | 0x7FC00000
    if body.startswith("nan:0x"):
        payload = int(body[6:], 16)
        if not 0 < payload < 1 << 23:
            raise WatError(f"f32 NaN payload {body[4:]} is not in [1, 2^23)", atom.at)
        return sign | 0x7F800000 | payload
    if atom.string is not None or _FLOAT.fullmatch(atom.text) is None:
        raise WatError(f"expected a float literal, got {atom.text!r}", atom.at)
    value = float.fromhex(body) if body.lower().startswith("0x") else float(body)
    try:
        bits: int = struct.unpack("<I", struct.pack("<f", value))[0]
    except OverflowError:
        raise WatError(f"f32 literal {atom.text} exceeds the float32 range", atom.at) from None
    (back,) = struct.unpack("<f", struct.pack("<I", bits))
    if back != value:
        raise WatError(
            f"f32 literal {atom.text} is not exactly a float32",
            atom.at,
            f"write the float32 you mean exactly, e.g. as a hex float ({back.hex()})",
        )
    return sign | bits
