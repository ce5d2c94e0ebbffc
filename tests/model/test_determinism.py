"""Bit-identical training: the same hash sequence in separate processes and BLAS thread counts.

A replica's identity is ``training.state_hash`` (params, then m, then v). Every product is exact
whatever BLAS does, and every float operation is pinned, so neither a fresh process nor a different
number of BLAS threads may change a single bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import daisychain
from daisychain import batches, training
from daisychain.model import PRESETS
from daisychain.optim import AdamWConfig

STEPS = 20
SEED = 1234

RUN = f"""
import sys
from daisychain import batches, training
from daisychain.model import PRESETS
from daisychain.optim import AdamWConfig
if sys.argv[1:] == ["threadpoolctl"]:
    import threadpoolctl
    threadpoolctl.threadpool_limits(1)
tokens, vocab = batches.builtin_tokens(200_000)
cfg = PRESETS["tiny"].replace(vocab_size=vocab)
state = training.init(cfg, AdamWConfig(lr=3e-3, warmup_steps=5), {SEED})
for _ in range({STEPS}):
    x, y = training.next_batch(state, tokens)
    print(training.train_step(state, x, y).hash)
"""


# One fwd+bwd of `small`: products large enough that OpenBLAS really splits them across threads.
RUN_SMALL = """
import numpy as np
from daisychain.model import forward_backward, init_params, preset
from daisychain.numerics import sha256_arrays
cfg = preset("small", vocab_size=2048)
tokens = (np.arange(cfg.tokens + 1, dtype=np.int64) * 7919 + 13) % cfg.vocab_size
x = tokens[:-1].reshape(cfg.batch, cfg.seq_len)
y = tokens[1:].reshape(cfg.batch, cfg.seq_len)
loss, grads = forward_backward(init_params(cfg, 5), cfg, x, y)
print(sha256_arrays([loss, *grads.values()]))
"""


def _run(threads: int, *args: str, script: str = RUN, lines: int = STEPS) -> list[str]:
    env = dict(os.environ)
    src = str(Path(daisychain.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    hashes = out.stdout.split()
    assert len(hashes) == lines
    return hashes


def test_same_hashes_across_processes_and_blas_threads() -> None:
    one = _run(1)
    two = _run(2)
    assert len(set(one)) == STEPS  # the state changes every step
    assert one == two
    # and in this process (whatever its BLAS configuration)
    tokens, vocab = batches.builtin_tokens(200_000)
    cfg = PRESETS["tiny"].replace(vocab_size=vocab)
    state = training.init(cfg, AdamWConfig(lr=3e-3, warmup_steps=5), SEED)
    here = []
    for _ in range(STEPS):
        x, y = training.next_batch(state, tokens)
        here.append(training.train_step(state, x, y).hash)
    assert here == one


def test_small_gradients_identical_with_1_and_2_blas_threads() -> None:
    assert _run(1, script=RUN_SMALL, lines=1) == _run(2, script=RUN_SMALL, lines=1)


def test_same_hashes_under_threadpoolctl() -> None:
    assert _run(2, "threadpoolctl") == _run(1)


def test_state_hash_covers_params_then_moments() -> None:
    cfg = PRESETS["tiny"].replace(vocab_size=64)
    state = training.init(cfg, AdamWConfig(), 1)
    base = training.state_hash(state)
    state.opt_state.v["gf"][0] = np.float32(1e-30)
    assert training.state_hash(state) != base
    state.opt_state.v["gf"][0] = np.float32(0.0)
    assert training.state_hash(state) == base
    state.opt_state.v["gf"][0] = np.float32(-0.0)  # -0 and +0 differ in the bytes
    assert training.state_hash(state) != base


def test_batches_follow_the_spec() -> None:
    tokens = np.arange(1000, dtype=np.int64) * 7
    x, y = batches.sample_batch(tokens, 3, 16, seed=9, step=4, rank=2)
    assert x.shape == y.shape == (3, 16) and x.dtype == np.int64
    from daisychain.numerics import prng

    offsets = prng.below(prng.key(9, 1, 4, 2), 3, 1000 - 16 - 1)
    for row, o in enumerate(offsets):
        assert np.array_equal(x[row], tokens[o : o + 16])
        assert np.array_equal(y[row], tokens[o + 1 : o + 17])
    again = batches.sample_batch(tokens, 3, 16, seed=9, step=4, rank=2)
    assert np.array_equal(again[0], x)
    other = batches.sample_batch(tokens, 3, 16, seed=9, step=4, rank=3)
    assert not np.array_equal(other[0], x)
    with pytest.raises(ValueError, match="too short"):
        batches.sample_batch(tokens[:17], 1, 16, seed=0, step=0)
