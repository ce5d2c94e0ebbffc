"""The ``daisychain`` command line: subcommands found by name, clear errors for bad input."""

from __future__ import annotations

import pytest

from daisychain.bench import available
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


def test_benchmarks_are_the_public_modules_only() -> None:
    names = available()
    assert {"gemm", "step", "converge", "kernels", "signaling", "data", "mesh"} <= set(names)
    assert not any(n.startswith("_") for n in names)


def test_a_benchmark_prints_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "gemm", "--help"])
    assert exc.value.code == 0
    assert "--repeats" in capsys.readouterr().out
