"""What the operator reads at start: the addresses to open on other devices, the certificate's
fingerprint to compare when a browser asks, the command for headless peers, and a QR code of the
LAN address for phones. Printed (not logged): it is for a person at a terminal, and a QR code in
a log line is noise.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import segno

from daisychain.server.tls import Certificate


def text(
    urls: Sequence[str],
    lan_urls: Sequence[str],
    certificate: Certificate | None,
    *,
    unicode: bool,
) -> str:
    """The banner for listeners at ``urls`` (as bound) reachable from other devices at
    ``lan_urls`` (https first); "" when there is nothing to tell (plain http on loopback: the
    log's "listening on" line says it all)."""
    https = [u for u in lan_urls if u.startswith("https://")]
    if certificate is None and not lan_urls:
        return ""
    out: list[str] = []
    if certificate is not None:
        port = next((u.rsplit(":", 1)[1].rstrip("/") for u in urls if u.startswith("https")), "?")
        made = f" (certificate made now: {certificate.made_because})"
        out.append(
            f"DaisyChain serves https on port {port}{made if certificate.made_because else ''}."
        )
        out.append(f"  This machine:    https://localhost:{port}/")
    else:
        out.append("DaisyChain serves plain http.")
    for i, url in enumerate(lan_urls):
        out.append(f"  {'Other devices:' if i == 0 else '':<16} {url}")
    if not lan_urls:
        out.append(
            "  Other devices cannot reach it: it listens on this machine only "
            "(add --host 0.0.0.0 to serve your LAN)."
        )
    if certificate is not None:
        kind = "self-signed" if certificate.self_signed else "from --cert"
        out.append(f"  Certificate:     {certificate.fingerprint}")
        out.append(f"                   ({kind}, {certificate.cert_path})")
        if certificate.self_signed:
            out.append(
                "  Each browser warns once about a self-signed certificate: check that it "
                "shows this SHA-256 fingerprint, then accept it."
            )
        target = (https or [f"https://localhost:{port}/"])[0].rstrip("/")
        out.append(
            f"  Headless peers:  python -m daisychain.peer --server {target}"
            + (f" --fingerprint {certificate.fingerprint}" if certificate.self_signed else "")
        )
    if lan_urls and not https:
        out.append(
            "  Over plain http another device's browser withholds WebGPU, Web Crypto and saves: "
            "it trains on its CPU. Restart with --https to give it everything."
        )
    if lan_urls:
        out.append(f"  Scan to open {lan_urls[0]} on a phone:")
        out.append(qr(lan_urls[0], unicode=unicode))
    return "\n".join(out) + "\n"


def qr(url: str, *, unicode: bool) -> str:
    """``url`` as a QR code for a terminal: half-block characters (two modules per character
    row) where the terminal takes Unicode, else ANSI background colours (two spaces a module)."""
    out = io.StringIO()
    segno.make(url, error="m", micro=False).terminal(out=out, compact=unicode, border=2)
    return out.getvalue().rstrip("\n")
