"""The ``daisychain`` command line: subcommands found by name, clear errors for bad input."""

from __future__ import annotations

import pytest

from daisychain.cli import COMMANDS, main


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["trian"])
    assert exc.value.code == 2
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_unknown_benchmark_names_the_choices() -> None:
    with pytest.raises(SystemExit, match=r"unknown benchmark 'nope'.*gemm"):
        main(["bench", "nope"])


def test_bench_help_lists_the_benchmark_table(capsys: pytest.CaptureFixture[str]) -> None:
    """``daisychain bench --help`` names every benchmark of the table with its line (the table
    against the modules on disk: tests/test_bench_table.py)."""
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name in ("gemm", "step", "converge", "kernels", "signaling", "data", "mesh"):
        assert f"{name}: " in out
    assert "_torch_model" not in out


def test_a_benchmark_prints_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "gemm", "--help"])
    assert exc.value.code == 0
    assert "--repeats" in capsys.readouterr().out
