"""``daisychain bench mesh``: bytes on the wire, exchange goodput and the step time split.

1. **Bytes per peer per step** at N = 2, 3, 4 with real gradients of ``--preset`` (default
   `tiny`; one batch per rank):
   the frames a peer sends in the quantized reduce-scatter + all-gather (28-byte headers and
   deflate included), against a float32 full mesh (every peer sends its whole float32
   gradient to every other peer, same framing). Also the relative error of the exchanged mean
   gradient against the float32 mean.
2. **The exchange's CPU per MB** (part ``cpu``, bench/_exchange_cpu.py): quantize, framing and
   CRC, deflate, reassembly, inflate, dequantize, reduce, and a raw aiortc channel, per side.
3. **A live run**: a local server and N = 3 peers in this process over real aiortc channels
   (equal shares): compute and exchange seconds per step and the exchange goodput (bytes sent /
   exchange time), per peer and for the group (all bytes of a step over its exchange), against
   a raw aiortc channel measured in the same run (48 KiB messages, one direction).

4. **Peers in processes of their own** (``--processes 8,64``: lane batches to measure; off by
   default): three headless peers (``bench pool``'s groups), each held to ``--process-cores``
   of CPU (a cgroup quota; needs root, else the part says why it skipped), train ``--preset``
   at each lane batch and the preset's sequence length (global batch 3 x lane, shared out by
   measured speed as in any run: near-equal here). Per peer: the part of its step it is not
   computing (the visible exchange: everything the overlap does not hide, waiting included)
   and its exchange goodput (frames sent / exchange seconds), against a
   **raw aiortc mesh between processes** held to the same budgets (bench/_raw_mesh.py: every
   process sends as many bytes as a peer sent per step, spread over its channels, all at once),
   measured right after each group. Each lane batch runs twice: first with every chunk sent
   only after the whole gradient (``--no-early-chunks``, the baseline), then as peers run by
   default, each chunk leaving as soon as the backward produced it (p2p/early.py); reported:
   the step time against the baseline's and the share of bytes that left early.

5. **With browser peers** (``--tabs webgpu,cpu``, bench/rig/mesh_browser.py): Chromium tabs on the
   real page join a Python-led run; per peer and backend, bytes sent/received per step, step,
   compute and exchange time and the exchange's share of the step, beside an all-Python group of
   the same size played in the same run. Needs a network namespace (root; the bench re-runs
   itself under ``unshare -n``), else the section says why it skipped.

Traffic stays on this machine: ICE gathers only 127.0.0.2 (see daisychain.demo), or the
namespace's veth address with tabs. The peers share this process (and its cores), so absolute
times are leads; the ratios are the result.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

import numpy as np

from daisychain.bench import _exchange_cpu as exchange_cpu
from daisychain.bench import _raw_mesh
from daisychain.bench._exchange_cpu import raw_channel_mb_s
from daisychain.p2p import allreduce
from daisychain.wire import codec, frames


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="tiny", help="model preset (bytes, cpu, live run)")
    parser.add_argument("--steps", type=int, default=6, help="steps of the live run")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--raw-mb", type=float, default=8.0, help="MB sent on the raw channel")
    parser.add_argument("--address", default="127.0.0.2", help="the ICE host candidate")
    parser.add_argument(
        "--tabs", default="", help="browser peers to add, comma-separated: webgpu, cpu"
    )
    parser.add_argument(
        "--py-followers", type=int, default=1, help="Python followers beside the tabs"
    )
    parser.add_argument(
        "--processes", default="",
        help="lane batches for the part with peers in processes of their own, comma-separated "
        "(e.g. 8,64); default: that part is not run",
    )  # fmt: skip
    parser.add_argument(
        "--process-cores", type=float, default=0.5, help="CPU budget of each peer process"
    )
    parser.add_argument(
        "--process-link", default="", metavar="RATE",
        help="limit the processes' shared link to RATE (tc's form, e.g. 40mbit) inside a "
        "network namespace of the run's own (root); default: plain loopback",
    )  # fmt: skip
    parser.add_argument(
        "--process-steps", type=int, default=3, help="measured steps per lane batch (after 3)"
    )


def _wire(payload: bytes, deflate: bool) -> int:
    return sum(
        len(f)
        for f in frames.fragment(
            frames.FrameKind.REDUCED, payload, transfer=1, step=1, deflate=deflate
        )
    )


def gradients(name: str, batch: int, seq_len: int) -> tuple[int, list[Any]]:
    """The parameter count of preset ``name`` and the flat gradients of ranks 0-3 at step 1."""
    from daisychain import training
    from daisychain.corpus.load import load_corpus
    from daisychain.model.config import preset
    from daisychain.optim import AdamWConfig
    from daisychain.tokenizer import load_default

    tok = load_default()
    tokens = load_corpus(None, tok).train
    cfg = preset(name, vocab_size=tok.vocab_size, batch=batch, seq_len=seq_len)
    state = training.init(cfg, AdamWConfig(lr=3e-3), 1)
    grads = []
    for rank in range(4):
        x, y = training.next_batch(state, tokens, rank)
        grads.append(codec.flatten(training.compute_grads(state, x, y)[1]))
    return sum(g.size for g in state.params.values()), grads


# The profile's parts and the raw mesh, for tests (bench/_exchange_cpu.py and
# bench/_raw_mesh.py are this benchmark's helpers).
exchange_stages = exchange_cpu.stages
exchange_profile = exchange_cpu.profile
raw_mesh = _raw_mesh.run


def bytes_table(n_values: int, grads: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"parameters": n_values}
    for n in (2, 3, 4):
        flat = grads[:n]
        total_blocks = flat[0].size // codec.BLOCK
        sent = [0] * n
        parts_all = []
        equal = (1,) * n  # every rank computed one batch: equal shares
        for k in range(n):
            sl = allreduce.chunk_slice(total_blocks, equal, k)
            parts = []
            for j in range(n):
                payload, deq = codec.encode(flat[j][sl])
                parts.append(deq)
                if j != k:
                    sent[j] += _wire(payload, deflate=True)
            payload, _ = codec.encode(allreduce.reduce_chunk(parts, list(equal), n))
            sent[k] += _wire(payload, deflate=True) * (n - 1)
            parts_all.append(payload)
        mean, raw_sent = allreduce.exchange_locally(flat, equal)
        exact = np.sum(np.stack(flat), axis=0, dtype=np.float64) / n
        f32_payload = np.zeros(n_values, dtype=np.float32).tobytes()
        full_mesh = _wire(f32_payload, deflate=False) * (n - 1)
        out[f"n{n}"] = {
            "bytes_per_peer_per_step": max(sent),
            "bytes_per_peer_uncompressed_payload": raw_sent,
            "float32_full_mesh_bytes": full_mesh,
            "ratio_vs_float32_full_mesh": round(max(sent) / full_mesh, 4),
            "ratio_uncompressed_vs_float32_full_mesh": round(raw_sent / full_mesh, 4),
            "mean_gradient_relative_error": float(
                np.linalg.norm(mean - exact) / np.linalg.norm(exact)
            ),
        }
    return out


async def live_run(args: argparse.Namespace) -> dict[str, Any]:

    from daisychain.corpus.load import load_corpus
    from daisychain.p2p.local import run_group
    from daisychain.p2p.node import LeadConfig, StepRecord
    from daisychain.server.app import serve_local
    from daisychain.server.config import DataConfig, ServerConfig
    from daisychain.tokenizer import load_default

    tok = load_default()
    tokens = load_corpus(None, tok).train
    async with serve_local(ServerConfig(data=DataConfig(offline=True))) as url:
        records: list[list[StepRecord]] = [[], [], []]
        # Three equal peers in one process: equal shares, so that a step's timing noise does
        # not move work between them and the three exchange the same bytes.
        lead = LeadConfig(preset=args.preset, steps=args.steps, batch=args.batch,
                          seq_len=args.seq_len, min_peers=3, shares_by="equal")  # fmt: skip
        outcomes = await run_group(
            url, lead, 3, tokens, tok.sha256, tok.vocab_size,
            name="bench", timeout_s=600, on_step=lambda i, r: records[i].append(r),
        )  # fmt: skip
        raw = await raw_channel_mb_s(args.raw_mb)
    steady = [r for recs in records for r in recs if r.step > 1]  # step 1 includes warm-up
    compute = float(np.median([r.compute_s for r in steady]))
    exchange = float(np.median([r.exchange_s for r in steady]))
    sent = sum(r.bytes_sent for r in steady)
    goodput = sent / sum(r.exchange_s for r in steady) / 1e6
    # The group's goodput: every byte the three sent in a step over the step's exchange (the
    # longest peer's). Like the raw channel (one sender and one receiver here), it is what this
    # one process's CPU moves through aiortc per second.
    by_step: dict[int, list[StepRecord]] = {}
    for r in steady:
        by_step.setdefault(r.step, []).append(r)
    group = [
        sum(r.bytes_sent for r in rs) / max(r.exchange_s for r in rs) / 1e6
        for rs in by_step.values() if len(rs) == 3
    ]  # fmt: skip
    group_goodput = float(np.median(group)) if group else 0.0
    return {
        "peers": 3,
        "steps": args.steps,
        "replicas_identical": len({o.hash for o in outcomes}) == 1,
        "compute_s_median": round(compute, 4),
        "exchange_s_median": round(exchange, 4),
        "exchange_fraction_of_step": round(exchange / (compute + exchange), 3),
        "exchange_goodput_mb_s": round(goodput, 3),
        "raw_channel_mb_s": round(raw, 2),
        "exchange_vs_raw_goodput_ratio": round(goodput / raw, 4),
        "group_goodput_mb_s": round(group_goodput, 3),
        "group_vs_raw_goodput_ratio": round(group_goodput / raw, 4),
        "bytes_sent_per_peer_per_step": int(np.median([r.bytes_sent for r in steady])),
    }


def parse_lane_batches(spec: str) -> list[int]:
    """``--processes``: positive lane batches, e.g. ``8,64``."""
    try:
        batches = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        batches = []
    if not batches or min(batches) < 1:
        raise SystemExit(
            f"daisychain bench mesh: --processes {spec!r} is not a list of lane batches "
            "(hint: positive integers, comma-separated, e.g. 8,64)"
        )
    return batches


async def in_processes(args: argparse.Namespace, batches: list[int]) -> dict[str, Any]:
    """Part 4: three peer processes under CPU budgets per lane batch, and the raw mesh (on
    a link limited to ``--process-link`` when given)."""
    from daisychain.bench.rig import cpubudget, shaping

    why = cpubudget.unavailable()
    if why is None and args.process_link:
        why = shaping.unavailable()
    if why is not None:
        return {"skipped": why}
    if not args.process_link:
        return await _groups(args, batches)
    with shaping.shaped_loopback(args.process_link):
        return {"link": args.process_link, **await _groups(args, batches)}


async def _groups(args: argparse.Namespace, batches: list[int]) -> dict[str, Any]:
    from daisychain.bench import pool
    from daisychain.model.config import PRESETS

    cores = (args.process_cores,) * 3
    seq_len = PRESETS[args.preset].seq_len  # as bench pool trains it
    run_args = argparse.Namespace(
        preset=args.preset, steps=args.process_steps, warmup=3, address=args.address,
        timeout_s=900.0,
    )  # fmt: skip
    out: dict[str, Any] = {"peers": 3, "cores_each": args.process_cores, "seq_len": seq_len}
    for lane in batches:
        # The baseline first: every chunk sent after the whole gradient (p2p/early.py off).
        logs = await pool.run_group(cores, run_args, lane, seq_len, 3 * lane,
                                    ("--no-early-chunks",))  # fmt: skip
        late = pool.summarize(logs, run_args, seq_len)
        logs = await pool.run_group(cores, run_args, lane, seq_len, 3 * lane)
        group = pool.summarize(logs, run_args, seq_len)
        if "error" in group or "error" in late:
            out[f"lane_{lane}"] = group if "error" in group else late
            continue
        peers = group["peers"]
        sent = float(np.median([p["bytes_sent_per_step"] for p in peers]))
        raw = await raw_mesh(3, args.process_cores, sent / 1e6, args.address)
        goodput = [p["bytes_sent_per_step"] / p["exchange_s"] / 1e6 for p in peers]
        raw_peer = float(np.median(raw["peer_goodput_mb_s"]))
        out[f"lane_{lane}"] = {
            "global_batch": 3 * lane,
            "seconds_per_step": group["seconds_per_step"],
            "replicas_identical_every_step": group["replicas_identical_every_step"],
            "visible_exchange_share": [p["not_computing_share"] for p in peers],
            "sent_early_share": [
                round(p["bytes_early_per_step"] / max(p["bytes_sent_per_step"], 1), 3)
                for p in peers
            ],
            "without_early_chunks": {
                "seconds_per_step": late["seconds_per_step"],
                "visible_exchange_share": [p["not_computing_share"] for p in late["peers"]],
                "replicas_identical_every_step": late["replicas_identical_every_step"],
            },
            "step_time_vs_without_early_chunks": round(
                group["seconds_per_step"] / late["seconds_per_step"], 4
            ),
            "compute_s": [p["compute_s"] for p in peers],
            "exchange_s": [p["exchange_s"] for p in peers],
            "bytes_sent_per_step": [p["bytes_sent_per_step"] for p in peers],
            "exchange_goodput_mb_s": [round(g, 3) for g in goodput],
            "raw_mesh": raw,
            "exchange_vs_raw_mesh_goodput": round(float(np.median(goodput)) / raw_peer, 4),
        }
    return out


def _argv(args: argparse.Namespace) -> list[str]:
    """These options again, for the re-run inside the namespace."""
    out = [f"--preset={args.preset}", f"--steps={args.steps}", f"--batch={args.batch}"]
    out += [f"--seq-len={args.seq_len}"]
    out += [f"--raw-mb={args.raw_mb}", f"--address={args.address}", f"--tabs={args.tabs}"]
    out += [f"--processes={args.processes}", f"--process-cores={args.process_cores}"]
    out += [f"--process-link={args.process_link}"]
    return [*out, f"--py-followers={args.py_followers}", f"--process-steps={args.process_steps}"]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from daisychain.bench.rig import mesh_browser as browser
    from daisychain.bench.rig import netns, shaping
    from daisychain.demo import only_candidate

    kinds = browser.parse_tabs(args.tabs) if args.tabs else []
    if args.process_link:
        args.process_link = shaping.parse_rate(args.process_link)
    if args.py_followers < 0:
        raise SystemExit("daisychain bench mesh: --py-followers must be 0 or more")
    batches = parse_lane_batches(args.processes) if args.processes else []
    if args.process_steps < 1 or not 0.01 <= args.process_cores <= 64:
        raise SystemExit(
            "daisychain bench mesh: --process-steps must be at least 1 and --process-cores "
            "within 0.01 .. 64"
        )
    skipped = browser.why_not_here() if kinds else None
    # A shaped link needs the run's own namespace too (its loopback is the one shaped).
    shaped = bool(batches and args.process_link and shaping.unavailable() is None)
    if (kinds and skipped is None) or shaped:
        if browser.needs_reexec():
            return browser.in_namespace(_argv(args))
        if os.environ.get("DAISYCHAIN_NETNS") != "1":
            browser.set_up_namespace()  # the re-run, inside its fresh namespace
    n_values, grads = gradients(args.preset, args.batch, args.seq_len)
    result: dict[str, Any] = {"preset": args.preset, "bytes": bytes_table(n_values, grads)}
    with only_candidate(args.address):
        result["cpu"] = exchange_cpu.profile(grads[0], args.raw_mb)
        result["live"] = asyncio.run(live_run(args))
    if batches:
        result["processes"] = asyncio.run(in_processes(args, batches))
    if skipped is not None:
        result["browser"] = {"skipped": skipped}
    elif kinds:
        with only_candidate(netns.NETNS_ADDRESS):
            result["browser"] = asyncio.run(browser.run(args, kinds))
    result["notes"] = (
        "exchange_s is from the end of this peer's compute to applying the step: it includes "
        "waiting for the slowest peer's compute (the three peers share this process's cores)"
    )
    return result
