"""One hostile client against the real server while a bystander pair keeps relaying.

Shared by the hostile-client tests (``tests/hostile_harness.py``, ``tests/test_server_*hostile*``)
and ``daisychain bench signaling``. The server runs in a child process
(``python -m daisychain.server --port 0 --offline``) so its resident memory can be read from
``/proc/<pid>/status`` apart from the clients'. Everything stays on 127.0.0.1.

A run (``run_hostile``):

1. start the server, connect the bystanders (a host and an approved member of a private room,
   isolated from whatever the attacker joins; in a child process of their own, so that the
   attacker's client-side work does not delay their reading) and let them relay ``signal``
   messages back and forth at a fixed cadence: A -> B (one-way latency, both ends timed in
   that process) and B -> A (the echo: round trip);
2. ``baseline_s`` seconds of that with no attacker (the same-run baseline); then read the
   server's RSS (``rss_start``);
3. run the attacker coroutine until it returns or its deadline passes (it is cancelled then),
   sampling the server's RSS every 50 ms (``rss_peak``) while the bystanders keep relaying;
4. wait until every attacker connection is gone from ``/api/status`` and give the server
   ``settle_s`` to free what it held (the bystanders still relaying, as at ``rss_start``), then
   read ``rss_after``.

Every loop is bounded by a count and a deadline, and the server is always stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

HOST = "127.0.0.1"
BYSTANDER_ROOM = "bystanders-0001"
_LISTENING_RE = re.compile(r"listening on http://[^ ]*?:(\d+)/")


# ---------------------------------------------------------------------------------------------
# The server process


class ServerProcess:
    """``python -m daisychain.server`` on a free loopback port, its log in ``log_path``."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
        self.proc = proc
        self.port = port
        self.log_path = log_path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        """Resident memory now, bytes (``VmRSS``)."""
        return _status_kib(self.pid, "VmRSS") * 1024

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def log_text(self, start: int = 0) -> str:
        with self.log_path.open("rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])  # "VmRSS:   41236 kB"
    raise RuntimeError(f"/proc/{pid}/status has no {key}")


@asynccontextmanager
async def server_process(
    workdir: Path, args: Sequence[str] = (), *, start_timeout_s: float = 30.0
) -> AsyncIterator[ServerProcess]:
    """Run the real server for the duration of the block (``--offline``, info-level log)."""
    package_root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "server.log"
    command = [sys.executable, "-m", "daisychain.server", "--host", HOST, "--port", "0"]
    command += ["--offline", "--log-level", "info", *args]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        port = await _wait_for_port(proc, log_path, start_timeout_s)
        server = ServerProcess(proc, port, log_path)
        async with aiohttp.ClientSession() as session:
            await _wait_healthy(session, server.url, start_timeout_s)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def _wait_for_port(proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = _LISTENING_RE.search(log_path.read_text("utf-8", "replace"))
        if match:
            return int(match.group(1))
        if proc.poll() is not None:
            break
        await asyncio.sleep(0.05)
    tail = log_path.read_text("utf-8", "replace")[-2000:]
    raise RuntimeError(f"the server did not start (exit {proc.poll()}); log:\n{tail}")


async def _wait_healthy(session: aiohttp.ClientSession, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(f"{url}/healthz") as response:
                if response.status == 200:
                    return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{url}/healthz did not answer within {timeout_s:g} s")


async def server_status(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/api/status") as response:
        status: dict[str, Any] = await response.json()
        return status


# ---------------------------------------------------------------------------------------------
# Bystanders


@dataclass
class RelayStats:
    """One-way relay latency A -> B and round trips A -> B -> A, milliseconds; and ``/healthz``
    answered to a poll every 0.1 s from the same process (issue 8 saw it take 3.9 s)."""

    sent: int = 0
    delivered: int = 0  # A -> B messages B received
    echoed: int = 0  # round trips A completed
    relay_ms: list[float] = field(default_factory=list)
    round_trip_ms: list[float] = field(default_factory=list)
    healthz_ms: list[float] = field(default_factory=list)
    healthz_failed: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "delivered": self.delivered,
            "echoed": self.echoed,
            "relay_p50_ms": _round(percentile(self.relay_ms, 0.50)),
            "relay_p99_ms": _round(percentile(self.relay_ms, 0.99)),
            "relay_max_ms": _round(max(self.relay_ms, default=float("nan"))),
            "round_trip_p50_ms": _round(percentile(self.round_trip_ms, 0.50)),
            "round_trip_p99_ms": _round(percentile(self.round_trip_ms, 0.99)),
            "healthz_polls": len(self.healthz_ms),
            "healthz_failed": self.healthz_failed,
            "healthz_p50_ms": _round(percentile(self.healthz_ms, 0.50)),
            "healthz_p99_ms": _round(percentile(self.healthz_ms, 0.99)),
        }


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _round(value: float) -> float | None:
    return None if value != value else round(value, 3)  # NaN -> null in JSON


class Bystanders:
    """Two honest clients in one private room, relaying ``signal`` messages back and forth."""

    def __init__(
        self, url: str, *, room: str, headers: Mapping[str, str], payload_bytes: int
    ) -> None:
        self.url = url
        self.room = room
        self.headers = dict(headers)
        self.pad = "x" * payload_bytes
        self.stats = RelayStats()
        self.trouble: list[str] = []  # errors or closes the bystanders met (should stay empty)
        self.join_requests = 0  # join requests the host (A) was shown
        self._session: aiohttp.ClientSession | None = None
        self._a: aiohttp.ClientWebSocketResponse | None = None
        self._b: aiohttp.ClientWebSocketResponse | None = None
        self._a_id = ""
        self._b_id = ""
        self._readers: list[asyncio.Task[None]] = []

    async def connect(self, timeout_s: float = 10.0) -> None:
        self._session = aiohttp.ClientSession()
        ws_url = self.url.replace("http://", "ws://") + f"/ws?room={self.room}"
        hello = {"type": "hello", "version": 1, "name": "", "device": {"kind": "bystander"}}
        self._a = await self._session.ws_connect(ws_url, headers=self.headers)
        await self._a.send_json({**hello, "name": "bystander-a"})
        welcome = await self._expect(self._a, "welcome", timeout_s)
        assert welcome["role"] == "host", f"bystander room {self.room} was not empty: {welcome}"
        self._a_id = welcome["id"]
        self._b = await self._session.ws_connect(ws_url, headers=self.headers)
        await self._b.send_json({**hello, "name": "bystander-b"})
        self._b_id = (await self._expect(self._b, "pending", timeout_s))["id"]
        request = await self._expect(self._a, "join-request", timeout_s)
        await self._a.send_json({"type": "approve", "peer": request["peer"]["id"]})
        await self._expect(self._b, "welcome", timeout_s)
        self._readers = [
            asyncio.create_task(self._read_a(self._a)),
            asyncio.create_task(self._read_b(self._b)),
        ]

    async def _expect(
        self, ws: aiohttp.ClientWebSocketResponse, kind: str, timeout_s: float
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            frame = await ws.receive(timeout=left)
            if frame.type is not aiohttp.WSMsgType.TEXT:
                raise RuntimeError(f"bystander closed while waiting for {kind}: {frame.type}")
            message: dict[str, Any] = json.loads(frame.data)
            if message["type"] == kind:
                return message
        raise TimeoutError(f"bystander: no {kind} within {timeout_s:g} s")

    async def relay(self, stop: asyncio.Event, interval_s: float) -> None:
        """Send A -> B every ``interval_s`` until ``stop`` is set."""
        assert self._a is not None
        seq = 0
        while not stop.is_set():
            data = {"seq": seq, "t": time.perf_counter(), "pad": self.pad}
            try:
                await self._a.send_json({"type": "signal", "to": self._b_id, "data": data})
            except (ConnectionError, RuntimeError) as exc:
                self.trouble.append(f"A send failed: {exc!r}")
                return
            self.stats.sent += 1
            seq += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    async def poll_health(self, stop: asyncio.Event, interval_s: float = 0.1) -> None:
        """GET ``/healthz`` every ``interval_s`` until ``stop`` is set, timing each answer."""
        assert self._session is not None
        while not stop.is_set():
            started = time.perf_counter()
            try:
                async with self._session.get(f"{self.url}/healthz") as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            if ok:
                self.stats.healthz_ms.append((time.perf_counter() - started) * 1e3)
            else:
                self.stats.healthz_failed += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    async def drain(self, timeout_s: float) -> None:
        """Wait (bounded) until every message sent so far came back."""
        deadline = time.monotonic() + timeout_s
        while self.stats.echoed < self.stats.sent and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def _read_a(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for frame in ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                break
            message = json.loads(frame.data)
            if message["type"] == "signal" and message["from"] == self._b_id:
                self.stats.round_trip_ms.append((time.perf_counter() - message["data"]["t"]) * 1e3)
                self.stats.echoed += 1
            elif message["type"] == "join-request":
                self.join_requests += 1  # left unanswered: A is busy, as a real host may be
            elif message["type"] == "error":
                self.trouble.append(f"A got error {message['code']}: {message['message']}")
        self.trouble.append(f"A closed ({ws.close_code})")

    async def _read_b(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for frame in ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                break
            message = json.loads(frame.data)
            if message["type"] == "signal" and message["from"] == self._a_id:
                now = time.perf_counter()
                self.stats.relay_ms.append((now - message["data"]["t"]) * 1e3)
                self.stats.delivered += 1
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.send_json(
                        {"type": "signal", "to": self._a_id, "data": message["data"]}
                    )
            elif message["type"] == "error":
                self.trouble.append(f"B got error {message['code']}: {message['message']}")
        self.trouble.append(f"B closed ({ws.close_code})")

    def take_stats(self) -> RelayStats:
        """The figures so far; counting starts again from zero."""
        stats, self.stats = self.stats, RelayStats()
        return stats

    async def close(self) -> None:
        for ws in (self._a, self._b):
            if ws is not None:
                await ws.close()
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        if self._session is not None:
            await self._session.close()


# ---------------------------------------------------------------------------------------------
# Attackers


@dataclass
class AttackOutcome:
    """What the attacker saw; each scenario fills what applies."""

    sent: int = 0  # messages (or requests) the attacker sent
    connections: int = 0  # connections the attacker opened (or tried to)
    errors: Counter[str] = field(default_factory=Counter)  # error codes received
    closes: Counter[str] = field(default_factory=Counter)  # close codes, "eof", "http-429", ...
    notes: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "connections": self.connections,
            "errors": dict(self.errors),
            "closes": dict(self.closes),
            **self.notes,
        }


@dataclass
class Attack:
    """Handed to an attacker coroutine: where to aim, until when, and where to record."""

    url: str
    deadline: float  # time.monotonic() by which the attacker must have returned
    room: str = BYSTANDER_ROOM  # the bystanders' room (a join flood aims at it)
    outcome: AttackOutcome = field(default_factory=AttackOutcome)

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"

    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def over(self) -> bool:
        return time.monotonic() >= self.deadline


Attacker = Callable[[Attack], Awaitable[None]]


async def raw_websocket(
    host: str,
    port: int,
    path: str = "/ws",
    headers: Mapping[str, str] | None = None,
    *,
    receive_buffer: int | None = None,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A WebSocket opened by hand, so the caller decides when (and whether) to read.

    ``receive_buffer`` shrinks the socket's kernel receive buffer (set before connecting, which
    also turns off autotuning): a client that stops reading then backs up into the server fast.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    reader, writer = await asyncio.open_connection(sock=sock)
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host}:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if b" 101 " not in status:
        writer.close()
        raise ConnectionRefusedError(status.decode("latin-1"))
    return reader, writer


def text_frame(payload: str) -> bytes:
    """One masked client text frame (RFC 6455 5.2). The all-zero mask leaves the bytes as is."""
    data = payload.encode("utf-8")
    n = len(data)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\x00\x00\x00\x00" + data


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One unmasked server frame: (opcode, payload). Raises IncompleteReadError at EOF."""
    first, second = await reader.readexactly(2)
    n = second & 0x7F
    if n == 126:
        n = int.from_bytes(await reader.readexactly(2), "big")
    elif n == 127:
        n = int.from_bytes(await reader.readexactly(8), "big")
    return first & 0x0F, await reader.readexactly(n)


async def read_until_closed(
    ws: aiohttp.ClientWebSocketResponse, outcome: AttackOutcome, timeout_s: float
) -> None:
    """Drain an aiohttp client socket, counting error codes, until it closes (or time is up)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            frame = await ws.receive(timeout=left)
        except TimeoutError:
            break
        if frame.type is aiohttp.WSMsgType.TEXT:
            message = json.loads(frame.data)
            if message.get("type") == "error":
                outcome.errors[str(message["code"])] += 1
        elif frame.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING):
            continue
        else:
            outcome.closes[str(ws.close_code) if ws.close_code is not None else "eof"] += 1
            return
    outcome.closes["still-open"] += 1


# ---------------------------------------------------------------------------------------------
# A run


@dataclass
class HostileResult:
    name: str
    rss_start: int
    rss_peak: int
    rss_after: int
    baseline: RelayStats
    under_attack: RelayStats
    attack: AttackOutcome
    bystander_trouble: list[str]
    join_requests_seen: int  # by the bystanders' host, while the attacker ran
    attack_s: float
    log_bytes: int  # server log written while the attacker ran
    log_tracebacks: int  # "Traceback" lines among them
    log_longest_line: int  # bytes of the longest of them
    log_text: str  # the lines themselves (tests look for what must never be written)
    status_after: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        mib = 1 << 20
        return {
            "name": self.name,
            "rss_start_mib": round(self.rss_start / mib, 2),
            "rss_peak_mib": round(self.rss_peak / mib, 2),
            "rss_after_mib": round(self.rss_after / mib, 2),
            "rss_after_minus_start_mib": round((self.rss_after - self.rss_start) / mib, 2),
            "baseline": self.baseline.summary(),
            "under_attack": self.under_attack.summary(),
            "attack": self.attack.summary(),
            "attack_s": round(self.attack_s, 3),
            "bystander_trouble": self.bystander_trouble,
            "join_requests_seen": self.join_requests_seen,
            "log_bytes": self.log_bytes,
            # what one hostile act (a message sent or a socket tried) cost the disk
            "log_bytes_per_message": round(
                self.log_bytes / max(1, self.attack.sent + self.attack.connections), 1
            ),
            # what one client network of the attacker's cost the disk a minute (an attack
            # shorter than a minute: what it wrote in its minute, not a rate extrapolated from
            # a throttle's first burst)
            "log_bytes_per_minute_per_network": round(
                self.log_bytes
                / max(1.0, self.attack_s / 60)
                / max(1, int(self.attack.notes.get("networks", 1))),
                1,
            ),
            "log_longest_line": self.log_longest_line,
            "log_tracebacks": self.log_tracebacks,
            "peers_after": self.status_after.get("peers"),
        }


async def run_hostile(
    attacker: Attacker,
    workdir: Path,
    *,
    name: str = "attack",
    server_args: Sequence[str] = (),
    bystander_headers: Mapping[str, str] | None = None,
    baseline_s: float = 1.0,
    attack_s: float = 10.0,
    interval_s: float = 0.025,  # 40 relays/s each way: under the 50/s per-connection limit
    payload_bytes: int = 300,
    settle_s: float = 1.0,
) -> HostileResult:
    """Start a server, run the bystanders, the baseline and the attacker; see the docstring."""
    async with server_process(workdir, server_args) as server:
        bystanders = await BystanderProcess.start(
            server.url,
            room=BYSTANDER_ROOM,
            headers=bystander_headers or {},
            interval_s=interval_s,
            payload_bytes=payload_bytes,
        )
        try:
            await asyncio.sleep(baseline_s)
            baseline = await bystanders.cut()
            rss_start = server.rss()
            log_start = server.log_size()

            attack = Attack(url=server.url, deadline=time.monotonic() + attack_s)
            peak = [rss_start]
            sampler = asyncio.create_task(_sample_rss(server, peak))
            started = time.perf_counter()
            try:
                await asyncio.wait_for(attacker(attack), attack_s + 5.0)
            except TimeoutError:
                attack.outcome.notes["cancelled_at_deadline"] = True
            elapsed = time.perf_counter() - started
            under_attack = await bystanders.cut()
            await _wait_for_peers(server.url, 2, timeout_s=15.0)
            await asyncio.sleep(settle_s)
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            rss_after = server.rss()
            log = server.log_text(log_start)
            status = await server_status(server.url)
            after = await bystanders.stop()
        finally:
            await bystanders.close()
    return HostileResult(
        name=name,
        rss_start=rss_start,
        rss_peak=max(peak),
        rss_after=rss_after,
        baseline=baseline.stats,
        under_attack=under_attack.stats,
        attack=attack.outcome,
        bystander_trouble=baseline.trouble + under_attack.trouble + after.trouble,
        join_requests_seen=under_attack.join_requests,
        attack_s=elapsed,
        log_bytes=len(log.encode()),
        log_tracebacks=log.count("Traceback"),
        log_longest_line=max((len(line.encode()) for line in log.splitlines()), default=0),
        log_text=log,
        status_after=status,
    )


async def _sample_rss(server: ServerProcess, peak: list[int]) -> None:
    while True:
        with contextlib.suppress(OSError, RuntimeError):
            peak.append(server.rss())
        await asyncio.sleep(0.05)


async def _wait_for_peers(url: str, peers: int, timeout_s: float) -> None:
    """Bounded wait until the server counts only ``peers`` connections (the bystanders)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = await server_status(url)
        if status["peers"] <= peers:
            return
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# The bystanders' own process
#
# The attacker's client side (hundreds of handshakes a second) would otherwise run on the same
# event loop as the bystanders and delay their reading: the latency measured would be the
# harness's, not the server's. The child relays continuously; "cut" on its stdin makes it pause,
# drain, print one JSON report of the figures since the last cut, and resume; "stop" ends it.


@dataclass
class BystanderReport:
    stats: RelayStats
    trouble: list[str]
    join_requests: int


class BystanderProcess:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(
        cls,
        url: str,
        *,
        room: str,
        headers: Mapping[str, str],
        interval_s: float,
        payload_bytes: int,
        timeout_s: float = 30.0,
    ) -> BystanderProcess:
        package_root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daisychain.bench.rig.hostile", url, room,
            json.dumps(dict(headers)), str(interval_s), str(payload_bytes),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )  # fmt: skip
        child = cls(proc)
        try:
            assert proc.stdout is not None
            ready = await asyncio.wait_for(proc.stdout.readline(), timeout_s)
            if json.loads(ready or b"{}").get("ready") is not True:
                raise RuntimeError(f"the bystanders did not start: {ready!r}")
        except BaseException:
            await child.close()
            raise
        return child

    async def _command(self, word: str) -> BystanderReport:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{word}\n".encode())
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), 60.0)
        report = json.loads(line)
        return BystanderReport(
            stats=RelayStats(**report["stats"]),
            trouble=report["trouble"],
            join_requests=report["join_requests"],
        )

    async def cut(self) -> BystanderReport:
        """The figures since the last cut; the bystanders carry on relaying."""
        return await self._command("cut")

    async def stop(self) -> BystanderReport:
        """The figures since the last cut; the bystanders disconnect."""
        report = await self._command("stop")
        await asyncio.wait_for(self.proc.wait(), 30.0)
        return report

    async def close(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


async def _bystander_child(
    url: str, room: str, headers: dict[str, str], interval_s: float, payload_bytes: int
) -> None:
    bystanders = Bystanders(url, room=room, headers=headers, payload_bytes=payload_bytes)
    await bystanders.connect()
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    print(json.dumps({"ready": True}), flush=True)
    try:
        while True:
            stop = asyncio.Event()
            sender = asyncio.create_task(bystanders.relay(stop, interval_s))
            health = asyncio.create_task(bystanders.poll_health(stop))
            word = (await commands.readline()).decode().strip()
            stop.set()
            await sender
            await health
            await bystanders.drain(timeout_s=10.0)
            report = {
                "stats": asdict(bystanders.take_stats()),
                "trouble": bystanders.trouble[:20],
                "join_requests": bystanders.join_requests,
            }
            bystanders.trouble, bystanders.join_requests = [], 0
            print(json.dumps(report), flush=True)
            if word != "cut":
                return
    finally:
        await bystanders.close()


if __name__ == "__main__":
    _url, _room, _headers, _interval, _payload = sys.argv[1:6]
    asyncio.run(
        _bystander_child(_url, _room, json.loads(_headers), float(_interval), int(_payload))
    )
