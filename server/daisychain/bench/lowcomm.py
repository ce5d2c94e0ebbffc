"""``daisychain bench lowcomm``: outer runs against per-step runs on a slow shared link.

Per-step exchange sends every peer's gradient every step, so on a home link every step waits for
the wire; an outer run (``sync: outer``, docs/OUTER.md) sends one pseudo-gradient every ``H``
inner steps. This bench measures what that buys where it matters: three (``--peers``) headless
peers in processes of their own, each held to a CPU budget (``--cores``, cgroup quota;
``bench.rig.cpubudget``), talking over a link limited to ``--link`` (a token bucket on the
loopback of a network namespace the bench creates and re-runs itself in; ``bench.rig.shaping``:
every peer's frames share the one limit, as on one Wi-Fi radio). For the same preset, lane batch
and links it trains

1. a **per-step** group (the default run mode): tokens/s over the measured steps;
2. one **outer** group per ``--H`` and ``--overlap``: tokens/s over the measured rounds, a round
   being ``H`` inner steps of the whole global batch; with overlap (docs/OUTER.md, "Overlap")
   that fraction of every round's inner steps runs while its exchange does, and the report
   adds ``tokens_per_s_vs_no_overlap`` (against the same ``H`` without, when measured too);

and reports ``tokens_per_s_ratio`` (outer / per-step), the bytes every peer sent per token in
each mode, and whether the replicas held the same hash at every step (per-step) or round
(outer). The groups are ``bench pool``'s (``pool.run_group``), so the peers are the real CLI
over real aiortc. Needs root (cgroups, the namespace); otherwise the document says why it
skipped. Ratios, measured in one run, are the result; the seconds are this machine's.
docs/BENCHMARKS.md, ``lowcomm``, has the current figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from typing import Any, TypeVar

from daisychain.bench import pool

T = TypeVar("T", int, float)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small")
    parser.add_argument("--peers", type=int, default=3, help="peers in the group (2-4)")
    parser.add_argument("--cores", type=float, default=0.5, help="CPU budget of each peer")
    parser.add_argument(
        "--link", default="10mbit", help="the shared link's rate, as tc writes it (10mbit)"
    )
    parser.add_argument("--batch", type=int, default=8, help="sequences per peer per step")
    parser.add_argument("--H", default="10", help="inner steps per outer round, comma-separated")
    parser.add_argument(
        "--overlap", default="0",
        help="outer rounds' overlap, comma-separated fractions in [0, 1] (e.g. 0,0.5: each H "
        "without and with half of every round's inner steps beside its exchange)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=3, help="measured steps, per-step mode")
    parser.add_argument("--warmup", type=int, default=2, help="steps before measuring, per-step")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds, outer mode")
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="rounds before measuring, outer mode"
    )
    parser.add_argument("--address", default="127.0.0.2", help="the peers' ICE host candidate")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="per group")


def _parse_list(spec: str, flag: str, kind: Callable[[str], T], lo: T, hi: T, what: str) -> list[T]:
    """A comma-separated list of ``kind`` values in [lo, hi], else SystemExit saying ``what``."""
    try:
        values = [kind(part) for part in spec.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(not lo <= v <= hi for v in values):
        raise SystemExit(f"daisychain bench lowcomm: {flag} {spec!r}: {what}")
    return values


def parse_h(spec: str) -> list[int]:
    """``--H 5,10``: inner steps per round, each 1 .. 1000, else SystemExit with a hint."""
    return _parse_list(spec, "--H", int, 1, 1000, "give inner steps per round as integers "
                       "1 .. 1000, comma-separated (e.g. --H 5,10)")  # fmt: skip


def parse_overlap(spec: str) -> list[float]:
    """``--overlap 0,0.5``: fractions in [0, 1], else SystemExit with a hint."""
    return _parse_list(spec, "--overlap", float, 0.0, 1.0, "give fractions of a round in "
                       "[0, 1], comma-separated (e.g. --overlap 0,0.5)")  # fmt: skip


def _argv(args: argparse.Namespace) -> list[str]:
    """These options again, for the re-run inside the namespace."""
    names = ("preset", "peers", "cores", "link", "batch", "H", "overlap", "steps", "warmup",
             "rounds")  # fmt: skip
    out = [f"--{name.replace('_', '-')}={getattr(args, name)}" for name in names]
    out += [f"--warmup-rounds={args.warmup_rounds}", f"--address={args.address}"]
    return [*out, f"--timeout-s={args.timeout_s}"]


def bytes_per_token(summary: dict[str, Any], tokens_per_step: float) -> float:
    """The most any peer sent per token the group trained (a step's or a round's)."""
    sent = max(int(p["bytes_sent_per_step"]) for p in summary["peers"])
    return round(sent / tokens_per_step, 3)


async def _run(args: argparse.Namespace, hs: list[int], overlaps: list[float]) -> dict[str, Any]:
    from daisychain.model.config import PRESETS

    seq_len = PRESETS[args.preset].seq_len
    g = args.batch * args.peers
    cores = (args.cores,) * args.peers
    out: dict[str, Any] = {
        "preset": args.preset, "peers": args.peers, "cores_each": args.cores,
        "link": args.link, "lane_batch": args.batch, "global_batch": g, "seq_len": seq_len,
        "load_avg_at_start": os.getloadavg()[0],
    }  # fmt: skip
    step_args = argparse.Namespace(
        preset=args.preset, steps=args.steps, warmup=args.warmup, address=args.address,
        timeout_s=args.timeout_s,
    )  # fmt: skip
    per_step = pool.summarize(
        await pool.run_group(cores, step_args, args.batch, seq_len, g), step_args, seq_len
    )
    out["per_step"] = per_step
    if "error" in per_step:
        return out
    per_step["bytes_per_token"] = bytes_per_token(per_step, per_step["tokens_per_step"])
    out["outer"] = {}
    for h, overlap in [(h, o) for h in hs for o in overlaps]:
        outer_args = argparse.Namespace(**{
            **vars(step_args), "steps": args.rounds, "warmup": args.warmup_rounds,
        })  # fmt: skip
        lead = ("--sync", "outer", "--outer-steps", str(h), "--outer-overlap", str(overlap))
        logs = await pool.run_group(cores, outer_args, args.batch, seq_len, g, lead_options=lead)
        group = pool.summarize(logs, outer_args, seq_len)
        if "error" not in group:
            # A protocol step of an outer run is a round: H inner steps of the global batch.
            group["tokens_per_step"] *= h
            group["tokens_per_s"] = round(group["tokens_per_s"] * h, 2)
            group["bytes_per_token"] = bytes_per_token(group, group["tokens_per_step"])
            group["tokens_per_s_ratio"] = round(group["tokens_per_s"] / per_step["tokens_per_s"], 3)
            group["bytes_per_token_ratio"] = round(
                per_step["bytes_per_token"] / max(group["bytes_per_token"], 1e-9), 2
            )
            group["inner_steps_per_round"] = h
            group["overlap"] = overlap
            plain = out["outer"].get(f"H={h}", {})
            if overlap and "tokens_per_s" in plain:
                ratio = group["tokens_per_s"] / plain["tokens_per_s"]
                group["tokens_per_s_vs_no_overlap"] = round(ratio, 3)
        out["outer"][f"H={h}" if not overlap else f"H={h} overlap={overlap:g}"] = group
    out["load_avg_at_end"] = os.getloadavg()[0]
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from daisychain.bench.rig import cpubudget, shaping
    from daisychain.bench.rig import mesh_browser as browser
    from daisychain.model.config import PRESETS

    if args.preset not in PRESETS:
        raise SystemExit(f"daisychain bench lowcomm: unknown preset {args.preset!r}")
    if not 2 <= args.peers <= 4 or not 0.01 <= args.cores <= 64:
        raise SystemExit("daisychain bench lowcomm: --peers must be 2-4, --cores 0.01 .. 64")
    if min(args.steps, args.warmup, args.rounds, args.warmup_rounds) < 1:
        raise SystemExit(
            "daisychain bench lowcomm: --steps, --warmup, --rounds and --warmup-rounds must be "
            "at least 1"
        )
    hs = parse_h(str(args.H))
    overlaps = parse_overlap(str(args.overlap))
    args.link = shaping.parse_rate(args.link)
    why = cpubudget.unavailable() or shaping.unavailable()
    if why is not None:
        return {"skipped": why}
    if browser.needs_reexec():
        return browser.in_namespace(_argv(args), bench="lowcomm")
    if os.environ.get("DAISYCHAIN_NETNS") != "1":
        browser.set_up_namespace()  # the re-run, inside its fresh namespace
    with shaping.shaped_loopback(args.link):
        result = asyncio.run(_run(args, hs, overlaps))
    ratios = [g.get("tokens_per_s_ratio") for g in result.get("outer", {}).values()]
    result["best_tokens_per_s_ratio"] = max((r for r in ratios if r is not None), default=None)
    result["notes"] = (
        "tokens_per_s is the leader's: global batch x sequence length (x H in an outer run) over "
        "its seconds per step (per round); bytes_per_token is the most any peer sent, frames "
        "and headers included, over the tokens the group trained meanwhile"
    )
    return result
