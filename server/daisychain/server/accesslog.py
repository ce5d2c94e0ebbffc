"""The access log: one line per request, with what operations need and nothing more.

aiohttp's own line is the request line, the client's address, the Referer and the User-Agent,
so it writes a private room's code (``/?room=CODE``, and again in the Referer of every file
that room's page loads) and every client's address into the log. This one writes, per request:
the method, the target with its query reduced (``redact.target``: ``room`` as its keyed tag,
numbers kept, other values as their length), the status, the bytes sent, the time taken, the
client's network (an IPv4 /24, an IPv6 /48; the address itself with ``--log-full-addresses``),
the Referer's path reduced the same way and the User-Agent cut to 120 characters.

A successful ``/healthz`` is written at debug level only (a monitor polls it). Refusals (4xx,
5xx) and WebSocket sessions (101, one per socket) are throttled per client
network (``logs.KeyedThrottle``: a few lines, then one a minute saying how many were held
back), so a client opening sockets or sending bad requests as fast as it can cannot fill the
disk; ordinary requests are already bounded by the rate limits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from daisychain.server import redact
from daisychain.server.grouping import client_address, network_key
from daisychain.server.logs import KeyedThrottle, cut

log = logging.getLogger("daisychain.server.access")

MAX_USER_AGENT_CHARS = 120


@dataclass
class AccessLogPolicy:
    """What the access log of one app writes (``ServerConfig``'s logging settings)."""

    full_addresses: bool = False
    trust_proxy: bool = False
    throttle: KeyedThrottle = field(
        default_factory=lambda: KeyedThrottle(
            burst=5, every_s=60.0, what="access log: refusals and WebSocket sessions"
        )
    )


POLICY = web.AppKey("access_log_policy", AccessLogPolicy)
_NO_APP = AccessLogPolicy()  # requests refused before routing: the defaults, one shared throttle


class AccessLog(AbstractAccessLogger):
    """aiohttp's ``access_log_class`` (``app.make_runner`` sets it); the app's
    ``AccessLogPolicy`` says what to write."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        policy = _policy(request)
        try:
            method, path, pairs = request.method, request.path, list(request.query.items())
        except (ValueError, UnicodeError):  # a target the parser let through but cannot split
            method, path, pairs = "?", "?", []
        address = client_address(request.headers, request.remote, trust_proxy=policy.trust_proxy)
        shown = redact.address(str(address) if address else None, full=policy.full_addresses)
        fields = {
            "client": shown,
            "status": response.status,
            "bytes": response.body_length,
            "ms": round(time * 1000, 1),
            "referer": redact.referer(request.headers.get("Referer")),
            "ua": cut(request.headers.get("User-Agent", "-"), MAX_USER_AGENT_CHARS),
        }
        line = "%s %s %d"
        args = (cut(method, 16), redact.target(path, pairs), response.status)
        if path == "/healthz" and response.status == 200:
            # a monitor polls it every few seconds: at info it would be most of the log
            log.debug(line, *args, extra={"fields": fields})
        elif response.status == 101 or response.status >= 400:
            key = network_key(address) if address is not None else "unknown"
            policy.throttle.log(
                f"{key} {response.status // 100}xx", log, logging.INFO, line, *args, fields=fields
            )
        else:
            log.info(line, *args, extra={"fields": fields})


def _policy(request: web.BaseRequest) -> AccessLogPolicy:
    """The app's policy; a request refused before routing (the parser's 400) has no app, and
    aiohttp asserts when one asks for it: those get the defaults."""
    try:
        app = request.app if isinstance(request, web.Request) else None
    except (AssertionError, AttributeError):  # no match_info yet (AttributeError under -O)
        return _NO_APP
    policy = app.get(POLICY) if app is not None else None
    return policy if policy is not None else _NO_APP
