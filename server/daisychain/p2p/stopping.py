"""How a training peer's run ends (docs/PROTOCOL.md, "Stopping").

A stop is final: the peer that stops announces it, every peer repeats it to every open channel
(its acknowledgement), and a stopping peer keeps its channels open until every peer has
acknowledged, so that no peer learns that another left before it learns that the run is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn

from daisychain.p2p import checkpoints, messages
from daisychain.p2p.mesh import ChannelClosed, ChannelMessage, PeerLeft
from daisychain.p2p.run import Phase

if TYPE_CHECKING:
    from daisychain.p2p.node import Node

log = logging.getLogger("daisychain.p2p.node")


@dataclass(frozen=True)
class Outcome:
    """How the run ended for this peer."""

    reason: str  # done | fork | error | left | leader-request
    step: int
    hash: str
    message: str
    hashes: dict[str, str] = field(default_factory=dict)
    code: str = ""  # machine-readable cause for errors (version-mismatch, ...)


class StopRun(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.message)
        self.outcome = outcome


def from_gone(node: Node, peer: str, data: str | bytes) -> None:
    """A peer this one already dropped (it left, the server said so, or it was rejected)
    can still have messages in flight. Only one is acted on: a `stop` of this run is final
    and wins over the failover that its sender's departure started."""
    if peer not in node.greeted or node.config is None or not isinstance(data, str):
        return
    try:
        m = messages.parse(data)
    except messages.MessageError:
        return
    if isinstance(m, messages.Stop) and m.run == node.config.run:
        log.info("%s: stop from %s, which already left: the run is over", node.name, peer)
        on_stop(node, peer, m)


def on_stop(node: Node, peer: str, m: messages.Stop) -> NoReturn:
    node.final_stop = m
    node.stop_from.add(peer)
    raise StopRun(Outcome(m.reason, m.step, node.my_hash, m.message, m.hashes))


async def finish(node: Node, outcome: Outcome) -> None:
    """Stopped: announce the stop, save, and keep the channels open until every peer has
    acknowledged it (docs/PROTOCOL.md, "Stopping"), so that no peer can learn that this
    one left (the server's peer-left) before it learns that the run is over."""
    if node.phase.phase is not Phase.STOPPED:
        node.phase.transition(Phase.STOPPED, outcome.reason)
    stop = node.final_stop
    waiting: set[str] = set()
    if stop is not None:
        # Every peer that stops repeats the stop to every open channel, the sender
        # included: that is its acknowledgement, and it reaches a peer whose channel to the
        # original sender is already gone.
        text = messages.encode(stop)
        for peer in sorted(node.greeted & node.mesh.open_peers()):
            node.mesh.send(peer, text)
        waiting = node.greeted - node.gone - node.stop_from
    # A forked state is never saved; any other ending (done, Ctrl-C, error) keeps the last
    # applied step, which every replica agreed on or will be checked against.
    state = node.state
    unsaved = state is not None and state.step != node._saved_step
    if node.checkpoint_path and unsaved and outcome.reason != "fork":
        checkpoints.save(node, node.checkpoint_path)
    deadline = time.monotonic() + node.timers.linger_s
    while waiting and (left := deadline - time.monotonic()) > 0:
        try:
            event = await asyncio.wait_for(node.inbox.get(), left)
        except TimeoutError:
            break
        if isinstance(event, ChannelClosed | PeerLeft):
            waiting.discard(event.peer)
        elif isinstance(event, ChannelMessage) and isinstance(event.data, str):
            with contextlib.suppress(messages.MessageError):
                if isinstance(messages.parse(event.data), messages.Stop | messages.Leave):
                    waiting.discard(event.peer)
    if waiting:
        log.warning("%s: no stop acknowledgement from %s", node.name, sorted(waiting))
    await node.mesh.drain(node.timers.linger_s)
