"""Config validation (docs/PROTOCOL.md, "Config validation"): one test per rule feeding the
wrong value and watching ``runconfig.parse`` refuse it with its rule and a hint; every preset
passing; the memory estimate checked against a measured step. No network."""

from __future__ import annotations

import dataclasses
import json
import re
import tracemalloc
from typing import Any

import numpy as np
import pytest

from daisychain import training
from daisychain.model.config import PRESETS, ModelConfig
from daisychain.model.params import count_params as allocated_count
from daisychain.numerics import CONTRACT_VERSION
from daisychain.optim import AdamWConfig
from daisychain.p2p import footprint, runconfig
from daisychain.p2p.runconfig import Incompatible, Limits
from daisychain.p2p.versions import DATA_PROTOCOL_VERSION
from daisychain.wire import messages

SHA = "5a" * 32
VOCAB = 2048
RUN = "0123456789abcdef"


def config(
    *, model: dict[str, Any] | None = None, optim: dict[str, Any] | None = None, **top: Any
) -> messages.Config:
    """The tiny preset at batch 4, 30 steps; ``model``/``optim``/top-level fields changed."""
    spec = dict(vocab_size=VOCAB, width=64, layers=2, heads=4, seq_len=64, batch=4, mlp_mult=4)
    spec.update(model or {})
    opt = dict(lr=3e-3, warmup_steps=0, weight_decay=0.1, clip=1.0)
    opt.update(optim or {})
    fields: dict[str, Any] = dict(
        run=RUN, preset=None, model=messages.ModelSpec(**spec), optim=messages.OptimSpec(**opt),
        steps=30, seed=7, data="builtin", tokenizer_sha256=SHA, resume_step=0, resume_hash=None,
        global_batch=8, shares_by="speed",
    )  # fmt: skip
    fields.update(top)
    return messages.Config(**fields)


def accept(cfg: messages.Config, limits: Limits | None = None) -> runconfig.RunConfig:
    return runconfig.parse(cfg, tokenizer_sha256=SHA, vocab_size=VOCAB, limits=limits)


def refuse(cfg: messages.Config, rule: str, text: str, limits: Limits | None = None) -> None:
    with pytest.raises(Incompatible, match=text) as info:
        accept(cfg, limits)
    exc = info.value
    assert exc.rule == rule, f"refused by {exc.rule!r} ({exc.message}), expected {rule!r}"
    assert exc.code == "incompatible" and exc.hint and exc.message


# -- the issue's case ------------------------------------------------------------------------


def test_width_65_with_4_heads_is_incompatible_not_a_crash() -> None:
    """What a follower used to meet as an uncaught ConfigError; from the wire, as received."""
    raw = messages.encode(config(model={"width": 65}))
    received = messages.parse(raw)  # well formed: the shape check lets it through
    assert isinstance(received, messages.Config)
    with pytest.raises(Incompatible) as info:
        accept(received)
    assert info.value.rule == "heads-divide-width"
    assert "width 65 is not divisible by heads 4" in info.value.message
    assert "width 64 with 4 heads" in info.value.hint
    reply = runconfig.error(info.value)
    assert reply == messages.Error("incompatible", info.value.message[:200], info.value.hint)
    assert messages.parse(messages.encode(reply)) == reply  # the reply itself is valid


# -- one test per rule ----------------------------------------------------------------------


def test_data_source_other_than_builtin() -> None:
    refuse(config(data="my-files"), "data", "not one this version knows")


@pytest.mark.parametrize(
    "change",
    [{"tokenizer_sha256": "ff" * 32}, {"model": {"vocab_size": VOCAB + 1}}],
    ids=["sha", "vocab"],
)
def test_tokenizer_must_be_this_peers(change: dict[str, Any]) -> None:
    refuse(config(**change), "tokenizer", "leader's tokenizer")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("width", 0),
        ("width", 8192 * 4),
        ("layers", 0),
        ("layers", 257),
        ("heads", 0),
        ("heads", 257),
        ("seq_len", 65537),
        ("batch", 0),
        ("batch", 4097),
        ("mlp_mult", 0),
        ("mlp_mult", 17),
    ],
)
def test_sizes_outside_the_protocol_ranges(name: str, value: int) -> None:
    refuse(config(model={name: value}), "size-range", f"model {name} {value} outside")


def test_head_dim_must_be_a_power_of_four() -> None:
    refuse(config(model={"width": 128, "heads": 4}), "head-dim", "head dim width/heads = 32")


def test_tokens_per_step_must_be_exact_in_float32() -> None:
    big = Limits(max_seq_len=65536, max_batch=4096, max_memory_mb=2**40)
    refuse(config(model={"batch": 4096, "seq_len": 4096}), "tokens-range", "below 2\\^24", big)


@pytest.mark.parametrize(
    ("preset", "model", "text"),
    [
        ("huge", {}, "unknown preset 'huge'"),
        ("small", {}, "preset 'small' has width 256"),
        ("tiny", {"layers": 3}, "preset 'tiny' has layers 2"),
    ],
)
def test_preset_names_its_architecture(preset: str, model: dict[str, Any], text: str) -> None:
    refuse(config(preset=preset, model=model), "preset", text)


@pytest.mark.parametrize("steps", [0, 2**24])
def test_steps_exact_in_float32(steps: int) -> None:
    refuse(config(steps=steps, optim={"warmup_steps": 0}), "steps-range", f"steps {steps}")


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_seed_is_a_u32(seed: int) -> None:
    refuse(config(seed=seed), "seed", "not a u32")


@pytest.mark.parametrize(
    ("step", "digest", "text"),
    [
        (30, "ab" * 32, "nothing left to train"),
        (31, "ab" * 32, "nothing left to train"),
        (5, None, "exactly when"),
        (0, "ab" * 32, "exactly when"),
    ],
)
def test_resume_point(step: int, digest: str | None, text: str) -> None:
    refuse(config(resume_step=step, resume_hash=digest), "resume", text)


@pytest.mark.parametrize("lr", [0.0, -1e-3, 1.5, float("nan"), float("inf"), 1e-50])
def test_learning_rate_in_range(lr: float) -> None:
    refuse(config(optim={"lr": lr}), "lr", "learning rate")


def test_warmup_longer_than_the_run() -> None:
    refuse(config(optim={"warmup_steps": 31}), "warmup", "warm-up of 31 steps in a run of 30")


@pytest.mark.parametrize("decay", [-0.1, 1.5, float("nan")])
def test_weight_decay_in_range(decay: float) -> None:
    refuse(config(optim={"weight_decay": decay}), "weight-decay", "weight decay")


@pytest.mark.parametrize("clip", [-1.0, 1e7, float("inf")])
def test_clip_in_range(clip: float) -> None:
    refuse(config(optim={"clip": clip}), "clip", "gradient clip")


def test_checkpoint_must_fit_one_transfer() -> None:
    # 408 M parameters: inside the size ranges, beyond the u32 `total` of a checkpoint frame
    # (checked before the caps, so even a peer with no memory cap refuses it).
    huge = config(model={"width": 2048, "layers": 8, "heads": 32, "seq_len": 256, "batch": 8})
    no_caps = Limits(max_memory_mb=2**40)
    refuse(huge, "checkpoint-size", "does not fit one frame transfer", no_caps)


# -- the caps, each refused at the default and accepted once raised ------------------------


@pytest.mark.parametrize(
    ("model", "top", "rule", "raised"),
    [
        ({"seq_len": 2048}, {}, "max-seq-len", Limits(max_seq_len=2048)),
        ({"batch": 65}, {}, "max-batch", Limits(max_batch=65)),
        ({}, {"steps": 1_000_001}, "max-steps", Limits(max_steps=1_000_001)),
        (
            {"width": 1024, "layers": 16, "heads": 16, "seq_len": 512, "batch": 16},
            {},
            "max-memory",
            Limits(max_memory_mb=64 * 1024),
        ),
    ],
)
def test_caps_refuse_at_the_default_and_are_configurable(
    model: dict[str, Any], top: dict[str, Any], rule: str, raised: Limits
) -> None:
    cfg = config(model=model, **top)
    refuse(cfg, rule, "this peer", Limits())
    accept(cfg, raised)


def test_memory_cap_compares_the_estimate_with_the_limit() -> None:
    medium = PRESETS["medium"]
    spec = {f: getattr(medium, f) for f in messages.MODEL_FIELDS}
    cfg = config(preset="medium", model=spec)
    need = footprint.estimate(medium).total_mb
    assert 2000 < need < Limits().max_memory_mb  # medium fits the default cap
    accept(cfg, Limits(max_memory_mb=int(need) + 1))
    refuse(cfg, "max-memory", f"about {need:,.0f} MiB", Limits(max_memory_mb=int(need)))


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Limits)])
def test_limits_must_be_positive(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        Limits(**{name: 0})


# -- what passes ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("labelled", [True, False])
def test_every_preset_passes_with_the_default_caps(name: str, labelled: bool) -> None:
    model = PRESETS[name]
    spec = {f: getattr(model, f) for f in messages.MODEL_FIELDS}
    cfg = config(preset=name if labelled else None, model=spec, steps=300)
    run = accept(cfg)
    assert run.model == model
    assert run.optim == AdamWConfig(lr=3e-3, warmup_steps=0, weight_decay=0.1, clip=1.0)
    assert (run.run, run.steps, run.seed, run.resume_step) == (RUN, 300, 7, 0)
    assert run.message == cfg


@pytest.mark.parametrize(
    "cfg",
    [
        config(optim={"warmup_steps": 30}),  # warm-up may span the whole run
        config(optim={"lr": 1.0, "weight_decay": 0.0, "clip": 0.0}),  # the closed ends
        config(optim={"clip": 1e6, "weight_decay": 1.0}),
        config(resume_step=29, resume_hash="ab" * 32),  # one step left to train
        config(preset="tiny", model={"batch": 1, "seq_len": 32}),  # --batch/--seq-len
        config(steps=1_000_000, seed=2**32 - 1),
    ],
    ids=["warmup-all", "lr-1", "max-clip", "resume", "preset-batch", "long"],
)
def test_edge_configs_pass(cfg: messages.Config) -> None:
    run = accept(cfg)
    assert run.resume_hash == cfg.resume_hash
    assert run.optim.lr == cfg.optim.lr


# -- the shape check before it ---------------------------------------------------------------


LITERAL = "@literal@"  # replaced by raw JSON text that json.dumps would not write


def _wire(**changes: Any) -> str:
    obj = json.loads(messages.encode(config()))
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        target = obj
        for p in parents:
            target = target[p]
        target[leaf] = value
    return json.dumps(obj)


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (_wire(model__width="64"), "config.model.width"),
        (_wire(model__heads=2**32), "config.model.heads"),
        (_wire(optim__lr=True), "config.optim.lr"),
        (_wire(steps=-1), "config.steps"),
        (_wire(data=7), "config.data"),
        (_wire(preset="x" * 33), "config.preset"),
        (_wire(resume_step=3), "config.resume_hash"),
        (_wire(optim__lr=LITERAL).replace(f'"{LITERAL}"', "NaN"), "config.optim.lr"),
        (_wire(optim__lr=LITERAL).replace(f'"{LITERAL}"', "1" + "0" * 400), "config.optim.lr"),
    ],
    ids=["str", "u32", "bool", "neg", "data", "preset", "resume", "nan", "int-overflow"],
)
def test_malformed_config_is_a_bad_message(raw: str, text: str) -> None:
    assert LITERAL not in raw
    with pytest.raises(messages.MessageError, match=text) as info:
        messages.parse(raw)
    assert info.value.code == "bad-message"


def test_out_of_range_but_well_formed_values_reach_the_validator() -> None:
    """Ranges are runconfig's: the peer answers `incompatible` with a hint, not bad-message."""
    received = messages.parse(_wire(optim__lr=5, model__layers=0))
    assert isinstance(received, messages.Config)
    with pytest.raises(Incompatible):
        accept(received)


# -- the memory estimate ---------------------------------------------------------------------


def _measured_step_peak(cfg: ModelConfig) -> int:
    state = training.init(cfg, AdamWConfig(), 1)
    x = np.random.default_rng(0).integers(0, cfg.vocab_size, (cfg.batch, cfg.seq_len))
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        training.train_step(state, x, x)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize(
    "model",
    [
        PRESETS["tiny"],
        ModelConfig(vocab_size=512, width=64, layers=1, heads=1, seq_len=256, batch=2, mlp_mult=8),
        ModelConfig(vocab_size=2048, width=128, layers=3, heads=2, seq_len=32, batch=1, mlp_mult=1),
        ModelConfig(vocab_size=2048, width=256, layers=1, heads=16, seq_len=64, batch=8),
    ],
    ids=["tiny", "long-one-head", "short-wide", "many-heads"],
)
def test_estimate_bounds_a_measured_training_step(model: ModelConfig) -> None:
    """The step part of the estimate (everything but the state, allocated before) bounds what
    one numpy training step allocates, and is not a wild over-estimate (the cap would refuse
    runs a peer can hold)."""
    est = footprint.estimate(model)
    bound = est.step + est.activations
    measured = _measured_step_peak(model)
    assert measured <= bound, f"measured {measured:,} B above the estimate {bound:,} B"
    assert measured >= bound // 3, f"measured {measured:,} B, estimate {bound:,} B: too loose"


def test_parameter_count_needs_no_allocation_and_never_wraps() -> None:
    for model in PRESETS.values():
        assert footprint.count_params(model) == allocated_count(model)
    # Exact in Python integers where an int64 product would wrap.
    wide = ModelConfig(vocab_size=1, width=4**16, layers=1, heads=1, seq_len=1, batch=1)
    c = 4**16
    assert footprint.count_params(wide) == c + c + (c + 3 * c * c + c * c + c + 8 * c * c) + c
    assert footprint.count_params(wide) > 2**63


@pytest.mark.parametrize("flag", ["--max-memory-mb", "--max-seq-len", "--max-batch", "--max-steps"])
def test_headless_peer_refuses_a_cap_below_one(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from daisychain.peer.main import EXIT_JOIN, main

    # Refused before any connection is tried (the server address is never used).
    assert main(["--server", "http://127.0.0.1:9", flag, "0"]) == EXIT_JOIN
    err = capsys.readouterr().err
    assert flag.removeprefix("--").replace("-", "_") in err and "hint:" in err


# -- versions and the handshake (docs/PROTOCOL.md, "Version handshake") ----------------------


def test_versions_come_from_their_single_definitions() -> None:
    from daisychain.numerics import CONTRACT_VERSION
    from daisychain.p2p import DATA_PROTOCOL_VERSION, versions
    from daisychain.wire import frames
    from daisychain.wire.signaling import PROTOCOL_VERSION

    assert versions.SIGNALING_VERSION == PROTOCOL_VERSION
    assert versions.CONTRACT_VERSION == CONTRACT_VERSION
    assert versions.DATA_PROTOCOL_VERSION == DATA_PROTOCOL_VERSION
    header = next(frames.fragment(frames.FrameKind.CHECKPOINT, b"x", transfer=1, step=0))
    assert header[2] == versions.FRAME_VERSION


PROTOCOL_VERSIONS = re.compile(
    r"\b(SIGNALING_VERSION|PROTOCOL_VERSION|DATA_PROTOCOL_VERSION|CONTRACT_VERSION|FRAME_VERSION)\b"
)


def version_sources(source: str) -> list[str]:
    """Lines of a p2p module that define a protocol version, or import one from anywhere but
    ``versions`` (or its re-export as ``daisychain.p2p.DATA_PROTOCOL_VERSION``)."""
    found = []
    for line in source.splitlines():
        text = line.strip()
        if not PROTOCOL_VERSIONS.search(text):
            continue
        defines = re.match(r"[A-Z_]+\s*(:[^=]*)?=[^=]", text) is not None
        imports = text.startswith("from ") and not text.startswith(
            ("from daisychain.p2p.versions import", "from daisychain.p2p import")
        )
        if defines or imports:
            found.append(text)
    return found


def test_no_p2p_module_defines_or_imports_a_version_elsewhere() -> None:
    from pathlib import Path

    import daisychain.p2p

    root = Path(daisychain.p2p.__file__).parent
    for path in sorted(root.rglob("*.py")):
        if path.name != "versions.py":
            found = version_sources(path.read_text())
            assert not found, f"{path.relative_to(root)}: {found}"
    # The scan sees what it is looking for.
    planted = "FRAME_VERSION = 2\nfrom daisychain.numerics import CONTRACT_VERSION\n"
    assert version_sources(planted) == [
        "FRAME_VERSION = 2",
        "from daisychain.numerics import CONTRACT_VERSION",
    ]


def test_hello_carries_the_contract_version() -> None:
    from daisychain.numerics import CONTRACT_VERSION

    hello = messages.Hello(DATA_PROTOCOL_VERSION, "ada")
    assert json.loads(messages.encode(hello))["contract"] == CONTRACT_VERSION
    assert messages.parse(messages.encode(hello)) == hello


@pytest.mark.parametrize(
    ("obj", "code", "text"),
    [
        (
            {"version": DATA_PROTOCOL_VERSION, "contract": CONTRACT_VERSION + 1, "name": ""},
            "version-mismatch",
            f"contract version {CONTRACT_VERSION + 1}",
        ),
        ({"version": DATA_PROTOCOL_VERSION, "name": ""}, "bad-message", "hello.contract"),
        (
            {"version": DATA_PROTOCOL_VERSION, "contract": "1", "name": ""},
            "bad-message",
            "hello.contract",
        ),
        ({"version": 1, "contract": 2, "name": ""}, "version-mismatch", "protocol version 1"),
        # Version 2 committed the next roster only after every hash of the step: mixed with a
        # version-3 group it would re-sync every step, so it is refused, not mis-trained.
        (
            {"version": 2, "contract": CONTRACT_VERSION, "name": ""},
            "version-mismatch",
            "protocol version 2",
        ),
    ],
)
def test_hello_with_another_contract_is_refused(obj: dict[str, Any], code: str, text: str) -> None:
    with pytest.raises(messages.MessageError, match=text) as info:
        messages.parse(json.dumps({"type": "hello", **obj}))
    assert info.value.code == code
    if code == "version-mismatch":
        assert "same DaisyChain version" in info.value.hint


def test_a_new_optimizer_or_model_rule_is_still_a_refusal_not_a_crash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The optimizer and the model validate themselves too; a rule they gain that the checks
    above do not know yet still reaches the leader as `incompatible`, never as a crash."""
    from daisychain.model.config import ConfigError
    from daisychain.optim import OptimizerError

    def strict_optimizer(**_: Any) -> AdamWConfig:
        raise OptimizerError("betas must be tuned")

    monkeypatch.setattr(runconfig, "AdamWConfig", strict_optimizer)
    refuse(config(), "optimizer", "optimizer: betas must be tuned")
    monkeypatch.undo()

    def strict_model(**_: Any) -> ModelConfig:
        raise ConfigError("layers must be even", "even-layers")

    monkeypatch.setattr(runconfig, "ModelConfig", strict_model)
    with pytest.raises(Incompatible, match="layers must be even") as info:
        accept(config())
    assert info.value.rule == "even-layers" and "MODEL.md" in info.value.hint


def test_a_finished_attempt_keeps_only_the_bytes_the_estimate_counts() -> None:
    """footprint counts the int8 pieces kept for repair, not float32 copies of them: once an
    attempt is applied its values are released (its keys and bytes stay for repair)."""
    from daisychain.p2p import allreduce
    from daisychain.p2p.machine.attempt import Attempt, AttemptPhase
    from daisychain.p2p.run import CommittedRoster
    from daisychain.wire import codec

    blocks = 6
    a = Attempt(CommittedRoster(1, 0, ("a", "b"), (4, 4)), 0, blocks, now=0.0)
    rng = np.random.default_rng(3)
    grad = rng.standard_normal(blocks * codec.BLOCK).astype(np.float32)
    equal = (4, 4)
    mine = tuple(codec.encode(grad[allreduce.chunk_slice(blocks, equal, k)])[0] for k in range(2))
    a.computed_with(1.0, mine, "p" * 64)
    other, _ = codec.encode(grad[allreduce.chunk_slice(blocks, equal, 0)])
    a.contributions[1] = codec.decode(other, a.chunk_blocks(0))
    assert a.reduce() is not None
    a.reduced[1] = codec.decode(mine[1], a.chunk_blocks(1))
    assert a.complete() and a.mean_gradient().shape == (blocks * codec.BLOCK,)
    held = sum(v.nbytes for v in [*a.contributions.values(), *a.reduced.values()])
    assert held == 2 * blocks * codec.BLOCK * 4  # contributions to my chunk + every reduced one
    a.transition(AttemptPhase.APPLIED)
    assert sum(v.nbytes for v in [*a.contributions.values(), *a.reduced.values()]) == 0
    assert set(a.contributions) == {0, 1} and set(a.reduced) == {0, 1}
    assert a.sent == mine and 0 in a.reduced_payload and not a.missing_from()
