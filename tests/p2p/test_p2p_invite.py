"""The headless peer's side of invite links: ``--invite LINK`` read by
``p2p/invitelink.py``, the token sent in hello by ``p2p/mesh.py``, and every refusal as the real
client meets it (its ``MeshError`` says the server's words and hint), the expiry driven by the
server's injected clock rather than a wait; the ``invite`` server message checked by the
peer's parser like every other.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from daisychain.p2p import invitelink, signaling
from daisychain.p2p.mesh import Mesh, MeshError
from daisychain.peer.main import EXIT_JOIN, main
from daisychain.server.app import SIGNALING
from mesh_helpers import needs_namespace
from server_fixtures import WsPeer, join, serve

pytestmark = [needs_namespace, pytest.mark.timeout(120)]
ROOM = "invite-room-2"


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


async def hosted(
    client: TestClient[Any, Any], uses: int, expires_s: float = 600.0
) -> tuple[WsPeer, str]:
    host, _ = await join(client, "host", room=ROOM)
    await host.send({"type": "invite-create", "uses": uses, "expires_s": expires_s})
    invite = await host.expect("invite")
    return host, str(invite["token"])


async def mesh_join(client: TestClient[Any, Any], token: str, name: str) -> Mesh:
    mesh = Mesh(str(client.make_url("")), room=ROOM, invite=token, name=name)
    try:
        await mesh.connect()
    except BaseException:
        await mesh.close()
        raise
    return mesh


async def refusal(client: TestClient[Any, Any], token: str) -> MeshError:
    with pytest.raises(MeshError) as exc:
        await mesh_join(client, token, "late")
    return exc.value


async def test_a_real_peer_joins_by_invite_and_meets_each_refusal() -> None:
    async with serve() as client:
        clock = Clock()
        client.server.app[SIGNALING].hub.clock = clock
        host, token = await hosted(client, uses=2, expires_s=600.0)
        meshes = [await mesh_join(client, token, f"p{n}") for n in range(2)]
        try:
            assert [m.role for m in meshes] == ["member", "member"]
            used_up = await refusal(client, token)
            assert "invite link refused" in used_up.message
            assert "already admitted the 2 devices" in used_up.message
            assert "ask the host for a new invite link" in used_up.hint

            wrong = await refusal(client, "Z" * 32)
            assert "does not open this room" in wrong.message

            await host.send({"type": "invite-create", "uses": 5, "expires_s": 60.0})
            fresh = None
            while fresh is None:  # skip the first invite's status messages
                message = await host.recv()
                if message["type"] == "invite" and message["token"]:
                    fresh = message["token"]
            clock.now += 60.0
            expired = await refusal(client, fresh)
            assert "this invite link has expired" in expired.message

            await host.send({"type": "invite-revoke"})
            revoked = await refusal(client, fresh)
            assert "the host revoked this invite link" in revoked.message
        finally:
            for mesh in meshes:
                await mesh.close()


def test_invite_links_are_read_with_the_servers_rules() -> None:
    token = "Ab-_" * 8
    link = invitelink.parse(f"https://10.0.0.5:8787/?room=mathclub-42#invite={token}")
    assert (link.server, link.room, link.token) == ("https://10.0.0.5:8787", "mathclub-42", token)
    assert token not in repr(link)
    for bad, said in [
        ("mathclub-42", "http(s) link"),
        (f"ftp://h/?room=mathclub-42#invite={token}", "http(s) link"),
        (f"http://h/#invite={token}", "names no room"),
        ("http://h/?room=mathclub-42", "no invite token"),
        (f"http://h/?room=no#invite={token}", "room code must be"),
        ("http://h/?room=mathclub-42#invite=" + "a" * 65, "hello.invite must be 16-64"),
        ("http://h/?room=mathclub-42#invite=abc!", "hello.invite must be 16-64"),
    ]:
        with pytest.raises(invitelink.InviteLinkError) as exc:
            invitelink.parse(bad)
        assert said in exc.value.message, (bad, exc.value.message)
        assert exc.value.hint


def test_the_peer_command_refuses_a_bad_link_or_a_second_room(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--invite", "http://h/?room=mathclub-42"]) == EXIT_JOIN
    assert "no invite token" in capsys.readouterr().err
    link = "http://h/?room=mathclub-42#invite=" + "Ab-_" * 8
    assert main(["--invite", link, "--room", "other-room"]) == EXIT_JOIN
    assert "differs from the room of --invite" in capsys.readouterr().err
    assert main([]) == EXIT_JOIN
    assert "add --server" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"token": "short"}, "token"),
        ({"token": "a" * 65}, "token"),
        ({"uses": 0}, "uses"),
        ({"uses": 257}, "uses"),
        ({"used": -1}, "used"),
        ({"expires_in_s": -1}, "expires_in_s"),
        ({"status": "gone"}, "status"),
    ],
)
def test_a_malformed_invite_message_is_refused_by_the_peer(
    changes: dict[str, Any], field: str
) -> None:
    message = {"type": "invite", "token": None, "uses": 20, "used": 0, "expires_in_s": 60.0,
               "status": "open", **changes}  # fmt: skip
    with pytest.raises(signaling.SignalingError) as exc:
        signaling.parse_server(json.dumps(message))
    assert f"invite.{field}" in exc.value.message
