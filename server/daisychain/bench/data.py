"""``daisychain bench data``: ``/data``'s parquet readers against a local HTTP range server.

Generates parquet shards with the FineWeb-Edu schema and row groups of realistic size, serves them
under the Hugging Face resolve URL shape from an aiohttp app (``web.FileResponse`` answers Range
with 206, like the CDN; it answers the Hub API questions ``huggingface_hub`` asks too), and
times row-group reads by both readers side by side (``readers``: ``http``, DaisyChain's own
aiohttp range reader; ``hub``, ``huggingface_hub``'s file system, ``--data-reader hub``), read
for read in turn: cold (a fresh reader: footer fetch + row group) and warm (footers cached: one
range GET per row group). Reports row groups per second, CPU milliseconds per row group (the
process, every thread), range GETs per row group, the warm/cold ratio, and hub/http ratios.

Then ``/healthz`` latency while ``--flood`` (20) parallel ``format=tokens&max_tokens=131072``
requests run against the real server (``serve_local``, offline: the built-in corpus), once with
the shipped pure-Python encoder (``before``: it holds the interpreter lock while it encodes)
and once with the serving tokenizer (``after``: the ``tokenizers`` library, lock released), and
the after/before ratios of ``/healthz`` p99 and worst latency and of the flood's duration.

Then the data a FineWeb-Edu run needs against what it consumes (``delivery``): the real server
(production limits) reading the same shards, one peer's feed (``p2p.datafeed``) fetching and
tokenizing the addressed windows of the ``small`` preset back to back (data tokens/s delivered
per peer), the ``small`` preset training on numpy on those batches (training tokens/s consumed),
their ratio, and the fraction of steps that waited for their batch while the feed prefetched
``--prefetch`` steps ahead (the first step of a run has nothing ahead of it and is reported
apart). The window budget per network caps what one peer may ask for: its tokens/s are reported
with their ratio to consumption too.

The stand-in upstream (``write_fineweb_shard``, ``UpstreamStub``) lives in
``daisychain.bench.rig.fineweb_stub``, which the tests use too.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

from daisychain.bench.rig.fineweb_stub import UpstreamStub, write_fineweb_shard

# ---------------------------------------------------------------------------------------------
# The benchmark


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", type=int, default=2, help="generated shards")
    parser.add_argument("--row-groups", type=int, default=8, help="row groups per shard")
    parser.add_argument(
        "--rows", type=int, default=1000, help="rows per row group (FineWeb: ~1000)"
    )
    parser.add_argument("--chars", type=int, default=3000, help="mean characters per row")
    parser.add_argument("--reads", type=int, default=32, help="warm row-group reads to time")
    parser.add_argument("--workdir", type=Path, default=None, help="where to write shards")
    parser.add_argument(
        "--flood", type=int, default=20,
        help="parallel max-token /data requests while /healthz is timed (0 skips this part)",
    )  # fmt: skip
    parser.add_argument("--flood-tokens", type=int, default=131_072, help="max_tokens of each")
    parser.add_argument(
        "--windows", type=int, default=64,
        help="small-preset windows one peer fetches back to back (0 skips the delivery part)",
    )  # fmt: skip
    parser.add_argument("--train-steps", type=int, default=12, help="small steps on numpy")
    parser.add_argument("--prefetch", type=int, default=4, help="steps the feed fetches ahead")
    parser.add_argument(
        "--burst", type=int, default=50,
        help="concurrent /data requests, each from its own address 127.0.0.2.., while /healthz "
        "is timed (0 skips this part)",
    )  # fmt: skip
    parser.add_argument(
        "--burst-chars", type=int, default=1_000_000, help="max_chars of each burst request"
    )
    parser.add_argument("--idle-probes", type=int, default=200, help="idle /healthz probes")


READERS: tuple[Literal["http", "hub"], ...] = ("http", "hub")


async def _measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Cold and warm row-group reads by each reader (``READERS``: DaisyChain's own aiohttp
    range reader and ``huggingface_hub``'s file system), read for read in turn, so both see the
    same machine; wall and CPU time (the process's, every thread) per row group."""
    import aiohttp

    from daisychain.server.config import DataConfig
    from daisychain.server.datasource import reader_for
    from daisychain.server.parquetreader import FineWebReader

    shards = tuple(f"sample/10BT/{i:03d}_00000.parquet" for i in range(args.shards))
    for i, shard in enumerate(shards):
        write_fineweb_shard(
            root / shard,
            row_groups=args.row_groups,
            rows_per_group=args.rows,
            chars_per_row=args.chars,
            seed=i,
        )
    config = replace(
        DataConfig(), shards=shards, sizes=tuple((root / s).stat().st_size for s in shards)
    )
    stub = UpstreamStub(root, commit=config.revision)  # answers the library's API questions too
    runner = web.AppRunner(stub.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    config = replace(config, base_url=f"http://127.0.0.1:{port}")
    rng = random.Random(0)
    plan = [(rng.randrange(len(shards)), rng.randrange(args.row_groups)) for _ in range(args.reads)]
    cold_plan = plan[: max(1, args.reads // 4)]
    zero = {"s": 0.0, "cpu_s": 0.0, "gets": 0, "bytes": 0}
    cold = {name: dict(zero) for name in READERS}
    warm = {name: dict(zero) for name in READERS}

    async def timed(
        reader: FineWebReader, shard: str, row_group: int, into: dict[str, Any]
    ) -> None:
        before = stub.range_gets()
        wall, cpu = time.perf_counter(), time.process_time()
        await reader.read_texts(shard, row_group)
        into["s"] += time.perf_counter() - wall
        into["cpu_s"] += time.process_time() - cpu
        into["gets"] += stub.range_gets() - before
        into["bytes"] += (await reader.index(shard)).text_chunks[row_group][1]

    try:
        async with aiohttp.ClientSession() as session:

            def fresh(name: Literal["http", "hub"]) -> FineWebReader:
                reader = reader_for(replace(config, reader=name), session, None)
                assert reader is not None
                return reader

            # Cold: a fresh reader per read, so every read pays for its shard's footer (and the
            # library reader for its first question about the repository).
            for k, (shard_index, row_group) in enumerate(cold_plan):
                for name in READERS if k % 2 == 0 else READERS[::-1]:
                    reader = fresh(name)
                    await timed(reader, shards[shard_index], row_group, cold[name])
                    reader.close()
            # Warm: one reader each with every footer cached.
            readers = {name: fresh(name) for name in READERS}
            for reader in readers.values():
                for shard in shards:
                    await reader.index(shard)
            for k, (shard_index, row_group) in enumerate(plan):
                for name in READERS if k % 2 == 0 else READERS[::-1]:
                    await timed(readers[name], shards[shard_index], row_group, warm[name])
            for reader in readers.values():
                reader.close()
    finally:
        await runner.cleanup()

    def report(name: Literal["http", "hub"]) -> dict[str, Any]:
        c, w = cold[name], warm[name]
        return {
            "cold_row_groups_per_s": round(len(cold_plan) / c["s"], 2),
            "warm_row_groups_per_s": round(len(plan) / w["s"], 2),
            "warm_vs_cold_throughput_ratio": round(
                c["s"] / len(cold_plan) / (w["s"] / len(plan)), 3
            ),
            "cold_cpu_ms_per_row_group": round(1000 * c["cpu_s"] / len(cold_plan), 2),
            "warm_cpu_ms_per_row_group": round(1000 * w["cpu_s"] / len(plan), 2),
            "cold_range_gets_per_row_group": round(c["gets"] / len(cold_plan), 3),
            "warm_range_gets_per_row_group": round(w["gets"] / len(plan), 3),
        }

    http, hub = report("http"), report("hub")
    return {
        "shards": args.shards,
        "row_groups_per_shard": args.row_groups,
        "rows_per_row_group": args.rows,
        "bytes_per_row_group": round(warm["http"]["bytes"] / len(plan)),
        # The server's reader (DataConfig.reader, --data-reader) at the top level, as before.
        **http,
        "readers": {"http": http, "hub": hub},
        "hub_vs_http_warm_throughput_ratio": round(
            hub["warm_row_groups_per_s"] / http["warm_row_groups_per_s"], 3
        ),
        "hub_vs_http_cold_throughput_ratio": round(
            hub["cold_row_groups_per_s"] / http["cold_row_groups_per_s"], 3
        ),
        "hub_vs_http_warm_cpu_ratio": round(
            hub["warm_cpu_ms_per_row_group"] / max(http["warm_cpu_ms_per_row_group"], 1e-3), 3
        ),
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _healthz_under_flood(loader: Any, flood: int, max_tokens: int) -> dict[str, Any]:
    """``/healthz`` round trips (ms) while ``flood`` max-token ``/data`` requests run."""
    import aiohttp

    from daisychain.server.app import serve_local
    from daisychain.server.config import DataConfig, ServerConfig

    data = replace(DataConfig(), offline=True, burst=flood + 10)  # the flood is not rate-limited
    async with (
        serve_local(ServerConfig(data=data), tokenizer=loader) as url,
        aiohttp.ClientSession() as session,
    ):

        async def get(path: str) -> float:
            start = time.perf_counter()
            async with session.get(url + path) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{path}: HTTP {response.status}")
            return (time.perf_counter() - start) * 1e3

        await get("/data?format=tokens&max_tokens=1024&seed=0")  # loads tokenizer and corpus
        idle = [await get("/healthz") for _ in range(50)]
        start = time.perf_counter()
        tasks = [
            asyncio.create_task(get(f"/data?format=tokens&max_tokens={max_tokens}&seed={i + 1}"))
            for i in range(flood)
        ]
        probes: list[float] = []
        while not all(task.done() for task in tasks):
            probes.append(await get("/healthz"))
            await asyncio.sleep(0.01)
        data_ms = await asyncio.gather(*tasks)
        flood_s = time.perf_counter() - start
    return {
        "healthz_idle_p50_ms": round(_percentile(idle, 0.5), 3),
        "healthz_p50_ms": round(_percentile(probes, 0.5), 3),
        "healthz_p99_ms": round(_percentile(probes, 0.99), 3),
        "healthz_max_ms": round(max(probes), 3),
        "healthz_probes": len(probes),
        "data_p50_ms": round(_percentile(list(data_ms), 0.5), 1),
        "flood_s": round(flood_s, 3),
    }


async def _flood(args: argparse.Namespace) -> dict[str, Any]:
    from daisychain.tokenizer import load_default
    from daisychain.tokenizer.fast import load_serving_tokenizer

    before = await _healthz_under_flood(load_default, args.flood, args.flood_tokens)
    after = await _healthz_under_flood(load_serving_tokenizer, args.flood, args.flood_tokens)
    return {
        "requests": args.flood,
        "max_tokens": args.flood_tokens,
        "before_pure_python": before,
        "after_tokenizers_library": after,
        "healthz_p99_after_vs_before_ratio": round(
            after["healthz_p99_ms"] / before["healthz_p99_ms"], 4
        ),
        "healthz_max_after_vs_before_ratio": round(
            after["healthz_max_ms"] / before["healthz_max_ms"], 4
        ),
        "flood_s_after_vs_before_ratio": round(after["flood_s"] / before["flood_s"], 3),
    }


async def _delivery(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """Data tokens/s one peer's feed delivers against tokens/s the small preset consumes."""
    from daisychain import fineweb, training
    from daisychain.model.config import preset
    from daisychain.optim import AdamWConfig
    from daisychain.p2p.datafeed import Address, FineWebFeed
    from daisychain.server.app import serve_local
    from daisychain.server.config import DataConfig, ServerConfig
    from daisychain.tokenizer import load_default

    shards = tuple(f"sample/10BT/{i:03d}_00000.parquet" for i in range(args.shards))
    stub = UpstreamStub(root)
    runner = web.AppRunner(stub.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    data = replace(DataConfig(), base_url=f"http://127.0.0.1:{runner.addresses[0][1]}",
                   shards=shards)  # fmt: skip
    cfg = preset("small", vocab_size=load_default().vocab_size)
    step_tokens = cfg.batch * cfg.seq_len  # what one training step consumes

    def at(step: int) -> Address:
        return Address(seed=1, step=step, rank=0, batch=cfg.batch, seq_len=cfg.seq_len)

    try:
        async with serve_local(ServerConfig(data=data)) as url:
            # Delivered: one peer, nothing else running, windows back to back (no prefetch).
            feed = FineWebFeed(url, data.revision, depth=0)
            try:
                await feed.batch(at(0))  # loads the tokenizer, reads the footer
                gets = stub.range_gets()
                start = time.perf_counter()
                for step in range(1, args.windows + 1):
                    await feed.batch(at(step))
                fetch_s = time.perf_counter() - start
                gets = stub.range_gets() - gets
            finally:
                await feed.close()
            # Consumed, and waiting: train on the windows while the feed prefetches ahead.
            state = training.init(cfg, AdamWConfig(), seed=1)
            feed = FineWebFeed(url, data.revision, depth=args.prefetch)
            compute_s, waited = 0.0, []
            base = 10 * fineweb.STEPS_PER_ROW_GROUP  # a row group no earlier part read
            try:
                for i in range(args.train_steps):
                    before = feed.stats.waited
                    x, y = await feed.batch(at(base + i))
                    if feed.stats.waited > before:
                        waited.append(i)
                    t0 = time.perf_counter()
                    await asyncio.to_thread(training.train_step, state, x, y, False)
                    compute_s += time.perf_counter() - t0
            finally:
                await feed.close()
    finally:
        await runner.cleanup()
    delivered = args.windows * step_tokens / fetch_s
    consumed = args.train_steps * step_tokens / compute_s
    capped = min(delivered, data.window_requests_per_s * step_tokens)
    steady = [i for i in waited if i > 0]
    return {
        "preset": "small",
        "tokens_per_step": step_tokens,
        "window_chars": fineweb.window_chars(cfg.batch, cfg.seq_len),
        "windows_fetched": args.windows,
        "range_gets_while_fetching": gets,
        "data_tokens_per_s_delivered_per_peer": round(delivered),
        "window_ms": round(fetch_s / args.windows * 1e3, 2),
        "training_tokens_per_s_consumed": round(consumed, 1),
        "train_step_s": round(compute_s / args.train_steps, 3),
        "delivered_vs_consumed_ratio": round(delivered / consumed, 2),
        "window_budget_tokens_per_s": round(data.window_requests_per_s * step_tokens),
        "budget_capped_vs_consumed_ratio": round(capped / consumed, 2),
        "prefetch_steps": args.prefetch,
        "train_steps": args.train_steps,
        "first_step_waited": 0 in waited,
        "steady_state_steps_waited": len(steady),
        "steady_state_wait_fraction": round(len(steady) / max(1, args.train_steps - 1), 3),
    }


# ---------------------------------------------------------------------------------------------
# /healthz under a burst of ~1 MB /data requests from many addresses. The upstream stub and the
# burst's clients run in processes of their own (as the CDN and the clients do in production),
# so what slows /healthz is the server's work, not theirs; the probe shares the server's loop.
# The server's work includes its data worker process (server/dataworker.py), which decodes the
# row groups and builds the bodies; the report says how many it started and whether one died.


def _serve_stub_main() -> None:
    """Subprocess: serve ``sys.argv[1]`` like the resolve endpoint; print the port; run until
    stdin closes."""
    import sys

    async def run() -> None:
        runner = web.AppRunner(UpstreamStub(Path(sys.argv[1])).app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    asyncio.run(run())


def _burst_clients_main() -> None:
    """Subprocess: ``sys.argv[1:]`` = url, clients, max_chars. One session per client, bound to
    127.0.0.{2 + i}; prints ``ready``, waits for a line on stdin, sends every request at once
    and prints one JSON line: per request its status, milliseconds, body bytes and
    Retry-After."""
    import json
    import sys

    import aiohttp

    url, clients, chars = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

    async def one(session: aiohttp.ClientSession, i: int) -> dict[str, Any]:
        start = time.perf_counter()
        async with session.get(f"{url}/data?max_chars={chars}&seed={i + 1}") as response:
            body = await response.read()
        return {
            "status": response.status,
            "ms": (time.perf_counter() - start) * 1e3,
            "bytes": len(body),
            "retry_after": response.headers.get("Retry-After"),
        }

    async def run() -> None:
        sessions = [
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(local_addr=(f"127.0.0.{2 + i}", 0)),
                timeout=aiohttp.ClientTimeout(total=120),
            )
            for i in range(clients)
        ]
        try:
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            results = await asyncio.gather(*(one(s, i) for i, s in enumerate(sessions)))
            print(json.dumps(results), flush=True)
        finally:
            await asyncio.gather(*(s.close() for s in sessions))

    asyncio.run(run())


async def _child(main: str, *argv: str) -> asyncio.subprocess.Process:
    import sys

    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", f"from daisychain.bench.data import {main}; {main}()", *argv,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _healthz_under_burst(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """``/healthz`` round trips (ms), idle and while ``--burst`` clients, each from its own
    address, ask ``/data`` for ``--burst-chars`` characters at once (the real server with
    production limits, reading the generated shards from the stub upstream)."""
    import json

    import aiohttp

    from daisychain.server.app import serve_local
    from daisychain.server.config import DataConfig, ServerConfig

    assert 1 <= args.burst <= 250, "client addresses are 127.0.0.2 .. 127.0.0.251"
    shards = tuple(f"sample/10BT/{i:03d}_00000.parquet" for i in range(args.shards))
    stub = await _child("_serve_stub_main", str(root))
    clients: asyncio.subprocess.Process | None = None
    try:
        assert stub.stdout is not None and stub.stdin is not None
        port = int(await stub.stdout.readline())
        data = replace(DataConfig(), base_url=f"http://127.0.0.1:{port}", shards=shards)
        async with (
            serve_local(ServerConfig(data=data)) as url,
            aiohttp.ClientSession() as session,
        ):

            async def healthz() -> float:
                start = time.perf_counter()
                async with session.get(url + "/healthz") as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"/healthz: HTTP {response.status}")
                return (time.perf_counter() - start) * 1e3

            # Warm: every shard's footer read (the seeds pick shards at random), as on a server
            # that has been running a while.
            for seed in range(4 * args.shards):
                async with session.get(f"{url}/data?max_chars=1&seed={seed}") as response:
                    await response.read()
            idle = []
            for _ in range(args.idle_probes):
                idle.append(await healthz())
                await asyncio.sleep(0.01)
            clients = await _child(
                "_burst_clients_main", url, str(args.burst), str(args.burst_chars)
            )
            assert clients.stdout is not None and clients.stdin is not None
            assert (await clients.stdout.readline()).strip() == b"ready"
            start = time.perf_counter()
            clients.stdin.write(b"go\n")
            await clients.stdin.drain()
            done = asyncio.create_task(clients.stdout.readline())
            probes: list[float] = []
            while not done.done():
                probes.append(await healthz())
                await asyncio.sleep(0.01)
            burst_s = time.perf_counter() - start
            results = json.loads(await done)
            status = await (await session.get(url + "/api/status")).json()
    finally:
        for child in (clients, stub):
            if child is not None and child.returncode is None:
                assert child.stdin is not None
                child.stdin.close()
                try:
                    await asyncio.wait_for(child.wait(), 10)
                except TimeoutError:
                    child.kill()
                    await child.wait()
    served = [r for r in results if r["status"] == 200]
    refused: dict[str, int] = {}
    for r in results:
        if r["status"] != 200:
            refused[str(r["status"])] = refused.get(str(r["status"]), 0) + 1
    idle_p99 = _percentile(idle, 0.99)
    burst_p99 = _percentile(probes, 0.99)
    return {
        "clients": args.burst,
        "addresses": f"127.0.0.2-127.0.0.{1 + args.burst}",
        "max_chars": args.burst_chars,
        "healthz_idle_probes": len(idle),
        "healthz_idle_p50_ms": round(_percentile(idle, 0.5), 3),
        "healthz_idle_p99_ms": round(idle_p99, 3),
        "healthz_burst_probes": len(probes),
        "healthz_burst_p50_ms": round(_percentile(probes, 0.5), 3),
        "healthz_burst_p99_ms": round(burst_p99, 3),
        "healthz_burst_max_ms": round(max(probes), 3),
        "healthz_burst_vs_idle_p99_ratio": round(burst_p99 / idle_p99, 3),
        "served": len(served),
        "refused": refused,
        "refused_with_retry_after": sum(
            1 for r in results if r["status"] != 200 and r["retry_after"]
        ),
        "served_mb": round(sum(r["bytes"] for r in served) / 1e6, 2),
        "data_p50_ms": round(_percentile([r["ms"] for r in results], 0.5), 1),
        "data_max_ms": round(max(r["ms"] for r in results), 1),
        "burst_s": round(burst_s, 3),
        "sources": status["data"]["served"],
        "worker": status["data"]["worker"],  # the data worker processes: started, died
    }


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    def parts(root: Path) -> dict[str, Any]:
        result = asyncio.run(_measure(args, root))
        if args.windows > 0:
            result["delivery"] = asyncio.run(_delivery(args, root))
        if args.burst > 0:
            result["healthz_under_data_burst"] = asyncio.run(_healthz_under_burst(args, root))
        return result

    if args.workdir is not None:
        result = parts(args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="daisychain-bench-data-") as tmp:
            result = parts(Path(tmp))
    if args.flood > 0:
        result["healthz_under_tokenize_flood"] = asyncio.run(_flood(args))
    return result
