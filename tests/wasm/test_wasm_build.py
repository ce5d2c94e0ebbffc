"""The committed WebAssembly binaries are exactly what their sources assemble to (reproducible).

static/wasm/gemm_i8.wasm, gemm_i8_shared.wasm and elementwise_f32.wasm (tests/wasm_build.py's
BUILDS) are committed so that neither the page nor the package needs an assembler; this test
rebuilds each from its kernels/*.wat with wasmtime's wat2wasm (tests/wasm_build.py) and fails,
naming the command to run, when the bytes differ. The build's --check is shown refusing a stale
binary and a changed source, and a source the assembler refuses exits 2 with its position.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import wasmtime

import wasm_build
from wasm_build import BUILD_COMMAND, BUILDS, BuildError, sections

REPO = Path(__file__).resolve().parents[2]


def test_committed_binary_matches_its_source() -> None:
    for b in BUILDS:
        committed = REPO / "static" / b.target
        assert committed.is_file(), f"{committed} is missing: run `{BUILD_COMMAND}`"
        rebuilt = b.assemble()
        assert committed.read_bytes() == rebuilt, (
            f"static/{b.target} differs from what kernels/{b.source} assembles to "
            f"(sha256 {hashlib.sha256(rebuilt).hexdigest()[:16]}...): run `{BUILD_COMMAND}` "
            "and commit the binary with its source"
        )


def test_every_kernel_source_has_a_build() -> None:
    # a kernel added under kernels/ without a BUILDS entry would never reach the page
    sources = sorted(p.name for p in (REPO / "kernels").glob("*.wat"))
    assert sorted({b.source for b in BUILDS}) == sources
    assert "elementwise_f32.wat" in sources


def test_the_binaries_carry_no_custom_section() -> None:
    # wat2wasm writes a `name` section; the build drops it (tests/wasm_build.py, assemble)
    text = (REPO / "kernels" / "gemm_i8.wat").read_text(encoding="utf-8")
    raw = bytes(wasmtime.wat2wasm(text))
    assert [sid for sid, _ in sections(raw)][-1] == 0
    built = wasm_build.assemble(text)
    assert [sid for sid, _ in sections(built)] == [1, 3, 5, 7, 10]
    assert [s for s in sections(raw) if s[0]] == sections(built)
    for b in BUILDS:
        assert 0 not in [sid for sid, _ in sections((REPO / "static" / b.target).read_bytes())]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A kernels/ and static/ of our own, with the real sources and their built binaries."""
    (tmp_path / "kernels").mkdir()
    for b in BUILDS:
        shutil.copy(REPO / "kernels" / b.source, tmp_path / "kernels" / b.source)
    assert wasm_build.main([], root=tmp_path) == 0
    return tmp_path


def test_check_passes_on_a_fresh_build(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert wasm_build.main(["--check"], root=tree) == 0
    out = capsys.readouterr().out
    assert out.count("up to date") == len(BUILDS)
    for b in BUILDS:
        built = (tree / "static" / b.target).read_bytes()
        assert built == (REPO / "static" / b.target).read_bytes()


def test_check_refuses_a_stale_binary_and_build_repairs_it(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tree / "static" / "wasm" / "gemm_i8.wasm"
    good = target.read_bytes()
    target.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit of the committed file
    capsys.readouterr()
    assert wasm_build.main(["--check"], root=tree) == 1
    out = capsys.readouterr().out
    assert "gemm_i8.wasm" in out and "stale" in out
    assert f"run `{BUILD_COMMAND}`" in out and BUILD_COMMAND == "python tests/wasm_build.py"
    assert target.read_bytes() != good  # --check writes nothing
    assert wasm_build.main([], root=tree) == 0
    assert target.read_bytes() == good
    assert target.stat().st_mode & 0o777 == 0o644  # readable by a static file server


def test_check_refuses_a_stale_elementwise_binary(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tree / "static" / "wasm" / "elementwise_f32.wasm"
    good = target.read_bytes()
    target.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    capsys.readouterr()
    assert wasm_build.main(["--check"], root=tree) == 1
    out = capsys.readouterr().out
    assert "elementwise_f32.wasm" in out and "stale" in out
    assert wasm_build.main([], root=tree) == 0
    assert target.read_bytes() == good


def test_a_changed_instruction_makes_its_binaries_stale(tree: Path) -> None:
    source = tree / "kernels" / "gemm_i8.wat"
    source.write_text(source.read_text().replace("(i32.const 16)", "(i32.const 17)", 1))
    # the GEMM's source makes two binaries: its own and its shared-memory variant
    assert [o.changed for o in wasm_build.check(tree)] == [True, True, False]
    (tree / "static" / "wasm" / "gemm_i8.wasm").unlink()  # a missing binary is stale too
    assert [o.changed for o in wasm_build.check(tree)] == [True, True, False]
    # and each source only its own binaries: a change to the elementwise kernel
    elementwise = tree / "kernels" / "elementwise_f32.wat"
    elementwise.write_text(elementwise.read_text().replace("(i32.const 16)", "(i32.const 32)", 1))
    assert [o.changed for o in wasm_build.check(tree)] == [True, True, True]


def test_the_shared_variant_is_the_same_kernel_with_its_memory_imported_and_shared() -> None:
    plain, shared = (b for b in BUILDS if b.source == "gemm_i8.wat")
    a, b = dict(sections(plain.assemble())), dict(sections(shared.assemble()))
    # the memory moves from the memory section (one memory, flag 00, min 1 page) to the import
    # section (env.memory, flag 03: shared, min 1, max SHARED_MAX_PAGES = 16384 in LEB128)
    assert a[5] == bytes.fromhex("01 00 01") and 5 not in b
    assert 2 not in a and b[2] == bytes.fromhex("01 03") + b"env\x06memory" + bytes.fromhex(
        "02 03 01 80 80 01"
    )
    assert wasm_build.SHARED_MAX_PAGES == 16384
    for sid in (1, 3, 7, 10):  # types, functions, exports, code: the same bytes
        assert a[sid] == b[sid], sid


def test_a_shared_variant_needs_the_one_memory_field() -> None:
    text = (REPO / "kernels" / "gemm_i8.wat").read_text(encoding="utf-8")
    with pytest.raises(BuildError, match=r"gemm_i8\.wat: a shared variant needs exactly one .* 0"):
        wasm_build.shared_variant(text.replace('(memory (export "memory") 1)', ""), "gemm_i8.wat")


def test_a_broken_source_exits_2_with_its_position(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tree / "kernels" / "gemm_i8.wat"
    text = source.read_text()
    at = text.index("(i32x4.dot_i16x8_s") + 1  # the instruction name, after its parenthesis
    line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
    source.write_text(text.replace("(i32x4.dot_i16x8_s", "(i32x4.dot_i8x16_s", 1))
    capsys.readouterr()
    assert wasm_build.main([], root=tree) == 2
    out = capsys.readouterr().out
    assert "kernels/gemm_i8.wat:" in out and "unknown operator" in out
    assert f"--> kernels/gemm_i8.wat:{line}:{column}" in out


def test_an_invalid_module_exits_2(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # it parses, but an f32 where an i32 is due: refused by the validator, not committed
    source = tree / "kernels" / "elementwise_f32.wat"
    source.write_text(source.read_text().replace("(i32.const 16)", "(f32.const 16)", 1))
    before = (tree / "static" / "wasm" / "elementwise_f32.wasm").read_bytes()
    capsys.readouterr()
    assert wasm_build.main([], root=tree) == 2
    out = capsys.readouterr().out
    assert "kernels/elementwise_f32.wat: type mismatch" in out
    assert (tree / "static" / "wasm" / "elementwise_f32.wasm").read_bytes() == before
