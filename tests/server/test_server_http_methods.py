"""HTTP semantics on every route of the real listener: a HEAD has the GET's head and no body,
and a method a route does not answer is a 405 naming the ones it does.

A HEAD answered with a body is invisible to a browser (it ignores the bytes) but breaks a
proxy that keeps the connection: it reads the stray body as the start of the next response.
So each HEAD here is pipelined with a ``GET /healthz`` on one connection, as such a proxy
would, and the bytes after the HEAD's head must be that next response. The routes come from
the app's router, so a route added later without a sample here fails the test."""

from __future__ import annotations

import asyncio
import json

import pytest

from daisychain.server.app import create_app, serve_local
from server_fixtures import FALLBACK_TEXT, ByteTokenizer, config

# A request target for every route of the app (by its canonical path), with what it answers.
SAMPLES: dict[str, list[str]] = {
    "/ws": ["/ws"],
    "/data": [
        "/data?max_chars=50",
        "/data?max_chars=50&seed=7",
        "/data?format=tokens&max_tokens=10",
        "/data?format=tokens&max_tokens=10&encoding=json",
        "/data?max_chars=x",  # a 400 has a body too
        "/data?split=train",
    ],
    "/healthz": ["/healthz"],
    "/api/status": ["/api/status"],
    "/api/rooms": ["/api/rooms"],
    "/api/qr": ["/api/qr"],
    "/api/corpus/builtin": ["/api/corpus/builtin", "/api/corpus/builtin?split=nope"],
    "/kernels/{path}": ["/kernels/gemm_lut.wgsl", "/kernels/nothing.wgsl"],
    "/luts/{path}": ["/luts/manifest.json", "/luts/nothing"],
    "/vectors/{path}": ["/vectors/nothing"],
    "/favicon.ico": ["/favicon.ico"],
    "/{path}": ["/", "/index.html", "/js/app.js", "/nothing-here", "/?room=abcdefghij"],
}
TARGETS = [target for targets in SAMPLES.values() for target in targets]
# A bound, not a timing: /data's first request starts its worker process (a second of CPU), and
# a loaded 2-core machine has taken over 5 s.
ANSWER_S = 30.0
HEALTHZ = "GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"


def test_every_route_of_the_app_has_a_sample() -> None:
    app = create_app(config(), fallback_text=lambda: FALLBACK_TEXT, tokenizer=ByteTokenizer)
    routes = {resource.canonical for resource in app.router.resources()}
    assert routes == set(SAMPLES), "add a sample target for each new route to SAMPLES"


async def _exchange(url: str, request: str) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request.encode("latin-1"))
        return await asyncio.wait_for(reader.read(), ANSWER_S)  # until the server closes
    finally:
        writer.close()


def _split_head(data: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, rest = data.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, rest


@pytest.mark.parametrize("target", TARGETS)
async def test_head_has_no_body(target: str) -> None:
    async with serve_local(
        config(), fallback_text=lambda: FALLBACK_TEXT, tokenizer=ByteTokenizer
    ) as url:
        data = await _exchange(url, f"HEAD {target} HTTP/1.1\r\nHost: t\r\n\r\n{HEALTHZ}")
        get = await _exchange(url, f"GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    status, headers, rest = _split_head(data)
    assert status.startswith("HTTP/1.1 "), status
    # The next bytes are the pipelined /healthz's answer, not a body of the HEAD's.
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n"), f"HEAD {target} ({status}) sent {rest[:80]!r}"
    assert rest.endswith(b"\r\n\r\nok\n")
    get_status, get_headers, _ = _split_head(get)
    assert status == get_status, f"HEAD {target} answers {status}, GET {get_status}"
    if "websocket" not in target and target != "/ws":
        assert headers.get("content-type") == get_headers.get("content-type")


@pytest.mark.parametrize(
    ("method", "target", "allowed"),
    [
        ("GET", "/api/qr", "POST"),
        ("HEAD", "/api/qr", "POST"),
        ("PUT", "/api/qr", "POST"),
        ("GET", "/api/rooms", "POST"),
        ("DELETE", "/api/rooms", "POST"),
        ("POST", "/healthz", "GET"),
        ("POST", "/data", "GET"),
        ("PUT", "/", "GET"),
        ("DELETE", "/index.html", "GET"),
        ("POST", "/kernels/gemm_lut.wgsl", "GET"),
    ],
)
async def test_a_method_a_route_does_not_answer_is_a_405_naming_the_others(
    method: str, target: str, allowed: str
) -> None:
    async with serve_local(
        config(), fallback_text=lambda: FALLBACK_TEXT, tokenizer=ByteTokenizer
    ) as url:
        request = f"{method} {target} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n"
        data = await _exchange(url, request + "Connection: close\r\n\r\n")
    status, headers, body = _split_head(data)
    assert status.startswith("HTTP/1.1 405 "), f"{method} {target}: {status}"
    assert allowed in [name.strip() for name in headers["allow"].split(",")]
    if method == "HEAD":
        assert body == b""
    elif headers.get("content-type", "").startswith("application/json"):
        assert json.loads(body)["hint"]
