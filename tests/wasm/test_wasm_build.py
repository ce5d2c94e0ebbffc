"""The committed WebAssembly binaries are exactly what their sources assemble to (reproducible).

static/wasm/gemm_i8.wasm and static/wasm/elementwise_f32.wasm (every binary of
daisychain.wasm.build.BUILDS) are committed so that neither the page nor CI needs an assembler at
run time; this test rebuilds each from its kernels/*.wat with the project's own assembler and
fails, naming the command to run, when the bytes differ. The build command's --check is shown
refusing a stale binary, and the build is deterministic (same text, same bytes, in fresh
processes too).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from daisychain.wasm import assemble, build, cli

REPO = Path(__file__).resolve().parents[2]


def test_committed_binary_matches_its_source() -> None:
    for b in build.BUILDS:
        committed = b.target_path()
        assert committed.is_file(), f"{committed} is missing: run `{build.BUILD_COMMAND}`"
        rebuilt = b.assemble()
        assert committed.read_bytes() == rebuilt, (
            f"static/{b.target} differs from what kernels/{b.source} assembles to "
            f"(sha256 {hashlib.sha256(rebuilt).hexdigest()[:16]}...): run `{build.BUILD_COMMAND}` "
            "and commit the binary with its source"
        )


def test_every_kernel_source_has_a_build() -> None:
    # a kernel added under kernels/ without a BUILDS entry would never reach the page
    sources = sorted(p.name for p in (REPO / "kernels").glob("*.wat"))
    assert sorted({b.source for b in build.BUILDS}) == sources
    assert "elementwise_f32.wat" in sources


@pytest.mark.parametrize("name", sorted({b.source for b in build.BUILDS}))
def test_build_is_deterministic_across_processes(name: str) -> None:
    source = (REPO / "kernels" / name).read_text(encoding="utf-8")
    here = assemble(source)
    code = (
        "import sys, hashlib; from daisychain.wasm import assemble;"
        "print(hashlib.sha256(assemble(open(sys.argv[1]).read())).hexdigest())"
    )
    for seed in ("0", "12345"):  # a different hash seed must not change a byte
        out = subprocess.run(
            [sys.executable, "-c", code, str(REPO / "kernels" / name)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
        ).stdout.strip()
        assert out == hashlib.sha256(here).hexdigest()


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kernels/ and static/ of our own, with the real sources and their built binaries."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "static" / "wasm").mkdir(parents=True)
    for b in build.BUILDS:
        source = (REPO / "kernels" / b.source).read_text(encoding="utf-8")
        (tmp_path / "kernels" / b.source).write_text(source, encoding="utf-8")
    monkeypatch.setattr(build, "asset_dir", lambda name: tmp_path / name)
    for b in build.BUILDS:
        (tmp_path / "static" / b.target).write_bytes(b.assemble())
    return tmp_path


def test_check_passes_on_a_fresh_build(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(_args("build", "--check")) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_refuses_a_stale_binary_and_build_repairs_it(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tree / "static" / "wasm" / "gemm_i8.wasm"
    good = target.read_bytes()
    target.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))  # one bit of the committed file
    assert cli.run(_args("build", "--check")) == 1
    out = capsys.readouterr().out
    assert "stale" in out and "run `daisychain wasm build`" in out
    assert target.read_bytes() != good  # --check writes nothing
    assert cli.run(_args("build")) == 0
    assert target.read_bytes() == good
    assert target.stat().st_mode & 0o777 == 0o644  # readable by a static file server


def test_source_change_makes_the_binary_stale(tree: Path) -> None:
    source = tree / "kernels" / "gemm_i8.wat"
    source.write_text(source.read_text().replace("(i32.const 16)", "(i32.const 17)", 1))
    # the GEMM's source makes two binaries: its own and its shared-memory variant
    assert [o.changed for o in build.check()] == [True, True, False]
    target = tree / "static" / "wasm" / "gemm_i8.wasm"
    target.unlink()  # a missing binary is stale too
    assert [o.changed for o in build.check()] == [True, True, False]
    # and each source only its own binaries: a change to the elementwise kernel
    elementwise = tree / "kernels" / "elementwise_f32.wat"
    elementwise.write_text(elementwise.read_text().replace("(i32.const 16)", "(i32.const 32)", 1))
    assert [o.changed for o in build.check()] == [True, True, True]


def _sections(wasm: bytes) -> dict[int, bytes]:
    """A module's sections by id (each id at most once in these modules)."""
    out, at = {}, 8
    while at < len(wasm):
        sid, at = wasm[at], at + 1
        size = shift = 0
        while True:  # unsigned LEB128
            byte, at = wasm[at], at + 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        out[sid], at = wasm[at : at + size], at + size
    return out


def test_the_shared_variant_is_the_same_kernel_with_its_memory_imported_and_shared() -> None:
    plain, shared = (b for b in build.BUILDS if b.source == "gemm_i8.wat")
    a, b = _sections(plain.assemble()), _sections(shared.assemble())
    # the memory moves from the memory section (one memory, flag 00, min 1 page) to the import
    # section (env.memory, flag 03: shared, min 1, max SHARED_MAX_PAGES = 16384 in LEB128)
    assert a[5] == bytes.fromhex("01 00 01") and 5 not in b
    assert 2 not in a and b[2] == bytes.fromhex("01 03") + b"env\x06memory" + bytes.fromhex(
        "02 03 01 80 80 01"
    )
    assert build.SHARED_MAX_PAGES == 16384
    for sid in (1, 3, 7, 10):  # types, functions, exports, code: the same bytes
        assert a[sid] == b[sid], sid


def test_check_refuses_a_stale_elementwise_binary(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tree / "static" / "wasm" / "elementwise_f32.wasm"
    good = target.read_bytes()
    target.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    assert cli.run(_args("build", "--check")) == 1
    out = capsys.readouterr().out
    assert "elementwise_f32.wasm" in out and "stale" in out
    assert cli.run(_args("build")) == 0
    assert target.read_bytes() == good


def test_a_broken_source_exits_2_with_its_position(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tree / "kernels" / "gemm_i8.wat"
    source.write_text(source.read_text().replace("(i32x4.dot_i16x8_s", "(i32x4.dot_i8x16_s", 1))
    assert cli.run(_args("build")) == 2
    out = capsys.readouterr().out
    assert "kernels/gemm_i8.wat:" in out and "unknown or unsupported instruction" in out
