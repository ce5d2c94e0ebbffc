"""https built in (issue 17): the certificate the server makes and keeps (server/tls.py), an
operator's --cert/--key refused with a hint for every way it can be wrong, the command line and
its start-up banner, ``/api/status``'s ``access`` facts, ``POST /api/qr``, and cross-origin
isolation asked for only where a browser can grant it.

The browser's side (pages over https and plain http at the namespace's network address, training
with a Python peer): tests/page/test_page_lan.py. The peer's pinning: tests/p2p/test_peer_tls.py.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import io
import ipaddress
import json
import os
import re
import shutil
import socket
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import segno
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from daisychain.server import banner, main, tls
from daisychain.server.app import Listener, serve_listeners
from server_fixtures import ByteTokenizer, config, serve

REPO = Path(__file__).resolve().parents[2]
LOCAL = [ipaddress.ip_address("127.0.0.1")]
NOW = dt.datetime(2026, 12, 2, tzinfo=dt.UTC)


def pem_cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def served_fingerprint(host: str, port: int) -> str:
    """The fingerprint of the certificate a TLS server at host:port presents."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls_socket,
    ):
        der = tls_socket.getpeercert(binary_form=True)
    assert der is not None
    return tls.format_fingerprint(hashlib.sha256(der).digest())


# -- the certificate the server makes -----------------------------------------------------------


def test_a_certificate_is_made_once_and_reused(tmp_path: Path) -> None:
    addresses = [*LOCAL, ipaddress.ip_address("192.168.1.5"), ipaddress.ip_address("fd00::2")]
    first = tls.ensure_certificate(tmp_path, ["localhost", "myhost"], addresses, NOW)
    assert first.made_because == "none was kept yet"
    assert first.self_signed
    assert set(first.names) == {"localhost", "myhost"}
    assert set(first.addresses) == {"127.0.0.1", "192.168.1.5", "fd00::2"}
    assert re.fullmatch(r"SHA256(:[0-9A-F]{2}){32}", first.fingerprint)
    cert = pem_cert(first.cert_path)
    assert first.fingerprint == tls.format_fingerprint(hashlib.sha256(cert.public_bytes(
        serialization.Encoding.DER)).digest())  # fmt: skip
    assert cert.not_valid_after_utc - NOW == tls.VALIDITY
    assert stat.S_IMODE(os.stat(first.key_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(first.cert_path.parent).st_mode) == 0o700
    again = tls.ensure_certificate(tmp_path, ["localhost", "myhost"], addresses, NOW)
    assert again.made_because is None
    assert again.fingerprint == first.fingerprint
    # A subset of what it covers needs no new certificate either.
    assert tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, NOW).made_because is None


def test_a_new_address_remakes_it_with_the_same_key_and_keeps_the_old_addresses(
    tmp_path: Path,
) -> None:
    home = tls.ensure_certificate(tmp_path, ["localhost"], [*LOCAL, "192.168.1.5"], NOW)  # type: ignore[list-item]
    moved = tls.ensure_certificate(tmp_path, ["localhost"], [*LOCAL, "10.0.0.7"], NOW)  # type: ignore[list-item]
    assert moved.made_because is not None and "10.0.0.7" in moved.made_because
    assert moved.fingerprint != home.fingerprint
    assert moved.spki_sha256 == home.spki_sha256  # the key stays: only the certificate is new
    assert {"192.168.1.5", "10.0.0.7"} <= set(moved.addresses)


def test_an_expiring_certificate_is_remade(tmp_path: Path) -> None:
    made = tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, NOW)
    later = NOW + tls.VALIDITY - tls.RENEW_BEFORE + dt.timedelta(days=1)
    renewed = tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, later)
    assert renewed.made_because is not None and "expires" in renewed.made_because
    assert renewed.not_after > made.not_after
    # A day earlier it is still kept.
    assert tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, NOW).made_because is None


@pytest.mark.parametrize("damage", ["garbage-cert", "garbage-key", "other-key", "no-key"])
def test_a_damaged_pair_is_replaced_not_served(tmp_path: Path, damage: str) -> None:
    made = tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, NOW)
    if damage == "garbage-cert":
        made.cert_path.write_bytes(b"-----BEGIN CERTIFICATE-----\nnope\n")
    elif damage == "garbage-key":
        made.key_path.write_bytes(b"not a key")
    elif damage == "other-key":
        other = tls.ensure_certificate(tmp_path / "other", ["localhost"], LOCAL, NOW)
        made.key_path.write_bytes(other.key_path.read_bytes())
    else:
        made.key_path.unlink()
    fixed = tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, NOW)
    assert fixed.made_because is not None and "could not be read" in fixed.made_because
    fixed.context()  # the new pair matches


def test_local_names_and_addresses_never_ask_a_resolver() -> None:
    names = tls.local_names()
    assert names[0] == "localhost"
    assert all(re.fullmatch(r"[a-z0-9.-]+", n) for n in names)
    addresses = tls.interface_addresses()
    assert ipaddress.ip_address("127.0.0.1") in addresses
    assert not any(a.is_link_local for a in addresses)
    assert all(a.version == 4 for a in tls.listen_addresses("0.0.0.0"))
    assert tls.listen_addresses("10.1.2.3") == [ipaddress.ip_address("10.1.2.3")]
    assert tls.listen_addresses("myhost") == []


class _Adapter:
    """What ``ifaddr.get_adapters`` yields: a name and its addresses (``ip`` of each: a string
    for IPv4, an (address, flowinfo, scope_id) tuple for IPv6)."""

    def __init__(self, name: str, ips: list[str | tuple[str, int, int]]) -> None:
        self.name = name
        self.ips = [type("IP", (), {"ip": ip})() for ip in ips]


def test_interface_addresses_drop_link_local_and_unspecified_and_put_loopback_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    adapters = [
        _Adapter("lo", ["127.0.0.1", ("::1", 0, 0)]),
        _Adapter("eth0", ["192.168.1.5", "10.0.0.7", ("fe80::1", 0, 2), ("fd00::2", 0, 0)]),
        _Adapter("wlan0", ["169.254.3.4", "0.0.0.0", ("fe80::2%wlan0", 0, 3), "192.168.1.5"]),
        _Adapter("odd", ["not an address"]),
    ]
    monkeypatch.setattr(tls.ifaddr, "get_adapters", lambda: adapters)
    assert [str(a) for a in tls.interface_addresses()] == [
        "10.0.0.7", "192.168.1.5", "127.0.0.1", "fd00::2", "::1",
    ]  # fmt: skip


def test_interface_addresses_fall_back_to_the_host_name_when_no_interface_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse() -> list[_Adapter]:
        raise OSError(38, "getifaddrs not implemented")

    monkeypatch.setattr(tls.ifaddr, "get_adapters", refuse)
    monkeypatch.setattr(tls.socket, "gethostname", lambda: "localhost")
    found = tls.interface_addresses()
    assert found and all(a.is_loopback for a in found), found


@pytest.mark.skipif(shutil.which("ip") is None, reason="no iproute2 `ip` on this machine")
def test_interface_addresses_are_those_ip_addr_lists() -> None:
    # iproute2 asks the kernel over netlink; ifaddr through getifaddrs: two readings of the
    # same table, filtered by the same rule (no link-local, no unspecified).
    proc = subprocess.run(
        ["ip", "-j", "addr"], capture_output=True, text=True, timeout=10, check=True
    )
    listed = {
        ipaddress.ip_address(info["local"])
        for link in json.loads(proc.stdout)
        for info in link.get("addr_info", [])
        if "local" in info
    }
    expected = {a for a in listed if not a.is_link_local and not a.is_unspecified}
    assert expected, proc.stdout
    assert set(tls.interface_addresses()) == expected


# -- an operator's certificate -------------------------------------------------------------------


def test_an_operators_certificate_is_served_as_given(tmp_path: Path) -> None:
    made = tls.ensure_certificate(tmp_path / "ca", ["myhost.example"], LOCAL, NOW)
    given = tls.load_certificate(made.cert_path, made.key_path)
    assert given.fingerprint == made.fingerprint
    assert given.made_because is None


@pytest.mark.parametrize(
    ("case", "says", "hint"),
    [
        ("missing-cert", "cannot read --cert", "PEM certificate"),
        ("missing-key", "cannot read --key", "private key"),
        ("not-pem", "holds no PEM certificate", "BEGIN CERTIFICATE"),
        ("wrong-key", "does not belong to the certificate", "issued with this certificate"),
    ],
)
def test_a_bad_operator_certificate_is_refused_with_a_hint(
    tmp_path: Path, case: str, says: str, hint: str
) -> None:
    made = tls.ensure_certificate(tmp_path / "a", ["localhost"], LOCAL, NOW)
    other = tls.ensure_certificate(tmp_path / "b", ["localhost"], LOCAL, NOW)
    cert, key = made.cert_path, made.key_path
    if case == "missing-cert":
        cert = tmp_path / "absent.pem"
    elif case == "missing-key":
        key = tmp_path / "absent.key"
    elif case == "not-pem":
        cert = tmp_path / "cert.der"
        cert.write_bytes(pem_cert(made.cert_path).public_bytes(serialization.Encoding.DER))
    else:
        key = other.key_path
    with pytest.raises(tls.TlsError) as caught:
        tls.load_certificate(cert, key)
    assert says in caught.value.message
    assert hint in caught.value.hint


# -- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--cert", "c.pem"], "--cert given alone"),
        (["--key", "k.pem"], "--key given alone"),
        (["--http-port", "8080"], "--http-port is a second, plain http port"),
        (["--https", "--http-port", "70000"], "out of range"),
        (["--cert", "/nonexistent/c.pem", "--key", "/nonexistent/k.pem"], "cannot read --cert"),
    ],
)
def test_https_flags_that_cannot_work_stop_the_server_with_a_hint(
    argv: list[str], says: str
) -> None:
    parser = main.argparse.ArgumentParser()
    main.add_arguments(parser)
    args = parser.parse_args(argv)
    with pytest.raises(SystemExit) as caught:
        main.certificate_from_args(args, "127.0.0.1")
    assert says in str(caught.value)
    assert "hint:" in str(caught.value) or "out of range" in str(caught.value)


def test_an_unwritable_state_folder_is_said_with_a_hint(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    parser = main.argparse.ArgumentParser()
    main.add_arguments(parser)
    args = parser.parse_args(["--https", "--state-dir", str(blocker / "state")])
    with pytest.raises(SystemExit) as caught:
        main.certificate_from_args(args, "127.0.0.1")
    assert "cannot keep a certificate" in str(caught.value)
    assert "--state-dir" in str(caught.value)


def test_the_banner_names_the_addresses_the_fingerprint_the_peer_command_and_a_qr(
    tmp_path: Path,
) -> None:
    cert = tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, NOW)
    lan = ["https://192.168.1.5:8787/", "http://192.168.1.5:8080/"]
    text = banner.text(["https://0.0.0.0:8787/"], lan, cert, unicode=True)
    assert "https on port 8787" in text
    assert "Other devices:   https://192.168.1.5:8787/" in text
    assert cert.fingerprint in text
    assert (
        f"python -m daisychain.peer --server https://192.168.1.5:8787 --fingerprint "
        f"{cert.fingerprint}"
    ) in text
    assert "Scan to open https://192.168.1.5:8787/" in text
    assert banner.qr(lan[0], unicode=True) in text
    # The terminal QR code is segno's matrix of that very URL: dark modules are full or half
    # blocks, two rows per line.
    out = io.StringIO()
    segno.make(lan[0], error="m", micro=False).terminal(out=out, compact=True, border=2)
    assert out.getvalue().rstrip("\n") == banner.qr(lan[0], unicode=True)
    assert "\x1b[" in banner.qr(lan[0], unicode=False)  # ANSI colours where no Unicode
    # Plain http on loopback: nothing to tell beyond the log line.
    assert banner.text(["http://127.0.0.1:8787/"], [], None, unicode=True) == ""
    plain = banner.text(["http://0.0.0.0:8787/"], ["http://192.168.1.5:8787/"], None, unicode=True)
    assert "Restart with --https" in plain


def test_serve_https_prints_the_fingerprint_it_serves_and_keeps_it_across_restarts(
    tmp_path: Path,
) -> None:
    """``python -m daisychain.server --https``: the printed fingerprint is the served
    certificate's, and a restart serves the same one (made once, kept in --state-dir)."""
    seen = []
    for _ in range(2):
        proc = subprocess.Popen(
            [sys.executable, "-m", "daisychain.server", "--https", "--port", "0", "--offline",
             "--state-dir", str(tmp_path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=str(REPO / "server"), PYTHONIOENCODING="utf-8"),
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:  # bounded by the test timeout
                lines.append(line)
                if line.startswith("  Certificate:"):
                    break
            text = "".join(lines)
            port = int(re.search(r"https on port (\d+)", text).group(1))  # type: ignore[union-attr]
            printed = re.search(r"Certificate:\s+(SHA256:\S+)", text).group(1)  # type: ignore[union-attr]
            assert served_fingerprint("127.0.0.1", port) == printed
            seen.append((printed, "certificate made now" in text))
        finally:
            proc.terminate()
            proc.communicate(timeout=30)
        assert proc.returncode == 0
    assert seen[0][0] == seen[1][0]
    assert seen == [(seen[0][0], True), (seen[0][0], False)]


# -- /api/status access, /api/qr, isolation -------------------------------------------------------


async def test_status_tells_the_https_port_and_hands_lan_addresses_to_this_machine_only(
    tmp_path: Path,
) -> None:
    cert = tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, NOW)
    listeners = [
        Listener("127.0.0.1", 0, cert),
        Listener("127.0.0.1", 0),
    ]
    async with serve_listeners(config(), listeners, tokenizer=ByteTokenizer) as [https, http]:
        pin = aiohttp.Fingerprint(bytes.fromhex(cert.fingerprint[7:].replace(":", "")))
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{http}/api/status") as response:
                plain = (await response.json())["access"]
            async with session.get(f"{https}/api/status", ssl=pin) as response:
                secure = (await response.json())["access"]
    port = int(https.rsplit(":", 1)[1])
    assert plain == {"secure": False, "lan": [], "https": {
        "port": port, "fingerprint": cert.fingerprint, "self_signed": True}}  # fmt: skip
    assert secure["secure"] is True and secure["https"]["port"] == port
    # Listening on 127.0.0.1 only: no address another device could open.
    assert secure["lan"] == []


async def test_lan_addresses_are_not_told_to_other_machines_nor_behind_a_proxy() -> None:
    async with serve(config(trust_proxy=True)) as client:
        body = await (await client.get("/api/status")).json()
    assert body["access"] == {"secure": False, "https": None, "lan": []}


@pytest.mark.parametrize(
    ("host", "isolated"),
    [
        ("127.0.0.1:8787", True),
        ("localhost:8787", True),
        ("[::1]:8787", True),
        ("192.168.1.5:8787", False),
        ("myhost.local", False),
        (None, False),
    ],
)
async def test_isolation_is_asked_for_only_where_a_browser_grants_it(
    host: str | None, isolated: bool
) -> None:
    """Over plain http at a LAN address Chromium ignores Cross-Origin-Opener-Policy and logs a
    console error on every page (seen in tests/page/test_page_lan.py): not sent there."""
    async with serve() as client:
        reader, writer = await asyncio.open_connection(client.host, client.port)
        # HTTP/1.1 requires a Host header; HTTP/1.0 may go without one.
        head = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n" if host else "GET /healthz HTTP/1.0\r\n"
        writer.write(f"{head}Connection: close\r\n\r\n".encode())
        data = await asyncio.wait_for(reader.read(), timeout=5)
        writer.close()
        await writer.wait_closed()
    headers = data.split(b"\r\n\r\n", 1)[0].decode().lower()
    assert ("cross-origin-opener-policy: same-origin" in headers) is isolated
    assert ("cross-origin-embedder-policy: require-corp" in headers) is isolated
    assert "x-content-type-options: nosniff" in headers  # the rest always


async def test_isolation_is_kept_over_https_and_behind_a_proxy(tmp_path: Path) -> None:
    cert = tls.ensure_certificate(tmp_path, ["localhost"], LOCAL, NOW)
    listeners = [Listener("127.0.0.1", 0, cert)]
    async with serve_listeners(config(), listeners, tokenizer=ByteTokenizer) as [https]:
        port = int(https.rsplit(":", 1)[1])
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 192.168.1.5\r\nConnection: close\r\n\r\n")
        data = await asyncio.wait_for(reader.read(), timeout=5)
        writer.close()
    assert b"Cross-Origin-Opener-Policy: same-origin" in data
    async with serve(config(trust_proxy=True)) as client:
        response = await client.get("/healthz", headers={"Host": "192.168.1.5"})
        assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin"


def test_fingerprints_are_written_as_browsers_show_them() -> None:
    assert tls.format_fingerprint(bytes(range(32))) == "SHA256:" + ":".join(
        f"{i:02X}" for i in range(32)
    )
