"""What a peer receives from the signaling server goes through one typed parser
(``p2p.signaling``): every server record round-trips, every malformed message is refused with a
hint, and the mesh acts on the refusal (connect fails with a hint, a malformed message after
welcome ends the signaling connection, a malformed relayed signal is refused alone). The mesh
cases talk to a scripted WebSocket server on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, cast, get_args

import pytest
from aiohttp import web

from daisychain.p2p import signaling
from daisychain.p2p.mesh import Mesh, MeshError, PeerLeft, SignalingLost
from daisychain.p2p.signaling import Candidate, Description, SignalingError
from daisychain.p2p.versions import SIGNALING_VERSION
from daisychain.server.config import SignalingLimits
from daisychain.wire import signaling as sm
from server_fixtures import config, serve

PEER = sm.PeerInfo("Q2xabc", "Ada", {"kind": "browser", "gpu": True})
WELCOME = sm.Welcome(
    SIGNALING_VERSION, "Zk9def", sm.GroupInfo("room", "mathclub-42"), "member", "Q2xabc", [PEER]
)
EVERY_SERVER_MESSAGE: list[sm.ServerMessage] = [
    WELCOME,
    sm.Welcome(SIGNALING_VERSION, "Zk9def", sm.GroupInfo("local", "g1"), "member", None, []),
    sm.Pending("Zk9def", "mathclub-42", 120.0, "waiting for the host"),
    sm.Denied("closed", "the room closed", "ask for a new link"),
    sm.JoinRequest(PEER, 120.0),
    sm.JoinRequestClosed("Q2xabc", "left"),
    sm.JoinRequestsRefused(3),
    sm.Invite("Ab-_" * 8, 20, 3, 3599.5, "open"),
    sm.Invite(None, 20, 20, 0.0, "used-up"),
    sm.PeerJoined(PEER),
    sm.PeerLeft("Q2xabc"),
    sm.HostChanged("Q2xabc"),
    sm.SignalFrom("Q2xabc", {"kind": "offer", "sdp": "v=0"}),
    sm.BroadcastFrom("Q2xabc", {"hi": 1}),
    sm.Pong(7),
    sm.Pong(None),
    sm.Error("rate-limited", "slow down", "wait", "signal"),
]


def test_every_server_message_round_trips_into_the_servers_own_record() -> None:
    declared = {a.__dataclass_fields__["type"].default for a in get_args(sm.ServerMessage)}
    assert set(signaling.SERVER_TYPES) == declared
    assert {m.type for m in EVERY_SERVER_MESSAGE} == declared
    for message in EVERY_SERVER_MESSAGE:
        assert signaling.parse_server(sm.encode(message)) == message


def _welcome(**changes: Any) -> str:
    obj = json.loads(sm.encode(WELCOME))
    obj.update(changes)
    return json.dumps(obj)


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        ("{", "not JSON"),
        ("[1]", "not a JSON object"),
        (b'{"type": "welcome"}', "binary"),
        ('{"type": "welcome", "pad": "' + "x" * (1024 * 1024) + '"}', "larger than"),
        ('{"type": "surprise"}', "unknown server message type 'surprise'"),
        ('{"kind": "welcome"}', "unknown server message type None"),
        (_welcome(version=SIGNALING_VERSION + 1), "signaling version 2"),
        (_welcome(id=None), "welcome.id"),
        (_welcome(id="has space"), "welcome.id"),
        (_welcome(group={"kind": "planet", "id": "x"}), "welcome.group.kind"),
        (_welcome(role="admin"), "welcome.role"),
        (_welcome(members={"a": 1}), "welcome.members"),
        (_welcome(members=[{"id": "a", "name": "b"}]), "welcome.members\\[\\].device"),
        (_welcome(members=["a"]), "welcome.members\\[\\]"),
        ('{"type": "peer-joined", "peer": {"id": "a/b", "name": "", "device": {}}}', "peer.id"),
        ('{"type": "peer-left", "peer": 7}', "peer-left.peer"),
        ('{"type": "signal", "from": "abc", "data": "offer"}', "signal.data"),
        ('{"type": "signal", "data": {}}', "signal.from"),
        ('{"type": "denied", "reason": "maybe", "message": "", "hint": ""}', "denied.reason"),
        ('{"type": "pending", "id": "abc", "room": "x", "timeout_s": 1, "message": ""}', "room"),
        ('{"type": "error", "code": "teapot", "message": "", "hint": ""}', "error.code"),
        ('{"type": "error", "code": "rate-limited", "message": "", "hint": 3}', "error.hint"),
        ('{"type": "pong", "nonce": true}', "pong.nonce"),
        ('{"type": "host-changed"}', "host-changed.host"),
        ('{"type": "join-request", "peer": {}, "expires_in_s": 1}', "join-request.peer"),
        ('{"type": "join-requests-refused", "count": 0}', "join-requests-refused.count"),
        ('{"type": "join-requests-refused", "count": "3"}', "join-requests-refused.count"),
    ],
)
def test_malformed_server_messages_are_refused_with_a_hint(raw: str | bytes, text: str) -> None:
    with pytest.raises(SignalingError, match=text) as info:
        signaling.parse_server(raw)
    assert info.value.hint


def test_relayed_signal_data_is_parsed_into_records() -> None:
    assert signaling.parse_signal_data({"kind": "offer", "sdp": "v=0"}) == Description(
        "offer", "v=0"
    )
    assert signaling.parse_signal_data({"kind": "answer", "sdp": "v=0", "x": 1}) == Description(
        "answer", "v=0"
    )
    cand = {"kind": "candidate", "candidate": "candidate:1 1 udp 1 10.0.0.1 9 typ host"}
    assert signaling.parse_signal_data(cand | {"sdpMid": "0", "sdpMLineIndex": 0}) == Candidate(
        cand["candidate"], "0", 0
    )
    assert signaling.parse_signal_data(cand) == Candidate(cand["candidate"], None, None)


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ({"sdp": "v=0"}, "kind"),
        ({"type": "offer", "sdp": "v=0"}, "kind"),  # `kind`, not `type`
        ({"kind": "offer"}, "sdp"),
        ({"kind": "offer", "sdp": "v" * 60_001}, "sdp"),
        ({"kind": "candidate", "candidate": ""}, "candidate"),
        ({"kind": "candidate", "candidate": "c", "sdpMLineIndex": True}, "sdpMLineIndex"),
        ({"kind": "candidate", "candidate": "c", "sdpMLineIndex": 999}, "sdpMLineIndex"),
        ({"kind": "candidate", "candidate": "c", "sdpMid": 0}, "sdpMid"),
    ],
)
def test_malformed_relayed_signal_data_is_refused(data: dict[str, Any], text: str) -> None:
    with pytest.raises(SignalingError, match=f"relayed signal.data.{text}") as info:
        signaling.parse_signal_data(data)
    assert "sending peer" in info.value.hint


@pytest.mark.parametrize(
    "message",
    [
        sm.Hello(SIGNALING_VERSION, "peer", {"kind": "python", "backend": "numpy"}),
        sm.Signal("Q2xabc", {"kind": "answer", "sdp": "v=0"}),
        sm.Approve("Q2xabc"),
        sm.Deny("Q2xabc"),
    ],
)
def test_what_the_peer_sends_is_what_the_server_parses(message: sm.ClientMessage) -> None:
    assert sm.parse_client(signaling.encode_client(message), max_broadcast_bytes=4096) == message


# -- the mesh acting on it, against a scripted server on loopback --------------------------

Script = Callable[[web.WebSocketResponse], Awaitable[None]]


@asynccontextmanager
async def scripted_server(script: Script) -> AsyncIterator[str]:
    """A /ws endpoint that reads the peer's hello, then runs ``script``; yields its URL."""

    async def ws(request: web.Request) -> web.WebSocketResponse:
        sock = web.WebSocketResponse()
        await sock.prepare(request)
        hello = json.loads((await sock.receive()).data)
        assert hello["type"] == "hello" and hello["version"] == SIGNALING_VERSION
        await script(sock)
        async for _ in sock:  # keep the socket open until the peer closes it
            pass
        return sock

    app = web.Application()
    app.router.add_get("/ws", ws)
    async with serving(app) as url:
        yield url


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """Serves ``app`` on a free loopback port; yields its URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def send(*texts: str) -> Script:
    async def script(sock: web.WebSocketResponse) -> None:
        for text in texts:
            await sock.send_str(text)

    return script


async def test_connect_fails_with_a_hint_on_a_malformed_welcome() -> None:
    async with scripted_server(send(_welcome(group="room"))) as url:
        mesh = Mesh(url, name="p")
        with pytest.raises(MeshError, match=r"welcome\.group") as info:
            await mesh.connect()
        await mesh.close()
    assert "DaisyChain server" in info.value.hint


async def test_connect_refuses_a_server_of_another_signaling_version() -> None:
    async with scripted_server(send(_welcome(version=SIGNALING_VERSION + 1))) as url:
        mesh = Mesh(url, name="p")
        with pytest.raises(MeshError, match="signaling version") as info:
            await mesh.connect()
        await mesh.close()
    assert "same DaisyChain version" in info.value.hint


async def test_a_malformed_server_message_after_welcome_ends_signaling_with_the_reason() -> None:
    bad = '{"type": "peer-joined", "peer": {"id": 5, "name": "", "device": {}}}'
    async with scripted_server(send(sm.encode(WELCOME), bad)) as url:
        mesh = Mesh(url, name="p")
        await mesh.connect()
        try:
            event = await asyncio.wait_for(mesh.events.get(), 10)
        finally:
            await mesh.close()
    assert isinstance(event, SignalingLost)
    assert "peer-joined.peer.id" in event.reason and "hint:" in event.reason


async def test_a_malformed_relayed_signal_is_refused_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another peer wrote it: logged with the sender, and the connection to the server stays
    (the peer-left that follows is still acted on)."""
    empty = sm.Welcome(SIGNALING_VERSION, "Zk9def", sm.GroupInfo("local", "g"), "member", None, [])
    bad_signal = sm.encode(sm.SignalFrom("Q2xabc", {"kind": "offer", "sdp": 42}))
    script = send(sm.encode(empty), bad_signal, sm.encode(sm.PeerLeft("Q2xabc")))
    caplog.set_level(logging.WARNING, logger="daisychain.p2p.mesh")
    async with scripted_server(script) as url:
        mesh = Mesh(url, name="p")
        await mesh.connect()
        try:
            event = await asyncio.wait_for(mesh.events.get(), 10)
        finally:
            await mesh.close()
    assert event == PeerLeft("Q2xabc")
    assert any(
        "signal from Q2xabc refused" in r.message and "signal.data.sdp" in r.message
        for r in caplog.records
    )


async def test_connect_explains_the_servers_per_address_refusal() -> None:
    """The real server refuses a socket over its per-address cap with HTTP 429 before the
    upgrade; the peer says that, not "cannot reach the server"."""
    limits = replace(SignalingLimits(), max_connections_per_address=1)
    async with serve(config(signaling=limits)) as client:
        url = str(client.make_url("/"))
        holder = await client.ws_connect("/ws")  # takes this address's only socket
        mesh = Mesh(url, name="p")
        with pytest.raises(MeshError, match="HTTP 429") as info:
            await mesh.connect()
        await mesh.close()
        await holder.close()
    assert "retry in" in info.value.hint


async def test_connect_names_a_server_that_is_not_daisychain() -> None:
    async with serving(web.Application()) as url:  # no /ws route: the upgrade gets a 404
        mesh = Mesh(url, name="p")
        with pytest.raises(MeshError, match="HTTP 404") as info:
            await mesh.connect()
        await mesh.close()
    assert "must be a DaisyChain server" in info.value.hint


async def test_close_closes_the_socket_and_session_when_closing_a_link_is_cancelled() -> None:
    """A peer torn down by cancellation (a failed test's event loop ends every task at once)
    sees its links' close cancelled under it; the socket and the HTTP session must close anyway,
    or the session outlives the peer (an unclosed-session warning in whatever runs next)."""
    async with serve(config()) as client:
        mesh = Mesh(str(client.make_url("/")), name="p")
        await mesh.connect()

        async def cancelled(peer: str, drain_s: float = 0.0) -> None:
            raise asyncio.CancelledError

        mesh._links["gone"] = cast(Any, None)  # one link, whose close is cancelled
        mesh.close_link = cancelled  # type: ignore[method-assign]
        session, ws = mesh._session, mesh._ws
        assert session is not None and ws is not None and not session.closed
        with pytest.raises(asyncio.CancelledError):
            await mesh.close()
        assert ws.closed and session.closed
