"""ICE server configuration (server/daisychain/server/ice.py), end to end without a network:

- every URL form of RFC 7064/7065 the clients accept parses, and every wrong one is refused with
  a message naming it and a hint (``//``, a user part, ``stuns:``, a query on ``stun:``, a bad
  transport, ports 0/70000, bad host names, 0.0.0.0, multicast, IPv6 without brackets ...);
- a configuration that cannot work is refused at start (a TURN server without credentials,
  half a credential, credentials and a secret, credentials with no TURN server, relay-only with
  no TURN server, a lifetime out of range, too many URLs) by the server's flags and the peer's;
- TURN REST API credentials: HMAC-SHA1 against RFC 2202's vector, and a minted credential
  against one computed by ``openssl dgst -sha1 -hmac`` (real coturn accepting minted credentials
  is tests/test_turn_relay.py);
- ``welcome`` carries exactly the configured servers (none configured: ``[]`` and ``all``), a
  fresh credential per client from a secret, and the Python peer's parser takes it back (and
  refuses a malformed one); the peer's ``--ice-*`` flags override it and never become None.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiortc import RTCIceTransportPolicy

from daisychain.p2p import signaling
from daisychain.p2p.mesh import Mesh, MeshError
from daisychain.p2p.versions import SIGNALING_VERSION
from daisychain.peer import main as peer_main
from daisychain.server import main as server_main
from daisychain.server.config import IceConfig
from daisychain.server.ice import IceError, IceIssuer, check, mint, parse_url, turn_credential
from daisychain.wire import signaling as sm
from mesh_helpers import signaling_server
from server_fixtures import config, join, serve

TURN = "turn:10.231.0.1:3478?transport=udp"


@pytest.mark.parametrize(
    ("text", "scheme", "host", "port", "transport"),
    [
        ("stun:stun.example.org", "stun", "stun.example.org", 3478, None),
        ("stun:192.0.2.7:3479", "stun", "192.0.2.7", 3479, None),
        ("turn:turn.example.org", "turn", "turn.example.org", 3478, None),
        ("turn:turn.example.org?transport=tcp", "turn", "turn.example.org", 3478, "tcp"),
        (TURN, "turn", "10.231.0.1", 3478, "udp"),
        ("turns:turn.example.org", "turns", "turn.example.org", 5349, None),
        ("turns:turn.example.org:443?transport=tcp", "turns", "turn.example.org", 443, "tcp"),
        ("turn:[2001:db8::1]:3478", "turn", "2001:db8::1", 3478, None),
        ("stun:[2001:db8::1]", "stun", "2001:db8::1", 3478, None),
        ("TURN:Relay-1.example.org", "turn", "Relay-1.example.org", 3478, None),
    ],
)
def test_valid_urls_parse(
    text: str, scheme: str, host: str, port: int, transport: str | None
) -> None:
    url = parse_url(text)
    assert (url.text, url.scheme, url.host, url.port, url.transport) == (
        text, scheme, host, port, transport,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        ("", "1-256 printable", "stun:HOST"),
        ("turn:host name", "no spaces", "stun:HOST"),
        ("turn:" + "a" * 300, "1-256 printable", "stun:HOST"),
        ("turn.example.org", "no stun:, turn: or turns: scheme", "stun:HOST"),
        ("https://turn.example.org", "no stun:, turn: or turns: scheme", "not a web address"),
        ("stuns:stun.example.org", "no stun:, turn: or turns: scheme", "do not implement stuns"),
        ("turn://turn.example.org:3478", "'//' after the scheme", "turn:turn.example.org:3478"),
        ("turn:u:p@turn.example.org", "holds a user name", "--ice-username"),
        ("stun:stun.example.org?transport=udp", "stun: takes no ?query", "RFC 7064"),
        ("turn:turn.example.org?transport=sctp", "?transport=udp or ?transport=tcp", "RFC 7065"),
        ("turn:turn.example.org?foo=bar", "?transport=udp or ?transport=tcp", "RFC 7065"),
        ("turns:turn.example.org?transport=udp", "turns: over UDP", "transport=tcp"),
        ("turn:turn.example.org:0", "invalid port '0'", "1-65535"),
        ("turn:turn.example.org:70000", "invalid port '70000'", "1-65535"),
        ("turn:turn.example.org:34x", "invalid port '34x'", "1-65535"),
        ("turn:turn.example.org:", "invalid port ''", "1-65535"),
        ("turn:", "has no host", "stun:HOST"),
        ("turn:bad_host.example.org", "invalid host name", "DNS name"),
        ("turn:-bad.example.org", "invalid host name", "DNS name"),
        ("stun:host/path", "invalid host name", "DNS name"),
        ("turn:999.1.1.1", "invalid IPv4 address", "a.b.c.d"),
        ("turn:0.0.0.0", "not an address a client can send to", "as the clients reach it"),
        ("turn:224.0.0.1", "not an address a client can send to", "as the clients reach it"),
        ("turn:[::]", "not an address a client can send to", "as the clients reach it"),
        ("turn:[1.2.3.4]", "not an address a client can send to", "as the clients reach it"),
        ("turn:[2001:db8::1", "malformed [IPv6] host", "stun:HOST"),
        ("turn:[nothex]", "invalid IPv6 address", "brackets"),
        ("turn:2001:db8::1", "an IPv6 host goes in brackets", "turn:[::1]:3478"),
    ],
)
def test_bad_urls_are_refused_with_a_hint(text: str, message: str, hint: str) -> None:
    with pytest.raises(IceError) as info:
        parse_url(text)
    assert message in info.value.message, info.value.message
    assert hint in info.value.hint, info.value.hint


def cfg(**changes: Any) -> IceConfig:
    return replace(IceConfig(), **changes)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"urls": (TURN,)}, "needs credentials"),
        ({"urls": (TURN,), "username": "u"}, "needs its credential"),
        ({"urls": (TURN,), "credential": "p"}, "needs its credential"),
        ({"urls": (TURN,), "username": "u", "credential": "p", "secret": "s"}, "both given"),
        ({"urls": ("stun:stun.example.org",), "username": "u", "credential": "p"}, "no turn:"),
        ({"username": "u", "credential": "p"}, "no turn:"),
        ({"secret": "s"}, "no turn:"),
        ({"urls": ("stun:stun.example.org",), "relay_only": True}, "relay-only needs a TURN"),
        ({"relay_only": True}, "relay-only needs a TURN"),
        ({"urls": (TURN,), "secret": "s", "ttl_s": 59}, "lifetime 59 s"),
        ({"urls": (TURN,), "secret": "s", "ttl_s": 8 * 86400}, "lifetime 691200 s"),
        ({"urls": (TURN,), "username": "u\n", "credential": "p"}, "username must be"),
        ({"urls": (TURN,), "username": "u", "credential": ""}, "credential must be"),
        ({"urls": ("stun:a.example.org",) * 9}, "at most 8"),
        ({"urls": ("stun:a.example.org", "turn://b")}, "'//'"),
    ],
)
def test_configurations_that_cannot_work_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(IceError) as info:
        check(cfg(**changes))
    assert message in info.value.message, info.value.message
    assert info.value.hint


def test_a_peer_holds_no_secret() -> None:
    with pytest.raises(IceError, match="secret is the server's"):
        check(cfg(urls=(TURN,), secret="s"), allow_secret=False)


def test_turn_credential_is_hmac_sha1_base64() -> None:
    # RFC 2202, HMAC-SHA1 test case 2.
    digest = bytes.fromhex("effcdf6ae5eb2fa2d27416d5f184df9c259a7c79")
    assert turn_credential("Jefe", "what do ya want for nothing?") == base64.b64encode(
        digest
    ).decode("ascii")


def test_minted_credentials_follow_the_turn_rest_api() -> None:
    # Expected credential: printf '%s' 1700086400:Zk9def | openssl dgst -sha1 -hmac s3cret
    # -binary | base64
    username, credential = mint("s3cret", "Zk9def", now=1_700_000_000.7, ttl_s=86_400)
    assert username == "1700086400:Zk9def"
    assert credential == "K1BQAfOvsEd+ZQsV4nyB2WgSgPY="


def test_issuer_hands_out_exactly_the_configured_servers() -> None:
    assert IceIssuer(IceConfig()).servers("a") == []
    assert IceIssuer(IceConfig()).policy == "all"
    issuer = IceIssuer(
        cfg(urls=("stun:stun.example.org", TURN, "turns:t.example.org?transport=tcp"),
            username="u", credential="p", relay_only=True)
    )  # fmt: skip
    assert issuer.servers("a") == [
        sm.IceServer(urls=["stun:stun.example.org"]),
        sm.IceServer(
            urls=[TURN, "turns:t.example.org?transport=tcp"], username="u", credential="p"
        ),
    ]
    assert issuer.policy == "relay"


def test_issuer_mints_a_fresh_credential_per_client_from_a_secret() -> None:
    now = [1_700_000_000.0]
    issuer = IceIssuer(cfg(urls=(TURN,), secret="s3cret", ttl_s=3600), clock=lambda: now[0])
    [a] = issuer.servers("peerA")
    now[0] += 10
    [b] = issuer.servers("peerB")
    assert (a.username, b.username) == ("1700003600:peerA", "1700003610:peerB")
    assert a.credential == turn_credential("s3cret", "1700003600:peerA")
    assert b.credential == turn_credential("s3cret", "1700003610:peerB")
    assert a.urls == b.urls == [TURN]


async def test_welcome_carries_none_by_default() -> None:
    async with serve() as client:
        peer, welcome = await join(client, "alice")
        assert welcome["ice_servers"] == []
        assert welcome["ice_transport_policy"] == "all"
        parsed = signaling.parse_server(sm.encode(signaling.parse_server(_text(welcome))))
        assert isinstance(parsed, sm.Welcome) and parsed.ice_servers == []
        await peer.close()


def _text(obj: dict[str, Any]) -> str:
    return json.dumps(obj)


async def test_welcome_carries_exactly_the_configured_servers() -> None:
    ice = cfg(urls=("stun:stun.example.org", TURN), username="u", credential="p", relay_only=True)
    async with serve(config(ice=ice)) as client:
        peer, welcome = await join(client, "alice")
        assert welcome["ice_servers"] == [
            {"urls": ["stun:stun.example.org"], "username": None, "credential": None},
            {"urls": [TURN], "username": "u", "credential": "p"},
        ]
        assert welcome["ice_transport_policy"] == "relay"
        parsed = signaling.parse_server(_text(welcome))
        assert isinstance(parsed, sm.Welcome)
        assert parsed.ice_servers == [
            sm.IceServer(["stun:stun.example.org"]), sm.IceServer([TURN], "u", "p"),
        ]  # fmt: skip
        assert parsed.ice_transport_policy == "relay"
        await peer.close()


async def test_welcome_mints_per_client_credentials_from_a_secret() -> None:
    async with serve(config(ice=cfg(urls=(TURN,), secret="s3cret"))) as client:
        alice, a = await join(client, "alice")
        bob, b = await join(client, "bob")
        for peer, welcome in ((alice, a), (bob, b)):
            [server] = welcome["ice_servers"]
            expiry, label = server["username"].split(":")
            assert label == welcome["id"] and int(expiry) > 0
            assert server["credential"] == turn_credential("s3cret", server["username"])
            await peer.close()
        assert a["ice_servers"][0]["username"] != b["ice_servers"][0]["username"]


WELCOME = sm.Welcome(SIGNALING_VERSION, "Zk9def", sm.GroupInfo("local", "g"), "member", None, [])


def _welcome(**fields: Any) -> str:
    obj = json.loads(sm.encode(WELCOME))
    obj.update(fields)
    return json.dumps(obj)


def test_peer_parser_takes_a_welcome_without_ice_fields_as_none() -> None:
    obj = json.loads(sm.encode(WELCOME))
    del obj["ice_servers"], obj["ice_transport_policy"]
    parsed = signaling.parse_server(json.dumps(obj))
    assert isinstance(parsed, sm.Welcome)
    assert (parsed.ice_servers, parsed.ice_transport_policy) == ([], "all")


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"ice_servers": {"urls": [TURN]}}, "welcome.ice_servers must be a list"),
        ({"ice_servers": [{"urls": []}]}, "urls must be a list of 1-8"),
        ({"ice_servers": [{"urls": TURN}]}, "urls must be a list of 1-8"),
        ({"ice_servers": [{"urls": ["http://x"]}]}, "STUN/TURN URLs (ICE server URL 'http://x'"),
        ({"ice_servers": [{"urls": [7]}]}, "STUN/TURN URLs"),
        ({"ice_servers": [{"urls": [TURN], "username": 5}]}, "username must be"),
        ({"ice_servers": ["turn:x"]}, "an ICE server {urls"),
        ({"ice_servers": [{"urls": [TURN]}] * 9}, "at most 8"),
        ({"ice_transport_policy": "none"}, "ice_transport_policy"),
    ],
)
def test_peer_parser_refuses_a_malformed_ice_welcome(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(signaling.SignalingError) as info:
        signaling.parse_server(_welcome(**fields))
    assert where in info.value.message, info.value.message
    assert info.value.hint


def _mesh_after(welcome: sm.Welcome, **options: Any) -> Mesh:
    mesh = Mesh("http://127.0.0.1:1", **options)
    mesh._take_ice(welcome)
    return mesh


def test_mesh_takes_the_welcome_servers_and_never_passes_none() -> None:
    none = _mesh_after(WELCOME)._configuration()
    assert none.iceServers == [] and none.iceTransportPolicy is RTCIceTransportPolicy.ALL
    given = replace(WELCOME, ice_servers=[sm.IceServer([TURN], "u", "p")])
    conf = _mesh_after(given)._configuration()
    assert conf.iceServers is not None
    [server] = conf.iceServers
    assert (server.urls, server.username, server.credential) == ([TURN], "u", "p")
    assert conf.iceTransportPolicy is RTCIceTransportPolicy.ALL
    relay = _mesh_after(replace(given, ice_transport_policy="relay"))._configuration()
    assert relay.iceTransportPolicy is RTCIceTransportPolicy.RELAY
    # The peer's own servers replace the welcome's; its relay-only holds whatever the server says.
    own = [sm.IceServer([TURN], "me", "mine")]
    mine = _mesh_after(given, ice_servers=own, relay_only=True)._configuration()
    assert mine.iceServers is not None
    assert [(s.username, s.credential) for s in mine.iceServers] == [("me", "mine")]
    assert mine.iceTransportPolicy is RTCIceTransportPolicy.RELAY
    # An explicit empty list means "no servers", not "take the welcome's".
    assert _mesh_after(given, ice_servers=[])._configuration().iceServers == []


def test_mesh_refuses_relay_only_without_a_turn_server() -> None:
    with pytest.raises(MeshError) as info:
        _mesh_after(WELCOME, relay_only=True)
    assert "no TURN server" in info.value.message and "--ice-server turn:" in info.value.hint
    stun_only = replace(
        WELCOME, ice_servers=[sm.IceServer(["stun:stun.example.org"])], ice_transport_policy="relay"
    )
    with pytest.raises(MeshError, match="no TURN server"):
        _mesh_after(stun_only)


def _server_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    server_main.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_server_flags_become_the_ice_config(tmp_path: Path) -> None:
    plain = server_main.config_from_args(_server_args())
    assert plain.ice == IceConfig()
    args = _server_args(
        "--ice-server", "stun:stun.example.org", "--ice-server", TURN,
        "--ice-username", "u", "--ice-credential", "p", "--ice-relay-only",
    )  # fmt: skip
    assert server_main.config_from_args(args).ice == IceConfig(
        urls=("stun:stun.example.org", TURN), username="u", credential="p", relay_only=True
    )
    secret = tmp_path / "secret"
    secret.write_text("s3cret\n")
    args = _server_args("--ice-server", TURN, "--ice-secret-file", str(secret), "--ice-ttl", "600")
    got = server_main.config_from_args(args).ice
    assert (got.secret, got.ttl_s) == ("s3cret", 600)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ice-server", "turn://h"], "'//' after the scheme\nhint: "),
        (["--ice-server", TURN], "needs credentials\nhint: "),
        (["--ice-relay-only"], "no connection can ever form\nhint: "),
        (["--ice-server", TURN, "--ice-secret", "a", "--ice-secret-file", "/x"], "both given"),
        (["--ice-server", TURN, "--ice-secret-file", "/nonexistent/secret"], "cannot read"),
        (["--ice-server", TURN, "--ice-secret", "s", "--ice-ttl", "5"], "lifetime 5 s"),
    ],
)
def test_server_refuses_bad_ice_flags_at_start(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as info:
        server_main.config_from_args(_server_args(*argv))
    assert message in str(info.value.code), info.value.code
    assert "hint: " in str(info.value.code)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ice-server", "stuns:x"], "no stun:, turn: or turns: scheme"),
        (["--ice-server", TURN], "needs credentials"),
        (["--ice-username", "u", "--ice-credential", "p"], "no turn: or turns: server"),
        (["--ice-server", TURN, "--ice-username", "u"], "needs its credential"),
    ],
)
def test_peer_refuses_bad_ice_flags_before_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The server URL is never contacted: the flags are refused first.
    code = peer_main.main(["--server", "http://127.0.0.1:1", *argv])
    err = capsys.readouterr().err
    assert code == peer_main.EXIT_JOIN
    assert message in err and "\nhint: " in err, err


def test_peer_flags_become_its_own_servers() -> None:
    parser = argparse.ArgumentParser()
    peer_main.add_arguments(parser)
    args = parser.parse_args([
        "--server", "http://h", "--ice-server", TURN, "--ice-username", "u",
        "--ice-credential", "p", "--ice-relay-only",
    ])  # fmt: skip
    assert peer_main.ice_servers(args) == [sm.IceServer([TURN], "u", "p")]
    assert args.ice_relay_only is True
    assert peer_main.ice_servers(parser.parse_args(["--server", "http://h"])) is None


async def test_peer_relay_only_with_no_turn_server_anywhere_stops_with_a_hint() -> None:
    """The server hands out no ICE servers and the peer has none of its own: relay-only could
    never connect, so ``python -m daisychain.peer --ice-relay-only`` stops at welcome, exit 1.
    (Signaling only, on loopback: no peer connection is attempted.)"""
    async with signaling_server() as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daisychain.peer", "--server", url, "--ice-relay-only",
            "--backend", "numpy", stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 180)
    text = err.decode()
    assert proc.returncode == peer_main.EXIT_JOIN, text
    assert "relay-only ICE was asked for but no TURN server is known" in text, text
    assert "hint: give --ice-server turn:" in text, text


def test_the_start_log_names_the_servers_and_never_a_credential(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="daisychain.server")
    server_main.log_ice(IceConfig())
    server_main.log_ice(cfg(urls=(TURN,), username="u", credential="cred-XYZ"))
    server_main.log_ice(cfg(urls=(TURN,), secret="secret-XYZ", relay_only=True))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "ICE servers: none (clients use direct routes only)",
        f"ICE servers: {TURN}; TURN credentials static; policy all",
        f"ICE servers: {TURN}; TURN credentials minted from the secret; policy relay",
    ]
    assert "XYZ" not in caplog.text
