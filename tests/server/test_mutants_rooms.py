"""Rooms and groups: behaviour pinned by mutants that survived the rest of the suite.

Each test names the mutant of ``server/daisychain/server/rooms.py`` it kills (docs/TESTING.md).
"""

from __future__ import annotations

from dataclasses import replace

from daisychain.server.config import SignalingLimits
from server_fixtures import config, connect, join, serve

ROOM = "room-mutants01"


async def test_an_automatic_group_is_full_at_exactly_max_group_size() -> None:
    """``>=`` became ``>``: a group of max_group_size devices admitted one more. The refusal
    names its code and the message it answers."""
    limits = replace(SignalingLimits(), max_group_size=2)
    async with serve(config(signaling=limits)) as client:
        await join(client, "a")
        await join(client, "b")
        third = await connect(client)
        await third.send({"type": "hello", "version": 1, "name": "c", "device": {}})
        error = await third.expect_error("group-full")
        assert error["ref"] == "hello"
        assert "2 devices" in error["message"]


async def test_a_second_hello_is_refused_naming_the_state() -> None:
    """The already-joined error says which state the connection is in (its message was
    replaceable by None)."""
    async with serve() as client:
        peer, _ = await join(client, "a")
        await peer.send({"type": "hello", "version": 1, "name": "a", "device": {}})
        error = await peer.expect_error("already-joined")
        assert error["ref"] == "hello"
        assert "you are member" in error["message"]


async def test_answers_to_unknown_requests_name_the_message_they_answer() -> None:
    """``ref`` of not-host / unknown-peer is the message kind (deny or approve): the mutants
    passed None, or dropped ref, in ``_pending_for_host``."""
    async with serve() as client:
        host, _ = await join(client, "host", room=ROOM)
        await host.send({"type": "deny", "peer": "nobody"})
        assert (await host.expect_error("unknown-peer"))["ref"] == "deny"
        await host.send({"type": "approve", "peer": "nobody"})
        assert (await host.expect_error("unknown-peer"))["ref"] == "approve"


async def test_a_dropped_request_is_told_which_message_it_answers() -> None:
    """room-busy (a request giving its place to another network's) carries ref "hello"."""
    limits = replace(SignalingLimits(), max_pending=2)
    async with serve(config(signaling=limits, trust_proxy=True)) as client:
        await join(client, "host", room=ROOM, xff="11.0.0.1")
        await join(client, "flood1", room=ROOM, xff="11.0.0.66", expect="pending")
        newest, _ = await join(client, "flood2", room=ROOM, xff="11.0.0.66", expect="pending")
        await join(client, "honest", room=ROOM, xff="11.0.77.7", expect="pending")
        error = await newest.expect_error("room-busy")
        assert error["ref"] == "hello"


async def test_a_new_host_sees_the_time_left_on_waiting_requests() -> None:
    """When the host leaves, the new host is shown each waiting request with the time it has
    left, not a fresh full timeout (the mutant forgot the request's timer)."""
    async with serve() as client:
        host, _ = await join(client, "host", room=ROOM)
        second, pending = await join(client, "second", room=ROOM, expect="pending")
        await host.expect("join-request")
        await host.send({"type": "approve", "peer": pending["id"]})
        await second.expect("welcome")
        await host.expect("join-request-closed")
        await host.expect("peer-joined")
        _, waiting = await join(client, "third", room=ROOM, expect="pending")
        await host.expect("join-request")
        await host.close()
        await second.expect("peer-left")
        assert (await second.expect("host-changed"))["host"] == pending["id"]
        request = await second.expect("join-request")
        assert request["peer"]["id"] == waiting["id"]
        assert 0 < request["expires_in_s"] < waiting["timeout_s"]
