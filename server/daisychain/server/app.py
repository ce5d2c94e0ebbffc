"""The aiohttp application: routes, shared state and the resources it owns.

``create_app(config)`` is the whole server; ``main.py`` runs it and tests mount it on a loopback
port. Shared state lives under typed ``web.AppKey``s; the upstream HTTP client session is opened
and closed in a ``cleanup_ctx`` so it exists exactly while the app runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from daisychain.assets import asset_dir
from daisychain.server import aiohttplog, logs
from daisychain.server.access import Access
from daisychain.server.accesslog import POLICY, AccessLog, AccessLogPolicy
from daisychain.server.api import DataEndpoint, create_room, healthz, status_handler
from daisychain.server.config import ServerConfig
from daisychain.server.corpus import BuiltinTokensEndpoint
from daisychain.server.datasource import DataService, Tokenizer, load_builtin_text, load_tokenizer
from daisychain.server.httpconn import GuardedSite, head_complete
from daisychain.server.qr import QrEndpoint
from daisychain.server.signaling import Signaling
from daisychain.server.static import StaticFiles, security_header_hook
from daisychain.server.tls import Certificate, listen_addresses
from daisychain.server.trainvectors import TrainVectorsEndpoint
from daisychain.wire.ice import IceIssuer

CONFIG = web.AppKey("config", ServerConfig)
SIGNALING = web.AppKey("signaling", Signaling)
DATA = web.AppKey("data", DataService)
ACCESS = web.AppKey("access", Access)
HELD_LOG = logging.getLogger("daisychain.server.held")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(
    config: ServerConfig,
    *,
    fallback_text: Callable[[], str] = load_builtin_text,
    tokenizer: Callable[[], Tokenizer] = load_tokenizer,
) -> web.Application:
    """Build the app. ``fallback_text`` and ``tokenizer`` are injectable for tests."""
    app = web.Application(middlewares=[head_complete])
    app[CONFIG] = config
    app[POLICY] = AccessLogPolicy(
        full_addresses=config.log_full_addresses, trust_proxy=config.trust_proxy
    )
    signaling = Signaling(
        config.signaling, trust_proxy=config.trust_proxy, ice=IceIssuer(config.ice)
    )
    app[SIGNALING] = signaling
    access = app[ACCESS] = Access()

    async def data_source(app: web.Application) -> AsyncIterator[None]:
        session = None
        if not config.data.offline:
            session = aiohttp.ClientSession(raise_for_status=False)
        service = DataService(
            config.data, session, fallback_text=fallback_text, tokenizer=tokenizer
        )
        app[DATA] = service
        yield
        service.close()
        if session is not None:
            await session.close()

    async def close_sockets(app: web.Application) -> None:
        await signaling.close_all()

    qr = QrEndpoint(trust_proxy=config.trust_proxy)
    # aiohttp's own lines: addresses reduced, client bytes left out, throttled (aiohttplog.py).
    aiohttplog.install(full_addresses=config.log_full_addresses)

    async def held_lines(app: web.Application) -> AsyncIterator[None]:
        reporter = asyncio.create_task(logs.held_lines_reporter(HELD_LOG), name="held-lines")
        yield
        reporter.cancel()
        await asyncio.gather(reporter, return_exceptions=True)
        logs.report_held(HELD_LOG)  # what the last minute held back, before the process ends

    async def qr_worker(app: web.Application) -> AsyncIterator[None]:
        qr.start()  # in the background: a burst must not also pay for starting the process
        yield
        await qr.close()

    app.cleanup_ctx.append(data_source)
    app.cleanup_ctx.append(qr_worker)
    app.cleanup_ctx.append(held_lines)
    app.on_shutdown.append(close_sockets)
    app.on_response_prepare.append(security_header_hook(trust_proxy=config.trust_proxy))

    def data_service() -> DataService:
        return app[DATA]

    data = DataEndpoint(
        data_service,
        trust_proxy=config.trust_proxy,
        requests_per_s=config.data.requests_per_s,
        burst=config.data.burst,
    )
    static = StaticFiles(_folder(config.static_dir, "static"), "/", index="index.html")
    kernels = StaticFiles(_folder(config.kernels_dir, "kernels"), "/kernels/")
    luts = StaticFiles(_folder(config.luts_dir, "luts"), "/luts/")

    app.router.add_get("/ws", signaling.handle)
    app.router.add_get("/data", data.handle)
    app.router.add_get("/healthz", healthz)
    app.router.add_get(
        "/api/status",
        status_handler(signaling, data_service, access, trust_proxy=config.trust_proxy),
    )
    # "*": the path is theirs whatever the method, so a GET or HEAD is a 405 naming POST rather
    # than falling through to the static files' 404.
    app.router.add_route("*", "/api/rooms", _only("POST", create_room))
    app.router.add_route("*", "/api/qr", _only("POST", qr.handle))
    app.router.add_get("/api/corpus/builtin", BuiltinTokensEndpoint().handle)
    app.router.add_get("/kernels/{path:.*}", kernels.handle)
    app.router.add_get("/luts/{path:.*}", luts.handle)
    app.router.add_get("/vectors/{path:.*}", TrainVectorsEndpoint().handle)  # for /train-check
    # Every browser asks for /favicon.ico whatever a page links: the SVG, never a 404.
    app.router.add_get("/favicon.ico", static.alias("favicon.svg"))
    app.router.add_get("/{path:.*}", static.handle)  # last: everything else is a static file
    return app


def _only(method: str, handler: Handler) -> Handler:
    """``handler`` for ``method``; any other method is a 405 with ``Allow`` (RFC 9110 15.5.6)."""

    async def routed(request: web.Request) -> web.StreamResponse:
        if request.method != method:
            raise web.HTTPMethodNotAllowed(
                request.method, [method],
                text=json.dumps({"error": f"{request.path} answers {method} only",
                                 "hint": f"send a {method} (docs/SERVER.md)"}),
                content_type="application/json",
            )  # fmt: skip
        return await handler(request)

    return routed


def make_runner(app: web.Application, **options: Any) -> web.AppRunner:
    """The runner of ``app`` with its access log (``accesslog.AccessLog``: room codes as tags,
    addresses truncated) instead of aiohttp's."""
    return web.AppRunner(app, handle_signals=False, access_log_class=AccessLog, **options)


def _folder(override: Path | None, name: str) -> Path:
    return override if override is not None else asset_dir(name)


@dataclass(frozen=True)
class Listener:
    """One socket the server listens on: https with ``certificate``, else plain http."""

    host: str
    port: int  # 0: a free one
    certificate: Certificate | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.certificate is not None else "http"


async def listen(
    runner: web.AppRunner, config: ServerConfig, listeners: list[Listener]
) -> list[str]:
    """Start every listener (``GuardedSite``: the connection deadlines of ``config.http``) and
    record in the app's ``Access`` what other devices need; returns each one's URL as bound."""
    access = runner.app[ACCESS]
    urls, lan = [], []
    for listener in listeners:
        certificate = listener.certificate
        site = GuardedSite(
            runner, listener.host, listener.port, config.http, trust_proxy=config.trust_proxy,
            ssl_context=certificate.context() if certificate is not None else None,
            full_addresses=config.log_full_addresses,
        )  # fmt: skip
        await site.start()
        port = site.bound_port()
        urls.append(f"{listener.scheme}://{_shown(listener.host)}:{port}/")
        if certificate is not None:
            access.https_port, access.certificate = port, certificate
        lan += [
            (listener.scheme != "https", f"{listener.scheme}://{_shown(str(a))}:{port}/")
            for a in listen_addresses(listener.host)
            if not a.is_loopback
        ]
    access.lan_urls = [url for _, url in sorted(lan, key=lambda item: item[0])]  # https first
    return urls


def _shown(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@asynccontextmanager
async def serve_listeners(
    config: ServerConfig, listeners: list[Listener], **app_options: Any
) -> AsyncIterator[list[str]]:
    """Run the app on ``listeners`` for the duration of the block; yields their URLs as bound,
    without the final slash. For the demo, benchmarks and tests: the real server (with
    ``main.serve``'s connection deadlines, ``config.http``), gone afterwards."""
    runner = make_runner(create_app(config, **app_options))
    await runner.setup()
    try:
        urls = await listen(runner, config, listeners)
        yield [url.rstrip("/") for url in urls]
    finally:
        await runner.cleanup()


@asynccontextmanager
async def serve_local(
    config: ServerConfig,
    host: str = "127.0.0.1",
    *,
    certificate: Certificate | None = None,
    **app_options: Any,
) -> AsyncIterator[str]:
    """``serve_listeners`` on one free port of ``host``; yields its URL (https with
    ``certificate``)."""
    listener = Listener(host, 0, certificate)
    async with serve_listeners(config, [listener], **app_options) as [url]:
        yield url
