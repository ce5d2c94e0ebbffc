"""Deterministic addressing of FineWeb-Edu (``daisychain.fineweb``), the addressed ``/data`` form
against a local range server, and the peer's feed (``p2p.datafeed``) that fetches ahead."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from daisychain import datanames, fineweb
from daisychain.bench.rig.fineweb_stub import UpstreamStub, write_fineweb_shard
from daisychain.p2p import runconfig
from daisychain.p2p.datafeed import Address, DataUnavailable, FineWebFeed
from daisychain.p2p.versions import DATA_PROTOCOL_VERSION
from daisychain.server.app import create_app, serve_local
from daisychain.server.config import DataConfig, ServerConfig
from daisychain.tokenizer import load_default
from daisychain.wire import messages
from server_fixtures import FALLBACK_TEXT, ByteTokenizer, config

SHARDS = ("sample/10BT/000_00000.parquet", "sample/10BT/001_00000.parquet")
REVISION = "0123456789abcdef0123456789abcdef01234567"
ROW_GROUPS = 4
ROWS = 30


@pytest.fixture(scope="module")
def shard_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    for seed, shard in enumerate(SHARDS):
        write_fineweb_shard(
            root / shard, row_groups=ROW_GROUPS, rows_per_group=ROWS, chars_per_row=300, seed=seed
        )
    return root


def oracle_window(root: Path, split: fineweb.Split, seed: int, step: int, rank: int, chars: int
                  ) -> tuple[str, int, int, list[str]]:  # fmt: skip
    """The window read with pyarrow from the whole file (no range reads, no server)."""
    shard_index = fineweb.shard_of(seed, step, rank, split, len(SHARDS))
    file = pq.ParquetFile(root / SHARDS[shard_index])
    rows = [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)]
    where = fineweb.window(seed, step, rank, split, shard=shard_index, n_shards=len(SHARDS),
                           rows=rows, chars=chars)  # fmt: skip
    texts = file.read_row_group(where.row_group, columns=["text"]).column(0).to_pylist()
    return (
        SHARDS[shard_index],
        where.row_group,
        where.first_row,
        fineweb.window_texts(texts, where.first_row, chars),
    )


# -- the pure address ----------------------------------------------------------------------------


def test_an_address_is_a_pure_function_of_seed_step_rank_and_the_table() -> None:
    rows = [ROWS] * ROW_GROUPS
    args = {"shard": 0, "n_shards": 2, "rows": rows, "chars": 100}
    first = fineweb.window(7, 5, 1, "train", **args)  # type: ignore[arg-type]
    assert first == fineweb.window(7, 5, 1, "train", **args)  # type: ignore[arg-type]
    seen = {
        (fineweb.shard_of(s, t, r, "train", 2), fineweb.window(s, t, r, "train", **args))  # type: ignore[arg-type]
        for s in range(3) for t in range(0, 200, 7) for r in range(3)
    }  # fmt: skip
    assert len(seen) > 100, "seed, step and rank all move the window"


def test_a_rank_keeps_its_row_group_for_a_block_of_steps() -> None:
    rows = [ROWS] * 50
    groups = set()
    for step in range(fineweb.STEPS_PER_ROW_GROUP):
        shard = fineweb.shard_of(3, step, 2, "train", 14)
        w = fineweb.window(3, step, 2, "train", shard=shard, n_shards=14, rows=rows, chars=10)
        groups.add((shard, w.row_group))
    assert len(groups) == 1
    shard = fineweb.shard_of(3, fineweb.STEPS_PER_ROW_GROUP, 2, "train", 14)
    nxt = fineweb.window(3, fineweb.STEPS_PER_ROW_GROUP, 2, "train", shard=shard, n_shards=14,
                         rows=rows, chars=10)  # fmt: skip
    assert (shard, nxt.row_group) not in groups


def test_training_never_reads_the_held_out_row_group_and_validation_reads_only_it() -> None:
    n_shards, rows = 2, [ROWS, ROWS]  # the last shard holds two row groups: one held out
    for step in range(0, 3000, 3):
        shard = fineweb.shard_of(1, step, 0, "train", n_shards)
        w = fineweb.window(1, step, 0, "train", shard=shard, n_shards=n_shards, rows=rows, chars=9)
        assert (shard, w.row_group) != (n_shards - 1, len(rows) - 1)
        v = fineweb.window(1, step, 0, "validation", shard=n_shards - 1, n_shards=n_shards,
                           rows=rows, chars=9)  # fmt: skip
        assert fineweb.shard_of(1, step, 0, "validation", n_shards) == n_shards - 1
        assert v.row_group == len(rows) - 1


def test_a_table_that_cannot_hold_an_address_is_refused() -> None:
    with pytest.raises(fineweb.AddressError, match="no training row group"):
        fineweb.window(1, 0, 0, "train", shard=0, n_shards=1, rows=[ROWS], chars=9)
    with pytest.raises(fineweb.AddressError, match="has no rows"):
        fineweb.window(1, 0, 0, "train", shard=0, n_shards=2, rows=[0], chars=9)
    with pytest.raises(fineweb.AddressError, match="empty"):
        fineweb.shard_of(1, 0, 0, "train", 0)
    with pytest.raises(fineweb.AddressError, match="no text"):
        fineweb.window_texts(["", ""], 0, 10)
    with pytest.raises(fineweb.AddressError, match="no tokens"):
        fineweb.batch_from_ids([], 1, 4)


def test_a_window_wraps_round_its_row_group_and_has_exactly_its_characters() -> None:
    assert fineweb.window_texts(["abc", "de", "f"], 1, 9) == ["de", "f", "abc", "de", "f"]
    assert fineweb.window_texts(["abc", "de", "f"], 4, 7) == ["de", "f", "abc", "d"]
    assert sum(map(len, fineweb.window_texts(["abc", "de"], 5, 11))) == 11
    assert fineweb.join(["a", "b"]) == "a<|endoftext|>b"


def test_batches_are_rows_of_seq_len_plus_one_repeated_when_short() -> None:
    x, y = fineweb.batch_from_ids(np.arange(100), 2, 3)
    assert x.tolist() == [[0, 1, 2], [4, 5, 6]] and y.tolist() == [[1, 2, 3], [5, 6, 7]]
    x, _ = fineweb.batch_from_ids([5, 6, 7], 2, 3)
    assert x.tolist() == [[5, 6, 7], [6, 7, 5]]


@pytest.mark.parametrize("name", ["fineweb", "fineweb@" + "0" * 39, "fineweb@" + "A" * 40, "x"])
def test_unknown_data_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="unknown data source"):
        fineweb.revision_of(name)
    with pytest.raises(ValueError):
        fineweb.data_name(name)


def test_data_names() -> None:
    assert fineweb.revision_of("builtin") is None
    assert fineweb.revision_of(fineweb.data_name(REVISION)) == REVISION


# -- the config rule -----------------------------------------------------------------------------


def run_config(data: str) -> messages.Config:
    tok = load_default()
    return messages.Config(
        run="0123456789abcdef", preset="tiny",
        model=messages.ModelSpec(tok.vocab_size, 64, 2, 4, 16, 1, 4),
        optim=messages.OptimSpec(3e-3, 0, 0.1, 1.0), steps=3, seed=7, data=data,
        tokenizer_sha256=tok.sha256, resume_step=0, resume_hash=None, global_batch=4,
        shares_by="speed",
    )  # fmt: skip


def parse(data: str, sources: tuple[str, ...]) -> runconfig.RunConfig:
    tok = load_default()
    cfg = messages.parse(messages.encode(run_config(data)))  # through the wire
    assert isinstance(cfg, messages.Config)
    return runconfig.parse(cfg, tokenizer_sha256=tok.sha256, vocab_size=tok.vocab_size,
                           data_sources=sources)  # fmt: skip


def test_a_peer_that_reads_the_revision_accepts_a_fineweb_run() -> None:
    name = fineweb.data_name(REVISION)
    assert parse(name, ("builtin", name)).message.data == name


@pytest.mark.parametrize(
    "sources", [("builtin",), ("builtin", fineweb.data_name("f" * 40))], ids=["none", "other-rev"]
)
def test_a_peer_that_cannot_read_the_revision_refuses_with_a_hint(sources: tuple[str, ...]) -> None:
    with pytest.raises(runconfig.Incompatible) as info:
        parse(fineweb.data_name(REVISION), sources)
    assert info.value.rule == "data" and "cannot read FineWeb-Edu at revision 0123456789ab" in (
        info.value.message
    )
    assert "--offline" in info.value.hint


def test_a_hub_dataset_run_is_accepted_by_a_peer_that_reads_it_and_refused_by_others() -> None:
    # 181 characters: through the wire under the config message's bound of 200.
    name = datanames.hub("o" * 50 + "/" + "n" * 50, REVISION, "sample/10BT", "content")
    assert len(name) > 64
    assert parse(name, ("builtin", name)).message.data == name
    with pytest.raises(runconfig.Incompatible) as info:
        parse(name, ("builtin", fineweb.data_name(REVISION)))
    assert info.value.rule == "data"
    assert (
        f"cannot read {'o' * 50}/{'n' * 50} (sample/10BT, column content) at revision "
        "0123456789ab (it reads: builtin, fineweb@" in info.value.message
    )
    assert "--dataset" in info.value.hint


def test_an_unknown_data_name_is_refused_by_the_rule() -> None:
    with pytest.raises(runconfig.Incompatible) as info:
        parse("fineweb", ("builtin",))
    assert info.value.rule == "data" and "not one this version knows" in info.value.message


# -- the addressed /data form --------------------------------------------------------------------


@asynccontextmanager
async def stack(
    root: Path, **data_changes: Any
) -> AsyncIterator[tuple[UpstreamStub, TestClient[Any, Any]]]:
    stub = UpstreamStub(root)
    async with TestServer(stub.app()) as upstream:
        stub.base_url = str(upstream.make_url("/")).rstrip("/")
        data = replace(
            DataConfig(), base_url=stub.base_url, revision=REVISION,
            shards=data_changes.pop("shards", SHARDS), timeout_s=2.0, footer_probe_bytes=1024,
            burst=1000, **data_changes,
        )  # fmt: skip
        app = create_app(config(data=data), fallback_text=lambda: FALLBACK_TEXT,
                         tokenizer=ByteTokenizer)  # fmt: skip
        async with TestClient(TestServer(app)) as client:
            yield stub, client


def query(split: str = "train", seed: int = 7, step: int = 0, rank: int = 0, chars: int = 500,
          revision: str = REVISION) -> str:  # fmt: skip
    return f"/data?split={split}&revision={revision}&seed={seed}&step={step}&rank={rank}" \
        f"&max_chars={chars}"  # fmt: skip


async def window(client: TestClient[Any, Any], **kw: Any) -> dict[str, Any]:
    response = await client.get(query(**kw))
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


@pytest.mark.parametrize("split", ["train", "validation"])
async def test_the_addressed_window_is_the_one_pyarrow_reads_from_the_file(
    shard_root: Path, split: fineweb.Split
) -> None:
    async with stack(shard_root) as (_stub, client):
        for step, rank in [(0, 0), (1, 0), (0, 1), (40, 3), (1000, 2)]:
            body = await window(client, split=split, step=step, rank=rank, chars=700)
            shard, row_group, first_row, texts = oracle_window(
                shard_root, split, 7, step, rank, 700
            )
            assert (body["shard"], body["row_group"], body["first_row"]) == (
                shard, row_group, first_row)  # fmt: skip
            assert body["texts"] == texts and body["chars"] == 700
            assert body["source"] == "fineweb" and body["revision"] == REVISION
            assert (body["split"], body["step"], body["rank"], body["seed"]) == (
                split, step, rank, 7)  # fmt: skip
            if split == "validation":
                assert (shard, row_group) == (SHARDS[-1], ROW_GROUPS - 1)


async def test_warm_windows_cost_one_range_get_per_new_row_group_and_none_when_kept(
    shard_root: Path,
) -> None:
    async with stack(shard_root) as (stub, client):
        await window(client, step=0)
        assert stub.range_gets() == 3, stub.log  # footer probe, rest of the footer, row group
        for step in range(1, fineweb.STEPS_PER_ROW_GROUP):  # the same row group: kept
            await window(client, step=step)
        assert stub.range_gets() == 3
        shard, row_group = oracle_window(shard_root, "train", 7, 0, 0, 500)[:2]
        read, footers = {(shard, row_group)}, {shard}
        counts = []
        for rank in range(1, 16):
            shard, row_group = oracle_window(shard_root, "train", 7, 0, rank, 500)[:2]
            before = stub.range_gets()
            body = await window(client, rank=rank)
            assert (body["shard"], body["row_group"]) == (shard, row_group)
            expected = 0 if (shard, row_group) in read else 1 if shard in footers else 3
            assert stub.range_gets() - before == expected, (rank, stub.log[before:])
            counts.append(expected)
            read.add((shard, row_group))
            footers.add(shard)
        assert 0 in counts and 1 in counts, "both a kept and a warm row group were seen"


async def test_a_window_is_the_same_from_a_fresh_server(shard_root: Path) -> None:
    async with stack(shard_root) as (_stub, client):
        first = await window(client, step=77, rank=5)
    async with stack(shard_root) as (_stub, client):
        assert await window(client, step=77, rank=5) == first


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/data?split=train", "needs revision, seed, step, rank, max_chars"),
        ("/data?split=test&revision=x&seed=1&step=1&rank=1&max_chars=1", "split must be one of"),
        (query() + "&format=tokens", "answers text only"),
        (query(rank=4096), "rank must be between 0 and 4095"),
        (query(seed=2**32), "seed must be between"),
        (query(chars=0), "max_chars must be between"),
        (query() + "&step=2", "step is given 2 times"),
        (query().replace("step=0", "step=-1"), "step must be a whole number"),
    ],
)
async def test_bad_addressed_requests_get_400_with_a_hint(
    shard_root: Path, path: str, error: str
) -> None:
    async with stack(shard_root) as (stub, client):
        response = await client.get(path)
        body = await response.json()
        assert response.status == 400 and error in body["error"] and body["hint"], body
        assert stub.log == [], "a refused request reads nothing"


async def test_addressed_requests_have_their_own_budget_per_network(shard_root: Path) -> None:
    async with stack(shard_root, window_burst=3, window_requests_per_s=0.01) as (_stub, client):
        for step in range(3):
            assert (await client.get(query(step=step))).status == 200
        refused = await client.get(query(step=3))
        assert refused.status == 429 and int(refused.headers["Retry-After"]) >= 1
        assert "retry in" in (await refused.json())["hint"]
        random_form = await client.get("/data?max_chars=10")  # the other budget is untouched
        assert random_form.status == 200


async def test_another_revision_is_a_409_and_reads_nothing(shard_root: Path) -> None:
    async with stack(shard_root) as (stub, client):
        response = await client.get(query(revision="f" * 40))
        body = await response.json()
        assert response.status == 409 and "reads FineWeb-Edu revision 0123" in body["error"]
        assert "--data-revision" in body["hint"] and stub.log == []


async def test_an_offline_server_refuses_windows_and_never_serves_the_builtin_corpus() -> None:
    data = replace(DataConfig(), offline=True, revision=REVISION)
    app = create_app(config(data=data), fallback_text=lambda: FALLBACK_TEXT,
                     tokenizer=ByteTokenizer)  # fmt: skip
    async with TestClient(TestServer(app)) as client:
        response = await client.get(query())
        body = await response.json()
        assert response.status == 503 and "--offline" in body["error"] and body["hint"]
        random_form = await client.get("/data?max_chars=10")  # today's form: unchanged
        assert (await random_form.json())["source"] == "builtin"


# -- the peer's feed -----------------------------------------------------------------------------


def expected_batch(root: Path, a: Address) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    chars = fineweb.window_chars(a.batch, a.seq_len)
    texts = oracle_window(root, a.split, a.seed, a.step, a.rank, chars)[3]
    ids = load_default().encode(fineweb.join(texts))  # the reference encoder as the oracle
    return fineweb.batch_from_ids(ids, a.batch, a.seq_len)


@asynccontextmanager
async def data_server(root: Path, **changes: Any) -> AsyncIterator[tuple[UpstreamStub, str]]:
    stub = UpstreamStub(root)
    runner = web.AppRunner(stub.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stub.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    data = replace(DataConfig(), base_url=stub.base_url, revision=REVISION, shards=SHARDS,
                   timeout_s=2.0, burst=1000, **changes)  # fmt: skip
    try:
        async with serve_local(ServerConfig(data=data), tokenizer=ByteTokenizer) as url:
            yield stub, url
    finally:
        await runner.cleanup()


async def wait_until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_the_feed_gives_the_addressed_batch_and_has_the_next_ones_ready(
    shard_root: Path,
) -> None:
    async with data_server(shard_root) as (_stub, url):
        feed = FineWebFeed(url, REVISION, depth=3)
        try:
            a = Address(seed=7, step=0, rank=1, batch=2, seq_len=16)
            x, y = await feed.batch(a)
            ex, ey = expected_batch(shard_root, a)
            assert x.tolist() == ex.tolist() and y.tolist() == ey.tolist()
            assert feed.stats.waited == 1  # the first batch of a run has nothing ahead of it
            await wait_until(lambda: all(t.done() for t in feed._pending.values()), "prefetch")
            assert sorted(p.step for p in feed._pending) == [1, 2, 3]
            for step in (1, 2, 3):
                nxt = replace(a, step=step)
                x, _ = await feed.batch(nxt)
                assert x.tolist() == expected_batch(shard_root, nxt)[0].tolist()
                await wait_until(lambda: all(t.done() for t in feed._pending.values()), "ahead")
            assert feed.stats.ready == 3 and feed.stats.waited_steps == [0]
            # The shares moved this peer to lane 0: lane 1's guesses stay until the run passes
            # them (a share may span lanes, asked one after the other for the same step).
            other = replace(a, step=4, rank=0)
            await feed.batch(other)
            assert sorted((p.rank, p.step) for p in feed._pending) == [
                (0, 5), (0, 6), (0, 7), (1, 4), (1, 5), (1, 6)]  # fmt: skip
            await feed.batch(replace(a, step=7, rank=0))
            assert {p.rank for p in feed._pending} == {0}, "passed guesses are dropped"
        finally:
            await feed.close()


async def test_the_feed_says_why_when_the_server_cannot_be_reached() -> None:
    feed = FineWebFeed("http://127.0.0.1:9", REVISION, patience_s=0)
    try:
        with pytest.raises(DataUnavailable) as info:
            await feed.batch(Address(7, 0, 0, 1, 8))
    finally:
        await feed.close()
    assert "cannot read training data from http://127.0.0.1:9/data" in info.value.message
    assert "reachable" in info.value.hint


async def test_the_feed_relays_the_servers_refusal_with_its_hint(shard_root: Path) -> None:
    async with data_server(shard_root) as (stub, url):
        stub.mode = "error"
        feed = FineWebFeed(url, REVISION, patience_s=0)
        try:
            with pytest.raises(DataUnavailable) as info:
                await feed.batch(Address(7, 0, 0, 1, 8))
        finally:
            await feed.close()
    assert "the FineWeb-Edu upstream failed: HTTP 500" in info.value.message
    assert "/api/status" in info.value.hint


async def test_the_feed_waits_out_a_short_backoff_and_then_reads(shard_root: Path) -> None:
    async with data_server(shard_root, retry_initial_s=1.0) as (stub, url):
        stub.mode = "error"
        feed = FineWebFeed(url, REVISION, patience_s=30)
        try:
            task = asyncio.create_task(feed.batch(Address(7, 0, 0, 1, 8)))
            await wait_until(lambda: len(stub.log) > 0, "the first upstream read")
            stub.mode = "ok"  # recovers while the feed waits for Retry-After
            x, _ = await task
            assert x.tolist() == expected_batch(shard_root, Address(7, 0, 0, 1, 8))[0].tolist()
        finally:
            await feed.close()


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"source": "builtin", "texts": ["x"]}, "something other than the window"),
        ("not json", "something other than the window"),
        ("short", "characters, not"),
    ],
)
async def test_the_feed_refuses_a_window_that_is_not_the_one_it_asked_for(
    body: Any, error: str
) -> None:
    async def handler(request: web.Request) -> web.Response:
        if body == "not json":
            return web.Response(text="<html>")
        if body == "short":
            q = request.query
            return web.json_response({
                "source": "fineweb", "revision": REVISION, "split": q["split"],
                "seed": int(q["seed"]), "step": int(q["step"]), "rank": int(q["rank"]),
                "chars": int(q["max_chars"]), "texts": ["abc"],
            })  # fmt: skip
        return web.json_response(body)

    app = web.Application()
    app.router.add_get("/data", handler)
    async with TestServer(app) as server:
        feed = FineWebFeed(str(server.make_url("/")), REVISION, patience_s=0)
        try:
            with pytest.raises(DataUnavailable, match=error):
                await feed.batch(Address(7, 0, 0, 1, 8))
        finally:
            await feed.close()


# -- the rule in the protocol machine (Settings.data_sources) -------------------------------------


@pytest.mark.parametrize("readable", [True, False], ids=["reads-it", "cannot"])
def test_the_machine_refuses_a_fineweb_run_its_peer_cannot_read(readable: bool) -> None:
    from daisychain.p2p.machine import Machine, Settings
    from daisychain.p2p.machine import effects as fx
    from daisychain.p2p.machine import events as ev
    from protocol_traces import script
    from protocol_traces.trace_replica import TraceReplica

    data = fineweb.data_name(REVISION)
    sources = ("builtin", data) if readable else ("builtin",)
    machine = Machine(
        Settings(id="B" * 12, name="b", tokenizer_sha256=script.TOKENIZER,
                 vocab_size=script.VOCAB, backend="numpy", reference_probe=script.REFERENCE_PROBE,
                 data_sources=sources),
        TraceReplica(),
    )  # fmt: skip
    leader = "A" * 12
    machine.handle(ev.ChannelOpened(0.0, leader))
    machine.handle(
        ev.MessageReceived(0.1, leader, messages.encode(messages.Hello(DATA_PROTOCOL_VERSION, "a")))
    )
    cfg = replace(script.config(), data=data)
    effects = machine.handle(ev.MessageReceived(0.2, leader, messages.encode(cfg)))
    errors = [e.message for e in effects if isinstance(e, fx.SendMessage)
              and isinstance(e.message, messages.Error)]  # fmt: skip
    if readable:
        assert errors == [] and machine.config == cfg
    else:
        assert len(errors) == 1 and errors[0].code == "incompatible", effects
        assert "cannot read FineWeb-Edu" in errors[0].message and "--offline" in errors[0].hint
        assert any(isinstance(e, fx.Close) and e.peer == leader for e in effects)
        assert machine.config is None, "the peer stays in the lobby"


async def test_the_feed_loads_its_tokenizer_once_for_concurrent_fetches(
    shard_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daisychain.p2p import datafeed

    loads: list[int] = []
    real = datafeed.default_encoder

    def counting() -> datafeed.Encoder:
        loads.append(1)
        return real()

    monkeypatch.setattr(datafeed, "default_encoder", counting)
    async with data_server(shard_root) as (_stub, url):
        feed = FineWebFeed(url, REVISION, depth=4)
        try:
            await feed.batch(Address(7, 0, 0, 1, 8))
            await wait_until(lambda: all(t.done() for t in feed._pending.values()), "prefetch")
            assert feed.stats.fetched == 5 and loads == [1]
        finally:
            await feed.close()


async def test_a_revision_whose_table_holds_no_training_row_group_is_a_503(tmp_path: Path) -> None:
    write_fineweb_shard(tmp_path / SHARDS[0], row_groups=1, rows_per_group=5, chars_per_row=50,
                        seed=0)  # fmt: skip
    async with stack(tmp_path, shards=SHARDS[:1]) as (_stub, client):
        response = await client.get(query())
        body = await response.json()
        assert response.status == 503 and "cannot hold this address" in body["error"], body
        assert "lead with another --data" in body["hint"]
        validation = await client.get(query(split="validation"))  # the held-out one is there
        assert validation.status == 200
