"""HTTP connections: a request-head deadline, a count per client network, and security headers
on the parser's errors.

aiohttp's server reads a request head for as long as the client keeps the connection open, so a
silent connection, or a slowloris client trickling its headers a byte at a time, holds a socket
and a handler until aiohttp's keep-alive timer fires (3630 s by default, and only in recent
releases is it armed before the first request; this package allows aiohttp 3.9.2). Three pieces
close that at its cause, whatever the aiohttp version:

* ``GuardedRequestHandler`` (aiohttp's per-connection protocol) arms a timer when the connection
  is accepted and closes the connection when it fires, unless a request head was complete;
* ``head_complete``, the app's first middleware, marks the head complete: it runs as soon as the
  parser has the whole head, before routing, for every request including WebSocket upgrades
  (an upgraded socket then lives on its heartbeat, ``SignalingLimits.heartbeat_s``);
* later requests on a kept-alive connection are covered by aiohttp's keep-alive timer
  (``HttpLimits.keepalive_timeout_s``), which closes a connection whose next head is not
  complete that long after the previous response.

The deadline bounds how long a connection lives, not how many one client opens: each costs a
file descriptor and ~5 KB of server memory (3000 silent ones: +16 MB). So connections are also
counted per client network (``grouping.network_key`` of the socket's peer) and one past
``HttpLimits.max_connections_per_address`` is answered 429 and closed as soon as it is accepted,
before anything is read. Not behind ``--trust-proxy``: there every connection comes from the
proxy, and the per-address limits that need the forwarded address apply later (``/ws``,
``/data``).

``GuardedSite`` listens with this handler; ``main.serve`` and ``app.serve_local`` use it. (Tests
that mount the app on aiohttp's ``TestServer`` get aiohttp's own handler and no deadline.)

aiohttp offers no setting for the connection handler's class, so this module subclasses two of
its classes, through public names only. ``web.BaseSite``: ``start`` registers the site with its
runner and ``stop`` unregisters it; the listening ``asyncio.Server`` is this site's own
(``GuardedSite.listener``), closed by its ``stop``, so ``runner.addresses`` does not list it
(``bound_port`` gives the port). ``web.RequestHandler`` (exported, not documented): its
constructor's ``loop``, ``keepalive_timeout`` and ``access_log_class``, ``connection_made`` and
``connection_lost``, ``force_close``, ``transport``, and the two hooks aiohttp calls on itself,
``handle_error(request, status, exc, message)`` and ``log_exception(msg, exc_info=...)``; its
``manager`` is the runner's ``web.Server``. tests/server/test_aiohttp_private_api.py checks that
shape on the installed aiohttp, with the private names ``wsframes.py`` needs.

The parser's own 400s (a malformed request line or header) are built by the handler, not the
app, so ``on_response_prepare`` never sees them; ``handle_error`` adds the security headers
there. Such a request is logged as one line without a traceback and without the client's bytes
(aiohttp's message quotes the request line, which may hold a room code: ``parser_reason``
keeps the words before the quote), its client as a network (``redact.address``), and at most a
few lines per client network then one a minute (each costs the client only a connection, so a
line each would let anyone fill the log). A handler that raised is one line too, with its
traceback, under the same throttle; aiohttp's own wording writes the full address.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from daisychain.server import redact
from daisychain.server.accesslog import AccessLog
from daisychain.server.config import HttpLimits
from daisychain.server.grouping import network_key, parse_address
from daisychain.server.logs import KeyedThrottle
from daisychain.server.static import security_headers, set_security_headers

log = logging.getLogger(__name__)


class ConnectionCounts:
    """Open connections per client network, at most ``limit`` each (no I/O here)."""

    def __init__(self, limit: int) -> None:
        assert limit >= 1, f"bad connection limit {limit}"
        self.limit = limit
        self.open: dict[str, int] = {}
        self.refused = 0

    def admit(self, key: str) -> bool:
        if self.open.get(key, 0) >= self.limit:
            self.refused += 1
            return False
        self.open[key] = self.open.get(key, 0) + 1
        return True

    def release(self, key: str) -> None:
        left = self.open[key] - 1
        if left:
            self.open[key] = left
        else:
            del self.open[key]


def _peer_address(transport: asyncio.BaseTransport) -> str | None:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else None


def peer_key(transport: asyncio.BaseTransport) -> str:
    """The network of the socket's peer (an IPv4 address, an IPv6 /64)."""
    text = _peer_address(transport)
    address = parse_address(text) if text is not None else None
    return network_key(address) if address is not None else "unknown"


_QUOTES = ("'", '"', ":", "(", "\n", "\r")


def parser_reason(exc: HttpProcessingError) -> str:
    """What the parser refused, without the bytes it quotes: ``"BadStatusLine: Invalid minor
    version"`` for aiohttp's ``"Invalid minor version:\n\n  b'GET /?room=... HTTP/9.x'"``."""
    text = str(exc.message)
    cut = min((i for i in (text.find(q) for q in _QUOTES) if i >= 0), default=len(text))
    words = " ".join(text[:cut].split())[:80]
    return f"{type(exc).__name__}: {words}" if words else type(exc).__name__


class ConnectionLines:
    """How one listener's connections log what went wrong: the client as a network (the address
    itself with ``full_addresses``), a few lines per client network, then one a minute."""

    def __init__(self, *, full_addresses: bool = False) -> None:
        self.full_addresses = full_addresses
        self.throttle = KeyedThrottle(burst=5, every_s=60.0, what="refused HTTP requests")

    def log(
        self, transport: asyncio.BaseTransport | None, level: int, msg: str, *args: object,
        exc_info: BaseException | None = None,
    ) -> None:  # fmt: skip
        address = _peer_address(transport) if transport is not None else None
        key = peer_key(transport) if transport is not None else "unknown"
        dropped = self.throttle.get(f"{key} {msg[:40]}").allow()
        if dropped is None:
            return
        if dropped:
            msg += f" ({dropped} similar lines suppressed)"
        client = redact.address(address, full=self.full_addresses)
        log.log(level, msg, *args, exc_info=exc_info, extra={"fields": {"client": client}})


def _refusal(limit: int) -> bytes:
    """The whole 429 response, written before anything is read (so no request to answer)."""
    body = json.dumps(
        {
            "error": f"your network already has {limit} connections open to this server",
            "hint": "close other tabs or devices on this network, or run your own server "
            "(python -m daisychain.server)",
        }
    ).encode()
    headers = {
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Retry-After": "15",
        "Connection": "close",
        **security_headers(None),
    }
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"HTTP/1.1 429 Too Many Requests\r\n{head}\r\n".encode() + body


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's connection handler, closing connections whose first request head is late,
    and refusing those over their network's connection count."""

    def __init__(
        self,
        manager: web.Server,
        *,
        limits: HttpLimits,
        counts: ConnectionCounts | None = None,
        lines: ConnectionLines | None = None,
        **options: Any,
    ) -> None:
        super().__init__(manager, keepalive_timeout=limits.keepalive_timeout_s, **options)
        self.lines = lines if lines is not None else ConnectionLines()
        self.head_timeout_s = limits.head_timeout_s
        self.head_received = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._counts = counts
        self._counted: str | None = None  # the key this connection holds a place under

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._counts is not None:
            key = peer_key(transport)
            if not self._counts.admit(key):
                # no address here (docs/SERVER.md, "What the server keeps"); the 429 says why
                log.debug("refused a connection: its network is over its connection count")
                assert isinstance(transport, asyncio.WriteTransport)
                transport.write(_refusal(self._counts.limit))
                self.force_close()  # closes once the refusal is written
                return
            self._counted = key
        loop = asyncio.get_running_loop()
        self._head_timer = loop.call_later(self.head_timeout_s, self._head_deadline)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_head_timer()
        if self._counted is not None and self._counts is not None:
            self._counts.release(self._counted)
            self._counted = None
        super().connection_lost(exc)

    def mark_head_received(self) -> None:
        self.head_received = True
        self._cancel_head_timer()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_deadline(self) -> None:
        self._head_timer = None
        if not self.head_received:
            log.debug("closing a connection: no complete request head in %g s", self.head_timeout_s)
            self.force_close()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        response = super().handle_error(request, status, exc, message)
        # No Host here: a request the parser refused has no trustworthy one.
        set_security_headers(response, None)
        return response

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            # One line: the parser's message quotes the client's bytes over several lines.
            self.lines.log(
                self.transport, logging.INFO, "refused a malformed HTTP request: %s",
                parser_reason(exc),
            )  # fmt: skip
            return
        # aiohttp's "Error handling request from <address>": a handler raised. Its traceback is
        # what a bug report needs; the address is the client's network, as in every line here.
        error = exc if isinstance(exc, BaseException) else None
        self.lines.log(self.transport, logging.ERROR, "error handling a request", exc_info=error)


@web.middleware
async def head_complete(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """First middleware: the request head is complete, so the head deadline no longer applies."""
    protocol = request.protocol
    if isinstance(protocol, GuardedRequestHandler):
        protocol.mark_head_received()
    return await handler(request)


class GuardedSite(web.BaseSite):
    """A TCP listener like ``web.TCPSite`` whose connections get ``GuardedRequestHandler``.

    ``trust_proxy``: every connection comes from the proxy, so none is counted per address.
    ``ssl_context``: serve https (and wss) with it (``tls.py`` makes one); None serves http."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        limits: HttpLimits,
        *,
        trust_proxy: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        full_addresses: bool = False,
    ) -> None:
        super().__init__(runner)
        self.runner = runner
        self.host, self.requested_port, self.limits = host, port, limits
        self.ssl_context = ssl_context
        cap = limits.max_connections_per_address
        self.counts = ConnectionCounts(cap) if cap and not trust_proxy else None
        self.lines = ConnectionLines(full_addresses=full_addresses)
        self.listener: asyncio.Server | None = None  # from ``start``

    @property
    def name(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{shown}:{self.requested_port}"

    def bound_port(self) -> int:
        """The port as bound (``requested_port`` 0 picks a free one)."""
        server = self.listener
        assert server is not None and server.sockets, "start the site first"
        return int(server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        await super().start()
        manager = self.runner.server
        assert manager is not None, "start the site after runner.setup()"
        loop = asyncio.get_running_loop()

        def protocol() -> GuardedRequestHandler:
            # The access log is ours (room codes as tags, addresses truncated), not aiohttp's.
            return GuardedRequestHandler(
                manager, limits=self.limits, counts=self.counts, lines=self.lines, loop=loop,
                access_log_class=AccessLog,
            )  # fmt: skip

        self.listener = await loop.create_server(
            protocol, self.host, self.requested_port, backlog=128, reuse_address=True,
            ssl=self.ssl_context,
        )  # fmt: skip

    async def stop(self) -> None:
        # Closes the listener (no new connections); the runner's cleanup closes the open ones.
        if self.listener is not None:
            self.listener.close()
        await super().stop()
