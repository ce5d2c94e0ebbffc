"""``daisychain bench cpu-tier``: the browser CPU tier against TF.js 4.22's WASM backend.

Training tokens/s of our CPU tier (the JS mirror with its WebAssembly SIMD int8 GEMM, and its
elementwise kernel where the build has one, gated and installed as the page's training worker
does: ``cputier_ours.mjs``) against TF.js 4.22's wasm backend training the same GPT shape
(``tfjs_gpt.mjs``: same parameters, batch, sequence length, AdamW) on the same batches, in the
same run, in Node and in headless Chromium (``_cputier_chromium``), for each preset of
``--presets``. TF.js runs two ways: ``out-of-the-box`` (3-D products, as a natural port writes
them) and ``fastest`` (every product a plain 2-D one, the only ones its wasm backend sends to
XNNPACK; SIMD on, threads where the environment allows them). The sides take turns:
``--rounds`` rounds of ours and TF.js fastest, the order alternating
(``bench.rig.paired_rounds``), then
TF.js out of the box once.

The batches: the built-in corpus tokenized with the shipped tokenizer, ``warmup + steps`` batches
of the pinned sampler (seed 1), handed to every side. Our side's state hash after them is
compared with the Python reference's (numpy, the same batches, seed 1, default AdamW), the hash
every other compute path matches (``hashes_identical``). TF.js is a bench-only dependency
installed on demand into a cache folder
(``bench.rig.tfjs_cache``); without it the bench refuses with a
hint. Ratios (``ratio_vs_tfjs_*`` = our tokens/s / TF.js tokens/s, > 1: ours is faster) are the
result; absolute times on the shared machines are leads. docs/BENCHMARKS.md, ``cpu-tier``, has
the current figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain.bench import _cputier_chromium

# The TF.js page's file server, part of this benchmark's interface (its test checks it).
from daisychain.bench._cputier_chromium import ISOLATION_HEADERS, tfjs_routes
from daisychain.bench.rig import cpufeatures, cputier_peer, paired_rounds
from daisychain.bench.rig.chromium import chromium_missing
from daisychain.bench.rig.steps import node_missing, run_node
from daisychain.bench.rig.tfjs_cache import TfjsMissing, default_dir, ensure_tfjs
from daisychain.model.config import ModelConfig, preset
from daisychain.model.params import count_params

ENVIRONMENTS = ("node", "chromium")
MODES = ("fastest", "out-of-the-box")
SEED = 1  # the run's seed: init and batches, on every side
NODE_OURS = Path(__file__).with_name("cputier_node.mjs")
NODE_TFJS = Path(__file__).with_name("tfjs_node.mjs")

Batch = dict[str, list[int]]


# Options: flag -> argparse keywords.
OPTIONS: dict[str, dict[str, Any]] = {
    "--presets": {"default": "tiny,small", "help": "comma-separated model presets"},
    "--vocab": {"type": int, "default": 2048, "help": "vocabulary of the presets"},
    "--steps": {"type": int, "default": 3, "help": "timed training steps per side and round"},
    # Five untimed steps: V8 takes the first few steps of a fresh page or process to tier up
    # our JS (150-270 ms against 55-60 ms steady on `tiny`), while TF.js's wasm binary is
    # compiled ahead; with 2 the `tiny` rounds measured start-up, not training, on our side.
    "--warmup": {"type": int, "default": 5, "help": "untimed steps before them (both sides)"},
    "--rounds": {
        "type": int,
        "default": 3,
        "help": "rounds of ours and TF.js fastest, alternating",
    },
    "--environments": {"default": ",".join(ENVIRONMENTS), "help": "node, chromium or both"},
    "--modes": {"default": ",".join(MODES), "help": "TF.js configurations: " + ", ".join(MODES)},
    "--tfjs-dir": {"type": Path, "default": None, "help": f"TF.js install ({default_dir()})"},
    "--no-install": {"action": "store_true", "help": "refuse rather than install TF.js (npm)"},
    "--tfjs-threads": {"type": int, "default": 0, "help": "TF.js threads in Chromium (0: cores)"},
    "--timeout": {"type": float, "default": 1800.0, "help": "seconds one side may take at most"},
    "--peer": {
        "default": "",
        "metavar": "BACKEND",
        "help": "also time the headless Python peer with --backend BACKEND (auto, cpu-madd, ...) "
        "on the same batches, alternating with ours: peer_vs_ours_ratio",
    },
    "--isa": {
        "default": "host",
        "help": "the peer's vector instructions: host or avx2 (as bench step --isa)",
    },
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for flag, keywords in OPTIONS.items():
        parser.add_argument(flag, **keywords)


def _choices(text: str, allowed: tuple[str, ...], option: str) -> list[str]:
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    bad = sorted(set(chosen) - set(allowed))
    if not chosen or bad:
        raise SystemExit(
            f"bench cpu-tier: {option}: choose from {', '.join(allowed)} (got {text!r})"
        )
    return chosen


# gpt.js's names of the ModelConfig fields that tfjs_gpt.mjs builds from.
JS_NAMES = {"vocab_size": "vocabSize", "width": "width", "layers": "layers", "heads": "heads",
            "seq_len": "seqLen", "batch": "batch", "mlp_mult": "mlpMult"}  # fmt: skip


def js_config(cfg: ModelConfig) -> dict[str, int]:
    """The preset in gpt.js's field names."""
    return {js: int(getattr(cfg, name)) for name, js in JS_NAMES.items()}


def make_batches(cfg: ModelConfig, tokens: npt.NDArray[np.int64], count: int) -> list[Batch]:
    """The batches of steps 0 .. count-1 of the run (pinned sampler, seed 1), flat (b, t)."""
    from daisychain.batches import sample_batch

    out: list[Batch] = []
    for step in range(count):
        x, y = sample_batch(tokens, cfg.batch, cfg.seq_len, SEED, step)
        out.append({"x": x.reshape(-1).tolist(), "y": y.reshape(-1).tolist()})
    return out


def reference_hash(cfg: ModelConfig, batches: list[Batch]) -> str:
    """The Python reference's state hash after training on ``batches`` (seed 1, default AdamW)."""
    from daisychain import training
    from daisychain.optim import AdamWConfig

    state = training.init(cfg, AdamWConfig(), SEED)
    shape = (cfg.batch, cfg.seq_len)
    digest = ""
    for i, batch in enumerate(batches):
        x = np.asarray(batch["x"], dtype=np.int64).reshape(shape)
        y = np.asarray(batch["y"], dtype=np.int64).reshape(shape)
        digest = training.train_step(state, x, y, with_hash=i == len(batches) - 1).hash
    return digest


def check_same_model(name: str, tfjs_params: int, cfg: ModelConfig) -> None:
    """Refuses a TF.js model whose parameter count is not our preset's (a different model would
    make the ratio meaningless)."""
    ours = count_params(cfg)
    if tfjs_params != ours:
        raise RuntimeError(
            f"bench cpu-tier: the TF.js {name} model has {tfjs_params} parameters, "
            f"our preset {ours}: tfjs_gpt.mjs does not build the same model"
        )


def hashes_identical(hashes: dict[str, str | None]) -> bool:
    """Every path's hash present and equal to the others."""
    values = list(hashes.values())
    return bool(values) and all(h is not None and h == values[0] for h in values)


def _node(script: Path, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="daisychain-cputier-") as tmp:
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps(job), encoding="utf-8")
        return run_node(script, [str(path)], timeout_s)


def node_ours(job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Our CPU tier under Node on ``job`` ({preset, vocab, batches, warmup, steps})."""
    return _node(NODE_OURS, job, timeout_s)


def _ours_once(env: str, job: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    if env == "node":
        return node_ours(job["ours"], args.timeout)
    page = _cputier_chromium.ours([job["ours"]], args.timeout)
    return {"user_agent": page["user_agent"], **page["results"][0]}


def _peer_once(job: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from daisychain.bench.step import ISA_ENV

    if args.isa not in ISA_ENV:
        raise SystemExit(f"bench cpu-tier: --isa: choose from {', '.join(ISA_ENV)}")
    peer_job = {**job["ours"], "seed": SEED}
    return cputier_peer.peer_once(peer_job, args.peer, ISA_ENV[args.isa], args.timeout)


def _tfjs_once(
    env: str, job: dict[str, Any], mode: str, args: argparse.Namespace
) -> dict[str, Any]:
    tjob = {**job["tfjs"], "mode": mode}
    if env == "node":
        result = _node(NODE_TFJS, tjob, args.timeout)
    else:
        page = _cputier_chromium.tfjs(args.tfjs_dir, [tjob], args.tfjs_threads, args.timeout)
        info = {k: v for k, v in page.items() if k != "results"}
        result = {**info, **page["results"][0]}
    check_same_model(f"{job['ours']['preset']} {mode}", int(result["params"]), job["cfg"])
    return result


def _measure_preset(
    env: str, job: dict[str, Any], modes: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """One preset in one environment: ``--rounds`` rounds of ours and TF.js fastest, the order
    alternating; TF.js out of the box once (it is several times slower: one round suffices)."""
    cfg = job["cfg"]
    tokens_per_step = cfg.batch * cfg.seq_len
    ours: list[dict[str, Any]] = []
    fastest: list[dict[str, Any]] = []
    peer: list[dict[str, Any]] = []
    for r in range(max(1, args.rounds)):
        if "fastest" in modes and r % 2 == 1:
            fastest.append(_tfjs_once(env, job, "fastest", args))
        if getattr(args, "peer", "") and r % 2 == 1:
            peer.append(_peer_once(job, args))
        ours.append(_ours_once(env, job, args))
        if "fastest" in modes and r % 2 == 0:
            fastest.append(_tfjs_once(env, job, "fastest", args))
        if getattr(args, "peer", "") and r % 2 == 0:
            peer.append(_peer_once(job, args))
    row: dict[str, Any] = {"ours": paired_rounds.summarize(ours, tokens_per_step)}
    if peer:  # the headless peer against the browser tier, round by round
        for result in peer:
            result["tokens_per_s"] = tokens_per_step / (result["median_ms"] / 1e3)
        row["peer"] = paired_rounds.summarize(peer, tokens_per_step)
        ratios = paired_rounds.paired_ratios(peer, ours)
        row["peer_vs_ours_by_round"] = ratios
        if ratios:
            row["peer_vs_ours_ratio"] = round(statistics.median(ratios), 3)
    if fastest:
        row["tfjs_fastest"] = paired_rounds.summarize(fastest, tokens_per_step)
        ratios = paired_rounds.paired_ratios(ours, fastest)
        row["ratios_by_round"] = ratios
        if ratios:
            row["ratio_vs_tfjs_fastest"] = round(statistics.median(ratios), 3)
    if "out-of-the-box" in modes:
        ootb = _tfjs_once(env, job, "out-of-the-box", args)
        row["tfjs_out_of_the_box"] = ootb
        if "tokens_per_s" in row["ours"]:
            ratio = row["ours"]["tokens_per_s"] / ootb["tokens_per_s"]
            row["ratio_vs_tfjs_out_of_the_box"] = round(ratio, 3)
    return row


def _measure_env(
    env: str, args: argparse.Namespace, modes: list[str], jobs: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """{presets: {name: {ours, tfjs_<mode>, ratio_vs_tfjs_<mode>, ...}}} for one environment."""
    return {"presets": {name: _measure_preset(env, job, modes, args) for name, job in jobs.items()}}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    envs = _choices(args.environments, ENVIRONMENTS, "--environments")
    modes = [m for m in _choices(args.modes, (*MODES, "none"), "--modes") if m != "none"]
    peer = getattr(args, "peer", "")
    if peer:
        from daisychain.peer.backend import CHOICES

        if peer not in CHOICES:
            raise SystemExit(f"bench cpu-tier: --peer: choose from {', '.join(CHOICES)}")
    names = [p for p in args.presets.split(",") if p]
    steps, warmup = max(1, args.steps), max(0, args.warmup)
    try:
        if modes:  # --modes none: our tier (and the peer) only, no TF.js to install
            args.tfjs_dir = ensure_tfjs(args.tfjs_dir or default_dir(), install=not args.no_install)
    except TfjsMissing as exc:
        raise SystemExit(f"bench cpu-tier: {exc}") from None
    from daisychain.batches import builtin_tokens

    tokens, vocab = builtin_tokens()
    if vocab != args.vocab:
        raise SystemExit(f"bench cpu-tier: the tokenizer has {vocab} tokens, --vocab {args.vocab}")
    opt = _adamw_fields()
    jobs: dict[str, dict[str, Any]] = {}
    for name in names:
        cfg = preset(name, vocab_size=args.vocab)
        batches = make_batches(cfg, tokens, warmup + steps)
        common = {"batches": batches, "warmup": warmup, "steps": steps}
        jobs[name] = {
            "cfg": cfg,
            "reference_hash": reference_hash(cfg, batches),
            "ours": {"preset": name, "vocab": args.vocab, **common},
            "tfjs": {"tfjs_dir": str(args.tfjs_dir), "cfg": js_config(cfg), "opt": opt, **common},
        }
    result: dict[str, Any] = {
        "benchmark": "cpu-tier",
        "presets": names,
        "vocab": args.vocab,
        "warmup": warmup,
        "steps": steps,
        "rounds": max(1, args.rounds),
        "tfjs_dir": str(args.tfjs_dir),
        "data": "built-in corpus, shipped tokenizer, pinned sampler seed 1",
    }
    for env in envs:
        missing = node_missing() if env == "node" else chromium_missing()
        result[env] = (
            {"skipped": missing} if missing is not None else _measure_env(env, args, modes, jobs)
        )
    if peer:
        result["peer_machine"] = cpufeatures.describe()
    result["hashes"] = _hashes(result, envs, jobs)
    result["hashes_identical"] = all(h["hashes_identical"] for h in result["hashes"].values())
    return result


def _adamw_fields() -> dict[str, float]:
    from daisychain.optim import AdamWConfig

    fields = dataclasses.asdict(AdamWConfig())
    return {k: float(fields[k]) for k in ("lr", "beta1", "beta2", "eps", "weight_decay", "clip")}


def _hashes(
    result: dict[str, Any], envs: list[str], jobs: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """Per preset: the reference hash, each environment's, and whether they all agree."""
    out: dict[str, Any] = {}
    for name, job in jobs.items():
        hashes: dict[str, str | None] = {"numpy": job["reference_hash"]}
        for env in envs:
            row = result[env].get("presets", {}).get(name, {})
            hashes[env] = row.get("ours", {}).get("hash")
            if "peer" in row:
                hashes[f"{env}_peer"] = row["peer"].get("hash")
        out[name] = {**hashes, "hashes_identical": hashes_identical(hashes)}
    return out


__all__ = ["ISOLATION_HEADERS", "add_arguments", "measure", "tfjs_routes"]
