"""``daisychain bench converge``: the contract's loss against a float32 reference, same everything.

Trains ``--preset`` (default small) for ``--steps`` (default 300) on the built-in corpus twice:
once on the contract (exact int8 products, two-limb backward, pinned float ops) and once with
the float32 reference model (``daisychain.model.reference``), with the same initialisation, the
same batches and the same optimizer. Reports the mean training loss of the last 20 steps and the
validation loss of each, and ``final_loss_ratio`` = contract / reference (target within 2%).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)


def _val_loss(state: Any, tokens: np.ndarray) -> float:
    from daisychain.batches import sample_batch
    from daisychain.training import compute_grads

    losses = []
    for i in range(4):
        x, y = sample_batch(tokens, state.cfg.batch, state.cfg.seq_len, state.seed ^ 0x5EED, i)
        loss, _ = compute_grads(state, x, y)
        losses.append(float(loss))
    return float(np.mean(losses))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from daisychain import training
    from daisychain.corpus import load_builtin_text, split_train_val
    from daisychain.model.config import preset
    from daisychain.optim import AdamWConfig
    from daisychain.tokenizer import load_default
    from daisychain.tokenizer.cache import encode_corpus_cached

    tok = load_default()
    train_text, val_text = split_train_val(load_builtin_text())
    train, val = encode_corpus_cached(train_text, tok), encode_corpus_cached(val_text, tok)
    cfg = preset(args.preset, vocab_size=tok.vocab_size)
    opt = AdamWConfig(lr=args.lr, warmup_steps=args.warmup)
    out: dict[str, Any] = {
        "benchmark": "converge",
        "preset": args.preset,
        "steps": args.steps,
        "lr": args.lr,
    }
    for backend in ("contract", "reference"):
        state = training.init(cfg, opt, args.seed, backend=backend)
        losses = []
        t0 = time.perf_counter()
        for _ in range(args.steps):
            x, y = training.next_batch(state, train)
            losses.append(float(training.train_step(state, x, y, with_hash=False).loss))
        out[backend] = {
            "first_loss": round(losses[0], 4),
            "final_loss": round(float(np.mean(losses[-20:])), 4),
            "val_loss": round(_val_loss(state, val), 4),
            "seconds": round(time.perf_counter() - t0, 1),
        }
    c, r = out["contract"], out["reference"]
    out["final_loss_ratio"] = round(c["final_loss"] / r["final_loss"], 4)
    out["val_loss_ratio"] = round(c["val_loss"] / r["val_loss"], 4)
    return out
