"""Rosters at a training peer (docs/PROTOCOL.md, "Rosters"): accepting the roster the leader
committed (which starts this peer's attempt at the step), and the leader's decisions,
re-evaluated after every event, that commit the next one: the first roster, the next step at
a boundary (with the peers that synced in), or the same step again without the peers whose
pieces never arrived."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from daisychain.p2p import checkpoints, exchange, messages, run
from daisychain.p2p.run import CommittedRoster, Phase

if TYPE_CHECKING:
    from daisychain.p2p.node import Node

log = logging.getLogger("daisychain.p2p.node")


def on_roster(node: Node, peer: str, m: messages.Roster) -> None:
    if peer != node.leader:
        # A roster from someone we do not consider leader: our view of who left may lag
        # behind the sender's. Hold it; if the successor rule later names the sender, it
        # is applied then.
        log.info("%s: roster from %s held (leader is %s)", node.name, peer, node.leader)
        node.held_rosters[peer] = CommittedRoster(m.step, m.round, tuple(m.peers))
        return
    accept_roster(node, CommittedRoster(m.step, m.round, tuple(m.peers)))


def accept_roster(node: Node, r: CommittedRoster) -> None:
    assert node.state is not None
    node.roster = r
    if node.phase.phase is Phase.CONFIGURED:
        node.phase.transition(Phase.TRAINING, f"roster of step {r.step}")
    if node.id not in r.peers:
        if node.state.step != r.step - 1 or not node.is_leader:
            checkpoints.request_sync(node)
        return
    if node.state.step != r.step - 1:
        if node.state.step < r.step - 1 or (r.step, r.round) not in node.work:
            checkpoints.request_sync(node)
        return
    now = time.monotonic()
    w = exchange.Work(r, node.id, node.total_blocks, now)
    w.repair_at = now + node.timers.repair_after_s
    w.deadline = now + node.timers.step_timeout_s
    node.work[w.key] = w
    for old in [k for k in node.work if k[0] <= r.step - run.HISTORY_STEPS]:
        del node.work[old]
    for old in [k for k in node.early if k[0] < r.step]:
        del node.early[old]
    exchange.start_compute(node, w)
    for sender, payload in node.early.pop(w.key, []):
        node._on_payload(sender, payload)


def advance(node: Node) -> None:
    """The leader's decisions, re-evaluated after every event."""
    checkpoints.follower_advance(node)
    if not node.is_leader or node.state is None or node.config is None:
        return
    if node.phase.phase is Phase.CONFIGURED:
        _leader_start(node)
        return
    if node.phase.phase is not Phase.TRAINING or node.roster is None:
        return
    r = node.roster
    w = node.work.get((r.step, r.round))
    now = time.monotonic()
    alive = [p for p in r.peers if p not in node.gone]
    if w is not None and w.applied:
        have = node.hashes.get(w.key, {})
        if not all(p in have for p in alive) and now < w.deadline:
            return
        _boundary(node, [p for p in alive if have.get(p) == node.my_hash])
        return
    if w is not None and now < w.deadline:
        return
    # The attempt cannot complete: re-commit the step without the peers that vanished or
    # whose pieces never arrived (at the leader or at any peer that reported).
    drop = set(node.gone) | node.missing_reports.get((r.step, r.round), set())
    if w is not None:
        drop |= w.missing_from()
    drop.discard(node.id)
    peers = run.make_roster([p for p in r.peers if p not in drop] + [node.id])
    log.warning(
        "%s: step %d round %d incomplete; dropping %s", node.name, r.step, r.round,
        sorted(drop & set(r.peers)),
    )  # fmt: skip
    _commit(node, r.step, r.round + 1, peers)


def _eligible(node: Node) -> list[str]:
    assert node.state is not None
    return [
        p
        for p, rd in node.ready.items()
        if p not in node.gone and rd.step == node.state.step and rd.hash == node.my_hash
    ]


def _leader_start(node: Node) -> None:
    lead = node.lead
    assert node.state is not None and node.config is not None
    served = checkpoints.serve_syncs(node)
    for peer in served:
        node.ready[peer] = messages.Ready(node.config.run, node.state.step, node.my_hash, [])
    candidates = [node.id, *_eligible(node)]
    need = lead.min_peers if lead is not None else 1
    if len(candidates) < need:
        return
    _commit(node, node.state.step + 1, 0, run.make_roster(candidates))


def _boundary(node: Node, continuing: list[str]) -> None:
    """Step ``state.step`` is complete: stop, or commit the next roster."""
    assert node.state is not None and node.config is not None
    step = node.state.step
    if step >= node.config.steps:
        node._stop("done", f"reached step {step}")
    if node.end_requested:
        node._stop("leader-request", f"{node.end_requested} at step {step}")
    joiners = checkpoints.serve_syncs(node)
    for peer in _eligible(node):
        joiners.append(peer)
    node.ready.clear()
    peers = run.make_roster({*continuing, *joiners, node.id})
    _commit(node, step + 1, 0, peers)


def _commit(node: Node, step: int, rnd: int, peers: tuple[str, ...]) -> None:
    assert node.config is not None
    if rnd > 255:
        node._stop("error", f"step {step} failed 256 times")
    node._broadcast(messages.Roster(node.config.run, step, rnd, list(peers)))
    log.info("%s: roster step %d round %d: %s", node.name, step, rnd, ", ".join(peers))
    accept_roster(node, CommittedRoster(step, rnd, peers))
