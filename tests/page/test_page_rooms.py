"""Private rooms through the page's UI (issue 11, Must-show 2): static/js/page/group.js.

Each tab is a Chromium page ``/`` in its own browser context, driven by its buttons and read by
its text, as a person would: a host makes a private room ("Private room"), the link is shown and
copied with its button; a second device opens the link and sees how long it has waited; the host
lets it in from the in-page prompt (with its countdown); a third is turned away and sees the
server's message and hint as sent (not a bare close code); a fourth is never answered and its
request times out (the server's ``join_timeout_s``, shortened here; ``--join-timeout`` in
production), the host's page keeping its standing when it answers too late; when the host's tab
closes, the server names the oldest member host (``host-changed``): that page says "host" and
lets in a new device, and every other member's page says who hosts now; when the server goes
away the page says when it tries again and which attempt it is, and comes back; a room the
server cannot make is a problem with its hint. The tabs run on the CPU tier
(``backend=js-cpu``: no timed step), in the test run's network namespace (conftest.py).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from daisychain.bench.rig.chromium import CHROMIUM
from daisychain.server.config import SignalingLimits
from mesh_helpers import needs_namespace, signaling_server
from page_helpers import Tab, chromium, joined, open_page, shows, text_of, until
from server_fixtures import AppServer

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip("/usr/bin/chromium is missing", allow_module_level=True)
pytest.importorskip("playwright.async_api", reason="the playwright package is missing")
pytestmark = [needs_namespace, pytest.mark.timeout(400)]

QUERY = "backend=js-cpu"
CONNECTION = "#group .connection"


def limits(join_timeout_s: float) -> SignalingLimits:
    return replace(SignalingLimits(), join_timeout_s=join_timeout_s)


async def make_room(browser: Any, url: str, name: str) -> tuple[Tab, str]:
    """A tab that makes a private room with its button; returns it and the shared link."""
    host = await open_page(browser, f"{url}/?{QUERY}&name={name}")
    await joined(host)
    await host.page.get_by_role("button", name="Private room").click()
    await host.page.wait_for_url("**room=*")
    await joined(host)
    await shows(host, CONNECTION, r"Connected to a private room, which you host")
    link = await host.page.get_by_label("Link to this private room").input_value()
    code = parse_qs(urlsplit(link).query)["room"][0]
    assert len(code) == 16, link
    return host, link


async def request_item(host: Tab, name: str) -> Any:
    item = host.page.locator("#group .requests li", has_text=name)
    await item.wait_for(timeout=30_000)
    return item


async def test_room_create_share_request_approve_deny_and_host_hand_off() -> None:
    async with signaling_server(signaling=limits(120.0)) as url, chromium() as browser:
        host, link = await make_room(browser, url, "host")
        # Share: the Copy button puts the link on the clipboard and says so.
        await host.page.get_by_role("button", name="Copy link").click()
        await shows(host, "#group .room .note", r"Copied")
        assert await host.page.evaluate("navigator.clipboard.readText()") == link

        # Request: the guest waits, and sees for how long (a live counter).
        guest = await open_page(browser, f"{link}&{QUERY}&name=guest")
        await shows(guest, CONNECTION, r"Waiting to join.*approve you\. Waited \d+ s so far")
        closes = r"\(the request closes after 2 min\)"
        await shows(guest, CONNECTION, r"Waited ([2-9]|\d\d) s so far " + closes)
        assert await guest.peer_id() == "", "a waiting device has no machine yet"
        item = await request_item(host, "guest")
        assert "closes in" in await item.inner_text()

        # Approve in the page: the guest is in, each page lists the other with its role.
        await host.page.get_by_role("button", name="Approve guest").click()
        await joined(guest)
        await shows(guest, CONNECTION, r"Connected to a private room\.")
        await shows(guest, "#group .members", r"host\s*host")  # the host's row: name, badge
        await shows(host, "#group .members", r"guest")
        await shows(host, "#group .closed-requests", r"guest was let in")
        assert await host.page.locator("#group .requests li").count() == 0

        # Deny: the third device sees the server's words and hint, not a close code.
        other = await open_page(browser, f"{link}&{QUERY}&name=other")
        await request_item(host, "other")
        await host.page.get_by_role("button", name="Deny other").click()
        text = await shows(other, CONNECTION, r"Not admitted")
        assert "the host of this room declined your request to join" in text, text
        assert "ask the host to approve you, then reconnect" in text, text
        await shows(other, "#problems", r"declined your request")
        assert "code 4403" not in await text_of(other, "#problems")
        await shows(host, "#group .closed-requests", r"other was turned away")

        # A third member, let in before the hand-off.
        third = await open_page(browser, f"{link}&{QUERY}&name=third")
        await request_item(host, "third")
        await host.page.get_by_role("button", name="Approve third").click()
        await joined(third)

        # Hand-off: the host's tab closes; the guest (the oldest member) says it hosts and can
        # let in a new device; the third member's page says who hosts now.
        await host.page.context.close()
        await shows(guest, CONNECTION, r"which you host", timeout=30)
        await shows(guest, "#group .closed-requests", r"this device hosts the room now")
        await shows(guest, "#group .members", r"guest \(this device\)\s*host")
        await shows(third, "#group .closed-requests", r"The host left: guest hosts the room now")
        await shows(third, "#group .members", r"guest\s*host")
        await shows(third, CONNECTION, r"Connected to a private room\.")
        late = await open_page(browser, f"{link}&{QUERY}&name=late")
        await request_item(guest, "late")
        await guest.page.get_by_role("button", name="Approve late").click()
        await joined(late)
        await shows(late, CONNECTION, r"Connected to a private room\.")
        await shows(late, "#group .members", r"guest\s*host")
        for tab in (guest, late, third, other):
            tab.check_clean()


async def test_a_request_nobody_answers_times_out_and_a_late_answer_changes_nothing() -> None:
    timeout_s = 4.0
    async with signaling_server(signaling=limits(timeout_s)) as url, chromium() as browser:
        host, link = await make_room(browser, url, "host")
        guest = await open_page(browser, f"{link}&{QUERY}&name=guest")
        await shows(guest, CONNECTION, r"the request closes after 4 s")
        item = await request_item(host, "guest")
        assert "closes in" in await item.inner_text()
        state = await guest.page.evaluate(
            "async () => (await import('/js/app.js')).app.mesh.signaling.state"
        )
        assert state == "pending"
        text = await shows(guest, CONNECTION, r"Not admitted", timeout=30)
        assert "the host did not answer within 4 s" in text, text
        assert "make sure the host has the room open" in text, text
        await shows(host, "#group .closed-requests", r"guest was not answered in time")
        assert await host.page.locator("#group .requests li").count() == 0
        assert "code 4408" not in await text_of(guest, "#problems")

        # A late answer (as a click that raced the timeout sends it): the server refuses it
        # with its hint; the host keeps its standing and its status line.
        status = await text_of(host, "#status")
        await host.page.evaluate(
            "async () => (await import('/js/app.js')).app.mesh.approve('no-such-request')"
        )
        await shows(host, "#problems", r"no pending join request")
        await shows(host, "#problems", r"it may have timed out or left")
        assert await text_of(host, "#status") == status
        await shows(host, CONNECTION, r"which you host")
        # The guest asks again with its button and waits anew.
        await guest.page.get_by_role("button", name="Ask again").click()
        await shows(guest, CONNECTION, r"Waiting to join")

        async def asked_again() -> bool:
            return await host.page.locator("#group .requests li").count() == 1

        await until(asked_again, 30, "the second request at the host")
        host.check_clean()
        guest.check_clean()


async def test_a_lost_server_shows_reconnecting_with_countdown_and_attempt() -> None:
    """The group panel says when the next try is and which attempt it is, and comes back."""
    server = AppServer()
    await server.start()
    try:
        async with chromium() as browser:
            tab = await open_page(browser, f"{server.url}/?{QUERY}&name=solo")
            first = await joined(tab)
            await server.stop()  # every socket closed (1001), nothing listens
            text = await shows(tab, CONNECTION, r"Reconnecting\. Next try in \d+ s, attempt [3-9]")
            # The reason of the latest close: the server's 1001, then each refused connect's 1006.
            assert re.search(r"the server closed the connection \(code 100[16]\)", text), text
            await shows(tab, "#problems", r"signaling lost")
            await shows(tab, "#status", r"The connection to the server was lost: reconnecting")
            await server.start()
            await shows(tab, CONNECTION, r"Connected to the group")

            async def new_id() -> bool:
                return (await tab.peer_id()) not in ("", first)

            await until(new_id, 60, "the page's new identity after the reconnect")
            await shows(tab, "#status", r"Back in the group")
            await shows(tab, "#lead .standing", r"No run yet")
            # Chromium logs each refused connect on the console itself; nothing else may show.
            refused = re.compile(r"WebSocket connection to 'ws://127\.0\.0\.1:\d+/ws' failed")
            tab.errors = [e for e in tab.errors if not refused.search(e)]
            tab.check_clean()
    finally:
        await server.stop()


async def test_a_room_the_server_cannot_make_is_shown_with_its_hint() -> None:
    """POST /api/rooms refused: the page stays where it is and shows the server's words."""
    async with signaling_server() as url, chromium() as browser:
        tab = await open_page(browser, f"{url}/?{QUERY}&name=solo")
        await joined(tab)
        body = '{"code": "busy", "message": "no rooms now", "hint": "try again in a minute"}'

        async def refuse(route: Any) -> None:
            await route.fulfill(status=503, content_type="application/json", body=body)

        await tab.page.route(f"{url}/api/rooms", refuse)
        button = tab.page.get_by_role("button", name="Private room")
        await button.click()
        text = await shows(tab, "#problems", r"could not make a room")
        assert "HTTP 503: no rooms now" in text and "try again in a minute" in text, text
        assert "room=" not in tab.page.url
        assert await button.is_enabled()
        tab.failed.clear()  # the planted 503
        tab.errors = [e for e in tab.errors if "503" not in e]
        tab.check_clean()
