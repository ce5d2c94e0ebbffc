"""A room's host is told, in the page, of join requests the server refused because the waiting
list was full (issue 47, item 7: ``join-requests-refused``; static/js/page/group.js).

One Chromium tab hosts a private room whose list holds one request (``max_pending=1``); plain
WebSocket clients ask to join from loopback: the first waits (the tab shows its request), the
next ones are refused ``room-busy``, and the tab says how many, in words, under the requests.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest

from daisychain.bench.rig.chromium import CHROMIUM
from daisychain.server.config import SignalingLimits
from mesh_helpers import needs_namespace, signaling_server
from page_helpers import chromium, joined, open_page, shows

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip("/usr/bin/chromium is missing", allow_module_level=True)
pytest.importorskip("playwright.async_api", reason="the playwright package is missing")
pytestmark = [needs_namespace, pytest.mark.timeout(300)]

QUERY = "backend=js-cpu"
REFUSED = "#group .refused-requests"


async def ask(
    session: aiohttp.ClientSession, url: str, name: str, held: list[aiohttp.ClientWebSocketResponse]
) -> dict[str, object]:
    """One request to join, its socket kept in ``held`` (one nobody holds may be collected, and
    closed); the server's first answer (``pending`` or an ``error``)."""
    ws = await session.ws_connect(url)
    held.append(ws)
    await ws.send_json({"type": "hello", "version": 1, "name": name, "device": {}})
    reply: dict[str, object] = json.loads((await ws.receive(timeout=10)).data)
    return reply


async def test_the_host_page_says_how_many_requests_the_full_list_turned_away() -> None:
    limits = replace(SignalingLimits(), max_pending=1)
    async with (
        signaling_server(signaling=limits) as url,
        chromium() as browser,
        aiohttp.ClientSession() as session,
    ):
        host = await open_page(browser, f"{url}/?{QUERY}&name=host")
        await joined(host)
        await host.page.get_by_role("button", name="Private room").click()
        await host.page.wait_for_url("**room=*")
        await joined(host)
        await shows(host, "#group .connection", r"which you host")
        code = parse_qs(urlsplit(host.page.url).query)["room"][0]
        ws_url = f"{url.replace('http://', 'ws://')}/ws?room={code}"
        assert await host.page.locator(REFUSED).is_hidden(), "nothing refused yet: no line"
        held: list[aiohttp.ClientWebSocketResponse] = []

        assert (await ask(session, ws_url, "first", held))["type"] == "pending"
        await shows(host, "#group .requests", r"first")
        refused = await ask(session, ws_url, "second", held)
        assert refused["type"] == "error" and refused["code"] == "room-busy", refused
        text = await shows(host, REFUSED, r"^1 more join request was refused")
        assert "the waiting list was full" in text, text
        for name in ("third", "fourth"):
            assert (await ask(session, ws_url, name, held))["code"] == "room-busy"
        # Held back at most a second, then the room's count.
        await shows(host, REFUSED, r"^3 more join requests were refused", timeout=10)
        await shows(host, "#group .requests", r"first")
        host.check_clean()
