"""The sync guard of a training peer: after every step each peer publishes its state hash and
its kernel probe; a hash that differs from the others' or a probe that differs from the
reference's stops the run as a fork (docs/PROTOCOL.md, "Sync guard")."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from daisychain.p2p import messages, run

if TYPE_CHECKING:
    from daisychain.p2p.exchange import Key
    from daisychain.p2p.node import Node

log = logging.getLogger("daisychain.p2p.node")


def on_hash(node: Node, peer: str, m: messages.StepHash) -> None:
    key = (m.step, m.round)
    check_probe(node, peer, m.step, m.probe, m.backend)
    node.hashes.setdefault(key, {})[peer] = m.hash
    for old in [k for k in node.hashes if k[0] <= m.step - run.HISTORY_STEPS]:
        del node.hashes[old]
    check_guard(node, key)


def check_probe(node: Node, peer: str, step: int, probe: str, backend: str) -> None:
    """Every device's kernel probe equals the reference's: a device whose kernel computes
    other bits is named with its backend (its weights would fork next)."""
    if probe == node.reference_probe:
        return
    who = "this peer" if peer == node.id else "peer"
    message = (
        f"kernel probe mismatch after step {step}: {who} {peer} (backend {backend}) "
        f"published {probe[:16]}..., every device must publish {node.reference_probe[:16]}"
        f"...; restart {peer} with --backend numpy"
    )
    log.error("%s: SYNC GUARD: %s", node.name, message)
    node._stop("fork", message, {peer: probe})


def check_guard(node: Node, key: Key) -> None:
    have = node.hashes.get(key, {})
    if node.id not in have:
        return
    report = run.sync_guard(key[0], have)
    if report is not None:
        log.error("%s: SYNC GUARD: %s", node.name, report.describe())
        node._stop("fork", report.describe(), report.hashes)


def agreement(node: Node, step: int) -> tuple[int, int]:
    """(peers whose hash of ``step`` equals ours, peers that reported one)."""
    for (s, _r), have in node.hashes.items():
        if s == step and node.id in have:
            mine = have[node.id]
            return sum(1 for h in have.values() if h == mine), len(have)
    return (0, 0)
