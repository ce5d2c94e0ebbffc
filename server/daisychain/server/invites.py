"""Invite links of one private room: the pure core (no I/O, no clock reads: ``now`` comes in).

A room's host may open an invite link (docs/PROTOCOL.md, "Invite links"): a random token that
admits up to ``uses`` devices until ``expires_at`` without the host's click for each. This module
decides, for a token a device presents, whether it admits that device, and counts the use; the
hub (``rooms.py``) calls it in the same synchronous step in which it admits the device, so two
devices can never both take the last place.

The rules, each a distinct refusal with its own code:

* a token that matches no invite of this room (wrong, or the room has closed since): unknown;
* an invite the host revoked, or replaced with a new one: revoked;
* an invite past its expiry: expired;
* an invite that has admitted ``uses`` devices: used up.

The token itself is never stored: an invite keeps its SHA-256, compared in constant time, and a
tag (a few characters of a keyed hash) for log lines. So neither a log line nor a memory dump of
the server holds a token that would still open the room.

State of one invite (``Invite.status(now)``)::

    open --uses reached--> used-up      open --now >= expires_at--> expired
    open --revoke, or a newer invite--> revoked

Terminal states stay what they became: a revoked invite does not later read "expired".
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

from daisychain.wire.signaling import InviteStatus, ProtocolError

TOKEN_BYTES = 24  # 192 bits, 32 characters of base64url
# Invites remembered per room after they closed, so that an old token gets its real reason
# ("revoked", "expired") rather than "unknown"; older ones are forgotten.
KEEP_CLOSED = 8
NEW_LINK_HINT = "ask the host for a new invite link"
_TAG_KEY = secrets.token_bytes(32)  # per process: tags tell invites apart in one log only


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii", "replace")).digest()


@dataclass(eq=False)
class Invite:
    digest: bytes
    tag: str  # for log lines
    uses: int
    expires_at: float
    used: int = 0
    revoked: bool = False

    def status(self, now: float) -> InviteStatus:
        if self.revoked:
            return "revoked"
        if self.used >= self.uses:
            return "used-up"
        if now >= self.expires_at:
            return "expired"
        return "open"

    def expires_in_s(self, now: float) -> float:
        return max(0.0, self.expires_at - now)


@dataclass
class InviteBook:
    """The invites of one room, newest last; at most one is open."""

    invites: list[Invite] = field(default_factory=list)

    @property
    def latest(self) -> Invite | None:
        return self.invites[-1] if self.invites else None

    def create(self, uses: int, ttl_s: float, now: float) -> tuple[str, Invite]:
        """A new open invite (returned with its token, which is not kept); the one open
        before it, if any, is revoked: a host who shares a new link means the old one to stop."""
        assert uses >= 1 and ttl_s > 0, f"invite of {uses} uses for {ttl_s} s"
        self.revoke()
        token = secrets.token_urlsafe(TOKEN_BYTES)
        tag = hmac.new(_TAG_KEY, token.encode(), hashlib.sha256).hexdigest()[:8]
        invite = Invite(digest=_digest(token), tag=f"inv-{tag}", uses=uses, expires_at=now + ttl_s)
        self.invites.append(invite)
        del self.invites[: -(KEEP_CLOSED + 1)]
        return token, invite

    def revoke(self) -> Invite | None:
        """Revoke the latest invite (whatever its state: a revoked link stays revoked); the
        invite, or None when the room never had one."""
        invite = self.latest
        if invite is not None:
            invite.revoked = True
        return invite

    def admit(self, token: str, now: float) -> Invite:
        """Count one use of the invite ``token`` opens and return it, or raise the refusal."""
        digest = _digest(token)
        # Every stored digest is compared, in constant time each, so the time taken says
        # nothing about which (or whether one) matched.
        found = None
        for invite in self.invites:
            if hmac.compare_digest(invite.digest, digest):
                found = invite
        if found is None:
            raise ProtocolError(
                "invite-unknown",
                "this invite link does not open this room (it is mistyped, or the room has "
                "closed since)",
                NEW_LINK_HINT,
                ref="hello",
            )
        status = found.status(now)
        if status == "revoked":
            raise ProtocolError(
                "invite-revoked",
                "the host revoked this invite link",
                NEW_LINK_HINT,
                ref="hello",
            )
        if status == "used-up":
            raise ProtocolError(
                "invite-used-up",
                f"this invite link has already admitted the {found.uses} devices it was made for",
                NEW_LINK_HINT + " (or to let you in by hand: open the room's link without the "
                "#invite part)",
                ref="hello",
            )
        if status == "expired":
            raise ProtocolError(
                "invite-expired",
                "this invite link has expired",
                NEW_LINK_HINT,
                ref="hello",
            )
        found.used += 1
        return found
