"""Outer runs over real channels (issue 21, Must show 3; docs/PROTOCOL.md, "Outer runs"):
headless peers train DiLoCo-style rounds with identical hashes after every outer step, a peer
joins between rounds, a peer is lost in the middle of a round's exchange, and the group's outer
weights are the ones a one-process computation with ``daisychain.outer`` gives."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from daisychain import batches, training
from daisychain.model.config import preset
from daisychain.model.params import param_shapes
from daisychain.optim import AdamWConfig
from daisychain.outer import Compression, OuterConfig, init_outer, outer_hash, outer_round
from daisychain.p2p import inner, shares
from daisychain.p2p.machine.effects import SendPayload
from daisychain.p2p.node import Node
from daisychain.wire import codec
from daisychain.wire.frames import FrameKind
from mesh_helpers import (
    TEST_BATCH,
    TEST_SEQ,
    Faults,
    Peer,
    PeerProcess,
    assert_identical,
    corpus,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)

pytestmark = needs_namespace

H = 3
OUTER: dict[str, Any] = {"sync": "outer", "outer_steps": H, "outer_lr": 0.7, "outer_momentum": 0.9}
LONG = 500  # rounds: the test ends the run itself once it has seen what it needs


def expected_first_round(peers: int, share: int, overlap: float = 0.0, cut: str = "share") -> str:
    """The outer hash after round 1 computed in one process with daisychain.outer: peer k
    (equal shares of ``share`` sequences: lanes share*k .., one sequence each at the tests'
    batch of 1), with a fresh optimizer, on its lanes of batch indices 0 .. H-1: cut "share",
    H inner AdamW steps of its lanes' mean gradient; cut "batch", one inner step per sequence
    (steps of the run's batch), in order; then the int8 round with token weights (3 sequences
    each: the gcd rule of outer.mean is not the per-step exchange's). With ``overlap`` each
    peer's contribution is measured after ``inner.sync_step`` of its inner steps (the rest
    only shape the next round, through the carry)."""
    assert TEST_BATCH == 1
    tokens, _, vocab = corpus()
    lead = lead_config()
    cfg = preset("tiny", vocab_size=vocab, batch=TEST_BATCH, seq_len=TEST_SEQ)
    start = training.init(cfg, AdamWConfig(lr=lead.lr, warmup_steps=0), lead.seed)
    local = []
    counted = inner.sync_step(H * share if cut == "batch" else H, overlap)
    for k in range(peers):
        state = training.init(cfg, start.opt_cfg, lead.seed)
        steps = [
            [batches.sample_batch(tokens, cfg.batch, cfg.seq_len, lead.seed, j, lane)
             for lane in range(share * k, share * (k + 1))]
            for j in range(H)
        ]  # fmt: skip
        if cut == "batch":
            steps = [[row] for rows in steps for row in rows]
        for rows in steps[:counted]:
            _, flat = training.mean_gradient(state, rows, len(rows))
            assert flat is not None
            training.apply_grads(state, codec.unflatten(flat, param_shapes(cfg)))
        local.append(state.params)
    outer = init_outer(start.params)
    how = Compression.parse("int8")
    tokens_each = [share * H * TEST_SEQ] * peers
    result = outer_round(outer, OuterConfig(H, 0.7, 0.9), how, local, tokens_each, [None] * peers)
    assert result.hash == outer_hash(outer)
    return result.hash


def expected_overlap_rounds(
    peers: int, share: int, overlap: float, rounds: int, cut: str
) -> list[str]:
    """The outer hashes of ``rounds`` rounds with overlap, in one process: each peer's round
    through ``inner.inner_round`` (its own AdamW state and carry kept from round to round), its
    contribution the weights ``inner_round`` measured (seen when its chunks are handed over),
    then ``daisychain.outer``'s int8 round. What the node adds is the plumbing checked here: the
    carry and the inner state adopted on apply, the measured chunks sent."""
    tokens, _, vocab = corpus()
    lead = lead_config()
    cfg = preset("tiny", vocab_size=vocab, batch=TEST_BATCH, seq_len=TEST_SEQ)
    start = training.init(cfg, AdamWConfig(lr=lead.lr, warmup_steps=0), lead.seed)
    outer = init_outer({k: w.copy() for k, w in start.params.items()})
    states = [training.init(cfg, start.opt_cfg, lead.seed) for _ in range(peers)]
    carries: list[Any] = [None] * peers
    hashes = []
    for s in range(1, rounds + 1):
        local = []
        for k, state in enumerate(states):
            state.params = {n: w.copy() for n, w in outer.params.items()}
            plan = shares.round_steps(inner.round_indices(s, H), share * k, share, cfg.batch, cut)
            rows = []
            for step in plan:
                pieces = []
                for p in step:
                    x, y = batches.sample_batch(
                        tokens, cfg.batch, cfg.seq_len, lead.seed, p.index, p.lane
                    )
                    pieces.append((x[p.row : p.row + p.rows], y[p.row : p.row + p.rows]))
                rows.append(pieces)
            seen: dict[str, Any] = {}

            def grab(_k: int, _payload: bytes, state: Any = state, seen: Any = seen) -> None:
                seen.setdefault("w", {n: w.copy() for n, w in state.params.items()})

            done = inner.inner_round(
                state, outer.params, rows, [share] * peers, overlap, carries[k], grab
            )
            state.opt_state, carries[k] = done.opt, done.carry
            local.append(seen["w"])
        how = Compression.parse("int8")
        tokens_each = [share * H * TEST_SEQ] * peers
        result = outer_round(
            outer, OuterConfig(H, 0.7, 0.9), how, local, tokens_each, [None] * peers
        )
        hashes.append(result.hash)
    return hashes


async def test_three_peers_outer_rounds_identical_and_right_then_a_join() -> None:
    async with signaling_server() as url:
        lead = lead_config(steps=LONG, global_batch=9, **OUTER)
        leader = await start_peer(url, "lead", lead=lead)
        a = await start_peer(url, "a")
        b = await start_peer(url, "b")
        await wait_for(lambda: len(b.records) >= 3, 180, "3 rounds on b")
        late = await start_peer(url, "late")
        await wait_for(lambda: len(late.records) >= 2, 180, "2 rounds on the late peer")
        leader.node.end_run("the test is over")
        outcomes = await finish([leader, a, b, late], timeout=180)
    assert [o.reason for o in outcomes] == ["leader-request"] * 4, outcomes
    peers = [leader, a, b, late]
    last = max(leader.hashes)
    assert_identical(peers, range(1, last + 1))
    # Every replica holds the same bits AND the right ones: round 1 of the 3 founders is what
    # daisychain.outer computes in one process from the same batches.
    first = leader.records[0]
    assert first.step == 1 and first.inner_steps == H and len(first.roster) == 3
    assert first.shares == (3, 3, 3)
    assert first.hash == expected_first_round(3, 3)
    # The group's round: its share of H batch indices at every peer.
    assert first.tokens == 9 * TEST_SEQ * H
    # The joiner synced at a round boundary (outer weights and momentum) and computed from its
    # first round on, in the roster, with the others' hashes.
    joined = min(late.hashes)
    assert 2 <= joined <= last and late.node.id in late.records[0].roster
    assert late.node.replica.outer is not None and late.node.replica.outer.step == last
    # Its inner optimizer is its own (fresh at the join): H steps a round since it joined.
    assert late.node.state is not None and leader.node.state is not None
    assert late.node.state.opt_state.step == H * len(late.records)
    assert leader.node.state.opt_state.step == H * last
    # Not a per-step run in disguise: the outer momentum is live.
    momentum = leader.node.replica.outer.momentum  # type: ignore[union-attr]
    assert any(np.any(m != 0) for m in momentum.values())


async def test_overlap_sends_each_round_at_its_sync_step_with_identical_replicas() -> None:
    """overlap 0.5 with rounds cut by the batch (one sequence per inner step here): each peer's
    round of 9 inner steps is measured after 5 and its chunks leave then (bytes sent early), the
    other 4 run beside the exchange; every round's outer hash is identical at every peer, and is
    daisychain.outer's in one process from the contributions measured after 5 steps (round 1),
    carries included (later rounds)."""
    rounds = 4
    async with signaling_server() as url:
        lead = lead_config(
            steps=rounds, global_batch=9, **OUTER, outer_overlap=0.5, outer_cut="batch"
        )
        leader = await start_peer(url, "lead", lead=lead)
        a = await start_peer(url, "a")
        b = await start_peer(url, "b")
        outcomes = await finish([leader, a, b], timeout=240)
    assert [o.reason for o in outcomes] == ["done"] * 3, outcomes
    assert_identical([leader, a, b], range(1, rounds + 1))
    assert inner.sync_step(9, 0.5) == 5
    assert leader.records[0].shares == (3, 3, 3)
    assert leader.hashes[1] == expected_first_round(3, 3, overlap=0.5, cut="batch")
    assert leader.hashes[1] != expected_first_round(3, 3, cut="batch")
    # Every round, carry included, is the one-process group's.
    want = expected_overlap_rounds(3, 3, 0.5, rounds, "batch")
    assert [leader.hashes[s] for s in range(1, rounds + 1)] == want
    # The chunks left at the sync step, while the remaining inner steps ran.
    for p in (leader, a, b):
        assert all(r.bytes_early > 0 for r in p.records), [r.bytes_early for r in p.records]
    # The carry: every peer holds its own after the last round.
    assert all(p.node.replica.carry is not None for p in (leader, a, b))


class VanishingNode(Node):
    """Closes its whole mesh instead of sending its first contribution of outer step
    ``vanish_at``: a peer lost in the middle of a round's exchange (its inner steps done, its
    pseudo-gradient never delivered)."""

    vanish_at = 0
    vanished = False

    def send_payload(self, effect: SendPayload) -> int:
        if effect.kind is FrameKind.CONTRIBUTION and effect.step == self.vanish_at:
            self.vanished = True
            asyncio.get_running_loop().create_task(self.mesh.close())
        if self.vanished:
            return 0  # nothing more leaves: the peer is gone
        return super().send_payload(effect)


async def test_peer_lost_mid_exchange_the_others_finish_the_round_identically() -> None:
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=LONG, **OUTER))
        a = await start_peer(url, "a")
        victim = await start_peer(url, "victim")
        victim.node.__class__ = VanishingNode
        await wait_for(lambda: len(victim.records) >= 2, 180, "2 rounds on the victim")
        lost_at = max(victim.hashes) + 2
        victim.node.vanish_at = lost_at  # type: ignore[attr-defined]
        await wait_for(lambda: len(leader.records) >= lost_at + 2, 240, "2 rounds after the loss")
        leader.node.end_run("the test is over")
        outcomes = await finish([leader, a], timeout=180)
        victim.task.cancel()
        await asyncio.gather(victim.task, return_exceptions=True)
    assert [o.reason for o in outcomes] == ["leader-request"] * 2, outcomes
    survivors: list[Peer] = [leader, a]
    last = max(leader.hashes)
    assert_identical(survivors, range(1, last + 1))
    assert_identical([*survivors, victim], range(1, lost_at))
    lost = {r.step: r for r in leader.records}[lost_at]
    assert victim.node.id not in lost.roster and len(lost.roster) == 2, lost
    assert lost.round >= 1, "the lost round was re-decided without the victim"
    assert victim.node.vanished  # type: ignore[attr-defined]
    assert all(len(r.roster) == 2 for r in leader.records if r.step > lost_at)


async def test_a_forged_reduced_chunk_in_an_outer_round_is_stopped_by_the_sync_guard() -> None:
    """The outer hash is what the guard compares: one value of one reduced chunk changed (a
    valid frame) forks the outer weights, and the run stops at that round."""
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=6, **OUTER))
        forger = await start_peer(url, "a", faults=Faults(fork_reduced_at=2))
        peers = [leader, forger, await start_peer(url, "b")]
        outcomes = await finish(peers, timeout=180)
    assert {o.reason for o in outcomes} == {"fork"}, outcomes
    report = next(o for o in outcomes if o.hashes)
    assert "diverged after step 2" in report.message
    assert len(set(report.hashes.values())) == 2
    assert max(max(p.hashes) for p in peers) == 2, "nobody trained past the fork"


async def test_headless_peer_cli_leads_an_outer_run() -> None:
    """``python -m daisychain.peer --lead --sync outer --outer-steps H``: the step events name
    the inner steps and the bytes sent per token, and both processes end with one hash."""
    rounds = 3
    async with signaling_server() as url:
        common = ["--batch", "1", "--seq-len", "32", "--seed", "7"]
        procs = [
            PeerProcess(url, "lead", "--lead", "--steps", str(rounds), "--min-peers", "2",
                        "--sync", "outer", "--outer-steps", str(H), "--shares-by", "equal",
                        *common),
            PeerProcess(url, "f0"),
        ]  # fmt: skip
        try:
            codes = await asyncio.gather(*(p.wait(180) for p in procs))
        finally:
            for p in procs:
                p.close()
    assert list(codes) == [0, 0], [p.stderr()[-2000:] for p in procs]
    lead, other = procs
    assert lead.steps == list(range(1, rounds + 1)) and other.steps == lead.steps
    assert lead.hashes == other.hashes
    steps = [d for d in lead.lines if d.get("event") == "step"]
    assert all(d["inner_steps"] == H for d in steps), steps
    # One int8 payload's worth each way per round over H inner steps of 1 x 32 tokens.
    assert all(0 < d["bytes_per_token"] < 2 * 257 * 914 / (H * 32) for d in steps), steps


async def test_leader_leaving_an_outer_run_its_successor_leads_to_the_end() -> None:
    """The leader leaves after round 2: the first remaining roster peer leads, the others keep
    their outer state and their own inner optimizers, and the run ends done with one hash."""
    rounds = 6
    async with signaling_server() as url:
        leader = await start_peer(url, "lead", lead=lead_config(steps=rounds, **OUTER))
        a = await start_peer(url, "a")
        b = await start_peer(url, "b")
        await wait_for(lambda: len(leader.records) >= 2, 180, "round 2 on the leader")
        leader.node.shutdown("the test's leader leaves")
        outcomes = await finish([a, b], timeout=240)
        await asyncio.gather(leader.task, return_exceptions=True)
    assert [o.reason for o in outcomes] == ["done", "done"], outcomes
    assert max(a.hashes) == max(b.hashes) == rounds
    assert_identical([leader, a, b], range(1, rounds + 1))
    assert a.records[-1].leader != leader.node.id and len(a.records[-1].roster) == 2
    # Neither survivor was re-synced: their inner optimizers took H steps in every round.
    for p in (a, b):
        assert p.node.state is not None and p.node.state.opt_state.step == H * rounds


async def test_a_leader_with_a_wrong_outer_loop_stops_with_the_rule_and_hint() -> None:
    """--sync outer --outer-steps 0 never reaches a follower: the leader's own validation
    refuses it with the rule's reason and hint."""
    async with signaling_server() as url:
        wrong = dict(OUTER, outer_steps=0)
        leader = await start_peer(url, "lead", lead=lead_config(steps=5, min_peers=1, **wrong))
        (outcome,) = await finish([leader], timeout=60)
    assert outcome.reason == "error" and outcome.code == "incompatible", outcome
    assert "outer.steps" in outcome.message and "--outer-steps" in outcome.message, outcome
    assert not leader.records
