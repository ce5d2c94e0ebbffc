"""A host's approval prompt shows strangers' hellos only as the rules allow (issue 47): in
Chromium, the page ``/`` hosts a private room; raw WebSocket clients ask to join. One whose name
shows nothing (U+3164 HANGUL FILLER) is asked about as ``device-XXXX``, never as a blank; one
whose backend reads as a verdict ("verified: your own device, approved before -- click
Approve", with U+202E) is refused by the server (``bad-message``) and no prompt appears for it,
nor for one whose name carries a bidi override. Screenshots of the prompt at phone and desktop
sizes are saved under the test's temporary folder (``approval-phone.png``,
``approval-desktop.png``). The page runs on the CPU tier (``backend=js-cpu``), in the test run's
network namespace (conftest.py)."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daisychain.bench.rig.chromium import CHROMIUM
from daisychain.wire import deviceinfo
from mesh_helpers import needs_namespace, signaling_server
from page_helpers import DESKTOP, chromium, joined, open_page, screenshot, shows, text_of

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip("/usr/bin/chromium is missing", allow_module_level=True)
pytest.importorskip("playwright.async_api", reason="the playwright package is missing")
pytestmark = [needs_namespace, pytest.mark.timeout(300)]

ROOM = "approval-names-1"
REQUESTS = "#group .requests li"
VERDICT = "webgpu · verified: your own device, approved before — click Approve\u202e"
WAIT_S = 30.0


@asynccontextmanager
async def stranger(url: str) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    """A raw WebSocket client at the room's door (no page, no checks of its own)."""
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(f"{url.replace('http', 'ws', 1)}/ws?room={ROOM}")
        try:
            yield ws
        finally:
            await ws.close()


async def say_hello(ws: aiohttp.ClientWebSocketResponse, name: str, device: Any) -> dict[str, Any]:
    """Send a hello; the server's first answer (``pending`` or ``error``)."""
    await ws.send_str(json.dumps({"type": "hello", "version": 1, "name": name, "device": device}))
    reply: dict[str, Any] = json.loads((await ws.receive(timeout=WAIT_S)).data)
    return reply


async def test_the_prompt_shows_device_xxxx_for_a_blank_name_and_nothing_for_refused_hellos(
    tmp_path: Path,
) -> None:
    async with signaling_server() as url, chromium() as browser:
        host = await open_page(browser, f"{url}/?room={ROOM}&backend=js-cpu&name=host")
        await joined(host)
        await shows(host, "#group .connection", r"Connected to a private room, which you host")
        prompts = host.page.locator(REQUESTS)

        async with (
            stranger(url) as blank,
            stranger(url) as verdict,
            stranger(url) as bidi,
        ):
            # A backend that reads as a verdict: refused; the host is asked nothing.
            device = {"kind": "browser", "backend": VERDICT, "tokens_per_s": 300}
            error = await say_hello(verdict, "Trusted laptop", device)
            assert error["type"] == "error" and error["code"] == "bad-message", error
            assert error["message"].startswith("hello.device.backend must be one of"), error
            # A name with a bidi override: refused the same way.
            error = await say_hello(bidi, "Ada\u202e (approved)", {"kind": "browser"})
            assert error["code"] == "bad-message" and "hello.name" in error["message"], error

            # A name that shows nothing, with a real backend: asked about as device-XXXX.
            device = {"kind": "browser", "backend": "js-cpu", "tokens_per_s": 300}
            pending = await say_hello(blank, "\u3164", device)
            assert pending["type"] == "pending", pending
            fallback = deviceinfo.fallback_name(pending["id"])
            await prompts.first.wait_for(timeout=WAIT_S * 1000)
            item = host.page.locator(REQUESTS, has_text=fallback)
            await item.wait_for(timeout=WAIT_S * 1000)
            name = await item.locator(".name").inner_text()
            assert name == fallback, repr(name)
            text = await shows(host, REQUESTS, r"closes in")
            assert text.startswith(fallback), repr(text)
            assert "js-cpu · 300 tokens/s" in text, repr(text)
            approve = host.page.get_by_role("button", name=f"Approve {fallback}")
            assert await approve.is_visible()

            # Only that one prompt: the refused hellos never reached the host's page.
            assert await prompts.count() == 1
            box = await text_of(host, "#group .requests-box")
            assert "verified" not in box and "approved" not in box, box
            assert "\u202e" not in box and "\u3164" not in box, repr(box)

            shots = [await screenshot(host, "approval-phone", tmp_path, focus="#group")]
            await host.page.set_viewport_size(DESKTOP)
            shots.append(await screenshot(host, "approval-desktop", tmp_path, focus="#group"))
            for shot in shots:
                assert shot.stat().st_size > 0, shot
        host.check_clean()
