"""The ``/ws`` endpoint: one WebSocket per device, relaying signaling within its group.

Per connection: a reader (this module's ``Signaling.handle`` loop) that enforces the size and rate
limits, parses each frame with ``messages.parse_client`` and hands the record to the ``Hub``; and a
writer task that drains the connection's outbox in order. Every rejected frame is answered with an
``error`` (code + hint) and costs a strike; a connection out of strikes is closed with 4429.
Whatever happens, the ``finally`` clause removes the peer from the hub, so membership never
outlives a socket.

Against a hostile client (docs/SERVER.md, *Limits against hostile clients*):

* a client that does not read has its socket **aborted** the moment its outbox passes
  ``outbox_limit`` messages or ``outbox_limit_bytes`` bytes, and its queue is dropped: a polite
  close would queue a close frame behind the very bytes it does not read. Every polite close is
  also bounded by ``close_timeout_s``, then aborted;
* per client address (``grouping.network_key``: an IPv4 address, an IPv6 /64): at most
  ``max_connections_per_address`` open sockets, and hellos at a token-bucket pace (join
  requests are paced by the hub). A socket over the cap, or from an address with no hello left,
  is refused before the upgrade (HTTP 429), the cheapest refusal there is;
* liveness is this module's own sweep, one timer for all sockets (``_sweep``): a socket silent
  for ``heartbeat_s`` gets a WebSocket ping, and one still silent half a period later is
  aborted. (aiohttp 3.14's per-socket heartbeat left its timer armed on many closed sockets,
  its data-received reset not checking for a close, which kept each one's objects alive for up
  to 30 s: a connection flood pinned ~8 MB per 1000 sockets that way);
* a message that fails in an unexpected way costs that message and a strike, never the loop;
  logging of one connection's bad input is throttled (``logs.Throttle``): a few lines, then a
  count, never a traceback per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass

from aiohttp import WSMsgType, web

from daisychain.server.config import SignalingLimits
from daisychain.server.grouping import (
    IPAddress,
    client_address,
    group_key,
    network_key,
    site_key,
)
from daisychain.server.logs import KeyedThrottle, Throttle
from daisychain.server.ratelimit import KeyedLimiter, TokenBucket
from daisychain.server.rooms import Close, Hub, MemberState, OutboxItem, Peer
from daisychain.server.wsframes import MaskCheckedWebSocketResponse
from daisychain.wire.ice import IceIssuer
from daisychain.wire.signaling import (
    CLOSE_ABUSE,
    CLOSE_GOING_AWAY,
    CLOSE_INVITE,
    CLOSE_PROTOCOL,
    INVITE_REFUSALS,
    PROTOCOL_VERSION,
    Approve,
    Broadcast,
    ClientMessage,
    Deny,
    Hello,
    InviteCreate,
    InviteRevoke,
    Ping,
    Pong,
    ProtocolError,
    Signal,
    check_room_code,
    encode,
    error_from,
    parse_client,
)

log = logging.getLogger(__name__)

# Hello refusals the client cannot fix on this socket: answer, then close (4400, or 4429 when
# the refusal is a rate limit).
_FATAL_HELLO_CODES = frozenset(
    {"version-mismatch", "bad-room-code", "group-full", "room-busy", "rate-limited"}
) | frozenset(INVITE_REFUSALS)


def _drop(item: OutboxItem) -> None:
    """``Peer.post`` of a peer without a live connection."""


@dataclass(frozen=True)
class _Control:
    """Outbox item: a WebSocket ping (liveness sweep) or pong (answer to the client's ping),
    sent by the writer in order with the messages, so the reader never waits on the socket."""

    opcode: WSMsgType
    data: bytes = b""


class Connection:
    """The server side of one socket: its peer record, limits and ordered outbox."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        transport: asyncio.Transport | None,
        peer: Peer,
        limits: SignalingLimits,
        log_lines: Throttle | None = None,
    ) -> None:
        self.ws = ws
        self.transport = transport
        self.limits = limits
        self.peer = peer
        peer.post = self.post
        self.rate = TokenBucket(limits.rate_per_s, limits.burst)
        self.strikes = TokenBucket(1.0 / limits.strike_refill_s, limits.max_strikes)
        # Shared by every socket of the client's network (``Signaling.refusal_lines``): a client
        # that opens a new socket per bad message is throttled like one that keeps one.
        self.log_lines = log_lines if log_lines is not None else Throttle()
        self._queue: asyncio.Queue[OutboxItem | _Control | None] = asyncio.Queue()
        self.last_heard = asyncio.get_running_loop().time()  # any frame from the client
        self.pinged = False
        # This socket has spent its network's hello token (Signaling._spend_hello): one per
        # socket, whether its hello was good or not.
        self.hello_spent = False
        self._queued_bytes = 0
        self._closing = False
        self.aborted = False
        self.writer: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.writer = asyncio.create_task(self._write_loop(), name=f"ws-writer-{self.peer.id}")

    def control(self, opcode: WSMsgType, data: bytes = b"") -> None:
        """Queue a ping or pong (counted with the messages against ``outbox_limit``)."""
        if self._closing:
            return
        if self._queue.qsize() >= self.limits.outbox_limit:
            self.abort()
            return
        self._queue.put_nowait(_Control(opcode, data))

    def post(self, item: OutboxItem) -> None:
        """Queue a message or a close. Never blocks: the hub calls this while changing state."""
        if self._closing:
            return
        if isinstance(item, Close):
            self._closing = True
        elif (
            self._queue.qsize() >= self.limits.outbox_limit
            or self._queued_bytes + len(item) > self.limits.outbox_limit_bytes
        ):
            log.warning(
                "peer %s: outbox full (%d messages, %d bytes): client not reading, aborting",
                self.peer.id, self._queue.qsize(), self._queued_bytes,
            )  # fmt: skip
            self.abort()
            return
        else:
            self._queued_bytes += len(item)  # encode() writes ASCII: characters are bytes
        self._queue.put_nowait(item)

    def abort(self) -> None:
        """Drop the socket now, without a close handshake, and free everything queued for it.

        The reader's ``async for`` then ends (the transport reports the connection lost) and the
        handler's ``finally`` takes the peer out of the hub.
        """
        self._closing = True
        if self.aborted:
            return
        self.aborted = True
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queued_bytes = 0
        if self.transport is not None:
            self.transport.abort()
        if self.writer is not None and self.writer is not asyncio.current_task():
            self.writer.cancel()

    @property
    def closing(self) -> bool:
        """A close (or an abort) is under way: nothing more from this client is acted on."""
        return self._closing

    def reject(self, exc: ProtocolError, *, strike: bool = True, logged: bool = False) -> None:
        if not logged:
            self.log_lines.log(log, logging.INFO, "peer %s: refused (%s) %s", self.peer.id,
                               exc.code, exc.message)  # fmt: skip
        self.post(encode(error_from(exc)))
        if strike and not self.strikes.take() and not self._closing:
            log.warning("peer %s: out of strikes, closing", self.peer.id)
            self.post(Close(CLOSE_ABUSE, "too many rejected messages"))

    async def stop(self) -> None:
        """Let the writer flush what is queued (briefly), then make sure it is gone."""
        self._queue.put_nowait(None)
        if self.writer is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self.writer, timeout=1.0)
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queued_bytes = 0

    async def _write_loop(self) -> None:
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    return
                if isinstance(item, _Control):
                    if item.opcode is WSMsgType.PING:
                        await self.ws.ping(item.data)
                    else:
                        await self.ws.pong(item.data)
                    continue
                if isinstance(item, Close):
                    await close_or_abort(self.ws, self.transport, item.code, item.reason,
                                         self.limits.close_timeout_s)  # fmt: skip
                    return
                self._queued_bytes -= len(item)
                await self.ws.send_str(item)
        except (ConnectionError, RuntimeError):
            return  # the socket went away under us; the reader's finally cleans up


async def close_or_abort(
    ws: web.WebSocketResponse,
    transport: asyncio.Transport | None,
    code: int,
    reason: str,
    timeout_s: float,
) -> None:
    """Close politely, but never wait longer than ``timeout_s`` on a client that does not read
    (or does not answer the close): then drop the socket."""
    try:
        await asyncio.wait_for(ws.close(code=code, message=reason.encode()), timeout_s)
    except (TimeoutError, ConnectionError, RuntimeError):
        if transport is not None:
            transport.abort()


class Signaling:
    """Owns the hub and the open connections of one app."""

    def __init__(
        self, limits: SignalingLimits, *, trust_proxy: bool, ice: IceIssuer | None = None
    ) -> None:
        self.limits = limits
        self.trust_proxy = trust_proxy
        self.hub = Hub(
            ice=ice,
            max_group_size=limits.max_group_size,
            max_pending=limits.max_pending,
            join_timeout_s=limits.join_timeout_s,
            join_requests=KeyedLimiter(limits.join_requests_per_s, limits.join_request_burst),
            refused_notice_s=limits.refused_notice_s,
            invite_max_s=limits.invite_max_s,
        )
        self.hellos = KeyedLimiter(limits.hellos_per_s, limits.hello_burst)
        # Refusals at the door (over the per-address caps) come one per new socket, so a flood
        # of sockets would dodge any per-connection throttle: they share this one.
        self.door_lines = Throttle(burst=10, every_s=10.0)
        # Refusals of messages, per client network (IPv4 address, IPv6 /64), for every socket
        # it holds: a few lines, then one a minute with the count held back (and what no later
        # line carried, in logs.report_held's line once a minute for all networks together).
        self.refusal_lines = KeyedThrottle(burst=5, every_s=60.0, what="refused WebSocket messages")
        self.connections: set[Connection] = set()
        self.per_address: Counter[str] = Counter()
        self._sweeper: asyncio.Task[None] | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        address = client_address(request.headers, request.remote, trust_proxy=self.trust_proxy)
        address_key = network_key(address) if address is not None else "unknown"
        refusal = self._at_the_door(address_key)
        if refusal is not None:
            return refusal
        self.per_address[address_key] += 1  # the slot is taken before the first await
        try:
            return await self._serve(request, address, address_key)
        finally:
            # No line here: a client reconnecting in a loop would write one per socket. What
            # its throttle held back is reported with its next line, or by logs.report_held.
            self.per_address[address_key] -= 1
            if self.per_address[address_key] <= 0:
                del self.per_address[address_key]

    def _at_the_door(self, address_key: str) -> web.Response | None:
        """Refuse a socket before the upgrade (HTTP 429) when its address has all the sockets it
        may hold, or no hello left to say. A refusal here costs the server a third of one made
        after the upgrade (no handshake, no close handshake), which is what a flood of sockets
        from one address meets."""
        if self.per_address[address_key] >= self.limits.max_connections_per_address:
            code, retry_s = "too-many-connections", self.limits.heartbeat_s
            message = (
                f"your network already has {self.limits.max_connections_per_address} "
                "connections open to this server"
            )
            hint = (
                "close other tabs or devices on this network, or run your own server "
                "(python -m daisychain.server)"
            )
        elif (tokens := self.hellos.bucket(address_key).available()) < 1.0:
            code, retry_s = "rate-limited", (1.0 - tokens) / self.limits.hellos_per_s
            message = (
                f"more than {self.limits.hello_burst} connections from your network, then "
                f"{self.limits.hellos_per_s:g} per second"
            )
            hint = f"wait {math.ceil(retry_s)} s, then reconnect"
        else:
            return None
        self.door_lines.log(log, logging.INFO, "refused a WebSocket at the door: %s", message)
        body = json.dumps({"error": message, "code": code, "hint": hint})
        return web.Response(
            status=429,
            text=body,
            content_type="application/json",
            headers={"Retry-After": str(max(1, math.ceil(retry_s)))},
        )

    async def _serve(
        self, request: web.Request, address: IPAddress | None, address_key: str
    ) -> web.WebSocketResponse:
        # aiohttp itself closes with 1009 past max_msg_size; below that (and above our limit) we
        # answer with a too-large error instead, so a client learns what went wrong.
        # No aiohttp heartbeat and no autoping: liveness is ``_sweep``, and pings are answered
        # in the loop below (where they count as hearing from the client, and against its rate).
        # RFC 6455 5.1: a client frame without a mask is closed with 1002 (wsframes.py; aiohttp's
        # reader would accept it), with one line throttled per client network.
        ws = MaskCheckedWebSocketResponse(
            autoping=False,
            max_msg_size=4 * self.limits.max_message_bytes,
            on_unmasked=lambda: self.refusal_lines.get(address_key).log(
                log, logging.INFO, "refused an unmasked WebSocket frame: closed with 1002"
            ),
        )
        await ws.prepare(request)
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="ws-liveness")
        peer = Peer(
            id=self.hub.new_peer_id(),
            post=_drop,
            network_key=group_key(address),
            address=address_key,
            site=site_key(address),
        )
        conn = Connection(
            ws, request.transport, peer, self.limits, self.refusal_lines.get(address_key)
        )
        self.hub.connect(conn.peer)
        self.connections.add(conn)
        conn.start()
        hello_timer = asyncio.get_running_loop().call_later(
            self.limits.hello_timeout_s, self._hello_timeout, conn
        )
        room_from_url = request.query.get("room")
        # Lifecycle lines are debug: a connection flood would otherwise write several info lines
        # per socket. Membership changes (rooms.py) stay at info.
        log.debug("peer %s connected", conn.peer.id)
        try:
            async for frame in ws:
                conn.last_heard, conn.pinged = asyncio.get_running_loop().time(), False
                if frame.type is WSMsgType.TEXT:
                    self._on_text(conn, frame.data, room_from_url)
                elif frame.type is WSMsgType.PING:
                    if conn.rate.take():
                        conn.control(WSMsgType.PONG, frame.data)
                elif frame.type is WSMsgType.PONG:
                    pass  # heard from: that is all a pong is for
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
            # Peer and connection point at each other (``peer.post`` is ``conn.post``): cut the
            # cycle so the socket's memory goes when the handler returns, not at the next full
            # garbage collection.
            conn.peer.post = _drop
            log.debug("peer %s disconnected", conn.peer.id)
        return ws

    async def close_all(self, timeout_s: float = 2.0) -> None:
        """Server shutdown: tell every client to go (1001) and give the close frames a moment.

        aiohttp cancels handlers soon after ``on_shutdown`` returns; without the wait a client
        sees its socket drop (1006) instead of a clean "going away".
        """
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
            self._sweeper = None
        writers = [conn.writer for conn in self.connections if conn.writer is not None]
        for conn in list(self.connections):
            conn.post(Close(CLOSE_GOING_AWAY, "server shutting down"))
        if writers:
            await asyncio.wait(writers, timeout=timeout_s)

    async def _sweep(self) -> None:
        """Every half heartbeat: ping the sockets silent for a heartbeat, abort those that stayed
        silent since the ping (a dead peer, or one that does not read)."""
        period = self.limits.heartbeat_s / 2
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(self.connections):
                silent = now - conn.last_heard
                if conn.pinged and silent >= self.limits.heartbeat_s + period:
                    log.debug("peer %s: no answer to a ping, dropping", conn.peer.id)
                    conn.abort()
                elif not conn.pinged and silent >= self.limits.heartbeat_s:
                    conn.pinged = True
                    conn.control(WSMsgType.PING)

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
        if conn.closing:
            return  # the frames that follow a close are not acted on (and cost nothing)
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
            if conn.peer.state is MemberState.CONNECTED:
                # A refused first message costs the hello it stood for: a loop of sockets each
                # sending one bad hello (a room code that does not parse) and closing would
                # otherwise never meet the hello pace, nor the 429 at the door.
                self._spend_hello(conn)
            at_door = exc.ref == "hello" and exc.code == "rate-limited"
            if at_door:
                self.door_lines.log(log, logging.INFO, "peer %s: refused (%s) %s", conn.peer.id,
                                    exc.code, exc.message)  # fmt: skip
            conn.reject(exc, logged=at_door)
            if exc.ref == "hello" and exc.code in _FATAL_HELLO_CODES:
                if exc.code == "rate-limited":
                    code = CLOSE_ABUSE
                elif exc.code in INVITE_REFUSALS:
                    code = CLOSE_INVITE
                else:
                    code = CLOSE_PROTOCOL
                conn.post(Close(code, exc.code))
        except Exception as exc:
            # A bug must cost this message (and the sender a strike, so that a client which
            # found a way to trigger it cannot repeat it forever), never the loop or the other
            # clients; and one line, not a traceback, so that it cannot flood the log either.
            tb = exc.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb else "?"
            conn.log_lines.log(
                log, logging.ERROR, "peer %s: internal error handling a message: %s: %s at %s",
                conn.peer.id, type(exc).__name__, str(exc)[:200], where,
            )  # fmt: skip
            conn.reject(
                ProtocolError(
                    "internal-error",
                    "the server failed to handle this message",
                    "please report it with the server log",
                ),
                logged=True,
            )

    def _dispatch(
        self, conn: Connection, message: ClientMessage, room_from_url: str | None
    ) -> None:
        peer = conn.peer
        match message:
            case Ping(nonce=nonce):
                peer.send(Pong(nonce=nonce))
            case Hello():
                self._hello(conn, message, room_from_url)
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
            case InviteCreate():
                self.hub.create_invite(peer, message)
            case InviteRevoke():
                self.hub.revoke_invite(peer)

    def _spend_hello(self, conn: Connection) -> bool:
        """Take this socket's hello token from its network's bucket, once per socket; False
        when the network has none left."""
        if conn.hello_spent:
            return True
        conn.hello_spent = True
        return self.hellos.take(conn.peer.address)

    def _hello(self, conn: Connection, hello: Hello, room_from_url: str | None) -> None:
        if conn.peer.state is MemberState.CONNECTED and not self._spend_hello(conn):
            raise ProtocolError(
                "rate-limited",
                f"more than {self.limits.hello_burst} hellos from your network, then "
                f"{self.limits.hellos_per_s:g} per second",
                f"wait {self.hellos.bucket(conn.peer.address).retry_after_s():.0f} s, then "
                "reconnect",
                ref="hello",
            )
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
        self.hub.hello(conn.peer, hello, room)
