"""``daisychain demo``: a local server and three headless peers train a few steps together.

Everything runs in this process: the signaling server on 127.0.0.1, three ``p2p.Node`` peers
(asyncio tasks, real aiortc data channels between them), the `tiny` model. It prints the loss
curve and whether the three replicas ended bit-identical (`replicas identical: yes` + hash).

Keeping the traffic on this machine: aioice (aiortc's ICE) never offers 127.0.0.1 as a
candidate, and a machine may have no other address at all. The demo therefore makes aioice
offer 127.0.0.2 only (``--address``): on Linux the whole 127.0.0.0/8 is routed to the loopback
interface, so the peers reach each other there and no packet leaves the machine. On systems
where 127.0.0.2 is not a loopback address (macOS), pass an address of this machine instead,
e.g. ``--address 192.168.1.20``, or run the demo inside a network namespace (``unshare -rn``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from daisychain.model.config import PRESETS

PEERS = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=12, help="steps to train")
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    parser.add_argument("--batch", type=int, default=2, help="sequences per peer per step")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--address", default="127.0.0.2",
        help="the only ICE host candidate address (default: a loopback address)",
    )  # fmt: skip


@contextmanager
def only_candidate(address: str) -> Iterator[None]:
    """Make aioice gather exactly ``address`` (it otherwise skips 127.0.0.1 and would use the
    machine's network addresses). aioice looks the function up at call time, so patching the
    module attribute for the demo's duration is enough."""
    from aioice import ice

    original = ice.get_host_addresses
    ice.get_host_addresses = lambda use_ipv4, use_ipv6: [address]
    try:
        yield
    finally:
        ice.get_host_addresses = original


async def _demo(args: argparse.Namespace) -> int:
    from daisychain.corpus.load import load_corpus
    from daisychain.p2p.local import run_group
    from daisychain.p2p.mesh import MeshError
    from daisychain.p2p.node import LeadConfig, StepRecord
    from daisychain.server.app import serve_local
    from daisychain.server.config import DataConfig, ServerConfig
    from daisychain.tokenizer import load_default

    tok = load_default()
    tokens = load_corpus(None, tok).train
    async with serve_local(ServerConfig(data=DataConfig(offline=True))) as url:
        print(f"server on {url}; {PEERS} peers, model {args.preset}, {args.steps} steps")
        curve: list[StepRecord] = []
        lead = LeadConfig(
            preset=args.preset, steps=args.steps, lr=args.lr, seed=args.seed,
            batch=args.batch, seq_len=args.seq_len, min_peers=PEERS,
        )  # fmt: skip

        def record(peer: int, step: StepRecord) -> None:
            if peer == 0:
                curve.append(step)

        try:
            outcomes = await run_group(
                url, lead, PEERS, tokens, tok.sha256, tok.vocab_size,
                name="demo", timeout_s=60 + 20 * args.steps, on_step=record,
            )  # fmt: skip
        except MeshError as exc:
            print(f"demo: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
            return 1
        except TimeoutError:
            print(
                "demo: the peers did not finish in time; if no step ran, the peers could not "
                f"connect over {args.address}: try --address with an address of this machine",
                file=sys.stderr,
            )
            return 1
    print("step  loss     hash")
    for r in curve:
        bar = "#" * max(1, int(r.loss * 4))
        print(f"{r.step:>4}  {r.loss:7.4f}  {r.hash[:12]}  {bar}")
    hashes = {o.hash for o in outcomes}
    same = len(hashes) == 1 and all(o.reason == "done" for o in outcomes)
    final = next(iter(hashes))
    print(f"replicas identical: {'yes' if same else 'NO'} ({final if same else hashes})")
    return 0 if same else 3


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    with only_candidate(args.address):
        return asyncio.run(_demo(args))
