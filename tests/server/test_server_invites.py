"""Invite links of private rooms: server/invites.py and the hub's use of it.

One refusal test per rule, each on the real app over loopback WebSockets: a wrong token, an
expired one (an injected clock moves past the expiry: no sleeping), a revoked one, one used up
(the K+1-th device, also with K+3 devices arriving at once), a token that is too long or not of
the token alphabet, an invite without a room or for a room that is not open, an invite-create or
invite-revoke from a device that is not the host, and choices out of range. Also: an invited
device never becomes a join request, the devices admitted stay after revocation, the token is
never written to the log, and a new host takes the invite over without its token.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from daisychain.server.app import SIGNALING
from daisychain.server.config import SignalingLimits
from daisychain.server.invites import InviteBook
from daisychain.wire.signaling import CLOSE_INVITE, MAX_INVITE_CHARS, ProtocolError
from server_fixtures import WsPeer, config, connect, join, serve

ROOM = "invite-room-1"


class Clock:
    """An injected monotonic clock: tests move it instead of waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def use_clock(client: TestClient[Any, Any]) -> Clock:
    clock = Clock()
    client.server.app[SIGNALING].hub.clock = clock
    return clock


async def host_with_invite(
    client: TestClient[Any, Any], uses: int = 3, expires_s: float = 3600.0
) -> tuple[WsPeer, dict[str, Any]]:
    host, welcome = await join(client, "host", room=ROOM)
    assert welcome["role"] == "host"
    await host.send({"type": "invite-create", "uses": uses, "expires_s": expires_s})
    invite = await host.expect("invite")
    return host, invite


async def hello_with(client: TestClient[Any, Any], name: str, token: Any) -> WsPeer:
    peer = await connect(client, room=ROOM)
    await peer.send(
        {"type": "hello", "version": 1, "name": name, "device": {"kind": "test"}, "invite": token}
    )
    return peer


async def refused(peer: WsPeer, code: str) -> dict[str, Any]:
    """The refusal of an invite: its error, with the new-link hint, then close 4401."""
    error = await peer.expect_error(code)
    assert error["ref"] == "hello"
    assert await peer.expect_close() == CLOSE_INVITE
    return error


# -- the pure core ----------------------------------------------------------------------------


def test_tokens_are_long_random_and_not_kept() -> None:
    book = InviteBook()
    tokens = set()
    for _ in range(50):
        token, invite = book.create(2, 60.0, now=0.0)
        assert len(token) == 32  # 24 random bytes: 192 bits of base64url
        assert token not in repr(invite) and token.encode() not in invite.digest
        tokens.add(token)
    assert len(tokens) == 50
    assert len(book.invites) == 9, "closed invites are remembered only a few at a time"
    assert [i.status(0.0) for i in book.invites] == ["revoked"] * 8 + ["open"]


def test_each_rule_refuses_with_its_own_code() -> None:
    book = InviteBook()
    token, invite = book.create(2, 60.0, now=0.0)
    with pytest.raises(ProtocolError) as exc:
        book.admit("x" * 32, now=1.0)
    assert exc.value.code == "invite-unknown"
    assert book.admit(token, now=1.0) is invite and invite.used == 1
    assert book.admit(token, now=59.9) is invite and invite.used == 2
    with pytest.raises(ProtocolError) as exc:
        book.admit(token, now=2.0)
    assert exc.value.code == "invite-used-up" and invite.used == 2
    token, invite = book.create(5, 60.0, now=100.0)
    with pytest.raises(ProtocolError) as exc:
        book.admit(token, now=160.0)  # expiry is exclusive: at expires_at it is over
    assert exc.value.code == "invite-expired" and invite.used == 0
    old, _ = book.create(5, 60.0, now=200.0)
    new, _ = book.create(5, 60.0, now=200.0)  # a new link revokes the open one
    with pytest.raises(ProtocolError) as exc:
        book.admit(old, now=201.0)
    assert exc.value.code == "invite-revoked"
    book.revoke()
    with pytest.raises(ProtocolError) as exc:
        book.admit(new, now=201.0)
    assert exc.value.code == "invite-revoked"
    assert book.latest is not None and book.latest.status(10_000.0) == "revoked"


# -- the server -------------------------------------------------------------------------------


async def test_an_invite_admits_k_devices_without_the_host_and_refuses_the_next() -> None:
    async with serve() as client:
        host, invite = await host_with_invite(client, uses=3)
        token = invite["token"]
        assert invite["uses"] == 3 and invite["used"] == 0 and invite["status"] == "open"
        assert 3599 <= invite["expires_in_s"] <= 3600
        for n in range(1, 4):
            guest = await hello_with(client, f"guest{n}", token)
            welcome = await guest.expect("welcome")
            assert welcome["group"] == {"kind": "room", "id": ROOM}
            assert welcome["role"] == "member"
            joined = await host.expect("peer-joined")
            assert joined["peer"]["name"] == f"guest{n}"
            status = await host.expect("invite")
            assert status["token"] is None, "the token is sent once, to its maker"
            assert (status["used"], status["uses"]) == (n, 3)
            assert status["status"] == ("open" if n < 3 else "used-up")
        late = await hello_with(client, "late", token)
        error = await refused(late, "invite-used-up")
        assert "already admitted the 3 devices" in error["message"]
        assert "ask the host for a new invite link" in error["hint"]
        await host.barrier()  # no join-request: a refused invite is not an approval request


async def test_the_last_place_goes_to_one_device_when_several_arrive_at_once() -> None:
    async with serve() as client:
        _host, invite = await host_with_invite(client, uses=5)
        guests = await asyncio.gather(
            *(hello_with(client, f"g{n}", invite["token"]) for n in range(8))
        )
        replies = await asyncio.gather(*(g.recv() for g in guests))
        kinds = sorted(r["type"] if r["type"] == "welcome" else r["code"] for r in replies)
        assert kinds == ["invite-used-up"] * 3 + ["welcome"] * 5, kinds


async def test_a_wrong_token_is_refused_and_never_reaches_the_host() -> None:
    async with serve() as client:
        host, invite = await host_with_invite(client)
        wrong = invite["token"][:-1] + ("A" if invite["token"][-1] != "A" else "B")
        guest = await hello_with(client, "guest", wrong)
        error = await refused(guest, "invite-unknown")
        assert "does not open this room" in error["message"]
        assert "ask the host for a new invite link" in error["hint"]
        await host.barrier()


async def test_an_expired_invite_is_refused_by_the_injected_clock() -> None:
    async with serve() as client:
        clock = use_clock(client)
        host, invite = await host_with_invite(client, uses=5, expires_s=600.0)
        assert invite["expires_in_s"] == 600.0
        clock.now += 599.0
        first = await hello_with(client, "in-time", invite["token"])
        await first.expect("welcome")
        await host.expect("peer-joined")
        assert (await host.expect("invite"))["expires_in_s"] == 1.0
        clock.now += 1.0
        late = await hello_with(client, "late", invite["token"])
        error = await refused(late, "invite-expired")
        assert error["message"] == "this invite link has expired"
        await host.barrier()


async def test_a_revoked_invite_is_refused_and_its_devices_stay() -> None:
    async with serve() as client:
        host, invite = await host_with_invite(client, uses=10)
        guest = await hello_with(client, "guest", invite["token"])
        await guest.expect("welcome")
        await host.expect("peer-joined")
        await host.expect("invite")
        await host.send({"type": "invite-revoke"})
        status = await host.expect("invite")
        assert status["status"] == "revoked" and status["used"] == 1
        late = await hello_with(client, "late", invite["token"])
        error = await refused(late, "invite-revoked")
        assert error["message"] == "the host revoked this invite link"
        # The device admitted before the revocation is still a member.
        await host.send({"type": "broadcast", "data": {"hi": 1}})
        assert (await guest.expect("broadcast"))["data"] == {"hi": 1}
        await guest.barrier()


async def test_a_new_invite_revokes_the_old_one() -> None:
    async with serve() as client:
        host, first = await host_with_invite(client, uses=10)
        await host.send({"type": "invite-create", "uses": 2, "expires_s": 60})
        second = await host.expect("invite")
        assert second["token"] != first["token"]
        await refused(await hello_with(client, "old", first["token"]), "invite-revoked")
        await (await hello_with(client, "new", second["token"])).expect("welcome")


async def test_only_the_host_may_create_or_revoke() -> None:
    async with serve() as client:
        _host, invite = await host_with_invite(client, uses=5)
        member = await hello_with(client, "member", invite["token"])
        await member.expect("welcome")
        await member.send({"type": "invite-create", "uses": 5, "expires_s": 60})
        error = await member.expect_error("not-host")
        assert error["ref"] == "invite-create"
        await member.send({"type": "invite-revoke"})
        assert (await member.expect_error("not-host"))["ref"] == "invite-revoke"
        # A device in an automatic group hosts nothing either.
        loner, _ = await join(client, "loner")
        await loner.send({"type": "invite-create", "uses": 5, "expires_s": 60})
        await loner.expect_error("not-host")
        # The invite still works: the refusals changed nothing.
        await (await hello_with(client, "next", invite["token"])).expect("welcome")


async def test_a_waiting_requester_cannot_make_an_invite() -> None:
    async with serve() as client:
        await host_with_invite(client)
        requester, _ = await join(client, "asker", room=ROOM, expect="pending")
        await requester.send({"type": "invite-create", "uses": 5, "expires_s": 60})
        await requester.expect_error("not-host")


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("a" * (MAX_INVITE_CHARS + 1), "one character too long"),
        ("a" * 5000, "far too long"),
        ("a" * 15, "too short"),
        ("a" * 31 + "!", "not of the token alphabet"),
        (12345678901234567890, "not a string"),
    ],
)
async def test_a_malformed_token_is_refused_before_any_lookup(token: Any, why: str) -> None:
    async with serve() as client:
        host, _ = await host_with_invite(client)
        guest = await hello_with(client, "guest", token)
        error = await refused(guest, "bad-invite")
        assert "16-64 characters" in error["message"], why
        assert str(token) not in error["message"], "a token is never echoed"
        await host.barrier()


async def test_an_invite_without_a_room_or_to_a_closed_room_is_refused() -> None:
    async with serve() as client:
        _host, invite = await host_with_invite(client)
        roomless = await connect(client)
        await roomless.send(
            {"type": "hello", "version": 1, "name": "x", "device": {}, "invite": invite["token"]}
        )
        error = await refused(roomless, "bad-invite")
        assert "without a room" in error["message"]
        other = await connect(client, room="another-room")
        await other.send(
            {"type": "hello", "version": 1, "name": "x", "device": {}, "invite": invite["token"]}
        )
        error = await refused(other, "invite-unknown")
        assert "not open" in error["message"]
        # ... and the refused device was not made the host of a new room.
        assert "room:another-room" not in client.server.app[SIGNALING].hub.groups


async def test_an_invite_into_a_room_the_host_left_is_refused() -> None:
    async with serve() as client:
        host, invite = await host_with_invite(client)
        await host.close()
        hub = client.server.app[SIGNALING].hub
        for _ in range(100):
            if f"room:{ROOM}" not in hub.groups:
                break
            await asyncio.sleep(0.02)
        await refused(await hello_with(client, "late", invite["token"]), "invite-unknown")


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"uses": 0, "expires_s": 60}, "uses"),
        ({"uses": 257, "expires_s": 60}, "uses"),
        ({"uses": 1.5, "expires_s": 60}, "uses"),
        ({"uses": 5, "expires_s": 0}, "expires_s"),
        ({"uses": 5, "expires_s": float("nan")}, "expires_s"),
        ({"uses": 5}, "expires_s"),
    ],
)
async def test_invite_choices_out_of_range_are_refused(message: dict[str, Any], field: str) -> None:
    async with serve() as client:
        host, _ = await join(client, "host", room=ROOM)
        if message.get("expires_s") != message.get("expires_s"):  # NaN: not JSON at all
            await host.ws.send_str('{"type":"invite-create","uses":5,"expires_s":NaN}')
            await host.expect_error("bad-json")
            return
        await host.send({"type": "invite-create", **message})
        error = await host.expect_error("bad-message")
        assert f"invite-create.{field}" in error["message"]


async def test_an_expiry_past_the_server_maximum_is_refused_with_it() -> None:
    limits = replace(SignalingLimits(), invite_max_s=2 * 3600.0)
    async with serve(config(signaling=limits)) as client:
        host, _ = await join(client, "host", room=ROOM)
        await host.send({"type": "invite-create", "uses": 5, "expires_s": 2 * 3600.0 + 1})
        error = await host.expect_error("bad-message")
        assert "at most 7200 s" in error["message"] and "2 h" in error["hint"]
        await host.send({"type": "invite-create", "uses": 5, "expires_s": 2 * 3600.0})
        assert (await host.expect("invite"))["status"] == "open"


async def test_an_invite_never_grows_a_room_past_the_group_size() -> None:
    limits = replace(SignalingLimits(), max_group_size=3)
    async with serve(config(signaling=limits)) as client:
        host, invite = await host_with_invite(client, uses=10)
        for n in range(2):
            await (await hello_with(client, f"g{n}", invite["token"])).expect("welcome")
        full = await hello_with(client, "full", invite["token"])
        await full.expect_error("group-full")
        for _ in range(2):
            await host.expect("peer-joined")
            await host.expect("invite")
        await host.barrier()
        assert client.server.app[SIGNALING].hub.groups[f"room:{ROOM}"].invites.latest.used == 2


async def test_a_new_host_sees_the_invite_without_its_token_and_can_revoke_it() -> None:
    async with serve() as client:
        host, invite = await host_with_invite(client, uses=4)
        guest = await hello_with(client, "guest", invite["token"])
        await guest.expect("welcome")
        await host.close()
        assert (await guest.expect("peer-left"))["peer"]
        assert (await guest.expect("host-changed"))["host"]
        taken = await guest.expect("invite")
        assert taken == {
            "type": "invite", "token": None, "uses": 4, "used": 1,
            "expires_in_s": taken["expires_in_s"], "status": "open",
        }  # fmt: skip
        await guest.send({"type": "invite-revoke"})
        assert (await guest.expect("invite"))["status"] == "revoked"
        await refused(await hello_with(client, "late", invite["token"]), "invite-revoked")


async def test_revoking_when_there_is_no_invite_says_so() -> None:
    async with serve() as client:
        host, _ = await join(client, "host", room=ROOM)
        await host.send({"type": "invite-revoke"})
        error = await host.expect_error("invite-unknown")
        assert error["ref"] == "invite-revoke"


async def test_the_token_is_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serve() as client:
        host, invite = await host_with_invite(client, uses=1)
        token = invite["token"]
        await (await hello_with(client, "guest", token)).expect("welcome")
        await refused(await hello_with(client, "late", token), "invite-used-up")
        await host.send({"type": "invite-revoke"})
        await host.expect("peer-joined")
        await host.expect("invite")
        assert (await host.expect("invite"))["status"] == "revoked"
    lines = [record.getMessage() for record in caplog.records]
    assert any("admitted by invite inv-" in line for line in lines), lines
    assert not [line for line in lines if token in line]
