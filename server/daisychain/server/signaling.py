"""The ``/ws`` endpoint: one WebSocket per device, relaying signaling within its group.

Per connection: a reader (this module's ``Signaling.handle`` loop) that enforces the size and rate
limits, parses each frame with ``messages.parse_client`` and hands the record to the ``Hub``; and a
writer task that drains the connection's outbox in order. Every rejected frame is answered with an
``error`` (code + hint) and costs a strike; a connection out of strikes is closed with 4429.
Whatever happens, the ``finally`` clause removes the peer from the hub, so membership never
outlives a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import WSMsgType, web

from daisychain.server.config import SignalingLimits
from daisychain.server.grouping import request_group_key
from daisychain.server.messages import (
    CLOSE_ABUSE,
    CLOSE_GOING_AWAY,
    CLOSE_OVERLOADED,
    CLOSE_PROTOCOL,
    PROTOCOL_VERSION,
    Approve,
    Broadcast,
    ClientMessage,
    Deny,
    Hello,
    Ping,
    Pong,
    ProtocolError,
    Signal,
    check_room_code,
    encode,
    error_from,
    parse_client,
)
from daisychain.server.ratelimit import TokenBucket
from daisychain.server.rooms import Close, Hub, MemberState, OutboxItem, Peer

log = logging.getLogger(__name__)

# Hello refusals the client cannot fix on this socket: answer, then close with 4400.
_FATAL_HELLO_CODES = frozenset({"version-mismatch", "bad-room-code", "group-full", "room-busy"})


class Connection:
    """The server side of one socket: its peer record, limits and ordered outbox."""

    def __init__(
        self, ws: web.WebSocketResponse, peer_id: str, network_key: str, limits: SignalingLimits
    ) -> None:
        self.ws = ws
        self.limits = limits
        self.peer = Peer(id=peer_id, post=self.post, network_key=network_key)
        self.rate = TokenBucket(limits.rate_per_s, limits.burst)
        self.strikes = TokenBucket(1.0 / limits.strike_refill_s, limits.max_strikes)
        self._queue: asyncio.Queue[OutboxItem | None] = asyncio.Queue()
        self._closing = False
        self.writer: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.writer = asyncio.create_task(self._write_loop(), name=f"ws-writer-{self.peer.id}")

    def post(self, item: OutboxItem) -> None:
        """Queue a message or a close. Never blocks: the hub calls this while changing state."""
        if self._closing:
            return
        if isinstance(item, Close):
            self._closing = True
        elif self._queue.qsize() >= self.limits.outbox_limit:
            # The client does not read: do not let its backlog grow without bound.
            self._closing = True
            log.warning("peer %s: outbox full, closing", self.peer.id)
            asyncio.get_running_loop().create_task(self._abort(CLOSE_OVERLOADED))
            return
        self._queue.put_nowait(item)

    def reject(self, exc: ProtocolError, *, strike: bool = True) -> None:
        self.post(encode(error_from(exc)))
        if strike and not self.strikes.take():
            log.warning("peer %s: out of strikes, closing", self.peer.id)
            self.post(Close(CLOSE_ABUSE, "too many rejected messages"))

    async def stop(self) -> None:
        """Let the writer flush what is queued (briefly), then make sure it is gone."""
        self._queue.put_nowait(None)
        if self.writer is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self.writer, timeout=1.0)

    async def _abort(self, code: int) -> None:
        if self.writer is not None:
            self.writer.cancel()
        with contextlib.suppress(Exception):
            await self.ws.close(code=code, message=b"client too slow")

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    return
                if isinstance(item, Close):
                    await self.ws.close(code=item.code, message=item.reason.encode())
                    return
                await self.ws.send_str(item)
        except (ConnectionError, RuntimeError):
            return  # the socket went away under us; the reader's finally cleans up


class Signaling:
    """Owns the hub and the open connections of one app."""

    def __init__(self, limits: SignalingLimits, *, trust_proxy: bool) -> None:
        self.limits = limits
        self.trust_proxy = trust_proxy
        self.hub = Hub(
            max_group_size=limits.max_group_size,
            max_pending=limits.max_pending,
            join_timeout_s=limits.join_timeout_s,
        )
        self.connections: set[Connection] = set()

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        # aiohttp itself closes with 1009 past max_msg_size; below that (and above our limit) we
        # answer with a too-large error instead, so a client learns what went wrong.
        ws = web.WebSocketResponse(
            heartbeat=self.limits.heartbeat_s, max_msg_size=4 * self.limits.max_message_bytes
        )
        await ws.prepare(request)
        network_key = request_group_key(
            request.headers, request.remote, trust_proxy=self.trust_proxy
        )
        conn = Connection(ws, self.hub.new_peer_id(), network_key, self.limits)
        self.hub.connect(conn.peer)
        self.connections.add(conn)
        conn.start()
        hello_timer = asyncio.get_running_loop().call_later(
            self.limits.hello_timeout_s, self._hello_timeout, conn
        )
        room_from_url = request.query.get("room")
        log.info("peer %s connected", conn.peer.id)
        try:
            async for frame in ws:
                if frame.type is WSMsgType.TEXT:
                    self._on_text(conn, frame.data, room_from_url)
                elif frame.type is WSMsgType.BINARY:
                    conn.reject(
                        ProtocolError(
                            "binary-unsupported",
                            "signaling messages are JSON text frames",
                            "send binary payloads over a WebRTC data channel",
                        )
                    )
                elif frame.type is WSMsgType.ERROR:
                    break
        finally:
            hello_timer.cancel()
            self.hub.disconnect(conn.peer)
            self.connections.discard(conn)
            await conn.stop()
            log.info("peer %s disconnected", conn.peer.id)
        return ws

    async def close_all(self, timeout_s: float = 2.0) -> None:
        """Server shutdown: tell every client to go (1001) and give the close frames a moment.

        aiohttp cancels handlers soon after ``on_shutdown`` returns; without the wait a client
        sees its socket drop (1006) instead of a clean "going away".
        """
        writers = [conn.writer for conn in self.connections if conn.writer is not None]
        for conn in list(self.connections):
            conn.post(Close(CLOSE_GOING_AWAY, "server shutting down"))
        if writers:
            await asyncio.wait(writers, timeout=timeout_s)

    def _hello_timeout(self, conn: Connection) -> None:
        if conn.peer.state is MemberState.CONNECTED:
            conn.reject(
                ProtocolError(
                    "hello-first",
                    f"no hello within {self.limits.hello_timeout_s:g} s",
                    "send hello as the first message after connecting",
                ),
                strike=False,
            )
            conn.post(Close(CLOSE_PROTOCOL, "no hello"))

    def _on_text(self, conn: Connection, data: str, room_from_url: str | None) -> None:
        if len(data) > self.limits.max_message_bytes // 4 and (
            len(data.encode("utf-8")) > self.limits.max_message_bytes
        ):
            conn.reject(
                ProtocolError(
                    "too-large",
                    f"message is larger than {self.limits.max_message_bytes} bytes",
                    "signaling carries SDP and ICE only; send bulk data over a data channel",
                )
            )
            return
        if not conn.rate.take():
            conn.reject(
                ProtocolError(
                    "rate-limited",
                    f"more than {self.limits.rate_per_s:g} messages/s (burst {self.limits.burst})",
                    "slow down; this message was dropped",
                )
            )
            return
        try:
            message = parse_client(data, max_broadcast_bytes=self.limits.max_broadcast_bytes)
            self._dispatch(conn, message, room_from_url)
        except ProtocolError as exc:
            conn.reject(exc)
            if exc.code in _FATAL_HELLO_CODES:
                conn.post(Close(CLOSE_PROTOCOL, exc.code))
        except Exception:
            # A bug must cost this message, not the server or the other clients.
            log.exception("peer %s: internal error handling a message", conn.peer.id)
            conn.reject(
                ProtocolError(
                    "internal-error",
                    "the server failed to handle this message",
                    "please report it with the server log",
                ),
                strike=False,
            )

    def _dispatch(
        self, conn: Connection, message: ClientMessage, room_from_url: str | None
    ) -> None:
        peer = conn.peer
        match message:
            case Ping(nonce=nonce):
                peer.send(Pong(nonce=nonce))
            case Hello():
                self._hello(peer, message, room_from_url)
            case _ if peer.state is MemberState.CONNECTED:
                raise ProtocolError(
                    "hello-first",
                    f"{message.type} before hello",
                    "send hello first and wait for welcome",
                    ref=message.type,
                )
            case Signal(to=to, data=data):
                self.hub.relay_signal(peer, to, data)
            case Broadcast(data=data):
                self.hub.broadcast(peer, data)
            case Approve(peer=peer_id):
                self.hub.approve(peer, peer_id)
            case Deny(peer=peer_id):
                self.hub.deny(peer, peer_id)

    def _hello(self, peer: Peer, hello: Hello, room_from_url: str | None) -> None:
        if hello.version != PROTOCOL_VERSION:
            raise ProtocolError(
                "version-mismatch",
                f"client speaks protocol {hello.version}, server speaks {PROTOCOL_VERSION}",
                "reload the page (browser) or install the same daisychain version as the server",
                ref="hello",
            )
        room = hello.room
        if room_from_url is not None:
            check_room_code(room_from_url)
            if room is not None and room != room_from_url:
                raise ProtocolError(
                    "bad-room-code",
                    "hello.room differs from the ?room= of the WebSocket URL",
                    "give the room code in one place",
                    ref="hello",
                )
            room = room_from_url
        self.hub.hello(peer, hello, room)
