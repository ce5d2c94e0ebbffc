"""RFC 6455 5.1: every client frame is masked, and "the server MUST close the connection upon
receiving a frame that is not masked ... with a status code of 1002 (protocol error)".

First ``wsframes.MaskTracker`` on its own (every length form, every chunk boundary), then the
real server on loopback over WebSockets opened by hand (aiohttp's client always masks), so the
test decides each byte on the wire."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os

import pytest
from aiohttp import WSCloseCode
from aiohttp.http import WebSocketError

from daisychain.server.wsframes import UNMASKED_REASON, MaskGuard, MaskTracker
from hostile_harness import raw_websocket, read_frame, text_frame
from server_fixtures import WAIT_S, join, serve

OP_TEXT, OP_CLOSE, OP_PING = 0x1, 0x8, 0x9
HELLO = json.dumps({"type": "hello", "version": 1, "name": "raw", "device": {"kind": "test"}})
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 1.3


def unmasked_frame(payload: bytes, opcode: int = OP_TEXT) -> bytes:
    """A final frame as a server would send it: mask bit clear, no masking key."""
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
    return head + payload


def masked_frame(payload: bytes, opcode: int = OP_TEXT) -> bytes:
    """A final client frame with a random masking key."""
    key = os.urandom(4)
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


# Every length form at its edges: 7-bit (0..125), 16-bit (126..65535), 64-bit (65536..).
LENGTHS = [0, 1, 125, 126, 127, 300, 65535, 65536, 70_000]
BAD = unmasked_frame(b'{"type":"hello"}')


def test_every_length_form_is_read_right() -> None:
    for n in LENGTHS:
        frame = masked_frame(b"\xa5" * n)
        form = frame[1] & 0x7F
        assert form == (n if n < 126 else 126 if n < 1 << 16 else 127), (n, form)
        tracker = MaskTracker()
        assert tracker.feed(frame) is None, n
        # In step after the frame: the next frame's first byte is read as a header.
        assert tracker.feed(BAD) == 0, n


def test_masked_frames_pass_split_at_every_byte_boundary() -> None:
    for n in LENGTHS:
        frame = memoryview(masked_frame(bytes(n)) + masked_frame(b"", OP_PING))
        for cut in range(len(frame) + 1):
            tracker = MaskTracker()
            assert tracker.feed(frame[:cut]) is None, (n, cut)
            assert tracker.feed(frame[cut:]) is None, (n, cut)
            assert tracker.feed(BAD) == 0, (n, cut)  # still in step


def test_a_masked_stream_fed_one_byte_at_a_time_passes() -> None:
    stream = b"".join(masked_frame(b"z" * n) for n in [*LENGTHS[:6], 3, 0, 126])
    tracker = MaskTracker()
    for i in range(len(stream)):
        assert tracker.feed(stream[i : i + 1]) is None, i
    assert not tracker.unmasked


def test_an_unmasked_frame_alone_is_reported_at_its_start() -> None:
    tracker = MaskTracker()
    assert tracker.feed(BAD) == 0
    assert tracker.unmasked
    # From then on nothing is followed: every later chunk lies past the bad frame.
    assert tracker.feed(masked_frame(b"ok")) == 0


def test_an_unmasked_frame_after_masked_ones_is_reported_at_every_split() -> None:
    before = masked_frame(b"a" * 10) + masked_frame(b"b" * 300) + masked_frame(b"", OP_PING)
    after = masked_frame(b"c" * 20)
    for bad in (BAD, unmasked_frame(b"x" * 200), unmasked_frame(b"y" * 70_000, OP_PING)):
        stream = memoryview(before + bad + after)
        start = len(before)
        tracker = MaskTracker()
        assert tracker.feed(stream) == start
        for cut in range(len(stream) + 1):
            tracker = MaskTracker()
            first = tracker.feed(stream[:cut])
            if cut >= start + 2:  # the mask bit (the frame's second byte) is in the first chunk
                assert first == start, (cut, first)
            else:
                assert first is None, (cut, first)
                assert tracker.feed(stream[cut:]) == max(start - cut, 0), cut
            assert tracker.unmasked


def test_an_unmasked_frame_is_reported_in_the_chunk_that_holds_its_mask_bit() -> None:
    good = masked_frame(b"1" * 5)
    chunks = [good[:3], good[3:] + BAD[:1], BAD[1:2], BAD[2:]]
    tracker = MaskTracker()
    assert [tracker.feed(c) for c in chunks] == [None, None, 0, 0]


class _FakeParser:
    def __init__(self) -> None:
        self.fed = b""
        self.eof = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.fed += bytes(data)
        return False, b""

    def feed_eof(self) -> None:
        self.eof = True


class _FakeQueue:
    def __init__(self) -> None:
        self.exc: BaseException | None = None

    def set_exception(self, exc: BaseException) -> None:
        self.exc = exc


def test_the_guard_hands_on_the_frames_before_the_unmasked_one_and_none_after() -> None:
    parser, queue, calls = _FakeParser(), _FakeQueue(), []
    guard = MaskGuard(parser, queue, lambda: calls.append(1))
    good, small = masked_frame(b"hello"), masked_frame(b"x")
    assert guard.feed_data(good[:4]) == (False, b"")
    assert guard.feed_data(good[4:] + small + BAD + good) == (True, b"")
    assert parser.fed == good + small
    assert isinstance(queue.exc, WebSocketError)
    assert queue.exc.code == WSCloseCode.PROTOCOL_ERROR == 1002
    assert str(queue.exc) == UNMASKED_REASON
    assert calls == [1]
    assert guard.feed_data(good) == (True, b"")  # nothing more reaches the parser
    assert parser.fed == good + small and calls == [1]
    guard.feed_eof()
    assert parser.eof


async def handshake(
    host: str, port: int, then: bytes = b""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A real HTTP/1.1 Upgrade with a fresh Sec-WebSocket-Key; ``then`` goes out in the same
    write as the request head, so it reaches the server together with the upgrade."""
    key = base64.b64encode(os.urandom(16)).decode()
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        f"GET /ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    writer.write(head.encode() + then)
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    assert answer.startswith(b"HTTP/1.1 101 "), answer
    accept = base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest())
    assert b"Sec-WebSocket-Accept: " + accept + b"\r\n" in answer, answer
    return reader, writer


async def next_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    return await asyncio.wait_for(read_frame(reader), WAIT_S)


async def expect_close_1002(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
    """The next frame is a close with 1002 and a reason, and the server then drops the socket
    (without waiting for our close frame). Returns the reason."""
    try:
        opcode, payload = await next_frame(reader)
        assert opcode == OP_CLOSE, (
            f"expected a close frame (opcode 8) with 1002, got opcode {opcode}: {payload[:120]!r}"
        )
        code = int.from_bytes(payload[:2], "big")
        assert code == 1002, f"close code {code} {payload[2:]!r}, expected 1002"
        reason = payload[2:].decode("utf-8")
        assert reason, "the close frame says why"
        rest = await asyncio.wait_for(reader.read(), WAIT_S)
        assert rest == b"", f"bytes after the close frame: {rest[:120]!r}"
        return reason
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def test_an_unmasked_hello_is_closed_with_1002_and_the_server_serves_the_next_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="daisychain.server")
    async with serve() as client:
        host, port = client.server.host, client.server.port
        assert host is not None and port is not None
        reader, writer = await raw_websocket(host, port)
        writer.write(unmasked_frame(HELLO.encode()))
        reason = await expect_close_1002(reader, writer)
        assert "mask" in reason, reason
        # The frame was never acted on: no member joined, and the next client is served.
        _bob, welcome = await join(client, "bob")
        assert welcome["members"] == []
        status = await (await client.get("/api/status")).json()
        assert status["peers"] == 1
    lines = [r.getMessage() for r in caplog.records if "unmasked" in r.getMessage()]
    assert len(lines) == 1, lines


async def test_an_unmasked_frame_that_arrives_with_the_upgrade_request_is_closed() -> None:
    async with serve() as client:
        host, port = client.server.host, client.server.port
        assert host is not None and port is not None
        reader, writer = await handshake(host, port, then=unmasked_frame(HELLO.encode()))
        await expect_close_1002(reader, writer)
        await join(client, "bob")


async def test_an_unmasked_frame_after_masked_ones_is_closed_even_split_byte_by_byte() -> None:
    async with serve() as client:
        host, port = client.server.host, client.server.port
        assert host is not None and port is not None
        reader, writer = await handshake(host, port)

        async def dribble(data: bytes) -> None:
            for i in range(len(data)):
                writer.write(data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(0.001)

        await dribble(text_frame(HELLO))
        opcode, payload = await next_frame(reader)
        assert opcode == OP_TEXT and json.loads(payload)["type"] == "welcome", payload
        # 200 bytes: the 16-bit length form, masked, one byte per write.
        pad = "x" * 160
        await dribble(text_frame(json.dumps({"type": "ping", "nonce": 1, "pad": pad})))
        opcode, payload = await next_frame(reader)
        assert json.loads(payload) == {"type": "pong", "nonce": 1}
        # The same unmasked: its mask bit (byte 2) comes in a write of its own. Nothing after
        # it: the server closes at that byte, and bytes sent to a closed socket reset it.
        frame = unmasked_frame(json.dumps({"type": "ping", "nonce": 2, "pad": pad}).encode())
        assert frame[1] == 126
        await dribble(frame[:2])
        await expect_close_1002(reader, writer)


async def test_an_unmasked_control_frame_is_closed_too() -> None:
    async with serve() as client:
        host, port = client.server.host, client.server.port
        assert host is not None and port is not None
        reader, writer = await handshake(host, port)
        writer.write(unmasked_frame(b"are you there", OP_PING))
        await expect_close_1002(reader, writer)


async def test_masked_frames_on_a_hand_made_connection_are_served_as_before() -> None:
    async with serve() as client:
        host, port = client.server.host, client.server.port
        assert host is not None and port is not None
        # The hello arrives with the upgrade request, masked with a real key.
        key = os.urandom(4)
        data = HELLO.encode()
        masked = bytes(b ^ key[i % 4] for i, b in enumerate(data))
        reader, writer = await handshake(
            host, port, then=bytes([0x81, 0x80 | len(data)]) + key + masked
        )
        try:
            opcode, payload = await next_frame(reader)
            assert opcode == OP_TEXT and json.loads(payload)["type"] == "welcome", payload
            writer.write(text_frame(json.dumps({"type": "ping", "nonce": 7})))
            opcode, payload = await next_frame(reader)
            assert json.loads(payload) == {"type": "pong", "nonce": 7}
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def test_unmasked_frames_from_one_network_log_a_few_lines_then_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="daisychain.server")
    async with serve() as client:
        host, port = client.server.host, client.server.port
        assert host is not None and port is not None
        for _ in range(12):
            reader, writer = await raw_websocket(host, port)
            writer.write(unmasked_frame(HELLO.encode()))
            await expect_close_1002(reader, writer)
    lines = [r.getMessage() for r in caplog.records if "unmasked" in r.getMessage()]
    assert 1 <= len(lines) <= 5, lines
