"""The peer's data feed (``p2p/datafeed.py``): behaviour pinned by mutants that survived the
rest of the suite (docs/TESTING.md). A stub ``/data`` serves well-formed windows of one letter."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from daisychain import fineweb
from daisychain.p2p.datafeed import Address, DataUnavailable, FineWebFeed

REVISION = "0123456789abcdef0123456789abcdef01234567"
ADDRESS = Address(seed=7, step=0, rank=0, batch=1, seq_len=8)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def window(request: web.Request) -> web.Response:
    """A well-formed window: exactly the characters asked for."""
    q = request.query
    chars = int(q["max_chars"])
    return web.json_response(
        {
            "source": "fineweb",
            "revision": q["revision"],
            "split": q["split"],
            "seed": int(q["seed"]),
            "step": int(q["step"]),
            "rank": int(q["rank"]),
            "chars": chars,
            "texts": ["a" * chars],
        }
    )


@asynccontextmanager
async def data_server(handler: Handler, hits: list[str] | None = None) -> AsyncIterator[str]:
    async def counted(request: web.Request) -> web.StreamResponse:
        if hits is not None:
            hits.append(request.query["step"])
        return await handler(request)

    app = web.Application()
    app.router.add_get("/data", counted)
    server = TestServer(app)
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def feed(server: str, **kw: object) -> FineWebFeed:
    return FineWebFeed(server, REVISION, encoder=lambda text: [ord(c) for c in text], **kw)  # type: ignore[arg-type]


def test_a_ws_server_address_is_read_over_http() -> None:
    """The peer is given the signaling URL (ws://); /data is fetched from its http twin."""
    assert feed("ws://127.0.0.1:8787/").server == "http://127.0.0.1:8787"
    assert feed("wss://example.org").server == "https://example.org"


async def test_prefetched_windows_are_kept_not_fetched_again() -> None:
    """Each step's prefetch keeps the guesses still ahead of the run: steps 0..4 with depth 2
    cost exactly 5 fetches (a mutant dropped every pending guess, for all ranks and shapes,
    and fetched them again)."""
    hits: list[str] = []
    async with data_server(window, hits) as url:
        f = feed(url, depth=2)
        try:
            for step in range(3):
                await f.batch(fineweb_address(step))
                await asyncio.gather(*f._pending.values())
        finally:
            await f.close()
    assert sorted(map(int, hits)) == [0, 1, 2, 3, 4]
    assert (f.stats.fetched, f.stats.ready, f.stats.waited) == (5, 2, 1)


def fineweb_address(step: int, lane: int = 0) -> Address:
    return Address(seed=7, step=step, rank=lane, batch=1, seq_len=8)


async def test_a_share_spanning_two_lanes_keeps_both_lanes_prefetched() -> None:
    """Protocol v2: a peer whose share spans lanes 0 and 1 asks for both every step; each
    lane's guesses survive the other's request (the version-1 rule, one rank per peer, dropped
    them and fetched every window again): steps 0..2 of two lanes, depth 2, cost 2 x 5
    fetches, the first step of each lane waited and every later one was ready."""
    hits: list[str] = []
    async with data_server(window, hits) as url:
        f = feed(url, depth=2)
        try:
            for step in range(3):
                for lane in (0, 1):
                    await f.batch(fineweb_address(step, lane))
                await asyncio.gather(*f._pending.values())
        finally:
            await f.close()
    assert sorted(map(int, hits)) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert (f.stats.fetched, f.stats.ready, f.stats.waited) == (10, 4, 2)


async def test_a_refused_window_takes_the_default_hint_when_the_servers_is_not_text() -> None:
    """``_error_of``: a hint that is not a string is replaced by the pointer to SERVER.md."""

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": "no such split", "hint": 5}, status=400)

    async with data_server(refuse) as url:
        f = feed(url)
        try:
            with pytest.raises(DataUnavailable) as info:
                await f.batch(ADDRESS)
        finally:
            await f.close()
    assert info.value.hint == "see docs/SERVER.md"
    assert "no such split" in info.value.message


async def test_a_pin_on_a_plain_http_server_is_refused_with_a_hint() -> None:
    """A fingerprint for an http server cannot be checked: DataUnavailable with serverlink's
    message and hint (mutants passed no server, or dropped the hint)."""
    f = feed("http://127.0.0.1:9", fingerprint=bytes(32))
    try:
        with pytest.raises(DataUnavailable) as info:
            await f.batch(ADDRESS)
    finally:
        await f.close()
    assert "http://127.0.0.1:9 is not https" in info.value.message
    assert "--fingerprint" in info.value.hint


async def test_a_server_that_never_answers_times_out_after_timeout_s() -> None:
    """``timeout_s`` bounds one request (a mutant dropped it, and the peer waited forever)."""
    gate = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        await gate.wait()
        return web.Response()

    async with data_server(hang) as url:
        f = feed(url, timeout_s=0.2)
        try:
            with pytest.raises(DataUnavailable) as info:
                await asyncio.wait_for(f.batch(ADDRESS), 60)
        finally:
            gate.set()
            await f.close()
    assert "timed out" in info.value.message
    assert fineweb.data_name(REVISION) == f.data_name
