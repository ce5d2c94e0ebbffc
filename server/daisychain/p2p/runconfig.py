"""Validate once: a leader's ``config`` message becomes this peer's run, or one typed refusal.

Normative description: docs/PROTOCOL.md, "Config validation". ``messages.parse`` checks that a
``config`` is well formed (every field present, of its JSON type, integers within 32 bits,
numbers finite); ``parse`` here decides whether this peer can and will train it:

1. the invariants the model, the optimizer and the wire need (heads divide width, the head
   dim a power of 4, token and step counts exact in float32, the vocabulary of this peer's
   tokenizer, a checkpoint that fits one frame transfer, ...);
2. the caps a follower puts on what a leader may impose on it (``Limits``: memory, sequence
   length, batch, steps), which its user may raise.

Anything else raises ``Incompatible`` (a ``messages.MessageError`` with code ``incompatible``)
naming the rule, what is wrong and what to do. The receiver answers it with ``error
incompatible`` and stays up: it stays in the lobby, available to the next run. Pure: no I/O, no
clock, no allocation of the model; the same call serves a leader checking its own config before
it sends it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from daisychain import datanames, fineweb
from daisychain.model.config import PRESETS, ConfigError, ModelConfig
from daisychain.optim import AdamWConfig, OptimizerError
from daisychain.outer.nesterov import OuterConfig
from daisychain.p2p import shares
from daisychain.p2p.footprint import MIB, Footprint, estimate
from daisychain.p2p.shares import MAX_GLOBAL_BATCH
from daisychain.wire import messages

# Step counts enter float32 arithmetic (warm-up ratio, bias corrections): exact below 2^24.
MAX_EXACT_STEPS = 2**24 - 1
# A checkpoint travels as one frame transfer whose ``total`` is a u32 and whose receiver limit
# is 12 bytes a parameter plus 1 MiB (docs/PROTOCOL.md, "Binary frames").
MAX_TRANSFER_BYTES = 2**32 - 1
# Protocol-v1 size ranges: every size, and every count derived from them, stays far below 2^53
# so an implementation computing in float64 (a browser) gets the same integers.
SIZE_RANGES = {
    "vocab_size": (1, 2**24 - 1),
    "width": (1, 8192),
    "layers": (1, 256),
    "heads": (1, 256),
    "seq_len": (1, 65536),
    "batch": (1, 4096),
    "mlp_mult": (1, 16),
}
MAX_WEIGHT_DECAY = 1.0
MAX_CLIP = 1e6
# Outer runs (docs/PROTOCOL.md, "Outer runs"). The sync modes this version trains.
SYNC_MODES = (messages.SYNC_STEP, messages.SYNC_OUTER)
# An outer lr beyond 10 is no optimizer anyone tunes to (DiLoCo: 0.7); the cap keeps one message
# from making every replica diverge at once.
MAX_OUTER_LR = 10.0
# What an outer run holds beyond a per-step run's state, in bytes a parameter: the outer
# momentum M (4), and while a round computes, the copy it trains (weights 4, inner moments 8),
# the round's outer weights (4) and the pseudo-gradient (4) (p2p/inner.py, p2p/modelreplica.py).
OUTER_STATE_BYTES_PER_PARAM = 24
# With overlap: the weights where the round was measured (4) and the carry after it (4).
OVERLAP_STATE_BYTES_PER_PARAM = 8
# Commit, then audit (docs/TRUST.md, "Config and versions"). 1 audits every attempt (the compute
# doubles); the cap keeps the draw's modulo bias (a u32 mod n) below n / 2^32 <= 2^-16.
MAX_AUDIT_ONE_IN = 65536
AUDIT_PRIVATE = ("refuse", "unaudited")


class Incompatible(messages.MessageError):
    """A well-formed config this peer will not train; answered with ``error incompatible``.

    ``rule`` is a stable name for the check that failed (docs/PROTOCOL.md lists them)."""

    def __init__(self, rule: str, reason: str, hint: str) -> None:
        super().__init__("incompatible", reason, hint)
        self.rule = rule


@dataclass(frozen=True)
class Limits:
    """What a follower accepts from a leader (``--max-memory-mb`` and friends on the headless
    peer). The defaults admit every preset at its own batch and sequence length with room to
    spare; they exist so that one message cannot make a peer allocate, or commit to, anything."""

    max_memory_mb: int = 4096  # estimated peak (footprint.estimate), MiB
    max_seq_len: int = 1024  # attention memory and time grow with T^2
    max_batch: int = 64  # sequences per device per step: time of one step
    max_steps: int = 1_000_000  # how long one run may hold this peer

    def __post_init__(self) -> None:
        for name in ("max_memory_mb", "max_seq_len", "max_batch", "max_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class RunConfig:
    """A validated run: everything a peer needs to initialize or to ask for the state."""

    message: messages.Config  # as received (a second config is compared with it)
    model: ModelConfig
    optim: AdamWConfig
    footprint: Footprint

    @property
    def run(self) -> str:
        return self.message.run

    @property
    def steps(self) -> int:
        return self.message.steps

    @property
    def seed(self) -> int:
        return self.message.seed

    @property
    def resume_step(self) -> int:
        return self.message.resume_step

    @property
    def resume_hash(self) -> str | None:
        return self.message.resume_hash

    @property
    def global_batch(self) -> int:
        return self.message.global_batch

    @property
    def outer(self) -> OuterConfig | None:
        """The outer loop of a ``sync: "outer"`` run (None: a per-step run)."""
        spec = self.message.outer
        if self.message.sync != messages.SYNC_OUTER or spec is None:
            return None
        return OuterConfig(spec.steps, spec.lr, spec.momentum, spec.overlap, spec.cut)


# Hints for the model's own invariants (ConfigError.rule -> what the leader should change).
_MODEL_HINTS = {
    "heads-divide-width": "the leader must choose heads so that width / heads is a power of 4 "
    "(16, 64, 256); for example width 64 with 4 heads",
    "head-dim": "the leader must choose width and heads so that width / heads is 16, 64 or 256",
    "vocab-range": "the vocabulary must be below 2^24",
    "tokens-range": "the leader must lower batch or seq_len: batch * seq_len must be below 2^24",
}


def parse(
    cfg: messages.Config,
    *,
    tokenizer_sha256: str,
    vocab_size: int,
    limits: Limits | None = None,
    data_sources: tuple[str, ...] = (fineweb.BUILTIN,),
    private_data: bool = False,
    min_audit: int = 0,
) -> RunConfig:
    """``cfg`` as this peer's run, or ``Incompatible``. ``tokenizer_sha256``/``vocab_size``
    describe this peer's tokenizer; ``limits`` are its caps (defaults: ``Limits()``);
    ``data_sources`` the ``config.data`` names it can read (``"builtin"``, and
    ``"fineweb@REV"`` when its server reads FineWeb-Edu at that revision); ``private_data``
    says this peer trains on text only it holds; ``min_audit`` is the rarest audit rate it
    accepts (``m``: at least one attempt in ``m``; 0: any, audits off included)."""
    limits = limits or Limits()
    if isinstance(min_audit, bool) or not (
        isinstance(min_audit, int) and 0 <= min_audit <= MAX_AUDIT_ONE_IN
    ):
        raise ValueError(
            f"min_audit must be an integer in [0, {MAX_AUDIT_ONE_IN}], got {min_audit!r}"
        )
    _check_data(cfg, tokenizer_sha256, vocab_size, data_sources)
    model = _model(cfg.model)
    _check_global_batch(cfg)
    _check_preset(cfg.preset, model)
    _check_run(cfg)
    _check_sync(cfg, model.batch)
    _check_audit(cfg, private_data, min_audit)
    optim = _optim(cfg.optim, cfg.steps)
    footprint = estimate(model)
    if cfg.sync == messages.SYNC_OUTER:
        per_param = OUTER_STATE_BYTES_PER_PARAM
        if cfg.outer is not None and cfg.outer.overlap:
            per_param += OVERLAP_STATE_BYTES_PER_PARAM
        extra = per_param * footprint.params
        footprint = dataclasses.replace(footprint, state=footprint.state + extra)
    _check_transfer(footprint)
    _check_limits(model, cfg.steps, footprint, limits)
    return RunConfig(cfg, model, optim, footprint)


def error(exc: Incompatible) -> messages.Error:
    """The ``error incompatible`` reply to the leader."""
    return messages.error_from(exc)


# ---------------------------------------------------------------------------------------------
# The rules, in the order they are checked (the first failure is reported).


def _check_data(
    cfg: messages.Config, tokenizer_sha256: str, vocab_size: int, data_sources: tuple[str, ...]
) -> None:
    try:
        datanames.parse(cfg.data)
    except ValueError:
        raise Incompatible(
            "data",
            f"data source {cfg.data[:64]!r} is not one this version knows",
            'lead with data "builtin" or the dataset a DaisyChain server reads (docs/PROTOCOL.md, '
            '"Training data")',
        ) from None
    if cfg.data not in data_sources:
        # Training on other text than the run's would fork it, or worse, go unnoticed.
        raise Incompatible(
            "data",
            f"this peer cannot read {datanames.describe(cfg.data)} "
            f"(it reads: {', '.join(data_sources)})",
            "start this peer against a DaisyChain server that reads that text at that revision "
            "(not --offline; --dataset/--data-revision/--text), or lead with data builtin",
        )
    if cfg.tokenizer_sha256 != tokenizer_sha256 or cfg.model.vocab_size != vocab_size:
        raise Incompatible(
            "tokenizer",
            f"the leader's tokenizer is {cfg.tokenizer_sha256[:12]}... with "
            f"{cfg.model.vocab_size} tokens; this peer has {tokenizer_sha256[:12]}... with "
            f"{vocab_size}",
            "every peer of a run needs the same tokenizer: the same DaisyChain version, and the "
            "same --tokenizer file where the run names one of its own",
        )


def _check_global_batch(cfg: messages.Config) -> None:
    if not 1 <= cfg.global_batch <= MAX_GLOBAL_BATCH:
        raise Incompatible(
            "global-batch",
            f"global batch {cfg.global_batch} outside [1, {MAX_GLOBAL_BATCH}]",
            "the leader must choose between 1 and "
            f"{MAX_GLOBAL_BATCH} sequences per step (shares multiply int8 values exactly only "
            "up to there)",
        )


def _model(spec: messages.ModelSpec) -> ModelConfig:
    for name, (lo, hi) in SIZE_RANGES.items():
        value = getattr(spec, name)
        if not lo <= value <= hi:
            raise Incompatible(
                "size-range",
                f"model {name} {value} outside [{lo}, {hi}]",
                "protocol version 1 sizes: "
                + ", ".join(f"{k} {a}-{b}" for k, (a, b) in SIZE_RANGES.items()),
            )
    try:
        return ModelConfig(
            vocab_size=spec.vocab_size, width=spec.width, layers=spec.layers, heads=spec.heads,
            seq_len=spec.seq_len, batch=spec.batch, mlp_mult=spec.mlp_mult,
        )  # fmt: skip
    except ConfigError as exc:
        hint = _MODEL_HINTS.get(exc.rule, "see docs/MODEL.md, Configuration")
        raise Incompatible(exc.rule, f"model: {exc}", hint) from None


def _check_preset(name: str | None, model: ModelConfig) -> None:
    """A preset names an architecture: its fields must be the preset's (batch, seq_len and
    vocab_size may differ, as the leader's ``--batch``/``--seq-len`` change them), so no log
    or screen shows a name that is not what runs."""
    if name is None:
        return
    known = PRESETS.get(name)
    if known is None:
        raise Incompatible(
            "preset",
            f"unknown preset {name[:32]!r}",
            f"presets are {', '.join(PRESETS)}; a custom model is sent with preset null",
        )
    for field in ("width", "layers", "heads", "mlp_mult"):
        if getattr(model, field) != getattr(known, field):
            raise Incompatible(
                "preset",
                f"preset {name!r} has {field} {getattr(known, field)}, the config says "
                f"{getattr(model, field)}",
                "send the preset's architecture, or preset null for a custom model",
            )


def _check_run(cfg: messages.Config) -> None:
    if not 1 <= cfg.steps <= MAX_EXACT_STEPS:
        raise Incompatible(
            "steps-range",
            f"steps {cfg.steps} outside [1, {MAX_EXACT_STEPS}]",
            "step counts must be exact in float32 (below 2^24)",
        )
    if not 0 <= cfg.seed <= messages.U32_MAX:
        raise Incompatible("seed", f"seed {cfg.seed} is not a u32", "choose a seed in [0, 2^32)")
    if cfg.resume_step < 0 or cfg.resume_step >= cfg.steps:
        raise Incompatible(
            "resume",
            f"resume step {cfg.resume_step} with {cfg.steps} steps: nothing left to train",
            "resume from a checkpoint taken before the last step, or lead with more --steps",
        )
    if (cfg.resume_step > 0) != (cfg.resume_hash is not None):
        raise Incompatible(
            "resume",
            "resume_hash must be given exactly when resume_step > 0",
            "a resumed run names the hash of its checkpoint",
        )


def _check_sync(cfg: messages.Config, batch: int) -> None:
    """``sync`` and, for an outer run, ``outer`` (docs/PROTOCOL.md, "Outer runs"); ``batch``
    the model's sequences per inner step."""
    if cfg.sync not in SYNC_MODES:
        raise Incompatible(
            "sync",
            f"sync mode {cfg.sync[:16]!r} is not one this version trains",
            f"lead with sync {' or '.join(SYNC_MODES)}, or upgrade this peer",
        )
    spec = cfg.outer
    if cfg.sync != messages.SYNC_OUTER or spec is None:
        return
    # A peer's round is its share of H batch indices in inner steps of the batch: at most
    # H * ceil(global batch / batch) of them (the whole global batch). Every inner step counter
    # (AdamW's, and the batch index round * H + j) must stay exact in float32 like a step count.
    lanes = -(-cfg.global_batch // batch)
    most = MAX_EXACT_STEPS // (max(cfg.steps, 1) * lanes)
    if not 1 <= spec.steps <= most:
        raise Incompatible(
            "outer-steps",
            f"outer.steps (inner steps per round) {spec.steps} outside [1, {most}] for a run "
            f"of {cfg.steps} rounds of {cfg.global_batch} sequences at a batch of {batch}",
            "lead with --outer-steps of at least 1, and rounds x inner steps x (global batch / "
            "batch) below 2^24",
        )
    lr = spec.lr
    if not (math.isfinite(lr) and 0.0 < lr <= MAX_OUTER_LR and np.float32(lr) > 0):
        raise Incompatible(
            "outer-lr",
            f"outer learning rate {lr!r} outside (0, {MAX_OUTER_LR:g}] (or zero as a float32)",
            "lead with --outer-lr in (0, 10], for example 0.7 (DiLoCo) or 1 (plain averaging)",
        )
    mu = spec.momentum
    if not (math.isfinite(mu) and 0.0 <= mu < 1.0):
        raise Incompatible(
            "outer-momentum",
            f"outer momentum {mu!r} outside [0, 1)",
            "lead with --outer-momentum in [0, 1), for example 0.9 (DiLoCo) or 0",
        )
    if not (math.isfinite(spec.overlap) and 0.0 <= spec.overlap <= 1.0):
        raise Incompatible(
            "outer-overlap",
            f"outer overlap {spec.overlap!r} outside [0, 1] (the fraction of a round's inner "
            "steps that run beside its exchange)",
            "lead with --outer-overlap in [0, 1], for example 0.5, or 0 for none",
        )
    if spec.cut not in shares.CUTS:
        raise Incompatible(
            "outer-cut",
            f"outer cut {spec.cut[:16]!r} is not one this version takes",
            f"lead with --outer-cut {' or '.join(shares.CUTS)}",
        )


def _check_audit(cfg: messages.Config, private_data: bool, min_audit: int) -> None:
    """``audit`` (docs/TRUST.md, "Config and versions"): its shape, what it cannot audit, and
    what this peer needs of it."""
    spec = cfg.audit
    if spec is not None:
        if not 1 <= spec.one_in <= MAX_AUDIT_ONE_IN:
            raise Incompatible(
                "audit-rate",
                f"audit.one_in {spec.one_in} outside [1, {MAX_AUDIT_ONE_IN}]",
                f"the leader audits one attempt in n, n from 1 (every attempt) to "
                f"{MAX_AUDIT_ONE_IN}; 16 is the default, and a run without audits has no audit",
            )
        if spec.private not in AUDIT_PRIVATE:
            raise Incompatible(
                "audit-private",
                f"audit.private {spec.private[:16]!r} is not one of {', '.join(AUDIT_PRIVATE)}",
                'the leader either refuses peers with private text ("refuse", the default) or '
                'takes their contributions unaudited ("unaudited")',
            )
        if cfg.sync == messages.SYNC_OUTER:
            # An outer round depends on the contributor's own inner optimizer state, which no
            # other peer holds: nobody could recompute it.
            raise Incompatible(
                "audit-outer",
                "this run audits outer rounds, which no other peer can recompute (a round "
                "depends on its contributor's own inner optimizer state)",
                "the leader can lead an outer run without audits, or a per-step run with them",
            )
        if private_data and spec.private == "refuse":
            raise Incompatible(
                "private-data",
                "this peer trains on private text and the run refuses private data (its "
                "contributions could not be audited)",
                "turn Private text off, or ask the leader to accept private data unaudited",
            )
    if min_audit > 0 and (spec is None or spec.one_in > min_audit):
        audits = "no attempt" if spec is None else f"one attempt in {spec.one_in}"
        raise Incompatible(
            "min-audit",
            f"the run audits {audits}; this peer needs at least one in {min_audit}",
            f"the leader can audit one attempt in {min_audit} or more often; this peer's user "
            "can accept rarer audits",
        )


def _optim(spec: messages.OptimSpec, steps: int) -> AdamWConfig:
    lr = spec.lr
    # A learning rate is one float32 constant (docs/MODEL.md): it must stay positive there.
    if not (math.isfinite(lr) and 0.0 < lr <= 1.0 and np.float32(lr) > 0):
        raise Incompatible(
            "lr",
            f"learning rate {lr!r} outside (0, 1] (or zero as a float32)",
            "lead with --lr in (0, 1], for example 3e-3",
        )
    if not 0 <= spec.warmup_steps <= steps:
        raise Incompatible(
            "warmup",
            f"warm-up of {spec.warmup_steps} steps in a run of {steps}",
            "warm-up must be between 0 and the run's steps",
        )
    if not (math.isfinite(spec.weight_decay) and 0.0 <= spec.weight_decay <= MAX_WEIGHT_DECAY):
        raise Incompatible(
            "weight-decay",
            f"weight decay {spec.weight_decay!r} outside [0, {MAX_WEIGHT_DECAY}]",
            "lead with a weight decay in [0, 1] (0.1 is the default)",
        )
    if not (math.isfinite(spec.clip) and 0.0 <= spec.clip <= MAX_CLIP):
        raise Incompatible(
            "clip",
            f"gradient clip {spec.clip!r} outside [0, {MAX_CLIP:g}]",
            "lead with a clip threshold in [0, 1e6] (0 disables clipping)",
        )
    try:
        return AdamWConfig(
            lr=lr, warmup_steps=spec.warmup_steps, weight_decay=spec.weight_decay, clip=spec.clip
        )
    except OptimizerError as exc:  # every rule above should have caught it first
        raise Incompatible("optimizer", f"optimizer: {exc}", "see docs/MODEL.md") from None


def _check_transfer(footprint: Footprint) -> None:
    need = 12 * footprint.params + MIB
    if need > MAX_TRANSFER_BYTES:
        raise Incompatible(
            "checkpoint-size",
            f"{footprint.params:,} parameters: a checkpoint of {need:,} bytes does not fit one "
            "frame transfer (u32 total)",
            "the leader must choose a smaller model (below about 357 million parameters)",
        )


def _check_limits(model: ModelConfig, steps: int, footprint: Footprint, limits: Limits) -> None:
    if model.seq_len > limits.max_seq_len:
        raise Incompatible(
            "max-seq-len",
            f"seq_len {model.seq_len} above this peer's cap of {limits.max_seq_len}",
            "the leader can lower --seq-len; this peer's user can raise --max-seq-len",
        )
    if model.batch > limits.max_batch:
        raise Incompatible(
            "max-batch",
            f"batch {model.batch} above this peer's cap of {limits.max_batch}",
            "the leader can lower --batch; this peer's user can raise --max-batch",
        )
    if steps > limits.max_steps:
        raise Incompatible(
            "max-steps",
            f"{steps} steps above this peer's cap of {limits.max_steps}",
            "the leader can lower --steps; this peer's user can raise --max-steps",
        )
    if footprint.total > limits.max_memory_mb * MIB:
        raise Incompatible(
            "max-memory",
            f"this run would take about {footprint.total_mb:,.0f} MiB on this peer "
            f"({footprint.params:,} parameters), above its cap of {limits.max_memory_mb} MiB",
            "the leader can choose a smaller model, batch or seq_len; this peer's user can "
            "raise --max-memory-mb",
        )
