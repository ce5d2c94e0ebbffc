"""A Chromium tab trains on FineWeb-Edu with a Python peer (issue 13, Must-show 1, the browser
side): the real server reads generated FineWeb-Edu-shaped parquet from a local range server
(tests/fineweb_helpers.py's ``fineweb_server``); the page learns the revision from
``/api/status``, advertises ``fineweb@REV`` and fetches its own addressed windows from ``/data``
(static/js/p2p/datafeed.js), tokenizing them with static/js/tokenizer.js. Every step's hash is the
same on the tab and the Python leader, and equal to the hashes Python computes outside the mesh
for the same config, the same server's windows and the shares the run committed
(tests/shares_replay.py; protocol v2's shares follow measured speeds, so a 2-peer all-Python run
played first, still checked against its own replay, would commit others). A page whose server is
offline refuses the same run as incompatible and stays in the lobby (it never trains on other
text).
"""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from daisychain.bench.rig.fineweb_stub import write_fineweb_shard
from daisychain.p2p.datafeed import Address, FineWebFeed
from fineweb_helpers import DATA, REVISION, SHARDS, Peer, fineweb_server, start
from mesh_helpers import (
    TEST_BATCH,
    TEST_SEQ,
    lead_config,
    needs_namespace,
    signaling_server,
    wait_for,
)
from shares_replay import replayed_hashes, shares_of
from tab_helpers import TIMERS_QUERY, chromium, finished, open_tab, wait_tabs

pytestmark = [needs_namespace, pytest.mark.timeout(600)]

STEPS = 4
WARM = """
async ({ steps, batch, seqLen }) => {
  const { app } = await import('/js/app.js');
  const { FineWebFeed } = await import('/js/p2p/datafeed.js');
  const d = app.peer.data;
  const f = new FineWebFeed({ server: d.server, revision: d.revision, tokenizer: d.tokenizer,
    depth: 0 });
  for (const rank of [0, 1]) {
    for (let step = 0; step < steps; step++) await f.batch({ seed: 7, step, rank, batch, seqLen });
  }
}
"""
FEED = (  # the page's FineWeb-Edu feed: its data name and counts
    "async () => { const { app } = await import('/js/app.js');"
    " const d = app.peer.data; return { name: d.dataName, stats: d.stats }; }"
)


async def replayed(url: str, peer: Peer) -> dict[int, str]:
    """The hashes Python computes for ``peer``'s run: its config and committed shares, each lane
    the window of (seed, step, lane) read from the server's /data (a fresh feed)."""
    config = peer.node.config
    assert config is not None
    feed = FineWebFeed(url, REVISION, depth=0)

    async def lane(state, index):  # type: ignore[no-untyped-def]
        cfg = state.cfg
        return await feed.batch(Address(state.seed, state.step, index, cfg.batch, cfg.seq_len))

    try:
        return await replayed_hashes(config, shares_of(peer.records), lane=lane,
                                     data_sources=("builtin", DATA))  # fmt: skip
    finally:
        await feed.close()


@pytest.fixture(scope="module")
def shard_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    for seed, shard in enumerate(SHARDS):
        write_fineweb_shard(
            root / shard, row_groups=4, rows_per_group=40, chars_per_row=600, seed=seed
        )
    return root


async def test_python_leader_and_cpu_tab_train_on_fineweb_like_an_all_python_run(
    shard_root: Path,
) -> None:
    async with fineweb_server(shard_root) as (url, _stub):
        # The reference: two Python peers, the same config, the same server.
        ref = [await start(url, "ref-lead", url, lead_config(STEPS, min_peers=2, data=DATA)),
               await start(url, "ref-f1", url, None)]  # fmt: skip
        outcomes = [await p.task for p in ref]
        assert [o.reason for o in outcomes] == ["done", "done"], outcomes
        assert ref[1].hashes == ref[0].hashes and sorted(ref[0].hashes) == list(range(1, STEPS + 1))
        assert ref[0].hashes == await replayed(url, ref[0])

        async with chromium(webgpu=False) as browser:
            tab = await open_tab(browser, url, "name=cpu-tab")
            lead = await start(url, "py-lead", url, lead_config(STEPS, min_peers=2, data=DATA))
            outcome = await lead.task
            assert outcome.reason == "done", outcome
            [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
            assert state["outcome"]["reason"] == "done", state
            assert state["backend"] == "js-cpu"
            assert all(len(r["roster"]) == 2 for r in state["records"])
            assert shares_of(state["records"]) == shares_of(lead.records)
            reference = await replayed(url, lead)
            assert tab.hashes(state) == lead.hashes == reference
            feed = await tab.page.evaluate(FEED)
            assert feed["name"] == DATA
            assert feed["stats"]["fetched"] >= STEPS, feed  # its own windows, from /data
            tab.check_clean()

            # The same run again after a reload: the tab reads its windows from the Cache API
            # (no /data request for any step of the run) and publishes the same hashes. Its rank
            # may differ this time (new ids), so the other rank's windows are read once first.
            await tab.page.evaluate(WARM, {"steps": STEPS, "batch": TEST_BATCH, "seqLen": TEST_SEQ})
            asked: list[int] = []
            tab.page.on(
                "request",
                lambda r: (
                    asked.append(int(parse_qs(urlsplit(r.url).query)["step"][0]))
                    if urlsplit(r.url).path == "/data"
                    else None
                ),
            )
            await tab.page.goto(f"{url}/?{TIMERS_QUERY}&name=cpu-tab")
            await wait_tabs([tab], lambda s: bool(s[0]["id"]), 120, "the reloaded tab")
            lead = await start(url, "py-lead-2", url, lead_config(STEPS, min_peers=2, data=DATA))
            assert (await lead.task).reason == "done"
            [state] = await wait_tabs([tab], finished, 60, "the reloaded tab's outcome")
            assert tab.hashes(state) == lead.hashes == await replayed(url, lead)
            feed = await tab.page.evaluate(FEED)
            assert feed["stats"]["cached"] >= STEPS, feed
            assert not [s for s in asked if s < STEPS], asked
            tab.check_clean()


async def test_a_tab_whose_server_is_offline_refuses_a_fineweb_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The wrong input: a FineWeb-Edu config reaching a page whose server reads no FineWeb-Edu
    (offline: /api/status names no revision, so the page advertises builtin only). The page
    answers `incompatible` (rule `data`) and stays in the lobby, training on nothing."""
    caplog.set_level(logging.WARNING, logger="daisychain.p2p.machine")
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=offline-tab")
        has_feed = "async () => (await import('/js/app.js')).app.peer.data !== null"
        assert await tab.page.evaluate(has_feed) is False
        # The leader reads its windows from the fineweb server's address (never asked: the run
        # never starts); what matters is that the tab's server reads none.
        lead = await start(url, "py-lead", url, lead_config(2, min_peers=2, data=DATA))
        try:
            await wait_for(
                lambda: any("incompatible" in r.getMessage() and "FineWeb-Edu" in r.getMessage()
                            for r in caplog.records),
                60,
                "the tab's refusal at the leader",
            )  # fmt: skip
            state = await tab.state()
            assert state["phase"] == "lobby" and state["records"] == [], state
            assert lead.records == []
            tab.check_clean()
        finally:
            lead.task.cancel()
            with contextlib.suppress(BaseException):
                await lead.task


async def test_a_tab_that_cannot_read_its_windows_leaves_the_run_cleanly(
    shard_root: Path,
) -> None:
    """The source goes away under a running tab (its fetches of /data are refused from step 3
    on): the tab trains on what it prefetched, then cannot read its next batch, says why and
    leaves the run instead of training on other text; every step it applied has the leader's
    hash. Equal shares: by speed, the CPU tab can be slow enough to get none, and a peer that
    computes nothing reads no windows (it follows, correctly, to the end)."""
    async with fineweb_server(shard_root) as (url, _stub), chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=cpu-tab")
        tab.allowed.append(re.compile("ERR_CONNECTION_REFUSED|Failed to fetch"))
        config = lead_config(200, min_peers=2, data=DATA, shares_by="equal")
        lead = await start(url, "py-lead", url, config)
        try:
            await wait_tabs([tab], lambda s: len(s[0]["records"]) >= 3, 120, "three steps")
            await tab.page.context.route(
                f"{url}/data?*", lambda route: route.abort("connectionrefused")
            )
            [state] = await wait_tabs([tab], finished, 120, "the tab leaving")
            assert state["outcome"]["reason"] == "left", state["outcome"]
            assert "cannot read the run's training data" in state["outcome"]["message"]
            assert any(
                f"cannot read training data from {url}/data" in e["message"]
                and "reachable" in e["hint"]
                for e in state["errors"]
            ), state["errors"]
            got = tab.hashes(state)
            assert len(got) >= 3 and all(lead.hashes[s] == h for s, h in got.items())
            assert state["outcome"]["step"] == max(got), "the tab stays at a step it applied"
            tab.check_clean()
        finally:
            lead.task.cancel()
            with contextlib.suppress(BaseException):
                await lead.task
