"""Hostile clients of the signaling server, bounded loopback attackers for ``hostile.run_hostile``.

Each factory returns an ``Attacker``: a coroutine that attacks until its count or its deadline
runs out, records what it saw in ``attack.outcome`` and closes everything it opened. The tests
(``tests/server/test_server_hostile.py``) and ``daisychain bench signaling`` run the same ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from daisychain.bench.rig.hostile import (
    Attack,
    Attacker,
    AttackOutcome,
    raw_websocket,
    read_until_closed,
    text_frame,
)

HELLO: dict[str, Any] = {"type": "hello", "version": 1, "name": "mallory", "device": {}}
_WAIT_S = 5.0


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def bad_frames(depth: int, partner: str) -> list[str]:
    """Frames ``json.loads`` accepts that the relay must never see: deep nesting, non-finite."""
    deep = json.dumps(_nested(depth))
    return [
        f'{{"type":"broadcast","data":{{"x":{deep}}}}}',
        '{"type":"broadcast","data":{"x":NaN}}',
        f'{{"type":"signal","to":"{partner}","data":{{"x":{deep}}}}}',
        f'{{"type":"signal","to":"{partner}","data":{{"x":[Infinity,-Infinity,1e999]}}}}',
    ]


async def _receive(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    """The next message of ``kind`` (others skipped); an ``error`` or a close raises."""
    deadline = time.monotonic() + _WAIT_S
    while (left := deadline - time.monotonic()) > 0:
        frame = await ws.receive(timeout=left)
        if frame.type is not aiohttp.WSMsgType.TEXT:
            raise ConnectionError(f"closed ({ws.close_code}) while waiting for {kind}")
        message: dict[str, Any] = json.loads(frame.data)
        if message["type"] == kind:
            return message
        if message["type"] == "error":
            raise _Refused(message["code"])
    raise TimeoutError(f"no {kind} within {_WAIT_S} s")


class _Refused(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


async def _own_room(
    a: Attack, session: aiohttp.ClientSession, room: str
) -> tuple[aiohttp.ClientWebSocketResponse, aiohttp.ClientWebSocketResponse, str]:
    """Two attacker sockets in a fresh room: (host, admitted member, host id)."""
    host = await session.ws_connect(f"{a.ws_url}?room={room}")
    a.outcome.connections += 1
    await host.send_json(HELLO)
    host_id = str((await _receive(host, "welcome"))["id"])
    member = await session.ws_connect(f"{a.ws_url}?room={room}")
    a.outcome.connections += 1
    await member.send_json(HELLO)
    request = await _receive(host, "join-request")
    await host.send_json({"type": "approve", "peer": request["peer"]["id"]})
    await _receive(member, "welcome")
    return host, member, host_id


def nested_flood(*, depth: int = 800, per_s: float = 20.0, max_messages: int = 2000) -> Attacker:
    """A client in a room of its own (with a partner to signal) sends ``per_s`` deeply nested
    or non-finite messages a second, reconnecting into a fresh room whenever it is thrown out."""

    async def attack(a: Attack) -> None:
        relayed = [0]
        async with aiohttp.ClientSession() as session:
            for round_ in range(200):
                if a.over() or a.outcome.sent >= max_messages:
                    break
                try:
                    partner, sender, partner_id = await _own_room(
                        a, session, f"mallory-nest-{round_:04d}"
                    )
                except (_Refused, aiohttp.ClientError, ConnectionError, TimeoutError) as exc:
                    a.outcome.errors[getattr(exc, "code", type(exc).__name__)] += 1
                    await asyncio.sleep(min(0.5, a.left()))
                    continue
                drain = asyncio.create_task(_count_relayed(partner, relayed))
                errors = asyncio.create_task(read_until_closed(sender, a.outcome, a.left() + 2))
                frames = bad_frames(depth, partner_id)
                i = 0
                while not errors.done() and not a.over() and a.outcome.sent < max_messages:
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        await sender.send_str(frames[i % len(frames)])
                        a.outcome.sent += 1
                    i += 1
                    await asyncio.sleep(1.0 / per_s)
                await sender.close()
                await errors
                await partner.close()
                drain.cancel()
                await asyncio.gather(drain, return_exceptions=True)
        a.outcome.notes["relayed_to_partner"] = relayed[0]

    return attack


async def _count_relayed(ws: aiohttp.ClientWebSocketResponse, relayed: list[int]) -> None:
    async for frame in ws:
        if frame.type is aiohttp.WSMsgType.TEXT and json.loads(frame.data)["type"] in (
            "signal",
            "broadcast",
        ):
            relayed[0] += 1


def slow_readers(
    *, readers: int = 4, feeders: int = 2, message_bytes: int = 60_000, per_s: float = 40.0
) -> Attacker:
    """``readers`` clients that never read a byte, fed ``message_bytes`` signals by ``feeders``
    reading clients in the same room, until the server has dropped every one of them."""

    async def attack(a: Attack) -> None:
        room = "mallory-slow-0001"
        writers: list[asyncio.StreamWriter] = []
        feeding: list[aiohttp.ClientWebSocketResponse] = []
        watchers: list[asyncio.Task[None]] = []
        async with aiohttp.ClientSession() as session:
            try:
                host = await session.ws_connect(f"{a.ws_url}?room={room}")
                feeding.append(host)
                a.outcome.connections += 1
                await host.send_json(HELLO)
                await _receive(host, "welcome")
                targets: list[str] = []
                # One at a time, each approved before the next asks: a room takes only a few
                # waiting requests from one address.
                for _ in range(readers):
                    _reader, writer = await raw_websocket(
                        a.host, a.port, f"/ws?room={room}", receive_buffer=4096
                    )
                    writers.append(writer)
                    a.outcome.connections += 1
                    writer.write(text_frame(json.dumps({**HELLO, "name": "slow-reader"})))
                    request = await _receive(host, "join-request")
                    await host.send_json({"type": "approve", "peer": request["peer"]["id"]})
                    targets.append(request["peer"]["id"])
                for _ in range(feeders - 1):
                    feeder = await session.ws_connect(f"{a.ws_url}?room={room}")
                    feeding.append(feeder)
                    a.outcome.connections += 1
                    await feeder.send_json({**HELLO, "name": "feeder"})
                    request = await _receive(host, "join-request")
                    await host.send_json({"type": "approve", "peer": request["peer"]["id"]})
                    await _receive(feeder, "welcome")
                gone: set[str] = set()
                watchers = [asyncio.create_task(_watch(ws, gone, a.outcome)) for ws in feeding]
                pad = "x" * message_bytes
                n = 0
                while not a.over() and not gone.issuperset(targets):
                    for feeder in feeding:
                        alive = [t for t in targets if t not in gone]
                        if not alive:
                            break
                        to = alive[n % len(alive)]
                        n += 1
                        with contextlib.suppress(ConnectionError, RuntimeError):
                            await feeder.send_json(
                                {"type": "signal", "to": to, "data": {"sdp": pad}}
                            )
                            a.outcome.sent += 1
                    await asyncio.sleep(1.0 / per_s)
                a.outcome.notes["readers"] = readers
                a.outcome.notes["readers_dropped"] = len(gone.intersection(targets))
            finally:
                for writer in writers:
                    writer.close()
                for ws in feeding:
                    await ws.close()
                for task in watchers:
                    task.cancel()
                await asyncio.gather(*watchers, return_exceptions=True)

    return attack


async def _watch(ws: aiohttp.ClientWebSocketResponse, gone: set[str], out: AttackOutcome) -> None:
    async for frame in ws:
        if frame.type is not aiohttp.WSMsgType.TEXT:
            return
        message = json.loads(frame.data)
        if message["type"] == "peer-left":
            gone.add(message["peer"])
        elif message["type"] == "error":
            out.errors[message["code"]] += 1


def hello_flood(
    *, max_connections: int = 1000, parallel: int = 8, per_s: float | None = None
) -> Attacker:
    """Connect and say hello, each time into a new room code (squatting it as host), holding
    every socket the server lets it keep: as fast as possible, or ``per_s`` hellos a second."""

    async def attack(a: Attack) -> None:
        held: list[aiohttp.ClientWebSocketResponse] = []
        counter = iter(range(max_connections))

        async def one(session: aiohttp.ClientSession) -> None:
            for i in counter:
                if a.over():
                    return
                if per_s is not None:
                    await asyncio.sleep(max(0.0, started + i / per_s - time.monotonic()))
                a.outcome.connections += 1
                try:
                    ws = await session.ws_connect(f"{a.ws_url}?room=squat-{i:06d}")
                except aiohttp.WSServerHandshakeError as exc:
                    a.outcome.closes[f"http-{exc.status}"] += 1
                    continue
                except aiohttp.ClientError as exc:
                    a.outcome.closes[type(exc).__name__] += 1
                    continue
                await ws.send_json(HELLO)
                a.outcome.sent += 1
                try:
                    await _receive(ws, "welcome")
                    held.append(ws)
                except _Refused as exc:
                    a.outcome.errors[exc.code] += 1
                    await read_until_closed(ws, a.outcome, min(_WAIT_S, a.left() + 1))
                    await ws.close()
                except (ConnectionError, TimeoutError):
                    a.outcome.closes[str(ws.close_code)] += 1
                    await ws.close()

        started = time.monotonic()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            await asyncio.gather(*(one(session) for _ in range(parallel)))
            a.outcome.notes["rooms_squatted"] = len(held)
            a.outcome.notes["hellos_per_s"] = round(
                a.outcome.sent / max(1e-9, time.monotonic() - started), 1
            )
            for ws in held:
                await ws.close()

    return attack


def join_flood(*, max_requests: int = 2000) -> Attacker:
    """Ask to join the bystanders' room, withdraw at once and ask again (the deny-and-reconnect
    loop a host sees as a stream of requests)."""

    async def attack(a: Attack) -> None:
        reached = 0
        async with aiohttp.ClientSession() as session:
            for _ in range(max_requests):
                if a.over():
                    break
                a.outcome.connections += 1
                try:
                    ws = await session.ws_connect(f"{a.ws_url}?room={a.room}")
                except aiohttp.WSServerHandshakeError as exc:
                    a.outcome.closes[f"http-{exc.status}"] += 1  # refused before the upgrade
                    continue
                except aiohttp.ClientError as exc:
                    a.outcome.closes[type(exc).__name__] += 1
                    continue
                await ws.send_json(HELLO)
                a.outcome.sent += 1
                try:
                    await _receive(ws, "pending")
                    reached += 1
                except _Refused as exc:
                    a.outcome.errors[exc.code] += 1
                    await read_until_closed(ws, a.outcome, min(_WAIT_S, a.left() + 1))
                except (ConnectionError, TimeoutError):
                    a.outcome.closes[str(ws.close_code)] += 1
                await ws.close()
        a.outcome.notes["requests_pending"] = reached

    return attack


def pending_squat(
    *, squatters: int = 16, guest_address: str = "127.0.1.2", read_s: float = 0.5
) -> Attacker:
    """``squatters`` clients from as many addresses of one /24 (127.0.0.2 on;
    a loopback source address each, so the server, trusting no proxy header, sees them apart)
    ask to join the bystanders' room and stay waiting, filling its list (``max_pending``, 16);
    then a guest from another /24 (``guest_address``) asks, and then one more squatter.

    Notes: ``squatters_pending``; ``guest_reached_host`` (the server answered the guest
    ``pending``, which it sends in the same step as the host's ``join-request``: the test checks
    the host's own count); ``squatters_dropped``, those told ``room-busy`` while they waited
    (each gave its place to the guest); ``late_squatter_refused``."""

    async def attack(a: Attack) -> None:
        sessions: list[aiohttp.ClientSession] = []
        held: list[aiohttp.ClientWebSocketResponse] = []

        async def ask(address: str, name: str) -> aiohttp.ClientWebSocketResponse | None:
            """A request from ``address``: its socket if the server queued it, else None."""
            connector = aiohttp.TCPConnector(local_addr=(address, 0))
            sessions.append(aiohttp.ClientSession(connector=connector))
            a.outcome.connections += 1
            try:
                ws = await sessions[-1].ws_connect(f"{a.ws_url}?room={a.room}")
            except aiohttp.WSServerHandshakeError as exc:
                a.outcome.closes[f"http-{exc.status}"] += 1
                return None
            held.append(ws)
            await ws.send_json({**HELLO, "name": name})
            a.outcome.sent += 1
            try:
                await _receive(ws, "pending")
            except _Refused as exc:
                a.outcome.errors[exc.code] += 1
                await read_until_closed(ws, a.outcome, min(_WAIT_S, a.left() + 1))
                return None
            return ws

        async def told_busy(ws: aiohttp.ClientWebSocketResponse) -> bool:
            with contextlib.suppress(TimeoutError):
                frame = await ws.receive(timeout=read_s)
                if frame.type is aiohttp.WSMsgType.TEXT:
                    message: dict[str, Any] = json.loads(frame.data)
                    return message.get("type") == "error" and message.get("code") == "room-busy"
            return False

        try:
            waiting = []
            for n in range(squatters):
                if a.over():
                    break
                ws = await ask(f"127.0.0.{2 + n}", f"mallory-{n}")
                if ws is not None:
                    waiting.append(ws)
            a.outcome.notes["squatters_pending"] = len(waiting)
            guest = await ask(guest_address, "guest")
            a.outcome.notes["guest_reached_host"] = guest is not None
            late = await ask(f"127.0.0.{2 + squatters}", "mallory-late")
            a.outcome.notes["late_squatter_refused"] = late is None
            busy = await asyncio.gather(*(told_busy(ws) for ws in waiting))
            a.outcome.notes["squatters_dropped"] = sum(busy)
        finally:
            for ws in held:
                await ws.close()
            for session in sessions:
                await session.close()

    return attack


def socket_hog(*, max_connections: int = 200, hold: bool = False) -> Attacker:
    """Open WebSockets from one address without a hello, as many as it may, and (``hold``) keep
    them open until the deadline."""

    async def attack(a: Attack) -> None:
        held: list[aiohttp.ClientWebSocketResponse] = []
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            try:
                for _ in range(max_connections):
                    if a.over():
                        break
                    a.outcome.connections += 1
                    try:
                        ws = await session.ws_connect(a.ws_url)
                    except aiohttp.WSServerHandshakeError as exc:
                        a.outcome.closes[f"http-{exc.status}"] += 1  # refused before the upgrade
                        continue
                    # A ping (allowed before hello) tells a held socket from a refused one: the
                    # first answer is a pong, or the refusal.
                    await ws.send_json({"type": "ping"})
                    a.outcome.sent += 1
                    frame = await ws.receive(timeout=_WAIT_S)
                    reply = json.loads(frame.data) if frame.type is aiohttp.WSMsgType.TEXT else {}
                    if reply.get("type") == "pong":
                        held.append(ws)
                        continue
                    a.outcome.errors[str(reply.get("code", frame.type.name))] += 1
                    await read_until_closed(ws, a.outcome, _WAIT_S)
                    await ws.close()
                a.outcome.notes["sockets_held"] = len(held)
                while hold and not a.over():
                    await asyncio.sleep(min(0.1, a.left()))
            finally:
                for ws in held:
                    await ws.close()

    return attack


def _fuzzed(rng: random.Random, room: str) -> str:
    """One hostile text frame: broken JSON, a known type with absurd values (4,000-digit
    numbers, 3,000-character strings, the room code in a field that echoes), or noise."""
    digits = "9" * rng.randint(1000, 4000)
    long_text = "".join(rng.choice('ab\\"{}[] é\u2028') for _ in range(rng.randint(100, 3000)))
    forms = [
        lambda: long_text,
        lambda: '{"type":"hello","version":' + digits + "}",
        lambda: json.dumps({"type": "hello", "version": 1, "name": long_text}),
        lambda: json.dumps({"type": "hello", "version": 1, "room": f"{room}-{long_text}"}),
        lambda: json.dumps({"type": long_text, "version": int(digits[:600])}),
        lambda: json.dumps({"type": "signal", "to": long_text, "data": {"x": digits}}),
        lambda: "[" * rng.randint(1, 900) + digits,
    ]
    return rng.choice(forms)()


def fuzz_frames(*, max_messages: int = 10_000, seed: int = 23) -> Attacker:
    """Fuzzed WebSocket text frames (``_fuzzed``) as fast as the server takes them, each into a
    private room's URL; when the server closes the socket (out of strikes) the attacker opens
    another, so it also measures what one client's reconnecting costs the log."""

    async def attack(a: Attack) -> None:
        rng = random.Random(seed)
        room = "fuzzroomcode-" + "".join(rng.choice("abcdefgh") for _ in range(8))
        a.outcome.notes["room_code"] = room
        async with aiohttp.ClientSession() as session:
            while a.outcome.sent < max_messages and not a.over():
                a.outcome.connections += 1
                try:
                    ws = await session.ws_connect(f"{a.ws_url}?room={room}")
                except aiohttp.WSServerHandshakeError as exc:
                    a.outcome.closes[f"http-{exc.status}"] += 1
                    await asyncio.sleep(0.05)
                    continue
                try:
                    while a.outcome.sent < max_messages and not a.over() and not ws.closed:
                        await ws.send_str(_fuzzed(rng, room))
                        a.outcome.sent += 1
                        with contextlib.suppress(TimeoutError):
                            frame = await asyncio.wait_for(ws.receive(), 0.5)
                            if frame.type is not aiohttp.WSMsgType.TEXT:
                                a.outcome.closes[str(ws.close_code)] += 1
                                break
                except (ConnectionError, aiohttp.ClientError):
                    a.outcome.closes["reset"] += 1
                finally:
                    await ws.close()

    return attack


# The scenarios ``daisychain bench signaling`` runs, by name, at their benchmark sizes (each is
# also bounded by the run's attack time).
SCENARIOS: dict[str, Callable[[], Attacker]] = {
    "nested-flood": lambda: nested_flood(depth=800, per_s=20.0, max_messages=100_000),
    "slow-readers": lambda: slow_readers(readers=4, feeders=2, message_bytes=60_000),
    "hello-flood": lambda: hello_flood(max_connections=100_000),
    # The rate issue 8 observed from one address (152 hellos/s), beside the full-speed flood.
    "hello-flood-150": lambda: hello_flood(max_connections=100_000, parallel=2, per_s=150.0),
    "join-flood": lambda: join_flood(max_requests=100_000),
    "pending-squat": lambda: pending_squat(squatters=16),
    "socket-hog": lambda: socket_hog(max_connections=80, hold=True),
    "fuzz-frames": lambda: fuzz_frames(max_messages=10_000),
}
