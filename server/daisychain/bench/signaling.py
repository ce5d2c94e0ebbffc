"""``daisychain bench signaling``: many WebSocket clients relaying through one server on loopback.

The server runs in a child process (``python -m daisychain.server --trust-proxy --offline``) so
its CPU time can be read from ``/proc/<pid>/stat`` apart from the clients'. Clients are spread
over automatic groups (one fake public address per group, via X-Forwarded-For) and private rooms
(every 5th group: a host approves the others). Once every client knows its whole group, each
round every client sends one ``signal`` to a random member of its group and the round ends when
all of them arrived, so each round is a burst of one message per client in flight at once.

Reported: p50/p99 relay latency under those bursts (send to receive, both timed in this process);
the same for single messages sent one at a time (``idle_*``); server CPU seconds per 1000 relayed
messages; and, as a baseline measured in the same run, a burst of ping/pong round trips through
the same sockets (``relay_vs_ping_p50_ratio``). The clients share one Python process, so on a
small machine their own scheduling is part of every latency.

Then the hostile clients (``--attacks``: ``bench.rig.attacks.SCENARIOS`` and
``bench.rig.http_attacks.SCENARIOS``, docs/SERVER.md), each against a fresh server
(``bench.rig.hostile.run_hostile``): a bystander pair
relays ``signal`` messages through the server in a child process of its own, first alone for
``--attack-s`` seconds (the baseline), then while the attacker runs for as long again. Reported per
attack, under ``hostile``: the bystanders' relay p50/p99 under attack next to their own baseline
from the same run (``relay_p50_ratio``, ``relay_p99_ratio``), relays delivered of sent, the
server's RSS before, at its peak and after the attacker left, and what the attacker met.
The bystanders also poll ``/healthz`` every 0.1 s: ``healthz_p50_ratio`` and ``healthz_p99_ratio``
are its latency under attack over its own baseline (``qr-burst``: what drawing QR codes for 20
client networks costs everyone else). ``log_bytes_per_message`` and
``log_bytes_per_minute_per_network`` are what the attack cost the server's log.
``--hostile-only`` skips the 1000-client part, ``--no-hostile`` the attacks."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from daisychain.bench.rig import attacks, http_attacks
from daisychain.bench.rig.hostile import run_hostile

ROOM_EVERY = 5  # every 5th group is a private room with host approval
SCENARIOS = {**attacks.SCENARIOS, **http_attacks.SCENARIOS}


@dataclass(eq=False)
class _Client:
    index: int
    group: int
    room: str | None
    ws: aiohttp.ClientWebSocketResponse | None = None
    id: str = ""
    members: set[str] = field(default_factory=set)
    ping_sent: dict[int, float] = field(default_factory=dict)


@dataclass
class _Totals:
    relay_latency_s: list[float] = field(default_factory=list)
    ping_latency_s: list[float] = field(default_factory=list)
    errors: int = 0
    received: int = 0
    target: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def count(self) -> None:
        self.received += 1
        if self.received >= self.target:
            self.done.set()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clients", type=int, default=1000, help="WebSocket clients")
    parser.add_argument("--group-size", type=int, default=10, help="clients per group or room")
    parser.add_argument("--rounds", type=int, default=10, help="relay rounds (1 message/client)")
    parser.add_argument("--idle-samples", type=int, default=200, help="one-at-a-time relays")
    parser.add_argument("--payload", type=int, default=300, help="bytes of fake SDP per message")
    parser.add_argument("--timeout", type=float, default=240.0, help="give up after this long")
    hostile = parser.add_argument_group("hostile clients")
    hostile.add_argument(
        "--attacks", default=",".join(SCENARIOS),
        help=f"comma-separated attacks to run (default: all of {', '.join(SCENARIOS)})",
    )  # fmt: skip
    hostile.add_argument(
        "--attack-s", type=float, default=20.0,
        help="seconds of baseline, then at most as long under each attack (~800 samples each: "
        "a p99 that one stall of a shared machine does not decide)",
    )  # fmt: skip
    only = hostile.add_mutually_exclusive_group()
    only.add_argument("--hostile-only", action="store_true", help="skip the 1000-client relay")
    only.add_argument("--no-hostile", action="store_true", help="skip the attacks")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _cpu_seconds(pid: int) -> float:
    # Fields 14 and 15 of /proc/<pid>/stat: user and system time in clock ticks (after the
    # parenthesised command name, which may contain spaces).
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _reader(client: _Client, totals: _Totals) -> None:
    assert client.ws is not None
    async for frame in client.ws:
        if frame.type is not aiohttp.WSMsgType.TEXT:
            break
        message = json.loads(frame.data)
        kind = message["type"]
        if kind == "signal":
            totals.relay_latency_s.append(time.perf_counter() - message["data"]["t"])
            totals.count()
        elif kind == "pong":
            totals.ping_latency_s.append(time.perf_counter() - client.ping_sent[message["nonce"]])
            totals.count()
        elif kind == "welcome":
            client.id = message["id"]
            client.members = {member["id"] for member in message["members"]}
        elif kind == "peer-joined":
            client.members.add(message["peer"]["id"])
        elif kind == "peer-left":
            client.members.discard(message["peer"])
        elif kind == "join-request":
            await client.ws.send_str(json.dumps({"type": "approve", "peer": message["peer"]["id"]}))
        elif kind == "error":
            totals.errors += 1


async def _wait(predicate: Any, deadline: float, what: str) -> None:
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench signaling: timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _run(args: argparse.Namespace, port: int, pid: int) -> dict[str, Any]:
    deadline = time.monotonic() + args.timeout
    base = f"http://127.0.0.1:{port}"
    totals = _Totals()
    groups = max(1, args.clients // args.group_size)
    clients = []
    for i in range(args.clients):
        group = i % groups
        room = f"bench-room-{group:05d}" if group % ROOM_EVERY == 0 else None
        clients.append(_Client(index=i, group=group, room=room))
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await _wait_for_server(session, base, deadline)
        readers: list[asyncio.Task[None]] = []
        slots = asyncio.Semaphore(64)  # bound the SYN burst

        async def connect(client: _Client) -> None:
            async with slots:
                # A public address per group (11.0.0.0/8 is globally routable, never contacted).
                xff = f"11.0.{client.group // 256}.{client.group % 256}"
                url = f"{base}/ws" + (f"?room={client.room}" if client.room else "")
                client.ws = await session.ws_connect(url, headers={"X-Forwarded-For": xff})
                readers.append(asyncio.create_task(_reader(client, totals)))
                hello = {"type": "hello", "version": 1, "name": f"c{client.index}", "device": {}}
                await client.ws.send_str(json.dumps(hello))

        start = time.perf_counter()
        # Hosts first, so that room order (and who approves) is deterministic.
        for batch in (clients[:groups], clients[groups:]):
            await asyncio.gather(*(connect(client) for client in batch))
            await _wait(lambda b=batch: all(c.id for c in b), deadline, "welcomes")
        sizes = {c.group: sum(1 for d in clients if d.group == c.group) for c in clients}
        await _wait(
            lambda: all(len(c.members) == sizes[c.group] - 1 for c in clients),
            deadline,
            "full membership",
        )
        connect_s = time.perf_counter() - start

        rng = random.Random(0)
        pad = "x" * args.payload
        # Baseline: ping/pong round trips through the same sockets.
        totals.received, totals.target = 0, len(clients)
        totals.done.clear()
        for n, client in enumerate(clients):
            assert client.ws is not None
            client.ping_sent[n] = time.perf_counter()
            await client.ws.send_str(json.dumps({"type": "ping", "nonce": n}))
        await asyncio.wait_for(totals.done.wait(), max(1.0, deadline - time.monotonic()))

        cpu_before = _cpu_seconds(pid)
        relay_start = time.perf_counter()
        sent = 0
        for _ in range(args.rounds):
            senders = [c for c in clients if c.members]
            totals.received, totals.target = 0, len(senders)
            totals.done.clear()
            for client in senders:
                assert client.ws is not None
                target = rng.choice(sorted(client.members))
                data = {"t": time.perf_counter(), "sdp": pad}
                await client.ws.send_str(json.dumps({"type": "signal", "to": target, "data": data}))
            sent += len(senders)
            await asyncio.wait_for(totals.done.wait(), max(1.0, deadline - time.monotonic()))
        relay_s = time.perf_counter() - relay_start
        cpu = _cpu_seconds(pid) - cpu_before

        # Unloaded latency: one message in flight at a time.
        burst_latency = totals.relay_latency_s
        totals.relay_latency_s = []
        for _ in range(args.idle_samples):
            client = rng.choice([c for c in clients if c.members])
            assert client.ws is not None
            totals.received, totals.target = 0, 1
            totals.done.clear()
            data = {"t": time.perf_counter(), "sdp": pad}
            target = rng.choice(sorted(client.members))
            await client.ws.send_str(json.dumps({"type": "signal", "to": target, "data": data}))
            await asyncio.wait_for(totals.done.wait(), max(1.0, deadline - time.monotonic()))
        idle_latency = totals.relay_latency_s

        for client in clients:
            if client.ws is not None:
                await client.ws.close()
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)

    relay_p50 = _percentile(burst_latency, 0.5)
    ping_p50 = _percentile(totals.ping_latency_s, 0.5)
    return {
        "clients": args.clients,
        "groups": groups - len(range(0, groups, ROOM_EVERY)),
        "rooms": len(range(0, groups, ROOM_EVERY)),
        "connect_and_join_s": round(connect_s, 3),
        "messages_relayed": sent,
        "relay_messages_per_s": round(sent / relay_s, 1),
        "relay_latency_p50_ms": round(relay_p50 * 1e3, 3),
        "relay_latency_p99_ms": round(_percentile(burst_latency, 0.99) * 1e3, 3),
        "idle_relay_latency_p50_ms": round(_percentile(idle_latency, 0.5) * 1e3, 3),
        "idle_relay_latency_p99_ms": round(_percentile(idle_latency, 0.99) * 1e3, 3),
        "ping_latency_p50_ms": round(ping_p50 * 1e3, 3),
        "relay_vs_ping_p50_ratio": round(relay_p50 / ping_p50, 3),
        "server_cpu_s_per_1000_messages": round(cpu / sent * 1000, 4),
        "errors": totals.errors,
    }


async def _wait_for_server(session: aiohttp.ClientSession, base: str, deadline: float) -> None:
    while True:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(f"{base}/healthz") as response:
                if response.status == 200:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError("bench signaling: the server did not start")
        await asyncio.sleep(0.1)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    names = [name.strip() for name in args.attacks.split(",") if name.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        raise SystemExit(
            f"bench signaling: unknown attack {', '.join(unknown)}; "
            f"choose from {', '.join(SCENARIOS)}"
        )
    result: dict[str, Any] = {}
    if not args.hostile_only:
        result.update(_measure_relay(args))
    if not args.no_hostile and names:
        result["hostile"] = asyncio.run(_measure_hostile(names, args.attack_s))
    return result


async def _measure_hostile(names: list[str], attack_s: float) -> dict[str, Any]:
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="daisychain-hostile-") as tmp:
        for name in names:
            result = await run_hostile(
                SCENARIOS[name](), Path(tmp) / name, name=name,
                baseline_s=attack_s, attack_s=attack_s,
            )  # fmt: skip
            summary = result.summary()
            base, under = summary["baseline"], summary["under_attack"]
            for what, q in itertools.product(("relay", "healthz"), ("p50", "p99")):
                attacked, alone = under[f"{what}_{q}_ms"], base[f"{what}_{q}_ms"]
                ratio = attacked / alone if attacked is not None and alone else None
                summary[f"{what}_{q}_ratio"] = None if ratio is None else round(ratio, 3)
            report[name] = summary
    measured = [s for s in report.values() if s["under_attack"]["relay_p99_ms"] is not None]
    if measured:
        worst = max(measured, key=lambda s: float(s["under_attack"]["relay_p99_ms"]))
        report["worst_relay_p99_ms"] = worst["under_attack"]["relay_p99_ms"]
        report["worst_relay_p99_attack"] = worst["name"]
    return report


def _measure_relay(args: argparse.Namespace) -> dict[str, Any]:
    # Each client holds a socket here and one in the server: lift the soft descriptor limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.clients + 256)), hard))
    port = _free_port()
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "daisychain.server", "--port", str(port), "--trust-proxy"]
    command += ["--offline", "--log-level", "warning"]
    server = subprocess.Popen(command, env=env)
    try:
        return asyncio.run(_run(args, port, server.pid))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
