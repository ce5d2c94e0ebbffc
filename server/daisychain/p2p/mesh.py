"""The mesh: a signaling client on the server's ``/ws`` and one aiortc data channel per pair.

Who offers: of two peers, the one whose id sorts first (ASCII) creates the peer connection and
the channel and sends the offer; the other answers. Signal payloads (docs/PROTOCOL.md, "Peer
connections") are ``{"kind": "offer"|"answer", "sdp": ...}`` and, from peers that trickle ICE,
``{"kind": "candidate", "candidate": ..., "sdpMid": ..., "sdpMLineIndex": ...}``. aiortc gathers
before it answers, so its own descriptions carry every candidate and it never trickles.
Every server message and every relayed signal payload is parsed by ``signaling`` into a typed
record first; one the peer cannot parse is an error, never a silent drop.

Everything that happens (a channel opens, a message arrives, a channel closes, the server says a
peer left) becomes one ``MeshEvent`` on a queue that the owner of the mesh consumes in order: the
training peer is a single consumer, so it never sees two events at once.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    RTCIceTransportPolicy,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.sdp import candidate_from_sdp

from daisychain.p2p import serverlink, signaling
from daisychain.p2p.versions import SIGNALING_VERSION
from daisychain.wire import signaling as sm

log = logging.getLogger("daisychain.p2p.mesh")

CHANNEL_LABEL = "daisychain"
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
    # Which link to ``peer`` opened (a Mesh counts its links). A reconnect makes a new link
    # while the shell may still be acting on what it knew of the old one: ``send`` with a
    # generation refuses a newer link than the sender knows (see ``Mesh.send_frames``).
    generation: int = 0


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


HISTORY = 12  # entries a link keeps of how it came up
HISTORY_MESSAGES = 4  # of them, the first messages received


class LinkState(Enum):
    CONNECTING = "connecting"
    OPEN = "open"
    CLOSED = "closed"


class Link:
    """One peer connection and its channel; ``set_state`` is the one place the state changes."""

    def __init__(self, mesh: Mesh, peer: str, pc: RTCPeerConnection, generation: int = 0) -> None:
        self.mesh = mesh
        self.peer = peer
        self.pc = pc
        self.generation = generation
        self.channel: RTCDataChannel | None = None
        self.state = LinkState.CONNECTING
        self.closed = asyncio.Event()
        # What waits to be handed to the channel, in order: messages, and lazy frame
        # iterators (a checkpoint is cut into frames only as fast as the channel drains).
        self.outbox: deque[Outgoing] = deque()
        self.queued = asyncio.Event()
        self.low = asyncio.Event()
        self.writer: asyncio.Task[None] | None = None
        # Messages that arrived before the channel said "open" (see ``attach``), in order.
        self.early: list[str | bytes] = []
        # How the link came up, for the log when a peer is refused on it (``Mesh.history``):
        # its state changes and the first messages, with the seconds since it was made.
        self.born = time.monotonic()
        self.history: list[str] = []
        self.received = 0

    def note(self, what: str) -> None:
        if len(self.history) < HISTORY:
            self.history.append(f"{time.monotonic() - self.born:.3f}s {what}")

    def set_state(self, new: LinkState) -> None:
        old = self.state
        if old is new or old is LinkState.CLOSED:
            return
        self.state = new
        self.note(f"{old.value} -> {new.value}")
        log.debug("%s: link %s %s -> %s", self.mesh.name, self.peer, old.value, new.value)
        if new is LinkState.CLOSED:
            self.closed.set()
            self.outbox.clear()
            if self.writer is not None:
                self.writer.cancel()
        elif new is LinkState.OPEN:
            self.writer = asyncio.ensure_future(self._write())
        event: MeshEvent = (
            ChannelOpen(self.peer, self.generation)
            if new is LinkState.OPEN
            else ChannelClosed(self.peer)
        )
        self.mesh.events.put_nowait(event)
        early, self.early = self.early, []
        if new is LinkState.OPEN:
            for data in early:
                self.mesh.events.put_nowait(ChannelMessage(self.peer, data))

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
        self.note(f"channel attached ({channel.readyState})")
        channel.bufferedAmountLowThreshold = LOW_WATER

        @channel.on("bufferedamountlow")
        def on_low() -> None:
            self.low.set()

        @channel.on("message")
        def on_message(data: str | bytes) -> None:
            self.received += 1
            if self.received <= HISTORY_MESSAGES:
                what = data[:40] if isinstance(data, str) else f"{len(data)} bytes"
                self.note(f"{self.state.value}: received {what!r}")
            if self.state is LinkState.OPEN:
                self.mesh.events.put_nowait(ChannelMessage(self.peer, data))
            elif self.state is LinkState.CONNECTING:
                # The answering side may send as soon as it has our DATA_CHANNEL_OPEN (RFC
                # 8832), and aiortc hands its first message on before that side's ACK makes
                # the channel "open" when the ACK comes late. Dropping it lost a browser's
                # `hello`, and its `config` was then refused as "config before hello". Kept
                # here, it follows ChannelOpen; we cannot send before "open", so it waits.
                self.early.append(data)

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
        invite: str | None = None,
        name: str = "",
        device: dict[str, str | int | float | bool | None] | None = None,
        ice_servers: list[sm.IceServer] | None = None,
        relay_only: bool = False,
        connect_timeout_s: float = 10.0,
        peer_left_grace_s: float = 1.0,
        fingerprint: bytes | None = None,
    ) -> None:
        self.server = server.rstrip("/")
        # The SHA-256 of the https server's certificate to trust (p2p.serverlink), or None to
        # verify it the usual way (or for a plain http server).
        self.fingerprint = fingerprint
        self.room = room
        # An invite token of ``room`` (p2p.invitelink): admitted without the host's click.
        self.invite = invite
        self.name = name or "peer"
        self.device = device or {"kind": "python"}
        # ICE (docs/PROTOCOL.md, "ICE servers"): the servers given here override the welcome's;
        # None takes the welcome's (none unless the server was configured with some).
        self.ice_override = ice_servers
        self.ice_servers: list[sm.IceServer] = list(ice_servers or [])
        self.relay_only = relay_only
        self.ice_policy = RTCIceTransportPolicy.RELAY if relay_only else RTCIceTransportPolicy.ALL
        self.connect_timeout_s = connect_timeout_s
        # The server's peer-left travels another path than the data channel: what the peer
        # sent just before it left may still be in flight. Its channel gets this long to
        # deliver (or close) before PeerLeft is reported.
        self.peer_left_grace_s = peer_left_grace_s
        self.events: asyncio.Queue[MeshEvent] = asyncio.Queue()
        self.id = ""
        self.role = "member"
        self.auto_approve = False
        self._links: dict[str, Link] = {}
        self._generations = 0  # links made so far: each new one gets the next number
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
        url = self.ws_url()
        try:
            self._session = serverlink.session(url, self.fingerprint)
        except serverlink.ServerLinkError as exc:
            raise MeshError(exc.message, exc.hint) from None
        try:
            self._ws = await self._session.ws_connect(url, timeout=aiohttp.ClientWSTimeout(
                ws_close=5.0), heartbeat=None)  # fmt: skip
        except aiohttp.WSServerHandshakeError as exc:
            await self._session.close()
            if exc.status != 429:
                raise MeshError(
                    f"the DaisyChain server at {url} refused the connection (HTTP {exc.status})",
                    "check --server: it must be a DaisyChain server (python -m daisychain.server)",
                ) from None
            # The server's per-address limits (sockets, hellos) answer before the upgrade.
            retry = exc.headers.get("Retry-After", "a few") if exc.headers else "a few"
            raise MeshError(
                f"the DaisyChain server at {url} is refusing more connections from this network "
                "address (HTTP 429: too many open connections or hellos)",
                f"close other DaisyChain tabs or peers on this network, or retry in {retry} s",
            ) from None
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            await self._session.close()
            refusal = serverlink.tls_refusal(exc, url)
            if refusal is not None:
                raise MeshError(*refusal) from None
            raise MeshError(
                f"cannot reach the DaisyChain server at {url} ({exc.__class__.__name__}: {exc})",
                "check --server (for example http://HOST:8787) and that the server is running "
                "(python -m daisychain.server)",
            ) from None
        hello = sm.Hello(
            version=SIGNALING_VERSION, name=self.name[:40], device=self.device, invite=self.invite
        )
        await self._ws.send_str(signaling.encode_client(hello))
        while True:
            msg = await self._recv(timeout=None if self.room else self.connect_timeout_s)
            if isinstance(msg, sm.Welcome):
                self._take_ice(msg)
                self.id = msg.id
                self.role = msg.role
                for member in msg.members:
                    self._introduce(member.id)
                break
            if isinstance(msg, sm.Pending):
                log.info("%s: waiting for the room's host to approve this peer", self.name)
                print(
                    f"waiting for the host of room {self.room} to approve {self.name!r} ...",
                    flush=True,
                )
                continue
            if isinstance(msg, sm.Denied):
                raise MeshError(f"room {self.room}: {msg.message}", msg.hint)
            if isinstance(msg, sm.Error) and msg.code in sm.INVITE_REFUSALS:
                raise MeshError(f"room {self.room}: invite link refused: {msg.message}", msg.hint)
            if isinstance(msg, sm.Error):
                what = "signaling version mismatch" if msg.code == "version-mismatch" else msg.code
                raise MeshError(f"server refused this peer: {what}: {msg.message}", msg.hint)
            raise MeshError(
                f"the server sent {msg.type!r} before welcome",
                "is --server a DaisyChain server of this version? (docs/PROTOCOL.md, Signaling)",
            )
        self._reader = asyncio.create_task(self._read_loop())

    def _take_ice(self, welcome: sm.Welcome) -> None:
        """The welcome's ICE servers (unless this peer was given its own) and policy (relay if
        either side asks for it); relay with no TURN server could never connect: refused."""
        if self.ice_override is None:
            self.ice_servers = list(welcome.ice_servers)
        relay = self.relay_only or welcome.ice_transport_policy == "relay"
        self.ice_policy = RTCIceTransportPolicy.RELAY if relay else RTCIceTransportPolicy.ALL
        turn = [u for s in self.ice_servers for u in s.urls if u.startswith(("turn:", "turns:"))]
        if relay and not turn:
            raise MeshError(
                "relay-only ICE was asked for but no TURN server is known",
                "give --ice-server turn:HOST[:PORT] with --ice-username/--ice-credential, or "
                "start the server with a TURN server (docs/USAGE.md, ICE servers)",
            )

    async def _recv(self, timeout: float | None) -> sm.ServerMessage:
        assert self._ws is not None
        try:
            msg = await self._ws.receive(timeout=timeout)
        except TimeoutError:
            raise MeshError(
                "the server did not answer hello in time",
                "check that --server points at a DaisyChain server",
            ) from None
        if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
            code = self._ws.close_code
            raise MeshError(
                f"the server closed the connection (code {code})",
                "check the server's log; a version mismatch or a full group closes the socket",
            )
        try:
            return signaling.parse_server(msg.data)
        except signaling.SignalingError as exc:
            raise MeshError(exc.message, exc.hint) from None

    async def _read_loop(self) -> None:
        """Every server message after welcome, in order. One this peer cannot parse ends the
        signaling connection (``SignalingLost`` says why): the server is not speaking this
        version's protocol, and acting on a guess could only corrupt the mesh."""
        assert self._ws is not None
        reason = "server closed the connection"
        try:
            async for msg in self._ws:
                if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                    break  # an error or a close: the loop ends with `reason`
                try:
                    parsed = signaling.parse_server(msg.data)
                except signaling.SignalingError as exc:
                    reason = f"{exc.message} (hint: {exc.hint})"
                    log.error("%s: %s", self.name, reason)
                    break
                await self._on_signaling(parsed)
        except (aiohttp.ClientError, asyncio.CancelledError) as exc:
            reason = f"signaling error: {exc!r}"
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if not self._closing:
                self.events.put_nowait(SignalingLost(reason))

    async def _on_signaling(self, msg: sm.ServerMessage) -> None:
        if isinstance(msg, sm.PeerJoined):
            self._introduce(msg.peer.id)
        elif isinstance(msg, sm.PeerLeft):
            self._spawn(self._peer_left(msg.peer))
        elif isinstance(msg, sm.SignalFrom):
            try:
                data = signaling.parse_signal_data(msg.data)
            except signaling.SignalingError as exc:
                # Another peer wrote it (the server relays any object): refuse that signal,
                # keep the connection to the server.
                log.warning("%s: signal from %s refused: %s", self.name, msg.from_, exc.message)
                return
            try:
                await self._on_signal(msg.from_, data)
            except Exception as exc:  # aiortc refused it: that one peer's link fails, not the mesh
                log.warning("%s: signal from %s failed: %r", self.name, msg.from_, exc)
        elif isinstance(msg, sm.JoinRequest):
            verb = "approve" if self.auto_approve else "deny"
            if not self.auto_approve:
                print(
                    f"denied join request from {msg.peer.name!r}: this headless peer approves "
                    "nobody unless started with --approve all",
                    flush=True,
                )
            answer = sm.Approve(msg.peer.id) if self.auto_approve else sm.Deny(msg.peer.id)
            log.info("%s: %s join request from %s", self.name, verb, msg.peer.id)
            await self._send_signaling(answer)
        elif isinstance(msg, sm.HostChanged):
            self.role = "host" if msg.host == self.id else "member"
        elif isinstance(msg, sm.Error):
            log.warning("%s: server error %s: %s (%s)", self.name, msg.code, msg.message, msg.hint)
        elif isinstance(msg, sm.JoinRequestClosed):
            log.info("%s: join request of %s closed: %s", self.name, msg.peer, msg.reason)
        elif isinstance(msg, sm.JoinRequestsRefused):
            log.warning(
                "%s: %d join requests to this room refused so far: its waiting list was full",
                self.name,
                msg.count,
            )
        elif isinstance(msg, sm.BroadcastFrom | sm.Pong):
            log.debug(
                "%s: %s from the server ignored (this peer uses neither)", self.name, msg.type
            )
        else:  # welcome, pending, denied: only before welcome
            log.warning("%s: unexpected %s from the server ignored", self.name, msg.type)

    async def _peer_left(self, peer: str) -> None:
        link = self._links.get(peer)
        if link is not None and link.state is LinkState.OPEN:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.closed.wait(), self.peer_left_grace_s)
        self.events.put_nowait(PeerLeft(peer))
        await self.close_link(peer)

    async def _send_signaling(self, message: sm.ClientMessage) -> None:
        if self._ws is not None and not self._ws.closed:
            await self._ws.send_str(signaling.encode_client(message))

    # -- peer connections ----------------------------------------------------------------------

    def _configuration(self) -> RTCConfiguration:
        # Never None: aiortc would fall back to a public STUN server (ENVIRONMENT.md). aiortc
        # uses the first STUN and the first TURN URL it can, and ignores the rest.
        servers = [
            RTCIceServer(urls=list(s.urls), username=s.username, credential=s.credential)
            for s in self.ice_servers
        ]
        return RTCConfiguration(iceServers=servers, iceTransportPolicy=self.ice_policy)

    def _new_link(self, peer: str) -> Link:
        pc = RTCPeerConnection(configuration=self._configuration())
        self._generations += 1
        link = Link(self, peer, pc, self._generations)
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

    async def _offer(self, link: Link) -> None:
        await link.pc.setLocalDescription(await link.pc.createOffer())
        desc = link.pc.localDescription
        await self._send_signaling(sm.Signal(link.peer, {"kind": "offer", "sdp": desc.sdp}))

    async def _on_signal(self, peer: str, data: signaling.SignalData) -> None:
        if isinstance(data, signaling.Candidate):
            if peer in self._links:
                cand = candidate_from_sdp(data.candidate.removeprefix("candidate:"))
                cand.sdpMid = data.sdp_mid
                cand.sdpMLineIndex = data.sdp_mline_index
                await self._links[peer].pc.addIceCandidate(cand)
        elif data.kind == "offer":
            if peer in self._links:
                return  # a duplicate offer, or glare with our own: keep the first connection
            link = self._new_link(peer)

            @link.pc.on("datachannel")
            def on_channel(channel: RTCDataChannel) -> None:
                if channel.label == CHANNEL_LABEL and link.channel is None:
                    link.attach(channel)

            await link.pc.setRemoteDescription(RTCSessionDescription(sdp=data.sdp, type="offer"))
            await link.pc.setLocalDescription(await link.pc.createAnswer())
            answer = {"kind": "answer", "sdp": link.pc.localDescription.sdp}
            await self._send_signaling(sm.Signal(peer, answer))
        elif peer in self._links:
            link = self._links[peer]
            if link.pc.signalingState == "have-local-offer":
                desc = RTCSessionDescription(sdp=data.sdp, type="answer")
                await link.pc.setRemoteDescription(desc)

    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- use -----------------------------------------------------------------------------------

    def history(self, peer: str) -> str:
        """How the link to ``peer`` came up (its state changes and first messages, timed from
        its making), for the log of a refusal: "no link" when there is none."""
        link = self._links.get(peer)
        if link is None:
            return "no link"
        return f"{'; '.join(link.history)} ({link.received} messages in all)"

    def open_peers(self) -> set[str]:
        return {p for p, link in self._links.items() if link.state is LinkState.OPEN}

    def send(self, peer: str, data: str | bytes, generation: int | None = None) -> bool:
        """Queue ``data`` for the channel to ``peer`` (after everything queued before it);
        False when that channel is not open. The writer respects HIGH_WATER."""
        return self.send_frames(peer, (data,), generation)

    def send_frames(
        self, peer: str, frames: Iterable[bytes | str], generation: int | None = None
    ) -> bool:
        """Queue messages that are produced only when the channel has room for them.

        ``generation``: the link the sender knows is open (its ``ChannelOpen``), or None for
        whatever link is open. A protocol shell passes it: its machine greets a link with
        ``hello`` when it handles that link's ``ChannelOpen``, so what it says before then was
        meant for an older link, and on the new one it would arrive before the ``hello``
        (refused there as "binary frame before hello"). Such a send is dropped, as it would
        have been on the closed link."""
        link = self._links.get(peer)
        if link is None or link.state is not LinkState.OPEN or link.channel is None:
            return False
        if generation is not None and link.generation != generation:
            log.debug("%s: to %s: dropped, meant for link %d not %d", self.name, peer,
                      generation, link.generation)  # fmt: skip
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
        """Close every link, then the signaling socket and its HTTP session. The socket and the
        session close even when closing a link raises: a peer torn down by cancellation (its
        event loop ending every task at once) sees aiortc's own tasks cancelled under it, and an
        unclosed session would then outlive the peer."""
        self._closing = True
        try:
            for peer in list(self._links):
                await self.close_link(peer)
        finally:
            for task in list(self._tasks):
                task.cancel()
            if self._reader is not None:
                self._reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
            try:
                if self._ws is not None:
                    await self._ws.close()
            finally:
                if self._session is not None:
                    await self._session.close()
