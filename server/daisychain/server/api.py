"""HTTP endpoints other than static files and ``/ws``: ``/data``, ``/api/rooms``, ``/api/status``
and ``/healthz`` (``/api/qr`` is qr.py's).

``/data`` query parameters (all optional, all bounded; a bad one is a 400 with a hint):

* ``format``: ``text`` (default) or ``tokens``;
* ``max_chars`` (text): 1..1 000 000, default 100 000 characters in total;
* ``max_tokens`` (tokens): 1..131 072, default 16 384;
* ``encoding`` (tokens): ``binary`` (default; little-endian uint16 if the vocabulary fits, else
  uint32, named in ``X-DaisyChain-Token-Dtype``) or ``json``;
* ``seed``: 0..2^63-1; the same seed picks the same slice while the source stays the same.

The **addressed form** (docs/SERVER.md, "Addressed windows") is selected by ``split``:
``GET /data?split=train&revision=REV&seed=S&step=N&rank=R&max_chars=C`` answers the window of
text a training run's address names (``daisychain.fineweb``) as JSON, always from the server's
dataset (FineWeb-Edu, or its ``--dataset``) at revision ``REV`` (which must be this server's),
never from the built-in corpus: a window this server cannot read is a 503 with a hint (and
``Retry-After`` when a retry may help). ``split`` is ``train`` or ``validation`` (the held-out
row group); ``seed``, ``step`` 0..2^32-1, ``rank`` 0..4095 and ``max_chars`` 1..1 000 000 are
required. The peer tokenizes the text itself.

Integers are plain ASCII digits (``[0-9]+``, at most 19 of them): Python's ``int()`` would also
take ``1_000``, `` 5``, ``+5`` and other scripts' digits (``٥``), forms no client means and a cache
or log would read differently. Each parameter may appear once. Requests are limited per client
network (``grouping.network_key``: an IPv4 address, an IPv6 /64).

At most ``DataConfig.requests_at_once`` ``/data`` requests are served at once, from sampling
to the body handed to the socket, and ``requests_waiting`` more wait in line; one more is a
503 with ``Retry-After`` and a hint at once (``datasource.Admission``). Parquet decode and JSON
bodies run in the data worker process (``dataworker``), never on the loop nor under the server's
interpreter lock; a worker that dies is a 503 with a hint for the request it held, and the next
request starts a new one.

Every ``/data`` response names its source (``fineweb``, ``dataset`` or ``builtin``) in the
``X-DaisyChain-Source`` header, and in the ``source`` field of JSON bodies.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

from aiohttp import web

from daisychain import fineweb
from daisychain.server.access import Access
from daisychain.server.datasource import (
    DataBusy,
    DataService,
    DataUnavailable,
    TextSample,
    describe,
)
from daisychain.server.grouping import client_address, network_key
from daisychain.server.ratelimit import KeyedLimiter
from daisychain.server.signaling import Signaling
from daisychain.server.workpool import WorkerDied
from daisychain.wire.signaling import PROTOCOL_VERSION

log = logging.getLogger(__name__)

MAX_CHARS_LIMIT = 1_000_000
DEFAULT_MAX_CHARS = 100_000
MAX_TOKENS_LIMIT = 131_072
DEFAULT_MAX_TOKENS = 16_384
# Text budget per requested token: BPE tokens of English average ~4 characters; 8 leaves margin
# so the token budget, not the text, is what runs out.
CHARS_PER_TOKEN_BUDGET = 8
DOCUMENT_SEPARATOR = "\n\n"
MAX_RANK = 4095  # ranks are positions in a roster (at most 64 today); room to grow, still small
ADDRESS_PARAMS = ("revision", "seed", "step", "rank", "max_chars")
# 2^63 - 1 has 19 digits; more is out of every bound here, so int() never sees a huge string.
_DIGITS_RE = re.compile(r"[0-9]{1,19}")
_TYPECODES = {"uint16": "H", "uint32": "I"}
SEND_PIECE_BYTES = 64 * 1024  # _send's pieces


class BadRequest(web.HTTPBadRequest):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(
            text=_json({"error": message, "hint": hint}), content_type="application/json"
        )


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


@asynccontextmanager
async def _slot(service: DataService) -> AsyncIterator[None]:
    """One of the ``/data`` slots (``datasource.Admission``), or a 503 at once if the line is
    full; a worker process that died under the request is a 503 too (the next one starts a new
    worker)."""
    try:
        await service.admission.acquire()
    except DataBusy as exc:
        retry = max(1, round(exc.retry_after_s))
        raise web.HTTPServiceUnavailable(
            text=_json(
                {
                    "error": f"{exc} (this server serves {service.admission.at_once} at once)",
                    "hint": f"retry in {retry} s",
                }
            ),
            content_type="application/json",
            headers={"Retry-After": str(retry), "Cache-Control": "no-store"},
        ) from None
    try:
        yield
    except WorkerDied as exc:
        log.warning("a /data worker process died: %s; the next request starts a new one", exc)
        raise web.HTTPServiceUnavailable(
            text=_json(
                {
                    "error": "the /data worker process stopped while it built this response",
                    "hint": "retry in 1 s: the next request starts a new worker",
                }
            ),
            content_type="application/json",
            headers={"Retry-After": "1", "Cache-Control": "no-store"},
        ) from None
    finally:
        service.admission.release()


async def _send(
    request: web.Request, body: bytes, content_type: str, headers: dict[str, str]
) -> web.StreamResponse:
    """Write the whole response now, inside the request's slot (so only the requests in their
    slots have bodies to write at once), in pieces of ``SEND_PIECE_BYTES`` with a turn of the
    loop between them: on loopback one ``send`` of 1 MB also runs the receiver's TCP path and
    took 12 ms and more here, during which nothing else ran. aiohttp finds the response sent.

    A HEAD gets the same head (``Content-Length`` included, RFC 9110 9.3.2) and no body:
    aiohttp leaves that to whoever writes a ``StreamResponse``, and a proxy that reuses the
    connection would read the body as the start of the next response."""
    response = web.StreamResponse(headers=headers)
    response.content_type = content_type
    response.content_length = len(body)
    await response.prepare(request)
    if request.method == "HEAD":
        await response.write_eof()
        return response
    view = memoryview(body)
    for at in range(0, len(body), SEND_PIECE_BYTES):
        if at:
            await asyncio.sleep(0)
        await response.write(view[at : at + SEND_PIECE_BYTES])
    await response.write_eof()
    return response


def _param(request: web.Request, name: str) -> str | None:
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise BadRequest(f"{name} is given {len(values)} times", f"give {name} once")
    return values[0] if values else None


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = _param(request, name)
    if raw is None:
        return default
    if not _DIGITS_RE.fullmatch(raw):
        raise BadRequest(
            f"{name} must be a whole number written with the digits 0-9, got {raw[:40]!r}",
            f"use {name}={default} (no sign, spaces, underscores or other digits)",
        )
    value = int(raw)
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}", f"use {name}={default}")
    return value


def _choice_param(request: web.Request, name: str, choices: tuple[str, ...]) -> str:
    value = _param(request, name)
    if value is None:
        return choices[0]
    if value not in choices:
        raise BadRequest(f"{name} must be one of {', '.join(choices)}", f"use {name}={choices[0]}")
    return value


class DataEndpoint:
    def __init__(
        self,
        service: Callable[[], DataService],
        *,
        trust_proxy: bool,
        requests_per_s: float,
        burst: int,
    ) -> None:
        self._service = service
        self.trust_proxy = trust_proxy
        # Each request may cost an upstream GET, and the upstream rate-limits this server's
        # address as a whole: bound what one client can ask for.
        self.limiter = KeyedLimiter(requests_per_s, burst)
        # The addressed form has its own budget (DataConfig.window_requests_per_s says why),
        # made on its first request from the service's config.
        self.window_limiter: KeyedLimiter | None = None

    def _limiter(self, addressed: bool) -> KeyedLimiter:
        if not addressed:
            return self.limiter
        if self.window_limiter is None:
            config = self._service().config
            self.window_limiter = KeyedLimiter(config.window_requests_per_s, config.window_burst)
        return self.window_limiter

    async def handle(self, request: web.Request) -> web.StreamResponse:
        address = client_address(request.headers, request.remote, trust_proxy=self.trust_proxy)
        # Per network, as groups are: one IPv6 host picks any of 2^64 addresses in its /64.
        limiter = self._limiter("split" in request.query)
        bucket = limiter.bucket(network_key(address) if address else "unknown")
        if not bucket.take():
            retry = max(1, round(bucket.retry_after_s()))
            raise web.HTTPTooManyRequests(
                text=_json({"error": "too many /data requests", "hint": f"retry in {retry} s"}),
                content_type="application/json",
                headers={"Retry-After": str(retry)},
            )
        if _param(request, "split") is not None:
            return await self._window(request)
        fmt = _choice_param(request, "format", ("text", "tokens"))
        seed_param = _param(request, "seed")
        seed = _int_param(request, "seed", 0, 0, 2**63 - 1) if seed_param is not None else None
        # An explicit generator per request: seeded when asked, otherwise from the OS.
        rng = random.Random(seed if seed is not None else secrets.randbits(64))
        service = self._service()
        if fmt == "text":
            max_chars = _int_param(request, "max_chars", DEFAULT_MAX_CHARS, 1, MAX_CHARS_LIMIT)
            async with _slot(service):
                sample, data = await service.text_body(rng, max_chars)
                return await _send(request, data, "application/json", _headers(sample))
        max_tokens = _int_param(request, "max_tokens", DEFAULT_MAX_TOKENS, 1, MAX_TOKENS_LIMIT)
        encoding = _choice_param(request, "encoding", ("binary", "json"))
        try:
            tokenizer = await service.tokenizer()
        except (ImportError, OSError, ValueError) as exc:  # ValueError: a file we cannot match
            raise web.HTTPServiceUnavailable(
                text=_json(
                    {
                        "error": f"no tokenizer available: {exc}",
                        "hint": "use format=text, or install daisychain with luts/ present",
                    }
                ),
                content_type="application/json",
            ) from None
        dtype = "uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32"
        async with _slot(service):
            async with service.token_slots:  # bounds the text and ids held at once
                budget = max_tokens * CHARS_PER_TOKEN_BUDGET
                sample, text = await service.text(rng, budget, DOCUMENT_SEPARATOR)
                # Tokenizing ~1 MB of text takes long enough to stall every socket: not on the
                # loop, and with the interpreter lock released (tokenizer/fast.py).
                packed = await service.encode(tokenizer, text, max_tokens, _TYPECODES[dtype])
                del text
            headers = _headers(sample) | {
                "X-DaisyChain-Token-Dtype": dtype,
                "X-DaisyChain-Tokenizer-Sha256": tokenizer.sha256,
            }
            if encoding == "json":
                body = describe(sample) | {
                    "tokens": packed,  # an array: pickled as its bytes, a list in the worker
                    "dtype": dtype,
                    "tokenizer_sha256": tokenizer.sha256,
                }
                data = await service.json(body)
                del body
                return await _send(request, data, "application/json", headers)
            assert packed.itemsize == (2 if dtype == "uint16" else 4), "unexpected C int width"
            if sys.byteorder != "little":
                packed.byteswap()
            return await _send(request, packed.tobytes(), "application/octet-stream", headers)

    async def _window(self, request: web.Request) -> web.StreamResponse:
        """The addressed form: one window of a run's text, or a 503 that says why."""
        split = cast(fineweb.Split, _choice_param(request, "split", fineweb.SPLITS))
        missing = [name for name in ADDRESS_PARAMS if _param(request, name) is None]
        if missing:
            raise BadRequest(
                f"an addressed /data request needs {', '.join(missing)}",
                "give split, revision, seed, step, rank and max_chars (docs/SERVER.md)",
            )
        if _param(request, "format") not in (None, "text"):
            raise BadRequest(
                "an addressed /data request answers text only",
                "drop format: the peer tokenizes the window with the shipped tokenizer",
            )
        revision = _param(request, "revision") or ""
        seed = _int_param(request, "seed", 0, 0, 2**32 - 1)
        step = _int_param(request, "step", 0, 0, 2**32 - 1)
        rank = _int_param(request, "rank", 0, 0, MAX_RANK)
        max_chars = _int_param(request, "max_chars", DEFAULT_MAX_CHARS, 1, MAX_CHARS_LIMIT)
        service = self._service()
        if revision != service.config.revision:
            raise web.HTTPConflict(
                text=_json({
                    "error": f"this server reads {service.config.label} revision "
                    f"{service.config.revision}, not {revision[:48]}",
                    "hint": "every peer of a run must use a server with the run's revision "
                    "(--data-revision, or --dataset REPO@REVISION)",
                }),
                content_type="application/json",
            )  # fmt: skip
        async with _slot(service):
            try:
                sample, data = await service.window(split, seed, step, rank, max_chars)
            except DataUnavailable as exc:
                headers = {"Cache-Control": "no-store"}
                if exc.retry_after_s is not None:
                    headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
                raise web.HTTPServiceUnavailable(
                    text=_json({"error": exc.message, "hint": exc.hint}),
                    content_type="application/json",
                    headers=headers,
                ) from None
            return await _send(request, data, "application/json", _headers(sample))


def _headers(sample: TextSample) -> dict[str, str]:
    headers = {"X-DaisyChain-Source": sample.source, "Cache-Control": "no-store"}
    if sample.shard is not None:
        headers["X-DaisyChain-Shard"] = sample.shard
        headers["X-DaisyChain-Row-Group"] = str(sample.row_group)
    return headers


async def create_room(request: web.Request) -> web.Response:
    """Mint an unguessable room code: 16 URL-safe characters, 96 bits from the OS."""
    code = secrets.token_urlsafe(12)
    return web.json_response({"code": code, "url": f"/?room={code}"}, status=201)


def status_handler(
    signaling: Signaling, data: Callable[[], DataService], access: Access, *, trust_proxy: bool
) -> Callable[[web.Request], Any]:
    async def status(request: web.Request) -> web.Response:
        # Counts only: no client addresses, names, ids or room codes. ``access`` names this
        # server's own addresses to a page on this machine only (access.py).
        stats = signaling.hub.stats()
        return web.json_response(
            {
                "protocol": PROTOCOL_VERSION,
                "peers": stats.peers,
                "groups": stats.groups,
                "rooms": stats.rooms,
                "pending": stats.pending,
                "data": data().status(),
                "access": access.describe(request, trust_proxy=trust_proxy),
            },
            headers={"Cache-Control": "no-store"},
        )

    return status


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n", headers={"Cache-Control": "no-store"})
