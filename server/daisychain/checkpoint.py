"""Training checkpoints: safetensors files carrying everything needed to resume bit-exactly.

Tensors: every parameter under its own name, then ``m.<name>`` and ``v.<name>`` (AdamW moments),
all float32, in parameter order. Metadata (strings): the format tag and version, the numerical
contract version, the model and optimizer configurations (JSON), the step, the seed, the running
bias-correction products (float32 bit patterns, so they survive exactly), the tokenizer's SHA-256
and vocabulary size, and the weight hash at that step (verified on load).

An outer run's checkpoint (docs/PROTOCOL.md, "Outer runs") holds what every replica of the run
shares: the outer weights under the parameter names, then ``outer_m.<name>`` (the outer Nesterov
momentum) in parameter order, no AdamW moments (each peer's inner optimizer is its own and is
never shared); metadata adds ``sync`` = ``outer``, the outer loop's configuration (JSON) and the
outer steps done as ``step``; its ``weight_hash`` is ``outer.outer_hash``. A per-step checkpoint
has none of these: outer runs leave its format unchanged.

Loading never trusts the file: the format and contract versions, every tensor's name, dtype and
shape against the configuration, the vocabulary against the tokenizer in use, and the weight hash
are all checked, and each failure says what is wrong and what to do.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain import safetensors_io
from daisychain.model.config import ConfigError, ModelConfig
from daisychain.model.params import param_shapes
from daisychain.numerics import CONTRACT_VERSION
from daisychain.optim import AdamW, AdamWConfig, AdamWState
from daisychain.outer.nesterov import OuterConfig, OuterError, OuterState, outer_hash
from daisychain.training import TrainState, state_hash

FORMAT = "daisychain-checkpoint"
FORMAT_VERSION = 1

FloatArray = npt.NDArray[np.float32]


class CheckpointError(ValueError):
    """A checkpoint that cannot be used here; the message says why and what to do."""


@dataclass
class Checkpoint:
    """A validated checkpoint: the replica's full state plus what it was trained with."""

    state: TrainState
    tokenizer_sha256: str
    weight_hash: str
    # An outer run's shared state and loop (None: a per-step checkpoint). ``state.params`` are
    # then the outer weights themselves and ``state.opt_state`` a fresh inner AdamW state.
    outer: OuterState | None = None
    outer_cfg: OuterConfig | None = None

    @property
    def step(self) -> int:
        return self.outer.step if self.outer is not None else self.state.step


OUTER_PREFIX = "outer_m."


def encode_outer(
    state: TrainState, outer: OuterState, cfg: OuterConfig, tokenizer_sha256: str
) -> bytes:
    """An outer run's checkpoint as bytes (module docstring): ``state`` gives the model and
    optimizer configuration and the seed; ``outer`` the weights, momentum and outer steps."""
    return safetensors_io.encode(*_outer_parts(state, outer, cfg, tokenizer_sha256))


def save_outer(
    path: str | Path, state: TrainState, outer: OuterState, cfg: OuterConfig, tokenizer_sha256: str
) -> str:
    """``encode_outer`` written atomically; returns the recorded hash (``outer_hash``)."""
    tensors, meta = _outer_parts(state, outer, cfg, tokenizer_sha256)
    safetensors_io.save(path, tensors, meta)
    return meta["weight_hash"]


def _outer_parts(
    state: TrainState, outer: OuterState, cfg: OuterConfig, tokenizer_sha256: str
) -> tuple[dict[str, npt.NDArray[np.generic]], dict[str, str]]:
    fresh = AdamW(state.opt_cfg).init_state(outer.params)  # p1, p2 of a fresh inner optimizer
    tensors: dict[str, npt.NDArray[np.generic]] = dict(outer.params)
    tensors.update({f"{OUTER_PREFIX}{k}": v for k, v in outer.momentum.items()})
    outer_json = {"inner_steps": cfg.inner_steps, "lr": cfg.lr, "momentum": cfg.momentum}
    meta = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "contract_version": str(CONTRACT_VERSION),
        "model": _model_json(state.cfg),
        "optim": json.dumps(dataclasses.asdict(state.opt_cfg), sort_keys=True),
        "step": str(outer.step),
        "seed": str(state.seed),
        "p1": _f32_bits(fresh.p1),
        "p2": _f32_bits(fresh.p2),
        "tokenizer_sha256": tokenizer_sha256,
        "vocab_size": str(state.cfg.vocab_size),
        "sync": "outer",
        "outer": json.dumps(outer_json, sort_keys=True),
        "weight_hash": outer_hash(outer),
    }
    return tensors, meta


def _f32_bits(x: np.float32) -> str:
    return f"{int(np.array([x], dtype=np.float32).view(np.uint32)[0]):08x}"


def _from_bits(s: str) -> np.float32:
    value: np.float32 = np.array([int(s, 16)], dtype=np.uint32).view(np.float32)[0]
    return value


def _model_json(cfg: ModelConfig) -> str:
    d = dataclasses.asdict(cfg)
    d["norm_eps"] = _f32_bits(cfg.norm_eps)
    return json.dumps(d, sort_keys=True)


def _model_from_json(text: str) -> ModelConfig:
    d = json.loads(text)
    d["norm_eps"] = _from_bits(d["norm_eps"])
    return ModelConfig(**d)


def encode(state: TrainState, tokenizer_sha256: str) -> bytes:
    """The checkpoint as bytes (what ``save`` writes; peers send the same bytes)."""
    return safetensors_io.encode(*_parts(state, tokenizer_sha256))


def save(path: str | Path, state: TrainState, tokenizer_sha256: str) -> str:
    """Write atomically (temporary file, fsync, rename); returns the recorded weight hash."""
    tensors, meta = _parts(state, tokenizer_sha256)
    safetensors_io.save(path, tensors, meta)
    return meta["weight_hash"]


def _parts(
    state: TrainState, tokenizer_sha256: str
) -> tuple[dict[str, npt.NDArray[np.generic]], dict[str, str]]:
    opt = state.opt_state
    tensors: dict[str, npt.NDArray[np.generic]] = dict(state.params)
    tensors.update({f"m.{k}": v for k, v in opt.m.items()})
    tensors.update({f"v.{k}": v for k, v in opt.v.items()})
    meta = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "contract_version": str(CONTRACT_VERSION),
        "model": _model_json(state.cfg),
        "optim": json.dumps(dataclasses.asdict(state.opt_cfg), sort_keys=True),
        "step": str(opt.step),
        "seed": str(state.seed),
        "p1": _f32_bits(opt.p1),
        "p2": _f32_bits(opt.p2),
        "tokenizer_sha256": tokenizer_sha256,
        "vocab_size": str(state.cfg.vocab_size),
        "weight_hash": state_hash(state),
    }
    return tensors, meta


def load(
    path: str | Path,
    *,
    tokenizer_sha256: str | None = None,
    vocab_size: int | None = None,
) -> Checkpoint:
    """Read and fully validate a checkpoint.

    ``tokenizer_sha256`` / ``vocab_size``: the tokenizer this run uses; a checkpoint trained with
    another vocabulary is refused (its embedding rows would mean different tokens).
    """
    try:
        tensors, meta = safetensors_io.load(path)
    except safetensors_io.CheckpointFormatError as exc:
        raise CheckpointError(str(exc)) from exc
    return from_parts(tensors, meta, str(path), tokenizer_sha256, vocab_size)


_COUNT = re.compile(r"0|[1-9][0-9]{0,18}")


def _count(text: str) -> int:
    """A step or seed as the writer spells it (decimal, no sign, space or leading zero); int()
    alone would take "-1", " 5" and "5_0", which the browser's reader refuses."""
    if not _COUNT.fullmatch(text):
        raise ValueError(f"step and seed must be non-negative integers in decimal, not {text!r}")
    return int(text)


def from_parts(
    tensors: dict[str, npt.NDArray[np.generic]],
    meta: dict[str, str],
    source: str,
    tokenizer_sha256: str | None = None,
    vocab_size: int | None = None,
) -> Checkpoint:
    """Validate decoded tensors and metadata (shared by files and bytes from peers)."""

    def need(key: str) -> str:
        if key not in meta:
            raise CheckpointError(
                f"{source}: metadata field {key!r} is missing; this is not a DaisyChain "
                "checkpoint (or it was written by an incompatible version)"
            )
        return meta[key]

    if need("format") != FORMAT:
        raise CheckpointError(f"{source}: format is {meta['format']!r}, expected {FORMAT!r}")
    if need("format_version") != str(FORMAT_VERSION):
        raise CheckpointError(
            f"{source}: checkpoint format version {meta['format_version']}, this DaisyChain "
            f"reads version {FORMAT_VERSION}; use the DaisyChain version that wrote it"
        )
    if need("contract_version") != str(CONTRACT_VERSION):
        raise CheckpointError(
            f"{source}: numerical contract version {meta['contract_version']}, this DaisyChain "
            f"implements version {CONTRACT_VERSION}; its weights would not stay bit-identical "
            "here. Use the DaisyChain version that wrote it"
        )
    try:
        model = _model_from_json(need("model"))
        optim = AdamWConfig(**json.loads(need("optim")))
        step, seed = _count(need("step")), _count(need("seed"))
        p1, p2 = _from_bits(need("p1")), _from_bits(need("p2"))
    except (ValueError, TypeError, KeyError, ConfigError) as exc:
        raise CheckpointError(f"{source}: invalid configuration in metadata: {exc}") from exc
    if vocab_size is not None and model.vocab_size != vocab_size:
        raise CheckpointError(
            f"{source}: the checkpoint's vocabulary has {model.vocab_size} tokens but this run's "
            f"tokenizer has {vocab_size}; load it with the tokenizer it was trained with"
        )
    ck_tok = need("tokenizer_sha256")
    if tokenizer_sha256 is not None and ck_tok != tokenizer_sha256:
        raise CheckpointError(
            f"{source}: trained with tokenizer {ck_tok[:12]}..., this run uses "
            f"{tokenizer_sha256[:12]}... (a different vocabulary); load it with the tokenizer "
            "it was trained with"
        )
    shapes = param_shapes(model)
    sync = meta.get("sync", "step")
    if sync not in ("step", "outer"):
        raise CheckpointError(
            f"{source}: sync mode {sync[:16]!r} is not one this version reads; use the DaisyChain "
            "version that wrote it"
        )
    if sync == "outer":
        return _outer_from_parts(tensors, meta, source, model, optim, step, seed, ck_tok, shapes)
    expected = [*shapes, *(f"m.{k}" for k in shapes), *(f"v.{k}" for k in shapes)]
    missing = [k for k in expected if k not in tensors]
    extra = [k for k in tensors if k not in shapes and k not in expected]
    if missing or extra:
        raise CheckpointError(
            f"{source}: tensors do not match the model configuration "
            f"(missing: {missing[:4]}, unexpected: {extra[:4]})"
        )
    arrays: dict[str, FloatArray] = {}
    for name in expected:
        arr = tensors[name]
        base = name.split(".", 1)[1] if name[:2] in ("m.", "v.") else name
        if arr.dtype != np.float32 or tuple(arr.shape) != shapes[base]:
            raise CheckpointError(
                f"{source}: tensor {name!r} is {arr.dtype} {tuple(arr.shape)}, the configuration "
                f"(width {model.width}, layers {model.layers}, vocab {model.vocab_size}) needs "
                f"float32 {shapes[base]}; the dims are wrong for this model"
            )
        arrays[name] = np.ascontiguousarray(arr, dtype=np.float32)
    params = {k: arrays[k] for k in shapes}
    opt_state = AdamWState(
        m={k: arrays[f"m.{k}"] for k in shapes},
        v={k: arrays[f"v.{k}"] for k in shapes},
        step=step,
        p1=p1,
        p2=p2,
    )
    state = TrainState(model, optim, params, opt_state, seed)
    digest = state_hash(state)
    if digest != need("weight_hash"):
        raise CheckpointError(
            f"{source}: weight hash {digest[:12]}... does not match the recorded "
            f"{meta['weight_hash'][:12]}...; the file is corrupted"
        )
    return Checkpoint(state, ck_tok, digest)


def _checked_arrays(
    tensors: dict[str, npt.NDArray[np.generic]],
    expected: dict[str, tuple[int, ...]],
    source: str,
    model: ModelConfig,
) -> dict[str, FloatArray]:
    missing = [k for k in expected if k not in tensors]
    extra = [k for k in tensors if k not in expected]
    if missing or extra:
        raise CheckpointError(
            f"{source}: tensors do not match the model configuration "
            f"(missing: {missing[:4]}, unexpected: {extra[:4]})"
        )
    arrays: dict[str, FloatArray] = {}
    for name, shape in expected.items():
        arr = tensors[name]
        if arr.dtype != np.float32 or tuple(arr.shape) != shape:
            raise CheckpointError(
                f"{source}: tensor {name!r} is {arr.dtype} {tuple(arr.shape)}, the configuration "
                f"(width {model.width}, layers {model.layers}, vocab {model.vocab_size}) needs "
                f"float32 {shape}; the dims are wrong for this model"
            )
        arrays[name] = np.ascontiguousarray(arr, dtype=np.float32)
    return arrays


def _outer_from_parts(
    tensors: dict[str, npt.NDArray[np.generic]],
    meta: dict[str, str],
    source: str,
    model: ModelConfig,
    optim: AdamWConfig,
    step: int,
    seed: int,
    ck_tok: str,
    shapes: dict[str, tuple[int, ...]],
) -> Checkpoint:
    """An outer run's checkpoint (module docstring): outer weights, momentum, outer steps."""
    try:
        spec = json.loads(meta["outer"])
        cfg = OuterConfig(int(spec["inner_steps"]), float(spec["lr"]), float(spec["momentum"]))
    except (KeyError, ValueError, TypeError, OuterError) as exc:
        raise CheckpointError(f"{source}: invalid outer configuration in metadata: {exc}") from exc
    expected = dict(shapes) | {f"{OUTER_PREFIX}{k}": v for k, v in shapes.items()}
    arrays = _checked_arrays(tensors, expected, source, model)
    params = {k: arrays[k] for k in shapes}
    outer = OuterState(params, {k: arrays[f"{OUTER_PREFIX}{k}"] for k in shapes}, step)
    digest = outer_hash(outer)
    if digest != meta.get("weight_hash"):
        raise CheckpointError(
            f"{source}: outer hash {digest[:12]}... does not match the recorded "
            f"{str(meta.get('weight_hash'))[:12]}...; the file is corrupted"
        )
    # The inner optimizer starts fresh on the outer weights (each peer's own; never shared).
    state = TrainState(model, optim, params, AdamW(optim).init_state(params), seed)
    return Checkpoint(state, ck_tok, digest, outer, cfg)


def describe(ck: Checkpoint) -> dict[str, Any]:
    """A short JSON-able summary (for logs and the CLI)."""
    cfg = ck.state.cfg
    return {
        "step": ck.step,
        "seed": ck.state.seed,
        "model": dataclasses.asdict(cfg) | {"norm_eps": float(cfg.norm_eps)},
        "weight_hash": ck.weight_hash,
    }
