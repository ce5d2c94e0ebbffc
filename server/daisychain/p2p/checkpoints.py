"""Checkpoints of a training peer: the state sync that lets a peer join a running group (it
asks the leader, which sends its state at the next step boundary) and saves to disk."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from daisychain import checkpoint, safetensors_io
from daisychain.p2p import frames, messages
from daisychain.p2p.frames import FrameKind

if TYPE_CHECKING:
    from daisychain.p2p.node import Node

log = logging.getLogger("daisychain.p2p.node")


def request_sync(node: Node) -> None:
    """Ask the leader for its state once this peer has channels to the whole roster (it
    enters the roster that follows the checkpoint and must reach every member)."""
    if node.config is None or node.leader is None or node.is_leader:
        return
    if not node.awaiting_checkpoint:
        node.want_sync = True
    follower_advance(node)


def follower_advance(node: Node) -> None:
    if not node.want_sync or node.config is None or node.leader is None or node.is_leader:
        return
    needed = set(node.roster.peers) if node.roster is not None else {node.leader}
    if not needed - node.gone - {node.id} <= node.greeted:
        return
    log.info("%s: asking %s for the state", node.name, node.leader)
    node.want_sync = False
    node.awaiting_checkpoint = True
    node._send(node.leader, messages.SyncRequest(node.config.run))


def on_checkpoint(node: Node, peer: str, p: frames.Payload) -> None:
    if peer != node.leader or not node.awaiting_checkpoint:
        return
    try:
        tensors, meta = safetensors_io.decode(p.data, f"checkpoint from {peer}")
        ck = checkpoint.from_parts(
            tensors, meta, f"checkpoint from {peer}", node.tokenizer_sha256, node.vocab_size
        )
    except (safetensors_io.CheckpointFormatError, checkpoint.CheckpointError) as exc:
        node._stop("error", f"the leader's checkpoint was refused: {exc}")
        return
    node.awaiting_checkpoint = False
    node._set_state(ck.state)
    log.info("%s: synced to step %d (%s)", node.name, ck.step, node.my_hash[:12])
    # The leader commits the next roster right after the checkpoint (same ordered channel).


def serve_syncs(node: Node) -> list[str]:
    """Leader at a step boundary: send the state to every peer that asked; they may enter
    the next roster if they have channels to everyone in it."""
    assert node.state is not None
    if not node.sync_wanted:
        return []
    blob = checkpoint.encode(node.state, node.tokenizer_sha256)
    served = []
    for peer in sorted(node.sync_wanted):
        if peer in node.gone or peer not in node.greeted:
            continue
        node._send_payload(peer, FrameKind.CHECKPOINT, blob, node.state.step)
        served.append(peer)
    node.sync_wanted.clear()
    return served


def save(node: Node, path: str) -> None:
    assert node.state is not None
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.save(target, node.state, node.tokenizer_sha256)
    node.saved.append(f"{target}@{node.state.step}")
    node._saved_step = node.state.step
    log.info("%s: saved %s at step %d", node.name, target, node.state.step)


def maybe_save(node: Node) -> None:
    state = node.state
    if state is None or not node.checkpoint_path:
        return
    asked = state.step in node.save_at
    node.save_at.discard(state.step)
    periodic = node.save_every > 0 and state.step % node.save_every == 0
    if asked or periodic:
        save(node, node.checkpoint_path)
