"""A headless peer and an https server with a self-signed certificate (``p2p.serverlink``).

The peer trusts such a server only when ``--fingerprint`` names its certificate: the right one
joins, a wrong one is refused with both fingerprints and a hint, and none at all is refused too
(no silent "insecure" default). Every way the peer reaches its server is checked against a real
https server on 127.0.0.1: the ``/ws`` signaling socket (``Mesh``), ``/api/status``
(``fineweb_feed``), the ``/data`` windows (``FineWebFeed``) and the command itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from daisychain.bench.rig.fineweb_stub import UpstreamStub, write_fineweb_shard
from daisychain.p2p import serverlink
from daisychain.p2p.datafeed import Address, DataUnavailable, FineWebFeed
from daisychain.p2p.mesh import Mesh, MeshError
from daisychain.peer.main import fineweb_feed
from daisychain.server import tls
from daisychain.server.app import serve_local
from daisychain.server.config import DataConfig
from mesh_helpers import PeerProcess, signaling_server, wait_for
from server_fixtures import ByteTokenizer, config

LOOPBACK = ipaddress.ip_address("127.0.0.1")
DIGEST = bytes(range(0xA0, 0xC0))  # 32 bytes, every hex digit a letter somewhere
WRITTEN = "SHA256:" + ":".join(f"{b:02X}" for b in DIGEST)
SHARDS = ("sample/10BT/000_00000.parquet",)
REVISION = "0123456789abcdef0123456789abcdef01234567"
# A subprocess peer loads its tokenizer and corpus before it connects: seconds, more under load.
PROCESS_S = 60.0


@dataclass(frozen=True)
class Https:
    url: str
    cert: tls.Certificate

    @property
    def right(self) -> bytes:
        return serverlink.parse_fingerprint(self.cert.fingerprint)

    @property
    def wrong(self) -> bytes:
        """Another certificate's fingerprint: the right one with one bit changed."""
        return bytes([self.right[0] ^ 1]) + self.right[1:]


def certificate(state_dir: Path) -> tls.Certificate:
    return tls.ensure_certificate(state_dir, ["localhost"], [LOOPBACK])


@pytest.fixture
async def https(tmp_path: Path) -> AsyncIterator[Https]:
    """The real app over https on 127.0.0.1, with a self-signed certificate (offline data)."""
    cert = certificate(tmp_path)
    async with serve_local(config(), certificate=cert, tokenizer=ByteTokenizer) as url:
        assert url.startswith("https://127.0.0.1:")
        yield Https(url, cert)


# -- the fingerprint as written -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        WRITTEN,  # as the server prints it
        WRITTEN.lower(),
        f"  {WRITTEN}\n",  # pasted with the line around it
        WRITTEN.removeprefix("SHA256:"),  # the colon form without the algorithm
        DIGEST.hex(),  # 64 hex digits
        DIGEST.hex().upper(),
        "SHA256:" + DIGEST.hex(),
        "sha-256:" + DIGEST.hex(),
    ],
)
def test_every_written_form_of_a_sha256_fingerprint_is_the_same_pin(text: str) -> None:
    assert serverlink.parse_fingerprint(text) == DIGEST


def test_the_peer_writes_a_fingerprint_as_the_server_prints_it(tmp_path: Path) -> None:
    cert = certificate(tmp_path)
    assert serverlink.format_fingerprint(DIGEST) == WRITTEN == tls.format_fingerprint(DIGEST)
    assert serverlink.format_fingerprint(serverlink.parse_fingerprint(cert.fingerprint)) == (
        cert.fingerprint
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("SHA256:", "0 hex digits"),
        (WRITTEN[:-3], "31 bytes"),  # one byte short
        (WRITTEN + ":00", "33 bytes"),  # one byte long
        (DIGEST.hex()[:-1], "63 hex digits"),
        (DIGEST.hex() + "00", "66 hex digits"),
        ("SHA256:" + "G" * 64, "not hex"),
        (WRITTEN.replace("A0:", "A:0", 1), "not hex"),  # a misplaced colon
        ("SHA1:" + ":".join(["AB"] * 20), "'SHA1'"),
        ("MD5:" + ":".join(["AB"] * 16), "'MD5'"),
        ("fingerprint", "not hex"),
    ],
)
def test_a_malformed_fingerprint_is_refused_with_a_hint(text: str, said: str) -> None:
    with pytest.raises(serverlink.ServerLinkError) as info:
        serverlink.parse_fingerprint(text)
    assert said in info.value.message
    assert "--fingerprint SHA256:" in info.value.hint


@pytest.mark.parametrize("server", ["http://127.0.0.1:8787", "ws://127.0.0.1:8787/ws", "h:8787"])
def test_a_pin_is_refused_for_a_server_without_tls(server: str) -> None:
    with pytest.raises(serverlink.ServerLinkError) as info:
        serverlink.check(server, DIGEST)
    assert "not https" in info.value.message
    assert "--server https://" in info.value.hint and "drop --fingerprint" in info.value.hint


def test_an_unpinned_or_https_server_is_accepted() -> None:
    serverlink.check("http://127.0.0.1:8787", None)
    serverlink.check("https://127.0.0.1:8787", None)
    serverlink.check("https://127.0.0.1:8787", DIGEST)
    serverlink.check("WSS://127.0.0.1:8787/ws", DIGEST)


# -- one request: GET /healthz ------------------------------------------------------------------


async def get_healthz(https: Https, pin: bytes | None) -> str:
    async with (
        serverlink.session(https.url, pin) as session,
        session.get(f"{https.url}/healthz", timeout=aiohttp.ClientTimeout(total=10)) as resp,
    ):
        assert resp.status == 200
        return await resp.text()


async def test_the_right_fingerprint_reaches_the_server(https: Https) -> None:
    assert await get_healthz(https, https.right) == "ok\n"


async def test_a_wrong_fingerprint_is_refused_naming_both(https: Https) -> None:
    with pytest.raises(aiohttp.ServerFingerprintMismatch) as info:
        await get_healthz(https, https.wrong)
    refusal = serverlink.tls_refusal(info.value, https.url)
    assert refusal is not None
    message, hint = refusal
    got, pinned = https.cert.fingerprint, serverlink.format_fingerprint(https.wrong)
    assert f"presented the certificate {got}, not the pinned {pinned}" in message
    assert "printed at start" in hint and "Add a device" in hint and "right machine" in hint


async def test_without_a_fingerprint_a_self_signed_server_is_refused(https: Https) -> None:
    with pytest.raises(aiohttp.ClientConnectorCertificateError) as info:
        await get_healthz(https, None)
    refusal = serverlink.tls_refusal(info.value, https.url)
    assert refusal is not None
    message, hint = refusal
    assert "cannot verify" in message and "self-signed" in message
    assert "--fingerprint SHA256:" in hint and "--cert/--key" in hint


async def test_other_connection_errors_keep_their_callers_words() -> None:
    session = serverlink.session("http://127.0.0.1:9")
    try:
        with pytest.raises(aiohttp.ClientConnectorError) as info:
            await session.get("http://127.0.0.1:9/healthz")
    finally:
        await session.close()
    assert serverlink.tls_refusal(info.value, "http://127.0.0.1:9") is None


# -- the signaling socket -----------------------------------------------------------------------


async def join(server: str, pin: bytes | None) -> str:
    mesh = Mesh(server, name="tls-test", fingerprint=pin)
    try:
        await mesh.connect()
        return mesh.id
    finally:
        await mesh.close()


async def test_a_mesh_with_the_right_fingerprint_is_welcomed(https: Https) -> None:
    assert await join(https.url, https.right)


async def test_a_mesh_with_a_wrong_fingerprint_says_which_and_what_to_do(https: Https) -> None:
    with pytest.raises(MeshError) as info:
        await join(https.url, https.wrong)
    assert https.cert.fingerprint in info.value.message
    assert serverlink.format_fingerprint(https.wrong) in info.value.message
    assert "wss://127.0.0.1:" in info.value.message
    assert "printed at start" in info.value.hint and "right machine" in info.value.hint


async def test_a_mesh_without_a_fingerprint_refuses_a_self_signed_server(https: Https) -> None:
    with pytest.raises(MeshError) as info:
        await join(https.url, None)
    assert "cannot verify" in info.value.message
    assert "--fingerprint SHA256:" in info.value.hint


async def test_a_mesh_refuses_a_pin_for_a_plain_http_server() -> None:
    async with signaling_server() as url:
        with pytest.raises(MeshError) as info:
            await join(url, DIGEST)
    assert "not https" in info.value.message and "drop --fingerprint" in info.value.hint


async def test_https_to_a_plain_http_server_says_to_check_the_scheme() -> None:
    async with signaling_server() as url:
        with pytest.raises(MeshError) as info:
            await join(url.replace("http://", "https://"), DIGEST)
    assert "TLS handshake" in info.value.message
    assert "check the scheme of --server" in info.value.hint


# -- /api/status and /data ----------------------------------------------------------------------


async def test_the_data_feed_reads_through_the_pinned_certificate(tmp_path: Path) -> None:
    write_fineweb_shard(tmp_path / "upstream" / SHARDS[0], row_groups=2, rows_per_group=20,
                        chars_per_row=300, seed=0)  # fmt: skip
    stub = UpstreamStub(tmp_path / "upstream")
    upstream = web.AppRunner(stub.app(), access_log=None)
    await upstream.setup()
    site = web.TCPSite(upstream, "127.0.0.1", 0)
    await site.start()
    stub.base_url = f"http://127.0.0.1:{upstream.addresses[0][1]}"
    data = replace(DataConfig(), base_url=stub.base_url, revision=REVISION, shards=SHARDS,
                   timeout_s=5.0, burst=1000)  # fmt: skip
    cert = certificate(tmp_path / "state")
    try:
        async with serve_local(config(data=data), certificate=cert, tokenizer=ByteTokenizer) as url:
            https = Https(url, cert)
            # /api/status: read with the right pin only (unread, the peer has no FineWeb feed).
            assert await fineweb_feed(url, https.wrong) is None
            assert await fineweb_feed(url, None) is None
            feed = await fineweb_feed(url, https.right)
            assert feed is not None and feed.revision == REVISION
            assert feed.fingerprint == https.right
            # /data: the feed that status made reads its windows through the same pin.
            try:
                x, y = await feed.batch(Address(seed=7, step=0, rank=0, batch=2, seq_len=16))
            finally:
                await feed.close()
            assert x.shape == y.shape == (2, 16) and x[0, 1:].tolist() == y[0, :-1].tolist()
            wrong = FineWebFeed(url, REVISION, fingerprint=https.wrong, patience_s=0)
            try:
                with pytest.raises(DataUnavailable) as info:
                    await wrong.batch(Address(seed=7, step=0, rank=0, batch=2, seq_len=16))
            finally:
                await wrong.close()
            assert cert.fingerprint in info.value.message
            assert serverlink.format_fingerprint(https.wrong) in info.value.message
            assert "printed at start" in info.value.hint
    finally:
        await upstream.cleanup()


# -- the command --------------------------------------------------------------------------------


async def run_peer(url: str, *args: str) -> tuple[int, str]:
    peer = PeerProcess(url, "tls-peer", *args)
    try:
        code = await peer.wait(PROCESS_S)
        return code, peer.stderr()
    finally:
        peer.close()


async def test_the_peer_command_stops_at_a_wrong_fingerprint_with_a_hint(https: Https) -> None:
    wrong = serverlink.format_fingerprint(https.wrong)
    code, err = await run_peer(https.url, "--fingerprint", wrong)
    assert code == 1, err
    assert f"presented the certificate {https.cert.fingerprint}, not the pinned {wrong}" in err
    assert "\nhint: copy the fingerprint that `daisychain serve --https` printed" in err


async def test_the_peer_command_refuses_a_self_signed_server_unpinned(https: Https) -> None:
    code, err = await run_peer(https.url)
    assert code == 1, err
    assert "cannot verify" in err
    assert "\nhint: for a self-signed certificate pass --fingerprint" in err


async def test_the_peer_command_refuses_a_pin_for_an_http_server() -> None:
    code, err = await run_peer("http://127.0.0.1:9", "--fingerprint", WRITTEN)
    assert code == 1, err
    assert "--server http://127.0.0.1:9 is not https" in err
    assert "\nhint: use --server https://HOST:PORT" in err
    assert "cannot reach" not in err  # refused before connecting


async def test_the_peer_command_refuses_a_malformed_fingerprint() -> None:
    code, err = await run_peer("https://127.0.0.1:9", "--fingerprint", "SHA1:AB:CD")
    assert code == 1, err
    assert "starts with 'SHA1'" in err and "\nhint: copy the fingerprint" in err
    assert "cannot reach" not in err


async def test_the_peer_command_with_the_right_fingerprint_joins(https: Https) -> None:
    peer = PeerProcess(https.url, "tls-peer", "--fingerprint", https.cert.fingerprint.lower())
    try:
        await wait_for(lambda: peer.joined or peer.proc.poll() is not None, PROCESS_S, "joined")
        assert peer.joined, peer.stderr()
    finally:
        peer.close()
