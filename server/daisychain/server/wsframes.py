"""Client WebSocket frames must be masked (RFC 6455 5.1): "The server MUST close the connection
upon receiving a frame that is not masked ... with a status code of 1002 (protocol error)".
aiohttp's server-side reader (C and pure Python alike) unmasks a frame when its mask bit is set
and accepts it as it is when not, so the check is ours.

``MaskTracker`` is the check, without any I/O: it follows the frame headers in the bytes a
connection receives, however they are cut into chunks, and says where the first unmasked frame
begins. ``MaskCheckedWebSocketResponse`` puts it in front of aiohttp's reader on the ``/ws``
connection; an unmasked frame then takes aiohttp's own path for a protocol error (the reader's
queue raises ``WebSocketError(1002)``, ``receive`` answers with a close frame carrying that code
and drops the socket), with our reason added to the close frame.

aiohttp has no public seam between the socket and its WebSocket reader, so
``MaskCheckedWebSocketResponse`` uses private names, which is why pyproject.toml pins aiohttp to
the releases this was verified on: ``WebSocketResponse._post_start(request, protocol, writer)``,
called by ``prepare`` once the 101 is written, which makes ``self._reader`` (the queue, with
``set_exception``) and installs the reader with ``request.protocol.set_parser``; and the
connection handler's ``_message_tail`` (the bytes that came after the upgrade request, fed to the
reader by ``set_parser``) and ``_payload_parser`` (what ``data_received`` feeds: ``feed_data``
answering ``(eof, tail)``, ``feed_eof`` at connection loss). The test
tests/server/test_aiohttp_private_api.py checks each of them on the installed aiohttp, and that
an unmasked frame still closes with 1002.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import WSCloseCode, web
from aiohttp.http import WebSocketError

UNMASKED_REASON = "client frames must be masked"

_MASK_BIT = 0x80  # of a frame's second byte
_LENGTH_BITS = 0x7F  # of a frame's second byte: the length, or 126/127 for a 16/64-bit one
_EXTRA_LENGTH = {126: 2, 127: 8}


class MaskTracker:
    """Follows the frames of one client stream, header by header, skipping each payload.

    Feed it every byte the connection receives, in order, in chunks of any size. A header is
    2 bytes, then a 16-bit (length 126) or 64-bit (length 127) length, then the 4-byte masking
    key when the mask bit (0x80 of byte 2) is set; the payload is skipped without being looked at.
    Costs a few operations per frame, whatever the payload size.
    """

    __slots__ = ("_head", "_skip", "unmasked")

    def __init__(self) -> None:
        self._head = bytearray()  # the current frame's header bytes so far (at most 14)
        self._skip = 0  # payload bytes of the current frame still to come
        self.unmasked = False  # an unmasked frame was seen: nothing after it is followed

    def feed(self, data: bytes | bytearray | memoryview) -> int | None:
        """Follow ``data``. None: every frame so far is masked (or not yet known to be not).
        Else the offset in ``data`` where the first unmasked frame begins: 0 when it began in an
        earlier chunk, and for every chunk after the one that showed it."""
        if self.unmasked:
            return 0
        head = self._head
        pos, end = 0, len(data)
        while pos < end:
            if self._skip:
                step = min(self._skip, end - pos)
                self._skip -= step
                pos += step
                continue
            if len(head) < 2:
                start = pos - len(head)  # negative: the frame began in an earlier chunk
                take = min(2 - len(head), end - pos)
                head += data[pos : pos + take]
                pos += take
                if len(head) < 2:
                    break
                if not head[1] & _MASK_BIT:
                    self.unmasked = True
                    head.clear()
                    return max(start, 0)
            length = head[1] & _LENGTH_BITS
            extra = _EXTRA_LENGTH.get(length, 0)
            size = 2 + extra + 4
            take = min(size - len(head), end - pos)
            head += data[pos : pos + take]
            pos += take
            if len(head) < size:
                break
            self._skip = int.from_bytes(head[2 : 2 + extra], "big") if extra else length
            head.clear()
        return None


class MaskGuard:
    """Stands where aiohttp's protocol keeps its WebSocket parser (``feed_data``, ``feed_eof``)
    and hands it the bytes up to the first unmasked frame, none from there on."""

    __slots__ = ("_on_unmasked", "_parser", "_queue", "_tracker")

    def __init__(self, parser: Any, queue: Any, on_unmasked: Callable[[], None]) -> None:
        self._parser = parser
        self._queue = queue  # the WebSocketDataQueue ``receive`` reads
        self._on_unmasked = on_unmasked
        self._tracker = MaskTracker()

    def feed_data(self, data: bytes | bytearray | memoryview) -> tuple[bool, bytes]:
        if self._tracker.unmasked:
            return True, b""
        at = self._tracker.feed(data)
        if at is None:
            result: tuple[bool, bytes] = self._parser.feed_data(data)
            return result
        if at:
            self._parser.feed_data(data[:at])  # the frames before it are delivered as usual
        # What aiohttp's reader does on a protocol error: the queue raises it after the messages
        # already queued, and (True, ...) makes the protocol stop reading.
        self._queue.set_exception(WebSocketError(WSCloseCode.PROTOCOL_ERROR, UNMASKED_REASON))
        self._on_unmasked()
        return True, b""

    def feed_eof(self) -> None:
        self._parser.feed_eof()


class MaskCheckedWebSocketResponse(web.WebSocketResponse):
    """A ``WebSocketResponse`` that closes with 1002 on the first unmasked client frame, and
    calls ``on_unmasked`` (once) when it does."""

    def __init__(self, *, on_unmasked: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_unmasked = on_unmasked
        self._unmasked = False

    def _post_start(self, request: web.BaseRequest, protocol: str | None, writer: Any) -> None:
        # The seam: aiohttp's ``_post_start`` makes the reader and installs it on the protocol
        # with ``set_parser``, which at once feeds it the bytes that came with the upgrade
        # request. We hold those back, let aiohttp install its reader, put the guard in its
        # place, then feed them through the guard. All synchronous: no byte can arrive between.
        # Whichever reader aiohttp picked (C or Python), the guard only calls its feed methods.
        handler = request.protocol
        tail, handler._message_tail = handler._message_tail, b""
        super()._post_start(request, protocol, writer)
        guard = MaskGuard(handler._payload_parser, self._reader, self._unmasked_frame)
        handler._payload_parser = guard
        if tail:
            guard.feed_data(tail)

    def _unmasked_frame(self) -> None:
        self._unmasked = True
        self._on_unmasked()

    async def close(
        self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True
    ) -> bool:
        # ``receive`` closes with the error's code only; the reason tells the client why.
        if self._unmasked and code == WSCloseCode.PROTOCOL_ERROR and not message:
            message = UNMASKED_REASON.encode()
        return await super().close(code=code, message=message, drain=drain)
