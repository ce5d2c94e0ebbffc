"""A raw aiortc mesh between processes: the exchange's goodput baseline (``bench mesh``).

N processes, each under the same CPU budget as the peers it is compared with (when cgroups
can be set), open a bare data channel to every other one and then all send at once: each sends
``mb`` megabytes in total, split evenly over its N - 1 channels (48 KiB messages, like the
exchange's frames), and counts until it has sent its part and received everyone's. That is the
gradient exchange's traffic pattern (every peer sends and receives about as much as it sends)
with none of its work: no quantizing, framing, deflate or reducing. A peer's raw goodput is the
bytes it sent over its seconds.

The parent relays the session descriptions over the children's stdin/stdout (one JSON object
per line), so no server is involved; each child offers only ``address`` as its ICE candidate.

Child protocol (parent -> child): ``{"offer": SDP, "from": i}``, ``{"answer": SDP, "from": j}``,
``{"go": true}``, ``{"close": true}``; (child -> parent): ``{"offer"|"answer": SDP, "to": j}``,
``{"open": true}``, ``{"seconds": s, "sent": n, "received": n, "cpu_s": s}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

from daisychain.bench._exchange_cpu import send_paced
from daisychain.bench.rig import cpubudget


async def _child(rank: int, n: int, total: int, address: str) -> None:
    from aiortc import RTCConfiguration, RTCDataChannel, RTCPeerConnection, RTCSessionDescription

    from daisychain.demo import only_candidate

    loop = asyncio.get_running_loop()
    per_channel = total // (n - 1)
    channels: dict[int, RTCDataChannel] = {}
    conns: list[RTCPeerConnection] = []
    received = 0
    all_in = asyncio.Event()
    go = asyncio.Event()
    close = asyncio.Event()
    answers: dict[int, asyncio.Future[str]] = {}
    tasks: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak references)

    def say(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def on_message(msg: bytes | str) -> None:
        nonlocal received
        received += len(msg)
        if received >= per_channel * (n - 1):
            all_in.set()

    def opened() -> None:
        if len(channels) == n - 1 and all(c.readyState == "open" for c in channels.values()):
            say({"open": True})

    def watch(peer: int, ch: RTCDataChannel) -> None:
        channels[peer] = ch
        ch.on("message", on_message)
        if ch.readyState == "open":
            opened()
        ch.on("open", opened)

    async def offer(peer: int) -> None:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        conns.append(pc)
        watch(peer, pc.createDataChannel("raw", ordered=True))
        await pc.setLocalDescription(await pc.createOffer())
        answers[peer] = loop.create_future()
        say({"offer": pc.localDescription.sdp, "to": peer})
        await pc.setRemoteDescription(RTCSessionDescription(await answers[peer], "answer"))

    async def answer(peer: int, sdp: str) -> None:
        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        conns.append(pc)
        pc.on("datachannel", lambda ch: watch(peer, ch))
        await pc.setRemoteDescription(RTCSessionDescription(sdp, "offer"))
        await pc.setLocalDescription(await pc.createAnswer())
        say({"answer": pc.localDescription.sdp, "to": peer})

    async def commands() -> None:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                close.set()
                return
            msg = json.loads(line)
            if "offer" in msg:
                task = loop.create_task(answer(int(msg["from"]), str(msg["offer"])))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            elif "answer" in msg:
                answers[int(msg["from"])].set_result(str(msg["answer"]))
            elif "go" in msg:
                go.set()
            elif "close" in msg:
                close.set()
                return

    with only_candidate(address):
        reader = loop.create_task(commands())
        for peer in range(rank + 1, n):
            await offer(peer)
        await go.wait()
        c0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(send_paced(ch, per_channel) for ch in channels.values()),
                             all_in.wait())  # fmt: skip
        say({
            "seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "sent": per_channel * (n - 1), "received": received,
        })  # fmt: skip
        await close.wait()
        reader.cancel()
        for pc in conns:
            await pc.close()


async def run(n: int, cores: float | None, mb: float, address: str, timeout_s: float = 300.0
              ) -> dict[str, Any]:  # fmt: skip
    """``n`` processes (each held to ``cores`` when cgroups allow, else unlimited), each
    sending ``mb`` MB spread over its channels: per-peer seconds and goodput, and the group's."""
    if n < 2:
        raise ValueError("a raw mesh needs at least 2 processes")
    why = cpubudget.unavailable() if cores is not None else "no budget asked for"
    budgets = [
        cpubudget.CpuBudget(f"daisychain-rawmesh-{os.getpid()}-{i}", cores)
        for i in range(n) if why is None and cores is not None
    ]  # fmt: skip
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    procs = []
    try:
        for i in range(n):
            procs.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "daisychain.bench._raw_mesh", str(i), str(n),
                str(int(mb * 1e6)), address,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, env=env,
                preexec_fn=budgets[i].enter if budgets else None,
            ))  # fmt: skip
        results: dict[int, dict[str, Any]] = {}
        opened: set[int] = set()

        def tell(i: int, obj: dict[str, Any]) -> None:
            stdin = procs[i].stdin
            assert stdin is not None
            stdin.write((json.dumps(obj) + "\n").encode())

        async def relay(i: int) -> None:
            stdout = procs[i].stdout
            assert stdout is not None
            while i not in results:
                line = await stdout.readline()
                if not line:
                    raise RuntimeError(f"raw mesh process {i} ended early")
                msg = json.loads(line)
                if "offer" in msg:
                    tell(int(msg["to"]), {"offer": msg["offer"], "from": i})
                elif "answer" in msg:
                    tell(int(msg["to"]), {"answer": msg["answer"], "from": i})
                elif "open" in msg:
                    opened.add(i)
                    if len(opened) == n:
                        for k in range(n):
                            tell(k, {"go": True})
                elif "seconds" in msg:
                    results[i] = msg

        await asyncio.wait_for(asyncio.gather(*(relay(i) for i in range(n))), timeout_s)
        for i in range(n):
            tell(i, {"close": True})
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in procs)), 30)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
        for b in budgets:
            b.remove()
    peers = [results[i] for i in range(n)]
    return {
        "processes": n,
        "cores_each": cores if budgets else None,
        "budget_skipped": why if not budgets else None,
        "mb_sent_per_peer": mb,
        "peer_bytes_received": [int(p["received"]) for p in peers],
        "peer_goodput_mb_s": [round(p["sent"] / p["seconds"] / 1e6, 3) for p in peers],
        "peer_cpu_ms_per_mb_sent": [round(1000 * p["cpu_s"] / (p["sent"] / 1e6), 2) for p in peers],
        "group_goodput_mb_s": round(
            sum(p["sent"] for p in peers) / max(p["seconds"] for p in peers) / 1e6, 3
        ),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m daisychain.bench._raw_mesh")
    parser.add_argument("rank", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("bytes", type=int)
    parser.add_argument("address")
    a = parser.parse_args(argv)
    asyncio.run(_child(a.rank, a.n, a.bytes, a.address))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
