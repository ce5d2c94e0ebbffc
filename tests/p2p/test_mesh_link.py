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

from daisychain.p2p.mesh import ChannelClosed, ChannelMessage, ChannelOpen, Link, LinkState


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
