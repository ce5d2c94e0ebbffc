"""An outer run's pieces at one peer (docs/PROTOCOL.md, "Outer runs"), without a network: the
machine's reduction is outer.mean's token-weighted mean (not the per-step rule), the inner
round's chunks are the exchange codec's, and the model replica's outer mode (hash, apply,
checkpoint with the momentum, refusals)."""

from __future__ import annotations

import numpy as np
import pytest

from daisychain import batches, checkpoint, safetensors_io, training
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from daisychain.outer import OuterConfig, apply_outer, init_outer, outer_hash
from daisychain.outer.mean import weighted_mean
from daisychain.outer.nesterov import pseudo_gradient
from daisychain.p2p import allreduce, inner, shares
from daisychain.p2p.machine.attempt import Attempt
from daisychain.p2p.machine.replica import ReplicaRefused
from daisychain.p2p.modelreplica import ModelReplica
from daisychain.p2p.run import CommittedRoster
from daisychain.wire import codec
from mesh_helpers import corpus

SHA = "5a" * 32
OUTER = OuterConfig(inner_steps=2, lr=0.7, momentum=0.9)


def crafted() -> list[np.ndarray]:
    """Contributions where dividing the shares by their gcd (3, 3, 3 -> 1, 1, 1) changes the
    mean's bits, and the change survives quantization: the gcd rule's mean is exactly 6.5 (a
    tie at the block's step of 1, to even: 6), the per-step rule's sum rounds 3 * 2^-22 * 3 up
    and lands above it (7)."""
    a = np.zeros(codec.BLOCK, np.float32)
    a[0], a[1] = 19.5, 300.0
    b = np.zeros(codec.BLOCK, np.float32)
    b[0] = np.float32(3 * 2.0**-22)
    return [a, b, np.zeros(codec.BLOCK, np.float32)]


@pytest.mark.parametrize("outer", [True, False])
def test_the_machine_reduces_an_outer_round_with_outer_mean(outer: bool) -> None:
    roster = CommittedRoster(1, 0, ("a", "b", "c"), (3, 3, 3))
    attempt = Attempt(roster, 0, 3, 0.0, outer=outer)
    parts = crafted()
    attempt.contributions = dict(enumerate(parts))
    payload = attempt.reduce()
    assert payload is not None
    outer_bits = codec.encode(weighted_mean(parts, [3, 3, 3]))[0]
    step_bits = codec.encode(allreduce.reduce_chunk(parts, [3, 3, 3], 9))[0]
    assert outer_bits != step_bits  # the case tells the two rules apart
    assert payload == (outer_bits if outer else step_bits)


def test_inner_chunks_are_one_encode_cut_at_chunk_boundaries() -> None:
    rng = np.random.default_rng(5)
    flat = rng.standard_normal(7 * codec.BLOCK).astype(np.float32)
    for of in [(1, 1, 1), (4, 1, 3), (0, 2, 2), (5,)]:
        parts = inner.chunk_payloads(flat, of, 7)
        whole = codec.encode(flat)[0]
        for k, part in enumerate(parts):
            first, end = allreduce.chunk_blocks(7, of, k)
            assert part == whole[first:end] + whole[7 + first * 256 : 7 + end * 256] or (
                first == end and part == b""
            )
    assert inner.batch_index(1, 3, 0) == 0 and inner.batch_index(4, 3, 2) == 11
    assert inner.round_indices(4, 3) == range(9, 12)


def positions(
    steps: tuple[tuple[shares.RoundPiece, ...], ...], batch: int
) -> list[tuple[int, int]]:
    """Every sequence a round's steps train, as (batch index, position), in training order."""
    return [
        (p.index, p.lane * batch + p.row + r) for step in steps for p in step for r in range(p.rows)
    ]


@pytest.mark.parametrize(
    ("first", "count", "batch", "sizes"),
    [
        (4, 4, 4, [4, 4, 4]),  # a share of one whole lane: H steps of one piece, as a per-step run
        (0, 5, 4, [4, 4, 4, 3]),  # a bigger share: more inner steps of the same size
        (5, 3, 4, [4, 4, 1]),  # a share below the batch: several batch indices make one step
        (3, 7, 4, [4, 4, 4, 4, 4, 1]),  # across a lane boundary, and across batch indices
        (2, 0, 4, []),  # a share of 0 takes no inner steps
        # PROTOCOL.md's example, b = 4, H = 3, shares 7, 4, 1:
        (0, 7, 4, [4, 4, 4, 4, 4, 1]),
        (7, 4, 4, [4, 4, 4]),
        (11, 1, 4, [3]),
    ],
)
def test_round_steps_cut_a_share_into_inner_steps_of_the_batch(
    first: int, count: int, batch: int, sizes: list[int]
) -> None:
    indices = inner.round_indices(2, 3)
    steps = shares.round_steps(indices, first, count, batch, "batch")
    assert [sum(p.rows for p in step) for step in steps] == sizes
    # Cut by shares (the default): one inner step per batch index, the whole share each.
    by_share = shares.round_steps(indices, first, count, batch)
    assert [sum(p.rows for p in step) for step in by_share] == [count] * (3 if count else 0)
    assert [{p.index for p in step} for step in by_share] == [{i} for i in indices if count]
    assert positions(by_share, batch) == positions(steps, batch)
    # Exactly the share's positions of every batch index, in order, none twice.
    want = [(i, q) for i in indices for q in range(first, first + count)]
    assert positions(steps, batch) == want
    for step in steps:  # pieces never cross a lane
        assert all(p.row >= 0 and p.row + p.rows <= batch for p in step)


def outer_replica() -> ModelReplica:
    _, _, vocab = corpus()
    replica = ModelReplica(SHA, vocab)
    replica.set_outer(OUTER)
    cfg = preset("tiny", vocab_size=vocab, batch=1, seq_len=32)
    replica.start(cfg, AdamWConfig(lr=3e-3), 7)
    return replica


def test_outer_replica_hash_apply_and_inner_state() -> None:
    replica = outer_replica()
    assert replica.outer is not None and replica.state is not None
    assert replica.step == 0 and replica.hash == outer_hash(init_outer(replica.state.params))
    tokens, _, _ = corpus()
    work = replica.inner_start()
    x, y = batches.sample_batch(tokens, 1, 32, 7, 0, 0)
    rows = [[(x, y)], [batches.sample_batch(tokens, 1, 32, 7, 1, 0)]]
    before = {k: w.copy() for k, w in replica.outer.params.items()}
    done = inner.inner_round(work, before, rows, (1,))
    loss, payloads, opt = done.loss, done.payloads, done.opt
    assert np.isfinite(loss) and opt.step == 2
    # The inner steps ran on a copy: the shared state did not move.
    assert all(np.array_equal(before[k], w) for k, w in replica.outer.params.items())
    mean = codec.decode(payloads[0], codec.n_blocks(sum(w.size for w in before.values())))
    expect = init_outer(before)
    apply_outer(expect, OUTER, mean)
    replica.apply(mean)
    replica.adopt_inner(opt)
    assert replica.step == 1 and replica.hash == outer_hash(expect)
    # The working weights are the outer weights; the inner optimizer carries on.
    assert replica.state.params is replica.outer.params
    assert replica.state.opt_state.step == 2


def test_outer_checkpoint_carries_the_momentum_and_is_checked(tmp_path: object) -> None:
    replica = outer_replica()
    assert replica.outer is not None
    n = codec.n_blocks(sum(w.size for w in replica.outer.params.values()))
    rng = np.random.default_rng(3)
    replica.apply(codec.decode(codec.encode(rng.standard_normal(n * 256).astype(np.float32)
                                            * np.float32(1e-3))[0], n))  # fmt: skip
    blob = replica.checkpoint()
    other = ModelReplica(SHA, replica.vocab_size)
    other.set_outer(OUTER)
    other.restore(blob, "peer")
    assert other.step == 1 and other.hash == replica.hash and other.outer is not None
    assert any(np.any(m != 0) for m in other.outer.momentum.values())
    # A newcomer's inner optimizer is fresh; the checkpoint names the outer loop.
    assert other.state is not None and other.state.opt_state.step == 0
    tensors, meta = safetensors_io.decode(blob, "x")
    assert meta["sync"] == "outer" and '"inner_steps": 2' in meta["outer"]
    assert not any(k.startswith(("m.", "v.")) for k in tensors)
    # Planted: one momentum value changed -> the recorded hash refuses it.
    name = next(k for k in tensors if k.startswith(checkpoint.OUTER_PREFIX))
    bad = dict(tensors)
    bad[name] = tensors[name].copy()
    bad[name].reshape(-1)[0] += np.float32(1.0)
    with pytest.raises(checkpoint.CheckpointError, match="outer hash"):
        checkpoint.from_parts(bad, meta, "bad", SHA, replica.vocab_size)
    # A per-step run refuses an outer checkpoint, and an outer run a per-step one.
    per_step = ModelReplica(SHA, replica.vocab_size)
    with pytest.raises(ReplicaRefused, match="outer run"):
        per_step.restore(blob, "peer")
    assert replica.state is not None
    step_blob = checkpoint.encode(training.init(replica.state.cfg, replica.state.opt_cfg, 7), SHA)
    with pytest.raises(ReplicaRefused, match="per-step run"):
        other.restore(step_blob, "peer")
    # Saved to disk and loaded as the leader's --resume.
    path = f"{tmp_path}/outer.safetensors"
    assert replica.save(path).endswith("@1")
    resumed = ModelReplica(SHA, replica.vocab_size)
    resumed.set_outer(OUTER)
    resumed.load(path)
    assert resumed.hash == replica.hash and resumed.step == 1
    assert checkpoint.load(path).step == 1


def test_sync_mode_is_set_before_the_state() -> None:
    replica = outer_replica()
    with pytest.raises(ValueError, match="before the replica holds a state"):
        replica.set_outer(None)


@pytest.mark.parametrize(
    ("n", "overlap", "sync"),
    [(4, 0.0, 4), (4, 0.5, 2), (4, 1.0, 0), (3, 0.5, 2), (7, 0.3, 5), (1, 0.99, 1)],
)
def test_sync_step_leaves_floor_n_times_overlap_steps_beside_the_exchange(
    n: int, overlap: float, sync: int
) -> None:
    assert inner.sync_step(n, overlap) == sync


def _manual_steps(state: training.TrainState, rows: list[list[inner.Rows]]) -> None:
    """The inner steps the plain way: one train_step per single-piece step."""
    for [(x, y)] in rows:
        training.train_step(state, x, y, with_hash=False)


def test_overlap_measures_the_round_at_its_sync_step_and_carries_the_rest() -> None:
    """overlap 0.5 over 4 inner steps: the chunks are W minus the weights after 2 steps, handed
    over before step 3 runs; the carry is what steps 3 and 4 added; the next round starts from
    the new outer weights plus the carry. Checked against the same steps taken one by one."""
    replica = outer_replica()
    assert replica.outer is not None and replica.state is not None
    tokens, _, _ = corpus()
    rows = [[batches.sample_batch(tokens, 1, 32, 7, j, 0)] for j in range(4)]
    outer_w = {k: w.copy() for k, w in replica.outer.params.items()}
    blocks = codec.n_blocks(sum(w.size for w in outer_w.values()))
    heard: list[tuple[int, int]] = []
    work = replica.inner_start()

    def on_chunk(k: int, payload: bytes) -> None:
        heard.append((k, work.opt_state.step))  # the steps taken when the chunk left

    done = inner.inner_round(work, outer_w, rows, (1,), 0.5, None, on_chunk)
    assert heard == [(0, 2)] and done.opt.step == 4
    # The same steps one by one.
    manual = replica.inner_start()
    _manual_steps(manual, rows[:2])
    at_sync = {k: w.copy() for k, w in manual.params.items()}
    _manual_steps(manual, rows[2:])
    assert done.payloads == inner.chunk_payloads(pseudo_gradient(outer_w, at_sync), (1,), blocks)
    assert done.carry is not None
    for k, c in done.carry.items():
        assert np.array_equal(c, manual.params[k] - at_sync[k]), k
    # Without overlap: measured after the last step, no carry, the plain round's bytes.
    plain = inner.inner_round(replica.inner_start(), outer_w, rows, (1,))
    assert plain.carry is None
    assert plain.payloads == inner.chunk_payloads(
        pseudo_gradient(outer_w, manual.params), (1,), blocks
    )
    # Applied: the next round starts from W' + carry, one float32 addition per element.
    mean = codec.decode(done.payloads[0], blocks)
    replica.apply(mean)
    replica.adopt_inner(done.opt, done.carry)
    assert replica.carry is done.carry
    nxt = replica.inner_start()
    seen: list[dict[str, np.ndarray]] = []

    def grab(k: int, p: bytes) -> None:
        seen.append({n: w.copy() for n, w in nxt.params.items()})

    inner.inner_round(nxt, replica.outer.params, rows[:1], (1,), 1.0, replica.carry, grab)
    [start] = seen  # overlap 1: measured before any step, i.e. at the round's start
    for k, w in replica.outer.params.items():
        assert np.array_equal(start[k], w + done.carry[k]), k
    # A new state (a restore, a sync) starts without a carry.
    replica.set_state(replica.state, replica.outer)
    assert replica.carry is None
