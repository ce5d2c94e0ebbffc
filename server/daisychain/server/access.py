"""How other devices reach this server: what ``/api/status`` says about it.

A page opened over plain http at a LAN address is not a secure context (no Web Crypto, WebGPU,
saves in the browser): it trains on the CPU tier and tells its user how to get the rest. To do
that it must know whether this server also offers https, on which port and with which
certificate; and a page on the server's own machine (at 127.0.0.1, which no other device can
open) must learn the address to hand to other devices. ``Access`` holds those facts, filled in
once the listeners are bound (``--port 0`` is known only then).

Invite QR codes (``POST /api/qr``) are qr.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from daisychain.server.grouping import parse_address
from daisychain.server.tls import Certificate


@dataclass
class Access:
    """What the server's listeners are (set by whoever binds them: ``main.serve``,
    ``app.serve_local``)."""

    # The https listener's port and certificate, if any.
    https_port: int | None = None
    certificate: Certificate | None = None
    # URLs another device can open (LAN addresses of the listeners, https first): shown only to
    # pages on this machine, which cannot hand out their own 127.0.0.1 address.
    lan_urls: list[str] = field(default_factory=list)

    def describe(self, request: web.BaseRequest, *, trust_proxy: bool) -> dict[str, Any]:
        """``/api/status``'s ``access`` field for this request."""
        https = None
        if self.https_port is not None and self.certificate is not None:
            https = {
                "port": self.https_port,
                "fingerprint": self.certificate.fingerprint,
                # A browser asks about a self-signed certificate once; a CA's it trusts.
                "self_signed": self.certificate.self_signed,
            }
        return {
            # TLS to this process (behind a proxy the proxy's TLS is not seen here).
            "secure": request.secure,
            "https": https,
            "lan": list(self.lan_urls) if _from_this_machine(request, trust_proxy) else [],
        }


def _from_this_machine(request: web.BaseRequest, trust_proxy: bool) -> bool:
    if trust_proxy:  # every connection comes from the proxy: nobody is "local"
        return False
    address = parse_address(request.remote) if request.remote else None
    return address is not None and address.is_loopback
