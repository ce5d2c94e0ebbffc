"""The JavaScript CPU mirror (static/js/numerics, static/js/tokenizer.js) under Node.

Runs ``node --test tests/js/`` (node:test files ``*.test.mjs``; no npm packages) and fails on any
failing JS test, showing Node's report. The JS tests compare the mirror bit for bit with the
golden vectors in tests/vectors/ and with known answers of the Python reference. Skipped only
when ``node`` is not on PATH (install Node 18 or newer to run it;
``daisychain.bench.rig.nodejs`` says how it is started).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from daisychain.bench.rig.nodejs import NodeError, node_argv

REPO = Path(__file__).resolve().parents[2]
JS_TESTS = REPO / "tests" / "js"
NODE_TIMEOUT_S = 240


def _node() -> tuple[str, ...]:
    try:
        return node_argv()
    except NodeError as exc:
        if "not on PATH" in str(exc):
            pytest.skip(str(exc))
        raise


def test_node_is_recent_enough() -> None:
    _node()  # raises NodeError naming the version when Node is older than 18


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("v16.20.2", "too old"),
        ("v18.20.4", "--experimental-global-webcrypto"),
        ("v20.20.2", None),
        ("node-x", "unexpected"),
    ],
)
def test_node_argv_by_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, expected: str | None
) -> None:
    fake = tmp_path / "node"
    fake.write_text(f"#!/bin/sh\necho {version}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    node_argv.cache_clear()
    try:
        if expected in ("too old", "unexpected"):
            with pytest.raises(NodeError, match=expected):
                node_argv()
        elif expected is None:
            assert node_argv() == (str(fake),)
        else:
            assert node_argv() == (str(fake), expected)
    finally:
        node_argv.cache_clear()


def test_js_mirror_node_suite() -> None:
    files = sorted(JS_TESTS.glob("*.test.mjs"))
    assert files, f"no *.test.mjs files in {JS_TESTS}"
    proc = subprocess.run(
        [*_node(), "--test", *[str(f) for f in files]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT_S,
        # The JS tests run Python fixtures with $PYTHON: this interpreter (the one with the
        # test dependencies), whatever `python` is first on PATH.
        env={**os.environ, "PYTHON": sys.executable},
    )
    report = proc.stdout + proc.stderr
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|cancelled) (\d+)$", report, re.M)}
    assert proc.returncode == 0 and counts.get("fail", 1) == 0, (
        f"node --test failed (exit {proc.returncode}):\n{report[-20000:]}"
    )
    assert counts.get("pass", 0) > 0, f"node --test ran no tests:\n{report[-5000:]}"
    assert counts.get("cancelled", 0) == 0, f"node tests were cancelled:\n{report[-20000:]}"


def test_js_presets_equal_python_presets() -> None:
    """The browser's model presets are the Python presets, field for field (a follower in the
    page and one in Python must build the same model from a preset name)."""
    import json

    from daisychain.model.config import PRESETS

    script = (
        "const M = await import(process.argv[1]);"
        "console.log(JSON.stringify(Object.fromEntries(Object.entries(M.PRESETS).map("
        "([k, c]) => [k, [c.vocabSize, c.width, c.layers, c.heads, c.seqLen, c.batch, c.mlpMult,"
        " c.normEps]]))));"
    )
    config_js = (REPO / "static" / "js" / "model" / "config.js").as_uri()
    out = subprocess.run(
        [*_node(), "--input-type=module", "-e", script, config_js],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    js = json.loads(out)
    py = {
        name: [c.vocab_size, c.width, c.layers, c.heads, c.seq_len, c.batch, c.mlp_mult,
               float(c.norm_eps)]
        for name, c in PRESETS.items()
    }  # fmt: skip
    assert js == py
