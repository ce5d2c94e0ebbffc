"""The unit tables in luts/: exhaustive checks, planted faults, hash verification."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from daisychain import luts


@pytest.mark.parametrize("name", list(luts.TABLES))
def test_shipped_table_is_exact(name: str) -> None:
    array = luts.load_table(name)
    assert array.shape == luts.TABLES[name].shape
    luts.check_table(name, array)


def test_check_command_passes_on_shipped_tables(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    luts.add_arguments(parser)
    assert luts.run(parser.parse_args(["--check"])) == 0
    assert "passed" in capsys.readouterr().out


def test_spot_values() -> None:
    mul = luts.load_table("mul_i8")
    assert mul[0, 0] == 16384  # -128 * -128
    assert mul[0, 255] == -128 * 127
    assert mul[128 + 7, 128 - 9] == -63
    requant = luts.load_table("requant_i16")
    assert requant[1, 32768 + 5] == 2  # 2.5 -> 2 (ties to even)
    assert requant[1, 32768 + 7] == 4  # 3.5 -> 4
    assert requant[1, 32768 - 5] == -2  # -2.5 -> -2
    assert requant[2, 32768 - 6] == -2  # -1.5 -> -2
    assert requant[0, 32768 + 200] == 127 and requant[0, 0] == -127  # clamp, never -128
    assert requant[8, 32768 + 32767] == 127 and requant[8, 32768 + 128] == 0  # 0.5 -> 0
    relu = luts.load_table("relu_i8")
    assert relu[0] == 0 and relu[255] == 127 and relu[128 + 1] == 1


@pytest.mark.parametrize(
    ("name", "index", "described"),
    [
        ("mul_i8", (200, 3), "a=72, b=-125"),
        ("requant_i16", (5, 40000), "s=5, v=7232"),
        ("relu_i8", (255,), "x=127"),
    ],
)
def test_planted_wrong_entry_is_named(name: str, index: tuple[int, ...], described: str) -> None:
    array = luts.load_table(name).copy()
    array[index] = array[index] + 1 if array[index] < 100 else array[index] - 1
    with pytest.raises(ValueError, match=rf"{name}: entry \[{', '.join(map(str, index))}\]") as err:
        luts.check_table(name, array)
    assert described in str(err.value)


def test_first_wrong_entry_in_row_major_order() -> None:
    array = luts.load_table("requant_i16").copy()
    array[7, 10] = 0  # later in row-major order
    array[2, 60000] = 0
    with pytest.raises(ValueError, match=r"entry \[2, 60000\].*2 wrong entries"):
        luts.check_table("requant_i16", array)


def test_wrong_shape_and_dtype_are_rejected() -> None:
    relu = luts.load_table("relu_i8")
    with pytest.raises(ValueError, match="shape"):
        luts.check_table("relu_i8", relu[:-1])
    with pytest.raises(ValueError, match="dtype"):
        luts.check_table("relu_i8", relu.astype(np.int16))


def test_reference_rounding_is_half_to_even() -> None:
    rne = luts._round_shift_half_even
    assert [rne(v, 1) for v in (-3, -1, 1, 3, 5)] == [-2, 0, 0, 2, 2]
    assert [rne(v, 2) for v in (-6, -2, 2, 6, 7)] == [-2, 0, 0, 2, 2]
    assert rne(-32768, 8) == -128 and rne(32767, 0) == 32767


@pytest.fixture
def table_copy(tmp_path: Path) -> Path:
    for name in ("manifest.json", *(f"{table}.bin" for table in luts.TABLES)):
        shutil.copy(Path(luts.asset_dir("luts")) / name, tmp_path / name)
    return tmp_path


def test_file_with_wrong_hash_is_rejected(table_copy: Path) -> None:
    path = table_copy / "relu_i8.bin"
    raw = bytearray(path.read_bytes())
    raw[3] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"relu_i8: .*SHA-256"):
        luts.load_table("relu_i8", table_copy)
    problems = luts.check_all(table_copy)
    assert len(problems) == 1 and "relu_i8" in problems[0]


def test_check_command_fails_on_damaged_file(
    table_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = table_copy / "mul_i8.bin"
    path.write_bytes(path.read_bytes()[:-2])
    parser = argparse.ArgumentParser()
    luts.add_arguments(parser)
    assert luts.run(parser.parse_args(["--check", "--dir", str(table_copy)])) == 1
    assert "mul_i8" in capsys.readouterr().err


def test_consistent_hash_but_wrong_entry_fails_exhaustive_check(table_copy: Path) -> None:
    """A file rewritten together with its manifest hash still fails the exhaustive check."""

    array = luts.load_table("mul_i8", table_copy).copy()
    array[17, 230] += 1
    raw = array.tobytes()
    (table_copy / "mul_i8.bin").write_bytes(raw)
    manifest = json.loads((table_copy / "manifest.json").read_text())
    manifest["tables"]["mul_i8"]["sha256"] = hashlib.sha256(raw).hexdigest()
    (table_copy / "manifest.json").write_text(json.dumps(manifest))
    problems = luts.check_all(table_copy)
    assert problems and "mul_i8: entry [17, 230]" in problems[0]


def test_regenerate_reproduces_shipped_files(tmp_path: Path) -> None:
    manifest = luts.regenerate(tmp_path)
    assert manifest == luts.read_manifest()
    for entry in manifest["tables"].values():
        shipped = (Path(luts.asset_dir("luts")) / entry["file"]).read_bytes()
        assert (tmp_path / entry["file"]).read_bytes() == shipped
