"""The ``daisychain`` command line: subcommands found by name, clear errors for bad input.

``daisychain train`` end to end in subprocesses: JSON output, checkpoints, bit-exact resume.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from daisychain.cli import COMMANDS, main

# ---- cli ----------------------------------------


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
    against the modules on disk: tests/bench/test_bench_table.py)."""
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


# ---- train cli ----------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def _train(tmp_path: Path, *args: str) -> list[dict[str, object]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"), DAISYCHAIN_CACHE=str(tmp_path / "c"))
    text = tmp_path / "text.txt"
    if not text.exists():
        # Real English text, not random ids: the built-in corpus's first part.
        from daisychain.corpus import load_builtin_text

        text.write_text(load_builtin_text()[:200_000], encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "train", "--preset", "tiny", "--text", str(text),
         "--json", "--quiet", "--warmup", "2", "--backend", "numpy", *args],
        capture_output=True, text=True, env=env, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_json_lines_and_resume_reproduce_the_uninterrupted_hashes(tmp_path: Path) -> None:
    full = _train(tmp_path, "--steps", "8", "--checkpoint", str(tmp_path / "full.safetensors"))
    assert [r["step"] for r in full] == list(range(1, 9))
    for r in full:
        assert isinstance(r["loss"], float) and len(str(r["hash"])) == 64
    first = _train(tmp_path, "--steps", "4", "--checkpoint", str(tmp_path / "half.safetensors"))
    assert [r["hash"] for r in first] == [r["hash"] for r in full[:4]]
    rest = _train(tmp_path, "--steps", "8", "--resume", str(tmp_path / "half.safetensors"))
    assert [r["step"] for r in rest] == [5, 6, 7, 8]
    assert [r["hash"] for r in rest] == [r["hash"] for r in full[4:]]
    assert [r["loss"] for r in rest] == [r["loss"] for r in full[4:]]


def test_missing_text_file_gives_a_hint(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "train", "--text", str(tmp_path / "nope.txt")],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "does not exist" in proc.stderr
    assert "pass a UTF-8 text file" in proc.stderr


def test_steps_0_exports_the_initial_weights_and_a_resume_continues_them(tmp_path: Path) -> None:
    from daisychain import checkpoint, training
    from daisychain.tokenizer import load_default

    init = tmp_path / "init.safetensors"
    assert _train(tmp_path, "--steps", "0", "--checkpoint", str(init)) == []
    tok = load_default()
    ck = checkpoint.load(init, tokenizer_sha256=tok.sha256, vocab_size=tok.vocab_size)
    assert ck.state.step == 0
    fresh = training.init(ck.state.cfg, ck.state.opt_cfg, 1)
    assert training.state_hash(ck.state) == training.state_hash(fresh)
    full = _train(tmp_path, "--steps", "2", "--checkpoint", str(tmp_path / "full.safetensors"))
    rest = _train(tmp_path, "--steps", "2", "--resume", str(init))
    assert [r["hash"] for r in rest] == [r["hash"] for r in full]


def test_help_shows_the_defaults() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "train", "--help"],
        capture_output=True, text=True, env=env, timeout=120, check=True,
    )  # fmt: skip
    text = " ".join(proc.stdout.split())
    for shown in ("(default: 300)", "(default: 0.003)", "(default: 20)", "(default: 1)"):
        assert shown in text, f"--help lacks {shown}"
