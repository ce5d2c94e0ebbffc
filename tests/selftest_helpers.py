"""The real app's check pages (/selftest.html, /train-check.html, and blank harness pages of the
app's origin) in headless Chromium: ``product_server()`` (the real ``daisychain.server.app`` on
a loopback port), ``browser_tab()`` (a fresh tab on it with the project's offline flags, the
test's golden vectors routed to the page under ``/vectors/``, console errors and requests to
any other host collected; ``Tab.run`` opens a check page and returns its ``#result``) and
``golden_run()`` (the hashes and loss bits of the ``train_run.tiny`` golden case).

Used by tests/browser/test_browser_gpu.py, tests/browser/test_browser_worker.py and
tests/browser/test_browser_kit.py. Importing it skips the importing module when
/usr/bin/chromium or the ``playwright`` package is missing, with the reason.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from aiohttp import web

from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBGPU_FLAG
from daisychain.server.app import create_app
from server_fixtures import ByteTokenizer, config

REPO = Path(__file__).resolve().parents[1]
VECTORS = REPO / "tests" / "vectors"
PAGE_TIMEOUT_MS = 150_000

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
async_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)


@asynccontextmanager
async def product_server() -> AsyncIterator[str]:
    """The real DaisyChain app on 127.0.0.1 (free port, offline data); yields its base URL."""
    app = create_app(config(), tokenizer=ByteTokenizer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@dataclass
class Tab:
    page: Any  # playwright.async_api.Page
    base: str
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)  # requests to any host but the server

    async def run(self, path: str) -> dict[str, Any]:
        """Open ``path``, wait for the page to finish, return the JSON of ``#result``."""
        response = await self.page.goto(self.base + path)
        assert response is not None and response.ok, f"GET {path}: {response}"
        headers = await response.all_headers()
        assert headers["content-type"] == "text/html; charset=utf-8", headers
        assert "script-src 'self'" in headers["content-security-policy"], headers
        # A selector, not wait_for_function: the page's CSP forbids the eval that one uses.
        await self.page.wait_for_selector(
            "body:not([data-state='running'])", state="attached", timeout=PAGE_TIMEOUT_MS
        )
        text = await self.page.text_content("#result")
        assert text, f"{path}: empty #result"
        result: dict[str, Any] = json.loads(text)
        state = await self.page.get_attribute("body", "data-state")
        assert state == "done", f"{path} ended in state {state}: {result}"
        assert not self.errors, f"console errors on {path}: {self.errors}"
        assert not self.foreign, f"{path} reached outside the test server: {self.foreign}"
        return result


def _is_vector_url(url: str) -> bool:
    return urlsplit(url).path.startswith("/vectors/")


async def _serve_vector(route: Any) -> None:
    """Serve tests/vectors/<path> to the page (the test's data, not the product server's)."""
    relative = urlsplit(route.request.url).path.removeprefix("/vectors/")
    path = (VECTORS / relative).resolve()
    if not path.is_relative_to(VECTORS) or not path.is_file():
        await route.fulfill(status=404, body="not a test vector")
        return
    kind = "application/json" if path.suffix == ".json" else "application/octet-stream"
    await route.fulfill(status=200, body=path.read_bytes(), content_type=kind)


@asynccontextmanager
async def browser_tab(*, webgpu: bool) -> AsyncIterator[Tab]:
    """A fresh headless Chromium tab on the product server, console errors collected."""
    async with product_server() as base, async_api.async_playwright() as pw:
        args = OFFLINE_FLAGS + ([WEBGPU_FLAG] if webgpu else [])
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=args)
        try:
            page = await browser.new_page()
            tab = Tab(page, base)

            def on_console(message: Any) -> None:
                if message.type == "error":
                    tab.errors.append(message.text)

            page.on("console", on_console)

            def on_request(request: Any) -> None:
                parts = urlsplit(request.url)
                if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname != "127.0.0.1":
                    tab.foreign.append(request.url)

            page.on("pageerror", lambda exc: tab.errors.append(f"page error: {exc}"))
            page.on("request", on_request)
            await page.route(_is_vector_url, _serve_vector)
            yield tab
        finally:
            await browser.close()


def golden_run() -> tuple[list[str], list[str]]:
    """(state hashes, loss bit patterns as 0x%08x) of train_run.tiny from the manifest."""
    manifest = json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))
    case = next(c for c in manifest["cases"] if c["name"] == "train_run.tiny")
    losses = np.frombuffer((VECTORS / case["outputs"]["loss"]["blob"]).read_bytes(), "<u4")
    return list(case["outputs"]["hashes"]["value"]), [f"0x{int(v):08x}" for v in losses]
