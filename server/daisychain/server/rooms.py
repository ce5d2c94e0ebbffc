"""Groups, private rooms and the membership state machine of every connected device.

A *group* is the set of devices that may see and signal each other. Automatic groups are keyed
by public address (``grouping.py``) and admit everyone who arrives from that address. A *room* is
a group keyed by a code: its first member is the host, and every later device waits in
``PENDING`` until the host approves or denies it (or the request times out). The server enforces
this: a pending device is in no member list, receives no membership events and can relay nothing.

Membership of one connection (``MemberState``), changed only through ``Peer._set_state``::

    CONNECTED --hello (auto group, or empty room)--> MEMBER
    CONNECTED --hello (room with members)---------> PENDING
    PENDING   --approve--> MEMBER     PENDING --deny--> DENIED     PENDING --timer--> EXPIRED
    PENDING   --last member left--> DENIED (reason "closed")
    PENDING   --place taken by another site's request--> DENIED (error room-busy)
    any state --socket closed--> LEFT

A room's host may also open an *invite link* (``invites.py``, docs/PROTOCOL.md "Invite links"):
a hello that carries its token goes straight ``CONNECTED -> MEMBER`` while the invite is open,
without a request to the host; a hello whose token is wrong, expired, revoked or used up is
refused with that reason and closed (4401), never turned into a join request. The invite belongs
to the room: the host's successor sees its counts and may revoke it; it goes when the room does.

When the host leaves, the oldest remaining member (earliest admitted) becomes host and everyone
is told. Only members are ever handed the room: a pending requester was admitted by nobody, so
when the last member leaves, every waiting request is closed (``denied`` with reason
``closed``, close 4410) rather than one requester being promoted to host, where it could deny
the host coming back. The next device to arrive finds an empty room and hosts it, as any first
arrival does.

Limits against one party hogging a room, for someone who holds its code:

* pace: an address (``Peer.address``: an IPv4 address, an IPv6 /64) may ask to join one room at
  ``join_requests`` pace (a token bucket per address and room);
* places: a room has ``max_pending``. One network may fill an idle room's list (a class behind
  one NAT joining its room at once). When the list is full, requests are counted in crowds by
  *site* (``Peer.site``, ``grouping.site_key``: an IPv4 /24, an IPv6 /48), because addresses
  are cheap where sites are not: one IPv6 site holds 65,536 /64s, each a ``Peer.address`` of
  its own. A request whose site has at least two fewer waiting than the most crowded site
  takes the place of that crowd's newest request (from its busiest address; the host gets
  ``join-request-closed`` reason ``dropped``, the requester ``room-busy``). So 16 requests
  from one site cannot keep a guest from elsewhere from reaching the host, and a site with a
  single request waiting (a real guest) never loses it: only a site with at least two waiting
  gives places up. The margin of two keeps places from swinging back and forth (a crowd of 2
  giving one to a crowd of 1 would leave 1 against 2, and the dropped requester could take it
  back by asking again);
* refusals: any other request is refused (``room-busy``, close 4400) and the host is told how
  many were (``join-requests-refused``), so a host whose list is full of strangers knows that
  guests may be shut out, and can answer the list or share a new room. The notice goes at most
  once per ``refused_notice_s``, with the latest count: a refusal takes no place, so a party
  with many addresses could otherwise turn each socket it opens into a message the host's page
  must handle.

What this does not stop: a party with requests from 16 sites, one each, fills a list that no
newcomer can fairly take a place from. Each request expires after ``join_timeout_s`` (and may
be made again); meanwhile the host sees them, can deny them, and is told of the refusals.

Everything here is synchronous: the hub mutates state and queues messages on each peer's outbox
in the same step, so every client sees events in the order the state changed.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from daisychain.server import redact
from daisychain.server.grouping import LOCAL_GROUP
from daisychain.server.invites import Invite, InviteBook
from daisychain.server.ratelimit import KeyedLimiter
from daisychain.wire.ice import IceConfig, IceIssuer
from daisychain.wire.signaling import (
    CLOSE_DENIED,
    CLOSE_JOIN_TIMEOUT,
    CLOSE_PROTOCOL,
    CLOSE_ROOM_CLOSED,
    PROTOCOL_VERSION,
    BroadcastFrom,
    Denied,
    GroupInfo,
    GroupKind,
    Hello,
    HostChanged,
    InviteCreate,
    JoinRequest,
    JoinRequestClosed,
    JoinRequestsRefused,
    PeerInfo,
    PeerJoined,
    PeerLeft,
    Pending,
    ProtocolError,
    ServerMessage,
    SignalFrom,
    Welcome,
    encode,
    error_from,
)
from daisychain.wire.signaling import Invite as InviteMessage

log = logging.getLogger(__name__)


class MemberState(enum.Enum):
    CONNECTED = "connected"  # socket open, no hello yet
    PENDING = "pending"  # asked to join a room; waiting for the host
    MEMBER = "member"  # in an automatic group, or admitted to a room
    DENIED = "denied"  # the host said no; the socket is being closed
    EXPIRED = "expired"  # the host did not answer in time; the socket is being closed
    LEFT = "left"  # socket closed; terminal


_TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    MemberState.CONNECTED: frozenset({MemberState.MEMBER, MemberState.PENDING, MemberState.LEFT}),
    MemberState.PENDING: frozenset(
        {MemberState.MEMBER, MemberState.DENIED, MemberState.EXPIRED, MemberState.LEFT}
    ),
    MemberState.MEMBER: frozenset({MemberState.LEFT}),
    MemberState.DENIED: frozenset({MemberState.LEFT}),
    MemberState.EXPIRED: frozenset({MemberState.LEFT}),
    MemberState.LEFT: frozenset(),
}


class InvalidStateError(RuntimeError):
    pass


@dataclass(frozen=True)
class Close:
    """Outbox item: close the socket with this code after the messages queued before it."""

    code: int
    reason: str


OutboxItem = str | Close


@dataclass(eq=False)
class Peer:
    """One connection. ``post`` queues an encoded message (or a Close) for its socket."""

    id: str
    post: Callable[[OutboxItem], None]
    network_key: str  # automatic group key from grouping.py; used when no room is asked for
    address: str = ""  # per-address limit key (grouping.network_key); "" in unit tests
    site: str = ""  # the crowd it counts in on a full waiting list (grouping.site_key)
    name: str = ""
    device: dict[str, Any] = field(default_factory=dict)
    state: MemberState = MemberState.CONNECTED
    group: Group | None = None

    def _set_state(self, new: MemberState) -> None:
        """The only place membership changes; logs ``old -> new`` and refuses illegal moves."""
        old = self.state
        if new == old:
            return
        if new not in _TRANSITIONS[old]:
            raise InvalidStateError(f"peer {self.id}: cannot go from {old.value} to {new.value}")
        self.state = new
        # A socket that leaves without ever saying hello changed nothing anyone could see.
        quiet = old is MemberState.CONNECTED and new is MemberState.LEFT
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "peer %s: %s -> %s",
            self.id,
            old.value,
            new.value,
            extra={"fields": {"peer": self.id, "old": old.value, "new": new.value}},
        )

    def info(self) -> PeerInfo:
        return PeerInfo(id=self.id, name=self.name, device=self.device)

    def send(self, message: ServerMessage) -> None:
        self.post(encode(message))


@dataclass(eq=False)
class Group:
    key: str  # "local", "v4:...", "v6:.../64" or "room:CODE"
    kind: GroupKind
    public_id: str
    # Insertion order is admission order: the first entry is the oldest member.
    members: dict[str, Peer] = field(default_factory=dict)
    pending: dict[str, Peer] = field(default_factory=dict)
    timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    host: str | None = None  # rooms only
    # Requests refused as room-busy, and how many the host has been told of (rooms only).
    refused: int = 0
    refused_told: int = 0
    refused_timer: asyncio.TimerHandle | None = None
    invites: InviteBook = field(default_factory=InviteBook)  # rooms only

    @property
    def is_room(self) -> bool:
        return self.kind == "room"

    @property
    def log_id(self) -> str:
        """The group in a log line: a room's public id is its code, the secret that lets
        someone ask to join, so logs name a room by a keyed tag (``redact.room_tag``);
        automatic groups' ids are already keyed hashes of their network."""
        return redact.room_tag(self.public_id) if self.is_room else self.public_id

    def to_members(self, message: ServerMessage, *, exclude: str | None = None) -> None:
        text = encode(message)  # encode once, however large the group
        for peer_id, peer in self.members.items():
            if peer_id != exclude:
                peer.post(text)


@dataclass(frozen=True)
class HubStats:
    peers: int
    groups: int
    rooms: int
    pending: int


class Hub:
    """All groups and rooms of one server process."""

    def __init__(
        self,
        *,
        max_group_size: int,
        max_pending: int,
        join_timeout_s: float,
        join_requests: KeyedLimiter,
        refused_notice_s: float = 1.0,
        ice: IceIssuer | None = None,
        invite_max_s: float = 24 * 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_group_size = max_group_size
        # Invites expire by this clock (tests inject one: expiry is tested without waiting).
        self.clock = clock
        self.invite_max_s = invite_max_s
        # The ICE servers and policy each welcome carries (none by default).
        self.ice = ice if ice is not None else IceIssuer(IceConfig())
        self.max_pending = max_pending
        self.join_timeout_s = join_timeout_s
        self.join_requests = join_requests
        self.refused_notice_s = refused_notice_s
        self.groups: dict[str, Group] = {}
        self.peers: dict[str, Peer] = {}
        # Per-process secret so automatic group ids reveal nothing about the address behind them.
        self._secret = secrets.token_bytes(16)

    # -- lifecycle ---------------------------------------------------------------------------

    def new_peer_id(self) -> str:
        while True:
            peer_id = secrets.token_urlsafe(9)  # 12 chars of [A-Za-z0-9_-]
            if peer_id not in self.peers:
                return peer_id

    def connect(self, peer: Peer) -> None:
        assert peer.id not in self.peers, f"peer id {peer.id} reused"
        self.peers[peer.id] = peer

    def hello(self, peer: Peer, hello: Hello, room: str | None) -> None:
        """Place a peer that said hello: into its automatic group, a room, or a room's queue."""
        if peer.state is not MemberState.CONNECTED:
            raise ProtocolError(
                "already-joined",
                f"hello already received (you are {peer.state.value})",
                "send hello once per connection; reconnect to change group or room",
                ref="hello",
            )
        peer.name = hello.name or f"device-{peer.id[:4]}"
        peer.device = hello.device
        if hello.invite is not None:
            self._admit_by_invite(peer, room, hello.invite)
            return
        if room is None:
            group = self._group(peer.network_key)
            if len(group.members) >= self.max_group_size:
                self._drop_if_empty(group)
                raise ProtocolError(
                    "group-full",
                    f"this network's group already has {self.max_group_size} devices",
                    "make a room with the page's Private room button (POST /api/rooms) and "
                    "share its link",
                    ref="hello",
                )
            self._admit(peer, group)
            return
        group = self._group(f"room:{room}")
        if not group.members:
            self._admit(peer, group)
            return
        self._check_request(peer, group)
        self._queue_request(peer, group)

    def _admit_by_invite(self, peer: Peer, room: str | None, token: str) -> None:
        """Admit ``peer`` on an invite of ``room`` and count the use, or refuse it with the
        invite's reason (``invites.py``). A refused token is not made a join request: the device
        asked to come in by link, and its person is told why the link did not work."""
        if room is None:
            raise ProtocolError(
                "bad-invite",
                "hello.invite was given without a room",
                "open the invite link as the host shared it: it names the room (?room=CODE)",
                ref="hello",
            )
        group = self.groups.get(f"room:{room}")
        if group is None or not group.members:
            # No such room now: its invites went with it. (Nothing is created for the asker.)
            raise ProtocolError(
                "invite-unknown",
                "this invite link's room is not open (everyone left it, or it never existed)",
                "ask the host to open the room and make a new invite link",
                ref="hello",
            )
        if len(group.members) >= self.max_group_size:
            raise ProtocolError(
                "group-full",
                f"this room already has {self.max_group_size} devices",
                "ask the host to make room, or to start a second room",
                ref="hello",
            )
        invite = group.invites.admit(token, self.clock())
        log.info(
            "room %s: peer %s admitted by invite %s (%d of %d used)",
            group.log_id, peer.id, invite.tag, invite.used, invite.uses,
        )  # fmt: skip
        self._admit(peer, group)
        self._tell_invite(group, invite)

    def create_invite(self, host: Peer, request: InviteCreate) -> None:
        """Host only: open a new invite link (revoking the room's open one) and send it to the
        host, token included: the only time the token leaves the server."""
        group = self._hosted_room(host, request.type)
        if request.expires_s > self.invite_max_s:
            raise ProtocolError(
                "bad-message",
                f"invite-create.expires_s must be at most {self.invite_max_s:g} s on this server",
                f"choose an expiry of at most {self.invite_max_s / 3600:g} h (the server's "
                "--invite-max-hours)",
                ref=request.type,
            )
        now = self.clock()
        token, invite = group.invites.create(request.uses, request.expires_s, now)
        log.info(
            "room %s: invite %s opened by %s (%d uses, %g s)",
            group.log_id, invite.tag, host.id, invite.uses, request.expires_s,
        )  # fmt: skip
        host.send(self._invite_message(invite, now, token))

    def revoke_invite(self, host: Peer) -> None:
        """Host only: close the room's invite now; the devices it admitted stay."""
        group = self._hosted_room(host, "invite-revoke")
        invite = group.invites.revoke()
        if invite is None:
            raise ProtocolError(
                "invite-unknown",
                "this room has no invite link to revoke",
                "make one first (invite-create)",
                ref="invite-revoke",
            )
        log.info("room %s: invite %s revoked by %s", group.log_id, invite.tag, host.id)
        self._tell_invite(group, invite)

    def _invite_message(self, invite: Invite, now: float, token: str | None) -> InviteMessage:
        return InviteMessage(
            token=token,
            uses=invite.uses,
            used=invite.used,
            expires_in_s=invite.expires_in_s(now),
            status=invite.status(now),
        )

    def _tell_invite(self, group: Group, invite: Invite) -> None:
        self._to_host(group, self._invite_message(invite, self.clock(), None))

    def _check_request(self, peer: Peer, group: Group) -> None:
        """Refuse a join request that comes too fast, or that the room has no place for."""
        bucket = self.join_requests.bucket(f"{peer.address} {group.key}")
        if not bucket.take():
            raise ProtocolError(
                "rate-limited",
                f"more than {self.join_requests.burst:g} join requests to this room from your "
                f"network, then one per {1 / self.join_requests.rate_per_s:g} s",
                f"wait {bucket.retry_after_s():.0f} s, then reconnect (the host sees every "
                "request; please do not retry in a loop)",
                ref="hello",
            )
        if len(group.pending) < self.max_pending:
            return
        victim = self._crowding_request(group, peer.site)
        if victim is None:
            self._count_refusal(group)
            raise ProtocolError(
                "room-busy",
                f"the host already has {self.max_pending} join requests to answer",
                "wait a minute and reconnect, or ask the host to answer the waiting requests "
                "(the host is told that requests are being turned away)",
                ref="hello",
            )
        self._drop_request(group, victim)

    def _crowding_request(self, group: Group, site: str) -> Peer | None:
        """The request that gives its place to one from ``site``, or None (see the docstring):
        the newest request of the busiest address in the most crowded site, if that site has at
        least two more waiting than ``site``. Ties go to the newest request, so the requests
        that have waited longest, and that the host may be reading, stay."""
        waiting = list(group.pending.values())  # oldest first
        sites = Counter(requester.site for requester in waiting)
        most = max(sites.values())
        if most < sites[site] + 2:
            return None
        top = next(r.site for r in reversed(waiting) if sites[r.site] == most)
        crowd = [r for r in waiting if r.site == top]
        addresses = Counter(requester.address for requester in crowd)
        busiest = max(addresses.values())
        return next(r for r in reversed(crowd) if addresses[r.address] == busiest)

    def _count_refusal(self, group: Group) -> None:
        """A request to ``group`` was refused as room-busy: tell the host, now or, if it was
        told within the last ``refused_notice_s``, with the latest count when that time is up."""
        group.refused += 1
        if group.refused_timer is None:
            self._tell_refused(group)

    def _tell_refused(self, group: Group) -> None:
        """Send the host the refusal count if it grew, and hold the next notice back for
        ``refused_notice_s`` (also the timer's callback)."""
        group.refused_timer = None
        if group.refused == group.refused_told:
            return
        group.refused_told = group.refused
        self._to_host(group, JoinRequestsRefused(count=group.refused))
        loop = asyncio.get_running_loop()
        group.refused_timer = loop.call_later(self.refused_notice_s, self._tell_refused, group)

    def _drop_request(self, group: Group, requester: Peer) -> None:
        del group.pending[requester.id]
        self._cancel_timer(group, requester.id)
        requester._set_state(MemberState.DENIED)
        requester.send(
            error_from(
                ProtocolError(
                    "room-busy",
                    "your join request gave its place to another network's: this room's "
                    "waiting list is full, and most of it is from your network (addresses in "
                    "one IPv4 /24 or IPv6 /48 count as one)",
                    "wait until the host has answered the others, then reconnect",
                    ref="hello",
                )
            )
        )
        requester.post(Close(CLOSE_PROTOCOL, "room-busy"))
        self._to_host(group, JoinRequestClosed(peer=requester.id, reason="dropped"))

    def disconnect(self, peer: Peer) -> None:
        """Remove a closed connection from wherever it is; safe to call in any state."""
        self.peers.pop(peer.id, None)
        group, previous = peer.group, peer.state
        if peer.state is not MemberState.LEFT:
            peer._set_state(MemberState.LEFT)
        if group is None:
            return
        peer.group = None
        if previous is MemberState.PENDING or peer.id in group.pending:
            group.pending.pop(peer.id, None)
            self._cancel_timer(group, peer.id)
            if previous is MemberState.PENDING:
                self._to_host(group, JoinRequestClosed(peer=peer.id, reason="left"))
        elif group.members.pop(peer.id, None) is not None:
            group.to_members(PeerLeft(peer=peer.id))
            if group.host == peer.id:
                self._hand_off_host(group)
        self._drop_if_empty(group)

    # -- room decisions ----------------------------------------------------------------------

    def approve(self, host: Peer, peer_id: str) -> None:
        group, requester = self._pending_for_host(host, peer_id, "approve")
        self._cancel_timer(group, peer_id)
        del group.pending[peer_id]
        host.send(JoinRequestClosed(peer=peer_id, reason="approved"))
        self._admit(requester, group)

    def deny(self, host: Peer, peer_id: str) -> None:
        group, requester = self._pending_for_host(host, peer_id, "deny")
        self._cancel_timer(group, peer_id)
        del group.pending[peer_id]
        requester._set_state(MemberState.DENIED)
        requester.send(
            Denied(
                reason="denied",
                message="the host of this room declined your request to join",
                hint="ask the host to approve you, then reconnect",
            )
        )
        requester.post(Close(CLOSE_DENIED, "join request denied"))
        host.send(JoinRequestClosed(peer=peer_id, reason="denied"))

    def expire(self, group: Group, peer_id: str) -> None:
        """Timer callback: the host did not answer ``peer_id`` in time."""
        group.timers.pop(peer_id, None)
        requester = group.pending.pop(peer_id, None)
        if requester is None:
            return
        requester._set_state(MemberState.EXPIRED)
        requester.send(
            Denied(
                reason="timeout",
                message=f"the host did not answer within {self.join_timeout_s:g} s",
                hint="make sure the host has the room open, then reconnect to ask again",
            )
        )
        requester.post(Close(CLOSE_JOIN_TIMEOUT, "join request timed out"))
        self._to_host(group, JoinRequestClosed(peer=peer_id, reason="timeout"))

    # -- relaying ----------------------------------------------------------------------------

    def relay_signal(self, sender: Peer, to: str, data: dict[str, Any]) -> None:
        group = self._member_group(sender, "signal")
        target = group.members.get(to)
        if target is None or to == sender.id:
            raise ProtocolError(
                "unknown-peer",
                f"no other member {to!r} in your group",
                "use an id from welcome/peer-joined; the peer may have left (see peer-left)",
                ref="signal",
            )
        # ``from`` is the server's record of who sent it, never the client's claim.
        target.send(SignalFrom(from_=sender.id, data=data))

    def broadcast(self, sender: Peer, data: dict[str, Any]) -> None:
        group = self._member_group(sender, "broadcast")
        group.to_members(BroadcastFrom(from_=sender.id, data=data), exclude=sender.id)

    def stats(self) -> HubStats:
        rooms = sum(1 for group in self.groups.values() if group.is_room)
        pending = sum(len(group.pending) for group in self.groups.values())
        return HubStats(
            peers=len(self.peers), groups=len(self.groups) - rooms, rooms=rooms, pending=pending
        )

    # -- internals ---------------------------------------------------------------------------

    def _group(self, key: str) -> Group:
        group = self.groups.get(key)
        if group is None:
            kind: GroupKind
            if key.startswith("room:"):
                kind, public_id = "room", key.removeprefix("room:")
            else:
                kind = "local" if key == LOCAL_GROUP else "network"
                digest = hmac.new(self._secret, key.encode(), hashlib.sha256).hexdigest()
                public_id = digest[:12]
            group = Group(key=key, kind=kind, public_id=public_id)
            self.groups[key] = group
            log.info("group %s created", group.log_id, extra={"fields": {"kind": kind}})
        return group

    def _drop_if_empty(self, group: Group) -> None:
        if not group.members and not group.pending and self.groups.get(group.key) is group:
            if group.refused_timer is not None:
                group.refused_timer.cancel()
                group.refused_timer = None
            del self.groups[group.key]
            log.info("group %s closed", group.log_id, extra={"fields": {"kind": group.kind}})

    def _admit(self, peer: Peer, group: Group) -> None:
        peer._set_state(MemberState.MEMBER)
        peer.group = group
        others = [member.info() for member in group.members.values()]
        group.members[peer.id] = peer
        if group.is_room and group.host is None:
            group.host = peer.id
        peer.send(
            Welcome(
                version=PROTOCOL_VERSION,
                id=peer.id,
                group=GroupInfo(kind=group.kind, id=group.public_id),
                role="host" if group.host == peer.id else "member",
                host=group.host,
                members=others,
                ice_servers=self.ice.servers(peer.id),
                ice_transport_policy=self.ice.policy,
            )
        )
        group.to_members(PeerJoined(peer=peer.info()), exclude=peer.id)

    def _queue_request(self, peer: Peer, group: Group) -> None:
        peer._set_state(MemberState.PENDING)
        peer.group = group
        group.pending[peer.id] = peer
        loop = asyncio.get_running_loop()
        group.timers[peer.id] = loop.call_later(self.join_timeout_s, self.expire, group, peer.id)
        peer.send(
            Pending(
                id=peer.id,
                room=group.public_id,
                timeout_s=self.join_timeout_s,
                message="waiting for the host of this room to approve you",
            )
        )
        self._to_host(group, JoinRequest(peer=peer.info(), expires_in_s=self.join_timeout_s))

    def _hand_off_host(self, group: Group) -> None:
        if group.members:
            group.host = next(iter(group.members))
            log.info("room %s: host -> %s", group.log_id, group.host)
            group.to_members(HostChanged(host=group.host))
            # The new host must see the requests that were waiting for the old one.
            loop = asyncio.get_running_loop()
            for peer_id, requester in group.pending.items():
                timer = group.timers.get(peer_id)
                remaining = timer.when() - loop.time() if timer else self.join_timeout_s
                self._to_host(group, JoinRequest(requester.info(), max(0.0, remaining)))
            # ... and the room's invite link, to follow its counts or revoke it (not its token).
            if group.invites.latest is not None:
                self._tell_invite(group, group.invites.latest)
            return
        group.host = None
        # Nobody is left who could approve: close the waiting requests (see the docstring).
        for peer_id, requester in list(group.pending.items()):
            del group.pending[peer_id]
            self._cancel_timer(group, peer_id)
            requester._set_state(MemberState.DENIED)
            requester.send(
                Denied(
                    reason="closed",
                    message="everyone left this room while your request waited",
                    hint="ask the host to open the room again, then reconnect",
                )
            )
            requester.post(Close(CLOSE_ROOM_CLOSED, "room closed"))

    def _to_host(self, group: Group, message: ServerMessage) -> None:
        host = group.members.get(group.host) if group.host else None
        if host is not None:
            host.send(message)

    def _cancel_timer(self, group: Group, peer_id: str) -> None:
        timer = group.timers.pop(peer_id, None)
        if timer is not None:
            timer.cancel()

    def _member_group(self, sender: Peer, kind: str) -> Group:
        if sender.state is not MemberState.MEMBER or sender.group is None:
            if sender.state is MemberState.PENDING:
                hint = "wait until the host approves you (you will receive welcome)"
            else:
                hint = "send hello first and wait for welcome"
            message = f"you are not a member of a group ({sender.state.value})"
            raise ProtocolError("not-admitted", message, hint, kind)
        return sender.group

    def _hosted_room(self, host: Peer, kind: str) -> Group:
        """The room ``host`` hosts, or ``not-host``: only a room's host answers its requests
        and opens or revokes its invite links."""
        group = host.group
        if host.state is not MemberState.MEMBER or group is None or group.host != host.id:
            raise ProtocolError(
                "not-host",
                "only the host of a room can answer join requests and make or revoke invite links",
                "the host is named in welcome.host and host-changed",
                ref=kind,
            )
        return group

    def _pending_for_host(self, host: Peer, peer_id: str, kind: str) -> tuple[Group, Peer]:
        group = self._hosted_room(host, kind)
        requester = group.pending.get(peer_id)
        if requester is None:
            raise ProtocolError(
                "unknown-peer",
                f"no pending join request from {peer_id!r}",
                "it may have timed out or left (see join-request-closed)",
                ref=kind,
            )
        return group, requester
