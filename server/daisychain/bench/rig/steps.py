"""Training step time of one backend, the step half of ``daisychain bench kernels``.

Every backend trains the same thing: a preset (vocabulary ``--vocab``, seed 1, default AdamW)
on a synthetic token stream, token i = (7919 i + 13) mod vocab (as ``bench step``), batches
from the pinned sampler, so the Python, Node and Chromium loops do the same work step for step.
A step is gradients + AdamW update without the state hash. One warm-up step (pipelines, BLAS,
JIT, buffer pools), then up to ``StepPolicy.max_steps`` timed steps, stopping early once
``budget_s`` seconds of timed steps have passed; a backend whose warm-up alone took more than
``slow_s`` seconds is not timed further and is reported with its warm-up time and the reason.
The JS loops (``node_step.mjs``, the Chromium page in ``browser.py``) follow the same policy.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain import training
from daisychain.assets import asset_dir
from daisychain.bench.rig.nodejs import NodeError, node_argv
from daisychain.model.config import ModelConfig
from daisychain.model.ops import GemmOps
from daisychain.optim import AdamWConfig

TOKEN_STREAM = 200_000  # tokens in the synthetic stream (any length > seq_len + 1 would do)
NODE_STEP = Path(__file__).with_name("node_step.mjs")


@dataclass(frozen=True)
class StepPolicy:
    max_steps: int  # timed steps after the warm-up, at most
    budget_s: float  # stop timing once this much timed-step time has passed (>= 1 step timed)
    slow_s: float  # warm-up slower than this: time no further step

    def as_args(self) -> list[str]:
        return [str(self.max_steps), str(self.budget_s), str(self.slow_s)]


def token_stream(vocab: int) -> npt.NDArray[np.int64]:
    return (np.arange(TOKEN_STREAM, dtype=np.int64) * 7919 + 13) % vocab


def summarize(warmup_ms: float, step_ms: list[float], policy: StepPolicy) -> dict[str, Any]:
    """One backend's figures: median timed step, or the warm-up alone with the reason."""
    out: dict[str, Any] = {"warmup_ms": round(warmup_ms, 1), "timed_steps": len(step_ms)}
    if step_ms:
        out["step_ms"] = round(statistics.median(step_ms), 1)
    else:
        # The warm-up includes first-call costs, so it overstates a step; it is still the
        # measured order of magnitude, which is what a reader needs from a backend this slow.
        out["step_ms"] = round(warmup_ms, 1)
        out["note"] = (
            f"warm-up step took {warmup_ms / 1e3:.1f} s > {policy.slow_s:.0f} s: "
            "no further step timed, step_ms is the warm-up step"
        )
    return out


def time_python_steps(cfg: ModelConfig, ops: GemmOps, policy: StepPolicy) -> dict[str, Any]:
    """Steps of the Python contract model with its products on ``ops``."""
    state = training.init(cfg, AdamWConfig(), 1)
    state.ops = ops
    tokens = token_stream(cfg.vocab_size)

    def step() -> float:
        t0 = time.perf_counter()
        x, y = training.next_batch(state, tokens)
        training.train_step(state, x, y, with_hash=False)
        return (time.perf_counter() - t0) * 1e3

    warmup_ms = step()
    step_ms: list[float] = []
    if warmup_ms <= policy.slow_s * 1e3:
        while len(step_ms) < policy.max_steps and sum(step_ms) < policy.budget_s * 1e3:
            step_ms.append(step())
    return summarize(warmup_ms, step_ms, policy)


def node_missing() -> str | None:
    """Why the Node rows cannot run here, or None."""
    try:
        node_argv()
    except NodeError as exc:
        return str(exc)
    return None


def run_node(script: Path, args: list[str], timeout_s: float) -> dict[str, Any]:
    """Runs one of the bench's Node scripts with the static/ folder first; its JSON line."""
    cmd = [*node_argv(), str(script), str(asset_dir("static")), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{script.name} exited {proc.returncode}: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def time_node_steps(preset_name: str, vocab: int, policy: StepPolicy) -> dict[str, Any]:
    """Steps of the JS CPU mirror under Node (``node_step.mjs``)."""
    # Generous: a slow warm-up, then at most budget + one step more.
    timeout_s = 3 * policy.slow_s + policy.budget_s + 60
    result = run_node(NODE_STEP, [preset_name, str(vocab), *policy.as_args()], timeout_s)
    out = summarize(float(result["warmup_ms"]), [float(v) for v in result["step_ms"]], policy)
    out["node"] = result["node"]
    return out
