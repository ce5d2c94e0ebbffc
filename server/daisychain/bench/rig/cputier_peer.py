"""``bench cpu-tier --peer BACKEND``: the headless Python peer on the browser tier's batches.

One round is one fresh process (no warm state carried between rounds, as a page is fresh): it
chooses its backend as ``daisychain peer --backend BACKEND`` does (``peer.backend.choose``:
gates and kernel probe, and for ``auto`` the measured choice), then trains the job's batches
(the same ``warmup + steps`` batches, seed and AdamW as the browser's side) and times the last
``steps``, each step with the per-step kernel probe a training peer publishes. It reports the
same fields as the page's side (``median_ms``, ``step_ms``, ``hash``) plus the backend and why.
``--isa avx2`` runs it with numba and OpenBLAS limited to AVX2 (``bench.step.ISA_ENV``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_CHILD = r"""
import json, statistics, sys, time
import numpy as np
job = json.loads(open(sys.argv[1], encoding="utf-8").read())
from daisychain import training
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from daisychain.peer.backend import choose
cfg = preset(job["preset"], vocab_size=job["vocab"])
chosen = choose(job["backend"])
state = training.init(cfg, AdamWConfig(), job["seed"])
state.ops = chosen.compute.ops
shape = (cfg.batch, cfg.seq_len)
times, digest, last = [], "", len(job["batches"]) - 1
for i, batch in enumerate(job["batches"]):
    x = np.asarray(batch["x"], dtype=np.int64).reshape(shape)
    y = np.asarray(batch["y"], dtype=np.int64).reshape(shape)
    t0 = time.perf_counter()
    digest = training.train_step(state, x, y, with_hash=i == last).hash
    chosen.compute.probe()  # what a training peer publishes with every step
    if i >= job["warmup"]:
        times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"backend": chosen.compute.name, "reason": chosen.reason, "hash": digest,
                  "step_ms": [round(t, 2) for t in times],
                  "median_ms": round(statistics.median(times), 2)}))
"""


def peer_once(
    job: dict[str, Any], backend: str, env_extra: dict[str, str], timeout_s: float
) -> dict[str, Any]:
    """One round of the peer on ``job`` ({preset, vocab, batches, warmup, steps}) with seed
    ``job['seed']``; raises RuntimeError with the child's error when it fails."""
    with tempfile.TemporaryDirectory(prefix="daisychain-cputier-peer-") as tmp:
        path = Path(tmp) / "job.json"
        path.write_text(json.dumps({**job, "backend": backend}), encoding="utf-8")
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)],
            capture_output=True,
            text=True,
            env={**os.environ, **env_extra},
            timeout=timeout_s,
            check=False,
        )
    if proc.returncode != 0:
        raise RuntimeError(f"bench cpu-tier: the Python peer failed:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result
