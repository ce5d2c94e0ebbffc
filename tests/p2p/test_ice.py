"""ICE server configuration (server/daisychain/wire/ice.py), end to end without a network:

- every URL form of RFC 7064/7065 the clients accept parses, and every wrong one is refused with
  a message naming it and a hint (``//``, a user part, ``stuns:``, a query on ``stun:``, a bad
  transport, ports 0/70000, bad host names, 0.0.0.0, multicast, IPv6 without brackets ...);
- a configuration that cannot work is refused at start (a TURN server without credentials,
  half a credential, credentials and a secret, credentials with no TURN server, relay-only with
  no TURN server, a lifetime out of range, too many URLs) by the server's flags and the peer's;
- TURN REST API credentials: HMAC-SHA1 against RFC 2202's vector, and a minted credential
  against one computed by ``openssl dgst -sha1 -hmac`` (real coturn accepting minted credentials
  is tests/p2p/test_ice.py);
- ``welcome`` carries exactly the configured servers (none configured: ``[]`` and ``all``), a
  fresh credential per client from a secret, and the Python peer's parser takes it back (and
  refuses a malformed one); the peer's ``--ice-*`` flags override it and never become None.

Across a TURN relay (issue 10, Must-show 5): Debian's coturn, started by the test inside the
test run's network namespace (conftest.py: it listens and relays on 10.231.0.1 only, and
nothing leaves the machine), and peers restricted to relay candidates.

- Two headless Python peers train ``tiny`` steps through the relay with identical hashes: the
  server hands out the TURN server with static credentials (its real ``--ice-*`` flags, parsed
  by ``daisychain.server.main``); the leader (in this process) is relay-only by its own
  setting, the follower is ``python -m daisychain.peer --ice-server ... --ice-username ...
  --ice-credential ... --ice-relay-only`` (the peer's own flags). Proof that the bytes went
  through the relay, not around it: the leader gathered relay candidates only and ICE nominated
  a relay/relay pair (aioice's state), and coturn's own log shows both allocations and the
  channel binds between them.
- Time-limited credentials from a shared secret (``--ice-secret``, coturn's
  ``--use-auth-secret``): two peers that take everything from ``welcome`` (servers, minted
  credentials, relay policy from ``--ice-relay-only`` on the server) exchange messages through
  the relay, and coturn logs an allocation for each peer's ``<expiry>:<peer id>`` username; a
  credential minted from the wrong secret is refused by coturn (401) and gathers no candidate.
- A Chromium tab on the page ``/`` (static/js/app.js, the browser peer) and a Python leader
  train 5 steps through the relay with identical hashes; the tab took its ICE servers and the
  relay policy from ``welcome``, and its own ``getStats()`` shows a relay/relay selected pair.
- Two tabs (the test page tests/pages/mesh-check.html), which trickle ICE to each other,
  trickle relay candidates only and exchange messages and fragmented, compressed payloads
  through the relay.

Skips (never silently): not root / no namespace (like every mesh test), ``turnserver`` missing
(``apt-get install -y coturn``), and for the browser test Chromium or Playwright missing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiortc import RTCIceTransportPolicy, RTCPeerConnection

from daisychain.bench.rig import netns
from daisychain.p2p import signaling
from daisychain.p2p.mesh import ChannelMessage, Mesh, MeshError
from daisychain.p2p.versions import SIGNALING_VERSION
from daisychain.peer import main as peer_main
from daisychain.server import main as server_main
from daisychain.wire import signaling as sm
from daisychain.wire.ice import (
    IceConfig,
    IceError,
    IceIssuer,
    check,
    mint,
    parse_url,
    turn_credential,
)
from mesh_helpers import (
    PeerProcess,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)
from server_fixtures import config, join, serve

# ---- ice ----------------------------------------

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


# ---- turn relay ----------------------------------------

TURNSERVER = shutil.which("turnserver")
needs_turnserver = pytest.mark.skipif(
    TURNSERVER is None,
    reason="turnserver (Debian's coturn) is not installed: apt-get install -y coturn",
)

NETNS_ADDRESS = netns.NETNS_ADDRESS  # conftest.py's veth address: the only one coturn touches
TURN_PORT = 3478
TURN_URL = f"turn:{NETNS_ADDRESS}:{TURN_PORT}?transport=udp"
REALM = "daisychain-test"
SECRET = "test-shared-secret"
# STUN Binding request (RFC 5389): type 0x0001, length 0, magic cookie, transaction id.
BINDING = bytes.fromhex("000100002112a442") + b"daisychain12"


@dataclass
class Coturn:
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def allocations(self, user: str) -> int:
        """Allocations coturn granted to ``user`` (a literal username)."""
        pattern = rf"user <{re.escape(user)}>: incoming packet ALLOCATE processed, success"
        return len(re.findall(pattern, self.log()))


@contextmanager
def coturn(tmp_path: Path, *auth: str) -> Iterator[Coturn]:
    """coturn on the namespace address only (UDP/TCP 3478, relay ports on the same address),
    no TLS, no CLI, no config file, its database, pid file and log in ``tmp_path``."""
    assert TURNSERVER is not None
    log_path = tmp_path / "turnserver.log"
    cmd = [
        TURNSERVER, "-n", "--listening-ip", NETNS_ADDRESS, "--relay-ip", NETNS_ADDRESS,
        "--listening-port", str(TURN_PORT), "--realm", REALM, "--no-cli", "--no-tls",
        "--no-dtls", "--pidfile", str(tmp_path / "turnserver.pid"),
        "--userdb", str(tmp_path / "turndb"), "--log-file", str(log_path), "--simple-log",
        "--no-stdout-log", "--verbose", *auth,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Coturn(proc, log_path)
    try:
        _wait_ready(server)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ready(server: Coturn) -> None:
    """Until coturn answers a STUN Binding request on its UDP port (bounded)."""
    deadline = time.monotonic() + 20
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.1)
        while True:
            if server.proc.poll() is not None:
                raise AssertionError(
                    f"turnserver exited ({server.proc.returncode}):\n{server.log()}"
                )
            s.sendto(BINDING, (NETNS_ADDRESS, TURN_PORT))
            try:
                reply = s.recv(2048)
            except TimeoutError:
                reply = b""
            if reply[:2] == b"\x01\x01" and reply[8:20] == BINDING[8:20]:  # Binding success
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"turnserver never answered STUN:\n{server.log()}")


def server_ice(*argv: str) -> IceConfig:
    """The server's ICE settings from its real command-line flags."""
    parser = argparse.ArgumentParser()
    server_main.add_arguments(parser)
    return server_main.config_from_args(parser.parse_args(list(argv))).ice


Route = tuple[frozenset[str], str, str] | None


def route_of(pc: RTCPeerConnection) -> Route:
    """(types of the local candidates gathered, local and remote type of the pair ICE
    nominated), or None before a pair was nominated. The nominated pair is aioice's state
    (``Connection._nominated``): aiortc has no public getter for it."""
    ice = pc.sctp.transport.transport  # RTCSctpTransport -> RTCDtlsTransport -> RTCIceTransport
    local = frozenset(c.type for c in ice.iceGatherer.getLocalCandidates())
    pair = ice._connection._nominated.get(1)
    if pair is None:
        return None
    return local, pair.local_candidate.type, pair.remote_candidate.type


class RecordingMesh(Mesh):
    """A Mesh that notes each link's ICE route when its connection is established."""

    def __init__(self, server: str, **options: Any) -> None:
        super().__init__(server, **options)
        self.routes: dict[str, Route] = {}

    def _new_link(self, peer: str) -> Any:
        link = super()._new_link(peer)
        pc = link.pc

        @pc.on("connectionstatechange")
        def note() -> None:
            if pc.connectionState == "connected":
                self.routes[peer] = route_of(pc)

        return link


class RelayOnlyMesh(RecordingMesh):
    def __init__(self, server: str, **options: Any) -> None:
        super().__init__(server, relay_only=True, **options)


RELAYED = (frozenset({"relay"}), "relay", "relay")


@needs_namespace
@needs_turnserver
@pytest.mark.timeout(600)
async def test_two_python_peers_train_through_the_relay(tmp_path: Path) -> None:
    steps = 4
    ice = server_ice("--ice-server", TURN_URL, "--ice-username", "u", "--ice-credential", "p")
    with coturn(tmp_path, "--lt-cred-mech", "--user", "u:p") as turn:
        async with signaling_server(ice=ice) as url:
            lead = await start_peer(
                url, "lead", lead=lead_config(steps, min_peers=2), mesh_cls=RelayOnlyMesh
            )
            follower = PeerProcess(
                url, "follower", "--ice-server", TURN_URL, "--ice-username", "u",
                "--ice-credential", "p", "--ice-relay-only",
            )  # fmt: skip
            try:
                [outcome] = await finish([lead], 300)
                code = await follower.wait(60)
            finally:
                follower.close()
        mesh = lead.node.mesh
        assert isinstance(mesh, RecordingMesh)
    assert outcome.reason == "done", outcome
    assert code == 0, follower.stderr()
    assert sorted(lead.hashes) == list(range(1, steps + 1))
    assert {step: h for (step, _round), h in follower.hashes.items()} == lead.hashes
    [route] = mesh.routes.values()
    assert route == RELAYED, route
    log = turn.log()
    assert turn.allocations("u") >= 2, log[-4000:]
    assert "CHANNEL_BIND processed, success" in log, log[-4000:]


@needs_namespace
@needs_turnserver
@pytest.mark.timeout(600)
async def test_time_limited_credentials_from_a_shared_secret(tmp_path: Path) -> None:
    ice = server_ice("--ice-server", TURN_URL, "--ice-secret", SECRET, "--ice-relay-only")
    auth = ("--use-auth-secret", "--static-auth-secret", SECRET)
    with coturn(tmp_path, *auth) as turn:
        async with signaling_server(ice=ice) as url:
            a, b = RecordingMesh(url, name="a"), RecordingMesh(url, name="b")
            try:
                await a.connect()
                await b.connect()
                for mesh in (a, b):  # everything came from welcome
                    [server] = mesh.ice_servers
                    assert server.username is not None and server.username.endswith(":" + mesh.id)
                    assert mesh.ice_policy.value == "relay"
                await wait_for(lambda: a.open_peers() == {b.id} and b.open_peers() == {a.id},
                               30, "a channel through the relay")  # fmt: skip
                assert a.send(b.id, "ping from a") and b.send(a.id, b"pong from b")
                got = await asyncio.gather(_next_message(b), _next_message(a))
                assert got == [(a.id, "ping from a"), (b.id, b"pong from b")]
                ids = (a.id, b.id)
            finally:
                await a.close()
                await b.close()
        wrong, right = await asyncio.gather(
            _relay_candidates(IceIssuer(IceConfig(urls=(TURN_URL,), secret="not-the-secret"))),
            _relay_candidates(IceIssuer(IceConfig(urls=(TURN_URL,), secret=SECRET))),
        )
    assert a.routes == {b.id: RELAYED} and b.routes == {a.id: RELAYED}, (a.routes, b.routes)
    log = turn.log()
    for peer in ids:
        pattern = rf"user <\d+:{peer}>: incoming packet ALLOCATE processed, success"
        assert re.search(pattern, log), f"no allocation for {peer}:\n{log[-4000:]}"
    assert (wrong, right) == (0, 1)
    assert re.search(r"user <\d+:wrong>: .*error 401", log), log[-4000:]


async def _next_message(mesh: Mesh) -> tuple[str, str | bytes]:
    async with asyncio.timeout(30):
        while True:
            event = await mesh.events.get()
            if isinstance(event, ChannelMessage):
                return event.peer, event.data


async def _relay_candidates(issuer: IceIssuer) -> int:
    """How many relay candidates a relay-only connection gathers with ``issuer``'s credentials
    (labelled 'wrong' or 'right' in coturn's log)."""
    label = "wrong" if issuer.config.secret != SECRET else "right"
    mesh = Mesh("http://127.0.0.1:1", ice_servers=issuer.servers(label), relay_only=True)
    pc = RTCPeerConnection(configuration=mesh._configuration())
    try:
        pc.createDataChannel("probe")
        await pc.setLocalDescription(await pc.createOffer())
        return pc.localDescription.sdp.count(" typ relay")
    finally:
        await pc.close()


# ---------------------------------------------------------------------------------------------
# A browser tab and a Python peer

TAB_ROUTE = """
async () => {
  const { app } = await import('/js/app.js');
  const out = {};
  for (const [peer, link] of app.mesh.links) {
    const stats = await link.pc.getStats();
    let pair = null;
    for (const s of stats.values()) {
      if (s.type === 'transport' && s.selectedCandidatePairId) {
        pair = stats.get(s.selectedCandidatePairId);
      }
    }
    out[peer] = pair === null ? null : {
      local: stats.get(pair.localCandidateId).candidateType,
      remote: stats.get(pair.remoteCandidateId).candidateType,
      bytes: pair.bytesSent + pair.bytesReceived,
    };
  }
  return { routes: out, policy: app.mesh.iceTransportPolicy, servers: app.mesh.iceServers };
}
"""


async def _open_tab(tab_helpers: Any, browser: Any, url: str) -> Any:
    """The page ``/`` (tests/tab_helpers.py's tab), once admitted. The page reports the backends
    it did not choose (no WebGPU here) as notices: only another error fails the start."""
    page = await browser.new_page()
    tab = tab_helpers.Tab(page)
    page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: tab.errors.append(f"page error: {exc}"))

    def on_request(request: Any) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname != "127.0.0.1":
            tab.foreign.append(request.url)

    page.on("request", on_request)
    response = await page.goto(f"{url}/?{tab_helpers.TIMERS_QUERY}&name=relay-tab")
    assert response is not None and response.ok, f"GET /: {response}"
    deadline = time.monotonic() + 120
    while not (state := await tab.state())["id"]:
        assert not _real_errors(state), f"the page could not start: {state['errors']}"
        assert time.monotonic() < deadline, f"the page never joined: {state['status']}"
        await asyncio.sleep(0.2)
    return tab


def _real_errors(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in state["errors"] if not re.match(r"backend \S+ not used: ", e["message"])]


@needs_namespace
@needs_turnserver
@pytest.mark.timeout(600)
async def test_browser_tab_and_python_peer_train_through_the_relay(tmp_path: Path) -> None:
    # It skips (with the reason) when Chromium or Playwright is missing.
    import tab_helpers

    steps = 5
    ice = server_ice(
        "--ice-server", TURN_URL, "--ice-username", "u", "--ice-credential", "p",
        "--ice-relay-only",
    )  # fmt: skip
    with coturn(tmp_path, "--lt-cred-mech", "--user", "u:p") as turn:
        async with signaling_server(ice=ice) as url, tab_helpers.chromium(webgpu=False) as browser:
            tab = await _open_tab(tab_helpers, browser, url)
            lead = await start_peer(
                url, "py-lead", lead=lead_config(steps, min_peers=2), mesh_cls=RecordingMesh
            )
            await wait_for(lambda: len(lead.records) >= 1, 240, "the first step")
            seen = await tab.page.evaluate(TAB_ROUTE)
            [outcome] = await finish([lead], 300)
            [state] = await tab_helpers.wait_tabs([tab], tab_helpers.finished, 60, "the tab")
            tab.check_clean()
    assert outcome.reason == "done", outcome
    assert state["outcome"]["reason"] == "done", state
    assert not _real_errors(state), state["errors"]
    got = tab.hashes(state)
    assert sorted(got) == list(range(1, steps + 1))
    assert got == lead.hashes
    # The tab took the servers and the relay policy from welcome; its selected pair is relay on
    # both ends and carried the run's bytes.
    assert seen["policy"] == "relay"
    assert seen["servers"] == [{"urls": [TURN_URL], "username": "u", "credential": "p"}]
    [tab_route] = seen["routes"].values()
    assert (tab_route["local"], tab_route["remote"]) == ("relay", "relay"), seen
    assert tab_route["bytes"] > 0
    mesh = lead.node.mesh
    assert isinstance(mesh, RecordingMesh) and list(mesh.routes.values()) == [RELAYED]
    assert turn.allocations("u") >= 2, turn.log()[-4000:]


CHECK_ROUTE = TAB_ROUTE.replace(
    "const { app } = await import('/js/app.js');",
    "const app = { mesh: (await import('/repo/tests/pages/check.js')).mesh };",
)


@needs_namespace
@needs_turnserver
@pytest.mark.timeout(600)
async def test_two_tabs_trickle_relay_candidates_and_exchange_frames(tmp_path: Path) -> None:
    """Two browsers trickle ICE to each other (the Python peer never does): with the relay
    policy from welcome they trickle relay candidates only, connect through coturn and
    exchange messages and a fragmented, compressed payload both ways (the mesh check page,
    tests/pages/mesh-check.html)."""
    # It skips (with the reason) when Chromium or Playwright is missing.
    import mesh_check_helpers as bm

    ice = server_ice(
        "--ice-server", TURN_URL, "--ice-username", "u", "--ice-credential", "p",
        "--ice-relay-only",
    )  # fmt: skip
    with coturn(tmp_path, "--lt-cred-mech", "--user", "u:p") as turn:
        async with signaling_server(ice=ice) as url, bm.chromium() as browser:
            a, b = await bm.open_tab(browser, url), await bm.open_tab(browser, url)
            ia, ib = await asyncio.gather(
                a.page.evaluate(bm.WAIT_OPEN, [1, bm.WAIT_MS]),
                b.page.evaluate(bm.WAIT_OPEN, [1, bm.WAIT_MS]),
            )
            sent = await asyncio.gather(
                a.page.evaluate(bm.SEND, [ib["id"], 200_000, 1, True, 11]),
                b.page.evaluate(bm.SEND, [ia["id"], 120_000, 2, False, 12]),
            )
            assert list(sent) == [[True, True, True], [True, True, True]]
            got_b, got_a = await asyncio.gather(
                b.page.evaluate(bm.RECEIVE, [ia["id"], 1 << 20, bm.WAIT_MS]),
                a.page.evaluate(bm.RECEIVE, [ib["id"], 1 << 20, bm.WAIT_MS]),
            )
            bm.check_received(got_b, 200_000, 1, True, ia["id"])
            bm.check_received(got_a, 120_000, 2, False, ib["id"])
            trickled = await a.page.evaluate(bm.TRICKLES)
            routes = [await t.page.evaluate(CHECK_ROUTE) for t in (a, b)]
            a.check_clean()
            b.check_clean()
    assert trickled is True
    for seen in routes:
        assert seen["policy"] == "relay"
        [route] = seen["routes"].values()
        assert (route["local"], route["remote"]) == ("relay", "relay"), seen
        assert route["bytes"] > 120_000
    assert turn.allocations("u") >= 2, turn.log()[-4000:]
