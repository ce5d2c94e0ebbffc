"""``daisychain bench cpu-tier``: what can be checked without TF.js and without the network.

- The bench refuses, with the reason and an install hint, when TF.js is not installed in
  ``--tfjs-dir`` and ``--no-install`` forbids installing it (through the real CLI), when the
  folder holds another version or misses a file the page loads, and when ``npm ci`` fails; a
  complete install (fake files) is accepted, so the guard is not simply always refusing.
- The TF.js GPT builds exactly our preset's parameters (``gptShapes`` of tfjs_gpt.mjs, a pure
  function, against ``daisychain.model.params``), and the bench's count guard refuses a model
  with one parameter more.
- Our side, under Node, trains ``tiny`` for one step on the bench's batches and reports the
  Python reference's state hash; a hash set with one path off is not "identical".
- The TF.js page's server hands out only the files the page needs, cross-origin isolated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench import cputier
from daisychain.bench.cputier import ISOLATION_HEADERS, tfjs_routes
from daisychain.bench.rig import paired_rounds
from daisychain.bench.rig.nodejs import NodeError, node_argv
from daisychain.bench.rig.tfjs_cache import (
    BROWSER_FILES,
    PACKAGES,
    TFJS_VERSION,
    TfjsMissing,
    ensure_tfjs,
    problems,
)
from daisychain.model.config import preset
from daisychain.model.params import count_params, param_shapes

ROOT = Path(__file__).resolve().parents[2]
TFJS_GPT = ROOT / "server" / "daisychain" / "bench" / "tfjs_gpt.mjs"
SERVED = ("/", "/tfjs/tf.min.js", "/tfjs/tfjs-backend-wasm-simd.wasm", "/bench/tfjs_gpt.mjs")


def _node() -> tuple[str, ...]:
    try:
        return node_argv()
    except NodeError as exc:
        pytest.skip(str(exc))


def _fake_install(folder: Path, version: str = TFJS_VERSION) -> Path:
    """The files ensure_tfjs looks for, with ``version`` in the packages' manifests."""
    for package in PACKAGES:
        manifest = folder / "node_modules" / "@tensorflow" / package / "package.json"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({"version": version}), encoding="utf-8")
    for name, rel in BROWSER_FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(f"// {name}\n", encoding="utf-8")
    return folder


def test_the_cli_refuses_without_tfjs_and_says_how_to_install(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "server"))
    proc = subprocess.run(
        [sys.executable, "-m", "daisychain", "bench", "cpu-tier", "--json", "--presets", "tiny",
         "--tfjs-dir", str(tmp_path), "--no-install"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert f"TF.js {TFJS_VERSION} is not installed in {tmp_path}" in proc.stderr
    assert "@tensorflow/tfjs is not installed" in proc.stderr
    assert "hint:" in proc.stderr and "without --no-install" in proc.stderr
    assert f"npm ci --prefix {tmp_path}" in proc.stderr
    assert list(tmp_path.iterdir()) == []  # --no-install: nothing written


def test_another_version_or_a_missing_binary_is_refused(tmp_path: Path) -> None:
    good = _fake_install(tmp_path / "good")
    assert problems(good) == []
    assert ensure_tfjs(good, install=False) == good

    old = _fake_install(tmp_path / "old", version="4.21.0")
    with pytest.raises(TfjsMissing, match=r"@tensorflow/tfjs is 4\.21\.0, not 4\.22\.0"):
        ensure_tfjs(old, install=False)

    holed = _fake_install(tmp_path / "holed")
    (holed / BROWSER_FILES["tfjs-backend-wasm-threaded-simd.wasm"]).unlink()
    with pytest.raises(TfjsMissing, match=r"tfjs-backend-wasm-threaded-simd\.wasm is missing"):
        ensure_tfjs(holed, install=False)


def test_a_failing_npm_is_reported_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(TfjsMissing) as caught:
        ensure_tfjs(tmp_path / "cache", install=True, npm="/bin/false")
    assert "`npm ci`" in caught.value.message and "failed (exit 1)" in caught.value.message
    assert "--tfjs-dir" in caught.value.hint
    # The manifest and lock file were put there for npm ci to read.
    assert {p.name for p in (tmp_path / "cache").iterdir()} == {"package.json", "package-lock.json"}


def test_the_manifest_pins_tfjs_exactly() -> None:
    folder = ROOT / "server" / "daisychain" / "bench" / "tfjs"
    deps = json.loads((folder / "package.json").read_text(encoding="utf-8"))["dependencies"]
    assert deps == {f"@tensorflow/{p}": TFJS_VERSION for p in PACKAGES}
    lock = json.loads((folder / "package-lock.json").read_text(encoding="utf-8"))
    for package in PACKAGES:
        assert lock["packages"][f"node_modules/@tensorflow/{package}"]["version"] == TFJS_VERSION


@pytest.mark.parametrize("name", ["tiny", "small", "medium"])
def test_the_tfjs_gpt_has_our_presets_parameters(name: str) -> None:
    cfg = preset(name)
    script = (
        f"const {{ gptShapes }} = await import({json.dumps(TFJS_GPT.as_uri())});"
        f"console.log(JSON.stringify(gptShapes({json.dumps(cputier.js_config(cfg))})));"
    )
    proc = subprocess.run(
        [*_node(), "--input-type=module", "-e", script],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    shapes = [(n, tuple(s)) for n, s in json.loads(proc.stdout)]
    assert shapes == list(param_shapes(cfg).items())
    total = sum(math.prod(s) for _n, s in shapes)
    assert total == count_params(cfg)
    cputier.check_same_model(name, total, cfg)  # the bench's guard accepts it ...
    with pytest.raises(RuntimeError, match="does not build the same model"):
        cputier.check_same_model(name, total + 1, cfg)  # ... and refuses another model


def test_our_side_under_node_reports_the_reference_hash() -> None:
    _node()
    from daisychain.batches import builtin_tokens

    cfg = preset("tiny")
    tokens, _vocab = builtin_tokens(300_000)
    batches = cputier.make_batches(cfg, tokens, 1)
    job = {"preset": "tiny", "vocab": cfg.vocab_size, "batches": batches, "warmup": 0, "steps": 1}
    result = cputier.node_ours(job, timeout_s=240)
    assert result["gate"]["enabled"] is True, result["gate"]
    assert result["steps_trained"] == 1 and len(result["step_ms"]) == 1
    assert result["tokens_per_s"] > 0
    reference = cputier.reference_hash(cfg, batches)
    assert result["hash"] == reference
    assert cputier.hashes_identical({"numpy": reference, "node": result["hash"]})
    # The comparison can fail: another batch gives another reference, a missing path is no match.
    other = cputier.reference_hash(cfg, cputier.make_batches(cfg, tokens[1:], 1))
    assert other != reference
    assert not cputier.hashes_identical({"numpy": other, "node": result["hash"]})
    assert not cputier.hashes_identical({"numpy": reference, "chromium": None})


def test_the_tfjs_server_serves_only_the_pages_files(tmp_path: Path) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    folder = _fake_install(tmp_path)
    (folder / "secret.txt").write_text("not for the page", encoding="utf-8")

    async def run() -> dict[str, Any]:
        async with TestClient(TestServer(tfjs_routes(folder))) as client:
            out: dict[str, Any] = {}
            for path in (*SERVED, "/tfjs/secret.txt", "/tfjs/..%2Fsecret.txt"):
                resp = await client.get(path)
                out[path] = (resp.status, dict(resp.headers), await resp.read())
            return out

    got = asyncio.run(run())
    for path in SERVED:
        status, headers, _body = got[path]
        assert status == 200, path
        for name, value in ISOLATION_HEADERS.items():
            assert headers.get(name) == value, (path, name)
    assert got["/tfjs/tfjs-backend-wasm-simd.wasm"][1]["Content-Type"] == "application/wasm"
    assert got["/tfjs/tf.min.js"][2] == b"// tf.min.js\n"
    assert got["/tfjs/secret.txt"][0] == 404
    assert got["/tfjs/..%2Fsecret.txt"][0] == 404


def test_the_python_peer_trains_the_same_batches_to_the_reference_hash() -> None:
    """``--peer``: the headless peer, with the backend it was asked for, on the bench's batches."""
    pytest.importorskip("numba", reason="cpu-madd needs numba (test extras)")
    from daisychain.batches import builtin_tokens
    from daisychain.bench.rig import cputier_peer
    from daisychain.bench.step import ISA_ENV

    cfg = preset("tiny")
    tokens, _vocab = builtin_tokens(300_000)
    batches = cputier.make_batches(cfg, tokens, 2)
    job = {"preset": "tiny", "vocab": cfg.vocab_size, "batches": batches, "warmup": 1,
           "steps": 1, "seed": cputier.SEED}  # fmt: skip
    result = cputier_peer.peer_once(job, "cpu-madd", ISA_ENV["avx2"], timeout_s=240)
    assert result["backend"] == "cpu-madd" and len(result["step_ms"]) == 1
    assert result["hash"] == cputier.reference_hash(cfg, batches)
    with pytest.raises(RuntimeError, match="the Python peer failed"):
        cputier_peer.peer_once(job, "no-such-backend", {}, timeout_s=240)


def test_unknown_environments_modes_and_peers_are_refused() -> None:
    parser = argparse.ArgumentParser()
    cputier.add_arguments(parser)
    for argv, option in ((["--environments", "node,deno"], "--environments"),
                         (["--modes", "fastest,slowest"], "--modes"),
                         (["--modes", "none", "--peer", "cpu_madd"], "--peer")):  # fmt: skip
        with pytest.raises(SystemExit, match=option):
            cputier.measure(parser.parse_args(argv))


def test_rounds_give_medians_and_paired_ratios_and_drop_a_hash_that_moved() -> None:
    def run(ms: float, digest: str) -> dict[str, Any]:
        return {"median_ms": ms, "step_ms": [ms], "tokens_per_s": 1000 / ms, "hash": digest}

    ours = [run(100, "a"), run(300, "a"), run(120, "a")]
    theirs = [run(50, "-"), run(600, "-"), run(60, "-")]
    summary = paired_rounds.summarize(ours, tokens_per_step=1000)
    assert summary["median_ms"] == 120 and summary["tokens_per_s"] == round(1000 / 0.12)
    assert summary["hash"] == "a" and len(summary["rounds"]) == 3
    # Paired round by round: the slow round hit both sides, so it is no outlier of the ratio.
    assert paired_rounds.paired_ratios(ours, theirs) == [0.5, 2.0, 0.5]
    moved = paired_rounds.summarize([run(100, "a"), run(100, "b")], tokens_per_step=1000)
    assert moved["hash"] is None and moved["hash_by_round"] == ["a", "b"]
    assert not cputier.hashes_identical({"numpy": "a", "node": moved["hash"]})
