"""The wheel carries static/, kernels/, luts/ and the built-in corpus, and the package finds them;
it carries nothing that only the tests use.

Builds a real wheel with pip (no network: --no-deps, --no-build-isolation uses the installed
setuptools) and reads its file list; then checks ``daisychain.assets`` in this (editable or
source) layout.

"Only the tests use it" is decided by a rule, not a list: every Python module in the wheel must
be reached from an entry point of the product (``daisychain`` and its subcommands, the server,
the headless peer) through imports, or through a module name a reached module uses in a string
(a command table, ``python -m``, a child process's script); every other file the wheel carries
under ``daisychain/`` beside the assets (the benchmarks' Node scripts, their pinned hashes) must
be named by a reached module. Test support (golden-vector generators, protocol traces, planted
bugs, helpers) lives under tests/ and is never reached from there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from daisychain.assets import asset_dir, data_dir
from importgraph import module_names, reachable, usage_graph

ROOT = Path(__file__).resolve().parent.parent


def test_assets_resolve_in_the_source_tree() -> None:
    assert (asset_dir("static") / "index.html").is_file()
    assert any(asset_dir("kernels").glob("*.wgsl"))
    assert (asset_dir("luts") / "tokenizer.json").is_file()
    assert any((data_dir() / "corpus").iterdir())
    with pytest.raises(ValueError, match="unknown asset folder"):
        asset_dir("secrets")


SOURCES = ("pyproject.toml", "setup.py", "README.md", "server", "static", "kernels", "luts")


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The file list of a wheel built from a fresh copy of the sources."""
    # Build from a fresh copy: pip builds in the source's build/ folder, and a stale one there
    # could supply files the source no longer has.
    tmp_path = tmp_path_factory.mktemp("wheel")
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
    return set(zipfile.ZipFile(wheel).namelist())


def test_wheel_contains_every_asset(wheel_names: set[str]) -> None:
    names = wheel_names
    for rel in ("static/index.html", "static/favicon.svg", "luts/tokenizer.json",
                "luts/manifest.json"):  # fmt: skip
        assert f"daisychain/_assets/{rel}" in names, rel
    # /vectors/ (the train check's case) is computed by package code, not shipped as files.
    assert {"daisychain/vectorformat.py", "daisychain/server/trainvectors.py"} <= names
    assert any(n.startswith("daisychain/_assets/kernels/") and n.endswith(".wgsl") for n in names)
    assert any(n.startswith("daisychain/data/corpus/") for n in names)
    assert "daisychain/bench/node_gemm.mjs" in names  # the bench runs it under node
    assert "daisychain/bench/rig/node_step.mjs" in names  # step timing runs it under node
    assert "daisychain/wire/signaling.py" in names and "daisychain/corpus/load.py" in names


# --- nothing test-only in the wheel ---------------------------------------------------------------

PACKAGE = ROOT / "server" / "daisychain"
# What a person runs: ``daisychain ...`` (the subcommands are named in cli.COMMANDS, the
# benchmarks in bench.BENCHMARKS), ``python -m daisychain.server``, ``python -m daisychain.peer``.
ENTRY_POINTS = (
    "daisychain.__main__",
    "daisychain.cli",
    "daisychain.server.__main__",
    "daisychain.peer.__main__",
)


# Product modules no entry point reaches yet, each with the reason it ships anyway; the test
# below fails when a reason goes stale (the module left the wheel or an entry point reaches it).
AUDITS_AHEAD = (
    'audits\' building blocks (docs/TRUST.md, "Built so far"), built and tested ahead of the '
    "audit machine that will import them; until then only the tests load them"
)
BUILT_AHEAD = {
    "daisychain/p2p/statements.py": AUDITS_AHEAD,
    "daisychain/p2p/auditkey.py": AUDITS_AHEAD,
    "daisychain/p2p/draw.py": AUDITS_AHEAD,
    "daisychain/p2p/machine/audit.py": AUDITS_AHEAD,
}


def unreached_files(names: set[str], package: Path, ahead: bool = False) -> list[str]:
    """The wheel's files under ``daisychain/`` (assets aside) that no entry point reaches:
    modules outside the usage graph's reach, other files no reached module names. Those in
    ``BUILT_AHEAD`` are left out unless ``ahead``."""
    graph = usage_graph(package)
    reached = reachable(graph, ENTRY_POINTS)
    modules = module_names(package)
    texts = "\n".join(modules[m].read_text(encoding="utf-8") for m in sorted(reached))
    found = []
    for name in sorted(names):
        parts = name.split("/")
        if parts[0] != "daisychain" or parts[1] in ("_assets", "data") or ".dist-info" in name:
            continue
        if name in BUILT_AHEAD and not ahead:
            continue
        if name.endswith(".py"):
            dotted = ".".join(parts).removesuffix(".py").removesuffix(".__init__")
            if dotted not in reached:
                found.append(name)
        elif parts[-1] not in ("py.typed",) and parts[-1] not in texts:
            found.append(name)
    return found


def test_the_wheel_holds_no_test_only_file(wheel_names: set[str]) -> None:
    assert any(n.endswith("daisychain/bench/rig/chromium.py") for n in wheel_names)
    assert unreached_files(wheel_names, PACKAGE) == []


def test_the_reasons_to_ship_an_unreached_module_stay_true(wheel_names: set[str]) -> None:
    """Each module kept by a reason is in the wheel and reached by no entry point."""
    unreached = unreached_files(wheel_names, PACKAGE, ahead=True)
    for name in BUILT_AHEAD:
        assert name in wheel_names and name in unreached, f"{name}: its reason is stale"


def test_a_planted_test_only_module_is_found(wheel_names: set[str], tmp_path: Path) -> None:
    # The same rule on a copy of the package with test-only files planted: a module nothing
    # imports (only a docstring mentions it), a module imported only by that one, and a Node
    # script no module names. Each is found; the real files are not.
    package = tmp_path / "daisychain"
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    (package / "p2p" / "fixtures.py").write_text(
        '"""Planted: fake peers for tests."""\n\nfrom daisychain.p2p import fakes\n'
    )
    (package / "p2p" / "fakes.py").write_text('"""Planted."""\n')
    (package / "bench" / "debug_probe.mjs").write_text("// planted\n")
    with (package / "p2p" / "run.py").open("a") as f:
        f.write('\n\ndef _mention() -> None:\n    """daisychain.p2p.fixtures is not used."""\n')
    planted = {"daisychain/p2p/fixtures.py", "daisychain/p2p/fakes.py",
               "daisychain/bench/debug_probe.mjs"}  # fmt: skip
    assert unreached_files(wheel_names | planted, package) == sorted(planted)
