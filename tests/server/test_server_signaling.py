"""Signaling over real WebSockets on loopback: membership events, relaying, abuse handling, and
the limits against hostile clients (deep/non-finite JSON, per-address caps, non-reading clients)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from aiohttp import WSMsgType, WSServerHandshakeError
from aiohttp.test_utils import TestClient

from daisychain.server.app import SIGNALING
from daisychain.server.config import SignalingLimits
from daisychain.server.rooms import Hub
from daisychain.server.signaling import Signaling
from daisychain.wire.signaling import CLOSE_ABUSE, CLOSE_PROTOCOL, MAX_JSON_DEPTH
from hostile_harness import raw_websocket, read_frame, text_frame
from server_fixtures import WAIT_S, WsPeer, config, connect, join, serve


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


# ---------------------------------------------------------------------------------------------
# Hostile input (issue 8): refused at parse time, at a strike each; per-address limits.


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def test_deep_or_non_finite_data_is_refused_with_a_strike_and_never_relayed() -> None:
    limits = replace(SignalingLimits(), max_strikes=4, strike_refill_s=1000.0)
    async with serve(config(signaling=limits)) as client:
        alice, _ = await join(client, "alice")
        bob, b_welcome = await join(client, "bob")
        await alice.expect("peer-joined")
        to = b_welcome["id"]
        frames = [
            f'{{"type":"broadcast","data":{{"x":{_nested(800)}}}}}',
            f'{{"type":"signal","to":"{to}","data":{{"x":{_nested(600)}}}}}',
            '{"type":"broadcast","data":{"x":NaN}}',
            f'{{"type":"signal","to":"{to}","data":{{"x":[1,Infinity]}}}}',
            f'{{"type":"signal","to":"{to}","data":{{"x":1e999}}}}',
        ]
        expected = ["nested deeper", "nested deeper", "'NaN'", "'Infinity'", "'1e999'"]
        for frame, words in zip(frames, expected, strict=True):
            await alice.ws.send_str(frame)
            if words == expected[-1]:
                break
            error = await alice.expect_error("bad-json")
            assert words in error["message"], error
        await alice.expect_error("bad-json")
        assert await alice.expect_close() == CLOSE_ABUSE  # 5 refusals > 4 strikes
        assert (await bob.expect("peer-left"))["peer"] != to  # bob saw no relay, only the exit
        await bob.barrier()


async def test_depth_limit_is_exact_and_brackets_inside_strings_do_not_count() -> None:
    async with serve() as client:
        alice, _ = await join(client, "alice")
        bob, b_welcome = await join(client, "bob")
        await alice.expect("peer-joined")
        # The message object is level 1 and data level 2: data may hold 30 more levels.
        for depth, ok in ((MAX_JSON_DEPTH - 2, True), (MAX_JSON_DEPTH - 1, False)):
            frame = f'{{"type":"signal","to":"{b_welcome["id"]}","data":{{"x":{_nested(depth)}}}}}'
            await alice.ws.send_str(frame)
            if ok:
                assert (await bob.expect("signal"))["data"]["x"] == json.loads(_nested(depth))
            else:
                await alice.expect_error("bad-json")
        sdp = "[" * 500 + "{" * 500  # text, not structure
        await alice.send(
            {"type": "signal", "to": b_welcome["id"], "data": {"sdp": sdp, "n": 1e308}}
        )
        assert (await bob.expect("signal"))["data"] == {"sdp": sdp, "n": 1e308}


async def test_an_internal_error_costs_one_line_and_a_strike_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: Hub, sender: object, to: str, data: object) -> None:
        raise RecursionError("planted bug")

    monkeypatch.setattr(Hub, "relay_signal", broken)
    limits = replace(SignalingLimits(), max_strikes=10, strike_refill_s=1000.0)
    caplog.set_level(logging.INFO, logger="daisychain.server.signaling")
    caplog.set_level(logging.INFO, logger="daisychain.server.held")
    async with serve(config(signaling=limits)) as client:
        alice, _ = await join(client, "alice")
        bob, b_welcome = await join(client, "bob")
        await alice.expect("peer-joined")
        for _ in range(12):
            await alice.send({"type": "signal", "to": b_welcome["id"], "data": {}})
        for _ in range(11):
            error = await alice.expect_error("internal-error")
            assert "report" in error["hint"]
        assert await alice.expect_close() == CLOSE_ABUSE
        await bob.expect("peer-left")
        await bob.barrier()  # the server carried on for everyone else
    records = [r for r in caplog.records if r.name == "daisychain.server.signaling"]
    assert not any(r.exc_info for r in records), "no traceback is logged"
    internal = [r.getMessage() for r in records if "internal error" in r.getMessage()]
    assert 1 <= len(internal) <= 5, internal  # throttled: 12 errors, a handful of lines
    assert "RecursionError: planted bug at " in internal[0]
    # What the throttle held back is counted in one line for all networks, not one per socket.
    held = [r.getMessage() for r in caplog.records if r.name == "daisychain.server.held"]
    assert any("held back (refused WebSocket messages) from 1 client" in m for m in held), held


async def test_connections_per_address_are_capped_and_the_slot_comes_back() -> None:
    limits = replace(SignalingLimits(), max_connections_per_address=2)
    async with serve(config(signaling=limits, trust_proxy=True)) as client:
        first = await connect(client, xff="11.0.0.66")
        await connect(client, xff="11.0.0.66")
        # Refused before the upgrade: an HTTP 429 that says why and when to retry.
        with pytest.raises(WSServerHandshakeError) as refused:
            await connect(client, xff="11.0.0.66")
        assert refused.value.status == 429
        response = await client.get("/ws", headers={"X-Forwarded-For": "11.0.0.66"})
        assert response.status == 429 and int(response.headers["Retry-After"]) >= 1
        body = await response.json()
        assert body["code"] == "too-many-connections" and "close other tabs" in body["hint"]
        _, welcome = await join(client, "other network", xff="11.0.0.77")
        assert welcome["group"]["kind"] == "network"
        await first.close()
        await _until(lambda: _signaling(client).per_address["v4:11.0.0.66"] == 1)
        _, welcome = await join(client, "fourth", xff="11.0.0.66")
        assert welcome["members"] == []


async def test_the_socket_cap_counts_an_ipv6_64_as_one_address() -> None:
    # A device picks new IPv6 addresses inside its /64 at will: they share one budget, as they
    # share one group. (2a00:1450:4001:81c::/64 is public; nothing here contacts it.)
    limits = replace(SignalingLimits(), max_connections_per_address=2)
    async with serve(config(signaling=limits, trust_proxy=True)) as client:
        await connect(client, xff="2a00:1450:4001:81c::1")
        await connect(client, xff="2a00:1450:4001:81c:ffff:ffff:ffff:ffff")
        with pytest.raises(WSServerHandshakeError) as refused:
            await connect(client, xff="2a00:1450:4001:81c::3")
        assert refused.value.status == 429
        _, welcome = await join(client, "next /64", xff="2a00:1450:4001:81d::1")
        assert welcome["group"]["kind"] == "network"


async def test_hellos_are_paced_per_address() -> None:
    limits = replace(SignalingLimits(), hello_burst=3, hellos_per_s=0.001)
    async with serve(config(signaling=limits, trust_proxy=True)) as client:
        # Four sockets opened while the address still had hellos; the fourth hello is one too
        # many: refused with a hint, close 4429, and it squats nothing.
        peers = [await connect(client, room=f"squatted-{n}", xff="11.0.0.66") for n in range(4)]
        for n, peer in enumerate(peers[:3]):
            await peer.send({"type": "hello", "version": 1, "name": f"squat-{n}", "device": {}})
            await peer.expect("welcome")
        await peers[3].send({"type": "hello", "version": 1, "name": "squat", "device": {}})
        error = await peers[3].expect_error("rate-limited")
        assert error["ref"] == "hello" and "hellos from your network" in error["message"]
        assert "wait" in error["hint"]
        assert await peers[3].expect_close() == CLOSE_ABUSE
        status = await (await client.get("/api/status")).json()
        assert status["rooms"] == 3
        # With no hello left, the address's next socket is refused before the upgrade.
        response = await client.get("/ws", headers={"X-Forwarded-For": "11.0.0.66"})
        assert response.status == 429 and (await response.json())["code"] == "rate-limited"
        with pytest.raises(WSServerHandshakeError):
            await connect(client, xff="11.0.0.66")
        _, welcome = await join(client, "honest", room="squatted-3", xff="11.0.0.77")
        assert welcome["role"] == "host"


async def test_a_client_that_stops_reading_is_aborted_and_freed() -> None:
    limits = replace(SignalingLimits(), outbox_limit_bytes=200_000)
    async with serve(config(signaling=limits)) as client:
        alice, _ = await join(client, "alice")
        assert client.server.host is not None and client.server.port is not None
        reader, writer = await raw_websocket(
            client.server.host, client.server.port, receive_buffer=4096
        )
        writer.write(text_frame(json.dumps({"type": "hello", "version": 1, "name": "slow"})))
        slow_id = (await alice.expect("peer-joined"))["peer"]["id"]
        conn = next(c for c in _signaling(client).connections if c.peer.id == slow_id)
        pinned = weakref.ref(conn)
        del conn
        seen: list[dict[str, Any]] = []
        listener = asyncio.create_task(_collect(alice, seen))
        sent = 0
        while not any(m["type"] == "peer-left" for m in seen) and sent < 190:
            await alice.send({"type": "signal", "to": slow_id, "data": {"sdp": "x" * 60_000}})
            sent += 1
            await asyncio.sleep(0.01)
        await _until(lambda: any(m["type"] == "peer-left" for m in seen))
        listener.cancel()
        assert [m["peer"] for m in seen if m["type"] == "peer-left"] == [slow_id]
        assert not [m for m in seen if m["type"] == "error"], seen  # no strike for alice
        status = await (await client.get("/api/status")).json()
        assert status["peers"] == 1
        # Freed by reference counting alone, as soon as its handler returned: no cycle keeps
        # it for the next full collection (which a busy server may not run for a long time).
        gc.disable()
        try:
            await _until(lambda: pinned() is None)
        finally:
            gc.enable()
        # Aborted, not closed politely: the reader finds the stream cut with no close frame.
        opcodes = []
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            for _ in range(1000):
                opcode, _payload = await asyncio.wait_for(read_frame(reader), WAIT_S)
                opcodes.append(opcode)
        assert 0x8 not in opcodes
        writer.close()


async def test_a_close_on_a_client_that_never_answers_it_is_cut_short() -> None:
    limits = replace(SignalingLimits(), max_strikes=2, close_timeout_s=0.2)
    async with serve(config(signaling=limits)) as client:
        assert client.server.host is not None and client.server.port is not None
        _reader, writer = await raw_websocket(client.server.host, client.server.port)
        for _ in range(3):
            writer.write(text_frame("nope"))  # out of strikes: the server closes (4429)
        # The client never reads or answers the close frame; the server drops it anyway.
        await _until(lambda: not _signaling(client).connections)
        status = await (await client.get("/api/status")).json()
        assert status["peers"] == 0
        writer.close()


def _signaling(client: TestClient[Any, Any]) -> Signaling:
    return client.server.app[SIGNALING]


async def _collect(peer: WsPeer, into: list[dict[str, Any]]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        while True:
            into.append(await peer.recv())


async def _until(predicate: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    """Bounded polling (no fixed sleeps)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_silent_sockets_are_pinged_and_dropped_when_they_do_not_answer() -> None:
    limits = replace(SignalingLimits(), heartbeat_s=0.2)
    async with serve(config(signaling=limits)) as client:
        hello = {"type": "hello", "version": 1, "name": "x", "device": {}}
        # Separate rooms, so neither hears of the other.
        answering = await client.ws_connect("/ws?room=alive-room", autoping=False)
        await answering.send_json(hello)
        assert json.loads((await answering.receive(timeout=WAIT_S)).data)["type"] == "welcome"
        mute = await client.ws_connect("/ws?room=muted-room", autoping=False)
        await mute.send_json(hello)
        assert json.loads((await mute.receive(timeout=WAIT_S)).data)["type"] == "welcome"
        for _ in range(3):  # three periods: pinged each time, alive while it answers
            ping = await answering.receive(timeout=WAIT_S)
            assert ping.type is WSMsgType.PING
            await answering.pong(ping.data)
        # The mute one was pinged too, never answered, and was dropped without a close frame.
        seen = []
        for _ in range(10):
            frame = await mute.receive(timeout=WAIT_S)
            seen.append(frame.type)
            if frame.type not in (WSMsgType.PING, WSMsgType.TEXT):
                break
        assert WSMsgType.PING in seen and seen[-1] in (WSMsgType.CLOSED, WSMsgType.ERROR), seen
        assert mute.close_code not in (CLOSE_ABUSE, CLOSE_PROTOCOL, 1000)
        await answering.ping(b"still here")  # a client's ping is answered by the server
        while (frame := await answering.receive(timeout=WAIT_S)).type is WSMsgType.PING:
            await answering.pong(frame.data)
        assert frame.type is WSMsgType.PONG and frame.data == b"still here"
        status = await (await client.get("/api/status")).json()
        assert status["peers"] == 1
