"""Every signaling message on ``/ws``, declared once, parsed and validated in one place.

The normative description is ``docs/PROTOCOL.md`` (section *Signaling*); the browser mirrors these
declarations. A client message is turned into one of the ``ClientMessage`` records by
``parse_client`` or rejected with a ``ProtocolError`` that carries a code and a hint; nothing else
in the server looks at raw JSON. Server messages are records too and leave through ``encode``.

Fields a client is not allowed to set (``from`` above all) are not part of the client records, so
a forged value is simply never read: the server builds every outgoing record itself. What a host
is shown of a device (``hello.name`` and ``hello.device``) is checked by kind in
``wire.deviceinfo``, which the clients apply to what the server relays too.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

from daisychain.wire import deviceinfo
from daisychain.wire.deviceinfo import DeviceSummary
from daisychain.wire.fields import PEER_ID_RE, Fields

PROTOCOL_VERSION = 1

ROOM_CODE_RE = re.compile(r"[A-Za-z0-9_-]{6,32}")
# An invite token (docs/PROTOCOL.md, "Invite links"): the server mints 32 characters of
# base64url (192 random bits); a hello may carry up to 64 of the same alphabet, so that a
# server minting longer tokens later is still understood, and nothing longer is ever read.
INVITE_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_INVITE_CHARS = 64
# Devices one invite admits (the host chooses; the room's size limit applies on top).
MIN_INVITE_USES = 1
MAX_INVITE_USES = 256
# hello.name and hello.device (their rules by kind: wire/deviceinfo.py)
MAX_NAME_CHARS = deviceinfo.MAX_NAME_CHARS
MAX_DEVICE_KEYS = deviceinfo.MAX_DEVICE_KEYS
MAX_DEVICE_KEY_CHARS = deviceinfo.MAX_DEVICE_KEY_CHARS
MAX_DEVICE_VALUE_CHARS = deviceinfo.MAX_DEVICE_VALUE_CHARS
MAX_NONCE_CHARS = 64
# Nesting of a whole client message, the message object itself being level 1 (``data`` is 2).
# SDP descriptions and ICE candidates are 2-3 levels deep; 32 leaves room for any small control
# message and keeps every later step (relay, encode) far from Python's recursion limit, which a
# 600-900 level ``data`` used to hit while the reply was built.
MAX_JSON_DEPTH = 32
PEER_ID_EXPECTED = "a peer id from welcome/peer-joined"

# Close codes (4000-4999 is the application range of RFC 6455).
CLOSE_PROTOCOL = 4400  # bad hello: wrong version, bad room code
CLOSE_DENIED = 4403  # the host denied the join request
CLOSE_JOIN_TIMEOUT = 4408  # the host did not answer in time
CLOSE_ROOM_CLOSED = 4410  # everyone left the room while the join request waited
CLOSE_INVITE = 4401  # the hello's invite is malformed, unknown, expired, revoked or used up
CLOSE_ABUSE = 4429  # too many rejected messages, or too many connections/hellos from one address
CLOSE_GOING_AWAY = 1001  # server shutting down

ErrorCode = Literal[
    "bad-json",
    "bad-message",
    "unknown-type",
    "too-large",
    "binary-unsupported",
    "rate-limited",
    "hello-first",
    "already-joined",
    "version-mismatch",
    "bad-room-code",
    "not-admitted",
    "not-host",
    "unknown-peer",
    "group-full",
    "room-busy",
    "bad-invite",
    "invite-unknown",
    "invite-expired",
    "invite-revoked",
    "invite-used-up",
    "internal-error",
]
# The refusals of a hello's invite: each ends the connection (close 4401), and none is turned
# into a join request to the host (docs/PROTOCOL.md, "Invite links").
INVITE_REFUSALS: tuple[ErrorCode, ...] = (
    "bad-invite", "invite-unknown", "invite-expired", "invite-revoked", "invite-used-up",
)  # fmt: skip


class ProtocolError(Exception):
    """A message the server will not act on; becomes an ``error`` reply."""

    def __init__(self, code: ErrorCode, message: str, hint: str, ref: str | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.hint = hint
        self.ref = ref


GroupKind = Literal["local", "network", "room"]


# ---------------------------------------------------------------------------------------------
# Client -> server


@dataclass(frozen=True)
class Hello:
    """First message of every connection: who I am and which room I want (if any)."""

    version: int
    name: str
    device: DeviceSummary
    room: str | None = None
    # An invite token of ``room`` (the ``#invite=`` of the host's link): admitted without the
    # host's approval while the invite is open; refused with its reason otherwise.
    invite: str | None = None
    type: Literal["hello"] = "hello"


@dataclass(frozen=True)
class Signal:
    """Relay ``data`` (an SDP description or ICE candidate) to one member of my group."""

    to: str
    data: dict[str, Any]
    type: Literal["signal"] = "signal"


@dataclass(frozen=True)
class Broadcast:
    """Relay a small control message to every other member of my group."""

    data: dict[str, Any]
    type: Literal["broadcast"] = "broadcast"


@dataclass(frozen=True)
class Approve:
    """Host only: admit a pending device into the room."""

    peer: str
    type: Literal["approve"] = "approve"


@dataclass(frozen=True)
class Deny:
    """Host only: refuse a pending device."""

    peer: str
    type: Literal["deny"] = "deny"


@dataclass(frozen=True)
class InviteCreate:
    """Host only: open an invite link that admits ``uses`` devices for ``expires_s`` seconds
    without a click each; it replaces (revokes) the room's open invite, if any."""

    uses: int
    expires_s: float
    type: Literal["invite-create"] = "invite-create"


@dataclass(frozen=True)
class InviteRevoke:
    """Host only: close the room's open invite now (devices it admitted stay)."""

    type: Literal["invite-revoke"] = "invite-revoke"


@dataclass(frozen=True)
class Ping:
    """Application-level liveness/latency probe; answered with ``pong`` echoing ``nonce``."""

    nonce: str | int | None = None
    type: Literal["ping"] = "ping"


ClientMessage = Hello | Signal | Broadcast | Approve | Deny | InviteCreate | InviteRevoke | Ping


# ---------------------------------------------------------------------------------------------
# Server -> client


@dataclass(frozen=True)
class PeerInfo:
    id: str
    name: str
    device: DeviceSummary


@dataclass(frozen=True)
class GroupInfo:
    # "local": every device on a private/loopback address; "network": one public address (IPv4)
    # or /64 (IPv6); "room": a private room. ``id`` is opaque for the first two (never an
    # address) and the room code for rooms.
    kind: GroupKind
    id: str


@dataclass(frozen=True)
class IceServer:
    """One entry of ``RTCConfiguration.iceServers`` (WebRTC's names); credentials for TURN."""

    urls: list[str]
    username: str | None = None
    credential: str | None = None


@dataclass(frozen=True)
class Welcome:
    """You are in: your id, your group, who is there (oldest first) and who hosts it, and the
    ICE servers and transport policy to connect to the others with (none: host candidates)."""

    version: int
    id: str
    group: GroupInfo
    role: Literal["host", "member"]
    host: str | None
    members: list[PeerInfo]
    ice_servers: list[IceServer] = field(default_factory=list)
    ice_transport_policy: Literal["all", "relay"] = "all"
    type: Literal["welcome"] = "welcome"


@dataclass(frozen=True)
class Pending:
    """Your join request was sent to the room's host; wait for ``welcome`` or ``denied``."""

    id: str
    room: str
    timeout_s: float
    message: str
    type: Literal["pending"] = "pending"


@dataclass(frozen=True)
class Denied:
    """Your join request was refused (``denied``), not answered (``timeout``), or the room lost
    its last member while you waited (``closed``); the socket closes next."""

    reason: Literal["denied", "timeout", "closed"]
    message: str
    hint: str
    type: Literal["denied"] = "denied"


@dataclass(frozen=True)
class JoinRequest:
    """To the host: a device asks to join; answer with approve/deny before ``expires_in_s``."""

    peer: PeerInfo
    expires_in_s: float
    type: Literal["join-request"] = "join-request"


@dataclass(frozen=True)
class JoinRequestClosed:
    """To the host: a request is no longer pending (answered, timed out, requester left, or
    dropped to give its place to another network's request)."""

    peer: str
    reason: Literal["approved", "denied", "timeout", "left", "dropped"]
    type: Literal["join-request-closed"] = "join-request-closed"


@dataclass(frozen=True)
class JoinRequestsRefused:
    """To the host: requests to join were refused (``room-busy``) without reaching you, the
    waiting list being full; ``count`` is how many so far in this room (it only grows). Sent at
    most once per ``refused_notice_s`` with the latest count, however fast they come."""

    count: int
    type: Literal["join-requests-refused"] = "join-requests-refused"


InviteStatus = Literal["open", "revoked", "expired", "used-up"]


@dataclass(frozen=True)
class Invite:
    """To the host: the room's latest invite link. ``token`` only in the answer to
    ``invite-create`` (the server keeps a hash of it, never the token itself, so a host that
    took over later sees the counts but not the link); then again after every use, on
    revocation, on expiry seen at a join, and to a new host."""

    token: str | None
    uses: int
    used: int
    expires_in_s: float
    status: InviteStatus
    type: Literal["invite"] = "invite"


@dataclass(frozen=True)
class PeerJoined:
    peer: PeerInfo
    type: Literal["peer-joined"] = "peer-joined"


@dataclass(frozen=True)
class PeerLeft:
    peer: str
    type: Literal["peer-left"] = "peer-left"


@dataclass(frozen=True)
class HostChanged:
    host: str
    type: Literal["host-changed"] = "host-changed"


@dataclass(frozen=True)
class SignalFrom:
    from_: str
    data: dict[str, Any]
    type: Literal["signal"] = "signal"


@dataclass(frozen=True)
class BroadcastFrom:
    from_: str
    data: dict[str, Any]
    type: Literal["broadcast"] = "broadcast"


@dataclass(frozen=True)
class Pong:
    nonce: str | int | None = None
    type: Literal["pong"] = "pong"


@dataclass(frozen=True)
class Error:
    code: ErrorCode
    message: str
    hint: str
    ref: str | None = None
    type: Literal["error"] = "error"


ServerMessage = (
    Welcome
    | Pending
    | Denied
    | JoinRequest
    | JoinRequestClosed
    | JoinRequestsRefused
    | Invite
    | PeerJoined
    | PeerLeft
    | HostChanged
    | SignalFrom
    | BroadcastFrom
    | Pong
    | Error
)

CLIENT_TYPES = (
    "hello", "signal", "broadcast", "approve", "deny", "invite-create", "invite-revoke", "ping",
)  # fmt: skip


def encode(message: ServerMessage) -> str:
    """Serialize a server record; ``from_`` goes on the wire as ``from``.

    Relayed ``data`` is passed through as parsed (``parse_client`` bounded its depth and refused
    non-finite numbers), not deep-copied the way ``dataclasses.asdict`` would.
    """
    obj: dict[str, Any] = {"type": message.type}
    for item in fields(message):
        if item.name != "type":
            obj["from" if item.name == "from_" else item.name] = _plain(getattr(message, item.name))
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def _plain(value: Any) -> Any:
    """Nested records (``PeerInfo``, ``GroupInfo``) as dicts; everything else as it is."""
    if is_dataclass(value) and not isinstance(value, type):
        return {item.name: _plain(getattr(value, item.name)) for item in fields(value)}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def error_from(exc: ProtocolError) -> Error:
    return Error(code=exc.code, message=exc.message, hint=exc.hint, ref=exc.ref)


# ---------------------------------------------------------------------------------------------
# Parsing: the one place where client JSON is trusted to have a shape.


def parse_client(raw: str, *, max_broadcast_bytes: int) -> ClientMessage:
    """Parse one text frame into a client record, or raise ``ProtocolError``.

    Unknown fields are ignored (forward compatibility, and so that a forged ``from`` is dropped
    rather than trusted); missing or mistyped known fields are errors. JSON that Python's parser
    accepts but the protocol does not is refused here too, before anything acts on it: nesting
    deeper than ``MAX_JSON_DEPTH`` and the non-finite numbers ``NaN``, ``Infinity`` and literals
    such as ``1e999`` that overflow to infinity (none of them is JSON, RFC 8259 section 6).
    """
    try:
        obj = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except _NonFinite as exc:
        raise ProtocolError(
            "bad-json",
            f"message holds the non-finite number {exc.text[:24]!r}, which JSON does not allow",
            "send finite numbers only (NaN and Infinity have no JSON form)",
        ) from None
    except (ValueError, RecursionError):
        raise ProtocolError(
            "bad-json", "message is not valid JSON", "send one JSON object per text frame"
        ) from None
    if _deeper_than(obj, raw, MAX_JSON_DEPTH):
        raise ProtocolError(
            "bad-json",
            f"message is nested deeper than {MAX_JSON_DEPTH} levels",
            "signaling data is an SDP description or an ICE candidate: a flat object",
        )
    if not isinstance(obj, dict):
        raise ProtocolError(
            "bad-message", "message is not a JSON object", 'send an object like {"type": "ping"}'
        )
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in CLIENT_TYPES:
        shown = kind if isinstance(kind, str) else None
        raise ProtocolError(
            "unknown-type",
            f"unknown message type {shown!r}"[:120],
            f"client messages are: {', '.join(CLIENT_TYPES)} (docs/PROTOCOL.md)",
            ref=shown[:32] if shown else None,
        )
    f = _Fields(obj, kind)
    if kind == "hello":
        room = f.optional_text("room")
        if room is not None:
            room = check_room_code(room)
        invite = obj.get("invite")
        if invite is not None:
            invite = check_invite_token(invite)
        return Hello(
            version=f.integer("version"),
            name=_name(obj.get("name", ""), kind),
            device=_device(obj.get("device", {}), kind),
            room=room,
            invite=invite,
        )
    if kind == "signal":
        return Signal(to=f.matching("to", PEER_ID_RE, PEER_ID_EXPECTED), data=f.obj("data"))
    if kind == "broadcast":
        if len(raw.encode("utf-8")) > max_broadcast_bytes:
            raise ProtocolError(
                "too-large",
                f"broadcast is larger than {max_broadcast_bytes} bytes",
                "broadcast only small control messages; send bulk data over a data channel",
                ref=kind,
            )
        return Broadcast(data=f.obj("data"))
    if kind == "approve":
        return Approve(peer=f.matching("peer", PEER_ID_RE, PEER_ID_EXPECTED))
    if kind == "deny":
        return Deny(peer=f.matching("peer", PEER_ID_RE, PEER_ID_EXPECTED))
    if kind == "invite-create":
        return InviteCreate(
            uses=f.integer("uses", MIN_INVITE_USES, MAX_INVITE_USES),
            expires_s=f.number("expires_s", 1.0, 366 * 86_400.0),
        )
    if kind == "invite-revoke":
        return InviteRevoke()
    assert kind == "ping", f"CLIENT_TYPES and parse_client disagree on {kind!r}"
    nonce = obj.get("nonce")
    if nonce is not None and not _is_nonce(nonce):
        raise _bad(kind, "nonce", f"a string of at most {MAX_NONCE_CHARS} characters or an int")
    return Ping(nonce=nonce)


class _NonFinite(ValueError):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _refuse_constant(text: str) -> float:
    raise _NonFinite(text)  # "NaN", "Infinity", "-Infinity"


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(text)  # e.g. 1e999
    return value


def _deeper_than(obj: object, raw: str, limit: int) -> bool:
    """Whether ``obj`` (parsed from ``raw``) nests more than ``limit`` containers deep.

    Exact, and cheap for real messages: a text with at most ``limit`` brackets cannot nest
    deeper (``str.count`` runs in C), so only a message holding many containers is walked, once,
    iteratively: the walk itself cannot overflow the stack.
    """
    if not isinstance(obj, dict | list) or raw.count("[") + raw.count("{") <= limit:
        return False
    stack: list[tuple[dict[Any, Any] | list[Any], int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        for child in value.values() if isinstance(value, dict) else value:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def check_room_code(code: str) -> str:
    if not ROOM_CODE_RE.fullmatch(code):
        raise ProtocolError(
            "bad-room-code",
            "room code must be 6-32 characters of A-Z a-z 0-9 - _",
            "check the link you were given, or make a new room with the page's Private room button "
            "(POST /api/rooms)",
            ref="hello",
        )
    return code


def check_invite_token(token: object) -> str:
    """A hello's invite token as text of the token alphabet, or ``bad-invite``. Its value is
    never echoed: a token is a secret, and error messages reach logs."""
    if not isinstance(token, str) or not INVITE_TOKEN_RE.fullmatch(token):
        size = f"{len(token)} characters" if isinstance(token, str) else type(token).__name__
        raise ProtocolError(
            "bad-invite",
            f"hello.invite must be 16-{MAX_INVITE_CHARS} characters of A-Z a-z 0-9 - _ "
            f"(got {size})",
            "open the invite link exactly as the host shared it, or ask the host for a new "
            "invite link",
            ref="hello",
        )
    return token


def _bad(kind: str, name: str, expected: str) -> ProtocolError:
    return ProtocolError(
        "bad-message",
        f"{kind}.{name} must be {expected}",
        "see the message declarations in docs/PROTOCOL.md",
        ref=kind,
    )


class _Fields(Fields):
    """Shared field checks (``daisychain.wire.fields``) with this protocol's error, hint and ref."""

    def bad(self, name: str, expected: str) -> ProtocolError:
        return _bad(self.kind, name, expected)


def _name(value: object, kind: str) -> str:
    """The stripped name; ``""`` when none of it can be seen (the hub then names the device
    ``device-XXXX``), refused when it is not printable (``deviceinfo.check_name``)."""
    try:
        return deviceinfo.check_name(value)
    except deviceinfo.DeviceInfoError as exc:
        raise _bad(kind, exc.field, exc.expected) from None


def _device(value: object, kind: str) -> DeviceSummary:
    """The device summary, its shown keys checked by kind (``deviceinfo.check_device``)."""
    try:
        return deviceinfo.check_device(value)
    except deviceinfo.DeviceInfoError as exc:
        raise _bad(kind, exc.field, exc.expected) from None


def _is_nonce(value: object) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and len(value) <= MAX_NONCE_CHARS)
