"""A room's invite link as the headless peer reads it (``python -m daisychain.peer --invite``).

The page's link has the form ``https://HOST:PORT/?room=CODE#invite=TOKEN`` (docs/PROTOCOL.md,
"Invite links"): the room in the query, the token in the fragment, which a browser never sends
to a server, so the token reaches no access log and no Referer. The peer sends the token in its
hello only. Every part is checked here with the server's own rules (``wire.signaling``), so a
mangled link stops the peer before it connects, with a hint.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from daisychain.wire.signaling import ProtocolError, check_invite_token, check_room_code

HINT = "copy the invite link again exactly as the host's page shows it (Copy link)"


class InviteLinkError(ValueError):
    def __init__(self, message: str, hint: str = HINT) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class InviteLink:
    server: str  # scheme://host[:port] of the page that made the link
    room: str
    token: str

    def __repr__(self) -> str:  # the token is a secret: never in a repr, a log or a traceback
        return f"InviteLink(server={self.server!r}, room={self.room!r}, token=<hidden>)"


def parse(link: str) -> InviteLink:
    """The server, room and token of an invite link, or ``InviteLinkError``."""
    try:
        parts = urlsplit(link.strip())
    except ValueError:
        raise InviteLinkError("--invite is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InviteLinkError(
            "--invite must be an http(s) link such as https://HOST:8787/?room=CODE#invite=TOKEN"
        )
    rooms = parse_qs(parts.query).get("room", [])
    if len(rooms) != 1:
        raise InviteLinkError("--invite names no room (?room=CODE is missing)")
    tokens = parse_qs(parts.fragment).get("invite", [])
    if len(tokens) != 1:
        raise InviteLinkError(
            "--invite holds no invite token (#invite=TOKEN is missing)",
            "copy the invite link from the host's page (the room's plain link asks the host "
            "instead: give it with --room)",
        )
    try:
        room = check_room_code(rooms[0])
        token = check_invite_token(tokens[0])
    except ProtocolError as exc:
        raise InviteLinkError(f"--invite: {exc.message}") from None
    return InviteLink(server=f"{parts.scheme}://{parts.netloc}", room=room, token=token)
