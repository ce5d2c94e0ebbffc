"""Private rooms: code minting, host approval enforced by the server, denial, timeout, hand-off."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from aiohttp.test_utils import TestClient

from daisychain.server.config import SignalingLimits
from daisychain.server.messages import CLOSE_DENIED, CLOSE_JOIN_TIMEOUT, CLOSE_PROTOCOL
from server_fixtures import WsPeer, config, connect, join, serve

ROOM = "room-abc123"


async def host_and_requester(
    client: TestClient[Any, Any],
) -> tuple[WsPeer, WsPeer, dict[str, Any]]:
    """A host alone in ROOM and a second device waiting for approval (request seen by host)."""
    host, welcome = await join(client, "host", room=ROOM)
    assert welcome["role"] == "host" and welcome["host"] == welcome["id"]
    requester, pending = await join(client, "guest", room=ROOM, expect="pending")
    request = await host.expect("join-request")
    assert request["peer"]["id"] == pending["id"]
    return host, requester, request


async def test_minted_room_codes_are_valid_and_distinct() -> None:
    async with serve() as client:
        codes = set()
        for _ in range(3):
            response = await client.post("/api/rooms")
            assert response.status == 201
            body = await response.json()
            assert re.fullmatch(r"[A-Za-z0-9_-]{16}", body["code"])
            assert body["url"] == f"/?room={body['code']}"
            codes.add(body["code"])
        assert len(codes) == 3


async def test_first_member_of_a_room_is_host_in_a_room_group() -> None:
    async with serve() as client:
        _host, welcome = await join(client, "host", room=ROOM)
        assert welcome["group"] == {"kind": "room", "id": ROOM}
        assert welcome["role"] == "host"
        assert welcome["members"] == []


async def test_room_code_can_come_in_hello() -> None:
    async with serve() as client:
        peer = await connect(client)
        await peer.send({"type": "hello", "version": 1, "name": "h", "device": {}, "room": ROOM})
        welcome = await peer.expect("welcome")
        assert welcome["group"]["kind"] == "room"


async def test_bad_room_code_is_refused_with_a_hint_and_a_close() -> None:
    async with serve() as client:
        peer = await connect(client, room="no")
        await peer.send({"type": "hello", "version": 1, "name": "h", "device": {}})
        error = await peer.expect_error("bad-room-code")
        assert "POST /api/rooms" in error["hint"]
        assert await peer.expect_close() == CLOSE_PROTOCOL


async def test_join_request_carries_name_and_device_to_the_host() -> None:
    async with serve() as client:
        _host, _requester, request = await host_and_requester(client)
        assert request["peer"]["name"] == "guest"
        assert request["peer"]["device"] == {"kind": "test"}
        assert request["expires_in_s"] == 120.0


async def test_pending_device_learns_no_member_and_can_relay_nothing() -> None:
    async with serve() as client:
        host, requester, _ = await host_and_requester(client)
        await requester.send({"type": "signal", "to": host.id, "data": {"sdp": "x"}})
        await requester.expect_error("not-admitted")
        await requester.send({"type": "broadcast", "data": {"hi": 1}})
        await requester.expect_error("not-admitted")
        await host.barrier()  # the host got nothing from the requester
        await requester.barrier()  # and the requester got no membership event


async def test_member_cannot_signal_a_pending_device() -> None:
    async with serve() as client:
        host, requester, request = await host_and_requester(client)
        await host.send({"type": "signal", "to": request["peer"]["id"], "data": {}})
        await host.expect_error("unknown-peer")
        await requester.barrier()


async def test_approval_admits_the_device_and_tells_everyone() -> None:
    async with serve() as client:
        host, requester, request = await host_and_requester(client)
        await host.send({"type": "approve", "peer": request["peer"]["id"]})
        closed = await host.expect("join-request-closed")
        assert closed == {"type": "join-request-closed", "peer": requester.id, "reason": "approved"}
        joined = await host.expect("peer-joined")
        assert joined["peer"]["id"] == requester.id
        welcome = await requester.expect("welcome")
        assert welcome["role"] == "member" and welcome["host"] == host.id
        assert [m["id"] for m in welcome["members"]] == [host.id]
        await requester.send({"type": "signal", "to": host.id, "data": {"ok": True}})
        assert (await host.expect("signal"))["from"] == requester.id


async def test_only_the_host_can_approve() -> None:
    async with serve() as client:
        host, requester, request = await host_and_requester(client)
        await host.send({"type": "approve", "peer": request["peer"]["id"]})
        await requester.expect("welcome")
        third, _ = await join(client, "third", room=ROOM, expect="pending")
        await requester.send({"type": "approve", "peer": third.id})
        await requester.expect_error("not-host")


async def test_denial_tells_the_requester_and_closes() -> None:
    async with serve() as client:
        host, requester, request = await host_and_requester(client)
        await host.send({"type": "deny", "peer": request["peer"]["id"]})
        denied = await requester.expect("denied")
        assert denied["reason"] == "denied" and "declined" in denied["message"]
        assert denied["hint"]
        assert await requester.expect_close() == CLOSE_DENIED
        closed = await host.expect("join-request-closed")
        assert closed["reason"] == "denied"
        await host.barrier()  # no peer-joined or peer-left for a device that never joined


async def test_unanswered_request_times_out_with_a_clear_message() -> None:
    limits = replace(SignalingLimits(), join_timeout_s=0.2)
    async with serve(config(signaling=limits)) as client:
        host, requester, _ = await host_and_requester(client)
        denied = await requester.expect("denied")
        assert denied["reason"] == "timeout"
        assert "0.2 s" in denied["message"]
        assert await requester.expect_close() == CLOSE_JOIN_TIMEOUT
        assert (await host.expect("join-request-closed"))["reason"] == "timeout"


async def test_requester_leaving_withdraws_the_request() -> None:
    async with serve() as client:
        host, requester, request = await host_and_requester(client)
        await requester.close()
        closed = await host.expect("join-request-closed")
        assert closed["peer"] == request["peer"]["id"] and closed["reason"] == "left"


async def test_host_leaving_makes_the_oldest_member_host() -> None:
    async with serve() as client:
        host, second, request = await host_and_requester(client)
        await host.send({"type": "approve", "peer": request["peer"]["id"]})
        await second.expect("welcome")
        third, _ = await join(client, "third", room=ROOM, expect="pending")
        await host.expect("join-request-closed")
        await host.expect("peer-joined")
        await host.expect("join-request")
        await host.send({"type": "approve", "peer": third.id})
        await third.expect("welcome")
        await second.expect("peer-joined")
        await host.close()
        for member in (second, third):
            assert (await member.expect("peer-left"))["peer"] == host.id
            assert await member.expect("host-changed") == {
                "type": "host-changed",
                "host": second.id,
            }
        # The new host can now answer requests.
        fourth, _ = await join(client, "fourth", room=ROOM, expect="pending")
        assert (await second.expect("join-request"))["peer"]["id"] == fourth.id
        await second.send({"type": "approve", "peer": fourth.id})
        assert (await fourth.expect("welcome"))["host"] == second.id


async def test_pending_requests_move_to_the_new_host() -> None:
    async with serve() as client:
        host, second, request = await host_and_requester(client)
        await host.send({"type": "approve", "peer": request["peer"]["id"]})
        await second.expect("welcome")
        waiting, _ = await join(client, "waiting", room=ROOM, expect="pending")
        await host.close()
        await second.expect("peer-left")
        await second.expect("host-changed")
        moved = await second.expect("join-request")
        assert moved["peer"]["id"] == waiting.id
        assert 0 < moved["expires_in_s"] <= 120


async def test_last_member_leaving_makes_the_oldest_requester_host() -> None:
    async with serve() as client:
        host, requester, _ = await host_and_requester(client)
        await host.close()
        welcome = await requester.expect("welcome")
        assert welcome["role"] == "host" and welcome["members"] == []


async def test_room_members_are_not_in_the_local_group() -> None:
    async with serve() as client:
        _host, _ = await join(client, "host", room=ROOM)
        _local, welcome = await join(client, "local")
        assert welcome["members"] == []
        status = await (await client.get("/api/status")).json()
        assert (status["rooms"], status["groups"]) == (1, 1)
