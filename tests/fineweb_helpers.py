"""FineWeb-Edu runs against a local stand-in for the Hub: the generated shards' names
(``SHARDS``), the pinned revision and its ``config.data`` name (``REVISION``, ``DATA``), the real
DaisyChain server reading those shards from a local range server (``fineweb_server``) and an
in-process Python peer reading its own windows from that server's ``/data`` (``start``).

Used by tests/data/test_fineweb_run.py (headless peers) and tests/browser/test_browser_fineweb.py
(a Chromium tab with a Python peer).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import aiohttp
from aiohttp import web

from daisychain import datanames, fineweb
from daisychain.bench.rig.fineweb_stub import UpstreamStub
from daisychain.p2p.datafeed import FineWebFeed
from daisychain.p2p.mesh import Mesh
from daisychain.p2p.node import LeadConfig, Node, Outcome, StepRecord
from daisychain.server.app import serve_local
from daisychain.server.config import DataConfig
from mesh_helpers import FAST, corpus, lead_config
from server_fixtures import ByteTokenizer, config

SHARDS = ("sample/10BT/000_00000.parquet", "sample/10BT/001_00000.parquet")
REVISION = "0123456789abcdef0123456789abcdef01234567"
DATA = fineweb.data_name(REVISION)


@asynccontextmanager
async def upstream(stub: UpstreamStub) -> AsyncIterator[UpstreamStub]:
    """``stub`` served on a loopback port (its ``base_url`` set)."""
    runner = web.AppRunner(stub.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    stub.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield stub
    finally:
        await runner.cleanup()


@asynccontextmanager
async def fineweb_server(
    root: Path, data: DataConfig | None = None, stub: UpstreamStub | None = None
) -> AsyncIterator[tuple[str, UpstreamStub]]:
    """The real DaisyChain server reading the generated shards from a local range server
    (``stub``, default one serving ``root``): FineWeb-Edu at ``REVISION``, or ``data`` (its
    ``base_url`` pointed at the stub)."""
    stub = UpstreamStub(root) if stub is None else stub
    if data is None:
        data = replace(DataConfig(), revision=REVISION, shards=SHARDS)
    async with upstream(stub):
        data = replace(data, base_url=stub.base_url, timeout_s=5.0, window_burst=10_000)
        async with serve_local(config(data=data), tokenizer=ByteTokenizer) as url:
            yield url, stub


@dataclass
class Peer:
    node: Node
    feed: FineWebFeed | None
    task: asyncio.Task[Outcome]
    records: list[StepRecord] = field(default_factory=list)

    @property
    def hashes(self) -> dict[int, str]:
        return {r.step: r.hash for r in self.records}


async def start(
    url: str, name: str, data_url: str | None, lead: LeadConfig | None, data_name: str = DATA
) -> Peer:
    """A peer reading the windows of ``data_name`` from ``data_url`` (None: builtin only)."""
    tokens, sha, vocab = corpus()
    mesh = Mesh(url, name=name)
    await mesh.connect()
    parsed = datanames.parse(data_name)
    assert parsed is not None, "a feed reads a dataset"
    feed = (
        FineWebFeed(data_url, parsed.revision, data_name=data_name, depth=4) if data_url else None
    )
    records: list[StepRecord] = []
    node = Node(mesh, tokens, sha, vocab, lead=lead, timers=FAST, on_step=records.append,
                data=feed)  # fmt: skip

    async def main() -> Outcome:
        try:
            return await node.run()
        finally:
            await mesh.close()
            if feed is not None:
                await feed.close()

    return Peer(node, feed, asyncio.create_task(main()), records)


async def dataset_run(
    root: Path, data: DataConfig, steps: int, stub: UpstreamStub | None = None
) -> tuple[list[str], UpstreamStub]:
    """Two in-process peers train ``steps`` steps on ``data`` (its name in ``config.data``),
    each reading its own windows from the real server; checks that both finished, trained the
    run's text with identical hashes at every step and that every window came from ``/data``
    (never the built-in corpus). Returns the hashes of steps 1..steps and the stub."""
    async with fineweb_server(root, data, stub) as (url, used):
        lead = lead_config(steps=steps, min_peers=2, data=data.name)
        peers = [
            await start(url, "lead", url, lead, data_name=data.name),
            await start(url, "f1", url, None, data_name=data.name),
        ]
        outcomes = await asyncio.wait_for(asyncio.gather(*(p.task for p in peers)), 300)
        async with aiohttp.ClientSession() as session, session.get(f"{url}/api/status") as r:
            status = (await r.json())["data"]
    assert [o.reason for o in outcomes] == ["done", "done"], outcomes
    assert all(p.node.config is not None and p.node.config.data == data.name for p in peers)
    for step in range(1, steps + 1):
        assert peers[0].hashes[step] == peers[1].hashes[step], f"step {step} differs"
    assert status["name"] == data.name and status["windows_served"] >= 2 * steps, status
    assert status["served"]["builtin"] == 0, "never the built-in corpus"
    return [peers[0].hashes[s] for s in range(1, steps + 1)], used
