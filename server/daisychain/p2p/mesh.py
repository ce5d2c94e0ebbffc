"""The mesh: a signaling client on the server's ``/ws`` and one aiortc data channel per pair.

Who offers: of two peers, the one whose id sorts first (ASCII) creates the peer connection and
the channel and sends the offer; the other answers. Signal payloads (docs/PROTOCOL.md, "Peer
connections") are ``{"kind": "offer"|"answer", "sdp": ...}`` and, from peers that trickle ICE,
``{"kind": "candidate", "candidate": ..., "sdpMid": ..., "sdpMLineIndex": ...}``. aiortc gathers
before it answers, so its own descriptions carry every candidate and it never trickles.

Everything that happens (a channel opens, a message arrives, a channel closes, the server says a
peer left) becomes one ``MeshEvent`` on a queue that the owner of the mesh consumes in order: the
training peer is a single consumer, so it never sees two events at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiortc import (
    RTCConfiguration,
    RTCDataChannel,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.sdp import candidate_from_sdp

from daisychain.p2p.versions import SIGNALING_VERSION

log = logging.getLogger("daisychain.p2p.mesh")

CHANNEL_LABEL = "daisychain"
MAX_SIGNAL_SDP = 60_000
# Flow control (docs/PROTOCOL.md, "Flow control"): a channel is handed the next message only
# while its bufferedAmount is at most HIGH_WATER; above it the writer waits for the channel's
# `bufferedamountlow` event, which fires when the amount falls to LOW_WATER.
HIGH_WATER = 1024 * 1024
LOW_WATER = 256 * 1024

Outgoing = str | bytes | Iterator[bytes]


class MeshError(Exception):
    """Something a user can meet (server unreachable, room denied, version mismatch)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class ChannelOpen:
    peer: str


@dataclass(frozen=True)
class ChannelMessage:
    peer: str
    data: str | bytes


@dataclass(frozen=True)
class ChannelClosed:
    peer: str


@dataclass(frozen=True)
class PeerLeft:
    peer: str


@dataclass(frozen=True)
class SignalingLost:
    reason: str


MeshEvent = ChannelOpen | ChannelMessage | ChannelClosed | PeerLeft | SignalingLost


class LinkState(Enum):
    CONNECTING = "connecting"
    OPEN = "open"
    CLOSED = "closed"


class _Link:
    """One peer connection and its channel; ``set_state`` is the one place the state changes."""

    def __init__(self, mesh: Mesh, peer: str, pc: RTCPeerConnection) -> None:
        self.mesh = mesh
        self.peer = peer
        self.pc = pc
        self.channel: RTCDataChannel | None = None
        self.state = LinkState.CONNECTING
        self.closed = asyncio.Event()
        # What waits to be handed to the channel, in order: messages, and lazy frame
        # iterators (a checkpoint is cut into frames only as fast as the channel drains).
        self.outbox: deque[Outgoing] = deque()
        self.queued = asyncio.Event()
        self.low = asyncio.Event()
        self.writer: asyncio.Task[None] | None = None

    def set_state(self, new: LinkState) -> None:
        old = self.state
        if old is new or old is LinkState.CLOSED:
            return
        self.state = new
        log.debug("%s: link %s %s -> %s", self.mesh.name, self.peer, old.value, new.value)
        if new is LinkState.CLOSED:
            self.closed.set()
            self.outbox.clear()
            if self.writer is not None:
                self.writer.cancel()
        elif new is LinkState.OPEN:
            self.writer = asyncio.ensure_future(self._write())
        event: MeshEvent = (
            ChannelOpen(self.peer) if new is LinkState.OPEN else ChannelClosed(self.peer)
        )
        self.mesh.events.put_nowait(event)

    def enqueue(self, item: Outgoing) -> None:
        self.outbox.append(item)
        self.queued.set()

    def pending(self) -> int:
        """Bytes in the channel's buffer, plus one for every message not yet handed to it."""
        amount = self.channel.bufferedAmount if self.channel is not None else 0
        return amount + len(self.outbox)

    async def _write(self) -> None:
        """Hand queued messages to the channel in order, never beyond HIGH_WATER buffered."""
        channel = self.channel
        assert channel is not None
        try:
            while True:
                while not self.outbox:
                    self.queued.clear()
                    await self.queued.wait()
                item = self.outbox.popleft()
                for data in (item,) if isinstance(item, str | bytes) else item:
                    while channel.bufferedAmount > HIGH_WATER:
                        self.low.clear()
                        await self.low.wait()
                    channel.send(data)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # InvalidStateError/ConnectionError on a dying link
            log.debug("%s: send to %s failed: %r", self.mesh.name, self.peer, exc)
            self.outbox.clear()

    def attach(self, channel: RTCDataChannel) -> None:
        self.channel = channel
        channel.bufferedAmountLowThreshold = LOW_WATER

        @channel.on("bufferedamountlow")
        def on_low() -> None:
            self.low.set()

        @channel.on("message")
        def on_message(data: str | bytes) -> None:
            if self.state is LinkState.OPEN:
                self.mesh.events.put_nowait(ChannelMessage(self.peer, data))

        @channel.on("close")
        def on_close() -> None:
            self.set_state(LinkState.CLOSED)

        if channel.readyState == "open":
            self.set_state(LinkState.OPEN)
        else:

            @channel.on("open")
            def on_open() -> None:
                self.set_state(LinkState.OPEN)


class Mesh:
    """Signaling connection plus data channels to every member of the group."""

    def __init__(
        self,
        server: str,
        *,
        room: str | None = None,
        name: str = "",
        device: dict[str, str | int | float | bool | None] | None = None,
        ice_servers: list[str] | None = None,
        connect_timeout_s: float = 10.0,
        peer_left_grace_s: float = 1.0,
    ) -> None:
        self.server = server.rstrip("/")
        self.room = room
        self.name = name or "peer"
        self.device = device or {"kind": "python"}
        self.ice_servers = ice_servers or []
        self.connect_timeout_s = connect_timeout_s
        # The server's peer-left travels another path than the data channel: what the peer
        # sent just before it left may still be in flight. Its channel gets this long to
        # deliver (or close) before PeerLeft is reported.
        self.peer_left_grace_s = peer_left_grace_s
        self.events: asyncio.Queue[MeshEvent] = asyncio.Queue()
        self.id = ""
        self.role = "member"
        self.auto_approve = False
        self._links: dict[str, _Link] = {}
        self._session: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()

    # -- signaling -----------------------------------------------------------------------------

    def ws_url(self) -> str:
        base = self.server
        if base.startswith("http://"):
            base = "ws://" + base[len("http://") :]
        elif base.startswith("https://"):
            base = "wss://" + base[len("https://") :]
        url = base if base.endswith("/ws") else base + "/ws"
        return url + ("?" + urlencode({"room": self.room}) if self.room else "")

    async def connect(self) -> None:
        """Connect, say hello and wait until admitted; raises MeshError with a hint."""
        self._session = aiohttp.ClientSession()
        url = self.ws_url()
        try:
            self._ws = await self._session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(
                ws_close=5.0), heartbeat=None)  # fmt: skip
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            await self._session.close()
            raise MeshError(
                f"cannot reach the DaisyChain server at {url} ({exc.__class__.__name__}: {exc})",
                "check --server (for example http://HOST:8787) and that the server is running "
                "(python -m daisychain.server)",
            ) from None
        hello: dict[str, Any] = {
            "type": "hello",
            "version": SIGNALING_VERSION,
            "name": self.name[:40],
            "device": self.device,
        }
        await self._ws.send_str(json.dumps(hello))
        while True:
            msg = await self._recv(timeout=None if self.room else self.connect_timeout_s)
            kind = msg.get("type")
            if kind == "welcome":
                self.id = str(msg["id"])
                self.role = str(msg.get("role", "member"))
                for member in msg.get("members", []):
                    self._introduce(str(member["id"]))
                break
            if kind == "pending":
                log.info("%s: waiting for the room's host to approve this peer", self.name)
                print(
                    f"waiting for the host of room {self.room} to approve {self.name!r} ...",
                    flush=True,
                )
                continue
            if kind == "denied":
                raise MeshError(f"room {self.room}: {msg.get('message')}", str(msg.get("hint")))
            if kind == "error":
                code = msg.get("code")
                what = "signaling version mismatch" if code == "version-mismatch" else code
                raise MeshError(f"server refused this peer: {what}: {msg.get('message')}",
                                str(msg.get("hint")))  # fmt: skip
        self._reader = asyncio.create_task(self._read_loop())

    async def _recv(self, timeout: float | None) -> dict[str, Any]:
        assert self._ws is not None
        try:
            msg = await self._ws.receive(timeout=timeout)
        except TimeoutError:
            raise MeshError(
                "the server did not answer hello in time",
                "check that --server points at a DaisyChain server",
            ) from None
        if msg.type is not aiohttp.WSMsgType.TEXT:
            code = self._ws.close_code
            raise MeshError(
                f"the server closed the connection (code {code})",
                "check the server's log; a version mismatch or a full group closes the socket",
            )
        data = json.loads(msg.data)
        if not isinstance(data, dict):
            raise MeshError("the server sent a non-object message", "is --server a DaisyChain?")
        return data

    async def _read_loop(self) -> None:
        assert self._ws is not None
        reason = "server closed the connection"
        try:
            async for msg in self._ws:
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    continue
                try:
                    data = json.loads(msg.data)
                    await self._on_signaling(data)
                except (ValueError, KeyError, TypeError) as exc:
                    log.warning("%s: bad signaling message ignored: %s", self.name, exc)
        except (aiohttp.ClientError, asyncio.CancelledError) as exc:
            reason = f"signaling error: {exc!r}"
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if not self._closing:
                self.events.put_nowait(SignalingLost(reason))

    async def _on_signaling(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "peer-joined":
            self._introduce(str(msg["peer"]["id"]))
        elif kind == "peer-left":
            self._spawn(self._peer_left(str(msg["peer"])))
        elif kind == "signal":
            await self._on_signal(str(msg["from"]), msg["data"])
        elif kind == "join-request":
            peer = str(msg["peer"]["id"])
            verb = "approve" if self.auto_approve else "deny"
            if not self.auto_approve:
                print(
                    f"denied join request from {msg['peer'].get('name')!r}: this headless "
                    "peer approves nobody unless started with --approve all",
                    flush=True,
                )
            await self._send_signaling({"type": verb, "peer": peer})
        elif kind == "host-changed":
            self.role = "host" if msg.get("host") == self.id else "member"
        elif kind == "error":
            log.warning("%s: server error %s: %s", self.name, msg.get("code"), msg.get("message"))

    async def _peer_left(self, peer: str) -> None:
        link = self._links.get(peer)
        if link is not None and link.state is LinkState.OPEN:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.closed.wait(), self.peer_left_grace_s)
        self.events.put_nowait(PeerLeft(peer))
        await self.close_link(peer)

    async def _send_signaling(self, obj: dict[str, Any]) -> None:
        if self._ws is not None and not self._ws.closed:
            await self._ws.send_str(json.dumps(obj))

    # -- peer connections ----------------------------------------------------------------------

    def _configuration(self) -> RTCConfiguration:
        # Never None: aiortc would fall back to a public STUN server (ENVIRONMENT.md).
        return RTCConfiguration(iceServers=[RTCIceServer(urls=u) for u in self.ice_servers])

    def _new_link(self, peer: str) -> _Link:
        pc = RTCPeerConnection(configuration=self._configuration())
        link = _Link(self, peer, pc)
        self._links[peer] = link

        @pc.on("connectionstatechange")
        async def on_state() -> None:
            if pc.connectionState in ("failed", "closed"):
                link.set_state(LinkState.CLOSED)

        return link

    def _introduce(self, peer: str) -> None:
        """A new member: the lower id offers."""
        if peer == self.id or peer in self._links or self.id >= peer:
            return
        link = self._new_link(peer)
        link.attach(link.pc.createDataChannel(CHANNEL_LABEL, ordered=True))
        self._spawn(self._offer(link))

    async def _offer(self, link: _Link) -> None:
        await link.pc.setLocalDescription(await link.pc.createOffer())
        desc = link.pc.localDescription
        await self._send_signaling(
            {"type": "signal", "to": link.peer, "data": {"kind": "offer", "sdp": desc.sdp}}
        )

    async def _on_signal(self, peer: str, data: dict[str, Any]) -> None:
        kind = data.get("kind")
        sdp = data.get("sdp")
        if kind == "offer" and isinstance(sdp, str) and len(sdp) <= MAX_SIGNAL_SDP:
            if peer in self._links:
                return  # a duplicate offer, or glare with our own: keep the first connection
            link = self._new_link(peer)

            @link.pc.on("datachannel")
            def on_channel(channel: RTCDataChannel) -> None:
                if channel.label == CHANNEL_LABEL and link.channel is None:
                    link.attach(channel)

            await link.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
            await link.pc.setLocalDescription(await link.pc.createAnswer())
            answer = {"kind": "answer", "sdp": link.pc.localDescription.sdp}
            await self._send_signaling({"type": "signal", "to": peer, "data": answer})
        elif kind == "answer" and isinstance(sdp, str) and peer in self._links:
            link = self._links[peer]
            if link.pc.signalingState == "have-local-offer":
                await link.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="answer"))
        elif kind == "candidate" and peer in self._links:
            text = data.get("candidate")
            if isinstance(text, str) and text:
                cand = candidate_from_sdp(text.removeprefix("candidate:"))
                cand.sdpMid = data.get("sdpMid")
                cand.sdpMLineIndex = data.get("sdpMLineIndex")
                await self._links[peer].pc.addIceCandidate(cand)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- use -----------------------------------------------------------------------------------

    def open_peers(self) -> set[str]:
        return {p for p, link in self._links.items() if link.state is LinkState.OPEN}

    def send(self, peer: str, data: str | bytes) -> bool:
        """Queue ``data`` for the channel to ``peer`` (after everything queued before it);
        False when that channel is not open. The writer respects HIGH_WATER."""
        return self.send_frames(peer, (data,))

    def send_frames(self, peer: str, frames: Iterable[bytes | str]) -> bool:
        """Queue messages that are produced only when the channel has room for them."""
        link = self._links.get(peer)
        if link is None or link.state is not LinkState.OPEN or link.channel is None:
            return False
        link.enqueue(iter(frames))  # type: ignore[arg-type]
        return True

    def buffered(self, peer: str) -> int:
        """What is still queued towards ``peer`` (0 when all went to SCTP)."""
        link = self._links.get(peer)
        return link.pending() if link is not None else 0

    async def drain(self, timeout: float) -> bool:
        """Wait (bounded) until every open channel has handed all queued data to SCTP."""
        deadline = time.monotonic() + timeout
        while any(self.buffered(p) for p in self.open_peers()):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def close_link(self, peer: str, drain_s: float = 0.0) -> None:
        """Close the channel to ``peer``; with ``drain_s``, first give what is queued towards it
        (a refusal's ``error`` above all) up to that long to reach SCTP, so it is not lost."""
        link = self._links.get(peer)
        if link is not None and drain_s > 0:
            deadline = time.monotonic() + drain_s
            while link.state is LinkState.OPEN and link.pending() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        link = self._links.pop(peer, None)
        if link is not None:
            link.set_state(LinkState.CLOSED)
            with contextlib.suppress(Exception):
                await link.pc.close()

    async def close(self) -> None:
        self._closing = True
        for peer in list(self._links):
            await self.close_link(peer)
        for task in list(self._tasks):
            task.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._ws is not None:
            await self._ws.close()
        if self._session is not None:
            await self._session.close()
