"""What a log line may say about a person: room codes as keyed tags, addresses truncated,
request targets and Referers without their free-text values.

A private room's code is the secret that lets someone ask to join it, and its link carries it
in the query (``/?room=CODE``); every file that room's page loads names it again in its Referer.
Client addresses say where a person is. Operations need neither in clear: telling rooms apart
needs a stable tag, and blocking an abusive network needs its prefix. docs/SERVER.md, "What the
server keeps", lists every place these reductions apply.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit

from daisychain.server.grouping import parse_address, site_network

# Drawn once per process and never written anywhere: within one run's log the same room has the
# same tag, and nobody holding the log can test a guessed code against it.
_KEY = secrets.token_bytes(32)
ROOM_TAG_HEX = 10  # 40 bits: rooms stay apart in a log; the code (96 bits) is not recoverable
_NUMBER = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,12})?")
MAX_QUERY_FIELDS = 16


def room_tag(code: str) -> str:
    """A room's name in logs: ``room-`` and a keyed hash of its code."""
    digest = hmac.new(_KEY, code.encode("utf-8", "replace"), hashlib.sha256).hexdigest()
    return f"room-{digest[:ROOM_TAG_HEX]}"


def address(text: str | None, *, full: bool = False) -> str:
    """A client address for a log line: the network it is in (``grouping.site_network``: an IPv4
    /24, an IPv6 /48), or the address itself with ``full`` (``--log-full-addresses``)."""
    if not text:
        return "unknown"
    parsed = parse_address(text)
    if parsed is None:
        return "unknown"
    if full:
        return str(parsed)
    return str(site_network(parsed))


def query(pairs: Iterable[tuple[str, str]]) -> str:
    """A query string with each value reduced: ``room`` to its tag, a number kept (the
    ``/data`` parameters operations read), anything else to its length (``name=~12``)."""
    out = []
    for i, (key, value) in enumerate(pairs):
        if i == MAX_QUERY_FIELDS:
            out.append("...")
            break
        key = key if key.isidentifier() and len(key) <= 24 else f"~{len(key)}"
        if key == "room":
            shown = room_tag(value)
        elif _NUMBER.fullmatch(value):
            shown = value
        else:
            shown = f"~{len(value)}"
        out.append(f"{key}={shown}")
    return "&".join(out)


def target(path: str, pairs: Iterable[tuple[str, str]]) -> str:
    """A request target for a log line: the path (cut at 200 characters) and the reduced
    query."""
    shown = path if len(path) <= 200 else f"{path[:200]}...(+{len(path) - 200} chars)"
    reduced = query(pairs)
    return f"{shown}?{reduced}" if reduced else shown


def referer(value: str | None) -> str:
    """A Referer for a log line: its path, and its query reduced like a target's."""
    if not value:
        return "-"
    try:
        parts = urlsplit(value)
    except ValueError:
        return f"~{len(value)}"
    return target(parts.path or "/", parse_qsl(parts.query, keep_blank_values=True))
