"""``daisychain bench sim``: the protocol simulator (``daisychain.sim``) at any N, in the shape
of ``daisychain bench scale``.

N unchanged protocol machines in one process, a named device mix (``sim.profiles.MIXES``) or a
device calibrated from a measured seconds per sequence (``--seq-s``, e.g. from a ``bench scale``
run), a named link model (``sim.network.LINK_MODELS``), a seed. Prints, per N: the summary of
``sim.report`` (step time split into compute, exchange and coordination; messages and bytes
per peer per step; the leader's; connections per peer; time from hello to first contributed
step; identical replicas) and how long the simulation itself took (``sim_wall_s``: the cost of
simulating, not a figure of the run). Peak memory is not modelled (null).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import time
from typing import Any

from daisychain.model.config import PRESETS
from daisychain.model.params import param_shapes
from daisychain.p2p.machine import Timers
from daisychain.sim import Scenario, Simulator, Stall
from daisychain.sim.network import LINK_MODELS
from daisychain.sim.profiles import MB, MIXES, Device, assign, calibrated
from daisychain.sim.report import summarize
from daisychain.wire import messages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--peers", default="4,8,16", help="comma-separated N (default 4,8,16)")
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    parser.add_argument("--steps", type=int, default=4, help="measured steps")
    parser.add_argument("--warmup", type=int, default=1, help="steps before measuring")
    parser.add_argument("--mix", default="laptops", help=f"device mix: {', '.join(MIXES)}")
    parser.add_argument(
        "--seq-s", type=float, default=None,
        help="every device computes a sequence in this many seconds (a calibrated device, "
        "instead of --mix)",
    )  # fmt: skip
    parser.add_argument("--fixed-s", type=float, default=0.0, help="with --seq-s: per step")
    parser.add_argument("--up-mb-s", type=float, default=12.5, help="with --seq-s: uplink MB/s")
    parser.add_argument(
        "--recv-s-per-mb", type=float, default=0.0,
        help="with --seq-s: the shell's CPU seconds per received MB",
    )  # fmt: skip
    parser.add_argument("--links", default="lan", choices=sorted(LINK_MODELS))
    parser.add_argument("--wire-ratio", type=float, default=None, help="override deflate's ratio")
    parser.add_argument("--shares-by", default="equal", choices=("equal", "speed"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--lift-roster-cap", action="store_true",
        help="a what-if: lift the wire's 64-peer roster cap (messages.MAX_ROSTER) to N, to see "
        "what today's full mesh would cost beyond it (without it, N > 65 is refused as a real "
        "group would be)",
    )  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="the machines' warnings on stderr")


def _peers(spec: str) -> list[int]:
    try:
        ns = [int(part) for part in spec.split(",")]
    except ValueError:
        raise SystemExit(
            f"daisychain bench sim: --peers {spec!r} is not comma-separated counts\n"
            "hint: e.g. --peers 64,256,1024"
        ) from None
    if not ns or any(not 1 <= n <= 65535 for n in ns):
        raise SystemExit("daisychain bench sim: every --peers count must be 1 .. 65535")
    return ns


def devices(args: argparse.Namespace, n: int) -> tuple[Device, ...]:
    if args.seq_s is None:
        try:
            return assign(args.mix, n, args.seed)
        except ValueError as exc:
            raise SystemExit(f"daisychain bench sim: {exc}") from None
    cfg = PRESETS[args.preset]
    params = sum(math.prod(s) for s in param_shapes(cfg).values())
    try:
        one = calibrated("calibrated", args.seq_s, params, cfg.seq_len,
                         up_bytes_s=args.up_mb_s * MB, fixed_s=args.fixed_s,
                         recv_s_per_byte=args.recv_s_per_mb / MB)  # fmt: skip
    except ValueError as exc:
        raise SystemExit(f"daisychain bench sim: {exc}\nhint: --seq-s must be > 0") from None
    return (one,) * n


def measure(args: argparse.Namespace) -> dict[str, Any]:
    ns = _peers(args.peers)
    if args.steps < 1 or args.warmup < 1:
        raise SystemExit("daisychain bench sim: --steps and --warmup must be at least 1")
    links = LINK_MODELS[args.links]
    if args.wire_ratio is not None:
        try:
            links = dataclasses.replace(links, wire_ratio=args.wire_ratio)
        except ValueError as exc:
            raise SystemExit(f"daisychain bench sim: {exc}") from None
    if not args.verbose:  # a refused peer is a line per refusal: thousands at large N
        logging.getLogger("daisychain.p2p").setLevel(logging.ERROR)
    out: dict[str, Any] = {
        "roster_cap": "lifted to N (a what-if)" if args.lift_roster_cap else messages.MAX_ROSTER,
        "preset": args.preset, "mix": "calibrated" if args.seq_s else args.mix,
        "links": dataclasses.asdict(links), "seed": args.seed, "warmup_steps": args.warmup,
        "steps_measured": args.steps, "shares_by": args.shares_by, "runs": {},
    }  # fmt: skip
    last = args.warmup + args.steps
    for n in ns:
        scenario = Scenario(
            devices(args, n), links, preset=args.preset, steps=last, seed=args.seed,
            shares_by=args.shares_by, timers=Timers(step_timeout_s=600.0),
            roster_cap=max(n, messages.MAX_ROSTER) if args.lift_roster_cap else 0,
        )  # fmt: skip
        t0 = time.perf_counter()
        try:
            result = Simulator(scenario).run()
        except Stall as exc:
            out["runs"][str(n)] = {"error": str(exc)}
            continue
        summary = summarize(result.peers, args.warmup, last)
        summary["outcomes"] = sorted({o.reason for o in result.outcomes.values()})
        summary["simulated_s"] = round(result.end_s, 3)
        summary["events"] = result.events
        summary["channels_closed"] = result.closed  # refusals: 0 in a healthy run
        summary["sim_wall_s"] = round(time.perf_counter() - t0, 2)
        out["runs"][str(n)] = summary
    return out
