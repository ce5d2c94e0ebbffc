"""Headless peers train on FineWeb-Edu (``config.data = "fineweb@REV"``) over real aiortc data
channels, each reading its own addressed windows from the real server's ``/data``, which reads
generated FineWeb-Edu-shaped parquet from a local range server.

The browser + Python run is tests/browser/test_browser_fineweb.py; the token ids both compute
are pinned by tests/vectors/fineweb/ and tests/js/fineweb_tokens.test.mjs. The shards, the
servers and the peers are tests/fineweb_helpers.py's.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daisychain import training
from daisychain.bench.rig.fineweb_stub import write_fineweb_shard
from daisychain.p2p.node import Outcome
from daisychain.server.app import serve_local
from fineweb_helpers import DATA, SHARDS, Peer, fineweb_server, start
from mesh_helpers import PeerProcess, lead_config, needs_namespace, wait_for
from server_fixtures import ByteTokenizer, config

pytestmark = needs_namespace

STEPS = 34  # crosses a row-group block (fineweb.STEPS_PER_ROW_GROUP = 32)


@pytest.fixture(scope="module")
def shard_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    for seed, shard in enumerate(SHARDS):
        write_fineweb_shard(
            root / shard, row_groups=4, rows_per_group=40, chars_per_row=600, seed=seed
        )
    return root


async def two_peer_run(root: Path, data: str) -> tuple[list[Peer], list[Outcome], dict[str, Any]]:
    async with fineweb_server(root) as (url, _stub):
        data_url = url if data != "builtin" else None
        lead = lead_config(steps=STEPS, min_peers=2, data=data)
        peers = [await start(url, "lead", data_url, lead), await start(url, "f1", data_url, None)]
        outcomes = await asyncio.wait_for(asyncio.gather(*(p.task for p in peers)), 300)
        async with aiohttp.ClientSession() as session, session.get(f"{url}/api/status") as r:
            status = (await r.json())["data"]
    return peers, list(outcomes), status


def run_hashes(peers: list[Peer]) -> list[str]:
    for step in range(1, STEPS + 1):
        assert len({p.hashes[step] for p in peers}) == 1, f"step {step} differs between peers"
    return [peers[0].hashes[s] for s in range(1, STEPS + 1)]


async def test_two_peers_train_on_fineweb_identically_and_a_rerun_reads_the_same_tokens(
    shard_root: Path,
) -> None:
    peers, outcomes, status = await two_peer_run(shard_root, DATA)
    assert [o.reason for o in outcomes] == ["done", "done"], outcomes
    assert all(p.node.config is not None and p.node.config.data == DATA for p in peers)
    first = run_hashes(peers)
    assert all(len(r.roster) == 2 for p in peers for r in p.records)
    # Every step of both ranks read its own window (prefetch may read a few past the end).
    assert status["windows_served"] >= 2 * STEPS and status["served"]["builtin"] == 0, status
    assert all(p.feed is not None and p.feed.stats.fetched >= STEPS for p in peers)

    again, outcomes, _ = await two_peer_run(shard_root, DATA)  # from scratch: new servers
    assert [o.reason for o in outcomes] == ["done", "done"]
    assert run_hashes(again) == first

    builtin, outcomes, _ = await two_peer_run(shard_root, "builtin")
    assert [o.reason for o in outcomes] == ["done", "done"]
    assert run_hashes(builtin)[0] != first[0], "the FineWeb-Edu run trained on other text"


async def test_a_peer_whose_data_server_goes_away_leaves_cleanly_with_the_reason(
    shard_root: Path,
) -> None:
    """Data from one server, signaling from another: the data server stops mid-run; each peer
    trains on what it prefetched, then cannot read its next batch and leaves the run with the
    reason instead of training on anything else. Every replica stays at a step it applied."""
    async with fineweb_server(shard_root) as (url, _stub), AsyncExitStack() as data_stack:
        data_url, _data_stub = await data_stack.enter_async_context(fineweb_server(shard_root))
        lead = lead_config(steps=200, min_peers=2, data=DATA)
        peers = [await start(url, "lead", data_url, lead), await start(url, "f1", data_url, None)]
        await wait_for(lambda: all(3 in p.hashes for p in peers), 120, "three steps")
        await data_stack.aclose()  # the data server is gone
        outcomes = await asyncio.wait_for(asyncio.gather(*(p.task for p in peers)), 120)
    assert all(o.step < 200 for o in outcomes), outcomes
    for peer in peers:
        error = peer.node.data_error
        assert error is not None, peer.node.name
        assert f"cannot read training data from {data_url}/data" in error.message
        assert "reachable" in error.hint
        state = peer.node.state
        assert state is not None and state.step == max(peer.hashes)
        assert training.state_hash(state) == peer.hashes[state.step], "state is a step applied"
    common = set(peers[0].hashes) & set(peers[1].hashes)
    assert len(common) >= 3 and all(peers[0].hashes[s] == peers[1].hashes[s] for s in common)


async def test_the_headless_peer_leads_and_follows_a_fineweb_run_from_the_command_line(
    shard_root: Path,
) -> None:
    """``python -m daisychain.peer --lead --data fineweb``: the revision comes from the server's
    /api/status, the follower reads it too, and both finish with the same hashes."""
    async with fineweb_server(shard_root) as (url, _stub):
        common = ("--preset", "tiny", "--steps", "3", "--batch", "1", "--seq-len", "16")
        lead = PeerProcess(url, "lead", "--lead", "--data", "fineweb", "--min-peers", "2", *common)
        follow = PeerProcess(url, "follow")
        try:
            codes = [await lead.wait(240), await follow.wait(240)]
            assert codes == [0, 0], (lead.stderr(), follow.stderr())
            assert lead.hashes == follow.hashes and len(lead.hashes) == 3
            async with aiohttp.ClientSession() as session, session.get(f"{url}/api/status") as r:
                status = (await r.json())["data"]
            assert status["windows_served"] >= 6, "both peers read their windows from /data"
        finally:
            lead.close()
            follow.close()


async def test_the_headless_peer_will_not_lead_fineweb_from_an_offline_server() -> None:
    async with serve_local(config(), tokenizer=ByteTokenizer) as url:  # offline
        proc = PeerProcess(url, "lead", "--lead", "--data", "fineweb")
        try:
            assert await proc.wait(120) == 1
            assert "does not serve FineWeb-Edu at a pinned revision" in proc.stderr()
            assert "hint: lead with --data builtin" in proc.stderr()
            assert [d["event"] for d in proc.lines] == ["backend", "model", "error"]
        finally:
            proc.close()
