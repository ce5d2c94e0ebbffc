"""Signaling over real WebSockets on loopback: membership events, relaying, and abuse handling."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

from daisychain.server.config import SignalingLimits
from daisychain.server.messages import CLOSE_ABUSE, CLOSE_PROTOCOL
from server_fixtures import config, connect, join, serve


async def test_first_peer_is_welcomed_into_an_empty_local_group() -> None:
    async with serve() as client:
        _peer, welcome = await join(client, "alice")
        assert welcome["version"] == 1
        assert welcome["group"]["kind"] == "local"
        assert welcome["members"] == []
        assert welcome["role"] == "member"
        assert len(welcome["id"]) == 12


async def test_second_peer_sees_the_first_and_the_first_hears_of_it() -> None:
    async with serve() as client:
        alice, a_welcome = await join(client, "alice")
        _bob, b_welcome = await join(client, "bob")
        assert [m["id"] for m in b_welcome["members"]] == [a_welcome["id"]]
        assert b_welcome["members"][0]["name"] == "alice"
        joined = await alice.expect("peer-joined")
        assert joined["peer"] == {"id": b_welcome["id"], "name": "bob", "device": {"kind": "test"}}


async def test_disconnect_announces_peer_left_and_empties_the_group() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        bob, b_welcome = await join(client, "bob")
        await alice.expect("peer-joined")
        await bob.close()
        left = await alice.expect("peer-left")
        assert left["peer"] == b_welcome["id"]
        status = await (await client.get("/api/status")).json()
        assert status["peers"] == 1 and status["groups"] == 1


async def test_signal_is_relayed_with_the_server_stamped_sender() -> None:
    async with serve() as client:
        alice, a_welcome = await join(client, "alice")
        bob, b_welcome = await join(client, "bob")
        await alice.expect("peer-joined")
        offer = {"sdp": "v=0...", "kind": "offer"}
        await alice.send({"type": "signal", "to": b_welcome["id"], "data": offer})
        relayed = await bob.expect("signal")
        assert relayed == {"type": "signal", "from": a_welcome["id"], "data": offer}


async def test_forged_from_is_overwritten() -> None:
    async with serve() as client:
        alice, a_welcome = await join(client, "alice")
        bob, b_welcome = await join(client, "bob")
        await alice.expect("peer-joined")
        await alice.send(
            {"type": "signal", "to": b_welcome["id"], "from": b_welcome["id"], "data": {"x": 1}}
        )
        relayed = await bob.expect("signal")
        assert relayed["from"] == a_welcome["id"]


async def test_signal_to_an_unknown_peer_is_an_error() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        await alice.send({"type": "signal", "to": "nobody", "data": {}})
        error = await alice.expect_error("unknown-peer")
        assert error["ref"] == "signal"


async def test_broadcast_reaches_the_others_but_not_the_sender() -> None:
    async with serve() as client:
        alice, a_welcome = await join(client, "alice")
        bob, _ = await join(client, "bob")
        carol, _ = await join(client, "carol")
        await alice.expect("peer-joined")
        await alice.expect("peer-joined")
        await bob.expect("peer-joined")
        await alice.send({"type": "broadcast", "data": {"start": True}})
        for other in (bob, carol):
            message = await other.expect("broadcast")
            assert message == {
                "type": "broadcast",
                "from": a_welcome["id"],
                "data": {"start": True},
            }
        await alice.barrier()


async def test_ping_is_answered_with_the_same_nonce() -> None:
    async with serve() as client:
        peer = await connect(client)
        await peer.send({"type": "ping", "nonce": "n-1"})
        assert await peer.recv() == {"type": "pong", "nonce": "n-1"}


async def test_malformed_json_gets_an_error_and_the_connection_survives() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        await alice.ws.send_str("{not json")
        await alice.expect_error("bad-json")
        await alice.barrier()


async def test_unknown_type_gets_an_error_naming_it() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        await alice.send({"type": "teleport"})
        error = await alice.expect_error("unknown-type")
        assert error["ref"] == "teleport"


async def test_mistyped_field_gets_bad_message() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        await alice.send({"type": "signal", "to": 42, "data": {}})
        error = await alice.expect_error("bad-message")
        assert "signal.to" in error["message"]


async def test_non_object_json_gets_bad_message() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        await alice.send([1, 2, 3])
        await alice.expect_error("bad-message")


async def test_oversized_message_gets_too_large_and_the_next_message_works() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        await alice.send({"type": "broadcast", "data": {"blob": "x" * 70_000}})
        await alice.expect_error("too-large")
        await alice.barrier()


async def test_large_broadcast_is_refused_but_a_large_signal_fits() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        bob, b_welcome = await join(client, "bob")
        await alice.expect("peer-joined")
        await alice.send({"type": "broadcast", "data": {"blob": "x" * 5000}})
        await alice.expect_error("too-large")
        await alice.send({"type": "signal", "to": b_welcome["id"], "data": {"sdp": "x" * 20_000}})
        assert len((await bob.expect("signal"))["data"]["sdp"]) == 20_000


async def test_binary_frame_gets_an_error() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        await alice.ws.send_bytes(b"\x00\x01")
        await alice.expect_error("binary-unsupported")


async def test_relay_before_hello_is_refused() -> None:
    async with serve() as client:
        peer = await connect(client)
        await peer.send({"type": "broadcast", "data": {}})
        await peer.expect_error("hello-first")


async def test_second_hello_is_refused() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        await alice.send({"type": "hello", "version": 1, "name": "again", "device": {}})
        await alice.expect_error("already-joined")


async def test_protocol_version_mismatch_gets_a_hint_and_a_close() -> None:
    async with serve() as client:
        peer = await connect(client)
        await peer.send({"type": "hello", "version": 99, "name": "old", "device": {}})
        error = await peer.expect_error("version-mismatch")
        assert "reload" in error["hint"]
        assert await peer.expect_close() == CLOSE_PROTOCOL


async def test_hello_with_an_oversized_device_summary_is_refused() -> None:
    async with serve() as client:
        peer = await connect(client)
        device = {f"k{i}": i for i in range(40)}
        await peer.send({"type": "hello", "version": 1, "name": "x", "device": device})
        await peer.expect_error("bad-message")


async def test_connection_without_hello_is_closed() -> None:
    limits = replace(SignalingLimits(), hello_timeout_s=0.2)
    async with serve(config(signaling=limits)) as client:
        peer = await connect(client)
        await peer.expect_error("hello-first")
        assert await peer.expect_close() == CLOSE_PROTOCOL


async def test_flood_is_rate_limited_then_closed_and_others_are_unaffected() -> None:
    limits = replace(SignalingLimits(), rate_per_s=1.0, burst=5, max_strikes=3)
    async with serve(config(signaling=limits)) as client:
        alice, a_welcome = await join(client, "alice")
        bob, b_welcome = await join(client, "bob")
        mallory, _ = await join(client, "mallory")
        await alice.expect("peer-joined")
        await alice.expect("peer-joined")
        await bob.expect("peer-joined")
        for i in range(50):
            if mallory.ws.closed:
                break
            await mallory.send({"type": "ping", "nonce": i})
        codes = []
        for _ in range(50):
            message = await mallory.recv()
            if message["type"] == "error":
                codes.append(message["code"])
                if len(codes) == 4:
                    break
        assert codes == ["rate-limited"] * 4
        assert await mallory.expect_close() == CLOSE_ABUSE
        # The others still relay, and hear that mallory left.
        assert (await alice.expect("peer-left"))["peer"] != a_welcome["id"]
        await alice.send({"type": "signal", "to": b_welcome["id"], "data": {"ok": 1}})
        await bob.expect("peer-left")
        assert (await bob.expect("signal"))["from"] == a_welcome["id"]


async def test_repeated_malformed_messages_close_the_connection() -> None:
    limits = replace(SignalingLimits(), max_strikes=3)
    async with serve(config(signaling=limits)) as client:
        peer = await connect(client)
        for _ in range(4):
            await peer.ws.send_str("nope")
        for _ in range(4):
            await peer.expect_error("bad-json")
        assert await peer.expect_close() == CLOSE_ABUSE
        # The server is still up for everyone else.
        _, welcome = await join(client, "next")
        assert welcome["members"] == []


async def test_healthz_and_status_expose_counts_only() -> None:
    async with serve() as client:
        await join(client, "alice-secret-name")
        health = await client.get("/healthz")
        assert health.status == 200 and await health.text() == "ok\n"
        response = await client.get("/api/status")
        status = await response.json()
        assert {k: status[k] for k in ("peers", "groups", "rooms", "pending")} == {
            "peers": 1,
            "groups": 1,
            "rooms": 0,
            "pending": 0,
        }
        assert status["data"]["state"] == "offline"
        text = json.dumps(status)
        assert "alice" not in text and "127.0.0.1" not in text


async def test_server_shutdown_closes_sockets_with_going_away() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        closing = asyncio.create_task(client.server.close())
        assert await alice.expect_close() == 1001
        await closing
