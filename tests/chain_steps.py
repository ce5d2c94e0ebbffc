"""One ``tiny`` training step through a GEMM's chains, as training sends it (``training_ops``),
and the same step on numpy: the GPU chain tests compare their hashes and count the round trips."""

from __future__ import annotations

from daisychain import training
from daisychain.gpu.backend import Backend
from daisychain.gpu.counters import ROUND_TRIPS, Counts
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.live import training_ops
from daisychain.harness.steps import token_stream
from daisychain.model.config import preset
from daisychain.model.ops import NUMPY_OPS
from daisychain.optim import AdamWConfig


def one_tiny_step(gemm: GpuGemm | None) -> tuple[str, Counts]:
    """(state hash, device traffic) of one ``tiny`` step from seed 1; numpy for None."""
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(), 1)
    state.ops = NUMPY_OPS if gemm is None else training_ops(Backend(gemm, "test"))
    x, y = training.next_batch(state, token_stream(cfg.vocab_size))
    ROUND_TRIPS.reset()
    digest = training.train_step(state, x, y).hash
    return digest, ROUND_TRIPS.snapshot()
