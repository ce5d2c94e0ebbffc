"""``daisychain train``: single-process training on the built-in corpus or a text file.

Shows a progress line (step, loss, tokens/s, hash), writes a safetensors checkpoint every
``--save-every`` steps, at the end and on Ctrl-C (nothing is lost), and resumes bit-exactly with
``--resume``: batches are derived from (seed, step) alone, so a resumed run replays exactly the
hashes of an uninterrupted one. ``--json`` prints one JSON object per step on stdout.

A thin shell: the corpus comes from ``daisychain.corpus.load`` (whose ``CorpusError`` is printed
as a message and a hint), the step and the validation loss from ``daisychain.training``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from daisychain import checkpoint, training
from daisychain.corpus.load import CorpusError, load_corpus
from daisychain.model.config import PRESETS, ConfigError, preset
from daisychain.optim import AdamWConfig, OptimizerError
from daisychain.tokenizer import Tokenizer, load_default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="model size")
    parser.add_argument(
        "--text", metavar="FILE", help="train on this UTF-8 text file (default: built-in corpus)"
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=300,
        help="total steps to reach (0: write the initial weights' checkpoint and stop)",
    )
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="linear warm-up steps (clamped to --steps - 1, and to 0 when --steps is 0 or 1)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of init and batches (uint32)")
    parser.add_argument("--batch", type=int, help="sequences per step (default: the preset's)")
    parser.add_argument("--seq-len", type=int, help="context length (default: the preset's)")
    parser.add_argument(
        "--checkpoint", metavar="PATH", help="where to save (default: runs/<preset>.safetensors)"
    )
    parser.add_argument("--save-every", type=int, default=100, help="checkpoint interval (steps)")
    parser.add_argument("--resume", metavar="PATH", help="continue from this checkpoint")
    parser.add_argument("--eval-every", type=int, default=0, help="validation loss interval")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=("auto", "wgpu", "numpy"),
        help="who computes the integer products: a gated wgpu kernel, numpy, or auto (the "
        "faster correct one, measured at start); the bits are the same",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per step on stdout")
    parser.add_argument("--quiet", action="store_true", help="no progress line on stderr")


class Progress:
    """One status line on stderr: rewritten in place on a terminal, every 5% otherwise."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet
        self.tty = sys.stderr.isatty()
        self.every = max(1, total // 20)

    def update(self, step: int, loss: float, tok_s: float, digest: str, extra: str = "") -> None:
        if self.quiet:
            return
        line = (
            f"step {step:>6}/{self.total}  loss {loss:7.4f}  {tok_s:9.0f} tok/s  "
            f"hash {digest[:12]}{extra}"
        )
        if self.tty:
            sys.stderr.write("\r" + line.ljust(100))
            if step == self.total:
                sys.stderr.write("\n")
        elif step % self.every == 0 or step == self.total or extra:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def build_state(args: argparse.Namespace, tok: Tokenizer) -> training.TrainState:
    if args.resume:
        ck = checkpoint.load(args.resume, tokenizer_sha256=tok.sha256, vocab_size=tok.vocab_size)
        return ck.state
    changes = {"vocab_size": tok.vocab_size}
    if args.batch:
        changes["batch"] = args.batch
    if args.seq_len:
        changes["seq_len"] = args.seq_len
    cfg = preset(args.preset, **changes)
    opt = AdamWConfig(lr=args.lr, warmup_steps=min(args.warmup, max(args.steps - 1, 0)))
    if not 0 <= args.seed < 2**32:
        raise ConfigError(f"--seed must be in [0, 2^32), got {args.seed}")
    return training.init(cfg, opt, args.seed)


def run(args: argparse.Namespace) -> int:
    tok = load_default()
    try:
        state = build_state(args, tok)
    except (ConfigError, OptimizerError, checkpoint.CheckpointError) as exc:
        print(f"daisychain train: {exc}", file=sys.stderr)
        return 2
    from daisychain.peer.backend import BackendUnavailable, choose

    try:
        chosen = choose(args.backend)
    except BackendUnavailable as exc:
        print(f"daisychain train: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    state.ops = chosen.compute.ops
    if not args.quiet:
        print(f"backend {chosen.reason}", file=sys.stderr)
    ck_path = Path(args.checkpoint or args.resume or f"runs/{args.preset}.safetensors")
    ck_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        corpus = load_corpus(args.text, tok)
    except CorpusError as exc:
        print(f"daisychain train: {exc.message}\nhint: {exc.hint}", file=sys.stderr)
        return 2
    cfg = state.cfg
    if state.step >= args.steps:
        if args.resume:
            print(f"checkpoint is at step {state.step} >= --steps {args.steps}: nothing to do")
            return 0
        # --steps 0 on a fresh run: export the initial weights (step 0, zero moments).
        digest = checkpoint.save(ck_path, state, tok.sha256)
        if not args.quiet:
            print(
                f"saved the initial weights to {ck_path} (step 0, hash {digest[:16]})",
                file=sys.stderr,
            )
        return 0
    progress = Progress(args.steps, args.quiet or (args.json and not sys.stderr.isatty()))
    if not args.quiet:
        n_params = sum(p.size for p in state.params.values())
        print(
            f"training {args.preset if not args.resume else 'resumed'} model: {n_params:,} "
            f"params, {cfg.batch}x{cfg.seq_len} tokens/step, data: {corpus.source} "
            f"({len(corpus.train):,} tokens), from step {state.step}",
            file=sys.stderr,
        )
    tokens_per_step = cfg.batch * cfg.seq_len
    try:
        while state.step < args.steps:
            t0 = time.perf_counter()
            x, y = training.next_batch(state, corpus.train)
            res = training.train_step(state, x, y)
            tok_s = tokens_per_step / max(time.perf_counter() - t0, 1e-9)
            record: dict[str, object] = {
                "step": res.step,
                "loss": float(res.loss),
                "hash": res.hash,
                "lr": float(res.lr),
                "grad_norm": float(res.grad_norm),
                "tokens_per_s": round(tok_s, 1),
            }
            extra = ""
            if args.eval_every and res.step % args.eval_every == 0:
                record["val_loss"] = training.eval_loss(state, corpus.val)
                extra = f"  val {record['val_loss']:.4f}"
            if args.json:
                print(json.dumps(record), flush=True)
            progress.update(res.step, float(res.loss), tok_s, res.hash, extra)
            if args.save_every and res.step % args.save_every == 0:
                checkpoint.save(ck_path, state, tok.sha256)
    except KeyboardInterrupt:
        checkpoint.save(ck_path, state, tok.sha256)
        print(
            f"\ninterrupted at step {state.step}; saved {ck_path} "
            f"(continue with --resume {ck_path})",
            file=sys.stderr,
        )
        return 130
    digest = checkpoint.save(ck_path, state, tok.sha256)
    if not args.quiet:
        print(f"saved {ck_path} at step {state.step} (hash {digest[:16]})", file=sys.stderr)
    return 0
