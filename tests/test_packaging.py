"""The wheel carries static/, kernels/, luts/ and the built-in corpus, and the package finds them.

Builds a real wheel with pip (no network: --no-deps, --no-build-isolation uses the installed
setuptools) and reads its file list; then checks ``daisychain.assets`` in this (editable or
source) layout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from daisychain.assets import asset_dir, data_dir

ROOT = Path(__file__).resolve().parent.parent


def test_assets_resolve_in_the_source_tree() -> None:
    assert (asset_dir("static") / "index.html").is_file()
    assert any(asset_dir("kernels").glob("*.wgsl"))
    assert (asset_dir("luts") / "tokenizer.json").is_file()
    assert any((data_dir() / "corpus").iterdir())
    with pytest.raises(ValueError, match="unknown asset folder"):
        asset_dir("secrets")


SOURCES = ("pyproject.toml", "setup.py", "README.md", "server", "static", "kernels", "luts")


def test_wheel_contains_every_asset(tmp_path: Path) -> None:
    # Build from a fresh copy: pip builds in the source's build/ folder, and a stale one there
    # could supply files the source no longer has.
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "_assets")
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, src / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("daisychain-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for rel in ("static/index.html", "static/favicon.svg", "luts/tokenizer.json",
                "luts/manifest.json"):  # fmt: skip
        assert f"daisychain/_assets/{rel}" in names, rel
    # /vectors/ (the train check's case) is computed by package code, not shipped as files.
    assert {"daisychain/vectors/contract.py", "daisychain/server/trainvectors.py"} <= names
    assert any(n.startswith("daisychain/_assets/kernels/") and n.endswith(".wgsl") for n in names)
    assert any(n.startswith("daisychain/data/corpus/") for n in names)
    assert "daisychain/bench/node_gemm.mjs" in names  # the bench runs it under node
    assert "daisychain/harness/node_step.mjs" in names  # step timing runs it under node
    assert "daisychain/wire/signaling.py" in names and "daisychain/corpus/load.py" in names
