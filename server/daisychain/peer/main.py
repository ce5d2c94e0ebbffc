"""``python -m daisychain.peer``: a headless peer that joins a DaisyChain group and trains.

    python -m daisychain.peer --server http://HOST:8787 [--room CODE] [--name NAME]
    python -m daisychain.peer --invite 'https://HOST:8787/?room=CODE#invite=TOKEN'
    python -m daisychain.peer --server URL --lead --preset tiny --steps 300 --min-peers 2
    python -m daisychain.peer --server https://HOST:8787 --fingerprint SHA256:AB:CD:...

With ``--lead`` this peer configures the run (model preset, batch, steps, learning rate, seed),
waits for ``--min-peers`` peers and leads; otherwise it follows whoever leads its group.
``--backend auto`` (the default) computes on a gated wgpu kernel only when it measures faster
than numpy at start (the choice and why are printed), and measures the gated backends again
during the run when its step slows down, switching to one clearly faster (peer/recheck.py; a
switch is printed). Progress is one line per step (step, loss, tokens/s, peers, hash
agreement) on stderr, or one JSON object per event on stdout with ``--json``.
``--checkpoint PATH`` is saved atomically at the end, every ``--save-every N`` steps, on
SIGUSR1, and on Ctrl-C, which then leaves cleanly (the others drop this peer from the next
roster). SIGUSR2 on the leader ends the whole run at the next step boundary.
A server started with ``daisychain serve --https`` has a self-signed certificate: this peer
trusts it only when ``--fingerprint`` names it (the SHA-256 the server printed at start), and
stops with a hint when the server presents another one (``p2p.serverlink``).
``--data fineweb`` on the leader trains on FineWeb-Edu at the server's pinned revision: every
peer fetches its own batches from the server's ``/data`` a few steps ahead (``p2p.datafeed``);
a peer whose server cannot serve that revision refuses the run, and one that loses its data
mid-run leaves it (exit code 4) rather than train on other text.
Exit codes: 0 run done (or ended by the leader), 1 could not join (the message says why and
what to do), 3 the sync guard stopped the run, 4 this peer could not read the run's training
data, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import resource
import signal
import sys
import time
from typing import Any

from daisychain import datanames, fineweb
from daisychain.cpu import fused as cpufused
from daisychain.model.config import PRESETS, ConfigError, preset
from daisychain.p2p import invitelink, serverlink
from daisychain.p2p.datafeed import Encoder, FineWebFeed
from daisychain.p2p.footprint import estimate
from daisychain.p2p.mesh import Mesh, MeshError
from daisychain.p2p.node import LeadConfig, Node, Outcome, StepRecord, Timers
from daisychain.p2p.runconfig import Limits
from daisychain.p2p.traffic import StepTraffic
from daisychain.peer.backend import CHOICES, BackendUnavailable, Choice, choose, step_timer
from daisychain.peer.recheck import Check, Recheck
from daisychain.tokenizer import Tokenizer
from daisychain.wire.ice import IceConfig, IceError, IceIssuer
from daisychain.wire.signaling import IceServer

EXIT_OK, EXIT_JOIN, EXIT_FORK, EXIT_DATA, EXIT_INTERRUPTED = 0, 1, 3, 4, 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--server", help="DaisyChain server, e.g. http://HOST:8787 (default: --invite's)"
    )
    parser.add_argument(
        "--fingerprint", metavar="SHA256:AB:CD:...",
        help="trust the https --server only with this certificate (its SHA-256, as `daisychain "
        "serve --https` prints it at start and the page's \"Add a device\" shows it): needed "
        "for a self-signed certificate; a server with another one is refused",
    )  # fmt: skip
    parser.add_argument("--room", help="private room code (default: the group of your network)")
    parser.add_argument(
        "--invite", metavar="LINK",
        help="a room's invite link from its host's page (quote it: it holds #): join the room "
        "without waiting for the host's approval",
    )  # fmt: skip
    parser.add_argument("--name", default="", help="name shown to the other devices")
    parser.add_argument(
        "--tokenizer", metavar="PATH",
        help="a tokenizer.json of your own (`daisychain tokenizer --out PATH`; default: the "
        "shipped one): a run is named by its tokenizer's SHA-256, so every peer of the run "
        "needs the same file",
    )  # fmt: skip
    parser.add_argument(
        "--backend", default="auto", choices=CHOICES,
        help="who computes the products: a gated wgpu kernel, the numpy reference, or auto "
        "(the faster of the two, measured at start)",
    )  # fmt: skip
    ice = parser.add_argument_group(
        "ICE servers (default: the ones the server hands out, usually none: direct routes only)"
    )
    ice.add_argument(
        "--ice-server", action="append", default=[], metavar="URL",
        help="STUN/TURN server, repeatable (replaces the server's): stun:HOST[:PORT], "
        "turn:HOST[:PORT][?transport=udp|tcp], turns:HOST[:PORT]",
    )  # fmt: skip
    ice.add_argument("--ice-username", help="TURN username for the --ice-server turn: URL")
    ice.add_argument("--ice-credential", help="TURN password for --ice-username")
    ice.add_argument(
        "--ice-relay-only", action="store_true",
        help="connect through the TURN relay only (iceTransportPolicy relay): hides this "
        "device's addresses; every byte goes through the TURN server",
    )  # fmt: skip
    parser.add_argument("--approve", choices=("all", "none"), default="none",
                        help="as a room's host: admit every join request, or none")  # fmt: skip
    lead = parser.add_argument_group("leading a run (--lead)")
    lead.add_argument("--lead", action="store_true", help="configure and lead the run")
    lead.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="model size")
    lead.add_argument("--steps", type=int, default=300, help="steps to train")
    lead.add_argument("--lr", type=float, default=3e-3, help="learning rate")
    lead.add_argument("--warmup", type=int, default=0, help="linear warm-up steps")
    lead.add_argument("--seed", type=int, default=1, help="seed of init and batches")
    lead.add_argument(
        "--batch", type=int,
        help="sequences per lane: what one device holds at a time (default: the preset's)",
    )  # fmt: skip
    lead.add_argument(
        "--global-batch", type=int, metavar="G",
        help="sequences per step for the whole group, shared out by measured speed "
        "(default: --batch x --min-peers)",
    )  # fmt: skip
    lead.add_argument(
        "--shares-by", choices=("speed", "equal"), default="speed",
        help="how the global batch is split: by each device's measured speed (faster devices "
        "compute more), or equally (the hashes then follow from the config alone)",
    )  # fmt: skip
    lead.add_argument(
        "--sync", choices=("step", "outer"), default="step",
        help="step: exchange gradients every step; outer: DiLoCo-style rounds of "
        "--outer-steps inner steps per exchange, --steps counting rounds (pages train them too; "
        "docs/PROTOCOL.md, Outer runs)",
    )  # fmt: skip
    lead.add_argument("--outer-steps", type=int, default=10, metavar="H",
                      help="--sync outer: batch indices per round: H inner AdamW steps of each "
                      "peer's share (--outer-cut share, the default), or of --batch sequences "
                      "(--outer-cut batch: a bigger share takes more)")  # fmt: skip
    lead.add_argument("--outer-lr", type=float, default=0.7,
                      help="--sync outer: outer Nesterov learning rate (DiLoCo: 0.7)")  # fmt: skip
    lead.add_argument("--outer-momentum", type=float, default=0.9,
                      help="--sync outer: outer Nesterov momentum (DiLoCo: 0.9)")  # fmt: skip
    lead.add_argument("--outer-overlap", type=float, default=0.0, metavar="F",
                      help="--sync outer: the fraction of a round's inner steps that run while "
                      "its exchange does (0: none; 0.5 hides an exchange as long as half a "
                      "round; docs/OUTER.md, Overlap)")  # fmt: skip
    lead.add_argument("--outer-cut", choices=("share", "batch"), default="share",
                      help="--sync outer: share: every peer takes H inner steps of its share "
                      "(measured better); batch: inner steps of --batch sequences, so a "
                      "faster peer takes more of them (docs/OUTER.md)")  # fmt: skip
    lead.add_argument("--seq-len", type=int, help="context length")
    for field, what in (
        ("width", "model width C"),
        ("layers", "transformer blocks"),
        ("heads", "attention heads (width / heads must be 16, 64 or 256)"),
    ):
        lead.add_argument(
            f"--{field}",
            type=int,
            help=f"custom model size: {what} "
            "(default: the preset's; the estimated memory is printed at start)",
        )
    lead.add_argument("--min-peers", type=int, default=2, help="start when this many are ready")
    lead.add_argument("--resume", metavar="PATH", help="restore the group from this checkpoint")
    lead.add_argument(
        "--data", choices=("builtin", "fineweb", "dataset"), default="builtin",
        help="training text: the built-in corpus, FineWeb-Edu, or the dataset the server was "
        "started on (serve --dataset), read through the server's /data at its pinned revision",
    )  # fmt: skip
    caps = parser.add_argument_group(
        "what a leader may impose on this peer (a run above a cap is refused with `incompatible`)"
    )
    caps.add_argument("--max-memory-mb", type=int, default=Limits.max_memory_mb, metavar="MB",
                      help="estimated memory of the run (default %(default)s)")  # fmt: skip
    caps.add_argument("--max-seq-len", type=int, default=Limits.max_seq_len, metavar="T",
                      help="context length (default %(default)s)")  # fmt: skip
    caps.add_argument("--max-batch", type=int, default=Limits.max_batch, metavar="B",
                      help="sequences per device per step (default %(default)s)")  # fmt: skip
    caps.add_argument("--max-steps", type=int, default=Limits.max_steps, metavar="N",
                      help="steps of one run (default %(default)s)")  # fmt: skip
    parser.add_argument(
        "--checkpoint", metavar="PATH",
        help="save here (atomically) at the end, on Ctrl-C, on SIGUSR1 and every --save-every",
    )  # fmt: skip
    parser.add_argument(
        "--save-every", type=int, default=0, metavar="N",
        help="also save --checkpoint every N steps (default: only at the end)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON object per event on stdout")
    timers = parser.add_argument_group("protocol timers")
    timers.add_argument("--step-timeout", type=float, default=Timers.step_timeout_s)
    timers.add_argument("--repair-after", type=float, default=Timers.repair_after_s)
    parser.add_argument(
        "--no-early-chunks", dest="early_chunks", action="store_false",
        help="send the gradient's chunks only once all of it is computed (default: each as soon "
        "as the backward produces it; the off switch is bench mesh's baseline)",
    )  # fmt: skip
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning"))


class Display:
    """The live progress line (stderr) or JSON events (stdout)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.last = time.perf_counter()
        self.node: Node | None = None
        self.private_seen: set[str] = set()  # peers already reported as training on private data

    def emit(self, obj: dict[str, Any]) -> None:
        if self.as_json:
            print(json.dumps(obj), flush=True)

    def backend_check(self, c: Check) -> None:  # called on the node's compute thread
        self.emit({
            "event": "backend-check", "cause": c.cause, "current": c.current,
            "backend": c.chosen, "switched": c.switched, "cost_s": round(c.cost_s, 4),
            "figures": {k: round(v, 5) for k, v in c.figures().items()}, "reason": c.reason(),
        })  # fmt: skip
        if c.switched and not self.as_json:
            print(f"backend {c.reason()}", file=sys.stderr, flush=True)

    def private_data(self, r: StepRecord) -> None:
        """Say once per peer that it trains on private data (the run's record of it)."""
        for peer in r.private_data:
            if peer in self.private_seen:
                continue
            self.private_seen.add(peer)
            self.emit({"event": "private-data", "peer": peer, "step": r.step})
            if not self.as_json:
                text = (f"peer {peer} trains on private data: its batches are of text only it "
                        "holds; only its gradients reach this run")  # fmt: skip
                print(text, file=sys.stderr, flush=True)

    def step(self, r: StepRecord) -> None:
        self.private_data(r)
        now = time.perf_counter()
        tok_s = r.tokens / max(now - self.last, 1e-9)
        self.last = now
        agree = self.node.agreement(r.step - 1) if self.node is not None else (0, 0)
        # An outer run's round: the bytes this peer sent over the tokens it trained on.
        mine = r.share * r.inner_steps * (r.tokens // max(sum(r.shares) * r.inner_steps, 1))
        bpt = r.bytes_sent / mine if mine else 0.0
        self.emit({
            "event": "step", "step": r.step, "round": r.round, "loss": r.loss, "hash": r.hash,
            "peers": len(r.roster), "roster": list(r.roster), "tokens_per_s": round(tok_s, 1),
            "shares": list(r.shares), "share": r.share, "global_batch": sum(r.shares),
            "compute_s": round(r.compute_s, 4), "exchange_s": round(r.exchange_s, 4),
            "exchange_work_s": round(r.exchange_work_s, 4),
            "seq_s": round(self.node.pace.seq_s if self.node else 0.0, 5),
            "bytes_sent": r.bytes_sent, "bytes_early": r.bytes_early, "leader": r.leader,
            "probe": r.probe, "backend": r.backend, "private_data": list(r.private_data),
            # p2p/traffic.py's per-step counts (bench scale and bench sim report these).
            "messages": r.traffic.messages, "frames": r.traffic.frames,
            "text_bytes": r.traffic.text_bytes, "piece_bytes": r.traffic.piece_bytes,
            "wire_bytes": r.traffic.wire_bytes,
            "connections": len(self.node.mesh.open_peers()) if self.node is not None else 0,
            **({"inner_steps": r.inner_steps, "bytes_per_token": round(bpt, 3)}
               if r.inner_steps else {}),
        })  # fmt: skip
        if not self.as_json:
            # A share of 0 computed no loss: a 0 there would read as a perfect model.
            loss = f"{r.loss:7.4f}" if r.share else "      -"
            what = f"round {r.step:>5}" if r.inner_steps else f"step {r.step:>6}"
            if r.inner_steps:
                loss += f"  {r.inner_steps} inner steps  {bpt:.2f} B/token"
            print(
                f"{what}  loss {loss}  {tok_s:8.0f} tok/s  peers {len(r.roster)}"
                f"  {work(r)}  hash {r.hash[:12]}  agree {agree[0]}/{agree[1]}"
                f" (step {r.step - 1})",
                file=sys.stderr, flush=True,
            )  # fmt: skip


def backend_recheck(chosen: Choice, start_cost_s: float, display: Display) -> Recheck | None:
    """``--backend auto`` with more than one gated backend: measure them again during the run
    (peer/recheck.py). Each check is a JSON event; the text output names only a switch."""
    if len(chosen.candidates) < 2:
        return None
    return Recheck(
        chosen.candidates, step_timer(), on_check=display.backend_check,
        start_cost_s=start_cost_s, timer_for=step_timer,
    )  # fmt: skip


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def lead_model(args: argparse.Namespace, vocab_size: int) -> dict[str, Any]:
    """The model this leader will configure, checked by the contract's rules (ConfigError with
    the rule's text), and its memory estimate on every device (``footprint.estimate``, what
    each follower compares with its ``--max-memory-mb``)."""
    changes: dict[str, Any] = {"vocab_size": vocab_size}
    for field in ("batch", "seq_len", "width", "layers", "heads"):
        if (value := getattr(args, field)) is not None:
            changes[field] = value
    cfg = preset(args.preset, **changes)
    fp = estimate(cfg)
    custom = any(getattr(args, f) is not None for f in ("width", "layers", "heads"))
    name = "custom" if custom else args.preset
    return {
        "preset": None if custom else args.preset, "vocab_size": cfg.vocab_size,
        "width": cfg.width, "layers": cfg.layers,
        "heads": cfg.heads, "seq_len": cfg.seq_len, "batch": cfg.batch, "params": fp.params,
        "memory_mb": round(fp.total_mb, 1),
        "describe": f"{name}: width {cfg.width}, {_count(cfg.layers, 'layer')}, "
        f"{_count(cfg.heads, 'head')}, context {cfg.seq_len}, {fp.params:,} parameters, about "
        f"{fp.total_mb:.0f} MiB per device to train",
    }  # fmt: skip


def work(r: StepRecord) -> str:
    """This peer's part of the step, as the step line says it."""
    if r.share == 0:
        return f"follows without computing (0 of {sum(r.shares)} sequences)"
    return f"computes {r.share} of {sum(r.shares)} sequences"


async def _main(args: argparse.Namespace) -> int:
    from daisychain.corpus.load import CorpusError, load_corpus

    display = Display(args.json)
    try:
        tok, encoder = load_tokenizer(args.tokenizer)
    except ValueError as exc:
        hint = "give a tokenizer.json written by `daisychain tokenizer --out PATH`"
        display.emit({"event": "error", "message": str(exc), "hint": hint})
        print(f"daisychain peer: {exc}\nhint: {hint}", file=sys.stderr)
        return EXIT_JOIN
    try:
        tokens = load_corpus(None, tok).train
    except CorpusError as exc:
        display.emit({"event": "error", "message": exc.message, "hint": exc.hint})
        print(f"daisychain peer: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return EXIT_JOIN
    try:
        started = time.perf_counter()
        chosen = await asyncio.to_thread(choose, args.backend)
        chose_s = time.perf_counter() - started
    except BackendUnavailable as exc:
        display.emit({"event": "error", "message": exc.message, "hint": exc.hint})
        print(f"daisychain peer: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return EXIT_JOIN
    passes = cpufused.describe() if chosen.compute.name != "numpy" else None
    display.emit({
        "event": "backend", "backend": chosen.compute.name, "reason": chosen.reason,
        **({"passes": passes} if passes else {}),
    })  # fmt: skip
    if not args.json:
        print(f"backend {chosen.reason}", file=sys.stderr)
        if passes:
            print(f"passes {passes}", file=sys.stderr)
    if args.lead and not args.resume:
        try:
            model = lead_model(args, tok.vocab_size)
        except ConfigError as exc:
            hint = "choose another --width/--layers/--heads (docs/USAGE.md, 'Model size')"
            display.emit({"event": "error", "message": str(exc), "hint": hint})
            print(f"daisychain peer: {exc}\nhint: {hint}", file=sys.stderr)
            return EXIT_JOIN
        display.emit({"event": "model", **model})
        if not args.json:
            print(f"model {model['describe']}", file=sys.stderr)
    pin = pinned_fingerprint(args)
    feed = await fineweb_feed(args.server, pin, encoder)
    refusal = lead_data_refusal(args, feed)
    if refusal is not None:
        message, hint = refusal
        display.emit({"event": "error", "message": message, "hint": hint})
        print(f"daisychain peer: {message}\nhint: {hint}", file=sys.stderr)
        return EXIT_JOIN
    mesh = Mesh(
        args.server, room=args.room, invite=args.invite_token, name=args.name,
        ice_servers=ice_servers(args), relay_only=args.ice_relay_only, fingerprint=pin,
        device={"kind": "python", "backend": chosen.compute.name},
    )  # fmt: skip
    mesh.auto_approve = args.approve == "all"
    try:
        await mesh.connect()
    except MeshError as exc:
        display.emit({"event": "error", "message": exc.message, "hint": exc.hint})
        print(f"daisychain peer: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        await mesh.close()
        return EXIT_JOIN
    lead = None
    if args.lead:
        lead = LeadConfig(
            preset=args.preset, steps=args.steps, lr=args.lr, warmup=args.warmup, seed=args.seed,
            batch=args.batch, seq_len=args.seq_len, width=args.width, layers=args.layers,
            heads=args.heads, min_peers=args.min_peers, resume=args.resume,
            global_batch=args.global_batch, shares_by=args.shares_by,
            data=feed.data_name if feed is not None and args.data != "builtin" else "builtin",
            sync=args.sync, outer_steps=args.outer_steps, outer_lr=args.outer_lr,
            outer_momentum=args.outer_momentum, outer_overlap=args.outer_overlap,
            outer_cut=args.outer_cut,
        )  # fmt: skip
    node = Node(
        mesh, tokens, tok.sha256, tok.vocab_size, lead=lead, checkpoint_path=args.checkpoint,
        save_every=args.save_every,
        timers=Timers(step_timeout_s=args.step_timeout, repair_after_s=args.repair_after),
        on_step=display.step, compute=chosen.compute, limits=limits(args), data=feed,
        early_chunks=args.early_chunks, recheck=backend_recheck(chosen, chose_s, display),
    )  # fmt: skip
    display.node = node
    display.emit({"event": "joined", "id": mesh.id, "role": "lead" if lead else "follow"})
    if not args.json:
        role = "leading" if lead else "following"
        print(f"joined as {mesh.id} ({role}); waiting for the run ...", file=sys.stderr)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, node.shutdown, "interrupted")
    loop.add_signal_handler(signal.SIGTERM, node.shutdown, "terminated")
    loop.add_signal_handler(signal.SIGUSR1, node.request_save)
    loop.add_signal_handler(signal.SIGUSR2, node.end_run, "the leader's user ended the run")
    try:
        outcome = await node.run()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
            loop.remove_signal_handler(signum)
        await mesh.close()
        if feed is not None:
            await feed.close()
    if node.data_error is not None:
        error = node.data_error
        display.emit({"event": "error", "message": error.message, "hint": error.hint})
        print(f"daisychain peer: left the run: {error.message}\nhint: {error.hint}",
              file=sys.stderr)  # fmt: skip
        return EXIT_DATA
    return _report(outcome, display, node.membership_traffic())


def confirmed(outcome: Outcome) -> str:
    """A run's final agreement in words (docs/PROTOCOL.md, "Stopping"): of the hashes of the
    last step that reached this peer, its own included, how many equal its own; a differing
    one is never counted as agreement."""
    same = sum(1 for digest in outcome.hashes.values() if digest == outcome.hash)
    differ = len(outcome.hashes) - same
    text = f"{same} replica{'' if same == 1 else 's'} identical at step {outcome.step}"
    return text + (f", {differ} differ from this one" if differ else "")


def _report(outcome: Outcome, display: Display, membership: StepTraffic | None = None) -> int:
    member = membership or StepTraffic()
    display.emit({
        "event": "stopped", "reason": outcome.reason, "step": outcome.step,
        "hash": outcome.hash, "message": outcome.message, "hashes": outcome.hashes,
        "code": outcome.code,
        # This process's peak resident memory (Linux reports ru_maxrss in KiB).
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "membership_messages": member.messages, "membership_bytes": member.wire_bytes,
    })  # fmt: skip
    if outcome.reason == "done":
        print(f"run done at step {outcome.step}; hash {outcome.hash}; {confirmed(outcome)}",
              file=sys.stderr)  # fmt: skip
        return EXIT_OK
    if outcome.reason == "fork":
        print(f"the sync guard stopped the run: {outcome.message}", file=sys.stderr)
        return EXIT_FORK
    if outcome.reason == "leader-request":
        print(f"the leader ended the run at step {outcome.step}; hash {outcome.hash}; "
              f"{confirmed(outcome)}", file=sys.stderr)  # fmt: skip
        return EXIT_OK
    if outcome.reason == "left":
        print(f"left the run at step {outcome.step} ({outcome.message})", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"daisychain peer: {outcome.message}", file=sys.stderr)
    if outcome.code == "version-mismatch":
        print("hint: run the same DaisyChain version on every peer", file=sys.stderr)
    return EXIT_JOIN


def load_tokenizer(path: str | None) -> tuple[Tokenizer, Encoder | None]:
    """The run's tokenizer (the shipped one, or ``path``) and, for ``path``, the fast encoder
    the data feed tokenizes windows with (None: the feed loads the shipped one's); a file that
    cannot be a DaisyChain tokenizer is a ``ValueError`` saying why."""
    from daisychain.tokenizer import load_default

    if path is None:
        return load_default(), None
    from daisychain.tokenizer.fast import ServingTokenizer

    try:
        return Tokenizer.from_file(path), ServingTokenizer.from_file(path).encode
    except (OSError, ValueError) as exc:  # missing, unreadable, not a tokenizer we can match
        raise ValueError(f"--tokenizer {path}: {str(exc)[:300]}") from None


async def fineweb_feed(
    server: str, fingerprint: bytes | None = None, encoder: Encoder | None = None
) -> FineWebFeed | None:
    """A feed of windows of the dataset ``server`` reads (FineWeb-Edu or its ``--dataset``), if
    it reads one at a pinned revision (its ``/api/status``: ``data.name``, ``data.revision``;
    a server from before data names is FineWeb-Edu); ``None`` otherwise, also when it cannot be
    reached or its
    certificate is not ``fingerprint`` (this peer then reads only the built-in corpus, and
    refuses a FineWeb-Edu run with ``incompatible``; joining says why the server was refused).
    A fingerprint for a plain http server raises ``ServerLinkError`` (``run`` refuses it first).
    """
    import aiohttp

    base = ("http" + server[2:] if server.startswith("ws") else server).rstrip("/")
    try:
        async with (
            serverlink.session(base, fingerprint) as session,
            session.get(f"{base}/api/status", timeout=aiohttp.ClientTimeout(total=10)) as resp,
        ):
            status = await resp.json(content_type=None)
        data = status["data"]
        revision, state = data["revision"], data["state"]
        name = data.get("name", None)
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if state == "offline" or not isinstance(revision, str):
        return None
    if not fineweb.REVISION_RE.fullmatch(revision):
        return None
    if name is None:
        name = fineweb.data_name(revision)
    try:
        parsed = datanames.parse(name) if isinstance(name, str) else None
    except ValueError:
        parsed = None
    if parsed is None or parsed.revision != revision:
        return None  # a name this version cannot train on: refuse such a run with a hint
    return FineWebFeed(base, revision, data_name=name, fingerprint=fingerprint, encoder=encoder)


def lead_data_refusal(args: argparse.Namespace, feed: FineWebFeed | None) -> tuple[str, str] | None:
    """Why this leader cannot train on ``--data`` through its server (message, hint), or None."""
    if not args.lead or args.data == "builtin":
        return None
    if feed is None:
        return (
            f"{args.server} does not serve "
            f"{'FineWeb-Edu' if args.data == 'fineweb' else 'a dataset'} at a pinned revision",
            "lead with --data builtin, or use a server started without --offline",
        )
    kind = "fineweb" if feed.source == "fineweb" else "dataset"
    if args.data != kind:
        return (
            f"{args.server} reads {datanames.describe(feed.data_name)}, not "
            f"{'FineWeb-Edu' if args.data == 'fineweb' else 'a dataset of its own'}",
            f"lead with --data {kind} (or builtin), or use a server that reads what you want",
        )
    return None


def pinned_fingerprint(args: argparse.Namespace) -> bytes | None:
    """--fingerprint as the certificate digest to pin, or None; ``ServerLinkError`` with a hint
    for one that is malformed or given with a plain http --server."""
    if args.fingerprint is None:
        return None
    pin = serverlink.parse_fingerprint(args.fingerprint)
    serverlink.check(args.server, pin)
    return pin


def ice_servers(args: argparse.Namespace) -> list[IceServer] | None:
    """The --ice-* flags as the peer's own ICE servers, or None to take the server's; checked
    by the server's rules (``wire.ice``): ``IceError`` with a hint."""
    if not args.ice_server and args.ice_username is None and args.ice_credential is None:
        return None
    config = IceConfig(
        urls=tuple(args.ice_server), username=args.ice_username, credential=args.ice_credential
    )
    return IceIssuer(config).servers("peer")


def limits(args: argparse.Namespace) -> Limits:
    return Limits(
        max_memory_mb=args.max_memory_mb, max_seq_len=args.max_seq_len,
        max_batch=args.max_batch, max_steps=args.max_steps,
    )  # fmt: skip


def take_invite(args: argparse.Namespace) -> None:
    """Fill --server and --room from --invite (``args.invite_token``: its token, or None);
    ``InviteLinkError`` when the link is malformed or disagrees with --room."""
    args.invite_token = None
    if args.invite is None:
        if args.server is None:
            raise invitelink.InviteLinkError(
                "no server given", "add --server http://HOST:8787, or --invite LINK"
            )
        return
    link = invitelink.parse(args.invite)
    if args.room is not None and args.room != link.room:
        raise invitelink.InviteLinkError(
            f"--room {args.room} differs from the room of --invite",
            "give the room in one place: --invite alone is enough",
        )
    args.server = args.server or link.server
    args.room = link.room
    args.invite_token = link.token


def run(args: argparse.Namespace) -> int:
    try:
        take_invite(args)
    except invitelink.InviteLinkError as exc:
        print(f"daisychain peer: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return EXIT_JOIN
    try:
        limits(args)
    except ValueError as exc:
        print(f"daisychain peer: {exc}\nhint: every --max-* cap is a positive integer",
              file=sys.stderr)  # fmt: skip
        return EXIT_JOIN
    try:
        ice_servers(args)
        pinned_fingerprint(args)
    except (IceError, serverlink.ServerLinkError) as exc:
        print(f"daisychain peer: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return EXIT_JOIN
    if args.save_every < 0 or (args.save_every and not args.checkpoint):
        print(
            "daisychain peer: --save-every N needs N >= 0 and a place to save\n"
            "hint: add --checkpoint PATH",
            file=sys.stderr,
        )
        return EXIT_JOIN
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s %(message)s")
    return asyncio.run(_main(args))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m daisychain.peer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
