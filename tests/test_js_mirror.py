"""The JavaScript CPU mirror (static/js/numerics, static/js/tokenizer.js) under Node.

Runs ``node --test tests/js/`` (node:test files ``*.test.mjs``; no npm packages) and fails on any
failing JS test, showing Node's report. The JS tests compare the mirror bit for bit with the
golden vectors in tests/vectors/ and with known answers of the Python reference. Skipped only
when ``node`` is not on PATH (install Node 20 or newer to run it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JS_TESTS = REPO / "tests" / "js"
NODE_TIMEOUT_S = 240


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH: install Node 20+ to test the JS mirror")
    return node


def test_node_is_recent_enough() -> None:
    out = subprocess.run(
        [_node(), "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    match = re.match(r"v(\d+)", out.strip())
    assert match is not None, f"unexpected `node --version` output: {out!r}"
    assert int(match.group(1)) >= 20, (
        f"Node {out.strip()} is too old: the JS mirror needs Node 20+ (crypto.subtle)"
    )


def test_js_mirror_node_suite() -> None:
    files = sorted(JS_TESTS.glob("*.test.mjs"))
    assert files, f"no *.test.mjs files in {JS_TESTS}"
    proc = subprocess.run(
        [_node(), "--test", *[str(f) for f in files]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
    )
    report = proc.stdout + proc.stderr
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|cancelled) (\d+)$", report, re.M)}
    assert proc.returncode == 0 and counts.get("fail", 1) == 0, (
        f"node --test failed (exit {proc.returncode}):\n{report[-20000:]}"
    )
    assert counts.get("pass", 0) > 0, f"node --test ran no tests:\n{report[-5000:]}"
    assert counts.get("cancelled", 0) == 0, f"node tests were cancelled:\n{report[-20000:]}"
