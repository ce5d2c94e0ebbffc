"""The hashes a run must publish, given the shares it committed (data-channel protocol v2).

With capacity-weighted rosters the leader shares every step's ``global_batch`` sequences out by
the peers' measured seconds per sequence (``p2p.shares.allot``), so two runs of one config commit
different shares as soon as their devices' timings differ, and then publish different hashes
(the mean over the same sequences, but quantized per contributor and summed in another
grouping). A test that compares a run with "the same config played again" compares timings. What
must hold instead: the hashes a run publishes are the hashes Python computes outside any mesh
for that config with the shares that run committed. ``replayed_hashes`` computes them: for every
step, each roster rank's mean gradient of its positions (``shares.pieces`` of the lanes,
``training.mean_gradient``), the whole exchange of them (``allreduce.exchange_locally``: chunks by
shares, the weighted mean), the update (``training.apply_grads`` on the dequantized mean, as
``p2p.modelreplica.Replica.apply``), the state hash. The checks become stronger, not weaker: every
step's bytes are recomputed from the config and the shares alone.

``shares_of(records)`` reads ``{step: shares}`` from Python ``StepRecord``s or a tab's step
records (``peer.js`` record(): dicts with ``step`` and ``shares``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from daisychain import training
from daisychain.model.params import param_shapes
from daisychain.p2p import allreduce, runconfig, shares
from daisychain.training import mean_gradient
from daisychain.wire import codec, messages
from mesh_helpers import corpus

Rows = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]
# (state, lane) -> that lane's batch of the state's next step
Lane = Callable[[training.TrainState, int], Awaitable[Rows]]


def shares_of(records: Iterable[Any]) -> dict[int, tuple[int, ...]]:
    """``{step: shares}`` of step records (Python ``StepRecord`` or a tab's record dicts)."""
    out: dict[int, tuple[int, ...]] = {}
    for r in records:
        step, split = (r["step"], r["shares"]) if isinstance(r, dict) else (r.step, r.shares)
        out[step] = tuple(split)
    return out


def builtin_lanes(tokens: npt.NDArray[np.integer]) -> Lane:
    """Lane ``l`` of the built-in corpus: the batch version 1 gave rank ``l``."""

    async def lane(state: training.TrainState, index: int) -> Rows:
        return training.next_batch(state, tokens, index)

    return lane


async def replayed_hashes(
    config: messages.Config,
    split: Mapping[int, tuple[int, ...]],
    *,
    state: training.TrainState | None = None,
    lane: Lane | None = None,
    data_sources: tuple[str, ...] = ("builtin",),
) -> dict[int, str]:
    """The state hash after every step of ``split`` (consecutive, from the state's next step)
    for the run ``config`` with those shares; ``state``: where it starts (default: fresh from
    the config's seed, or a restored checkpoint's); ``lane``: where lanes come from (default:
    the built-in corpus)."""
    tokens, sha, vocab = corpus()
    run = runconfig.parse(config, tokenizer_sha256=sha, vocab_size=vocab,
                          data_sources=data_sources)  # fmt: skip
    state = state if state is not None else training.init(run.model, run.optim, config.seed)
    lane = lane or builtin_lanes(tokens)
    total = codec.n_blocks(sum(g.size for g in state.params.values()))
    out: dict[int, str] = {}
    for step in sorted(split):
        assert step == state.step + 1, f"the shares of step {step} after state step {state.step}"
        of = split[step]
        assert sum(of) == config.global_batch, (step, of, config.global_batch)
        flats = []
        for rank in range(len(of)):
            rows: list[Rows] = []
            for p in shares.pieces(shares.offsets(of)[rank], of[rank], run.model.batch):
                x, y = await lane(state, p.lane)
                rows.append((x[p.row : p.row + p.rows], y[p.row : p.row + p.rows]))
            _, flat = mean_gradient(state, rows, of[rank])
            flats.append(flat if flat is not None else np.zeros(total * codec.BLOCK, np.float32))
        mean, _ = allreduce.exchange_locally(flats, of)
        training.apply_grads(state, codec.unflatten(mean, param_shapes(state.cfg)))
        out[step] = training.state_hash(state)
    return out
