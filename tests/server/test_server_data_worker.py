"""``/data``'s worker process (``dataworker``): its bodies are the ones the server's own process
would build, a worker that dies is a 503 with a hint and the next request is served, and
closing the server leaves no worker behind (behaviour only: no timing is checked)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from aiohttp.test_utils import TestServer

from daisychain import fineweb
from daisychain.bench.rig.fineweb_stub import UpstreamStub, write_fineweb_shard
from daisychain.server.app import DATA
from daisychain.server.config import DataConfig
from daisychain.server.datasource import DataService
from daisychain.server.dataworker import (
    Chunk,
    RandomPick,
    WindowPick,
    build,
    json_body,
)
from daisychain.server.workpool import WorkerDied
from server_fixtures import FALLBACK_TEXT, config, serve

SHARDS = ("sample/10BT/000_00000.parquet", "sample/10BT/001_00000.parquet")
REVISION = "89abcdef0123456789abcdef0123456789abcdef"
ROW_GROUPS = 3
ROWS = 40


@pytest.fixture(scope="module")
def shard_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    for seed, shard in enumerate(SHARDS):
        write_fineweb_shard(
            root / shard, row_groups=ROW_GROUPS, rows_per_group=ROWS, chars_per_row=300, seed=seed
        )
    return root


@asynccontextmanager
async def upstream(root: Path) -> AsyncIterator[UpstreamStub]:
    stub = UpstreamStub(root)
    async with TestServer(stub.app()) as server:
        stub.base_url = str(server.make_url("/")).rstrip("/")
        yield stub


def online(stub: UpstreamStub) -> Any:
    return config(
        data=replace(
            DataConfig(),
            base_url=stub.base_url,
            revision=REVISION,
            shards=SHARDS,
            burst=1000,
            window_burst=1000,
        )
    )


def texts_of(root: Path, shard: str, row_group: int) -> list[str]:
    """The row group's texts as pyarrow reads the whole file: the in-process reference."""
    table = pq.ParquetFile(root / shard).read_row_group(row_group, columns=["text"])
    return [text for text in table.column(0).to_pylist() if isinstance(text, str)]


def addressed(step: int, rank: int, chars: int) -> str:
    return f"/data?split=train&revision={REVISION}&seed=3&step={step}&rank={rank}&max_chars={chars}"


async def kill_worker(service: DataService) -> None:
    pid = await service.worker.run(os.getpid)
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)


async def test_random_bodies_are_the_bytes_the_server_process_would_build(
    shard_root: Path,
) -> None:
    """For several seeds, the body the worker built is byte for byte ``json_body`` of the
    slice picked, by the documented rule, from the row group as pyarrow reads the file here."""
    async with upstream(shard_root) as stub, serve(online(stub)) as client:
        for seed in range(6):
            response = await client.get(f"/data?seed={seed}&max_chars=2500")
            assert response.status == 200, await response.text()
            got = await response.read()
            rng = random.Random(seed)
            shard = SHARDS[rng.randrange(len(SHARDS))]
            row_group = rng.randrange(ROW_GROUPS)
            texts = texts_of(shard_root, shard, row_group)
            first = rng.randrange(len(texts))
            picked, budget = [], 2500
            for i in range(len(texts)):
                if budget <= 0:
                    break
                picked.append(texts[(first + i) % len(texts)][:budget])
                budget -= len(picked[-1])
            expected = {
                "source": "fineweb", "shard": shard, "row_group": row_group, "first_row": first,
                "offset": None, "texts": picked, "chars": 2500,
            }  # fmt: skip
            assert got == json_body(expected), seed
            assert response.headers["X-DaisyChain-Shard"] == shard


async def test_window_bodies_match_in_process_and_a_cached_row_group_costs_no_read(
    shard_root: Path,
) -> None:
    """The addressed window from the worker is ``json_body`` of ``fineweb.window_texts`` on
    the row group read here; the next step of the same rank is answered from the worker's
    decoded row group without an upstream read."""
    async with upstream(shard_root) as stub, serve(online(stub)) as client:
        first = await client.get(addressed(0, 1, 700))
        assert first.status == 200, await first.text()
        reads = len(stub.log)
        second = await client.get(addressed(1, 1, 700))
        assert second.status == 200, await second.text()
        assert len(stub.log) == reads, "a cached row group is not read again"
        for step, response in ((0, first), (1, second)):
            shard_index = fineweb.shard_of(3, step, 1, "train", len(SHARDS))
            where = fineweb.window(
                3, step, 1, "train", shard=shard_index, n_shards=len(SHARDS),
                rows=[ROWS] * ROW_GROUPS, chars=700,
            )  # fmt: skip
            texts = texts_of(shard_root, SHARDS[shard_index], where.row_group)
            picked = fineweb.window_texts(texts, where.first_row, 700)
            expected = {
                "source": "fineweb", "shard": SHARDS[shard_index], "row_group": where.row_group,
                "first_row": where.first_row % len(texts), "offset": None, "revision": REVISION,
                "split": "train", "seed": 3, "step": step, "rank": 1, "texts": picked,
                "chars": 700,
            }  # fmt: skip
            assert await response.read() == json_body(expected), step


def test_build_asks_for_what_the_worker_lacks(shard_root: Path) -> None:
    """In this process (as in a fresh worker): a chunk without its footer, or a cached row
    group that is not cached, is answered None (the server then sends them); with them, the
    row group is decoded, and kept when asked to."""
    shard = SHARDS[1]
    path = shard_root / shard
    file = pq.ParquetFile(path)
    size = path.stat().st_size
    data = path.read_bytes()
    column = file.metadata.row_group(2).column(0)
    start = column.dictionary_page_offset or column.data_page_offset
    chunk = Chunk(
        f"test-{shard}", 2, size, start, data[start : start + column.total_compressed_size]
    )
    footer_len = int.from_bytes(data[-8:-4], "little")
    footer = data[-(footer_len + 8) :]
    pick = WindowPick(first_row=5, chars=100)
    assert build(chunk, pick, {}) is None, "no footer parsed yet"
    cached = replace(chunk, data=None, cache=True)
    assert build(cached, pick, {}) is None, "nothing cached yet"
    built = build(replace(chunk, footer=footer, cache=True), pick, {})
    assert built is not None
    texts = texts_of(shard_root, shard, 2)
    assert json.loads(built.data) == {
        "first_row": 5, "texts": fineweb.window_texts(texts, 5, 100), "chars": 100
    }  # fmt: skip
    again = build(cached, pick, {})
    assert again is not None and again.data == built.data
    joined = build(chunk, RandomPick(random.Random(1), 50), {}, join="|")
    assert joined is not None and isinstance(joined.data, str) and len(joined.data) == 50


async def test_a_killed_worker_is_a_503_with_a_hint_and_the_next_request_is_served() -> None:
    """The worker process is killed: the request that needed it is a 503 with Retry-After and
    a hint; the server keeps serving; the next request starts a new worker and is served."""
    async with serve() as client:
        service = client.app[DATA]
        assert (await client.get("/data?max_chars=40&seed=1")).status == 200
        await kill_worker(service)
        refused = await client.get("/data?max_chars=40&seed=2")
        body = await refused.json()
        assert refused.status == 503, body
        assert refused.headers["Retry-After"] == "1"
        assert refused.headers["Cache-Control"] == "no-store"
        assert body["error"] == "the /data worker process stopped while it built this response"
        assert body["hint"] == "retry in 1 s: the next request starts a new worker"
        assert (await client.get("/healthz")).status == 200
        served = await client.get("/data?max_chars=40&seed=2")
        assert served.status == 200 and (await served.json())["chars"] == 40
        status = (await (await client.get("/api/status")).json())["data"]
        assert status["worker"] == {"processes": 1, "started": 2, "died": 1}, status
        assert status["requests"]["in_slots"] == 0


async def test_after_a_worker_died_a_cached_window_is_read_again_and_the_same(
    shard_root: Path,
) -> None:
    """The new worker holds no decoded row groups: the window the old one had cached is read
    from the upstream again (once) and is the same body; the upstream is not blamed."""
    async with upstream(shard_root) as stub, serve(online(stub)) as client:
        service = client.app[DATA]
        before = await client.get(addressed(0, 2, 500))
        assert before.status == 200, await before.text()
        await kill_worker(service)
        assert (await client.get(addressed(0, 2, 500))).status == 503
        reads = len(stub.log)
        after = await client.get(addressed(0, 2, 500))
        assert after.status == 200, await after.text()
        assert await after.read() == await before.read()
        assert len(stub.log) == reads + 1, stub.log[reads:]
        status = (await (await client.get("/api/status")).json())["data"]
        assert status["state"] == "ok" and status["last_error"] is None, status


async def test_closing_the_service_stops_its_worker_process() -> None:
    service = DataService(
        replace(DataConfig(), offline=True), None, fallback_text=lambda: FALLBACK_TEXT
    )
    pid = await service.worker.run(os.getpid)
    os.kill(pid, 0)  # running
    service.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # exited and reaped: nothing outlives the service
    with pytest.raises(WorkerDied):
        await service.worker.run(os.getpid)  # a late job starts no new worker
    assert service.worker.status()["started"] == 1
    await asyncio.sleep(0)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_worker_exits_when_its_server_is_killed() -> None:
    """A server killed outright cannot close its pool: its worker notices and exits instead of
    waiting for a job forever."""
    import subprocess
    import sys
    import time

    script = (
        "import asyncio, os, time\n"
        "from daisychain.server.dataworker import DataWorker\n"
        "async def main():\n"
        "    print(await DataWorker(1, 10).run(os.getpid), flush=True)\n"
        "    time.sleep(60)\n"
        "asyncio.run(main())\n"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # its resource tracker reports the semaphores of the kill
        text=True,
    )
    try:
        assert server.stdout is not None
        worker = int(server.stdout.readline())
    finally:
        server.kill()
        server.wait()
        if server.stdout is not None:
            server.stdout.close()

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 30  # a bound on the wait, not a measured time
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(worker), "the worker outlived its server"
