"""What the server needs of aiohttp beyond its documented API, checked on the installed release.

``server/wsframes.py`` (the RFC 6455 5.1 mask check) reaches into aiohttp's private names, and
``server/httpconn.py`` (the head deadline, the connection counts) subclasses ``web.BaseSite`` and
the exported but undocumented ``web.RequestHandler``. pyproject.toml pins aiohttp to the releases
these were verified on. Each test here names one thing relied on, first its shape (names and
signatures), then its behaviour through a real server on loopback, so that a different aiohttp
fails here, loudly, with the file to update, rather than by letting unmasked frames through or
by leaking listeners.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import inspect
import logging
import os
import socket
import tomllib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from packaging.requirements import Requirement
from packaging.version import Version

from daisychain.server.config import HttpLimits
from daisychain.server.httpconn import GuardedRequestHandler, GuardedSite, head_complete
from daisychain.server.wsframes import UNMASKED_REASON, MaskCheckedWebSocketResponse

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 10.0
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 1.3
OP_TEXT, OP_CLOSE = 0x1, 0x8

WS_HINT = (
    f"aiohttp {aiohttp.__version__} differs from what server/daisychain/server/wsframes.py uses "
    "(MaskCheckedWebSocketResponse._post_start): adapt it to this release, or keep aiohttp "
    "below it in pyproject.toml"
)
CONN_HINT = (
    f"aiohttp {aiohttp.__version__} differs from what server/daisychain/server/httpconn.py uses "
    "(GuardedSite, GuardedRequestHandler): adapt it to this release, or keep aiohttp below it "
    "in pyproject.toml"
)


def test_the_installed_aiohttp_is_in_the_range_pyproject_declares_verified() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    (spec,) = [r for r in map(Requirement, project["dependencies"]) if r.name == "aiohttp"]
    assert spec.specifier.contains(Version(aiohttp.__version__)), (
        f"aiohttp {aiohttp.__version__} is outside pyproject.toml's {spec}, the releases "
        "server/wsframes.py and server/httpconn.py were verified on: run this file, "
        "tests/server/test_server_wsframes.py, test_server_hostile.py and "
        "test_server_http_methods.py on it, then widen the range"
    )


# -- shapes: the names and signatures relied on -----------------------------------------------


def _parameters(function: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_websocket_response_post_start_takes_request_protocol_writer() -> None:
    post_start = getattr(web.WebSocketResponse, "_post_start", None)
    assert callable(post_start), f"WebSocketResponse._post_start is gone. {WS_HINT}"
    assert _parameters(post_start)[:4] == ["self", "request", "protocol", "writer"], WS_HINT
    assert not inspect.iscoroutinefunction(post_start), f"_post_start is async now. {WS_HINT}"


def test_websocket_close_takes_code_message_drain() -> None:
    # The reason for 1002 is added in ``close``, which aiohttp's ``receive`` calls with the code.
    assert {"code", "message", "drain"} <= set(_parameters(web.WebSocketResponse.close)), WS_HINT


async def test_a_fresh_request_handler_holds_the_tail_and_parser_slots() -> None:
    async def nothing(request: web.BaseRequest) -> web.StreamResponse:
        return web.Response()

    handler = web.RequestHandler(web.Server(nothing), loop=asyncio.get_running_loop())
    assert getattr(handler, "_message_tail", None) == b"", f"no _message_tail. {WS_HINT}"
    assert hasattr(handler, "_payload_parser"), f"no _payload_parser. {WS_HINT}"
    assert handler._payload_parser is None, WS_HINT
    assert _parameters(handler.set_parser)[:1] == ["parser"], WS_HINT


def test_request_handler_takes_the_options_and_hooks_guarded_request_handler_uses() -> None:
    options = inspect.signature(web.RequestHandler.__init__).parameters
    assert list(options)[:2] == ["self", "manager"], CONN_HINT
    for name in ("loop", "keepalive_timeout", "access_log_class"):
        assert options[name].kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: {CONN_HINT}"
    handle_error = _parameters(web.RequestHandler.handle_error)
    assert handle_error == ["self", "request", "status", "exc", "message"], CONN_HINT
    for name in ("connection_made", "connection_lost", "force_close", "log_exception"):
        assert callable(getattr(web.RequestHandler, name, None)), f"{name}: {CONN_HINT}"


def test_base_site_start_and_stop_are_the_subclassing_hooks() -> None:
    assert inspect.iscoroutinefunction(web.BaseSite.start), CONN_HINT
    assert inspect.iscoroutinefunction(web.BaseSite.stop), CONN_HINT
    assert web.BaseSite.__abstractmethods__ == {"name", "start"}, CONN_HINT
    assert isinstance(web.BaseRunner.__dict__.get("server"), property), CONN_HINT


# -- behaviour: a real server on loopback ------------------------------------------------------


async def handshake(
    port: int, then: bytes = b""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A WebSocket upgrade to ``/ws`` opened by hand; ``then`` goes out in the same write."""
    key = base64.b64encode(os.urandom(16)).decode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        .encode() + then
    )  # fmt: skip
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    accept = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest())
    assert answer.startswith(b"HTTP/1.1 101 ") and accept in answer, answer
    return reader, writer


def client_frame(payload: bytes, *, masked: bool = True) -> bytes:
    """One final text frame of at most 125 bytes, masked with a random key or not at all."""
    assert len(payload) < 126, len(payload)
    if not masked:
        return bytes([0x80 | OP_TEXT, len(payload)]) + payload
    key = os.urandom(4)
    body = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | OP_TEXT, 0x80 | len(payload)]) + key + body


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One unmasked server frame of at most 125 bytes: (opcode, payload)."""
    try:
        first, second = await asyncio.wait_for(reader.readexactly(2), WAIT_S)
        assert second < 126, second
        return first & 0x0F, await asyncio.wait_for(reader.readexactly(second), WAIT_S)
    except asyncio.IncompleteReadError as exc:
        dropped = f"the server dropped the socket without a close frame. {WS_HINT}"
        raise AssertionError(dropped) from exc


@contextlib.asynccontextmanager
async def served(
    app: web.Application, limits: HttpLimits | None = None
) -> AsyncIterator[tuple[web.AppRunner, GuardedSite]]:
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = GuardedSite(runner, "127.0.0.1", 0, limits or HttpLimits())
        await site.start()
        yield runner, site
    finally:
        await runner.cleanup()


class Spy(MaskCheckedWebSocketResponse):
    """Records what ``_post_start`` finds on the connection handler, before and after aiohttp's."""

    seen: dict[str, Any]

    def _post_start(self, request: web.BaseRequest, protocol: str | None, writer: Any) -> None:
        handler = request.protocol
        self.seen = {"tail": handler._message_tail, "parser": handler._payload_parser}
        super()._post_start(request, protocol, writer)
        self.seen["reader"] = self._reader
        self.seen["installed"] = handler._payload_parser


async def test_post_start_is_called_by_prepare_with_the_upgrade_tail_held_back() -> None:
    spies: list[Spy] = []
    received: list[str] = []

    async def ws(request: web.Request) -> web.StreamResponse:
        spy = Spy(on_unmasked=lambda: None)
        spies.append(spy)
        await spy.prepare(request)
        received.append(await spy.receive_str(timeout=WAIT_S))
        await spy.close()
        return spy

    app = web.Application()
    app.router.add_get("/ws", ws)
    async with served(app) as (_runner, site):
        frame = client_frame(b"with the upgrade")
        reader, writer = await handshake(site.bound_port(), then=frame)
        with contextlib.closing(writer):
            assert await read_frame(reader) == (OP_CLOSE, (1000).to_bytes(2, "big"))
    (spy,) = spies
    assert getattr(spy, "seen", None), f"prepare did not call _post_start. {WS_HINT}"
    assert spy.seen["tail"] == frame, f"the upgrade's tail is not in _message_tail. {WS_HINT}"
    assert spy.seen["parser"] is None, WS_HINT
    assert callable(getattr(spy.seen["reader"], "set_exception", None)), WS_HINT
    installed = spy.seen["installed"]
    assert callable(getattr(installed, "feed_data", None)), f"no reader installed. {WS_HINT}"
    assert callable(getattr(installed, "feed_eof", None)), WS_HINT
    assert received == ["with the upgrade"], WS_HINT


@pytest.mark.parametrize("with_upgrade", [True, False], ids=["in-the-tail", "after-the-upgrade"])
async def test_an_unmasked_frame_is_closed_with_1002(with_upgrade: bool) -> None:
    calls: list[int] = []

    async def ws(request: web.Request) -> web.StreamResponse:
        response = MaskCheckedWebSocketResponse(on_unmasked=lambda: calls.append(1))
        await response.prepare(request)
        async for _ in response:
            pass
        return response

    app = web.Application()
    app.router.add_get("/ws", ws)
    async with served(app) as (_runner, site):
        bad = client_frame(b"not masked", masked=False)
        reader, writer = await handshake(site.bound_port(), then=bad if with_upgrade else b"")
        with contextlib.closing(writer):
            if not with_upgrade:
                writer.write(bad)
            opcode, payload = await read_frame(reader)
            assert opcode == OP_CLOSE, f"opcode {opcode}, expected a close. {WS_HINT}"
            assert int.from_bytes(payload[:2], "big") == 1002, f"{payload!r}. {WS_HINT}"
            assert payload[2:] == UNMASKED_REASON.encode(), WS_HINT
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b"", WS_HINT
    assert calls == [1], WS_HINT


async def _protocol_name(request: web.Request) -> web.Response:
    return web.Response(text=type(request.protocol).__name__)


def _refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


async def test_a_guarded_site_serves_through_guarded_request_handler() -> None:
    app = web.Application()
    app.router.add_get("/", _protocol_name)
    async with (
        served(app) as (_runner, site),
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{site.bound_port()}/") as response,
    ):
        assert await response.text() == GuardedRequestHandler.__name__, CONN_HINT


async def test_a_stopped_guarded_site_frees_its_port_and_leaves_the_runner() -> None:
    async with served(web.Application()) as (runner, site):
        port = site.bound_port()
        assert not _refused(port)
        await site.stop()
        assert site not in runner.sites, CONN_HINT
        assert _refused(port), f"port {port} still accepts after stop(). {CONN_HINT}"
        with socket.socket() as again:
            again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            again.bind(("127.0.0.1", port))  # free again


async def test_runner_cleanup_stops_a_guarded_site() -> None:
    async with served(web.Application()) as (runner, site):
        port = site.bound_port()
        assert site in runner.sites, CONN_HINT
    assert _refused(port), f"port {port} still accepts after runner.cleanup(). {CONN_HINT}"


async def test_a_silent_connection_is_closed_at_the_head_deadline() -> None:
    # connection_made arms the deadline; force_close ends the connection.
    async with served(web.Application(), HttpLimits(head_timeout_s=0.2)) as (_runner, site):
        reader, writer = await asyncio.open_connection("127.0.0.1", site.bound_port())
        with contextlib.closing(writer):
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b"", CONN_HINT


async def test_a_complete_head_is_marked_by_the_first_middleware() -> None:
    app = web.Application(middlewares=[head_complete])
    seen: list[bool] = []

    async def marked(request: web.Request) -> web.Response:
        protocol = request.protocol
        assert isinstance(protocol, GuardedRequestHandler), CONN_HINT
        seen.append(protocol.head_received)
        return web.Response()

    app.router.add_get("/", marked)
    async with (
        served(app) as (_runner, site),
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{site.bound_port()}/") as response,
    ):
        assert response.status == 200
    assert seen == [True], CONN_HINT


async def test_the_parsers_400_comes_through_handle_error() -> None:
    async with served(web.Application()) as (_runner, site):
        reader, writer = await asyncio.open_connection("127.0.0.1", site.bound_port())
        with contextlib.closing(writer):
            writer.write(b"GET / HTTP/9.x\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    assert head.split(b" ")[1] == b"400", head
    assert b"X-Content-Type-Options: nosniff\r\n" in head, f"{head!r}. {CONN_HINT}"


async def test_a_handler_that_raises_is_logged_through_log_exception(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("planted")

    app = web.Application()
    app.router.add_get("/", broken)
    caplog.set_level(logging.ERROR, logger="daisychain.server.httpconn")
    async with (
        served(app) as (_runner, site),
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{site.bound_port()}/") as response,
    ):
        assert response.status == 500
    lines = [r for r in caplog.records if r.name == "daisychain.server.httpconn"]
    assert [r.getMessage() for r in lines] == ["error handling a request"], CONN_HINT
    assert lines[0].exc_info is not None and "planted" in str(lines[0].exc_info[1]), CONN_HINT
