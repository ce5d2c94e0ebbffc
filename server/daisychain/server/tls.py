"""HTTPS for a self-hosted server: a certificate made once for this machine, or the operator's.

A page opened at a LAN address over plain http is not a secure context: the browser withholds
Web Crypto, WebGPU, the origin-private file system and cross-origin isolation. ``daisychain
serve --https`` therefore serves TLS with a self-signed certificate that this module makes once
and keeps in the state folder (``tls/cert.pem``, ``tls/key.pem``), reused on every restart so
each device accepts it only once. Its subjectAltName lists every local name and address (a
browser checks the address it was opened at against it). It is made again, with the same key,
only when it no longer covers this machine's addresses (a new DHCP lease) or is about to expire;
the start-up banner says so, since the devices must then accept the new one.

``--cert FILE --key FILE`` serves an operator's certificate instead (one from ``tailscale cert``
or any CA); it is checked here, once, with a hint for every way it can be wrong.

The fingerprint printed and pinned (``daisychain.peer --fingerprint``) is the SHA-256 of the
leaf certificate's DER bytes, written as browsers show it: ``SHA256:AB:CD:...``.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import ipaddress
import logging
import os
import socket
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import ifaddr
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Apple platforms refuse TLS server certificates valid for more than 825 days, and publicly
# trusted ones may not exceed 398: 397 days is accepted everywhere.
VALIDITY = dt.timedelta(days=397)
# A certificate this close to its end is made again at start, before a device meets the error.
RENEW_BEFORE = dt.timedelta(days=30)
# Clocks of phones and servers disagree by minutes; a certificate valid from an hour ago is not
# "not yet valid" anywhere.
BACKDATE = dt.timedelta(hours=1)
CERT_FILE = "cert.pem"
KEY_FILE = "key.pem"


class TlsError(Exception):
    """A certificate problem the operator must fix; ``hint`` says how."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class Certificate:
    """A certificate and key on disk, and what a person needs to recognise them."""

    cert_path: Path
    key_path: Path
    # SHA-256 of the leaf's DER bytes as browsers show it: "SHA256:AB:CD:..." (32 bytes).
    fingerprint: str
    # base64 SHA-256 of the leaf's SubjectPublicKeyInfo: what Chromium's
    # --ignore-certificate-errors-spki-list names (tests trust exactly this certificate).
    spki_sha256: str
    names: tuple[str, ...]
    addresses: tuple[str, ...]
    not_after: dt.datetime
    self_signed: bool
    # Why this start made it: None when an existing one was reused or given by the operator.
    made_because: str | None = None

    def context(self) -> ssl.SSLContext:
        """A server-side TLS context serving this certificate (TLS 1.2 or newer)."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_path, self.key_path)
        except ssl.SSLError as exc:
            raise TlsError(
                f"the key {self.key_path} does not belong to the certificate {self.cert_path} "
                f"({exc.reason or exc})",
                "give the key file that was issued with this certificate",
            ) from None
        return context


def default_state_dir() -> Path:
    """Where the server keeps what it must find again after a restart (the certificate):
    $DAISYCHAIN_STATE_DIR, else $XDG_STATE_HOME/daisychain, else ~/.local/state/daisychain."""
    explicit = os.environ.get("DAISYCHAIN_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "daisychain"


def format_fingerprint(digest: bytes) -> str:
    return "SHA256:" + ":".join(f"{b:02X}" for b in digest)


def fingerprint_of(cert: x509.Certificate) -> str:
    return format_fingerprint(cert.fingerprint(hashes.SHA256()))


def spki_sha256_of(cert: x509.Certificate) -> str:
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


# -- this machine's names and addresses --------------------------------------------------------


def interface_addresses() -> list[IPAddress]:
    """Every address of this machine's interfaces that another device could use (no IPv6
    link-local: a URL to one needs the interface's zone, which no phone can type), loopback
    last within each family.

    ``ifaddr`` lists them (getifaddrs on Linux, macOS and the BSDs, GetAdaptersAddresses on
    Windows): every address of every interface, secondary IPv4 addresses included."""
    found: list[IPAddress] = []
    with contextlib.suppress(OSError):
        found = _adapter_addresses()
    if not found:  # no interface answered (a stripped-down sandbox): what the host name resolves to
        with contextlib.suppress(OSError):
            for info in socket.getaddrinfo(socket.gethostname(), None):
                found.append(ipaddress.ip_address(str(info[4][0]).split("%")[0]))
    usable = [a for a in found if not a.is_link_local and not a.is_unspecified]
    return sorted(set(usable), key=lambda a: (a.version, a.is_loopback, int(a)))


def _adapter_addresses() -> list[IPAddress]:
    out: list[IPAddress] = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            # IPv4: "a.b.c.d"; IPv6: (address, flowinfo, scope_id), the zone never in the text
            # on POSIX, and dropped here should a platform add one.
            text = ip.ip if isinstance(ip.ip, str) else ip.ip[0]
            with contextlib.suppress(ValueError):
                out.append(ipaddress.ip_address(text.split("%")[0]))
    return out


def local_names() -> list[str]:
    """DNS names this machine answers to without a DNS server: localhost, the host name and its
    mDNS form (many phones resolve NAME.local on a home network). Never a DNS lookup."""
    names = ["localhost"]
    host = socket.gethostname().strip().rstrip(".").lower()
    if host and host != "localhost" and _is_dns_name(host):
        names.append(host)
        if "." not in host:
            names.append(f"{host}.local")
    return names


def _is_dns_name(name: str) -> bool:
    labels = name.split(".")
    return all(
        0 < len(label) <= 63
        and label.isascii()
        and all(c.isalnum() or c == "-" for c in label)
        and not label.startswith("-")
        for label in labels
    )


def listen_addresses(host: str) -> list[IPAddress]:
    """The addresses a server bound to ``host`` is reachable at: every interface's for a
    wildcard (0.0.0.0 takes IPv4 only, :: both), else ``host`` itself when it is an address."""
    if host in ("", "0.0.0.0", "::"):
        every = interface_addresses()
        return every if host != "0.0.0.0" else [a for a in every if a.version == 4]
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        return []  # a host name: its addresses are the resolver's business


# -- the self-signed certificate ----------------------------------------------------------------


def ensure_certificate(
    state_dir: Path,
    names: Iterable[str],
    addresses: Iterable[IPAddress],
    now: dt.datetime | None = None,
) -> Certificate:
    """The certificate in ``state_dir``/tls, made (or made again) when it is missing, unreadable,
    expiring within ``RENEW_BEFORE`` or does not cover every name and address given."""
    now = now or dt.datetime.now(dt.UTC)
    folder = state_dir / "tls"
    cert_path, key_path = folder / CERT_FILE, folder / KEY_FILE
    want_names = sorted(set(names))
    want_addresses = sorted({ipaddress.ip_address(a) for a in addresses}, key=_address_order)
    key: ec.EllipticCurvePrivateKey | None = None
    reason = "none was kept yet"
    if cert_path.exists() or key_path.exists():
        try:
            key, cert = _read_pair(cert_path, key_path)
        except (OSError, ValueError) as exc:
            reason = f"the kept one could not be read ({exc})"
        else:
            covered_names = set(_san(cert, x509.DNSName))
            covered = {ipaddress.ip_address(a) for a in _san(cert, x509.IPAddress)}
            missing = [n for n in want_names if n not in covered_names]
            missing += [str(a) for a in want_addresses if a not in covered]
            if cert.not_valid_after_utc - now < RENEW_BEFORE:
                reason = f"the kept one expires on {cert.not_valid_after_utc:%Y-%m-%d}"
            elif missing:
                reason = f"the kept one does not cover {', '.join(missing)}"
                # Keep what it covered too: a laptop moving between two networks keeps one.
                want_names = sorted(set(want_names) | covered_names)
                want_addresses = sorted(set(want_addresses) | covered, key=_address_order)
            else:
                return _describe(cert, cert_path, key_path, None)
    if key is None:
        key = ec.generate_private_key(ec.SECP256R1())
    cert = _self_signed(key, want_names, want_addresses, now)
    _write_pair(folder, key, cert)
    log.info("made a TLS certificate in %s: %s", folder, reason)
    return _describe(cert, cert_path, key_path, reason)


def _address_order(a: IPAddress) -> tuple[int, int]:
    return (a.version, int(a))


def _self_signed(
    key: ec.EllipticCurvePrivateKey,
    names: list[str],
    addresses: list[IPAddress],
    now: dt.datetime,
) -> x509.Certificate:
    host = next((n for n in names if n != "localhost"), "localhost")
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "DaisyChain"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"DaisyChain on {host}"[:64]),
        ]
    )
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alt += [x509.IPAddress(a) for a in addresses]
    # A TLS server key only signs the handshake (ECDHE): nothing else is allowed.
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _read_pair(
    cert_path: Path, key_path: Path
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("the kept key is not the EC key this server makes")
    if key.public_key() != cert.public_key():
        raise ValueError("the kept key does not match the kept certificate")
    return key, cert


def _write_pair(folder: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    """Both files replaced atomically (a crash leaves the old pair or the new one), the key
    readable by this user only."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    for name, data, mode in (
        (KEY_FILE, key_pem, 0o600),
        (CERT_FILE, cert.public_bytes(serialization.Encoding.PEM), 0o644),
    ):
        tmp = folder / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # an older tmp file kept its mode through O_CREAT
        os.replace(tmp, folder / name)


def _san(cert: x509.Certificate, kind: type[x509.GeneralName]) -> list[str]:
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in ext.value.get_values_for_type(kind)]  # type: ignore[arg-type]


def _describe(
    cert: x509.Certificate, cert_path: Path, key_path: Path, made_because: str | None
) -> Certificate:
    return Certificate(
        cert_path=cert_path,
        key_path=key_path,
        fingerprint=fingerprint_of(cert),
        spki_sha256=spki_sha256_of(cert),
        names=tuple(_san(cert, x509.DNSName)),
        addresses=tuple(_san(cert, x509.IPAddress)),
        not_after=cert.not_valid_after_utc,
        self_signed=cert.issuer == cert.subject,
        made_because=made_because,
    )


# -- an operator's certificate -------------------------------------------------------------------


def load_certificate(cert_file: Path, key_file: Path) -> Certificate:
    """The operator's certificate (the first PEM block of ``cert_file`` is the leaf; a full
    chain may follow) and key, checked: readable, PEM, matching, and a warning if expired."""
    try:
        cert_pem = cert_file.read_bytes()
    except OSError as exc:
        raise TlsError(
            f"cannot read --cert {cert_file}: {exc.strerror or exc}",
            "give the path of a PEM certificate (e.g. the .crt from `tailscale cert`)",
        ) from None
    try:
        key_file.read_bytes()
    except OSError as exc:
        raise TlsError(
            f"cannot read --key {key_file}: {exc.strerror or exc}",
            "give the path of the certificate's PEM private key, readable by this user",
        ) from None
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        raise TlsError(
            f"--cert {cert_file} holds no PEM certificate",
            "give a file that starts with -----BEGIN CERTIFICATE----- (convert DER with "
            "`openssl x509 -inform der -in FILE -out cert.pem`)",
        ) from None
    described = _describe(cert, cert_file, key_file, None)
    described.context()  # raises TlsError when the key is not this certificate's
    if cert.not_valid_after_utc < dt.datetime.now(dt.UTC):
        log.warning(
            "the certificate %s expired on %s: browsers will refuse it",
            cert_file, f"{cert.not_valid_after_utc:%Y-%m-%d}",
        )  # fmt: skip
    return described
