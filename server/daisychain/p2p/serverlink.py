"""How a headless peer reaches its server: plain http, https verified by a CA, or https pinned.

``daisychain serve --https`` serves a self-signed certificate (``server.tls``) that no CA
vouches for. A browser asks its user once; a headless peer has nobody to ask, so it trusts such
a server only when told exactly which certificate: ``--fingerprint SHA256:AB:CD:...``, the
SHA-256 of the leaf certificate as the server prints it at start (and the page's "Add a
device" shows it). A pinned connection checks that fingerprint and nothing else (a self-signed
certificate has no chain to verify); an unpinned https connection verifies the certificate the
usual way, against the system's CAs and the host name. There is no third, "insecure" way: a
peer that skipped both checks would hand its place in the run, and its batches, to whoever
answered on the network.

Every connection a peer makes to its server (the ``/ws`` signaling socket, ``/api/status``,
the ``/data`` windows) goes through ``session``, so all three pin the same certificate; a TLS
refusal becomes a message and a hint through ``tls_refusal``.
"""

from __future__ import annotations

import string
import urllib.parse

import aiohttp

DIGEST_BYTES = 32  # SHA-256
_HEX = frozenset(string.hexdigits)
_PIN_HINT = (
    "copy the fingerprint that `daisychain serve --https` printed at start (or the one the "
    'page\'s "Add a device" shows), e.g. --fingerprint SHA256:AB:CD:...:EF'
)


class ServerLinkError(Exception):
    """This peer cannot reach its server the way it was told; ``hint`` says what to change."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def format_fingerprint(digest: bytes) -> str:
    """``SHA256:AB:CD:...``: how the server prints its certificate's fingerprint (the same
    format as ``server.tls.format_fingerprint``; the peer does not import the server's
    certificate code)."""
    return "SHA256:" + ":".join(f"{b:02X}" for b in digest)


def parse_fingerprint(text: str) -> bytes:
    """The 32 bytes of a SHA-256 certificate fingerprint written as ``SHA256:AB:CD:...`` (as the
    server prints it), or as 64 hex digits with or without colons; any case. Anything else
    raises ``ServerLinkError``."""
    given = text.strip()
    if not given:
        raise ServerLinkError("--fingerprint is empty", _PIN_HINT)
    body = given
    head, colon, rest = given.partition(":")
    if colon and not set(head) <= _HEX:  # an algorithm name before the digits
        if head.upper().replace("-", "") != "SHA256":
            raise ServerLinkError(
                f"--fingerprint {given!r} starts with {head!r}: this peer pins SHA-256 "
                "fingerprints only",
                _PIN_HINT,
            )
        body = rest
    if ":" in body:  # AB:CD:...: every byte two digits
        groups = body.split(":")
        written = all(len(g) == 2 and set(g) <= _HEX for g in groups)
        count = f"{len(groups)} bytes"
    else:
        groups = [body]
        written = set(body) <= _HEX
        count = f"{len(body)} hex digits"
    if not written:
        raise ServerLinkError(
            f"--fingerprint {given!r} is not hex bytes (two of 0-9, A-F each, optionally "
            "separated by colons)",
            _PIN_HINT,
        )
    digits = "".join(groups)
    if len(digits) != 2 * DIGEST_BYTES:
        raise ServerLinkError(
            f"--fingerprint {given!r} has {count}; a SHA-256 fingerprint has {DIGEST_BYTES} "
            f"bytes (64 hex digits)",
            _PIN_HINT,
        )
    return bytes.fromhex(digits)


def check(server: str, fingerprint: bytes | None) -> None:
    """Refuse a pin that could never be checked: a fingerprint for a plain http/ws server
    (there is no certificate to compare it with)."""
    scheme = urllib.parse.urlsplit(server).scheme.lower()
    if fingerprint is not None and scheme not in ("https", "wss"):
        raise ServerLinkError(
            f"--fingerprint pins an https server's certificate, but --server {server} is not "
            "https: it has no certificate to check",
            "use --server https://HOST:PORT for a server started with `daisychain serve "
            "--https`, or drop --fingerprint for a plain http server",
        )
    if fingerprint is not None and len(fingerprint) != DIGEST_BYTES:
        raise ServerLinkError(
            f"a pinned fingerprint has {DIGEST_BYTES} bytes, not {len(fingerprint)}", _PIN_HINT
        )


def session(server: str, fingerprint: bytes | None = None) -> aiohttp.ClientSession:
    """A client session for ``server``: https pinned to ``fingerprint`` when one is given (the
    certificate's SHA-256 must match; nothing else is checked), else the default verification
    (system CAs and host name). Raises ``ServerLinkError`` for a pin on a plain http server."""
    check(server, fingerprint)
    pin: aiohttp.Fingerprint | bool = (
        aiohttp.Fingerprint(fingerprint) if fingerprint is not None else True
    )
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=pin))


def tls_refusal(exc: BaseException, server: str) -> tuple[str, str] | None:
    """(message, hint) when ``exc`` is a TLS refusal from connecting to ``server``; ``None`` for
    any other error (the caller keeps its own words for those)."""
    if isinstance(exc, aiohttp.ServerFingerprintMismatch):
        return (
            f"the server at {server} presented the certificate {format_fingerprint(exc.got)}, "
            f"not the pinned {format_fingerprint(exc.expected)}",
            "copy the fingerprint that `daisychain serve --https` printed at start (or the one "
            'the page\'s "Add a device" shows) into --fingerprint, and check that --server '
            "reaches the right machine (a server that made a new certificate prints the new "
            "fingerprint)",
        )
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        why = exc.certificate_error
        reason = getattr(why, "verify_message", None) or str(why)
        return (
            f"the server at {server} presented a certificate this peer cannot verify ({reason})",
            "for a self-signed certificate pass --fingerprint SHA256:... as printed by "
            "`daisychain serve --https`, or serve a CA-signed certificate with --cert/--key",
        )
    if isinstance(exc, aiohttp.ClientSSLError):
        return (
            f"the TLS handshake with the server at {server} failed ({exc})",
            "check the scheme of --server: https:// for a server started with `daisychain "
            "serve --https` (or behind a TLS proxy), http:// otherwise",
        )
    return None
