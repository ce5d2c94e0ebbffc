"""Convergence: the contract model trains like the float32 reference on real text.

Both runs use the same init, the same batches (built-in corpus, shipped tokenizer) and the same
optimizer; only the arithmetic differs (int8 products, two-limb backward, pinned float32 ops vs
plain float32). The contract's final loss must be within 5% of the reference's.

The runs go to a child process with single-threaded BLAS: tiny matrices gain nothing from BLAS
threads and lose several times over on a busy machine, while the bits do not depend on the thread
count at all (tests/model/test_determinism.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import daisychain

STEPS = 200
TAIL = 20
SEED = 7

RUN = f"""
import json
from daisychain import batches, training
from daisychain.model import PRESETS
from daisychain.optim import AdamWConfig

tokens, vocab = batches.builtin_tokens(300_000)
cfg = PRESETS["tiny"].replace(vocab_size=vocab)
out = {{"vocab": vocab}}
for backend in ("contract", "reference"):
    state = training.init(cfg, AdamWConfig(lr=3e-3, warmup_steps=20), {SEED}, backend=backend)
    losses = []
    for _ in range({STEPS}):
        x, y = training.next_batch(state, tokens)
        losses.append(float(training.train_step(state, x, y, with_hash=False).loss))
    out[backend] = losses
print(json.dumps(out))
"""


def _train_both() -> dict[str, list[float]]:
    env = dict(os.environ)
    src = str(Path(daisychain.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=280
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, list[float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_contract_tracks_the_float32_reference() -> None:
    runs = _train_both()
    contract, ref = runs["contract"], runs["reference"]
    assert len(contract) == len(ref) == STEPS
    start = float(np.mean(contract[:5]))
    end_c, end_r = float(np.mean(contract[-TAIL:])), float(np.mean(ref[-TAIL:]))
    print(
        f"\nvocab {runs['vocab']}: start {start:.4f}; last-{TAIL} mean contract {end_c:.4f} "
        f"reference {end_r:.4f} (ratio {end_c / end_r:.4f})"
    )
    assert contract[0] == pytest.approx(ref[0], rel=1e-3)  # same init and batch
    assert end_c < start - 1.0, "the contract run did not learn"
    assert abs(end_c - end_r) <= 0.05 * end_r
