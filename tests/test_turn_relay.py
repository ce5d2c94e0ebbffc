"""Across a TURN relay (issue 10, Must-show 5): Debian's coturn, started by the test inside the
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
- Two tabs (/mesh-check.html), which trickle ICE to each other, trickle relay candidates only
  and exchange messages and fragmented, compressed payloads through the relay.

Skips (never silently): not root / no namespace (like every mesh test), ``turnserver`` missing
(``apt-get install -y coturn``), and for the browser test Chromium or Playwright missing.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiortc import RTCPeerConnection

from daisychain.p2p.mesh import ChannelMessage, Mesh
from daisychain.server import main as server_main
from daisychain.server.config import IceConfig
from daisychain.server.ice import IceIssuer
from mesh_helpers import (
    PeerProcess,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)

TURNSERVER = shutil.which("turnserver")
pytestmark = [
    needs_namespace,
    pytest.mark.skipif(
        TURNSERVER is None,
        reason="turnserver (Debian's coturn) is not installed: apt-get install -y coturn",
    ),
    pytest.mark.timeout(600),
]

NETNS_ADDRESS = "10.231.0.1"  # conftest.py's veth address: the only one coturn touches
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


async def _open_tab(browser_peer: Any, browser: Any, url: str) -> Any:
    """The page ``/`` (test_browser_peer's tab), once admitted. The page reports the backends
    it did not choose (no WebGPU here) as notices: only another error fails the start."""
    page = await browser.new_page()
    tab = browser_peer.Tab(page)
    page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: tab.errors.append(f"page error: {exc}"))

    def on_request(request: Any) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname != "127.0.0.1":
            tab.foreign.append(request.url)

    page.on("request", on_request)
    response = await page.goto(f"{url}/?{browser_peer.TIMERS_QUERY}&name=relay-tab")
    assert response is not None and response.ok, f"GET /: {response}"
    deadline = time.monotonic() + 120
    while not (state := await tab.state())["id"]:
        assert not _real_errors(state), f"the page could not start: {state['errors']}"
        assert time.monotonic() < deadline, f"the page never joined: {state['status']}"
        await asyncio.sleep(0.2)
    return tab


def _real_errors(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in state["errors"] if not re.match(r"backend \S+ not used: ", e["message"])]


async def test_browser_tab_and_python_peer_train_through_the_relay(tmp_path: Path) -> None:
    # Its module skips (with the reason) when Chromium or Playwright is missing.
    import test_browser_peer as browser_peer

    steps = 5
    ice = server_ice(
        "--ice-server", TURN_URL, "--ice-username", "u", "--ice-credential", "p",
        "--ice-relay-only",
    )  # fmt: skip
    with coturn(tmp_path, "--lt-cred-mech", "--user", "u:p") as turn:
        async with signaling_server(ice=ice) as url, browser_peer.chromium(webgpu=False) as browser:
            tab = await _open_tab(browser_peer, browser, url)
            lead = await start_peer(
                url, "py-lead", lead=lead_config(steps, min_peers=2), mesh_cls=RecordingMesh
            )
            await wait_for(lambda: len(lead.records) >= 1, 240, "the first step")
            seen = await tab.page.evaluate(TAB_ROUTE)
            [outcome] = await finish([lead], 300)
            [state] = await browser_peer.wait_tabs([tab], browser_peer.finished, 60, "the tab")
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
    "const app = { mesh: (await import('/js/p2p/check.js')).mesh };",
)


async def test_two_tabs_trickle_relay_candidates_and_exchange_frames(tmp_path: Path) -> None:
    """Two browsers trickle ICE to each other (the Python peer never does): with the relay
    policy from welcome they trickle relay candidates only, connect through coturn and
    exchange messages and a fragmented, compressed payload both ways (/mesh-check.html)."""
    # Its module skips (with the reason) when Chromium or Playwright is missing.
    import test_browser_mesh as bm

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
