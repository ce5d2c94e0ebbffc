"""Shares (protocol version 2): the leader's split of the step's sequences, lane pieces, the
roster check, and a contributor's mean gradient over lane pieces (docs/PROTOCOL.md, "Gradient
chunks and the exchange arithmetic")."""

from __future__ import annotations

import random

import numpy as np
import pytest

from daisychain import training
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from daisychain.p2p import runconfig, shares
from daisychain.training import mean_gradient
from daisychain.wire import codec


def test_unmeasured_peers_share_equally_lower_ranks_first() -> None:
    assert shares.allot([0.0, 0.0, 0.0], 12) == (4, 4, 4)
    assert shares.allot([0.0, 0.0, 0.0], 16) == (6, 5, 5)
    assert shares.allot([0.0], 7) == (7,)


def test_shares_follow_speed() -> None:
    assert shares.allot([1.0, 4.0], 16) == (13, 3)  # a fast device and one at a quarter of it
    assert shares.allot([0.5, 0.5, 0.5], 24) == (8, 8, 8)
    assert shares.allot([0.1, 0.3], 12) == (9, 3)


def test_a_device_too_slow_for_one_sequence_gets_none() -> None:
    assert shares.allot([0.1, 10.0], 16) == (16, 0)
    assert shares.allot([0.1, 0.1, 2.0], 12) == (6, 6, 0)


def test_an_unmeasured_peer_weighs_the_mean_of_the_measured() -> None:
    # weights 10 and 10/3: an unmeasured one weighs their mean, 20/3
    assert shares.allot([0.1, 0.3, 0.0], 12) == (6, 2, 4)
    assert shares.allot([0.1, 0.0], 12) == (6, 6)


def test_equal_remainders_go_to_the_lower_rank() -> None:
    assert shares.allot([1.0, 1.0], 3) == (2, 1)
    assert shares.allot([1.0, 1.0, 1.0, 1.0], 6) == (2, 2, 1, 1)


def test_every_split_sums_to_the_global_batch_and_is_monotone_in_speed() -> None:
    rng = random.Random(11)
    for _ in range(500):
        n = rng.randint(1, 12)
        speeds = [rng.choice([0.0, rng.uniform(0.01, 5.0)]) for _ in range(n)]
        g = rng.randint(1, 4096)
        out = shares.allot(speeds, g)
        assert sum(out) == g and len(out) == n and min(out) >= 0, (speeds, g, out)
        for i in range(n):
            for j in range(n):
                if 0 < speeds[i] < speeds[j]:  # faster never gets less
                    assert out[i] >= out[j], (speeds, g, out)


def test_offsets_and_pieces_cut_positions_at_lane_boundaries() -> None:
    assert shares.offsets((5, 0, 3)) == (0, 5, 5, 8)
    assert shares.pieces(5, 10, 4) == (
        shares.Piece(1, 1, 3), shares.Piece(2, 0, 4), shares.Piece(3, 0, 3))  # fmt: skip
    assert shares.pieces(8, 4, 4) == (shares.Piece(2, 0, 4),)
    assert shares.pieces(3, 0, 4) == ()
    for first in range(0, 20):
        for count in range(0, 20):
            got = shares.pieces(first, count, 3)
            rows = [p.lane * 3 + p.row + i for p in got for i in range(p.rows)]
            assert rows == list(range(first, first + count))
            assert all(1 <= p.rows <= 3 and p.row + p.rows <= 3 for p in got)


@pytest.mark.parametrize(
    ("of", "peers", "g", "why"),
    [
        ((4, 4), 3, 8, "2 shares for 3 roster peers"),
        ((4, -1, 5), 3, 8, "negative"),
        ((4, 4, 3), 3, 12, "sum to 11, the run's global batch is 12"),
        ((), 1, 1, "0 shares for 1"),
    ],
)
def test_the_roster_check_refuses(of: tuple[int, ...], peers: int, g: int, why: str) -> None:
    assert why in (shares.check(of, peers, g) or "")


def test_the_roster_check_accepts_a_share_of_zero() -> None:
    assert shares.check((12, 0), 2, 12) is None


@pytest.mark.parametrize("g", [0, 4097])
def test_a_global_batch_outside_its_range_is_incompatible(g: int) -> None:
    from protocol_traces.script import TOKENIZER, VOCAB, config

    cfg = config()
    bad = type(cfg)(**{**cfg.__dict__, "global_batch": g})
    with pytest.raises(runconfig.Incompatible) as info:
        runconfig.parse(bad, tokenizer_sha256=TOKENIZER, vocab_size=VOCAB)
    assert info.value.rule == "global-batch" and "4096" in info.value.hint


def _state() -> training.TrainState:
    cfg = preset("tiny", vocab_size=256, batch=4, seq_len=16)
    return training.init(cfg, AdamWConfig(lr=3e-3), 5)


def test_a_share_in_one_lane_is_the_models_own_mean() -> None:
    state = _state()
    x = np.random.default_rng(1).integers(0, 256, size=(3, 16))
    y = np.roll(x, -1, axis=1)
    loss, flat = mean_gradient(state, [(x, y)], 3)
    want_loss, grads = training.compute_grads(state, x, y)
    assert flat is not None and loss == float(want_loss)
    np.testing.assert_array_equal(flat, codec.flatten(grads))


def test_pieces_combine_as_their_row_weighted_mean_in_float32() -> None:
    """Two pieces (3 + 1 rows): g = (g0 * 3 + g1 * 1) / 4 in float32 order, close to the
    gradient of the four rows at once (the float32 reference of the same mean)."""
    state = _state()
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, size=(4, 16))
    y = np.roll(x, -1, axis=1)
    loss, flat = mean_gradient(state, [(x[:3], y[:3]), (x[3:], y[3:])], 4)
    l0, _ = training.compute_grads(state, x[:3], y[:3])
    l1, _ = training.compute_grads(state, x[3:], y[3:])
    assert loss == float(
        np.float32(np.float32(l0 * np.float32(3)) + np.float32(l1)) / np.float32(4)
    )
    _, g0 = training.compute_grads(state, x[:3], y[:3])
    _, g1 = training.compute_grads(state, x[3:], y[3:])
    f0, f1 = codec.flatten(g0), codec.flatten(g1)
    want = (f0 * np.float32(3) + f1 * np.float32(1)) / np.float32(4)
    assert flat is not None
    np.testing.assert_array_equal(flat, want.astype(np.float32))
    _, whole = training.compute_grads(state, x, y)
    ref = codec.flatten(whole)
    assert np.linalg.norm(flat - ref) / np.linalg.norm(ref) < 0.05  # same mean, other rounding
    unweighted = (f0 + f1) / np.float32(2)
    assert not np.array_equal(flat, unweighted), "the weights matter"


def test_a_share_of_zero_has_no_gradient() -> None:
    assert mean_gradient(_state(), [], 0) == (0.0, None)
