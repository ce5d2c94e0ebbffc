"""The JavaScript's checkers (tests/jscheck/: ESLint, and TypeScript's checker over JSDoc) pass
on the tree and fire on planted defects.

The README's test command installs them (``npm ci`` in tests/jscheck) and runs them
(``npm run check`` there) before the suite; here each gate is shown failing on
a small planted file laid out like the tree (a ``static/js/`` folder in a temporary directory,
checked with the project's own configuration), so a configuration that checks nothing fails.
Skipped when the tools are not installed, with the command that installs them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JSCHECK = ROOT / "tests" / "jscheck"
BIN = JSCHECK / "node_modules" / ".bin"
TIMEOUT_S = 120


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.skip(
            f"{path.relative_to(ROOT)} is missing: run `npm ci` in tests/jscheck "
            "(the README's test command does)"
        )
    if shutil.which("node") is None:
        pytest.skip("node is not on PATH (install Node.js 18 or newer)")
    return path


def _run(argv: list[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S,
        check=False,
    )  # fmt: skip


def _eslint(tree: Path, *files: str) -> subprocess.CompletedProcess[str]:
    """ESLint with the project's configuration on `files` (relative to `tree`, as the real run
    is relative to the repository root)."""
    return _run([_tool("eslint"), "-c", JSCHECK / "eslint.config.js", *files], cwd=tree)


def _plant(tree: Path, rel: str, text: str) -> None:
    path = tree / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_tree_is_clean() -> None:
    _tool("eslint")
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not on PATH (install npm beside Node.js)")
    proc = _run([npm, "--prefix", JSCHECK, "run", "check"], cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_eslint_fires_on_an_unused_name_an_undefined_global_and_loose_equality(
    tmp_path: Path,
) -> None:
    clean = "export function f(a, b) {\n  return a === b ? window.name : null;\n}\n"
    _plant(tmp_path, "static/js/planted.js", clean)
    proc = _eslint(tmp_path, "static/js/planted.js")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    planted = (
        "export function f(a, b) {\n  const unused = 1;\n  return a == b ? windw.name : null;\n}\n"
    )
    _plant(tmp_path, "static/js/planted.js", planted)
    proc = _eslint(tmp_path, "static/js/planted.js")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for rule in ("no-unused-vars", "no-undef", "eqeqeq"):
        assert rule in proc.stdout, (rule, proc.stdout)


def test_eslint_gives_a_worker_no_dom_and_node_files_node_globals(tmp_path: Path) -> None:
    page = "export const title = () => document.title;\n"
    _plant(tmp_path, "static/js/page/planted.js", page)
    _plant(tmp_path, "static/js/train/worker.js", page)  # a module Worker: no document
    _plant(tmp_path, "tests/js/planted.test.mjs", "export const argv = process.argv;\n")
    _plant(tmp_path, "static/js/planted.js", "export const argv = process.argv;\n")
    proc = _eslint(tmp_path, "static/js/page/planted.js", "tests/js/planted.test.mjs")
    assert proc.returncode == 0, proc.stdout
    for rel in ("static/js/train/worker.js", "static/js/planted.js"):
        proc = _eslint(tmp_path, rel)
        assert proc.returncode == 1 and "no-undef" in proc.stdout, (rel, proc.stdout)


def _tsc(tree: Path, *files: str, base: str = "tsconfig.json") -> subprocess.CompletedProcess[str]:
    """TypeScript's checker with the project's `base` configuration on `files` alone."""
    config = {"extends": str(JSCHECK / base), "include": list(files), "exclude": []}
    (tree / "tsconfig.json").write_text(json.dumps(config), encoding="utf-8")
    return _run([_tool("tsc"), "-p", "tsconfig.json"], cwd=tree)


def test_tsc_checks_a_ts_check_file_and_only_that(tmp_path: Path) -> None:
    typed = "/** @param {number} n */\nexport function f(n) {\n  return n.toFixed(2);\n}\n"
    _plant(tmp_path, "clean.js", "// @ts-check\n" + typed)
    proc = _tsc(tmp_path, "clean.js")
    assert proc.returncode == 0, proc.stdout
    wrong = typed.replace("toFixed(2)", "toUpperCase()")  # a number has no toUpperCase
    _plant(tmp_path, "unchecked.js", wrong)
    assert _tsc(tmp_path, "unchecked.js").returncode == 0  # no // @ts-check: not checked
    _plant(tmp_path, "wrong.js", "// @ts-check\n" + wrong)
    proc = _tsc(tmp_path, "wrong.js")
    assert proc.returncode != 0 and "error TS2339" in proc.stdout, proc.stdout


def test_tsc_is_strict_in_a_ts_check_file(tmp_path: Path) -> None:
    # strict: a parameter without a type (noImplicitAny), a value that may be null
    # (strictNullChecks)
    _plant(tmp_path, "untyped.js", "// @ts-check\nexport const f = (n) => n + 1;\n")
    proc = _tsc(tmp_path, "untyped.js")
    assert proc.returncode != 0 and "error TS7006" in proc.stdout, proc.stdout
    nullable = "// @ts-check\n/** @param {string | null} s */\nexport const f = (s) => s.length;\n"
    _plant(tmp_path, "nullable.js", nullable)
    proc = _tsc(tmp_path, "nullable.js")
    assert proc.returncode != 0 and "error TS18047" in proc.stdout, proc.stdout


def test_tsc_gives_a_worker_the_worker_globals_and_no_dom(tmp_path: Path) -> None:
    worker = (
        "// @ts-check\n"
        "const scope = /** @type {DedicatedWorkerGlobalScope} */ (/** @type {unknown} */ (self));\n"
        "scope.postMessage({ ok: true });\n"
    )
    _plant(tmp_path, "worker.js", worker)
    proc = _tsc(tmp_path, "worker.js", base="tsconfig.worker.json")
    assert proc.returncode == 0, proc.stdout
    assert _tsc(tmp_path, "worker.js").returncode != 0  # the page's configuration has no Worker
    _plant(tmp_path, "worker.js", worker + "export const title = document.title;\n")
    proc = _tsc(tmp_path, "worker.js", base="tsconfig.worker.json")
    assert proc.returncode != 0 and "Cannot find name 'document'" in proc.stdout, proc.stdout
