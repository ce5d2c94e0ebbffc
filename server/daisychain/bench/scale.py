"""``daisychain bench scale``: N headless peers in processes, one group, per-step figures.

Each peer is ``python -m daisychain.peer`` in a process of its own under a CPU budget
(``bench.rig.cpubudget``: the machine's ``--cores`` shared equally, one BLAS thread each), with
a signaling server of its own outside every budget; the peers offer only a loopback address as
their ICE candidate, so no packet leaves the machine (``bench pool``'s ``run_group`` starts
them). For each N of ``--peers`` (default 2, 4, 8; 16 and 32 on request) the document has
``sim.report``'s summary of the measured steps: the step time split into compute, exchange and
coordination; messages, frames and bytes each peer sent per step (``p2p.traffic``: what the
simulator counts the same way); the leader's; connections per peer; peak memory per peer (its
``ru_maxrss``); seconds from the peer's hello to the signaling server to its first contributed
step; and whether every replica held the same hash at every step.

``calibration`` is what the simulator needs to replay that run (a device's seconds per sequence,
the shell's CPU time per byte, deflate's ratio), and ``--compare-sim`` replays every run at
once with the real run's peer ids: each run's devices from that run; a hop latency and the
shell's CPU between steps fitted at ``--calibrate-at`` N (the other N are predictions).
``sim_vs_real`` has the step-time ratio and whether messages and piece bytes per peer per step
are equal (docs/BENCHMARKS.md, "Scale and the simulator").

Chromium tabs among the peers are not measured yet (``tabs`` says so). Needs root for the
cgroups; otherwise the document says why it skipped. Times are wall-clock on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
from typing import Any

from daisychain.bench import pool
from daisychain.bench.rig import cpubudget
from daisychain.model.config import PRESETS
from daisychain.model.params import param_shapes
from daisychain.sim import Links, Scenario, Simulator, Stall
from daisychain.sim.profiles import calibrated
from daisychain.sim.report import PeerFigures, StepFigures, step_traffic, summarize

TABS_NOT_YET = (
    "not yet: Chromium tabs among the headless peers (1, 4 and 8 tabs, and the page's "
    "peer-connection ceiling) are later work of issue 44"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--peers", default="2,4,8", help="comma-separated N (16 and 32 too)")
    parser.add_argument("--preset", default="tiny", choices=("tiny", "small"))
    parser.add_argument("--steps", type=int, default=4, help="measured steps")
    parser.add_argument("--warmup", type=int, default=2, help="steps before measuring")
    parser.add_argument(
        "--cores", type=float, default=1.6,
        help="CPU cores shared equally by the N peers (each at least 0.02)",
    )  # fmt: skip
    parser.add_argument("--address", default="127.0.0.2", help="the peers' ICE host candidate")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per run")
    parser.add_argument(
        "--compare-sim", action="store_true",
        help="replay every run in the simulator, calibrated from one of them, and compare",
    )  # fmt: skip
    parser.add_argument(
        "--calibrate-at", type=int, default=0,
        help="the N whose run calibrates the simulator (default: the smallest measured)",
    )  # fmt: skip


def _peers(spec: str) -> list[int]:
    try:
        ns = [int(part) for part in spec.split(",")]
    except ValueError:
        raise SystemExit(
            f"daisychain bench scale: --peers {spec!r} is not comma-separated counts\n"
            "hint: e.g. --peers 2,4,8"
        ) from None
    if not ns or any(not 2 <= n <= 64 for n in ns):
        raise SystemExit(
            "daisychain bench scale: every --peers count must be 2 .. 64 processes\n"
            "hint: for more peers, simulate them: daisychain bench sim --peers 256"
        )
    return ns


def figures(logs: list[pool.PeerLog]) -> list[PeerFigures]:
    """The peers' JSON events as ``sim.report`` figures (the bench's clock; peer 0 leads)."""
    out = []
    for i, log in enumerate(logs):
        p = PeerFigures(log.name, log.joined_at or 0.0, leader=i == 0)
        for step, (at, e) in log.steps.items():
            p.steps[step] = StepFigures(
                at=at, compute_s=float(e["compute_s"]), exchange_s=float(e["exchange_s"]),
                share=int(e["share"]), hash=str(e["hash"]), messages=int(e["messages"]),
                frames=int(e["frames"]), text_bytes=int(e["text_bytes"]),
                piece_bytes=int(e["piece_bytes"]), wire_bytes=int(e["wire_bytes"]),
                connections=int(e["connections"]),
            )  # fmt: skip
        if log.stopped is not None:
            p.final_hash = str(log.stopped.get("hash", ""))
            p.peak_memory_bytes = int(log.stopped.get("peak_rss_bytes", 0)) or None
        out.append(p)
    return out


def calibration(logs: list[pool.PeerLog], first: int, last: int) -> dict[str, float]:
    """A device for the simulator, from the measured steps: seconds per sequence; the shell's
    CPU time per byte (``exchange_work_s``, half taken to send, half to take in); deflate's
    ratio of the gradient pieces."""
    seq, work, pieces, wire = [], [], [], []
    for log in logs:
        for s in range(first + 1, last + 1):
            e = log.steps[s][1]
            if int(e["share"]):
                seq.append(float(e["compute_s"]) / int(e["share"]))
            work.append(float(e["exchange_work_s"]))
            pieces.append(int(e["piece_bytes"]))
            wire.append(int(e["wire_bytes"]) - int(e["text_bytes"]))
    per_byte = statistics.mean(work) / max(statistics.mean(pieces), 1.0)
    return {
        "seq_s": statistics.mean(seq),
        "recv_s_per_byte": per_byte / 2,
        "up_bytes_s": 2 / per_byte if per_byte > 0 else 1e9,
        "wire_ratio": min(2.0, max(statistics.mean(wire) / max(statistics.mean(pieces), 1), 0.01)),
    }


def seq_s(log: pool.PeerLog, first: int, last: int) -> float:
    """The peer's mean compute seconds per sequence over the measured steps (0: none)."""
    per = [
        float(e["compute_s"]) / int(e["share"])
        for s in range(first + 1, last + 1)
        if s in log.steps and int((e := log.steps[s][1])["share"])
    ]
    return statistics.mean(per) if per else 0.0


def simulate(
    logs: list[pool.PeerLog], cal: dict[str, float], preset: str, first: int, last: int
) -> dict[str, Any]:
    """The same group in the simulator: the real run's peer ids (so rosters, ranks and chunk
    sizes are the same), a device calibrated as ``cal`` says, loopback links of its
    ``latency_s``. Returns the simulator's summary, the step-time ratio and whether messages and
    piece bytes per peer per step are equal."""
    lead = logs[0].steps[last][1]
    roster: list[str] = list(lead["roster"])
    leader_id = str(lead["leader"])
    ids = (leader_id, *[p for p in roster if p != leader_id])
    cfg = PRESETS[preset]
    params = sum(math.prod(s) for s in param_shapes(cfg).values())
    # Each simulated peer computes as fast as its real counterpart did (a straggler stays one).
    own = {log.id: seq_s(log, first, last) for log in logs}
    devices = tuple(
        calibrated(
            "calibrated",
            own.get(pid) or cal["seq_s"],
            params,
            cfg.seq_len,
            up_bytes_s=cal["up_bytes_s"],
            recv_s_per_byte=cal["recv_s_per_byte"],
            overhead_s=cal.get("overhead_s", 0.0),
        )
        for pid in ids
    )
    links = Links("loopback", latency_s=cal["latency_s"], wire_ratio=cal["wire_ratio"])
    scenario = Scenario(
        devices, links, preset=preset, steps=last, ids=ids,
        global_batch=cfg.batch * len(ids), shares_by="equal",
    )  # fmt: skip
    try:
        result = Simulator(scenario).run()
    except Stall as exc:
        return {"error": str(exc)}
    real_peers, sim_peers = figures(logs), result.peers
    real, sim = summarize(real_peers, first, last), summarize(sim_peers, first, last)
    return {
        "summary": sim,
        "step_s_ratio": round(sim["step_s"] / real["step_s"], 3),
        "traffic_equal": step_traffic(sim_peers, first, last)
        == step_traffic(real_peers, first, last),
    }


def fit_links(
    logs: list[pool.PeerLog],
    cal: dict[str, float],
    preset: str,
    first: int,
    last: int,
    cores: float,
) -> dict[str, float]:
    """``cal`` with the two figures no single peer measures, fitted to this run:

    - ``latency_s``: what a message takes beyond the modelled CPU and bandwidth (the event
      loop, aiortc's SCTP, the scheduler). An exchange is two hops (a contribution, then the
      reduced chunk), so half the real exchange time the simulator misses is one hop's;
    - ``overhead_cpu_s``: the shell's CPU work between steps (reading the batch, starting the
      compute), in core-seconds: the step time the simulator still misses, times the cores
      each peer had. A run with other budgets takes ``overhead_cpu_s / cores`` per step.
    """
    real = summarize(figures(logs), first, last)
    sim = simulate(logs, {**cal, "latency_s": 0.0}, preset, first, last)
    if "error" in sim:
        return {**cal, "latency_s": 0.0, "overhead_cpu_s": 0.0}
    gap = real["exchange_s"]["mean"] - sim["summary"]["exchange_s"]["mean"]
    out = {**cal, "latency_s": round(max(0.0, gap / 2), 6)}
    sim = simulate(logs, out, preset, first, last)
    if "error" in sim:
        return {**out, "overhead_cpu_s": 0.0}
    left = real["step_s"] - sim["summary"]["step_s"]
    return {**out, "overhead_cpu_s": round(max(0.0, left) * cores, 6)}


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    base = PRESETS[args.preset]
    first, last = args.warmup, args.warmup + args.steps
    out: dict[str, Any] = {
        "preset": args.preset, "cores_shared": args.cores, "warmup_steps": args.warmup,
        "steps_measured": args.steps, "backend": "numpy", "shares_by": "equal",
        "tabs": TABS_NOT_YET, "load_avg_at_start": os.getloadavg()[0], "runs": {},
    }  # fmt: skip
    measured: dict[int, list[pool.PeerLog]] = {}
    for n in _peers(args.peers):
        cores = max(0.02, args.cores / n)
        g = base.batch * n
        logs = await pool.run_group(
            (cores,) * n, args, base.batch, base.seq_len, g,
            lead_options=("--shares-by", "equal"),
        )  # fmt: skip
        run: dict[str, Any] = {"cores_per_peer": round(cores, 4)}
        problems = pool.summarize(logs, args, base.seq_len)
        if "error" in problems:
            run["error"] = problems["error"]
        else:
            run.update(summarize(figures(logs), first, last))
            run["calibration"] = calibration(logs, first, last)
            measured[n] = logs
        out["runs"][str(n)] = run
    at = args.calibrate_at or min(measured, default=0)
    if args.compare_sim and at in measured:
        # Each run's devices are its own (a peer of 1.6/8 cores is another device than one of
        # 1.6/4): their compute and CPU per byte come from that run. The hop latency and the
        # shell's CPU between steps are fitted once at N = ``at``; every other N is a
        # prediction.
        run_at = out["runs"][str(at)]
        cal = fit_links(measured[at], run_at["calibration"], args.preset, first, last,
                        run_at["cores_per_peer"])  # fmt: skip
        fitted = {"latency_s": cal["latency_s"], "overhead_cpu_s": cal["overhead_cpu_s"]}
        out["sim_calibrated_at"] = {"peers": at, **fitted}
        for n, logs in measured.items():
            run = out["runs"][str(n)]
            own = {**run["calibration"], **fitted,
                   "overhead_s": fitted["overhead_cpu_s"] / run["cores_per_peer"]}  # fmt: skip
            run["sim_vs_real"] = simulate(logs, own, args.preset, first, last)
    elif args.compare_sim:
        out["sim_calibrated_at"] = {"error": f"no successful run at N = {at} to calibrate from"}
    out["load_avg_at_end"] = os.getloadavg()[0]
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    _peers(args.peers)  # refuse a bad list before anything starts
    if args.steps < 1 or args.warmup < 1:
        raise SystemExit("daisychain bench scale: --steps and --warmup must be at least 1")
    why = cpubudget.unavailable()
    if why is not None:
        return {"skipped": why, "tabs": TABS_NOT_YET}
    return asyncio.run(_measure(args))
