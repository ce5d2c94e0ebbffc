"""What a peer receives from the signaling server, parsed and validated in one place.

The server declares every message it sends once, as records in ``daisychain.wire.signaling``
(docs/PROTOCOL.md, "Server -> client"); this module turns the JSON a peer receives back into
those same records, or raises ``SignalingError`` (what is wrong, and a hint). Nothing else in the
peer looks at raw server JSON. The ``data`` a peer relays to another through the server (SDP
descriptions and ICE candidates, "Peer connections") is a second, peer-controlled layer: the
server only checks that it is an object, so ``parse_signal_data`` checks it here, into
``Description`` or ``Candidate``.

Unknown fields are ignored (the server may add some); an unknown message type, a missing or
mistyped field, or a ``welcome`` of another signaling version is an error, never a silent drop.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from daisychain.p2p.versions import SIGNALING_VERSION
from daisychain.wire import deviceinfo, ice
from daisychain.wire import signaling as sm
from daisychain.wire.fields import PEER_ID_RE, Fields

# A welcome lists at most an automatic group's 256 members, each with a small device summary
# (<= 16 keys of <= 32 characters, values <= 128): well under 1 MiB.
MAX_SERVER_MESSAGE_BYTES = 1024 * 1024
MAX_MEMBERS = 1024
MAX_TEXT = 1000  # message, hint
MAX_SDP = 60_000
MAX_CANDIDATE = 1024
SERVER_TYPES = (
    "welcome", "pending", "denied", "join-request", "join-request-closed",
    "join-requests-refused", "invite", "peer-joined", "peer-left", "host-changed", "signal",
    "broadcast", "pong", "error",
)  # fmt: skip
ERROR_CODES: tuple[str, ...] = get_args(sm.ErrorCode)
DENIED_REASONS = ("denied", "timeout", "closed")
CLOSED_REASONS = ("approved", "denied", "timeout", "left", "dropped")
INVITE_STATUSES: tuple[str, ...] = get_args(sm.InviteStatus)
SIGNAL_DATA = "signal.data"


class SignalingError(ValueError):
    """A server message (or relayed signal) this peer cannot act on."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Description:
    """An SDP offer or answer relayed from another peer."""

    kind: Literal["offer", "answer"]
    sdp: str


@dataclass(frozen=True)
class Candidate:
    """A trickled ICE candidate relayed from another peer (the Python peer never sends one)."""

    candidate: str
    sdp_mid: str | None
    sdp_mline_index: int | None


SignalData = Description | Candidate


def parse_server(raw: str | bytes) -> sm.ServerMessage:
    """One text frame from the server as its record, or ``SignalingError``."""
    if not isinstance(raw, str):
        raise SignalingError(
            "the server sent a binary frame", "is --server a DaisyChain server of this version?"
        )
    if len(raw) > MAX_SERVER_MESSAGE_BYTES:
        raise SignalingError(
            f"server message larger than {MAX_SERVER_MESSAGE_BYTES} bytes",
            "is --server a DaisyChain server of this version?",
        )
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        raise SignalingError(
            "the server sent a message that is not JSON", "is --server a DaisyChain server?"
        ) from None
    if not isinstance(obj, dict):
        raise SignalingError(
            "the server sent a message that is not a JSON object", "is --server a DaisyChain?"
        )
    kind = obj.get("type")
    if not isinstance(kind, str) or kind not in SERVER_TYPES:
        shown = kind[:32] if isinstance(kind, str) else None
        raise SignalingError(
            f"unknown server message type {shown!r}",
            f"a DaisyChain server sends: {', '.join(SERVER_TYPES)} (docs/PROTOCOL.md)",
        )
    f = _Fields(obj, kind)
    if kind == "welcome":
        version = f.integer("version", 0, 2**32 - 1)
        if version != SIGNALING_VERSION:
            raise SignalingError(
                f"the server speaks signaling version {version}, this peer {SIGNALING_VERSION}",
                "run the same DaisyChain version on the server and every peer",
            )
        group = _Fields(f.obj("group"), "welcome.group")
        members = obj.get("members")
        if not isinstance(members, list) or len(members) > MAX_MEMBERS:
            raise f.bad("members", f"a list of at most {MAX_MEMBERS} peers")
        return sm.Welcome(
            version=version,
            id=f.peer_id("id"),
            group=sm.GroupInfo(
                kind=cast(sm.GroupKind, group.choice("kind", get_args(sm.GroupKind))),
                id=group.text("id", 64),
            ),
            role=cast(Literal["host", "member"], f.choice("role", ("host", "member"))),
            host=f.peer_id("host") if obj.get("host") is not None else None,
            members=[_peer_info(m, "welcome.members[]") for m in members],
            ice_servers=_ice_servers(obj.get("ice_servers", [])),
            ice_transport_policy=cast(
                Literal["all", "relay"],
                f.choice("ice_transport_policy", ("all", "relay"))
                if "ice_transport_policy" in obj
                else "all",
            ),
        )
    if kind == "pending":
        return sm.Pending(
            id=f.peer_id("id"),
            room=f.matching("room", sm.ROOM_CODE_RE, "a room code"),
            timeout_s=f.number("timeout_s", 0.0, 86_400.0),
            message=f.text("message", MAX_TEXT),
        )
    if kind == "denied":
        reason = f.choice("reason", DENIED_REASONS)
        return sm.Denied(
            reason=cast(Literal["denied", "timeout", "closed"], reason),
            message=f.text("message", MAX_TEXT),
            hint=f.text("hint", MAX_TEXT),
        )
    if kind == "join-request":
        return sm.JoinRequest(
            peer=_peer_info(f.obj("peer"), "join-request.peer"),
            expires_in_s=f.number("expires_in_s", 0.0, 86_400.0),
        )
    if kind == "join-request-closed":
        reason = f.choice("reason", CLOSED_REASONS)
        return sm.JoinRequestClosed(
            peer=f.peer_id("peer"),
            reason=cast(Literal["approved", "denied", "timeout", "left", "dropped"], reason),
        )
    if kind == "join-requests-refused":
        return sm.JoinRequestsRefused(count=f.integer("count", 1, 2**53 - 1))
    if kind == "invite":
        token = obj.get("token")
        if token is not None and not (
            isinstance(token, str) and sm.INVITE_TOKEN_RE.fullmatch(token)
        ):
            raise f.bad("token", "an invite token or null")
        return sm.Invite(
            token=token,
            uses=f.integer("uses", sm.MIN_INVITE_USES, sm.MAX_INVITE_USES),
            used=f.integer("used", 0, sm.MAX_INVITE_USES),
            expires_in_s=f.number("expires_in_s", 0.0, 366 * 86_400.0),
            status=cast(sm.InviteStatus, f.choice("status", INVITE_STATUSES)),
        )
    if kind == "peer-joined":
        return sm.PeerJoined(peer=_peer_info(f.obj("peer"), "peer-joined.peer"))
    if kind == "peer-left":
        return sm.PeerLeft(peer=f.peer_id("peer"))
    if kind == "host-changed":
        return sm.HostChanged(host=f.peer_id("host"))
    if kind == "signal":
        return sm.SignalFrom(from_=f.peer_id("from"), data=f.obj("data"))
    if kind == "broadcast":
        return sm.BroadcastFrom(from_=f.peer_id("from"), data=f.obj("data"))
    if kind == "pong":
        nonce = obj.get("nonce")
        if nonce is not None and (isinstance(nonce, bool) or not isinstance(nonce, str | int)):
            raise f.bad("nonce", "a string, an integer or null")
        return sm.Pong(nonce=nonce)
    assert kind == "error", f"SERVER_TYPES and parse_server disagree on {kind!r}"
    ref = obj.get("ref")
    if ref is not None and not (isinstance(ref, str) and len(ref) <= 32):
        raise f.bad("ref", "a message type or null")
    return sm.Error(
        code=cast(sm.ErrorCode, f.choice("code", ERROR_CODES)),
        message=f.text("message", MAX_TEXT),
        hint=f.text("hint", MAX_TEXT),
        ref=ref,
    )


def parse_signal_data(data: dict[str, Any]) -> SignalData:
    """The ``data`` of a relayed ``signal`` (another peer wrote it), or ``SignalingError``."""
    f = _Fields(data, SIGNAL_DATA)
    kind = f.choice("kind", ("offer", "answer", "candidate"))
    if kind == "candidate":
        index = data.get("sdpMLineIndex")
        if index is not None and (
            isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 256
        ):
            raise f.bad("sdpMLineIndex", "an integer in [0, 255] or null")
        mid = data.get("sdpMid")
        if mid is not None and not (isinstance(mid, str) and len(mid) <= 64):
            raise f.bad("sdpMid", "a string of at most 64 characters or null")
        text = f.text("candidate", MAX_CANDIDATE)
        if not text:
            raise f.bad("candidate", "a non-empty ICE candidate line")
        return Candidate(text, mid, index)
    sdp = f.text("sdp", MAX_SDP)
    return Description(cast(Literal["offer", "answer"], kind), sdp)


def _ice_servers(value: object) -> list[sm.IceServer]:
    """``welcome.ice_servers``: absent or ``[]`` means none (host candidates only). Every URL is
    checked by the server's own rules (``wire.ice``), so aiortc is never handed one it would
    refuse when a connection is made."""
    where = "welcome.ice_servers"
    if not isinstance(value, list) or len(value) > ice.MAX_URLS:
        raise _bad(where, "", f"a list of at most {ice.MAX_URLS} ICE servers")
    out = []
    for item in value:
        if not isinstance(item, dict):
            raise _bad(where, "[]", "an ICE server {urls, username, credential}")
        f = _Fields(item, where + "[]")
        urls = item.get("urls")
        if not isinstance(urls, list) or not 0 < len(urls) <= ice.MAX_URLS:
            raise f.bad("urls", f"a list of 1-{ice.MAX_URLS} STUN/TURN URLs")
        for url in urls:
            try:
                ice.parse_url(url if isinstance(url, str) else "")
            except ice.IceError as exc:
                raise f.bad("urls", f"STUN/TURN URLs ({exc.message})") from None
        credentials = [
            f.text(name, ice.MAX_CREDENTIAL_CHARS) if item.get(name) is not None else None
            for name in ("username", "credential")
        ]
        out.append(
            sm.IceServer(urls=list(urls), username=credentials[0], credential=credentials[1])
        )
    return out


def _peer_info(value: object, where: str) -> sm.PeerInfo:
    """A member or requester as this peer shows it: the server's own rules for names and device
    summaries (``wire.deviceinfo``) hold here too, so an old or hostile server cannot show what a
    current one refuses, and a name with nothing visible in it becomes ``device-XXXX``."""
    if not isinstance(value, dict):
        raise _bad(where, "", "a peer {id, name, device}")
    f = _Fields(value, where)
    peer = f.peer_id("id")
    try:
        name = deviceinfo.check_name(value.get("name"))
        device = deviceinfo.check_device(value.get("device"))
    except deviceinfo.DeviceInfoError as exc:
        raise f.bad(exc.field, exc.expected) from None
    return sm.PeerInfo(id=peer, name=deviceinfo.shown_name(name, peer), device=device)


def _bad(kind: str, name: str, expected: str) -> SignalingError:
    where = f"{kind}.{name}" if name else kind
    if kind == SIGNAL_DATA:
        return SignalingError(
            f"relayed {where} must be {expected}",
            "the sending peer does not speak this version (docs/PROTOCOL.md, Peer connections)",
        )
    return SignalingError(
        f"server message {where} must be {expected}",
        "is --server a DaisyChain server of this version? (docs/PROTOCOL.md, Signaling)",
    )


class _Fields(Fields):
    """Shared field checks (``daisychain.wire.fields``) with this layer's error."""

    def bad(self, name: str, expected: str) -> SignalingError:
        return _bad(self.kind, name, expected)

    def peer_id(self, name: str) -> str:
        return self.matching(name, PEER_ID_RE, "a peer id")


def encode_client(message: sm.ClientMessage) -> str:
    """A client record (``hello``, ``signal``, ``approve``, ...) as the server parses it."""
    return json.dumps(dataclasses.asdict(message), separators=(",", ":"), allow_nan=False)
