"""Helpers for the server tests: the app on a loopback port, and a WebSocket peer that reads
messages in order with bounded waits.

Ordering barrier: the server handles one connection's frames in order and queues every message
to a client in the order its state changed, so after ``await peer.barrier()`` (a ping answered by
the very next message being its pong) nothing else was pending for that peer at that moment.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import ClientWebSocketResponse, WSMsgType, web
from aiohttp.test_utils import TestClient, TestServer

from daisychain.server.app import create_app
from daisychain.server.config import DataConfig, ServerConfig, SignalingLimits

FALLBACK_TEXT = "Built-in corpus line one.\nBuilt-in corpus line two.\n" * 200
WAIT_S = 5.0


class ByteTokenizer:
    """Stand-in tokenizer: one token per UTF-8 byte."""

    sha256 = "0" * 64
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


def config(**changes: Any) -> ServerConfig:
    """A test config: offline data unless given, production limits unless changed."""
    signaling = changes.pop("signaling", SignalingLimits())
    data = changes.pop("data", replace(DataConfig(), offline=True))
    return replace(ServerConfig(), signaling=signaling, data=data, **changes)


@asynccontextmanager
async def serve(
    cfg: ServerConfig | None = None,
    *,
    fallback_text: Callable[[], str] = lambda: FALLBACK_TEXT,
) -> AsyncIterator[TestClient[Any, Any]]:
    app = create_app(cfg or config(), fallback_text=fallback_text, tokenizer=ByteTokenizer)
    async with TestClient(TestServer(app)) as client:
        yield client


class WsPeer:
    def __init__(self, ws: ClientWebSocketResponse) -> None:
        self.ws = ws
        self.id: str | None = None
        self._nonce = 0

    async def send(self, obj: Any) -> None:
        await self.ws.send_str(json.dumps(obj))

    async def recv(self) -> dict[str, Any]:
        msg = await self.ws.receive(timeout=WAIT_S)
        assert msg.type is WSMsgType.TEXT, f"expected a text message, got {msg.type} {msg.data!r}"
        data: dict[str, Any] = json.loads(msg.data)
        return data

    async def expect(self, kind: str) -> dict[str, Any]:
        message = await self.recv()
        assert message["type"] == kind, f"expected {kind}, got {message}"
        return message

    async def expect_error(self, code: str) -> dict[str, Any]:
        message = await self.expect("error")
        assert message["code"] == code, message
        assert message["hint"], "every error carries a hint"
        return message

    async def expect_close(self) -> int:
        """Skip to the close frame; return its code."""
        for _ in range(10_000):
            msg = await self.ws.receive(timeout=WAIT_S)
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED):
                assert self.ws.close_code is not None
                return self.ws.close_code
        raise AssertionError("no close frame")

    async def barrier(self) -> None:
        """Assert nothing is queued for this peer: the next message is our pong."""
        self._nonce += 1
        await self.send({"type": "ping", "nonce": self._nonce})
        message = await self.recv()
        assert message == {"type": "pong", "nonce": self._nonce}, f"unexpected {message}"

    async def close(self) -> None:
        await self.ws.close()


async def connect(
    client: TestClient[Any, Any], *, room: str | None = None, xff: str | None = None
) -> WsPeer:
    path = "/ws" if room is None else f"/ws?room={room}"
    headers = {"X-Forwarded-For": xff} if xff else {}
    return WsPeer(await client.ws_connect(path, headers=headers))


async def join(
    client: TestClient[Any, Any],
    name: str,
    *,
    room: str | None = None,
    xff: str | None = None,
    expect: str = "welcome",
) -> tuple[WsPeer, dict[str, Any]]:
    """Connect, say hello, and return the peer with its first reply (welcome or pending)."""
    peer = await connect(client, room=room, xff=xff)
    await peer.send({"type": "hello", "version": 1, "name": name, "device": {"kind": "test"}})
    reply = await peer.expect(expect)
    peer.id = reply.get("id")
    return peer, reply


def make_tree(root: Path, files: dict[str, bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


class AppServer:
    """The real DaisyChain app on 127.0.0.1 at a fixed port, so a test can stop and restart it."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        self.runner = web.AppRunner(create_app(config(), tokenizer=ByteTokenizer))
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
