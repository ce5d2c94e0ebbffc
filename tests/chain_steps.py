"""One ``tiny`` training step through a GEMM's chains, as training sends it (``training_ops``),
and the same step on numpy: the GPU chain tests compare their hashes and count the round trips."""

from __future__ import annotations

import dataclasses
from typing import Any

from daisychain import training
from daisychain.bench.rig.steps import token_stream
from daisychain.gpu.backend import Backend
from daisychain.gpu.counters import ROUND_TRIPS, Counts
from daisychain.gpu.gemm import GpuGemm
from daisychain.gpu.live import training_ops
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


def changed(out: Any, path: str) -> Any:
    """A chain's (nested) output with one value of the array at ``path`` (``blocks.1.o.q8``)
    changed by one: what a drifted kernel would have written there."""
    if not path:  # the array itself
        value = out.copy()
        value.reshape(-1)[7] += 1
        return value
    head, _, rest = path.partition(".")
    if isinstance(out, tuple):
        parts = list(out)
        parts[int(head)] = changed(parts[int(head)], rest)
        return tuple(parts)
    return dataclasses.replace(out, **{head: changed(getattr(out, head), rest)})


class Wrong:
    """A real chain whose ``run`` changes one value of one output (``changed``)."""

    def __init__(self, chain: Any, path: str) -> None:
        self.chain, self.name, self.path = chain, chain.name, path
        self.fits = chain.fits

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return changed(self.chain.run(*args, **kwargs), self.path)
