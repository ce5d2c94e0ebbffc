"""Invite links and the Group panel with many devices: a room that admits 20 devices by one link.

The host is a Chromium tab (``/`` on the CPU tier) that makes a private room and an invite link
for 20 devices with its own buttons; 20 headless peers (``python -m daisychain.peer --invite
LINK``, real processes) join with it and no click anywhere; the host's page counts them; the
21st peer is refused with the server's words; a link the host revokes with its button refuses
a tab that opens it, with the message and hint as sent. (The expired link is refused by the real
client in tests/p2p/test_p2p_invite.py, where the server's clock is injected.)

The panel at 64 devices: the page's own render functions (crowd.js, group.js) fed 64 entries;
the summary, the devices that need a look and the folded list are read back, and screenshots at
390x844 and 1280x800 are written (to the test's folder, and to docs/guide/ with
DAISYCHAIN_WRITE_GUIDE=1).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench.rig.chromium import CHROMIUM
from mesh_helpers import PeerProcess, needs_namespace, signaling_server
from page_helpers import (
    check_page,
    chromium,
    joined,
    new_tab,
    open_page,
    overflow,
    screenshot,
    shown_while_hidden,
    shows,
    until,
)

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip("/usr/bin/chromium is missing", allow_module_level=True)
pytest.importorskip("playwright.async_api", reason="the playwright package is missing")
pytestmark = [needs_namespace, pytest.mark.timeout(600)]

QUERY = "backend=js-cpu"
CONNECTION = "#group .connection"
DEVICES = 20
DESKTOP = {"width": 1280, "height": 800}


async def make_invite(host: Any, uses: int) -> str:
    """Make an invite link with the host page's form; returns the link it shows."""
    box = host.page.locator("#group .invite-links")
    await box.get_by_label("Devices it admits").fill(str(uses))
    await box.get_by_role("button", name="Make invite link").click()
    field = host.page.get_by_label("Invite link", exact=True)
    await field.wait_for(state="visible", timeout=30_000)
    link: str = await field.input_value()
    return link


async def test_the_qr_code_takes_no_space_until_the_server_drew_it() -> None:
    """The QR image is in the page, hidden, before the server's drawing arrives: it must not
    show as an empty box then (page.css gives .qr a display, which once beat `hidden`). The
    drawing is held back with a Playwright route and released after the look."""
    async with signaling_server() as url, chromium() as browser:
        held = asyncio.Event()
        release = asyncio.Event()

        async def hold(route: Any) -> None:
            held.set()
            await release.wait()
            await route.continue_()

        tab = await new_tab(browser)
        await tab.page.route("**/api/qr", hold)
        await tab.page.goto(f"{url}/?{QUERY}&name=host")
        await asyncio.wait_for(held.wait(), 60)
        qr = tab.page.locator("#group .invite img.qr")
        assert await qr.get_attribute("hidden") is not None
        assert not await qr.is_visible()
        assert await shown_while_hidden(tab) == []
        release.set()
        await qr.wait_for(state="visible", timeout=30_000)
        assert (await qr.get_attribute("alt") or "").startswith("QR code of http")
        await check_page(tab, "the QR code drawn")


async def test_twenty_headless_peers_join_by_invite_link_without_clicks(tmp_path: Path) -> None:
    async with signaling_server() as url, chromium() as browser:
        host = await open_page(browser, f"{url}/?{QUERY}&name=host")
        await joined(host)
        await host.page.get_by_role("button", name="Private room").click()
        await host.page.wait_for_url("**room=*")
        await joined(host)
        await shows(host, CONNECTION, r"which you host")
        link = await make_invite(host, DEVICES)
        assert "#invite=" in link and "?room=" in link, link
        await host.page.locator("#group .invite-link img.qr").wait_for(state="visible")
        await shows(host, "#group .invite-count", rf"Used 0 of {DEVICES} \({DEVICES} left\)\. "
                    r"Expires in (59 min|1 h)")  # fmt: skip
        await screenshot(host, "invite-link-390", tmp_path, focus="#group .invite-links")

        peers = [PeerProcess(url, f"p{n:02d}", "--invite", link) for n in range(DEVICES)]
        try:

            async def all_joined() -> bool:
                for peer in peers:
                    if peer.proc.poll() is not None:
                        raise AssertionError(f"{peer.name} exited: {peer.stderr()[-2000:]}")
                return all(peer.joined for peer in peers)

            await until(all_joined, 300, f"{DEVICES} peers to join by the invite link")
            await shows(host, "#group .invite-count", rf"Used {DEVICES} of {DEVICES}: used up")
            # No request ever reached the host: nothing to approve, nothing was clicked.
            assert await host.page.locator("#group .requests li").count() == 0
            await shows(host, "#group .crowd-summary", rf"{DEVICES + 1} devices: ")

            late = PeerProcess(url, "late", "--invite", link)
            try:
                assert await late.wait(120) == 1
                errors = [d for d in late.lines if d.get("event") == "error"]
                assert errors, late.stderr()
                assert "already admitted the 20 devices" in errors[0]["message"], errors
                assert "ask the host for a new invite link" in errors[0]["hint"], errors
            finally:
                late.close()
        finally:
            for peer in peers:
                peer.close()

        # A new link, revoked with its button: a tab that opens it is refused, with the
        # server's words and hint (not a close code), and asks nobody.
        second = await make_invite(host, 5)
        assert second != link
        await shows(host, "#group .invite-count", r"Used 0 of 5 \(5 left\)")
        await host.page.get_by_role("button", name="Revoke invite link").click()
        await shows(host, "#group .invite-count", r"Revoked: it admits no one now")
        guest_url = second.replace("#", f"&{QUERY}&name=guest#")
        guest = await open_page(browser, guest_url)
        text = await shows(guest, CONNECTION, r"Not admitted")
        assert "the host revoked this invite link" in text, text
        assert "ask the host for a new invite link" in text, text
        assert "code 4401" not in await guest.page.locator("#problems").inner_text()
        assert await host.page.locator("#group .requests li").count() == 0
        guest.check_clean()


def crowd_entries() -> list[dict[str, Any]]:
    """64 devices as the Group panel holds them: this one (host), 2 disconnected, 1 still
    connecting, three backends, speeds 100..6400 tokens/s with 4 not measured yet."""
    backends = ["webgpu-dp4a", "js-cpu", "numpy"]
    return [
        {
            "id": f"p{i:02d}",
            "name": "host (this device)" if i == 0 else f"laptop-{i:02d}",
            "backend": backends[i % 3],
            "tokensPerS": None if i % 16 == 5 else (64 - i) * 100,
            "channel": None
            if i == 0
            else "closed"
            if i in (7, 9)
            else "connecting"
            if i == 11
            else "open",
            "self": i == 0,
            "badges": ["host"] if i == 0 else [],
            "share": None,
        }
        for i in range(64)
    ]


RENDER = """async (entries) => {
  const { renderCrowd } = await import('/js/page/crowd.js');
  const { memberRow } = await import('/js/page/group.js');
  const { h } = await import('/js/page/dom.js');
  const box = document.querySelector('#group .members-box');
  renderCrowd(box, box.querySelector('ul.members'), entries, memberRow, h);
}"""


# The run's devices table (live.js) fed the same 64 devices: two of them with a differing hash.
RUN_TABLE = """async (entries) => {
  const { live } = await import('/js/page/live.js');
  const F = await import('/js/page/livefigures.js');
  document.querySelector('#live').classList.remove('idle'); // as in a run: the table is shown
  live.renderDeviceRows(entries.map((e, i) => {
    const problem = i === 7 || i === 9 ? 'hash differs' : null;
    return { id: e.id, name: e.name, backend: e.backend, tokensPerS: e.tokensPerS, self: e.self,
      problem, cells: [e.name, F.shareCell(4, 256), e.backend, F.formatRate(e.tokensPerS),
        problem ? '✗ differs' : '✓'] };
  }));
}"""


async def test_the_group_panel_stays_readable_with_64_devices(tmp_path: Path) -> None:
    async with signaling_server() as url, chromium() as browser:
        for name, viewport in (("group-64-phone", None), ("group-64-desktop", DESKTOP)):
            tab = await (
                open_page(browser, f"{url}/?{QUERY}&name=host")
                if viewport is None
                else open_page(browser, f"{url}/?{QUERY}&name=host", viewport)
            )
            await joined(tab)
            await tab.page.evaluate(RENDER, crowd_entries())
            summary = await tab.page.locator("#group .crowd-summary").inner_text()
            assert "64 devices: 22 webgpu-dp4a, 21 js-cpu, 21 numpy." in summary, summary
            assert "slowest 100, median 3,250, fastest 6,400 tokens/s (60 of 64" in summary
            assert "3 need a look: 2 disconnected, 1 not connected yet." in summary
            first = tab.page.locator("#group .crowd-first li")
            assert await first.count() == 6
            texts = [await first.nth(k).inner_text() for k in range(6)]
            assert [t.split()[0] for t in texts] == ["disconnected"] * 2 + [
                "not"] + ["slowest"] * 3, texts  # fmt: skip
            assert "laptop-63" in texts[3], texts
            # The full list is folded: its 64 rows are not shown until the person opens it.
            rows = tab.page.locator("#group details.crowd-all ul.members li")
            assert await rows.count() == 64
            assert not await rows.first.is_visible()
            await screenshot(tab, name, tmp_path, focus="#group")
            await tab.page.get_by_text("All 64 devices").click()
            await rows.first.wait_for(state="visible")
            assert "laptop-09" in await rows.first.inner_text()
            assert "laptop-53" in await rows.last.inner_text()  # unmeasured speeds last
            sw, iw = await overflow(tab)
            assert sw <= iw, f"{name}: {sw} px wide in {iw}"
            await screenshot(tab, f"{name}-open", tmp_path, focus="#group details.crowd-all")
            await check_page(tab, name)

            # The run table: a summary, problems and the slowest first, 8 rows until "Show all".
            await tab.page.evaluate(RUN_TABLE, crowd_entries())
            table_summary = await tab.page.locator("#live .live-devices-summary").inner_text()
            assert "64 devices: 22 webgpu-dp4a" in table_summary, table_summary
            assert "2 with a differing hash, listed first" in table_summary, table_summary
            shown = tab.page.locator("#live table.live-devices tbody:visible tr")
            assert await shown.count() == 8
            assert "laptop-09" in await shown.nth(0).inner_text()
            assert "laptop-63" in await shown.nth(2).inner_text()
            await screenshot(tab, f"{name}-run", tmp_path, focus="#live .live-devices-summary")
            await tab.page.get_by_role("button", name="Show all 64 devices").click()
            assert await shown.count() == 64
            await tab.page.get_by_role("button", name="Show fewer devices").click()
            assert await shown.count() == 8
            sw, iw = await overflow(tab)
            assert sw <= iw, f"{name} (run table): {sw} px wide in {iw}"
            await tab.page.context.close()
