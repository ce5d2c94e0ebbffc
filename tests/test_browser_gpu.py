"""Browser tier: the /selftest and /train-check pages in headless Chromium against the real server.

With ``--enable-unsafe-webgpu`` Chromium offers its SwiftShader WebGPU adapter: the DP4A and LUT
kernels must pass the same exact gates as the Python peer (same inputs, proven by a digest) and
reproduce the reference probe hash, and the 10-step ``train_run.tiny`` golden run must give the
Python reference's loss bits and state hashes with every int8 product on the GPU. Without the flag
``requestAdapter()`` returns null: the page must fall back to the JS CPU mirror, say why, and give
the same hashes. A kernel served with a planted bug must be caught by a gate and demoted.

The app is the real ``daisychain.server.app`` on a loopback port; golden vectors are served to the
page by this test (a Playwright route under ``/vectors/``), never by the product server. Chromium
runs with the flags that keep it off the network. Any console error on a page fails its test.
Skipped only when /usr/bin/chromium or the ``playwright`` package is missing.
"""

from __future__ import annotations

import hashlib
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

from daisychain.bench.browser import CHROMIUM, OFFLINE_FLAGS, WEBGPU_FLAG
from daisychain.gpu.gates import gemm_cases, qmatmul_cases
from daisychain.gpu.probe import reference_probe_hash
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


def python_gate_digest() -> str:
    """The digest static/js/gpu/gates.js computes over its case inputs, from the Python gates."""
    h = hashlib.sha256()
    for name, a, b in gemm_cases():
        h.update(name.encode())
        h.update(a.tobytes())
        h.update(b.tobytes())
    for name, a_q, a_e, b_q, b_e in qmatmul_cases():
        h.update(name.encode())
        for arr, dtype in ((a_q, "i1"), (a_e, "<i4"), (b_q, "i1"), (b_e, "<i4")):
            h.update(np.ascontiguousarray(arr).astype(dtype).tobytes())
    return h.hexdigest()


def rows_by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in result["backends"]}


async def test_selftest_webgpu_kernels_pass_python_gates() -> None:
    async with browser_tab(webgpu=True) as tab:
        result = await tab.run("/selftest.html?gops=0")
        await tab.page.wait_for_selector("#backends tbody tr[data-backend='webgpu-dp4a']")
    assert result["gate_cases_digest"] == python_gate_digest()
    assert result["reference_probe_hash"] == reference_probe_hash()
    rows = rows_by_name(result)
    for name in ("webgpu-dp4a", "webgpu-lut", "js-cpu"):
        row = rows[name]
        assert row["gates_passed"], f"{name}: {row['failure']}"
        assert row["cases_passed"] == 50, row
        assert row["probe_hash"] == reference_probe_hash(), row
    assert "swiftshader" in rows["webgpu-dp4a"]["adapter"].lower()
    assert result["device"]["dp4a"] is True
    assert result["selected"] == "webgpu-dp4a"
    assert result["demotions"] == []


async def test_selftest_without_webgpu_falls_back_to_cpu_with_reason() -> None:
    async with browser_tab(webgpu=False) as tab:
        result = await tab.run("/selftest.html?gops=0")
        shown = await tab.page.text_content("#demotions")
    rows = rows_by_name(result)
    assert result["selected"] == "js-cpu"
    assert rows["js-cpu"]["gates_passed"]
    assert rows["js-cpu"]["probe_hash"] == reference_probe_hash()
    for name in ("webgpu-dp4a", "webgpu-lut"):
        assert not rows[name]["gates_passed"]
        assert "requestAdapter() returned null" in rows[name]["failure"]
    assert [d["name"] for d in result["demotions"]] == ["webgpu-dp4a", "webgpu-lut"]
    assert shown is not None and "requestAdapter() returned null" in shown


async def test_planted_kernel_bug_is_caught_and_demoted() -> None:
    """gemm_dp4a.wgsl served with its K loop one short: its gate fails, LUT is selected."""

    async with browser_tab(webgpu=True) as tab:

        async def plant(route: Any) -> None:
            original = await route.fetch()
            source = await original.text()
            assert source.count("k < params.k4") == 1
            await route.fulfill(
                response=original, body=source.replace("k < params.k4", "k + 1u < params.k4")
            )

        await tab.page.route("**/kernels/gemm_dp4a.wgsl", plant)
        result = await tab.run("/selftest.html?gops=0")
        shown = await tab.page.text_content("#demotions")
    rows = rows_by_name(result)
    dp4a = rows["webgpu-dp4a"]
    assert not dp4a["gates_passed"]
    assert dp4a["failure"].startswith("webgpu-dp4a failed gate '1x1x1' shape (1, 1, 1)"), dp4a
    assert result["selected"] == "webgpu-lut"
    assert result["demotions"] == [{"name": "webgpu-dp4a", "reason": dp4a["failure"]}]
    assert shown is not None and "webgpu-dp4a failed gate '1x1x1'" in shown


def golden_run() -> tuple[list[str], list[str]]:
    """(state hashes, loss bit patterns as 0x%08x) of train_run.tiny from the manifest."""
    manifest = json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))
    case = next(c for c in manifest["cases"] if c["name"] == "train_run.tiny")
    losses = np.frombuffer((VECTORS / case["outputs"]["loss"]["blob"]).read_bytes(), "<u4")
    return list(case["outputs"]["hashes"]["value"]), [f"0x{int(v):08x}" for v in losses]


def check_golden(result: dict[str, Any]) -> None:
    hashes, losses = golden_run()
    assert len(hashes) == 10
    assert result["hashes"] == hashes
    assert [s["loss_bits"] for s in result["steps"]] == losses
    assert {s["probe_hash"] for s in result["steps"]} == {reference_probe_hash()}
    assert result["all_match"] is True


async def test_train_check_tiny_on_webgpu_matches_python_hashes() -> None:
    async with browser_tab(webgpu=True) as tab:
        result = await tab.run("/train-check.html?vectors=/vectors/manifest.json")
    assert result["backend"] == "webgpu-dp4a", result["demotions"]
    assert result["on_gpu"] is True
    # 13 forward and 26 backward products per step, every one on the GPU and audited.
    assert result["gpu_products"] == 10 * 39, result["gpu_products"]
    assert result["audit"]["products"] == result["gpu_products"], result["audit"]
    check_golden(result)


async def test_train_check_tiny_cpu_tier_matches_python_hashes() -> None:
    async with browser_tab(webgpu=False) as tab:
        result = await tab.run("/train-check.html?vectors=/vectors/manifest.json")
        shown = await tab.page.text_content("#demotions")
    assert result["backend"] == "js-cpu"
    assert result["on_gpu"] is False
    assert shown is not None and "requestAdapter() returned null" in shown
    check_golden(result)
