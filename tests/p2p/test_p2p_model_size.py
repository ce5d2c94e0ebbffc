"""A custom model size (``--width/--layers/--heads`` on the leading headless peer): the run
names no preset, every peer builds the leader's architecture and stays bit-identical; a size
the contract cannot build is refused at start with the rule and a hint, before any connection;
the memory estimate every follower checks is printed first (issue 22, "Model size")."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mesh_helpers import (
    REPO,
    assert_identical,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
)


@needs_namespace
async def test_a_custom_model_size_trains_identically_and_names_no_preset() -> None:
    custom = lead_config(steps=3, min_peers=2, width=32, layers=1, heads=2)  # head dim 16
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=custom)
        follower = await start_peer(url, "follow")
        outcomes = await finish([leader, follower], timeout=180)
    assert [o.reason for o in outcomes] == ["done", "done"], outcomes
    assert_identical([leader, follower], range(1, 4))
    for peer in (leader, follower):
        config = peer.node.config
        assert config is not None and config.preset is None
        assert (config.model.width, config.model.layers, config.model.heads) == (32, 1, 2)
        state = peer.node.state
        assert state is not None and (state.cfg.width, state.cfg.layers) == (32, 1)


def _peer(*args: str) -> tuple[int, list[dict[str, object]], str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "server"))
    # A port nothing listens on: a refusal must come before any connection is tried.
    cmd = [sys.executable, "-m", "daisychain.peer", "--server", "http://127.0.0.1:9", "--json",
           "--backend", "numpy", "--lead", *args]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return proc.returncode, lines, proc.stderr


def test_a_size_the_contract_cannot_build_is_refused_at_start_with_a_hint() -> None:
    code, lines, _ = _peer("--width", "48", "--heads", "4")  # head dim 12: no exact 1/sqrt
    errors = [x for x in lines if x.get("event") == "error"]
    assert code == 1 and len(errors) == 1, lines
    assert "head dim width/heads = 12 must be a power of 4" in str(errors[0]["message"])
    assert "--width/--layers/--heads" in str(errors[0]["hint"])
    assert not any(x.get("event") == "model" for x in lines)


def test_the_leader_prints_the_model_and_its_memory_estimate_first() -> None:
    code, lines, _ = _peer("--width", "128", "--layers", "3", "--heads", "2")
    model = next(x for x in lines if x.get("event") == "model")
    assert (model["preset"], model["width"], model["layers"], model["heads"]) == (None, 128, 3, 2)
    assert float(str(model["memory_mb"])) > 0 and int(str(model["params"])) > 0
    assert "custom: width 128, 3 layers, 2 heads" in str(model["describe"])
    assert code == 1  # then it cannot reach the (absent) server, and says so
    assert lines.index(model) < next(i for i, x in enumerate(lines) if x.get("event") == "error")
    _, lines, _ = _peer()  # the preset's own size is named as the preset
    model = next(x for x in lines if x.get("event") == "model")
    assert model["preset"] == "tiny" and str(model["describe"]).startswith("tiny: width 64")
