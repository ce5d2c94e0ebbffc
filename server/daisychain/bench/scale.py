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
the shell's CPU time per byte, deflate's ratio), and ``--compare-sim`` replays it at once:
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
    device = calibrated(
        "calibrated", cal["seq_s"], params, cfg.seq_len,
        up_bytes_s=cal["up_bytes_s"], recv_s_per_byte=cal["recv_s_per_byte"],
    )  # fmt: skip
    links = Links("loopback", latency_s=cal["latency_s"], wire_ratio=cal["wire_ratio"])
    scenario = Scenario(
        (device,) * len(ids), links, preset=preset, steps=last, ids=ids,
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


def fit_latency(
    logs: list[pool.PeerLog], cal: dict[str, float], preset: str, first: int, last: int
) -> dict[str, float]:
    """``cal`` with ``latency_s``: what a message takes beyond the modelled CPU and bandwidth
    (the event loop, aiortc's SCTP, the scheduler under load). An exchange is two hops (a
    contribution, then the reduced chunk), so half the real exchange time the simulator misses
    at (almost) no latency is one hop's."""
    base = {**cal, "latency_s": 0.0}
    sim = simulate(logs, base, preset, first, last)
    if "error" in sim:
        return {**cal, "latency_s": 0.0}
    real = summarize(figures(logs), first, last)
    gap = real["exchange_s"]["mean"] - sim["summary"]["exchange_s"]["mean"]
    return {**cal, "latency_s": round(max(0.0, gap / 2), 6)}


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
        # One calibration (device, shell, hop latency) from one N; the other N are predictions.
        cal = fit_latency(measured[at], out["runs"][str(at)]["calibration"], args.preset,
                          first, last)  # fmt: skip
        out["sim_calibrated_at"] = {"peers": at, **cal}
        for n, logs in measured.items():
            out["runs"][str(n)]["sim_vs_real"] = simulate(logs, cal, args.preset, first, last)
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
