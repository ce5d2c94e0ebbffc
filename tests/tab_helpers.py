"""The page ``/`` (static/js/app.js) in a Chromium tab, as the browser peer tests drive it: a
``Tab`` whose peer state (``STATE``) the tests read, the page's own ``LEAD``, the test timers
(``TIMERS_QUERY``), ``chromium()``, ``open_tab()`` (returns once the page's peer was admitted to
the group), ``wait_tabs()`` and ``finished()``.

Used by tests/browser/test_browser_peer.py, tests/browser/test_browser_fineweb.py,
tests/page/test_page_generate.py and tests/p2p/test_ice.py (which imports it inside its test,
so only that test skips). Importing it skips the importing module when /usr/bin/chromium or the
``playwright`` package is missing, with the reason.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

import page_helpers
from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBGPU_FLAG, WEBRTC_FLAGS
from mesh_helpers import FAST

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
async_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)

TIMERS_QUERY = f"repair_after={FAST.repair_after_s}&step_timeout={FAST.step_timeout_s}"

# The page's peer, as JSON (outcome hashes as an object).
STATE = """
async () => {
  const { app } = await import('/js/app.js');
  const p = app.peer;
  const o = p?.outcome ?? null;
  return {
    id: p?.id ?? '', phase: p?.phase ?? 'loading', leader: p?.isLeader ?? false,
    records: p?.records ?? [], backend: app.selection?.backend ?? null,
    outcome: o === null ? null : { ...o, hashes: Object.fromEntries(o.hashes ?? new Map()) },
    ended: p?.ended ?? false,
    errors: app.errors, status: document.getElementById('status').textContent,
  };
}
"""

LEAD = """
async (choices) => {
  const { app } = await import('/js/app.js');
  const config = await app.peer.lead(choices);
  return config.run;
}
"""


@dataclass
class Tab:
    page: Any  # playwright.async_api.Page
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    async def state(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.page.evaluate(STATE)
        return result

    def hashes(self, state: dict[str, Any]) -> dict[int, str]:
        return {r["step"]: r["hash"] for r in state["records"]}

    def check_clean(self) -> None:
        unexpected = [e for e in self.errors if not any(p.search(e) for p in self.allowed)]
        assert not unexpected, f"console errors: {unexpected}"
        assert not self.foreign, f"the page reached outside the test server: {self.foreign}"


@asynccontextmanager
async def chromium(webgpu: bool) -> AsyncIterator[Any]:
    flags = [*OFFLINE_FLAGS, *WEBRTC_FLAGS, *([WEBGPU_FLAG] if webgpu else [])]
    async with async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        try:
            yield browser
        finally:
            await browser.close()


class _DefaultContext:
    """The browser's own context as ``open_tab`` uses a browser: ``new_page(viewport=...)``."""

    def __init__(self, context: Any) -> None:
        self.context = context

    async def new_page(self, viewport: dict[str, int] | None = None) -> Any:
        page = await self.context.new_page()
        if viewport is not None:
            await page.set_viewport_size(viewport)
        return page


@asynccontextmanager
async def chromium_lifecycle() -> AsyncIterator[Any]:
    """A headless Chromium whose tabs can be hidden and frozen (``Page.setWebLifecycleState``).

    Playwright turns on focus emulation for every page it opens, and Chromium keeps such a
    page visible, so a freeze it is sent does nothing (measured with Chromium 156: timers kept
    firing, no ``freeze`` event). Here Chromium is started by the test and Playwright attaches
    over the DevTools protocol without its defaults (``no_defaults``), opening pages in the
    browser's own context, where it sets no focus emulation: a freeze then hides the page,
    fires ``freeze`` and stops its timers, as a phone's browser does to a background tab."""
    with tempfile.TemporaryDirectory() as profile:
        proc = await asyncio.create_subprocess_exec(
            str(CHROMIUM), "--headless", "--remote-debugging-port=0", f"--user-data-dir={profile}",
            *OFFLINE_FLAGS, *WEBRTC_FLAGS, "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        drain: asyncio.Task[None] | None = None
        try:
            endpoint = await asyncio.wait_for(_devtools_endpoint(proc.stderr), 60)
            # Keep reading, so Chromium never blocks on a full stderr pipe.
            drain = asyncio.create_task(_drain(proc.stderr))
            async with async_api.async_playwright() as pw:
                browser = await pw.chromium.connect_over_cdp(endpoint, no_defaults=True)
                try:
                    yield _DefaultContext(browser.contexts[0])
                finally:
                    await browser.close()
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            if drain is not None:
                await drain


async def _devtools_endpoint(stderr: asyncio.StreamReader) -> str:
    """The browser's DevTools WebSocket address, from the line Chromium prints at start."""
    lines = []
    while line := (await stderr.readline()).decode(errors="replace"):
        found = re.search(r"DevTools listening on (ws://\S+)", line)
        if found:
            return found.group(1)
        lines.append(line)
    raise AssertionError(f"Chromium exited before its DevTools address: {''.join(lines)[-2000:]}")


async def _drain(stderr: asyncio.StreamReader) -> None:
    while await stderr.readline():
        pass


def serve_text(body: str, content_type: str = "text/plain") -> Any:
    async def serve(route: Any) -> None:
        await route.fulfill(status=200, content_type=f"{content_type}; charset=utf-8", body=body)

    return serve


async def open_tab(
    browser: Any,
    base: str,
    query: str = "",
    routes: dict[str, str] | None = None,
    viewport: dict[str, int] | None = None,
    timers: str = TIMERS_QUERY,
) -> Tab:
    """The page `/` with the test timers (``timers``: another query of them); returns once its
    peer was admitted to the group. ``routes`` serves other text for some paths (the page's
    worker fetches through them too)."""
    page = await browser.new_page(viewport=viewport)
    tab = Tab(page)
    for path, body in (routes or {}).items():
        # A module script must come as JavaScript: the browser refuses text/plain for it.
        kind = "text/javascript" if path.endswith(".js") else "text/plain"
        await page.context.route(f"{base}{path}", serve_text(body, kind))
    page_helpers.listen(page, tab.errors, tab.foreign)
    response = await page.goto(f"{base}/?{timers}&{query}")
    assert response is not None and response.ok, f"GET /: {response}"
    deadline = time.monotonic() + 120
    while True:
        state = await tab.state()
        if state["id"]:
            return tab
        assert not state["errors"], f"the page could not start: {state['errors']}"
        assert time.monotonic() < deadline, f"the page never joined: {state['status']}"
        await asyncio.sleep(0.2)


async def wait_tabs(tabs: list[Tab], done: Any, timeout: float, what: str) -> list[dict[str, Any]]:
    """Poll every tab's state until ``done(states)``; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        states = [await t.state() for t in tabs]
        if done(states):
            return states
        assert time.monotonic() < deadline, f"timed out waiting for {what}: " + repr(
            [(s["id"], s["phase"], len(s["records"]), s["errors"], s["status"]) for s in states]
        )
        await asyncio.sleep(0.25)


def finished(states: list[dict[str, Any]]) -> bool:
    """Every tab's run has ended: its outcome is set *and* its end is done. The outcome is set
    before the drain of the last sends; the page reports it (``app.errors``) only after."""
    return all(s["outcome"] is not None and s["ended"] for s in states)
