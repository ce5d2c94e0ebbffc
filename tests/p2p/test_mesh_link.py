"""A message that reaches a link before its channel says "open" is kept, not dropped.

aiortc emits a channel's messages even while it is still "connecting" (the answering side may
send once it has our DATA_CHANNEL_OPEN; its ACK can come later). That order cannot be forced
with two real stacks on loopback, so a pyee emitter stands in for the aiortc channel here: it
is the same event interface aiortc's RTCDataChannel has (it is one), driven in that order.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from pyee.asyncio import AsyncIOEventEmitter

from daisychain.p2p.mesh import (
    HISTORY_MESSAGES,
    ChannelClosed,
    ChannelMessage,
    ChannelOpen,
    Link,
    LinkState,
    Mesh,
)


class _Channel(AsyncIOEventEmitter):
    def __init__(self) -> None:
        super().__init__()
        self.readyState = "connecting"
        self.bufferedAmount = 0
        self.bufferedAmountLowThreshold = 0
        self.sent: list[str | bytes] = []

    def send(self, data: str | bytes) -> None:
        assert self.readyState == "open", "aiortc refuses a send before open"
        self.sent.append(data)


def _link() -> tuple[Link, _Channel, asyncio.Queue[Any]]:
    events: asyncio.Queue[Any] = asyncio.Queue()
    mesh = SimpleNamespace(events=events, name="me")
    link = Link(cast(Any, mesh), "other", cast(Any, None))
    channel = _Channel()
    link.attach(cast(Any, channel))
    return link, channel, events


def _drain(events: asyncio.Queue[Any]) -> list[Any]:
    out = []
    while not events.empty():
        out.append(events.get_nowait())
    return out


async def test_hello_before_the_ack_arrives_after_channel_open_in_order() -> None:
    link, channel, events = _link()
    channel.emit("message", '{"type":"hello"}')
    channel.emit("message", '{"type":"config"}')
    assert _drain(events) == [] and link.state is LinkState.CONNECTING
    channel.readyState = "open"
    channel.emit("open")
    assert _drain(events) == [
        ChannelOpen("other"),
        ChannelMessage("other", '{"type":"hello"}'),
        ChannelMessage("other", '{"type":"config"}'),
    ]
    channel.emit("message", b"frame")
    assert _drain(events) == [ChannelMessage("other", b"frame")]
    link.set_state(LinkState.CLOSED)


async def test_early_messages_of_a_channel_that_closes_are_not_delivered() -> None:
    link, channel, events = _link()
    channel.emit("message", '{"type":"hello"}')
    channel.emit("close")
    assert _drain(events) == [ChannelClosed("other")]
    assert link.early == []
    channel.emit("message", "late")
    assert _drain(events) == []


async def test_a_link_keeps_how_it_came_up_for_the_log_of_a_refusal() -> None:
    """A refusal logs the link's history (node.py, on ``Close``): whether the refused peer's
    hello ever reached this side, and in which state, is what tells a lost message from a
    message sent out of order."""
    link, channel, _ = _link()
    channel.emit("message", '{"type":"hello","version":3,"name":"a browser tab"}')
    channel.readyState = "open"
    channel.emit("open")
    for i in range(6):
        channel.emit("message", f'{{"type":"m{i}"}}')
    entries = link.history
    assert entries[0].endswith("channel attached (connecting)")
    assert entries[1].endswith(
        """connecting: received '{"type":"hello","version":3,"name":"a br'"""
    )
    assert entries[2].endswith("connecting -> open")
    assert sum("received" in e for e in entries) == HISTORY_MESSAGES
    assert link.received == 7
    mesh = Mesh("http://127.0.0.1:9", name="me")
    mesh._links["other"] = link
    assert mesh.history("other").endswith("(7 messages in all)")
    assert mesh.history("nobody") == "no link"


async def test_a_send_meant_for_an_older_link_never_reaches_the_new_one_before_hello() -> None:
    """A reconnect makes a new link to the same peer while the shell still acts on what its
    machine knew of the old one: a frame sent then would reach the new link ahead of the
    machine's ``hello`` (refused there: "binary frame before hello", seen once with 16
    headless peers). A send names the link its machine was told of; any other is dropped."""
    events: asyncio.Queue[Any] = asyncio.Queue()
    mesh = Mesh("http://127.0.0.1:9", name="me")
    mesh.events = events
    old = Link(mesh, "other", cast(Any, None), generation=1)
    old_channel = _Channel()
    old.attach(cast(Any, old_channel))
    old_channel.readyState = "open"
    old_channel.emit("open")
    mesh._links["other"] = old
    assert _drain(events) == [ChannelOpen("other", 1)]
    assert mesh.send("other", b"chunk for link 1", generation=1)
    old.set_state(LinkState.CLOSED)
    new = Link(mesh, "other", cast(Any, None), generation=2)
    new_channel = _Channel()
    new.attach(cast(Any, new_channel))
    new_channel.readyState = "open"
    new_channel.emit("open")
    mesh._links["other"] = new
    # The machine has not handled the new ChannelOpen yet: it still sends as to link 1.
    assert not mesh.send("other", b"late chunk for link 1", generation=1)
    assert mesh.send("other", '{"type":"hello"}', generation=2)
    assert mesh.send("other", b"chunk for link 2", generation=2)
    assert mesh.send("other", b"a send that names no link goes to the open one")
    await asyncio.sleep(0.05)  # the link's writer hands the queue to the channel
    assert new_channel.sent == [
        '{"type":"hello"}',
        b"chunk for link 2",
        b"a send that names no link goes to the open one",
    ]
    assert ChannelOpen("other", 2) in _drain(events)
    new.set_state(LinkState.CLOSED)
