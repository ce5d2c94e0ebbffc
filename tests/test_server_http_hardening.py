"""HTTP connections against a hostile client: request-head deadline, keep-alive idle timeout,
and security headers on the parser's own errors.

Every test runs the real listener (``serve_local``: ``GuardedSite`` + ``GuardedRequestHandler``)
on a loopback port and talks raw HTTP over a socket, so nothing normalises what is sent. Deadlines
are configured short (``HttpLimits``); each wait for the server's reaction is bounded by
``WAIT_S``, a test timeout rather than a timing assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from daisychain.server.app import serve_local
from daisychain.server.config import HttpLimits
from daisychain.server.httpconn import ConnectionCounts, peer_key
from daisychain.server.main import add_arguments, config_from_args
from server_fixtures import FALLBACK_TEXT, ByteTokenizer, config

WAIT_S = 10.0
SHORT_S = 0.3
SECURITY_HEADERS = (
    b"x-content-type-options: nosniff",
    b"referrer-policy: no-referrer",
    b"content-security-policy: default-src 'self'",
    b"cross-origin-opener-policy: same-origin",
    b"cross-origin-embedder-policy: require-corp",
)


@asynccontextmanager
async def listener(
    head_s: float = SHORT_S,
    keepalive_s: float = 60.0,
    per_address: int = HttpLimits.max_connections_per_address,
    trust_proxy: bool = False,
) -> AsyncIterator[int]:
    limits = HttpLimits(
        head_timeout_s=head_s, keepalive_timeout_s=keepalive_s,
        max_connections_per_address=per_address,
    )  # fmt: skip
    cfg = config(http=limits, trust_proxy=trust_proxy)
    async with serve_local(
        cfg, fallback_text=lambda: FALLBACK_TEXT, tokenizer=ByteTokenizer
    ) as url:
        yield int(url.rsplit(":", 1)[1])


async def open_raw(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_response(reader: asyncio.StreamReader) -> bytes:
    """One response with a Content-Length body (what every endpoint used here sends)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    return head + await asyncio.wait_for(reader.readexactly(length), WAIT_S)


async def closed_by_server(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sent before closing; fails if it keeps the connection past WAIT_S."""
    return await asyncio.wait_for(reader.read(), WAIT_S)


async def test_a_silent_connection_is_closed_at_the_head_deadline() -> None:
    async with listener() as port:
        reader, writer = await open_raw(port)
        assert await closed_by_server(reader) == b""
        writer.close()


async def test_slowloris_trickling_its_head_is_closed_at_the_deadline() -> None:
    # ~200 bytes at one per 20 ms: the whole head would be in well before aiohttp's own timers
    # (keep-alive 60 s here) could close it, so only the head deadline can refuse it.
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: " + b"a" * 150 + b"\r\n\r\n"
    async with listener() as port:
        reader, writer = await open_raw(port)
        sent = 0
        received = None
        for byte in head:  # one byte at a time, each a little after the last
            try:
                writer.write(bytes([byte]))
                await writer.drain()
            except ConnectionError:
                received = await closed_by_server(reader)
                break
            sent += 1
            try:
                received = await asyncio.wait_for(reader.read(100), 0.02)
            except TimeoutError:
                continue
            break
        assert received == b"", f"the server answered a trickled head: {received!r}"
        assert sent < len(head), "the whole trickled head was accepted"
        writer.close()


async def test_the_deadline_spares_a_connection_whose_head_arrived() -> None:
    # Keep-alive after a served request: the head deadline no longer applies to it.
    async with listener() as port:
        reader, writer = await open_raw(port)
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        writer.write(request)
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
        await asyncio.sleep(3 * SHORT_S)
        writer.write(request)
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
        writer.close()


async def test_an_idle_keep_alive_connection_is_closed() -> None:
    async with listener(head_s=60.0, keepalive_s=SHORT_S) as port:
        reader, writer = await open_raw(port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
        assert await closed_by_server(reader) == b""
        writer.close()


async def test_a_second_head_trickled_on_a_kept_alive_connection_is_closed() -> None:
    async with listener(head_s=60.0, keepalive_s=SHORT_S) as port:
        reader, writer = await open_raw(port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
        writer.write(b"GET /healthz HTTP/1.1\r\nHost:")  # and never the rest
        assert await closed_by_server(reader) == b""
        writer.close()


async def test_a_websocket_outlives_the_head_deadline() -> None:
    async with (
        listener() as port,
        aiohttp.ClientSession() as session,
        session.ws_connect(f"http://127.0.0.1:{port}/ws") as ws,
    ):
        await ws.send_json({"type": "hello", "version": 1, "name": "a", "device": {}})
        assert (await ws.receive_json(timeout=WAIT_S))["type"] == "welcome"
        await asyncio.sleep(3 * SHORT_S)
        await ws.send_json({"type": "ping", "nonce": 7})
        assert await ws.receive_json(timeout=WAIT_S) == {"type": "pong", "nonce": 7}


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
        b"G(T /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1_0\r\n\r\n",
    ],
    ids=["header-without-colon", "bad-method", "bad-version", "line-too-long", "odd-length"],
)
async def test_parser_errors_carry_the_security_headers(
    request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with listener() as port:
        reader, writer = await open_raw(port)
        writer.write(request_bytes)
        response = await closed_by_server(reader)
        writer.close()
    head = response.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.") and b" 400 " in head.split(b"\r\n", 1)[0], response[:200]
    for header in SECURITY_HEADERS:
        assert header in head, f"{header!r} missing from the parser's 400"
    # One line per refused request, no traceback.
    assert not [record for record in caplog.records if record.exc_info], caplog.text


def parse_serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_head_timeout_flag_sets_the_deadline() -> None:
    cfg = config_from_args(parse_serve_args("--head-timeout", "2.5", "--port", "0"))
    assert cfg.http.head_timeout_s == 2.5
    assert cfg.http.keepalive_timeout_s == HttpLimits().keepalive_timeout_s


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_head_timeout_flag_refuses_what_is_not_a_positive_time(value: str) -> None:
    with pytest.raises(SystemExit, match=r"--head-timeout .* must be a positive number"):
        config_from_args(parse_serve_args("--head-timeout", value, "--port", "0"))


async def healthz_on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    return await read_response(reader)


async def test_connections_over_the_per_address_count_get_a_429_and_are_closed() -> None:
    async with listener(head_s=60.0, per_address=3) as port:
        held = [await open_raw(port) for _ in range(3)]
        reader, writer = await open_raw(port)  # the fourth, before it sends anything
        refusal = await closed_by_server(reader)
        writer.close()
        head, body = refusal.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 429 "), refusal[:200]
        for header in SECURITY_HEADERS:
            assert header in head.lower(), f"{header!r} missing from the 429"
        assert b"retry-after: 15" in head.lower()
        assert json.loads(body)["hint"]
        # The held ones are served; closing one gives its place to a new connection.
        assert (await healthz_on(*held[0])).startswith(b"HTTP/1.1 200")
        held.pop()[1].close()
        for _ in range(100):  # bounded wait for the server to see that close
            reader, writer = await open_raw(port)
            try:
                response = await healthz_on(reader, writer)
            except asyncio.IncompleteReadError:
                response = b""
            writer.close()
            if response.startswith(b"HTTP/1.1 200"):
                break
            await asyncio.sleep(0.05)
        assert response.startswith(b"HTTP/1.1 200"), response[:200]
        for _, held_writer in held:
            held_writer.close()


async def test_behind_a_trusted_proxy_connections_are_not_counted_per_address() -> None:
    # Every connection comes from the proxy: its address says nothing about the client.
    async with listener(head_s=60.0, per_address=3, trust_proxy=True) as port:
        held = [await open_raw(port) for _ in range(5)]
        for reader, writer in held:
            assert (await healthz_on(reader, writer)).startswith(b"HTTP/1.1 200")
            writer.close()


def test_connection_counts_admit_up_to_the_limit_per_key() -> None:
    counts = ConnectionCounts(2)
    assert counts.admit("v4:8.8.8.8") and counts.admit("v4:8.8.8.8")
    assert not counts.admit("v4:8.8.8.8") and counts.refused == 1
    assert counts.admit("v4:9.9.9.9")  # another network has its own count
    counts.release("v4:8.8.8.8")
    assert counts.admit("v4:8.8.8.8")
    counts.release("v4:9.9.9.9")
    assert counts.open == {"v4:8.8.8.8": 2}  # released keys are forgotten


class PeerOnly(asyncio.BaseTransport):
    """A transport that only knows its peer's address (``peer_key`` reads nothing else)."""

    def __init__(self, peer: object) -> None:
        super().__init__()
        self.peer = peer

    def get_extra_info(self, name: str, default: object = None) -> object:
        return self.peer if name == "peername" else default


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        (("203.0.113.9", 5000), "v4:203.0.113.9"),
        (("::ffff:203.0.113.9", 5000, 0, 0), "v4:203.0.113.9"),
        (("2606:4700:10:20::1", 5000, 0, 0), "v6:2606:4700:10:20::/64"),
        (("2606:4700:10:20:ffff::2", 5000, 0, 0), "v6:2606:4700:10:20::/64"),
        (None, "unknown"),
    ],
)
def test_connections_are_counted_per_network_of_the_peer(peer: object, key: str) -> None:
    assert peer_key(PeerOnly(peer)) == key
