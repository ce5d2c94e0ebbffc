"""``daisychain bench converge``: the contract's loss against a float32 reference, same everything.

Trains ``--preset`` (default small) for ``--steps`` (default 300) on the built-in corpus's training
part, once per seed of ``--seeds`` (default 1), twice each: on the contract (exact int8 products,
limb-quantized backward, pinned float ops) and with the float32 reference model
(``daisychain.model.reference``), with the same initialisation, batches and optimizer. The
learning rate warms up for ``--warmup`` steps, then by default (``--schedule linear``) decays
linearly to zero at the last step, so both runs end settled: at a constant rate the last steps'
loss swings by more than the 0.5% the comparison asks about (``--schedule constant`` keeps it).
Reports per seed the mean training loss of the last 20 steps and the validation loss of each
(``--val-batches`` batches of the validation part, seed ``seed ^ 0x5EED``: the first 4 are
docs/MODEL.md's "Data" batches; more of them measure the model, fewer its luck),
``val_loss_ratio`` = contract / reference (target: within 0.5% in the mean over seeds), and, at
the contract's final weights:

- ``logits_lost_share`` / ``logits_product_error``: the share of the logits gradient's norm its
  limb quantization loses against float64, and the error that leaves in its two products
  (docs/NUMERICS.md section 6; target below 0.1%), with contract v1's two-limb rule beside them;
- ``grad_cosine_median``: per tensor, the median over the validation batches of the cosine
  between the contract's gradient and the float64 reference's at the same weights;
- ``averaged``: whether that per-batch error averages out the way noise does. Over
  ``AVERAGE_BATCHES`` more validation batches (seed ``seed ^ 0xA7E``), per tensor: the
  ``bias_ratio`` of the error against float64 (``quality.bias_ratio``: ~1 for independent noise,
  ~sqrt(K) times the bias's share for a bias) and the cosine of the K-batch mean gradient with
  float64's K-batch mean (noise of per-batch cosine c averages to about
  1 / sqrt(1 + (1/c^2 - 1) / K)). Training uses a mean gradient too (over the group's batches,
  then over steps through the optimizer's moments): a noise-like error is what it forgives.

``--sync outer`` (docs/OUTER.md, "Measured"): an in-process group of ``--peers`` (default 4) trained
twice on the same tokens: per-step (every step every peer's gradient of its lane, the int8
exchange, one AdamW step) against the outer loop (every peer ``H`` inner AdamW steps on its own
lanes, then one outer round of ``daisychain.outer``), for each ``--H`` and ``--compress``;
validation loss and payload bytes per token of each, and loss against cumulative bytes.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--seeds takes comma-separated integers, e.g. 1,2,3 (got {text!r})"
        ) from None
    if not seeds or any(s < 0 or s >= 2**32 for s in seeds):
        raise argparse.ArgumentTypeError(f"--seeds: integers in [0, 2^32) expected, got {text!r}")
    return seeds


def _inner_steps(text: str) -> list[int]:
    try:
        out = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--H takes comma-separated integers, e.g. 10,50,100 (got {text!r})"
        ) from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(
            f"--H: inner steps per outer step must be >= 1, got {text!r}"
        )
    return out


def _compressions(text: str) -> list[str]:
    from daisychain.outer import Compression, CompressionError

    try:
        return [Compression.parse(s).name for s in text.split(",") if s.strip()]
    except CompressionError as exc:
        raise argparse.ArgumentTypeError(f"--compress: {exc}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="small", help="model preset")
    parser.add_argument("--steps", type=int, default=300, help="training steps")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up steps")
    parser.add_argument("--seeds", type=_seeds, default=[1], help="comma-separated run seeds")
    parser.add_argument(
        "--schedule",
        choices=("linear", "constant"),
        default="linear",
        help="learning rate after the warm-up: linear decay to 0 at the last step, or constant",
    )
    parser.add_argument(
        "--val-batches", type=int, default=32, help="validation batches of the val loss"
    )
    parser.add_argument(
        "--backends",
        default="contract,reference",
        help="which runs",
    )
    parser.add_argument(
        "--peers", type=int, default=0,
        help="instead: an in-process group of N peers (the quantized, share-weighted exchange "
        "of protocol version 2) against one process training the same global batch",
    )  # fmt: skip
    parser.add_argument(
        "--shares", default="",
        help="with --peers: sequences per peer per step, comma-separated (default: the "
        "preset's batch each); with --sync outer: each outer peer's sequences of every batch "
        "index, summing to peers x batch (a slow device's small share: it takes fewer inner "
        "steps of the batch)",
    )  # fmt: skip
    parser.add_argument(
        "--sync", choices=("step", "outer"), default="step",
        help="outer: per-step exchange against H inner steps then one outer step (issue 21); "
        "--peers defaults to 4 there",
    )  # fmt: skip
    parser.add_argument(
        "--H", type=_inner_steps, default=[10, 50, 100], dest="inner_steps",
        help="with --sync outer: inner steps per outer step, comma-separated",
    )  # fmt: skip
    parser.add_argument(
        "--compress", type=_compressions, default=["int8+ef", "topk:4+ef"],
        help="with --sync outer: pseudo-gradient codecs, comma-separated: int8, int8+ef, "
        "topk:K, topk:K+ef (K values kept per block of 256)",
    )  # fmt: skip
    parser.add_argument(
        "--batch", type=int, default=0, metavar="B",
        help="with --sync outer: sequences per peer per (inner) step instead of the preset's "
        "(both modes: per-step mode's global batch is peers x B)",
    )  # fmt: skip
    parser.add_argument(
        "--warm-start", type=int, default=0, metavar="W",
        help="with --sync outer: both modes start from W per-step steps trained together (as "
        "DiLoCo starts from a trained model); --steps, the bytes and the curve count after them",
    )  # fmt: skip
    parser.add_argument("--outer-lr", type=float, default=0.7, help="outer Nesterov lr")
    parser.add_argument("--outer-momentum", type=float, default=0.9, help="outer Nesterov momentum")
    parser.add_argument(
        "--overlap", type=float, default=0.0,
        help="with --sync outer: the fraction of each peer's inner steps after its round is "
        "measured (docs/OUTER.md, Overlap: they run beside the exchange and reach the outer "
        "weights one round later)",
    )  # fmt: skip
    parser.add_argument(
        "--cut", choices=("share", "batch"), default="share",
        help="with --sync outer: how a peer's round is cut into inner steps (config outer.cut): "
        "share, H steps of its share; batch, steps of the batch (a bigger share takes more)",
    )  # fmt: skip
    parser.add_argument(
        "--normalize-steps", action="store_true",
        help="with --sync outer (an experiment, not in the protocol): each peer's pseudo-gradient "
        "scaled by tau / its inner steps, tau the token-weighted mean of the peers' inner steps "
        "(FedNova's normalization: peers that took more steps do not dominate the mean)",
    )  # fmt: skip
    parser.add_argument(
        "--outer-schedule", choices=("constant", "inner"), default="constant",
        help="with --sync outer: the outer lr constant (what a run does), or (an experiment, "
        "not in the protocol) scaled each round by the inner schedule's lr at the round's middle "
        "step over its peak",
    )  # fmt: skip
    parser.add_argument(
        "--curve-points", type=int, default=5,
        help="with --sync outer: validation losses along the run (at the first outer step at "
        "or after each of this many evenly spaced points)",
    )  # fmt: skip


VAL_BATCHES = 4
AVERAGE_BATCHES = 16


def _val_batches(
    state: Any, tokens: np.ndarray, n: int = VAL_BATCHES
) -> list[tuple[np.ndarray, np.ndarray]]:
    from daisychain.batches import sample_batch

    cfg = state.cfg
    return [sample_batch(tokens, cfg.batch, cfg.seq_len, state.seed ^ 0x5EED, i) for i in range(n)]


def _val_loss(state: Any, tokens: np.ndarray, n: int) -> float:
    from daisychain.training import compute_grads

    return float(
        np.mean([float(compute_grads(state, x, y)[0]) for x, y in _val_batches(state, tokens, n)])
    )


def gradient_quality(state: Any, tokens: np.ndarray) -> dict[str, Any]:
    """The logits gradient's lost share and per-tensor median cosines against float64."""
    from daisychain.model import gpt, quality, reference

    batches = _val_batches(state, tokens)
    p64 = reference.cast_params(state.params, np.float64)
    cosines: dict[str, list[float]] = {}
    shares: dict[int, list[tuple[float, float]]] = {2: [], 3: []}
    for x, y in batches:
        _, want, _ = reference.forward_backward(p64, state.cfg, x, y)
        _, got = gpt.forward_backward(state.params, state.cfg, x, y)
        for name, g in got.items():
            cosines.setdefault(name, []).append(quality.cosine(g, want[name]))
        for limbs in shares:
            shares[limbs].append(quality.logits_lost(state.params, state.cfg, x, y, limbs))
    v2, v1 = np.array(shares[3]), np.array(shares[2])
    return {
        "logits_lost_share": float(v2[:, 0].max()),
        "logits_product_error": float(v2[:, 1].max()),
        "v1_two_limb_logits_lost_share": float(v1[:, 0].max()),
        "v1_two_limb_logits_product_error": float(v1[:, 1].max()),
        "grad_cosine_median": {n: round(float(np.median(c)), 6) for n, c in cosines.items()},
    }


@dataclass
class _Sums:
    """One tensor's running sums over the batches: the contract's and float64's gradients, the
    backward's error (against the same forward with an exact backward), and the norms and
    squared norms of both errors."""

    got: Any = 0.0
    want: Any = 0.0
    back: Any = 0.0
    norm: float = 0.0
    sq: float = 0.0
    back_norm: float = 0.0
    back_sq: float = 0.0

    def add(self, got: np.ndarray, want: np.ndarray, exact: np.ndarray) -> None:
        g64 = got.astype(np.float64).ravel()
        w64 = np.asarray(want, dtype=np.float64).ravel()
        back = g64 - exact.astype(np.float64).ravel()
        self.got = self.got + g64
        self.want = self.want + w64
        self.back = self.back + back
        err, err_back = float(np.linalg.norm(g64 - w64)), float(np.linalg.norm(back))
        self.norm += err
        self.sq += err * err
        self.back_norm += err_back
        self.back_sq += err_back * err_back


def persistent_share(mean_error: np.ndarray, mean_sq: float, k: int, scale: float) -> float:
    """The size of an error's persistent part over ``scale``: ``|mean e|^2`` less the noise's
    share, ``(k |mean e|^2 - mean |e|^2) / (k - 1)`` (an unbiased estimate of the squared
    persistent part when the rest is independent noise)."""
    if scale == 0.0:
        return 0.0
    squared = float(mean_error @ mean_error)
    persistent = max(0.0, (k * squared - mean_sq) / (k - 1)) if k > 1 else squared
    return round(float(np.sqrt(persistent)) / scale, 4)


def averaged_quality(state: Any, tokens: np.ndarray, k: int = AVERAGE_BATCHES) -> dict[str, Any]:
    """Per tensor over ``k`` batches (module docstring): the bias ratio of the contract's error
    against float64, the same for the backward alone (against the contract's own forward with an
    exact float64 backward, ``quality.ExactBackwardOps``), the cosine of the mean gradients, and
    ``persistent_share``: the size of the error's persistent part (the part the same on every
    batch, estimated without the noise's share, ``persistent_share()``) over the size of
    float64's mean gradient, and the same for the backward's error alone; ``mean_scale_error``:
    the mean error along float64's mean gradient, as a share of it (a gain's gradient 3% too
    large reads +0.03). Sums are kept, not the k gradients: ``small`` has
    millions of weights."""
    from daisychain.batches import sample_batch
    from daisychain.model import gpt, quality, reference

    cfg = state.cfg
    p64 = reference.cast_params(state.params, np.float64)
    exact_ops = quality.ExactBackwardOps()
    sums: dict[str, _Sums] = {}
    for i in range(k):
        x, y = sample_batch(tokens, cfg.batch, cfg.seq_len, state.seed ^ 0xA7E, i)
        _, want, _ = reference.forward_backward(p64, cfg, x, y)
        _, got = gpt.forward_backward(state.params, cfg, x, y)
        _, exact = gpt.forward_backward(state.params, cfg, x, y, exact_ops)
        for name, g in got.items():
            sums.setdefault(name, _Sums()).add(g, want[name], exact[name])

    def ratio(total: np.ndarray, norms: float) -> float:
        # quality.bias_ratio from the sums: |mean e| / mean |e| * sqrt(k).
        per = norms / k
        return round(float(np.linalg.norm(total)) / k / per * float(np.sqrt(k)), 3) if per else 0.0

    out: dict[str, dict[str, float]] = {
        "bias_ratio": {},
        "backward_bias_ratio": {},
        "mean_grad_cosine": {},
        "persistent_share": {},
        "backward_persistent_share": {},
        "mean_scale_error": {},
    }
    for name, acc in sums.items():
        error = acc.got - acc.want
        out["bias_ratio"][name] = ratio(error, acc.norm)
        out["backward_bias_ratio"][name] = ratio(acc.back, acc.back_norm)
        out["mean_grad_cosine"][name] = round(quality.cosine(acc.got, acc.want), 6)
        mean_want = acc.want / k
        scale = float(np.linalg.norm(mean_want))
        out["persistent_share"][name] = persistent_share(error / k, acc.sq / k, k, scale)
        out["backward_persistent_share"][name] = persistent_share(
            acc.back / k, acc.back_sq / k, k, scale
        )
        # Along float64's mean gradient: +0.03 is a mean gradient 3% too long there.
        along = float((error / k) @ mean_want) / scale**2 if scale else 0.0
        out["mean_scale_error"][name] = round(along, 4)
    return {"batches": k, **out}


def _group_shares(args: argparse.Namespace, batch: int, peers: int = 0) -> tuple[int, ...]:
    """``--shares``, one per peer (``peers``, default ``--peers``), or the batch each."""
    n = peers or args.peers
    if n < 1:
        raise SystemExit(f"--peers: at least 1, got {n}")
    if not args.shares:
        return tuple([batch] * int(n))
    try:
        out = tuple(int(x) for x in args.shares.split(","))
    except ValueError:
        raise SystemExit(f"--shares: comma-separated integers, got {args.shares!r}") from None
    if len(out) != n or min(out) < 0 or sum(out) < 1:
        raise SystemExit(
            f"--shares: {n} integers >= 0 (one per peer), not all 0; got {args.shares!r}"
        )
    return out


def measure_group(args: argparse.Namespace) -> dict[str, Any]:
    """``--peers N``: the distributed run against one process on the same global batch.

    Both runs train the contract from the same init on the same ``G`` sequences per step (lane
    ``l`` of step ``s`` is ``training.next_batch(state, train, l)``, version 1's rank ``l``).
    One process applies the float32 mean of every lane's gradient. The group applies what
    protocol version 2 gives every replica: each peer's mean over its share's lane pieces
    (``training.mean_gradient``), quantized, reduced share-weighted and quantized again
    (``allreduce.exchange_locally``). The difference is the exchange's alone."""
    from daisychain import training
    from daisychain.corpus import load_builtin_text, split_train_val
    from daisychain.model.config import preset
    from daisychain.model.params import param_shapes
    from daisychain.optim import AdamWConfig
    from daisychain.p2p import allreduce, shares
    from daisychain.tokenizer import load_default
    from daisychain.tokenizer.cache import encode_corpus_cached
    from daisychain.wire import codec

    tok = load_default()
    train_text, val_text = split_train_val(load_builtin_text())
    train, val = encode_corpus_cached(train_text, tok), encode_corpus_cached(val_text, tok)
    cfg = preset(args.preset, vocab_size=tok.vocab_size)
    of = _group_shares(args, cfg.batch)
    g = sum(of)
    lanes = -(-g // cfg.batch)
    total = args.steps if args.schedule == "linear" else 0
    if args.schedule == "linear" and args.steps <= args.warmup:
        raise SystemExit("--schedule linear needs --steps above --warmup")
    opt = AdamWConfig(
        lr=args.lr, warmup_steps=args.warmup, schedule=args.schedule, total_steps=total
    )
    shapes = param_shapes(cfg)
    out: dict[str, Any] = {
        "benchmark": "converge", "mode": "group", "preset": args.preset, "steps": args.steps,
        "lr": args.lr, "schedule": args.schedule, "peers": args.peers, "shares": list(of),
        "global_batch": g, "val_batches": args.val_batches, "seeds": args.seeds, "runs": [],
    }  # fmt: skip
    for seed in args.seeds:
        run: dict[str, Any] = {"seed": seed}
        for mode in ("one-process", "group"):
            state = training.init(cfg, opt, seed)
            losses: list[float] = []
            t0 = time.perf_counter()
            for step in range(args.steps):
                rows = [training.next_batch(state, train, lane) for lane in range(lanes)]
                positions = [(x[i : i + 1], y[i : i + 1]) for x, y in rows for i in range(len(x))]
                if mode == "one-process":
                    every = _lane_rows(positions[:g], cfg.batch)
                    loss, flat = training.mean_gradient(state, every, g)
                else:
                    c = shares.offsets(of)
                    flats, parts = [], []
                    for k, s in enumerate(of):
                        mine = _lane_rows(positions[c[k] : c[k + 1]], cfg.batch)
                        part_loss, part = training.mean_gradient(state, mine, s)
                        flats.append(part if part is not None else np.zeros(1, np.float32))
                        parts.append(part_loss * s)
                    size = next(f.size for f in flats if f.size > 1)
                    flats = [f if f.size > 1 else np.zeros(size, np.float32) for f in flats]
                    flat, _ = allreduce.exchange_locally(flats, of)
                    loss = float(sum(parts) / g)
                assert flat is not None
                training.apply_grads(state, codec.unflatten(flat, shapes))  # step + 1
                losses.append(loss)
                if (step + 1) % 100 == 0:
                    seconds = time.perf_counter() - t0
                    print(f"seed {seed} {mode} step {step + 1} loss {loss:.4f} {seconds:.0f}s",
                          file=sys.stderr, flush=True)  # fmt: skip
            run[mode] = {
                "first_loss": round(losses[0], 4),
                "final_loss": round(float(np.mean(losses[-20:])), 4),
                "val_loss": round(_val_loss(state, val, args.val_batches), 4),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        ratio = run["group"]["val_loss"] / run["one-process"]["val_loss"]
        run["val_loss_ratio"] = round(ratio, 4)
        out["runs"].append(run)
    ratios = [r["val_loss_ratio"] for r in out["runs"]]
    out["val_loss_ratio_mean"] = round(float(np.mean(ratios)), 4)
    return out


# Issue 21's targets for --sync outer: validation loss within 1% of per-step mode's at equal
# tokens, with at least 100x fewer bytes sent per token.
OUTER_LOSS_RATIO_MAX = 1.01
OUTER_BYTES_RATIO_MIN = 100.0


@dataclass
class _Setup:
    """What every run of ``--sync outer`` shares: model, optimizer, tokens, schedule points."""

    cfg: Any
    opt: Any
    train: np.ndarray
    val: np.ndarray
    peers: int
    steps: int
    val_batches: int
    points: list[int]  # steps (per peer) at or after which the curve takes a validation loss
    warm_start: int = 0  # per-step steps both modes start from (not counted in steps or bytes)
    # Sequences of every batch index each outer peer trains (--shares; default the batch each):
    # they sum to peers x batch, so both modes train the same sequences.
    shares: tuple[int, ...] = ()

    @property
    def tokens_per_step(self) -> int:
        """Tokens one peer trains on per (inner) step: its lane, one batch."""
        return int(self.cfg.batch * self.cfg.seq_len)


def _outer_setup(args: argparse.Namespace) -> _Setup:
    from daisychain.corpus import load_builtin_text, split_train_val
    from daisychain.model.config import preset
    from daisychain.optim import AdamWConfig
    from daisychain.tokenizer import load_default
    from daisychain.tokenizer.cache import encode_corpus_cached

    peers = args.peers or 4
    if peers < 1:
        raise SystemExit(f"--peers: at least 1, got {args.peers}")
    if args.val_batches < 1:
        raise SystemExit(f"--val-batches: at least 1, got {args.val_batches}")
    if args.curve_points < 1:
        raise SystemExit(f"--curve-points: at least 1, got {args.curve_points}")
    warm = getattr(args, "warm_start", 0)
    if warm < 0:
        raise SystemExit(f"--warm-start: at least 0 steps, got {warm} (e.g. --warm-start 100)")
    if args.schedule == "linear" and args.steps + warm <= args.warmup:
        raise SystemExit(
            f"--schedule linear needs --steps ({args.steps}) above --warmup ({args.warmup}); "
            "use --schedule constant for shorter runs"
        )
    for h in args.inner_steps:  # refuse before the first run, not after it
        _outer_config(h, args)
    tok = load_default()
    train_text, val_text = split_train_val(load_builtin_text())
    train, val = encode_corpus_cached(train_text, tok), encode_corpus_cached(val_text, tok)
    batch = getattr(args, "batch", 0)
    if batch < 0:
        raise SystemExit(f"--batch: sequences per peer, at least 1 (0: the preset's), got {batch}")
    cfg = preset(args.preset, vocab_size=tok.vocab_size)
    if batch:
        cfg = cfg.replace(batch=batch)
    # One schedule over the warm start and the measured steps: the warm start is the run's start.
    total = args.steps + warm if args.schedule == "linear" else 0
    opt = AdamWConfig(
        lr=args.lr, warmup_steps=args.warmup, schedule=args.schedule, total_steps=total
    )
    count = min(args.curve_points, args.steps)
    points = sorted({-(-args.steps * i // count) for i in range(1, count + 1)})
    of = _group_shares(args, cfg.batch, peers)
    if sum(of) != peers * cfg.batch:
        raise SystemExit(
            f"--shares with --sync outer: they must sum to peers x batch = {peers * cfg.batch} "
            f"(the sequences per-step mode trains), got {sum(of)}; e.g. --shares "
            f"{','.join([str(cfg.batch)] * peers)}"
        )
    return _Setup(cfg, opt, train, val, peers, args.steps, args.val_batches, points, warm, of)


def _outer_config(h: int, args: argparse.Namespace) -> Any:
    from daisychain import outer

    try:
        return outer.OuterConfig(h, args.outer_lr, args.outer_momentum, args.overlap, args.cut)
    except outer.OuterError as exc:
        raise SystemExit(f"--sync outer: {exc}") from None


def _per_step(setup: _Setup, state: Any) -> tuple[float, int]:
    """One per-step step of the group on ``state``, in place: every peer's gradient of its
    lane, the int8 exchange of protocol version 2 (``allreduce.exchange_locally``: its bytes
    are the ones counted), one AdamW step. Returns the mean loss and one peer's bytes."""
    from daisychain import training
    from daisychain.model.params import param_shapes
    from daisychain.p2p import allreduce
    from daisychain.wire import codec

    flats, parts = [], []
    for lane in range(setup.peers):
        x, y = training.next_batch(state, setup.train, lane)
        loss, grads = training.compute_grads(state, x, y)
        flats.append(codec.flatten(grads))
        parts.append(float(loss))
    flat, bytes_one_peer = allreduce.exchange_locally(flats, [setup.cfg.batch] * setup.peers)
    training.apply_grads(state, codec.unflatten(flat, param_shapes(setup.cfg)))
    return float(np.mean(parts)), bytes_one_peer


def _start(setup: _Setup, seed: int) -> Any:
    """The state both modes start from: the seed's initialisation, then ``warm_start``
    per-step steps (the same for both, so they part only where the measurement begins)."""
    from daisychain import training

    state = training.init(setup.cfg, setup.opt, seed)
    t0 = time.perf_counter()
    for step in range(setup.warm_start):
        _per_step(setup, state)
        if (step + 1) % 50 == 0 or step + 1 == setup.warm_start:
            print(f"seed {seed} warm start step {step + 1}/{setup.warm_start} "
                  f"{time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)  # fmt: skip
    return state


def _per_step_run(setup: _Setup, seed: int, start: Any) -> dict[str, Any]:
    """``setup.steps`` per-step steps from a copy of ``start`` (``_per_step``)."""
    state = copy.deepcopy(start)
    sent, losses, curve = 0, [], []
    t0 = time.perf_counter()
    for step in range(setup.steps):
        loss, bytes_one_peer = _per_step(setup, state)
        sent += bytes_one_peer
        losses.append(loss)
        if step + 1 in setup.points:
            curve.append(_point(setup, state, step + 1, sent))
            _progress(f"seed {seed} per-step", curve[-1], t0)
    return _summary(setup, losses, curve, sent, t0)


def _outer_run(
    setup: _Setup, seed: int, h: int, spec: str, args: argparse.Namespace, start: Any
) -> Any:
    """Rounds of ``h`` batch indices: peer k trains its share's positions of each (the batch of
    ``(seed, s, lane)``, the sequences per-step mode trains at step s) in inner AdamW steps cut by
    ``--cut``, as a run's peer does (``shares.round_steps``; equal shares of one batch: ``h``
    steps on lane k either way), each keeping its own AdamW state; then one outer round weighted
    by the tokens each trained. A last, shorter round keeps the tokens equal to per-step mode's.
    With ``--overlap`` a peer's round is measured after ``inner.sync_step`` of its steps and
    starts from the outer weights plus its carry, as in a run (``p2p.inner``)."""
    from daisychain import batches, outer, training
    from daisychain.model.params import param_shapes
    from daisychain.optim import learning_rate
    from daisychain.p2p import inner, shares
    from daisychain.wire import codec

    how = outer.Compression.parse(spec)
    ocfg = _outer_config(h, args)
    # Every peer starts from a copy of ``start``, its AdamW state (a warm start's) included.
    peers = [copy.deepcopy(start) for _ in range(setup.peers)]
    state = outer.init_outer({name: w.copy() for name, w in start.params.items()})
    residuals: list[Any] = [None] * setup.peers
    carries: list[Any] = [None] * setup.peers
    sent, losses, curve, last, digest = 0, [], [], 0, ""
    cfg, shapes, first = setup.cfg, param_shapes(setup.cfg), shares.offsets(setup.shares)
    t0 = time.perf_counter()
    for step in range(setup.steps):
        done = step + 1
        if done % h and done != setup.steps:
            continue
        indices = range(setup.warm_start + last, setup.warm_start + done)
        parts, local, counted = [], [], []
        for k, peer in enumerate(peers):
            plan = shares.round_steps(indices, first[k], setup.shares[k], cfg.batch, args.cut)
            if carries[k] is not None and plan:  # a share of 0 keeps its carry for later
                peer.params = outer.add_carry(peer.params, carries[k])
            sync = inner.sync_step(len(plan), args.overlap)
            measured = peer.params
            for j, pieces in enumerate(plan):
                if j == sync:
                    measured = {name: w.copy() for name, w in peer.params.items()}
                rows = []
                for p in pieces:
                    x, y = batches.sample_batch(
                        setup.train, cfg.batch, cfg.seq_len, seed, p.index, p.lane
                    )
                    rows.append((x[p.row : p.row + p.rows], y[p.row : p.row + p.rows]))
                loss, flat = training.mean_gradient(peer, rows, sum(p.rows for p in pieces))
                assert flat is not None
                training.apply_grads(peer, codec.unflatten(flat, shapes))
                parts.append(loss)
            local.append(measured)
            counted.append(min(sync, len(plan)))
            if sync < len(plan):
                carries[k] = {name: peer.params[name] - w for name, w in measured.items()}
        losses.extend([float(np.mean(parts))] * (done - last) if parts else [])
        tokens = [(done - last) * s * cfg.seq_len for s in setup.shares]
        if getattr(args, "normalize_steps", False):
            tau = sum(t * n for t, n in zip(tokens, counted, strict=True)) / max(sum(tokens), 1)
            for k, n in enumerate(counted):
                if n:
                    scale = np.float32(tau / n)
                    local[k] = {
                        name: w - (w - local[k][name]) * scale for name, w in state.params.items()
                    }
        if args.outer_schedule == "inner":
            # the round's middle inner step, counted as the first peer's optimizer counts it
            middle = peers[0].opt_state.step - (done - last) // 2
            scale = float(learning_rate(setup.opt, max(1, middle))) / setup.opt.lr
            ocfg = outer.OuterConfig(h, max(args.outer_lr * scale, 1e-6), args.outer_momentum)
        result = outer.outer_round(state, ocfg, how, local, tokens, residuals)
        residuals, digest = list(result.residuals), result.hash
        sent += max(result.bytes_sent)
        for peer in peers:  # every replica continues from the new outer weights
            peer.params = {name: w.copy() for name, w in state.params.items()}
        if any(last < p <= done for p in setup.points):
            curve.append(_point(setup, peers[0], done, sent))
            _progress(f"seed {seed} outer H={h} {spec}", curve[-1], t0)
        last = done
    return {
        "H": h,
        "compression": spec,
        "outer_steps": state.step,
        "outer_hash": digest,
        **_summary(setup, losses, curve, sent, t0),
    }


def _point(setup: _Setup, state: Any, step: int, sent: int) -> dict[str, Any]:
    return {
        "step": step,
        "tokens": step * setup.tokens_per_step * setup.peers,
        "bytes_per_peer": sent,
        "val_loss": round(_val_loss(state, setup.val, setup.val_batches), 4),
    }


def _progress(label: str, point: dict[str, Any], t0: float) -> None:
    print(
        f"{label} step {point['step']} val {point['val_loss']:.4f} "
        f"bytes/peer {point['bytes_per_peer']} {time.perf_counter() - t0:.0f}s",
        file=sys.stderr,
        flush=True,
    )


def _summary(
    setup: _Setup, losses: list[float], curve: list[dict[str, Any]], sent: int, t0: float
) -> dict[str, Any]:
    return {
        "final_loss": round(float(np.mean(losses[-20:])), 4),
        "val_loss": curve[-1]["val_loss"],  # the last point is the last step (equal tokens)
        "bytes_per_peer": sent,
        "bytes_per_token": round(sent / (setup.steps * setup.tokens_per_step), 4),
        "curve": curve,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def measure_outer(args: argparse.Namespace) -> dict[str, Any]:
    """``--sync outer``: per-step mode against the outer loop for every H and compression, at
    equal tokens (module docstring). Bytes per token: the payload bytes one peer sends over the
    run (the largest over peers) over the tokens one peer trains on."""
    setup = _outer_setup(args)
    out: dict[str, Any] = {
        "benchmark": "converge", "mode": "outer", "preset": args.preset, "steps": args.steps,
        "lr": args.lr, "warmup": args.warmup, "schedule": args.schedule, "peers": setup.peers,
        "outer_schedule": args.outer_schedule, "overlap": args.overlap, "cut": args.cut,
        "normalize_steps": getattr(args, "normalize_steps", False),
        "tokens_per_peer_step": setup.tokens_per_step, "val_batches": args.val_batches,
        "seeds": args.seeds, "H": args.inner_steps, "compress": args.compress,
        "outer_lr": args.outer_lr, "outer_momentum": args.outer_momentum,
        "warm_start": setup.warm_start, "batch": setup.cfg.batch, "shares": list(setup.shares),
        "targets": {"val_loss_ratio_max": OUTER_LOSS_RATIO_MAX,
                    "bytes_ratio_min": OUTER_BYTES_RATIO_MIN},
        "runs": [],
    }  # fmt: skip
    for seed in args.seeds:
        start = _start(setup, seed)
        base = _per_step_run(setup, seed, start)
        runs = []
        for h in args.inner_steps:
            for spec in args.compress:
                r = _outer_run(setup, seed, h, spec, args, start)
                r["val_loss_ratio"] = round(r["val_loss"] / base["val_loss"], 4)
                r["bytes_ratio"] = round(base["bytes_per_peer"] / max(r["bytes_per_peer"], 1), 1)
                runs.append(r)
        out["runs"].append({"seed": seed, "per_step": base, "outer": runs})
    out["meets_targets"] = _meeting(out["runs"])
    return out


def _meeting(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The (H, compression) pairs that meet both targets on every seed, with their worst
    figures."""
    worst: dict[tuple[int, str], tuple[float, float]] = {}
    for run in runs:
        for r in run["outer"]:
            key = (r["H"], r["compression"])
            loss, saved = worst.get(key, (0.0, float("inf")))
            worst[key] = (max(loss, r["val_loss_ratio"]), min(saved, r["bytes_ratio"]))
    return [
        {"H": h, "compression": c, "val_loss_ratio": loss, "bytes_ratio": saved}
        for (h, c), (loss, saved) in worst.items()
        if loss <= OUTER_LOSS_RATIO_MAX and saved >= OUTER_BYTES_RATIO_MIN
    ]


def _lane_rows(
    positions: list[tuple[np.ndarray, np.ndarray]], lane: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Consecutive single positions regrouped into pieces of at most ``lane`` rows."""
    return [
        (np.concatenate([x for x, _ in positions[i : i + lane]]),
         np.concatenate([y for _, y in positions[i : i + lane]]))
        for i in range(0, len(positions), lane)
    ]  # fmt: skip


def measure(args: argparse.Namespace) -> dict[str, Any]:
    if getattr(args, "sync", "step") == "outer":
        return measure_outer(args)
    if args.peers or args.shares:
        return measure_group(args)
    from daisychain import training
    from daisychain.corpus import load_builtin_text, split_train_val
    from daisychain.model.config import preset
    from daisychain.optim import AdamWConfig
    from daisychain.tokenizer import load_default
    from daisychain.tokenizer.cache import encode_corpus_cached

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or any(b not in ("contract", "reference") for b in backends):
        raise SystemExit(f"--backends: contract and/or reference, got {args.backends!r}")
    tok = load_default()
    train_text, val_text = split_train_val(load_builtin_text())
    train, val = encode_corpus_cached(train_text, tok), encode_corpus_cached(val_text, tok)
    cfg = preset(args.preset, vocab_size=tok.vocab_size)
    if args.val_batches < 1:
        raise SystemExit(f"--val-batches: at least 1, got {args.val_batches}")
    if args.schedule == "linear" and args.steps <= args.warmup:
        raise SystemExit(
            f"--schedule linear needs --steps ({args.steps}) above --warmup ({args.warmup}); "
            "use --schedule constant for shorter runs"
        )
    total = args.steps if args.schedule == "linear" else 0
    opt = AdamWConfig(
        lr=args.lr, warmup_steps=args.warmup, schedule=args.schedule, total_steps=total
    )
    out: dict[str, Any] = {
        "benchmark": "converge",
        "preset": args.preset,
        "steps": args.steps,
        "lr": args.lr,
        "schedule": args.schedule,
        "val_batches": args.val_batches,
        "seeds": args.seeds,
        "runs": [],
    }
    for seed in args.seeds:
        run: dict[str, Any] = {"seed": seed}
        for backend in backends:
            state = training.init(cfg, opt, seed, backend=backend)
            losses = []
            t0 = time.perf_counter()
            for _ in range(args.steps):
                x, y = training.next_batch(state, train)
                losses.append(float(training.train_step(state, x, y, with_hash=False).loss))
                if len(losses) % 100 == 0:  # progress on stderr: long runs can be followed
                    print(
                        f"seed {seed} {backend} step {len(losses)} loss {losses[-1]:.4f} "
                        f"{time.perf_counter() - t0:.0f}s",
                        file=sys.stderr,
                        flush=True,
                    )
            run[backend] = {
                "first_loss": round(losses[0], 4) if losses else None,
                "final_loss": round(float(np.mean(losses[-20:])), 4) if losses else None,
                "val_loss": round(_val_loss(state, val, args.val_batches), 4),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            if backend == "contract":
                run["gradient_quality"] = gradient_quality(state, val)
                run["averaged"] = averaged_quality(state, val)
        if "contract" in run and "reference" in run:
            c, r = run["contract"], run["reference"]
            if c["final_loss"] is not None:
                run["final_loss_ratio"] = round(c["final_loss"] / r["final_loss"], 4)
            run["val_loss_ratio"] = round(c["val_loss"] / r["val_loss"], 4)
        out["runs"].append(run)
    ratios = [r["val_loss_ratio"] for r in out["runs"] if "val_loss_ratio" in r]
    if ratios:
        out["val_loss_ratio_mean"] = round(float(np.mean(ratios)), 4)
    quality = [r["gradient_quality"] for r in out["runs"] if "gradient_quality" in r]
    if quality:
        out["logits_lost_share_max"] = max(q["logits_lost_share"] for q in quality)
        out["logits_product_error_max"] = max(q["logits_product_error"] for q in quality)
    return out
