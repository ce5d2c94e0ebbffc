"""How other devices reach this server: what ``/api/status`` says about it, and invite QR codes.

A page opened over plain http at a LAN address is not a secure context (no Web Crypto, WebGPU,
saves in the browser): it trains on the CPU tier and tells its user how to get the rest. To do
that it must know whether this server also offers https, on which port and with which
certificate; and a page on the server's own machine (at 127.0.0.1, which no other device can
open) must learn the address to hand to other devices. ``Access`` holds those facts, filled in
once the listeners are bound (``--port 0`` is known only then).

``POST /api/qr`` draws the QR code of an address (``{"text": URL}`` -> SVG) with ``segno``, so
the page needs no QR encoder of its own. A POST, not a GET with the address in the query: a
private room's link holds its code, and request lines are what access logs keep.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import segno
from aiohttp import web

from daisychain.server.grouping import client_address, network_key, parse_address
from daisychain.server.ratelimit import KeyedLimiter
from daisychain.server.tls import Certificate

# The longest invite: an https URL with a host name, a port and ?room=<16 characters> is under
# 100; 512 leaves room for long host names and stays a QR code a phone reads (version <= 17).
MAX_QR_TEXT = 512
# JSON escapes can take a character to 6 bytes; a URL's characters take 1.
MAX_QR_BODY = 4 * MAX_QR_TEXT
# The page asks for one code per address it shows (the group's and a room's), on demand.
QR_PER_S = 2.0
QR_BURST = 10


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


class QrEndpoint:
    """``POST /api/qr``: ``{"text": "..."}`` -> the QR code as SVG (error correction M)."""

    def __init__(self, *, trust_proxy: bool) -> None:
        self.trust_proxy = trust_proxy
        self.limiter = KeyedLimiter(QR_PER_S, QR_BURST)

    async def handle(self, request: web.Request) -> web.Response:
        address = client_address(request.headers, request.remote, trust_proxy=self.trust_proxy)
        bucket = self.limiter.bucket(network_key(address) if address else "unknown")
        if not bucket.take():
            retry = max(1, round(bucket.retry_after_s()))
            raise _refusal(
                web.HTTPTooManyRequests, "too many QR codes asked for", f"retry in {retry} s",
                headers={"Retry-After": str(retry)},
            )  # fmt: skip
        if request.content_length is not None and request.content_length > MAX_QR_BODY:
            raise web.HTTPRequestEntityTooLarge(
                max_size=MAX_QR_BODY, actual_size=request.content_length,
                text=json.dumps({"error": "the request body is too large",
                                 "hint": f"{_HINT} (at most {MAX_QR_TEXT} characters)"}),
                content_type="application/json",
            )  # fmt: skip
        try:
            # Within the bound checked above (a chunked body is cut there and fails to parse).
            body = json.loads(await request.content.read(MAX_QR_BODY))
        except (ValueError, UnicodeDecodeError):
            raise _refusal(web.HTTPBadRequest, "the body is not JSON", _HINT) from None
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text:
            raise _refusal(web.HTTPBadRequest, 'the body has no "text" string', _HINT)
        if len(text) > MAX_QR_TEXT:
            raise _refusal(
                web.HTTPBadRequest, f"text is {len(text)} characters long",
                f"a QR code here holds at most {MAX_QR_TEXT}",
            )  # fmt: skip
        out = io.BytesIO()
        segno.make(text, error="m", micro=False).save(
            out, kind="svg", scale=4, border=4, dark="#111", light="#fff", xmldecl=False,
            title="QR code of the address to open", nl=False,
        )  # fmt: skip
        return web.Response(
            body=out.getvalue(),
            content_type="image/svg+xml",
            headers={"Cache-Control": "no-store"},
        )


_HINT = 'POST {"text": "https://HOST:PORT/"} as application/json'


def _refusal(
    kind: type[web.HTTPError], message: str, hint: str, headers: dict[str, str] | None = None
) -> web.HTTPError:
    return kind(
        text=json.dumps({"error": message, "hint": hint}),
        content_type="application/json",
        headers=headers,
    )
