"""Private rooms: code minting, exact codes, host approval enforced by the server whatever a
newcomer claims, denial, timeout, hand-off to members only, and the limits on join requests."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient

from daisychain.server.app import serve_local
from daisychain.server.config import SignalingLimits
from daisychain.wire.signaling import (
    CLOSE_ABUSE,
    CLOSE_DENIED,
    CLOSE_JOIN_TIMEOUT,
    CLOSE_PROTOCOL,
    CLOSE_ROOM_CLOSED,
)
from server_fixtures import ByteTokenizer, WsPeer, config, connect, join, serve

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
        assert "Private room" in error["hint"] and "POST /api/rooms" in error["hint"]
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


async def test_last_member_leaving_closes_the_waiting_requests() -> None:
    async with serve() as client:
        host, requester, _ = await host_and_requester(client)
        await host.close()
        denied = await requester.expect("denied")
        assert denied["reason"] == "closed" and denied["hint"]
        assert await requester.expect_close() == CLOSE_ROOM_CLOSED
        status = await (await client.get("/api/status")).json()
        assert (status["rooms"], status["pending"], status["peers"]) == (0, 0, 0)


async def test_a_requester_is_never_promoted_and_the_returning_host_hosts_again() -> None:
    async with serve() as client:
        host, first, _ = await host_and_requester(client)
        second, _ = await join(client, "second", room=ROOM, expect="pending")
        await host.expect("join-request")
        await host.close()
        for requester in (first, second):
            assert (await requester.expect("denied"))["reason"] == "closed"
            assert await requester.expect_close() == CLOSE_ROOM_CLOSED
        # The host reloads its page: it finds the room empty and hosts it, and nobody who was
        # waiting can deny it. The requesters ask again and the host sees them.
        back, welcome = await join(client, "host", room=ROOM)
        assert welcome["role"] == "host" and welcome["members"] == []
        again, _ = await join(client, "guest", room=ROOM, expect="pending")
        assert (await back.expect("join-request"))["peer"]["id"] == again.id


async def test_host_hand_off_skips_a_requester_that_waited_longer_than_a_member() -> None:
    async with serve() as client:
        host, early, _ = await host_and_requester(client)  # waits, unanswered
        member, _ = await join(client, "member", room=ROOM, expect="pending")
        assert (await host.expect("join-request"))["peer"]["id"] == member.id
        await host.send({"type": "approve", "peer": member.id})
        await member.expect("welcome")
        await host.close()
        await member.expect("peer-left")
        assert await member.expect("host-changed") == {"type": "host-changed", "host": member.id}
        moved = await member.expect("join-request")
        assert moved["peer"]["id"] == early.id
        await early.barrier()  # still pending: no welcome, no membership event


async def test_room_codes_match_exactly() -> None:
    async with serve() as client:
        _host, _ = await join(client, "host", room=ROOM)
        # Other case, a prefix, an extension: each is a room of its own (empty: its own host).
        for other in (ROOM.upper(), ROOM[:-1], ROOM + "0"):
            _peer, welcome = await join(client, "x", room=other)
            assert welcome["role"] == "host" and welcome["group"]["id"] == other, other
        # Whitespace is never trimmed into a valid code: it is refused.
        for padded in (f"%20{ROOM}", f"{ROOM}%20", f"{ROOM}%0A"):
            peer = await connect(client, room=padded)
            await peer.send({"type": "hello", "version": 1, "name": "x", "device": {}})
            await peer.expect_error("bad-room-code")
            assert await peer.expect_close() == CLOSE_PROTOCOL
        peer = await connect(client)
        hello = {"type": "hello", "version": 1, "name": "x", "device": {}, "room": f" {ROOM}"}
        await peer.send(hello)
        await peer.expect_error("bad-room-code")


async def test_every_newcomer_needs_approval_whatever_it_claims() -> None:
    async with serve() as client:
        host, welcome = await join(client, "host", room=ROOM)
        claims: list[dict[str, Any]] = [
            {"name": "host"},  # the host's own name
            {"name": welcome["id"]},  # the host's id as a name
            {"name": "x", "id": welcome["id"], "role": "host", "host": welcome["id"]},
            {"name": "x", "from": welcome["id"], "approved": True},
        ]
        for extra in claims:
            peer = await connect(client, room=ROOM)
            await peer.send({"type": "hello", "version": 1, "device": {}, **extra})
            pending = await peer.expect("pending")
            assert pending["id"] != welcome["id"]
            request = await host.expect("join-request")
            assert request["peer"]["id"] == pending["id"]
            peer.id = pending["id"]
            await peer.send({"type": "signal", "to": welcome["id"], "data": {}})
            await peer.expect_error("not-admitted")
        await host.barrier()


async def test_one_network_cannot_lock_other_networks_out_of_a_room() -> None:
    # Crowds are counted by site (an IPv4 /24): the other networks are in other /24s.
    limits = replace(SignalingLimits(), max_pending=3, refused_notice_s=60.0)
    async with serve(config(signaling=limits, trust_proxy=True)) as client:
        host, _ = await join(client, "host", room=ROOM, xff="11.0.0.1")
        flood = []
        for _ in range(3):  # one network fills the waiting list
            peer, _ = await join(client, "flood", room=ROOM, xff="11.0.0.66", expect="pending")
            flood.append(peer)
            await host.expect("join-request")
        # Another network still gets through: it takes the place of the crowd's newest request.
        honest, _ = await join(client, "honest", room=ROOM, xff="11.0.77.7", expect="pending")
        error = await flood[-1].expect_error("room-busy")
        assert "another network" in error["message"] and "reconnect" in error["hint"]
        assert await flood[-1].expect_close() == CLOSE_PROTOCOL
        dropped = await host.expect("join-request-closed")
        assert dropped == {"type": "join-request-closed", "peer": flood[-1].id, "reason": "dropped"}
        assert (await host.expect("join-request"))["peer"]["id"] == honest.id
        # The crowd cannot take the place back (its 2 waiting against its own 2).
        busy = await connect(client, room=ROOM, xff="11.0.0.66")
        await busy.send({"type": "hello", "version": 1, "name": "again", "device": {}})
        await busy.expect_error("room-busy")
        assert await busy.expect_close() == CLOSE_PROTOCOL
        assert await host.expect("join-requests-refused") == {
            "type": "join-requests-refused",
            "count": 1,
        }
        # A third network still finds a place (the crowd has 2, it has none); then every
        # network has one request waiting, and a fourth is refused: the list is simply full.
        third, _ = await join(client, "third", room=ROOM, xff="11.0.88.8", expect="pending")
        await flood[1].expect_error("room-busy")
        assert (await host.expect("join-request-closed"))["peer"] == flood[1].id
        assert (await host.expect("join-request"))["peer"]["id"] == third.id
        busy = await connect(client, room=ROOM, xff="11.0.99.9")
        await busy.send({"type": "hello", "version": 1, "name": "late", "device": {}})
        await busy.expect_error("room-busy")
        # Told within the same minute as the first refusal: held back, not sent yet.
        for peer in (flood[0], honest, third):
            await peer.barrier()  # still waiting
        await host.barrier()


async def test_one_network_may_fill_an_idle_room_queue() -> None:
    # A class behind one NAT joining its room at once: every request reaches the host.
    async with serve(config(trust_proxy=True)) as client:
        host, _ = await join(client, "teacher", room=ROOM, xff="11.0.0.1")
        for n in range(SignalingLimits().max_pending):
            await join(client, f"pupil-{n}", room=ROOM, xff="11.0.0.66", expect="pending")
            await host.expect("join-request")


async def test_a_full_room_queue_refuses_with_a_hint() -> None:
    limits = replace(SignalingLimits(), max_pending=2)
    async with serve(config(signaling=limits, trust_proxy=True)) as client:
        _host, _ = await join(client, "host", room=ROOM, xff="11.0.0.1")
        for n in (2, 3):
            await join(client, "guest", room=ROOM, xff=f"11.0.0.{n}", expect="pending")
        busy = await connect(client, room=ROOM, xff="11.0.0.4")
        await busy.send({"type": "hello", "version": 1, "name": "late", "device": {}})
        error = await busy.expect_error("room-busy")
        assert "ask the host" in error["hint"]
        assert await busy.expect_close() == CLOSE_PROTOCOL


async def test_join_requests_are_paced_per_network_and_room() -> None:
    # The deny-and-reconnect loop: ask, withdraw, ask again. After the burst the network is
    # refused (4429) and the host is shown nothing more; another network is unaffected.
    limits = replace(SignalingLimits(), join_request_burst=3, join_requests_per_s=0.001)
    async with serve(config(signaling=limits, trust_proxy=True)) as client:
        host, _ = await join(client, "host", room=ROOM, xff="11.0.0.1")
        for _ in range(3):
            peer, _ = await join(client, "loop", room=ROOM, xff="11.0.0.66", expect="pending")
            await host.expect("join-request")
            await peer.close()
            assert (await host.expect("join-request-closed"))["reason"] == "left"
        peer = await connect(client, room=ROOM, xff="11.0.0.66")
        await peer.send({"type": "hello", "version": 1, "name": "loop", "device": {}})
        error = await peer.expect_error("rate-limited")
        assert error["ref"] == "hello" and "reconnect" in error["hint"]
        assert await peer.expect_close() == CLOSE_ABUSE
        await host.barrier()  # the refused request never reached the host
        honest, _ = await join(client, "honest", room=ROOM, xff="11.0.0.77", expect="pending")
        assert (await host.expect("join-request"))["peer"]["id"] == honest.id
        # The paced network may still ask another room.
        other, _ = await join(client, "other host", room="room-other1", xff="11.0.0.2")
        await join(client, "loop", room="room-other1", xff="11.0.0.66", expect="pending")
        await other.expect("join-request")


async def test_room_members_are_not_in_the_local_group() -> None:
    async with serve() as client:
        _host, _ = await join(client, "host", room=ROOM)
        _local, welcome = await join(client, "local")
        assert welcome["members"] == []
        status = await (await client.get("/api/status")).json()
        assert (status["rooms"], status["groups"]) == (1, 1)


async def test_sixteen_waiting_squatters_do_not_keep_a_real_guest_from_the_host() -> None:
    """Issue 47 item 7, over real sockets: 16 clients from 16 source addresses of one /24
    (127.0.0.2-17; no proxy header, so the socket address decides) ask to join a room and stay
    waiting; a guest from another /24 (127.0.1.2) still reaches the host, is let in and welcomed.
    Whoever from the crowd asks next is refused, and the host is told."""
    sessions: list[aiohttp.ClientSession] = []

    async def from_address(address: str, url: str) -> WsPeer:
        connector = aiohttp.TCPConnector(local_addr=(address, 0))
        sessions.append(aiohttp.ClientSession(connector=connector))
        return WsPeer(await sessions[-1].ws_connect(url))

    async def hello(peer: WsPeer, name: str, expect: str) -> dict[str, Any]:
        await peer.send({"type": "hello", "version": 1, "name": name, "device": {}})
        reply = await peer.expect(expect)
        peer.id = reply.get("id")
        return reply

    async with serve_local(config(), tokenizer=ByteTokenizer) as base:
        url = f"{base.replace('http://', 'ws://').rstrip('/')}/ws?room={ROOM}"
        try:
            host = await from_address("127.0.0.1", url)
            await hello(host, "host", "welcome")
            squatters = []
            for n in range(2, 18):
                squatter = await from_address(f"127.0.0.{n}", url)
                await hello(squatter, f"squatter-{n}", "pending")
                assert (await host.expect("join-request"))["peer"]["id"] == squatter.id
                squatters.append(squatter)
            guest = await from_address("127.0.1.2", url)
            await hello(guest, "guest", "pending")
            # The crowd's newest request gave its place; the guest's reached the host.
            closed = await host.expect("join-request-closed")
            assert closed == {
                "type": "join-request-closed",
                "peer": squatters[-1].id,
                "reason": "dropped",
            }
            assert (await host.expect("join-request"))["peer"]["id"] == guest.id
            await squatters[-1].expect_error("room-busy")
            assert await squatters[-1].expect_close() == CLOSE_PROTOCOL
            # Another address of the crowd cannot take the place back; the host is told.
            late = await from_address("127.0.0.18", url)
            await late.send({"type": "hello", "version": 1, "name": "late", "device": {}})
            await late.expect_error("room-busy")
            assert await late.expect_close() == CLOSE_PROTOCOL
            refused = await host.expect("join-requests-refused")
            assert refused == {"type": "join-requests-refused", "count": 1}
            await guest.barrier()  # still waiting
            await host.send({"type": "approve", "peer": guest.id})
            welcome = await guest.expect("welcome")
            assert welcome["host"] == host.id and welcome["group"]["kind"] == "room"
            assert (await host.expect("join-request-closed"))["reason"] == "approved"
            assert (await host.expect("peer-joined"))["peer"]["id"] == guest.id
            for squatter in squatters[:-1]:
                await squatter.barrier()  # still waiting, never let in
        finally:
            for session in sessions:
                await session.close()
