"""The assembler's parts on known answers, and every refusal with its position and hint.

Known answers come from the specification (LEB128 examples, the module header, section layout);
each error a user can meet is shown firing on a wrong input.
"""

from __future__ import annotations

import pytest

from daisychain.wasm import WatError, assemble
from daisychain.wasm.leb128 import decode_signed, decode_unsigned, signed, unsigned

HEADER = b"\x00asm\x01\x00\x00\x00"


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (127, "7f"), (128, "8001"), (624485, "e58e26"), (2**32 - 1, "ffffffff0f")],
)
def test_unsigned_leb128(value: int, encoded: str) -> None:
    assert unsigned(value).hex() == encoded
    assert decode_unsigned(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (63, "3f"),
        (64, "c000"),
        (-1, "7f"),
        (-64, "40"),
        (-65, "bf7f"),
        (-123456, "c0bb78"),
        (-(2**31), "8080808078"),
        (2**31 - 1, "ffffffff07"),
    ],
)
def test_signed_leb128(value: int, encoded: str) -> None:
    assert signed(value).hex() == encoded
    assert decode_signed(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


def test_leb128_round_trips_and_refuses_negative_unsigned() -> None:
    for v in [*range(-300, 300), 2**40 + 3, -(2**40) - 3, 2**63 - 1, -(2**63)]:
        assert decode_signed(signed(v))[0] == v
        if v >= 0:
            assert decode_unsigned(unsigned(v))[0] == v
    with pytest.raises(ValueError, match="negative"):
        unsigned(-1)


def test_empty_module_is_the_header() -> None:
    assert assemble("(module)") == HEADER
    assert assemble("") == HEADER


def test_a_small_module_byte_for_byte() -> None:
    wasm = assemble('(module (func (export "f") (param i32) (result i32) local.get 0))')
    assert wasm == HEADER + bytes.fromhex(
        "01 06 01 60 01 7f 01 7f"  # type section: one (i32) -> (i32)
        "03 02 01 00"  # function section: function 0 has type 0
        "07 05 01 01 66 00 00"  # export section: "f" -> function 0
        "0a 06 01 04 00 20 00 0b"  # code: size 4, no locals, local.get 0, end
    )


def test_folded_and_flat_forms_give_the_same_bytes() -> None:
    flat = """(module (func (param $a i32) (param $b i32) (result i32) (local $t i32)
      block $out
        local.get $a
        local.get $b
        i32.add
        local.tee $t
        i32.eqz
        br_if $out
      end
      local.get $t))"""
    folded = """(module (func (param $a i32) (param $b i32) (result i32) (local $t i32)
      (block $out
        (br_if $out (i32.eqz (local.tee $t (i32.add (local.get $a) (local.get $b))))))
      (local.get $t)))"""
    assert assemble(flat) == assemble(folded)


def test_locals_are_written_as_runs_and_types_are_shared() -> None:
    wasm = assemble("""(module
      (func (local i32 i32) (local f32) (local $x i32))
      (func))""")
    # one type () -> (), used twice; locals: 2 x i32, 1 x f32, 1 x i32
    assert bytes.fromhex("01 04 01 60 00 00") in wasm
    assert bytes.fromhex("03 03 02 00 00") in wasm
    assert bytes.fromhex("03 02 7f 01 7d 01 7f 0b") in wasm


def test_memory_import_and_export_forms() -> None:
    assert bytes.fromhex("05 03 01 00 02") in assemble('(module (memory (export "m") 2))')
    imported = assemble('(module (import "env" "mem" (memory 1 4)))')
    assert imported == HEADER + bytes.fromhex("02 0d 01 03 65 6e 76 03 6d 65 6d 02 01 01 04")
    inline = assemble('(module (memory (import "env" "mem") 1 4))')
    assert inline == imported


def test_a_shared_memory_has_limits_flag_3() -> None:
    # threads proposal: limits flag 0x03 (shared, minimum and maximum)
    shared = assemble('(module (import "env" "mem" (memory 1 4 shared)))')
    assert shared == HEADER + bytes.fromhex("02 0d 01 03 65 6e 76 03 6d 65 6d 02 03 01 04")
    assert bytes.fromhex("05 04 01 03 02 08") in assemble("(module (memory 2 8 shared))")


def test_memarg_offsets_alignment_and_simd_immediates() -> None:
    wasm = assemble("""(module (memory 1) (func (param i32) (result v128)
      (i8x16.shuffle 0 1 2 3 16 17 18 19 8 9 10 11 24 25 26 27
        (v128.load8x8_s offset=24 (local.get 0))
        (v128.load align=4 (local.get 0)))))""")
    assert bytes.fromhex("20 00 fd 01 03 18") in wasm  # align 2^3, offset 24
    assert bytes.fromhex("20 00 fd 00 02 00") in wasm  # align=4 -> exponent 2
    assert bytes.fromhex("fd 0d 00 01 02 03 10 11 12 13 08 09 0a 0b 18 19 1a 1b") in wasm
    consts = assemble(
        "(module (func (result v128) (v128.const i32x4 1 -1 0x7fffffff 0)) "
        "(func (result i32) (i32.const 0xffffffff)) (func (result f32) (f32.const -0x1.8p1)))"
    )
    assert bytes.fromhex("fd 0c 01000000 ffffffff ffffff7f 00000000") in consts
    assert bytes.fromhex("41 7f") in consts  # 0xffffffff is -1
    assert bytes.fromhex("43 000040c0") in consts  # -3.0


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ("(module\n  (func (i32.add", "'(' never closed", 2),
        ("(module))", "')' without a matching '('", 1),
        (
            "(module\n (func\n   i32.frobnicate))",
            "unknown or unsupported instruction 'i32.frobnicate'",
            3,
        ),
        ("(module (func (result f32) (f32.const 0.1)))", "not exactly a float32", 1),
        ("(module (func (result f32) (f32.const 1e39)))", "exceeds the float32 range", 1),
        ("(module (func (br $nowhere)))", "no enclosing block is labelled $nowhere", 1),
        ("(module (func block br 1 end))", "branch depth 1 but only 1 blocks", 1),
        ("(module (func (local.get $x)))", "unknown local $x", 1),
        ("(module (func (param i32) (local.get 1)))", "local index 1 but there are 1", 1),
        ("(module (func (call $g)))", "unknown function $g", 1),
        ("(module (memory 1) (func (i32.load align=8 (i32.const 0))))", "align=8 must be", 1),
        ("(module (func (i32.const 4294967296)))", "outside", 1),
        ("(module (func (i32x4.extract_lane 4 (v128.const i32x4 0 0 0 0))))", "lane", 1),
        ("(module (func (v128.const i32x3 0 0 0)))", "v128.const needs a shape", 1),
        ("(module (func block))", "never closed with 'end'", 1),
        ("(module (func end))", "'end' outside any block", 1),
        ("(module (table 1 funcref))", "(table ...) is not supported", 1),
        ('(module (import "env" "f" (func)))', "only a memory can be imported", 1),
        ("(module (memory 1) (memory 1))", "a second memory", 1),
        ("(module (memory 2 1))", "maximum 1 is below its minimum 2", 1),
        ("(module (memory 2 shared))", "a shared memory needs a maximum", 1),
        ("(module (memory 2 3 4))", "limits are MIN, MIN MAX or MIN MAX shared", 1),
        ('(module (func (export "f")) (func (export "f")))', "export 'f' is declared twice", None),
        ("(module (func (local i32) (param i32)))", "(param ...) after (local ...)", 1),
        ('(module (func "x"))', "unknown or unsupported instruction", 1),
        ("(module (func (block (param i32))))", "a block type here is at most one (result t)", 1),
        ('(module (memory (export "a\\q") 1))', "unknown string escape", 1),
        ("(module (; never closed", "block comment never closed", 1),
    ],
)
def test_refusals_name_the_place(text: str, message: str, line: int | None) -> None:
    with pytest.raises(WatError) as info:
        assemble(text, "k.wat")
    assert message in str(info.value)
    if line is not None:
        assert info.value.at is not None and info.value.at.line == line
        assert str(info.value).startswith(f"k.wat:{line}:")


def test_an_inexact_float_gets_a_hint_with_the_nearest_float32() -> None:
    with pytest.raises(WatError) as info:
        assemble("(module (func (result f32) (f32.const 0.1)))")
    assert info.value.hint is not None and "0x1.99999a" in info.value.hint


def test_comments_and_strings() -> None:
    wasm = assemble("""
      ;; a line comment
      (module (; a (; nested ;) block comment ;)
        (memory (export "m\\41\\n") 1))""")
    assert b"\x03mA\n\x02\x00" in wasm
