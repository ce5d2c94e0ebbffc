"""The golden-vector generators' command, ``python tests/vectorgen --write|--check|--list``
(tests/vectorgen/: test support, not part of the installed package)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import vectorgen as vectors

ROOT = Path(__file__).resolve().parent.parent


def test_the_documented_command_runs_from_the_repository_root() -> None:
    proc = subprocess.run(
        [sys.executable, "tests/vectorgen", "--list"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [line.split()[0] for line in proc.stdout.splitlines()] == list(vectors.SETS)


def test_vectors_lists_every_set_and_each_is_a_module_with_write_and_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert vectors.main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(vectors.SETS)
    for s in vectors.SETS.values():
        module = s.load()
        assert callable(module.write) and callable(module.check), s.name


def test_vectors_refuses_an_unknown_set_naming_the_sets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert vectors.main(["--check", "wire", "fineweeb"]) == 2
    err = capsys.readouterr().err
    assert "'fineweeb'" in err and "contract, tokenizer, wire" in err and "--list" in err


def test_vectors_check_names_every_stale_set_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # an empty folder: each chosen set is missing its files; a written one then passes
    cheap = ["tokenizer", "wire", "fineweb", "sha256", "protocol"]
    assert vectors.main(["--check", *cheap, "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    for name in cheap:
        assert f"{name}: STALE" in err, err
    assert vectors.main(["--write", "sha256", "wire", "--dir", str(tmp_path)]) == 0
    assert vectors.main(["--check", "sha256", "wire", "--dir", str(tmp_path)]) == 0
    written = tmp_path / "sha256.json"
    written.write_text(written.read_text(encoding="utf-8").replace('"a', '"b', 1))
    capsys.readouterr()
    assert vectors.main(["--check", "sha256", "wire", "--dir", str(tmp_path)]) == 1
    assert "sha256: STALE" in capsys.readouterr().err
