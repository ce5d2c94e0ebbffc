"""Hostile HTTP clients for ``hostile.run_hostile``: a QR-code burst from many networks, bodies
a parser must refuse with a 400 (never a 500), HEADs pipelined as a proxy sends them, hello
fields a stranger must not get shown to a host as trusted, and requests that must not cost the
server a log line each: a reconnect loop of bad hellos, malformed HTTP requests carrying a room
code, and WebSocket upgrades naming subprotocols. (The pending-join squat is
``attacks.pending_squat``.)

Each factory returns an ``Attacker`` bounded by a count and the run's deadline. Distinct client
networks are distinct loopback source addresses (127.0.0.2 on: the server, trusting no proxy
header, keys its limits on the socket's address); every socket stays on 127.0.0.0/8. Each
records ``networks`` (how many it used) so the run's summary can say log bytes per minute per
network.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable

import aiohttp

from daisychain.bench.rig.hostile import (
    Attack,
    Attacker,
    raw_websocket,
    read_until_closed,
    text_frame,
)
from daisychain.server.qr import MAX_QR_BYTES, QR_BURST

# The heaviest text /api/qr accepts: 128 four-byte characters, 512 bytes of UTF-8.
HEAVIEST_QR_TEXT = "\U0001f600" * (MAX_QR_BYTES // 4)
# A room code planted in what the attackers send: no log line may hold it.
PLANTED_ROOM = "Zq7Plant-Xk9_RoomW3v"


def source_address(i: int) -> str:
    """The ``i``-th attacker's loopback address: 127.0.0.2, 127.0.0.3, ... (one /24)."""
    assert 0 <= i < 250, f"no loopback source address for attacker {i}"
    return f"127.0.0.{2 + i}"


def qr_burst(
    *,
    networks: int = 20,
    parallel: int = QR_BURST,
    text: str = HEAVIEST_QR_TEXT,
    max_requests: int = 20_000,
    jitter_s: float = 1.0,
    seed: int = 47,
) -> Attacker:
    """``networks`` clients, each from its own address, each with ``parallel`` requests for
    ``text``'s code in flight at once (its whole burst at the start, all 20 networks' together),
    asking again as soon as an answer comes, or after a 429 as soon as its ``Retry-After``
    allows, each asker at its own moment within the following second (``jitter``, seeded), as
    client libraries back off; until the deadline: all these clients can get drawn. Notes: the
    statuses met and ``drawn_per_s``.

    Without the jitter the 200 askers come back in one wave each second, and any wave of 200
    requests costs the loop ~56 ms whatever they ask for (~0.28 ms of the server's CPU per
    refused request, ~0.2 ms per ``/healthz``, measured): that is a plain HTTP flood, bounded by
    the connections per network, not the cost of QR codes this attack measures."""

    async def attack(a: Attack) -> None:
        statuses: dict[str, int] = {}
        started = time.monotonic()
        rng = random.Random(seed)

        async def client(i: int) -> None:
            connector = aiohttp.TCPConnector(local_addr=(source_address(i), 0), limit=parallel)
            async with aiohttp.ClientSession(connector=connector) as session:
                await asyncio.gather(*(asker(session) for _ in range(parallel)))

        async def asker(session: aiohttp.ClientSession) -> None:
            while not a.over() and a.outcome.sent < max_requests:
                a.outcome.sent += 1
                wait_s = 0.0
                try:
                    async with session.post(
                        f"{a.url}/api/qr", json={"text": text},
                        timeout=aiohttp.ClientTimeout(total=max(0.5, a.left())),
                    ) as response:  # fmt: skip
                        await response.read()
                        key = str(response.status)
                        if response.status in (429, 503):
                            wait_s = float(response.headers.get("Retry-After", "1"))
                except (aiohttp.ClientError, TimeoutError) as exc:
                    key = type(exc).__name__
                statuses[key] = statuses.get(key, 0) + 1
                if wait_s:
                    await asyncio.sleep(min(wait_s + rng.uniform(0, jitter_s), a.left()))

        await asyncio.gather(*(client(i) for i in range(networks)))
        elapsed = max(1e-9, time.monotonic() - started)
        a.outcome.notes.update(
            networks=networks,
            statuses=statuses,
            text_bytes=len(text.encode()),
            drawn_per_s=round(statuses.get("200", 0) / elapsed, 1),
        )

    return attack


def bad_hello_loop(*, max_connections: int = 5000) -> Attacker:
    """Connect to ``/ws``, send a hello the server refuses (a room code that does not parse),
    read until closed, and again, from one address: before issue 47 each socket wrote a line,
    and no hello token was spent."""

    async def attack(a: Attack) -> None:
        hello = json.dumps({"type": "hello", "version": 1, "room": "x!"})
        async with aiohttp.ClientSession() as session:
            while a.outcome.connections < max_connections and not a.over():
                a.outcome.connections += 1
                try:
                    ws = await session.ws_connect(a.ws_url)
                except aiohttp.WSServerHandshakeError as exc:
                    a.outcome.closes[f"http-{exc.status}"] += 1
                    await asyncio.sleep(0.01)  # refused at the door: try again soon
                    continue
                except aiohttp.ClientError as exc:
                    a.outcome.closes[type(exc).__name__] += 1
                    continue
                await ws.send_str(hello)
                a.outcome.sent += 1
                await read_until_closed(ws, a.outcome, min(2.0, a.left() + 0.5))
                await ws.close()
        a.outcome.notes["networks"] = 1

    return attack


def _malformed(i: int) -> bytes:
    """One malformed request, each kind carrying ``PLANTED_ROOM`` where the parser quotes."""
    kinds = [
        f"GET /?room={PLANTED_ROOM} HTTP/9.x\r\nHost: x\r\n\r\n",
        f"GET / HTTP/1.1\r\nHost: x\r\nReferer: http://a/?room={PLANTED_ROOM}\x7f\r\n\r\n",
        f"GET /?room={PLANTED_ROOM}&x={'a' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n",
        f"G\x01T /?room={PLANTED_ROOM} HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    return kinds[i % len(kinds)].encode("latin-1")


def malformed_http(*, max_requests: int = 5000, parallel: int = 4) -> Attacker:
    """Malformed request lines and headers (``_malformed``), one per connection, from one
    address, as fast as the server answers them."""

    async def attack(a: Attack) -> None:
        counter = iter(range(max_requests))

        async def one() -> None:
            for i in counter:
                if a.over():
                    return
                a.outcome.connections += 1
                try:
                    reader, writer = await asyncio.open_connection(a.host, a.port)
                except OSError as exc:
                    a.outcome.closes[type(exc).__name__] += 1
                    continue
                try:
                    writer.write(_malformed(i))
                    a.outcome.sent += 1
                    status = await asyncio.wait_for(reader.readline(), min(2.0, a.left() + 0.5))
                    words = status.decode("latin-1").split(" ")
                    a.outcome.closes[f"http-{words[1]}" if len(words) > 1 else "eof"] += 1
                except (OSError, TimeoutError):
                    a.outcome.closes["reset"] += 1
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()

        await asyncio.gather(*(one() for _ in range(parallel)))
        a.outcome.notes["networks"] = 1
        a.outcome.notes["room_code"] = PLANTED_ROOM

    return attack


def subprotocol_upgrades(*, max_connections: int = 5000) -> Attacker:
    """WebSocket upgrades naming subprotocols the server does not speak (one of them the planted
    room code), closed at once, from one address: aiohttp wrote "<full address>: Client
    protocols [...]" per upgrade."""

    async def attack(a: Attack) -> None:
        headers = {"Sec-WebSocket-Protocol": f"a, b, {PLANTED_ROOM}"}
        while a.outcome.connections < max_connections and not a.over():
            a.outcome.connections += 1
            try:
                _reader, writer = await asyncio.wait_for(
                    raw_websocket(a.host, a.port, "/ws", headers), min(2.0, a.left() + 0.5)
                )
            except ConnectionRefusedError as exc:  # a 429 at the door
                a.outcome.closes[str(exc).split(" ")[1] if " " in str(exc) else "refused"] += 1
                await asyncio.sleep(0.01)
                continue
            except (OSError, TimeoutError) as exc:
                a.outcome.closes[type(exc).__name__] += 1
                continue
            a.outcome.sent += 1
            writer.write(text_frame(json.dumps({"type": "ping"})))
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        a.outcome.notes["networks"] = 1
        a.outcome.notes["room_code"] = PLANTED_ROOM

    return attack


# Bodies /api/qr used to answer with a 500 and a ~3 KB traceback in the log.
BAD_QR_BODIES = (
    b'{"text": "\\ud800"}',
    b"[" * 1000 + b"]" * 1000,
    b'{"a":' + b"[" * 1000 + b"]" * 1000 + b',"text":"x"}',
    b'{"text": "x", "n": NaN}',
    b'{"text": "\xff"}',
)


def qr_bad_bodies(*, networks: int = 10, max_requests: int = 2000) -> Attacker:
    """Bodies that used to be 500s (a lone surrogate, 1000-deep nesting, ``NaN``, bytes that
    are not UTF-8), from ``networks`` addresses in turn (each has its own QR budget). Notes:
    the statuses met."""

    async def attack(a: Attack) -> None:
        statuses: dict[str, int] = {}
        sessions = [
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source_address(i), 0)))
            for i in range(networks)
        ]
        try:
            i = 0
            while not a.over() and a.outcome.sent < max_requests:
                body = BAD_QR_BODIES[i % len(BAD_QR_BODIES)]
                session = sessions[(i // len(BAD_QR_BODIES)) % networks]
                i += 1
                a.outcome.sent += 1
                try:
                    async with session.post(
                        f"{a.url}/api/qr", data=body,
                        headers={"Content-Type": "application/json"},
                    ) as response:  # fmt: skip
                        await response.read()
                        key = str(response.status)
                except aiohttp.ClientError as exc:
                    key = type(exc).__name__
                statuses[key] = statuses.get(key, 0) + 1
                if key == "429":
                    await asyncio.sleep(min(0.05, a.left()))
        finally:
            for session in sessions:
                await session.close()
        a.outcome.notes.update(networks=networks, statuses=statuses)

    return attack


HEAD_TARGETS = ("/data?max_chars=50", "/data?format=tokens&max_tokens=16", "/", "/api/status")


def head_pipeline(*, max_requests: int = 400) -> Attacker:
    """A HEAD pipelined with a ``GET /healthz`` on one connection, as a proxy that reuses
    connections sends them: the bytes after the HEAD's head must be the next response. Notes:
    ``stray_bodies``, the HEADs answered with a body (a proxy would misread the next response)."""

    async def attack(a: Attack) -> None:
        stray = 0
        while not a.over() and a.outcome.sent < max_requests:
            target = HEAD_TARGETS[a.outcome.sent % len(HEAD_TARGETS)]
            a.outcome.sent += 1
            a.outcome.connections += 1
            request = (
                f"HEAD {target} HTTP/1.1\r\nHost: x\r\n\r\n"
                "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            )
            try:
                reader, writer = await asyncio.open_connection(a.host, a.port)
            except OSError as exc:
                a.outcome.closes[type(exc).__name__] += 1
                continue
            try:
                writer.write(request.encode())
                data = await asyncio.wait_for(reader.read(), min(2.0, a.left() + 0.5))
            except (OSError, TimeoutError) as exc:
                a.outcome.closes[type(exc).__name__] += 1
                continue
            finally:
                writer.close()
            rest = data.partition(b"\r\n\r\n")[2]
            if not rest.startswith(b"HTTP/1.1 "):
                stray += 1
            await asyncio.sleep(0.01)  # a proxy's pace, not a flood
        a.outcome.notes.update(networks=1, stray_bodies=stray)

    return attack


# Hello fields a stranger used to get shown to a host as if trusted (docs/PROTOCOL.md, hello).
HOSTILE_HELLOS: tuple[tuple[str, dict[str, object]], ...] = (
    (
        "mallory",
        {
            "kind": "browser",
            "backend": "webgpu \u00b7 verified: your own device, "
            "approved before \u2014 click Approve",
        },
    ),
    ("mallory", {"kind": "browser", "backend": "js-cpu\u202e"}),
    ("mallory", {"kind": "browser", "backend": "js-cpu\n\x1b[31m"}),
    ("mallory", {"kind": "browser", "backend": "js-cpu", "tokens_per_s": 1e300}),
    ("\u3164", {"kind": "browser", "backend": "js-cpu"}),  # invisible: shown as device-XXXX
    ("\u2800\u034f", {"kind": "browser", "backend": "js-cpu"}),
    ("Bob\u202eevil", {"kind": "browser", "backend": "js-cpu"}),
)


def hostile_hellos(*, max_connections: int = 40) -> Attacker:
    """Ask to join the bystanders' room with each of ``HOSTILE_HELLOS`` in turn. Notes:
    ``refused`` (answered ``bad-message``), ``pending`` (queued for the host: only the invisible
    names, whose requests reach the host under the ``device-XXXX`` fallback)."""

    async def attack(a: Attack) -> None:
        refused = pending = 0
        async with aiohttp.ClientSession() as session:
            for i in range(max_connections):
                if a.over():
                    break
                name, device = HOSTILE_HELLOS[i % len(HOSTILE_HELLOS)]
                a.outcome.connections += 1
                try:
                    ws = await session.ws_connect(f"{a.ws_url}?room={a.room}")
                except aiohttp.WSServerHandshakeError as exc:
                    a.outcome.closes[f"http-{exc.status}"] += 1
                    await asyncio.sleep(min(0.5, a.left()))
                    continue
                hello = {"type": "hello", "version": 1, "name": name, "device": device}
                await ws.send_str(json.dumps(hello))
                a.outcome.sent += 1
                with contextlib.suppress(TimeoutError):
                    frame = await ws.receive(timeout=min(2.0, a.left() + 0.5))
                    message = json.loads(frame.data) if frame.type is aiohttp.WSMsgType.TEXT else {}
                    if message.get("type") == "pending":
                        pending += 1
                    elif message.get("type") == "error":
                        a.outcome.errors[str(message.get("code"))] += 1
                        refused += message.get("code") == "bad-message"
                await ws.close()
        a.outcome.notes.update(networks=1, refused=refused, pending=pending)

    return attack


# The scenarios ``daisychain bench signaling`` runs, by name (each also bounded by the run's
# attack time).
SCENARIOS: dict[str, Callable[[], Attacker]] = {
    "qr-burst": lambda: qr_burst(networks=20),
    "bad-hello-loop": lambda: bad_hello_loop(max_connections=100_000),
    "malformed-http": lambda: malformed_http(max_requests=100_000),
    "subprotocol-upgrades": lambda: subprotocol_upgrades(max_connections=100_000),
    "qr-bad-bodies": lambda: qr_bad_bodies(),
    "head-pipeline": lambda: head_pipeline(),
    "hostile-hellos": lambda: hostile_hellos(),
}
