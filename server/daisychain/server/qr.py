"""``POST /api/qr``: an invite address (``{"text": URL}``) drawn as a QR code (SVG) with
``segno``, so the page needs no QR encoder of its own. A POST, not a GET with the address in the
query: a private room's link holds its code, and request lines are what access logs keep.

Drawing is pure Python and grows with the text: 4 ms for a LAN invite (~50 bytes, version 4),
~35 ms at the 512-byte bound (version 18), and before that bound was on bytes rather than
characters, 190 ms for 509 emoji (2036 bytes, version 38). So:

* the text is bounded in UTF-8 bytes (``MAX_QR_BYTES``), which is what the code holds;
* the body is parsed strictly: UTF-8, JSON without ``NaN``/``Infinity``, nesting within the
  interpreter's limit, and a ``text`` that is Unicode (a lone surrogate such as ``"\\ud800"``
  has no UTF-8 form), each refused with 400 and a hint instead of a 500 and a traceback;
* drawing runs in a worker process (``workpool.WorkerPool``), never on the event loop, at most
  ``QR_AT_ONCE`` at once with ``QR_WAITING`` more in line (``datasource.Admission``); one more
  is refused at once with 429 and ``Retry-After`` rather than queued behind a burst;
* and each client network may ask ``QR_PER_S`` codes a second after a burst of ``QR_BURST``.
"""

from __future__ import annotations

import asyncio
import io
import json
import math
from typing import Any

import segno
from aiohttp import web

from daisychain.server.datasource import Admission, DataBusy
from daisychain.server.grouping import client_address, network_key
from daisychain.server.ratelimit import KeyedLimiter
from daisychain.server.workpool import WorkerDied, WorkerPool

# The longest invite: an https URL with a host name, a port and ?room=<16 characters> is under
# 100 bytes; 512 leaves room for long host names and stays a code a phone reads (version 18 at
# error correction M, 89 modules a side).
MAX_QR_BYTES = 512
# A JSON escape takes a byte of text to at most 6 (``\u00e9``; a 4-byte character is two
# escapes, 12 for 4); a URL's characters take 1.
MAX_QR_BODY = 4 * MAX_QR_BYTES
# The page asks for one code per address it shows (the group's and a room's), on demand.
QR_PER_S = 2.0
QR_BURST = 10
# One code at a time (~35 ms at the bound, one core), two more in line: a person waits at most
# ~0.1 s, and a burst from many networks is refused at once instead of queueing.
QR_AT_ONCE = 1
QR_WAITING = 2
QR_NICE = 19  # the lowest priority: on a contended CPU the event loop (and /data) come first

_HINT = 'POST {"text": "https://HOST:PORT/"} as application/json'


def draw(text: str) -> bytes:
    """The SVG of ``text``'s QR code (error correction M): the job a worker runs."""
    out = io.BytesIO()
    segno.make(text, error="m", micro=False).save(
        out, kind="svg", scale=4, border=4, dark="#111", light="#fff", xmldecl=False,
        title="QR code of the address to open", nl=False,
    )  # fmt: skip
    return out.getvalue()


def _ready() -> bool:
    return True


class BadBody(Exception):
    """A body ``/api/qr`` will not draw: what is wrong, and what to send instead."""

    def __init__(self, message: str, hint: str = _HINT) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


def _refuse_constant(name: str) -> Any:
    raise BadBody(f"the body holds {name}, which JSON does not allow")


def parse_text(body: bytes) -> str:
    """The ``text`` of a request body, or ``BadBody``."""
    try:
        raw = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadBody("the body is not UTF-8 text") from None
    try:
        obj = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise BadBody("the body is nested too deeply to be an invite") from None
    except ValueError:
        raise BadBody("the body is not JSON") from None
    text = obj.get("text") if isinstance(obj, dict) else None
    if not isinstance(text, str) or not text:
        raise BadBody('the body has no "text" string')
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadBody(
            "text holds a lone surrogate (a \\ud800-\\udfff escape without its pair): it is not "
            "Unicode text",
            "send the address as it is; escape a character outside the BMP as a surrogate pair",
        ) from None
    if size > MAX_QR_BYTES:
        raise BadBody(
            f"text is {size} bytes long in UTF-8",
            f"a QR code here holds at most {MAX_QR_BYTES} bytes: send the address only",
        )
    return text


class QrEndpoint:
    """``POST /api/qr``: ``{"text": "..."}`` -> the QR code as SVG."""

    def __init__(self, *, trust_proxy: bool) -> None:
        self.trust_proxy = trust_proxy
        self.limiter = KeyedLimiter(QR_PER_S, QR_BURST)
        self.admission = Admission(QR_AT_ONCE, QR_WAITING)
        self.worker = WorkerPool(1, QR_NICE, warm=("segno",), what="QR code")
        self._warming: asyncio.Future[bool] | None = None

    async def handle(self, request: web.Request) -> web.Response:
        address = client_address(request.headers, request.remote, trust_proxy=self.trust_proxy)
        bucket = self.limiter.bucket(network_key(address) if address else "unknown")
        if not bucket.take():
            raise _too_many("too many QR codes asked for", bucket.retry_after_s())
        if request.content_length is not None and request.content_length > MAX_QR_BODY:
            raise web.HTTPRequestEntityTooLarge(
                max_size=MAX_QR_BODY, actual_size=request.content_length,
                text=json.dumps({"error": "the request body is too large",
                                 "hint": f"{_HINT} (at most {MAX_QR_BYTES} bytes of text)"}),
                content_type="application/json",
            )  # fmt: skip
        try:
            # Within the bound checked above (a chunked body is cut there and fails to parse).
            text = parse_text(await request.content.read(MAX_QR_BODY))
        except BadBody as exc:
            raise _refusal(web.HTTPBadRequest, exc.message, exc.hint) from None
        try:
            await self.admission.acquire()
        except DataBusy as exc:
            raise _too_many(
                f"the server is drawing {QR_AT_ONCE + QR_WAITING} QR codes already",
                exc.retry_after_s,
            ) from None
        try:
            svg = await self.worker.run(draw, text)
        except WorkerDied:
            raise _refusal(
                web.HTTPServiceUnavailable, "the QR code worker stopped while it drew this code",
                "retry in 1 s: the next request starts a new worker", {"Retry-After": "1"},
            ) from None  # fmt: skip
        finally:
            self.admission.release()
        return web.Response(
            body=svg, content_type="image/svg+xml", headers={"Cache-Control": "no-store"}
        )

    def start(self) -> None:
        """Start the worker process now, in the background (spawning it and importing segno
        takes ~0.5 s of a core): the first invite, or a burst, finds it ready."""
        self._warming = asyncio.ensure_future(self.worker.run(_ready))

    async def close(self) -> None:
        if self._warming is not None:
            self._warming.cancel()
            await asyncio.gather(self._warming, return_exceptions=True)
        self.worker.close()


def _too_many(message: str, retry_after_s: float) -> web.HTTPError:
    retry = max(1, math.ceil(retry_after_s))
    return _refusal(
        web.HTTPTooManyRequests, message, f"retry in {retry} s", {"Retry-After": str(retry)}
    )


def _refusal(
    kind: type[web.HTTPError], message: str, hint: str, headers: dict[str, str] | None = None
) -> web.HTTPError:
    return kind(
        text=json.dumps({"error": message, "hint": hint}),
        content_type="application/json",
        headers=headers,
    )
