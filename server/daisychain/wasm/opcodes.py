"""The instructions this assembler knows: name -> encoding and immediate kind.

Numbers from the WebAssembly core specification, section 5.4 (binary instructions), and for the
SIMD instructions the 0xFD-prefixed table of the fixed-width SIMD proposal, merged into the core
spec 2.0 (section 5.4.8): a SIMD opcode is the byte 0xFD followed by the opcode as an unsigned
LEB128 number. The set is the subset DaisyChain's kernels need (scalar i32/i64/f32/f64 work, memory,
structured control flow, the integer dot products, float32 lanes and the quantizer's conversions,
integer min/max and saturating narrows); a name outside it is an
error that says so, rather than a guess. tests/wasm/test_wasm_opcodes.py runs every entry under
Node and checks its result against Python, so a wrong number cannot hide behind a module that
still validates.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from daisychain.wasm.leb128 import unsigned


class Imm(Enum):
    """What follows an instruction's opcode."""

    NONE = "none"
    BLOCK = "block"  # optional label and block type: block, loop, if
    LABEL = "label"  # a branch depth: br, br_if
    FUNC = "func"  # a function index: call
    LOCAL = "local"  # a local index
    MEMARG = "memarg"  # alignment exponent and offset
    MEMIDX = "memidx"  # the reserved memory index byte 0x00: memory.size, memory.grow
    I32 = "i32"  # signed LEB128
    I64 = "i64"
    F32 = "f32"  # 4 bytes, little-endian IEEE-754
    F64 = "f64"  # 8 bytes
    V128 = "v128"  # 16 bytes
    LANE = "lane"  # one byte, a lane index below Op.lanes
    SHUFFLE = "shuffle"  # 16 bytes, lane indices below 32


@dataclass(frozen=True)
class Op:
    code: bytes
    imm: Imm = Imm.NONE
    align: int = 0  # natural alignment (log2 bytes) of a memory access
    lanes: int = 0  # lane count of a LANE immediate


def _simd(opcode: int) -> bytes:
    return bytes([0xFD]) + unsigned(opcode)


def _run(start: int, names: str, prefix: str) -> dict[str, Op]:
    """Consecutive opcodes from ``start``, as the spec's tables list them."""
    return {f"{prefix}.{name}": Op(bytes([start + i])) for i, name in enumerate(names.split())}


OPS: dict[str, Op] = {
    # control (5.4.1)
    "unreachable": Op(b"\x00"),
    "nop": Op(b"\x01"),
    "block": Op(b"\x02", Imm.BLOCK),
    "loop": Op(b"\x03", Imm.BLOCK),
    "if": Op(b"\x04", Imm.BLOCK),
    "else": Op(b"\x05"),
    "end": Op(b"\x0b"),
    "br": Op(b"\x0c", Imm.LABEL),
    "br_if": Op(b"\x0d", Imm.LABEL),
    "return": Op(b"\x0f"),
    "call": Op(b"\x10", Imm.FUNC),
    # parametric (5.4.3)
    "drop": Op(b"\x1a"),
    "select": Op(b"\x1b"),
    # variables (5.4.4)
    "local.get": Op(b"\x20", Imm.LOCAL),
    "local.set": Op(b"\x21", Imm.LOCAL),
    "local.tee": Op(b"\x22", Imm.LOCAL),
    # memory (5.4.6): natural alignment is the access size
    "i32.load": Op(b"\x28", Imm.MEMARG, 2),
    "i64.load": Op(b"\x29", Imm.MEMARG, 3),
    "f32.load": Op(b"\x2a", Imm.MEMARG, 2),
    "f64.load": Op(b"\x2b", Imm.MEMARG, 3),
    "i32.load8_s": Op(b"\x2c", Imm.MEMARG, 0),
    "i32.load8_u": Op(b"\x2d", Imm.MEMARG, 0),
    "i32.load16_s": Op(b"\x2e", Imm.MEMARG, 1),
    "i32.load16_u": Op(b"\x2f", Imm.MEMARG, 1),
    "i64.load8_s": Op(b"\x30", Imm.MEMARG, 0),
    "i64.load8_u": Op(b"\x31", Imm.MEMARG, 0),
    "i64.load16_s": Op(b"\x32", Imm.MEMARG, 1),
    "i64.load16_u": Op(b"\x33", Imm.MEMARG, 1),
    "i64.load32_s": Op(b"\x34", Imm.MEMARG, 2),
    "i64.load32_u": Op(b"\x35", Imm.MEMARG, 2),
    "i32.store": Op(b"\x36", Imm.MEMARG, 2),
    "i64.store": Op(b"\x37", Imm.MEMARG, 3),
    "f32.store": Op(b"\x38", Imm.MEMARG, 2),
    "f64.store": Op(b"\x39", Imm.MEMARG, 3),
    "i32.store8": Op(b"\x3a", Imm.MEMARG, 0),
    "i32.store16": Op(b"\x3b", Imm.MEMARG, 1),
    "i64.store8": Op(b"\x3c", Imm.MEMARG, 0),
    "i64.store16": Op(b"\x3d", Imm.MEMARG, 1),
    "i64.store32": Op(b"\x3e", Imm.MEMARG, 2),
    "memory.size": Op(b"\x3f", Imm.MEMIDX),
    "memory.grow": Op(b"\x40", Imm.MEMIDX),
    # numeric (5.4.7)
    "i32.const": Op(b"\x41", Imm.I32),
    "i64.const": Op(b"\x42", Imm.I64),
    "f32.const": Op(b"\x43", Imm.F32),
    "f64.const": Op(b"\x44", Imm.F64),
    **_run(0x45, "eqz eq ne lt_s lt_u gt_s gt_u le_s le_u ge_s ge_u", "i32"),
    **_run(0x50, "eqz eq ne lt_s lt_u gt_s gt_u le_s le_u ge_s ge_u", "i64"),
    **_run(0x5B, "eq ne lt gt le ge", "f32"),
    **_run(0x61, "eq ne lt gt le ge", "f64"),
    **_run(
        0x67,
        "clz ctz popcnt add sub mul div_s div_u rem_s rem_u and or xor shl shr_s shr_u rotl rotr",
        "i32",
    ),
    **_run(
        0x79,
        "clz ctz popcnt add sub mul div_s div_u rem_s rem_u and or xor shl shr_s shr_u rotl rotr",
        "i64",
    ),
    **_run(0x8B, "abs neg ceil floor trunc nearest sqrt add sub mul div min max copysign", "f32"),
    **_run(0x99, "abs neg ceil floor trunc nearest sqrt add sub mul div min max copysign", "f64"),
    "i32.wrap_i64": Op(b"\xa7"),
    "i32.trunc_f32_s": Op(b"\xa8"),
    "i32.trunc_f32_u": Op(b"\xa9"),
    "i32.trunc_f64_s": Op(b"\xaa"),
    "i32.trunc_f64_u": Op(b"\xab"),
    "i64.extend_i32_s": Op(b"\xac"),
    "i64.extend_i32_u": Op(b"\xad"),
    "i64.trunc_f32_s": Op(b"\xae"),
    "i64.trunc_f32_u": Op(b"\xaf"),
    "i64.trunc_f64_s": Op(b"\xb0"),
    "i64.trunc_f64_u": Op(b"\xb1"),
    "f32.convert_i32_s": Op(b"\xb2"),
    "f32.convert_i32_u": Op(b"\xb3"),
    "f32.convert_i64_s": Op(b"\xb4"),
    "f32.convert_i64_u": Op(b"\xb5"),
    "f32.demote_f64": Op(b"\xb6"),
    "f64.convert_i32_s": Op(b"\xb7"),
    "f64.convert_i32_u": Op(b"\xb8"),
    "f64.convert_i64_s": Op(b"\xb9"),
    "f64.convert_i64_u": Op(b"\xba"),
    "f64.promote_f32": Op(b"\xbb"),
    "i32.reinterpret_f32": Op(b"\xbc"),
    "i64.reinterpret_f64": Op(b"\xbd"),
    "f32.reinterpret_i32": Op(b"\xbe"),
    "f64.reinterpret_i64": Op(b"\xbf"),
    "i32.extend8_s": Op(b"\xc0"),
    "i32.extend16_s": Op(b"\xc1"),
    "i64.extend8_s": Op(b"\xc2"),
    "i64.extend16_s": Op(b"\xc3"),
    "i64.extend32_s": Op(b"\xc4"),
    # vector (5.4.8): 0xFD and the opcode as unsigned LEB128
    "v128.load": Op(_simd(0x00), Imm.MEMARG, 4),
    "v128.load8x8_s": Op(_simd(0x01), Imm.MEMARG, 3),
    "v128.load8x8_u": Op(_simd(0x02), Imm.MEMARG, 3),
    "v128.store": Op(_simd(0x0B), Imm.MEMARG, 4),
    "v128.const": Op(_simd(0x0C), Imm.V128),
    "i8x16.shuffle": Op(_simd(0x0D), Imm.SHUFFLE),
    "i16x8.splat": Op(_simd(0x10)),
    "i32x4.splat": Op(_simd(0x11)),
    "f32x4.splat": Op(_simd(0x13)),
    "i16x8.extract_lane_s": Op(_simd(0x18), Imm.LANE, lanes=8),
    "i32x4.extract_lane": Op(_simd(0x1B), Imm.LANE, lanes=4),
    "i32x4.replace_lane": Op(_simd(0x1C), Imm.LANE, lanes=4),
    "f32x4.extract_lane": Op(_simd(0x1F), Imm.LANE, lanes=4),
    "f32x4.gt": Op(_simd(0x44)),
    "v128.bitselect": Op(_simd(0x52)),
    "i8x16.narrow_i16x8_s": Op(_simd(0x65)),
    "f32x4.nearest": Op(_simd(0x6A)),
    "i16x8.narrow_i32x4_s": Op(_simd(0x85)),
    "i16x8.extend_low_i8x16_s": Op(_simd(0x87)),
    "i16x8.extend_high_i8x16_s": Op(_simd(0x88)),
    "i16x8.add": Op(_simd(0x8E)),
    "i16x8.mul": Op(_simd(0x95)),
    "i32x4.add": Op(_simd(0xAE)),
    "i32x4.sub": Op(_simd(0xB1)),
    "i32x4.mul": Op(_simd(0xB5)),
    "i32x4.min_s": Op(_simd(0xB6)),
    "i32x4.max_s": Op(_simd(0xB8)),
    "i32x4.max_u": Op(_simd(0xB9)),
    "i32x4.dot_i16x8_s": Op(_simd(0xBA)),
    "f32x4.abs": Op(_simd(0xE0)),
    "f32x4.sqrt": Op(_simd(0xE3)),
    "f32x4.add": Op(_simd(0xE4)),
    "f32x4.sub": Op(_simd(0xE5)),
    "f32x4.mul": Op(_simd(0xE6)),
    "f32x4.div": Op(_simd(0xE7)),
    "f32x4.max": Op(_simd(0xE9)),
    "i32x4.trunc_sat_f32x4_s": Op(_simd(0xF8)),
    "f32x4.convert_i32x4_s": Op(_simd(0xFA)),
}

# Value types (5.3.1).
VALTYPES: dict[str, int] = {"i32": 0x7F, "i64": 0x7E, "f32": 0x7D, "f64": 0x7C, "v128": 0x7B}
