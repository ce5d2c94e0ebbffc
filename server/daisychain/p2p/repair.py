"""Gradient repair at a training peer (docs/PROTOCOL.md, "Gradient repair"): a piece damaged in
transit or still missing after ``repair_after_s`` is asked for again; every peer serves the
pieces it sent or reduced for the attempts it still holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from daisychain.p2p import checkpoints, frames, messages
from daisychain.p2p.frames import FrameKind

if TYPE_CHECKING:
    from daisychain.p2p.exchange import Work
    from daisychain.p2p.node import Node


def ask_again(node: Node, peer: str, head: frames.Header) -> None:
    if node.config is None:
        return
    if head.kind is FrameKind.CHECKPOINT:
        checkpoints.request_sync(node)
        return
    piece: messages.Piece = "contribution" if head.kind is FrameKind.CONTRIBUTION else "reduced"
    node._send(
        peer,
        messages.Repair(node.config.run, head.step, head.round, piece, head.chunk),
    )


def on_repair(node: Node, peer: str, m: messages.Repair) -> None:
    w = node.work.get((m.step, m.round))
    if w is None or not 0 <= m.chunk < w.n:
        return
    if m.piece == "contribution":
        if w.computed and m.chunk < len(w.sent) and w.roster.peers[m.chunk] == peer:
            node._send_payload(
                peer, FrameKind.CONTRIBUTION, w.sent[m.chunk], m.step, m.round, m.chunk
            )
    elif m.chunk in w.reduced_payload:
        node._send_payload(
            peer, FrameKind.REDUCED, w.reduced_payload[m.chunk], m.step, m.round, m.chunk
        )


def request_repairs(node: Node, w: Work) -> None:
    assert node.config is not None and w.rank is not None
    step, rnd = w.key
    run_id = node.config.run
    if w.rank not in w.reduced:
        for j, peer in enumerate(w.roster.peers):
            if j not in w.contributions and peer not in node.gone:
                node._send(peer, messages.Repair(run_id, step, rnd, "contribution", w.rank))
    for k in range(w.n):
        if k not in w.reduced:
            # Anyone who applied this attempt holds every reduced chunk: ask them all.
            for peer in w.roster.peers:
                if peer != node.id and peer not in node.gone:
                    node._send(peer, messages.Repair(run_id, step, rnd, "reduced", k))


def on_timer(node: Node, w: Work, now: float) -> None:
    """The current attempt is still incomplete: past ``repair_at``, ask for what is missing
    (and tell the leader whose pieces never arrived)."""
    if now >= w.repair_at:
        w.repair_at = now + node.timers.repair_after_s
        if not w.computed:
            return  # our own gradient is not ready yet: nothing to ask for
        request_repairs(node, w)
        if not node.is_leader and node.leader is not None and node.config is not None:
            step, rnd = w.key
            missing = sorted(w.missing_from())
            node._send(node.leader, messages.Missing(node.config.run, step, rnd, missing))
