"""``daisychain bench pool``: does pooling unequal devices pay?

Each device is a headless peer (``python -m daisychain.peer``) in a process of its own, held to
a CPU budget by a cgroup quota (``bench.rig.cpubudget``: 1 core, a quarter core, ...), with one
BLAS thread. For every scenario the bench measures, in one run:

1. each device **alone**: a group of one under its budget (the same peer, preset and global
   batch: it computes all of the step's sequences), training tokens/s over the measured steps;
2. the devices **together**: one group, the device with the largest budget leading, the
   step's sequences shared out by measured speed (protocol version 2); the group's training
   tokens/s (global batch x sequence length / the leader's seconds per step), each peer's mean
   share, compute and exchange seconds per step and the part of its step it spends not
   computing (waiting for others and exchanging), and whether every replica held the same hash
   at every step.

``pooling_efficiency`` is the group's tokens/s over the sum of the devices' alone;
``group_vs_fastest`` the group's over the fastest device's alone. Default scenarios:
``fast-slow`` (1 core and 1/4 core) and ``equal3`` (three peers at 1/2 core each), on
``small``. Solo runs of equal budgets are measured once.

The signaling server (``--offline``) runs in its own process, outside every budget; the peers
offer only 127.0.0.2 as their ICE candidate (``bench.rig.loopback_peer``), so no packet leaves the
machine. Needs root for the cgroups; otherwise the document says why it skipped. Times are
wall-clock on a shared machine: the ratios, measured within one run, are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from daisychain.bench.rig import cpubudget

SCENARIOS: dict[str, tuple[float, ...]] = {
    "fast-slow": (1.0, 0.25),
    "equal3": (0.5, 0.5, 0.5),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=6, help="measured steps per run")
    parser.add_argument(
        "--warmup", type=int, default=2, help="steps trained before measuring (not counted)"
    )
    parser.add_argument(
        "--alone-warmup", type=int, default=1,
        help="warm-up steps of a device alone (nothing to settle there: no shares)",
    )  # fmt: skip
    parser.add_argument(
        "--batch", type=int, default=None, help="sequences per lane (default: the preset's)"
    )
    parser.add_argument(
        "--global-batch", type=int, default=None,
        help="sequences per step, shared out by speed (default: --batch x the scenario's "
        "devices); the devices alone train the same global batch",
    )  # fmt: skip
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument(
        "--scenario", action="append", default=None,
        help=f"a named scenario ({', '.join(SCENARIOS)}) or CPU budgets in cores, "
        "comma-separated (e.g. 1,0.25); repeatable; default: all named ones",
    )  # fmt: skip
    parser.add_argument("--address", default="127.0.0.2", help="the peers' ICE host candidate")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per run")


@dataclass
class PeerLog:
    """What one peer process printed (its ``--json`` events, with arrival times)."""

    name: str
    cores: float
    steps: dict[int, tuple[float, dict[str, Any]]] = field(default_factory=dict)
    joined_at: float | None = None  # when its `joined` event arrived (signaling hello done)
    id: str = ""  # its server-assigned id (the `joined` event's)
    stopped: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    code: int | None = None


def _budgets(spec: str) -> tuple[str, tuple[float, ...]]:
    if spec in SCENARIOS:
        return spec, SCENARIOS[spec]
    try:
        cores = tuple(float(part) for part in spec.split(","))
    except ValueError:
        raise SystemExit(
            f"daisychain bench pool: --scenario {spec!r} is neither a named scenario "
            f"({', '.join(SCENARIOS)}) nor comma-separated cores\nhint: e.g. --scenario 1,0.25"
        ) from None
    if not cores or any(not 0.01 <= c <= 64 for c in cores):
        raise SystemExit("daisychain bench pool: every budget must be 0.01 .. 64 cores")
    return spec, cores


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # One thread per device: a budget of one core shared by several BLAS threads only thrashes.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    return env


async def _wait_healthy(port: int, proc: asyncio.subprocess.Process, deadline: float) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                raise RuntimeError(f"the server exited with {proc.returncode} at start")
            try:
                async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError("the server did not answer /healthz")


async def _read(proc: asyncio.subprocess.Process, log: PeerLog) -> None:
    assert proc.stdout is not None and proc.stderr is not None

    async def out() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            kind = event.get("event")
            if kind == "joined":
                log.joined_at = time.monotonic()
                log.id = str(event.get("id", ""))
            elif kind == "step":
                log.steps[int(event["step"])] = (time.monotonic(), event)
            elif kind == "stopped":
                log.stopped = event
            elif kind == "error":
                log.errors.append(f"{event.get('message')} (hint: {event.get('hint')})")

    async def err() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            log.stderr_tail = [*log.stderr_tail, raw.decode(errors="replace").rstrip()][-8:]

    await asyncio.gather(out(), err())
    log.code = await proc.wait()


async def run_group(
    cores: tuple[float, ...],
    args: argparse.Namespace,
    batch: int,
    seq_len: int,
    g: int,
    peer_options: tuple[str, ...] = (),
    lead_options: tuple[str, ...] = (),
) -> list[PeerLog]:
    """One group of ``len(cores)`` peers, each under its budget, with a server of its own;
    the first (largest) budget leads; ``peer_options`` go to every peer, ``lead_options`` to
    the leader only (the run's config). Returns what every peer printed."""
    port = _free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "daisychain.server", "--host", "127.0.0.1", "--port", str(port),
        "--offline", "--log-level", "warning",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=_child_env(),
    )  # fmt: skip
    budgets: list[cpubudget.CpuBudget] = []
    procs: list[asyncio.subprocess.Process] = []
    logs: list[PeerLog] = []
    try:
        await _wait_healthy(port, server, time.monotonic() + 30)
        steps = args.warmup + args.steps
        for i, c in enumerate(cores):
            budget = cpubudget.CpuBudget(f"daisychain-pool-{os.getpid()}-{i}", c)
            budgets.append(budget)
            role = (
                ["--lead", "--preset", args.preset, "--steps", str(steps), "--min-peers",
                 str(len(cores)), "--batch", str(batch), "--seq-len", str(seq_len), "--seed", "1",
                 "--global-batch", str(g), *lead_options]
                if i == 0 else []
            )  # fmt: skip
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "daisychain.bench.rig.loopback_peer", args.address,
                "--server", f"http://127.0.0.1:{port}", "--name", f"device{i}-{c:g}core",
                "--backend", "numpy", "--json", "--step-timeout", str(args.timeout_s), *role,
                *peer_options,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env=_child_env(), preexec_fn=budget.enter,
            )  # fmt: skip
            procs.append(proc)
            logs.append(PeerLog(f"device{i}", c))
        readers = [asyncio.ensure_future(_read(p, log)) for p, log in zip(procs, logs, strict=True)]
        watch = asyncio.ensure_future(_stop_if_leader_fails(procs))
        _, late = await asyncio.wait([*readers, watch], timeout=args.timeout_s)
        if late:
            await _end_late_group(procs, logs, readers, watch, args.timeout_s)
    finally:
        for proc in [*procs, server]:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        for budget in budgets:
            budget.remove()
    return logs


async def _end_late_group(
    procs: list[asyncio.subprocess.Process],
    logs: list[PeerLog],
    readers: Sequence[asyncio.Future[None]],
    watch: asyncio.Future[None],
    timeout_s: float,
) -> None:
    """A group still running at ``--timeout-s``: each peer still running is killed and its log
    says so, with the last step it reached, and the readers drain what the peers had printed,
    so the bench reports *where* each peer was stuck (with its stderr tail) instead of a bare
    timeout."""
    for proc, log in zip(procs, logs, strict=True):
        if proc.returncode is None:
            last = max(log.steps, default=0)
            log.errors.append(f"still running after --timeout-s {timeout_s:g} (last step {last})")
            proc.kill()
    watch.cancel()
    await asyncio.wait(readers, timeout=10)
    for reader in readers:
        reader.cancel()


async def _stop_if_leader_fails(procs: list[asyncio.subprocess.Process]) -> None:
    """A leader that exits with an error (a refused option, a crash) leaves its followers
    waiting for a run that never comes: end them too, so the group fails now with the leader's
    error instead of at ``--timeout-s``."""
    if await procs[0].wait() != 0:
        for proc in procs[1:]:
            if proc.returncode is None:
                proc.kill()


def summarize(logs: list[PeerLog], args: argparse.Namespace, seq_len: int) -> dict[str, Any]:
    """Tokens/s of the group (the leader's clock), each peer's split, identity."""
    first, last = args.warmup, args.warmup + args.steps
    lead = logs[0]
    problems = [
        f"{log.name}: exit {log.code}; " + "; ".join([*log.errors, " / ".join(log.stderr_tail)])
        for log in logs
        if log.code != 0 or log.stopped is None or log.stopped.get("reason") != "done"
    ]
    missing = [log.name for log in logs if not all(s in log.steps for s in range(first, last + 1))]
    if problems or missing:
        return {"error": "; ".join(problems) or f"steps missing at {', '.join(missing)}"}
    seconds = (lead.steps[last][0] - lead.steps[first][0]) / args.steps
    measured = range(first + 1, last + 1)
    tokens_per_step = statistics.mean(lead.steps[s][1]["global_batch"] for s in measured) * seq_len
    same_every_step = all(len({log.steps[s][1]["hash"] for log in logs}) == 1 for s in measured)
    final = {str(log.stopped["hash"]) for log in logs if log.stopped is not None}
    peers = []
    for log in logs:
        compute = statistics.mean(float(log.steps[s][1]["compute_s"]) for s in measured)
        exchange = statistics.mean(float(log.steps[s][1]["exchange_s"]) for s in measured)
        work = statistics.mean(float(log.steps[s][1]["exchange_work_s"]) for s in measured)
        share = statistics.mean(int(log.steps[s][1]["share"]) for s in measured)
        peers.append({
            "name": log.name, "cores": log.cores, "share": round(share, 2),
            "shares_by_step": [int(log.steps[s][1]["share"]) for s in measured],
            "compute_s": round(compute, 4),
            "exchange_s": round(exchange, 4),
            "exchange_work_s": round(work, 4),
            "not_computing_share": round(1 - compute / seconds, 3),
            "bytes_sent_per_step": round(
                statistics.mean(int(log.steps[s][1]["bytes_sent"]) for s in measured)),
            "bytes_early_per_step": round(
                statistics.mean(int(log.steps[s][1]["bytes_early"]) for s in measured)),
        })  # fmt: skip
    return {
        "seconds_per_step": round(seconds, 4),
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": round(tokens_per_step / seconds, 2),
        "replicas_identical_every_step": same_every_step and len(final) == 1,
        "final_hash": next(iter(final)) if len(final) == 1 else sorted(final),
        "peers": peers,
    }


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    from daisychain.model.config import PRESETS

    if args.preset not in PRESETS:
        raise SystemExit(f"daisychain bench pool: unknown preset {args.preset!r}")
    base = PRESETS[args.preset]
    batch = args.batch or base.batch
    seq_len = args.seq_len or base.seq_len
    if args.steps < 1 or args.warmup < 1 or args.alone_warmup < 1:
        raise SystemExit(
            "daisychain bench pool: --steps, --warmup and --alone-warmup must be at least 1"
        )
    # A group's shares settle over its first steps (a speed reaches the leader with a hash, and
    # shapes the roster after next); a device alone has nothing to settle.
    alone_args = argparse.Namespace(**{**vars(args), "warmup": args.alone_warmup})
    scenarios = [_budgets(s) for s in (args.scenario or list(SCENARIOS))]
    solo: dict[tuple[float, int], dict[str, Any]] = {}
    out: dict[str, Any] = {
        "preset": args.preset, "lane_batch": batch, "seq_len": seq_len,
        "steps_measured": args.steps, "warmup_steps": args.warmup,
        "alone_warmup_steps": args.alone_warmup, "backend": "numpy",
        "load_avg_at_start": os.getloadavg()[0], "scenarios": {},
    }  # fmt: skip
    for name, cores in scenarios:
        g = args.global_batch or batch * len(cores)
        for c in cores:
            if (c, g) not in solo:
                run = await run_group((c,), alone_args, batch, seq_len, g)
                solo[c, g] = summarize(run, alone_args, seq_len)
        ordered = tuple(sorted(cores, reverse=True))
        group = summarize(await run_group(ordered, args, batch, seq_len, g), args, seq_len)
        alone = [solo[c, g] for c in ordered]
        scenario: dict[str, Any] = {
            "cores": list(ordered),
            "global_batch": g,
            "alone_tokens_per_s": [a.get("tokens_per_s") for a in alone],
            "alone": alone,
            "group": group,
        }
        if "error" not in group and all("error" not in a for a in alone):
            total = sum(a["tokens_per_s"] for a in alone)
            fastest = max(a["tokens_per_s"] for a in alone)
            scenario["pooling_efficiency"] = round(group["tokens_per_s"] / total, 3)
            scenario["group_vs_fastest"] = round(group["tokens_per_s"] / fastest, 3)
        out["scenarios"][name] = scenario
    out["load_avg_at_end"] = os.getloadavg()[0]
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    why = cpubudget.unavailable()
    if why is not None:
        return {"skipped": why}
    return asyncio.run(_measure(args))
