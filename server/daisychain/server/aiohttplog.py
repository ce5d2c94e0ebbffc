"""aiohttp's own log lines, held to the server's rules: addresses reduced, the client's bytes
left out, a few lines per client network.

aiohttp logs from inside its protocol code, where the app has no hook: ``"%s: Client protocols
%r don't overlap server-known ones %r"`` (``aiohttp.websocket``, once per upgrade whose
``Sec-WebSocket-Protocol`` names anything: the client's full address and its header's words),
``"Error handling request from %s"`` (``aiohttp.server``, with a traceback) and others a later
release may add. ``AiohttpLines``, a ``logging.Filter`` on each of aiohttp's server-side loggers,
rewrites every record before a handler formats it:

* an argument that is an IP address becomes its network as ``redact.address`` writes it (an
  IPv4 /24, an IPv6 /48; the address itself with ``--log-full-addresses``);
* every other argument becomes its kind and size (``<str 3 chars>``, ``<list 2 items>``): the
  template stays readable and no byte a client chose reaches the log (a subprotocol header, a
  request line, could carry a room code);
* lines are throttled per client network and template (``logs.KeyedThrottle``): a few, then one
  a minute with the count held back.

The app's own request handler (``httpconn.GuardedRequestHandler``) writes its connection errors
itself, with the same reductions, so the lines here are what is left.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from daisychain.server import redact
from daisychain.server.grouping import network_key, parse_address
from daisychain.server.logs import KeyedThrottle

# aiohttp's loggers that write about requests a client sent (aiohttp/log.py); the client's and
# the access logger are not the server's (the access log is accesslog.py's own).
LOGGERS = ("aiohttp.server", "aiohttp.web", "aiohttp.websocket", "aiohttp.internal")


def _masked(value: object, full_addresses: bool) -> tuple[object, str | None]:
    """An argument as a line may show it, and the network key if it is an address."""
    if isinstance(value, bool | int | float) or value is None:
        return value, None
    if isinstance(value, str):
        address = parse_address(value)
        if address is not None:
            return redact.address(value, full=full_addresses), network_key(address)
        return f"<str {len(value)} chars>", None
    if isinstance(value, list | tuple | set | frozenset | dict):
        return f"<{type(value).__name__} {len(value)} items>", None
    return f"<{type(value).__name__}>", None


class AiohttpLines(logging.Filter):
    """Rewrites (and throttles) the records of aiohttp's loggers; see the module docstring."""

    def __init__(self, *, full_addresses: bool = False) -> None:
        super().__init__()
        self.full_addresses = full_addresses
        self.throttle = KeyedThrottle(burst=5, every_s=60.0, what="aiohttp's own lines")

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        shown: list[Any] = []
        key = "unknown"
        for value in args:
            masked, network = _masked(value, self.full_addresses)
            shown.append(masked)
            key = network or key
        template = str(record.msg)
        dropped = self.throttle.get(f"{key} {record.name} {template[:80]}").allow()
        if dropped is None:
            return False
        try:
            # %r would quote the masks; they are the server's words, not the client's
            shown_template = template.replace("%r", "%s")
            record.msg = shown_template % tuple(shown) if shown else template
        except (TypeError, ValueError):  # a template whose args we could not match
            record.msg = f"{template[:200]} (arguments left out)"
        if dropped:
            record.msg += f" ({dropped} similar lines suppressed)"
        record.args = ()
        return True


def install(*, full_addresses: bool, loggers: Iterable[str] = LOGGERS) -> AiohttpLines:
    """Put one ``AiohttpLines`` on each of ``loggers`` (replacing one put there before: a
    process runs one server, and a test that builds many apps needs one filter, not many)."""
    gate = AiohttpLines(full_addresses=full_addresses)
    for name in loggers:
        logger = logging.getLogger(name)
        for old in [f for f in logger.filters if isinstance(f, AiohttpLines)]:
            logger.removeFilter(old)
        logger.addFilter(gate)
    return gate
