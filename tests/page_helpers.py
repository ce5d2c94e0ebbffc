"""Helpers for the tests of the page at ``/`` (tests/test_page_*.py): Chromium tabs with their
console errors and failed requests collected, bounded waits on what the page shows, and the
page-wide checks of issue 11 (no horizontal overflow, every control named, screenshots).

A tab is "joined" when the page's session peer has its signaling id (``app.peer.id``); tests
drive the page through its controls (Playwright role and label queries) and read ``app`` only
where a person would read the screen's text instead.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBRTC_FLAGS

REPO = Path(__file__).resolve().parents[1]
GUIDE_DIR = REPO / "docs" / "guide"
WRITE_GUIDE = os.environ.get("DAISYCHAIN_WRITE_GUIDE") == "1"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
WAIT_MS = 60_000

# Controls a person operates, by their role in Chromium's accessibility tree.
CONTROL_ROLES = frozenset(
    {
        "button", "link", "textbox", "searchbox", "spinbutton", "combobox", "listbox",
        "checkbox", "radio", "slider", "switch", "DisclosureTriangle", "menuitem", "tab",
    }
)  # fmt: skip

ID = "async () => (await import('/js/app.js')).app.peer?.id ?? ''"
# The page peer's applied steps as [step, hash] pairs (its outcome's history).
RECORDS = (
    "async () => (await import('/js/app.js')).app.peer?.records.map((r) => [r.step, r.hash]) ?? []"
)


@dataclass
class Tab:
    page: Any  # playwright.async_api.Page
    errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # responses >= 400
    foreign: list[str] = field(default_factory=list)

    async def peer_id(self) -> str:
        result: str = await self.page.evaluate(ID)
        return result

    async def hashes(self) -> dict[int, str]:
        """The page peer's hash after each step it applied."""
        return {int(step): str(digest) for step, digest in await self.page.evaluate(RECORDS)}

    def check_clean(self) -> None:
        assert not self.errors, f"console errors: {self.errors}"
        assert not self.failed, f"failed requests: {self.failed}"
        assert not self.foreign, f"the page reached outside the test server: {self.foreign}"


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), args=[*OFFLINE_FLAGS, *WEBRTC_FLAGS]
        )
        try:
            yield browser
        finally:
            await browser.close()


async def new_tab(browser: Any, viewport: dict[str, int] = PHONE) -> Tab:
    """A tab in its own browser context (its own storage), clipboard allowed."""
    context = await browser.new_context(viewport=viewport)
    await context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = await context.new_page()
    return watch(Tab(page))


async def open_page(browser: Any, url: str, viewport: dict[str, int] = PHONE) -> Tab:
    """A new tab on ``url`` (the page ``/`` with its query)."""
    tab = await new_tab(browser, viewport)
    response = await tab.page.goto(url)
    assert response is not None and response.ok, f"GET {url}: {response}"
    return tab


async def until(predicate: Any, timeout: float, what: str) -> None:
    """Poll an async ``predicate()`` until true; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not await predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


async def joined(tab: Tab, timeout: float = 120) -> str:
    """Wait until the page's peer has its id (the mesh was admitted); return it."""

    async def has_id() -> bool:
        return bool(await tab.peer_id())

    await until(has_id, timeout, "the page to join its group")
    return await tab.peer_id()


async def text_of(tab: Tab, selector: str) -> str:
    result: str = await tab.page.locator(selector).inner_text()
    return result


async def shows(tab: Tab, selector: str, pattern: str, timeout: float = 60) -> str:
    """Wait until the element's text matches ``pattern`` (a regex); return the text."""
    rx = re.compile(pattern)
    last = ""

    async def matches() -> bool:
        nonlocal last
        loc = tab.page.locator(selector)
        last = await loc.inner_text() if await loc.count() else ""
        return rx.search(last) is not None

    try:
        await until(matches, timeout, selector)
    except AssertionError:
        raise AssertionError(f"{selector} never showed {pattern!r}; last: {last!r}") from None
    return last


async def overflow(tab: Tab) -> tuple[int, int]:
    """(document scrollWidth, innerWidth): the page overflows sideways when the first is larger."""
    sw, iw = await tab.page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    return int(sw), int(iw)


async def unnamed_controls(tab: Tab) -> list[str]:
    """Every control in Chromium's accessibility tree that has no accessible name, as HTML."""
    cdp = await tab.page.context.new_cdp_session(tab.page)
    try:
        await cdp.send("Accessibility.enable")
        tree = await cdp.send("Accessibility.getFullAXTree")
        outer = "function () { return this.outerHTML.slice(0, 160); }"
        out = []
        for node in tree["nodes"]:
            role = node.get("role", {}).get("value", "")
            if node.get("ignored") or role not in CONTROL_ROLES:
                continue
            if str(node.get("name", {}).get("value", "")).strip():
                continue
            html = f"<{role}>"
            if "backendDOMNodeId" in node:
                obj = await cdp.send("DOM.resolveNode", {"backendNodeId": node["backendDOMNodeId"]})
                got = await cdp.send(
                    "Runtime.callFunctionOn",
                    {
                        "objectId": obj["object"]["objectId"],
                        "functionDeclaration": outer,
                        "returnByValue": True,
                    },
                )
                html = got["result"].get("value", html)
            out.append(html)
        return out
    finally:
        await cdp.detach()


async def check_page(tab: Tab, what: str) -> None:
    """The page-wide expectations: no sideways overflow, every control named, clean console."""
    sw, iw = await overflow(tab)
    assert sw <= iw, f"{what}: the page is {sw} px wide in a {iw} px viewport"
    unnamed = await unnamed_controls(tab)
    assert not unnamed, f"{what}: controls without an accessible name: {unnamed}"
    shown = await shown_while_hidden(tab)
    assert not shown, f"{what}: elements marked hidden but laid out: {shown}"
    tab.check_clean()


# Elements with the `hidden` attribute that still take space: a class that sets `display`
# overrides the attribute unless the stylesheet says otherwise (the empty QR image once showed
# as a blank box until the server had drawn the code).
SHOWN_WHILE_HIDDEN = """
() => [...document.querySelectorAll('[hidden]')]
  .filter((e) => getComputedStyle(e).display !== 'none')
  .map((e) => `${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`)
"""


async def shown_while_hidden(tab: Tab) -> list[str]:
    found: list[str] = await tab.page.evaluate(SHOWN_WHILE_HIDDEN)
    return found


async def screenshot(tab: Tab, name: str, tmp: Path, focus: str | None = None) -> Path:
    """Save the viewport as ``name``.png in ``tmp``, and in docs/guide/ when
    DAISYCHAIN_WRITE_GUIDE=1 (the user guide's pictures). Scrolled to the top, or to show
    ``focus``: at its top on a phone (one column), just into view on a wide screen."""
    if focus is None:
        await tab.page.evaluate("window.scrollTo(0, 0)")
    else:
        await tab.page.evaluate(
            "(s) => document.querySelector(s).scrollIntoView("
            "{block: innerWidth < 960 ? 'start' : 'nearest'})",
            focus,
        )
    path = tmp / f"{name}.png"
    await tab.page.screenshot(path=str(path))
    if WRITE_GUIDE:
        GUIDE_DIR.mkdir(parents=True, exist_ok=True)
        (GUIDE_DIR / f"{name}.png").write_bytes(path.read_bytes())
    return path


def listen(
    page: Any, errors: list[str], foreign: list[str], hosts: tuple[str, ...] = ("127.0.0.1",)
) -> None:
    """Collect a page's console errors and page errors into ``errors`` and the requests that
    go to a host other than ``hosts`` (the test's servers) into ``foreign`` (watch adds
    responses >= 400; the mesh and peer tests keep their own Tab, which allows some console
    errors, and call this directly)."""

    def on_console(message: Any) -> None:
        if message.type == "error":
            errors.append(message.text)

    def on_request(request: Any) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in hosts:
            foreign.append(request.url)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on("request", on_request)


def watch(tab: Tab, hosts: tuple[str, ...] = ("127.0.0.1",)) -> Tab:
    """Collect the tab's console errors, page errors, responses >= 400 and requests to hosts
    other than ``hosts`` (check_clean asserts there are none)."""

    def on_response(response: Any) -> None:
        if response.status >= 400:
            tab.failed.append(f"{response.status} {response.url}")

    listen(tab.page, tab.errors, tab.foreign, hosts)
    tab.page.on("response", on_response)
    return tab


async def hashes_after(tab: Tab, steps: int, timeout: float = 120) -> dict[int, str]:
    """The page peer's hashes once it has applied ``steps`` steps."""

    async def applied() -> bool:
        return len(await tab.hashes()) >= steps

    await until(applied, timeout, f"the tab's {steps} steps")
    return await tab.hashes()


async def lead_form(tab: Tab, steps: int, devices: int, batch: int, seq_len: int) -> Any:
    """The "Lead a run" form with its steps, devices, and (under More settings) sequences per
    device and sequence length filled in; returns the form's locator for the rest."""
    form = tab.page.get_by_role("form", name="Lead a run")
    await form.get_by_label("Steps").fill(str(steps))
    await form.get_by_label("Devices needed to start").fill(str(devices))
    await form.get_by_text("More settings").click()
    await form.get_by_label("Sequences per device per step").fill(str(batch))
    await form.get_by_label("Sequence length").fill(str(seq_len))
    return form
