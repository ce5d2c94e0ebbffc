"""Hostile HTTP clients against the real server process while a bystander pair keeps relaying
(``tests/hostile_harness.py``): slowloris and silent connections, and ``/data`` requests whose
``X-Forwarded-For`` carries a forged line in front of the proxy's.

Each scenario asserts that the server refused what it should, that the bystanders got every
relay, and that the server's RSS is back within 20 MB of its start once the attacker is gone.
Bystander latency is printed and kept as JSON (``pytest -rA`` shows it), never asserted: timing
belongs to ``daisychain bench signaling`` (its hostile scenarios) and ``daisychain bench data``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import aiohttp
from multidict import CIMultiDict

from hostile_harness import (
    Attack,
    Attacker,
    assert_bystanders_unharmed,
    assert_memory_returned,
    record,
    run_hostile,
)

ATTACK_S = 6.0
HEAD_TIMEOUT_S = 1.0  # the server's --head-timeout in the slowloris scenario
# What the real client's proxy line names: a public address, so --trust-proxy believes it.
PROXY_SEEN = "8.8.4.4"
DATA_BURST, DATA_PER_S = 20, 2.0  # DataConfig's production limits
CONNECTIONS_PER_ADDRESS = 512  # HttpLimits.max_connections_per_address


def slowloris(*, connections: int = 96, byte_interval_s: float = 0.2) -> Attacker:
    """``connections`` sockets at once, reopened as soon as the server drops one: the even ones
    trickle a request head a byte every ``byte_interval_s``, the odd ones say nothing."""

    async def hold(a: Attack, index: int) -> None:
        trickle = index % 2 == 0
        head = f"GET /healthz HTTP/1.1\r\nHost: {a.host}\r\nX-Pad-{index}: ".encode() + b"a" * 4000
        while not a.over():
            try:
                reader, writer = await asyncio.open_connection(a.host, a.port)
            except OSError:
                a.outcome.closes["connect-refused"] += 1
                await asyncio.sleep(0.1)
                continue
            a.outcome.connections += 1
            outcome = "open-at-deadline"
            for byte in head:
                if a.over():
                    break
                if trickle:
                    try:
                        writer.write(bytes([byte]))
                        await writer.drain()
                    except ConnectionError:
                        outcome = "closed-by-server"
                        break
                    a.outcome.sent += 1
                try:
                    data = await asyncio.wait_for(reader.read(1024), min(a.left(), byte_interval_s))
                except TimeoutError:
                    continue
                except ConnectionError:
                    data = b""
                outcome = "closed-by-server" if data == b"" else "answered"
                break
            a.outcome.closes[outcome] += 1
            writer.close()

    async def attack(a: Attack) -> None:
        await asyncio.gather(*(hold(a, index) for index in range(connections)))

    return attack


def silent_socket_flood(*, sockets: int = 1500, parallel: int = 100) -> Attacker:
    """Open ``sockets`` connections from one address, ``parallel`` at a time, send nothing and
    hold every one the server keeps until the attack ends."""

    async def attack(a: Attack) -> None:
        held: list[asyncio.StreamWriter] = []

        async def one() -> None:
            try:
                reader, writer = await asyncio.open_connection(a.host, a.port)
            except OSError:
                a.outcome.closes["connect-failed"] += 1
                return
            a.outcome.connections += 1
            try:
                data = await asyncio.wait_for(reader.read(100), 0.5)
            except TimeoutError:
                held.append(writer)  # accepted: the server waits for a request head
                return
            a.outcome.closes["http-429" if data.startswith(b"HTTP/1.1 429 ") else "other"] += 1
            writer.close()

        try:
            for start in range(0, sockets, parallel):
                if a.over():
                    break
                await asyncio.gather(*(one() for _ in range(min(parallel, sockets - start))))
            a.outcome.notes["held"] = len(held)
            while not a.over():
                await asyncio.sleep(min(0.1, a.left()))
        finally:
            for writer in held:
                writer.close()

    return attack


def forged_forwarded_for(*, parallel: int = 4, joins: int = 6) -> Attacker:
    """``/data`` as fast as it answers, each request forging a fresh first ``X-Forwarded-For``
    line in front of the proxy's line; and a few WebSocket joins doing the same."""

    def lines(index: int) -> CIMultiDict[str]:
        forged = f"1.{index // 250 % 250}.{index % 250}.9"  # a public address, new each time
        return CIMultiDict([("X-Forwarded-For", forged), ("X-Forwarded-For", PROXY_SEEN)])

    async def attack(a: Attack) -> None:
        counter = itertools.count()
        async with aiohttp.ClientSession() as session:

            async def data_requests() -> None:
                while not a.over():
                    url = f"{a.url}/data?max_chars=200"
                    async with session.get(url, headers=lines(next(counter))) as response:
                        await response.read()
                        a.outcome.closes[f"http-{response.status}"] += 1
                        a.outcome.sent += 1

            async def join(index: int) -> str:
                async with session.ws_connect(a.ws_url, headers=lines(index)) as ws:
                    hello = {"type": "hello", "version": 1, "name": f"f{index}", "device": {}}
                    await ws.send_json(hello)
                    welcome = await ws.receive_json(timeout=10)
                    assert welcome["type"] == "welcome", welcome
                    group: str = welcome["group"]["id"]
                    return group

            await asyncio.gather(*(data_requests() for _ in range(parallel)))
            groups = [await join(index) for index in range(joins)]
            a.outcome.notes["join_groups"] = sorted(set(groups))
            a.outcome.connections = joins

    return attack


async def test_slowloris_and_silent_connections_are_closed_by_the_head_deadline(
    tmp_path: Path,
) -> None:
    attacker = slowloris()
    result = await run_hostile(
        attacker,
        tmp_path,
        name="slowloris",
        server_args=["--head-timeout", str(HEAD_TIMEOUT_S)],
        attack_s=ATTACK_S,
    )
    summary = record(result, tmp_path)
    closes = result.attack.closes
    assert closes["answered"] == 0, summary
    # Every one of the 96 slots was cut off by the server at least once (the attack lasts
    # several deadlines); only a connection opened in the last deadline may still be open.
    assert closes["closed-by-server"] >= 96, summary
    assert closes["open-at-deadline"] <= 96, summary
    assert result.log_tracebacks == 0, summary
    assert_bystanders_unharmed(result)
    assert_memory_returned(result)


async def test_a_socket_flood_from_one_address_is_capped(tmp_path: Path) -> None:
    result = await run_hostile(
        silent_socket_flood(), tmp_path, name="silent-socket-flood", attack_s=ATTACK_S
    )
    summary = record(result, tmp_path)
    # The bystanders' sockets share the address (127.0.0.1) and count against it too.
    assert (
        CONNECTIONS_PER_ADDRESS - 10 <= result.attack.notes["held"] <= CONNECTIONS_PER_ADDRESS - 2
    )
    assert result.attack.closes["http-429"] > 0, summary
    assert set(result.attack.closes) == {"http-429"}, summary
    assert_bystanders_unharmed(result)
    assert_memory_returned(result)


async def test_a_forged_forwarded_for_line_buys_no_data_budget_and_no_group(
    tmp_path: Path,
) -> None:
    result = await run_hostile(
        forged_forwarded_for(),
        tmp_path,
        name="forged-two-line-xff",
        server_args=["--trust-proxy"],
        attack_s=ATTACK_S,
    )
    summary = record(result, tmp_path)
    closes = result.attack.closes
    # One budget for the proxy-seen address, whatever the forged lines say: the burst, then
    # the refill over the attack (+1 for a refill landing as it ends).
    allowed = DATA_BURST + int(DATA_PER_S * result.attack_s) + 1
    assert 0 < closes["http-200"] <= allowed, summary
    assert closes["http-429"] > 0, summary
    assert set(closes) == {"http-200", "http-429"}, summary
    # Every join with a forged first line landed in the one group of the proxy-seen address.
    assert len(result.attack.notes["join_groups"]) == 1, summary
    assert result.log_tracebacks == 0, summary
    assert_bystanders_unharmed(result)
    assert_memory_returned(result)
    (tmp_path / "checked.json").write_text(json.dumps({"allowed": allowed}))


def tokenize_flood(*, requests: int = DATA_BURST, max_tokens: int = 131_072) -> Attacker:
    """``requests`` (one client's whole burst) ``format=tokens`` requests of the largest size at
    once: ~1 MB of text each to tokenize."""

    async def attack(a: Attack) -> None:
        async with aiohttp.ClientSession() as session:

            async def one(seed: int) -> None:
                url = f"{a.url}/data?format=tokens&max_tokens={max_tokens}&seed={seed}"
                async with session.get(url) as response:
                    body = await response.read()
                    a.outcome.closes[f"http-{response.status}"] += 1
                    a.outcome.notes.setdefault("token_bytes", []).append(len(body))

            await asyncio.gather(*(one(seed) for seed in range(requests)))
            a.outcome.sent = requests

    return attack


async def test_a_tokenize_flood_leaves_the_bystanders_relaying(tmp_path: Path) -> None:
    result = await run_hostile(tokenize_flood(), tmp_path, name="tokenize-flood", attack_s=60.0)
    summary = record(result, tmp_path)
    assert result.attack.closes == {"http-200": DATA_BURST}, summary
    assert result.attack.notes["token_bytes"] == [2 * 131_072] * DATA_BURST, summary
    assert result.log_tracebacks == 0, summary
    assert_bystanders_unharmed(result)
    assert_memory_returned(result)
