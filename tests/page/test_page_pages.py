"""The pages other than ``/`` (issue 11, Must-show 6): /selftest, /train-check and the 404 page,
in headless Chromium on the real server; and the tests' mesh check page (tests/pages/, not served
by the server: issue 41), which the browser mesh tests open through tests/repo_route.py.

At 390x844 (a phone) and 1280x800 (a desktop) each page, once it has finished, must have no
horizontal overflow (``scrollWidth <= innerWidth``), an accessible name on every control (from
Chromium's own accessibility tree), no console error, no page error, no response >= 400 and no
failed request (the 404 page: only its own document). Screenshots go to the test's tmp dir.

/train-check trains the golden ``train_run.tiny`` case the server itself serves under
``/vectors/`` (no test route): every step must match the committed Python reference on the CPU
tier (``?backend=cpu``) and on the default choice of a WebGPU-enabled Chromium (SwiftShader's
adapter, DP4A). A planted manifest (a test-only ``/planted/`` route) with one loss bit changed
must make the page say MISMATCH from that step, and one whose blob does not match its SHA-256
must make it fail with a hint.
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

import repo_route
from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBGPU_FLAG
from daisychain.server.app import serve_local
from server_fixtures import ByteTokenizer, config

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
VIEWPORTS = ((390, 844), (1280, 800))
DONE_MS = 240_000
# Roles a person operates: each must have a non-empty accessible name.
CONTROL_ROLES = {
    "button", "link", "textbox", "searchbox", "checkbox", "radio", "combobox", "listbox",
    "spinbutton", "slider", "switch", "tab", "menuitem", "DisclosureTriangle", "region",
}  # fmt: skip

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
async_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)


@dataclass
class Watch:
    """What a page did wrong: console errors, page errors, responses >= 400, failed requests."""

    console: list[str] = field(default_factory=list)
    bad_responses: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def attach(self, page: Any) -> None:
        def on_console(message: Any) -> None:
            if message.type == "error":
                self.console.append(message.text)

        def on_response(response: Any) -> None:
            if response.status >= 400:
                self.bad_responses.append(f"{response.status} {response.url}")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: self.console.append(f"page error: {exc}"))
        page.on("response", on_response)
        page.on("requestfailed", lambda r: self.failed.append(f"{r.url}: {r.failure}"))


@asynccontextmanager
async def chromium(*, webgpu: bool = False) -> AsyncIterator[tuple[str, Any]]:
    """(base URL of the real server, a Chromium browser kept off the network)."""
    async with (
        serve_local(config(), tokenizer=ByteTokenizer) as base,
        async_api.async_playwright() as pw,
    ):
        args = OFFLINE_FLAGS + ([WEBGPU_FLAG] if webgpu else [])
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=args)
        try:
            yield base, browser
        finally:
            await browser.close()


async def unnamed_controls(page: Any) -> list[str]:
    """Controls without an accessible name, as Chromium computes it (not a guess from the DOM)."""
    cdp = await page.context.new_cdp_session(page)
    tree = await cdp.send("Accessibility.getFullAXTree")
    await cdp.detach()
    out = []
    for node in tree["nodes"]:
        role = node.get("role", {}).get("value")
        name = str(node.get("name", {}).get("value", "")).strip()
        if not node.get("ignored") and role in CONTROL_ROLES and not name:
            out.append(f"{role} (backend node {node.get('backendDOMNodeId')})")
    return out


async def overflow(page: Any) -> tuple[int, int]:
    width: list[int] = await page.evaluate(
        "[document.documentElement.scrollWidth, window.innerWidth]"
    )
    return width[0], width[1]


async def check_layout(page: Any, shot: Path) -> None:
    """No horizontal overflow, every control named; a full-page screenshot for a person."""
    await page.screenshot(path=str(shot), full_page=True)
    scroll_width, inner_width = await overflow(page)
    assert scroll_width <= inner_width, f"{shot.name}: {scroll_width} px wide in {inner_width}"
    assert not await unnamed_controls(page), f"{shot.name}: {await unnamed_controls(page)}"


async def finished(page: Any) -> str | None:
    """Wait until a check page leaves data-state=running; its final state."""
    await page.wait_for_selector(
        "body:not([data-state='running'])", state="attached", timeout=DONE_MS
    )
    state: str | None = await page.get_attribute("body", "data-state")
    return state


def golden() -> tuple[list[str], list[str]]:
    """(state hashes, loss bits as 0x%08x) of the committed train_run.tiny case."""
    manifest = json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))
    case = next(c for c in manifest["cases"] if c["name"] == "train_run.tiny")
    losses = np.frombuffer((VECTORS / case["outputs"]["loss"]["blob"]).read_bytes(), "<u4")
    return list(case["outputs"]["hashes"]["value"]), [f"0x{int(v):08x}" for v in losses]


async def result_json(page: Any) -> dict[str, Any]:
    text = await page.text_content("#result")
    assert text, "empty #result"
    result: dict[str, Any] = json.loads(text)
    return result


def assert_clean(watch: Watch, where: str) -> None:
    assert not watch.console, f"{where}: console errors {watch.console}"
    assert not watch.bad_responses, f"{where}: responses >= 400 {watch.bad_responses}"
    assert not watch.failed, f"{where}: failed requests {watch.failed}"


# --- every page at both sizes ----------------------------------------------------------------


async def test_the_layout_checks_catch_overflow_and_unnamed_controls(tmp_path: Path) -> None:
    """The checks below can fail: a too-wide box and nameless controls are caught."""
    async with chromium() as (_, browser):
        page = await browser.new_page(viewport={"width": 390, "height": 844})
        await page.set_content(
            '<button></button><input type="text"><div style="width: 600px">wide</div>'
            '<button aria-label="named"></button><label>ok <input></label>'
        )
        assert await overflow(page) == (608, 390)  # 600 px and the body's 8 px margin
        unnamed = await unnamed_controls(page)
        assert [u.split(" ")[0] for u in unnamed] == ["button", "textbox"], unnamed
        with pytest.raises(AssertionError, match="608 px wide in 390"):
            await check_layout(page, tmp_path / "bad.png")


@pytest.mark.parametrize("webgpu", [False, True], ids=["no-webgpu", "webgpu"])
async def test_selftest_page_is_clean_on_phone_and_desktop(tmp_path: Path, webgpu: bool) -> None:
    """Without WebGPU two backends fail (no adapter) and the page says why; with SwiftShader's
    adapter all three pass and the fastest (here the CPU mirror) is chosen."""
    async with chromium(webgpu=webgpu) as (base, browser):
        for width, height in VIEWPORTS:
            page = await browser.new_page(viewport={"width": width, "height": height})
            watch = Watch()
            watch.attach(page)
            await page.goto(base + "/selftest")
            assert await finished(page) == "done"
            result = await result_json(page)
            passed = [row["name"] for row in result["backends"] if row["gates_passed"]]
            assert passed == (["webgpu-dp4a", "webgpu-lut", "js-cpu"] if webgpu else ["js-cpu"])
            assert result["selected"] in passed
            status = await page.text_content("#status")
            assert status == f"✓ done: this device trains on {result['selected']}", status
            await check_layout(page, tmp_path / f"selftest-{width}.png")
            assert_clean(watch, f"/selftest at {width}")
            await page.close()


async def test_train_check_matches_on_the_cpu_tier_on_phone_and_desktop(tmp_path: Path) -> None:
    hashes, losses = golden()
    async with chromium() as (base, browser):
        for width, height in VIEWPORTS:
            page = await browser.new_page(viewport={"width": width, "height": height})
            watch = Watch()
            watch.attach(page)
            await page.goto(base + "/train-check?backend=cpu")
            assert await finished(page) == "done"
            result = await result_json(page)
            assert result["backend"] == "js-cpu" and result["all_match"] is True
            assert result["hashes"] == hashes
            assert [s["loss_bits"] for s in result["steps"]] == losses
            assert await page.get_attribute("body", "data-outcome") == "match"
            assert await page.locator("#steps tbody td.pass").count() == 10
            status = await page.text_content("#status")
            assert status == "✓ all 10 steps match the Python reference on js-cpu", status
            await check_layout(page, tmp_path / f"train-check-{width}.png")
            assert_clean(watch, f"/train-check at {width}")
            await page.close()


async def test_mesh_check_page_is_clean_on_phone_and_desktop(tmp_path: Path) -> None:
    """The tests' diagnostic page (the browser mesh tests drive it), which the server does not
    serve; through the test route, alone, it joins its group."""
    async with chromium() as (base, browser):
        for path in ("/mesh-check", "/mesh-check.html", "/js/p2p/check.js"):
            probe = await browser.new_page()
            answer = await probe.request.get(base + path)
            assert answer.status == 404, f"the server serves the test page's {path}"
            await probe.close()
        for width, height in VIEWPORTS:
            page = await browser.new_page(viewport={"width": width, "height": height})
            await repo_route.install(page.context, base)
            watch = Watch()
            watch.attach(page)
            await page.goto(base + "/repo/tests/pages/mesh-check.html")
            await page.wait_for_selector("body[data-signaling='joined']", timeout=30_000)
            await check_layout(page, tmp_path / f"mesh-check-{width}.png")
            assert_clean(watch, f"the mesh check page at {width}")
            await page.close()


async def test_not_found_page_is_clean_on_phone_and_desktop(tmp_path: Path) -> None:
    """The only failure is the missing page itself: no second 404 for a favicon."""
    async with chromium() as (base, browser):
        for width, height in VIEWPORTS:
            page = await browser.new_page(viewport={"width": width, "height": height})
            watch = Watch()
            watch.attach(page)
            response = await page.goto(base + "/no-such-page")
            assert response is not None and response.status == 404
            assert await page.text_content("h1") == "Page not found"
            await page.get_by_role("link", name="/selftest").wait_for()
            # The favicon the page links: fetched and served, so nothing else fails.
            icon = await page.request.get(base + "/favicon.ico")
            assert icon.status == 200 and icon.headers["content-type"] == "image/svg+xml"
            await check_layout(page, tmp_path / f"not-found-{width}.png")
            assert watch.bad_responses == [f"404 {base}/no-such-page"], watch.bad_responses
            assert len(watch.console) == 1 and "404" in watch.console[0], watch.console
            assert not watch.failed, watch.failed
            await page.close()


async def test_train_check_matches_on_the_default_webgpu_backend(tmp_path: Path) -> None:
    """The default choice of a WebGPU-enabled Chromium: SwiftShader's adapter, DP4A kernels."""
    hashes, losses = golden()
    async with chromium(webgpu=True) as (base, browser):
        page = await browser.new_page(viewport={"width": 1280, "height": 800})
        watch = Watch()
        watch.attach(page)
        await page.goto(base + "/train-check")
        assert await finished(page) == "done"
        result = await result_json(page)
        await page.screenshot(path=str(tmp_path / "train-check-webgpu.png"), full_page=True)
        assert_clean(watch, "/train-check with WebGPU")
    assert result["backend"] == "webgpu-dp4a" and result["on_gpu"] is True, result["demotions"]
    assert result["hashes"] == hashes
    assert [s["loss_bits"] for s in result["steps"]] == losses
    assert result["all_match"] is True


# --- planted vectors: the page must say so ---------------------------------------------------

PLANTED_STEPS = 4  # the planted manifests train 4 steps: enough to see steps 1-3 pass


def planted_files(*, flip_loss_step: int | None = None, bad_sha: bool = False) -> dict[str, bytes]:
    """A 4-step copy of the committed case under /planted/: one loss bit flipped (its SHA-256
    recomputed, so only the comparison can catch it), or the x blob's SHA-256 wrong."""
    manifest = json.loads((VECTORS / "manifest.json").read_text(encoding="utf-8"))
    case = next(c for c in manifest["cases"] if c["name"] == "train_run.tiny")
    case["params"]["steps"] = PLANTED_STEPS
    files = {}
    for section, name in (("inputs", "x"), ("inputs", "y"), ("outputs", "loss")):
        entry = case[section][name]
        files[entry["blob"]] = (VECTORS / entry["blob"]).read_bytes()
    loss = case["outputs"]["loss"]
    if flip_loss_step is not None:
        bits = bytearray(files[loss["blob"]])
        bits[4 * (flip_loss_step - 1)] ^= 1  # the lowest mantissa bit of that step's loss
        files[loss["blob"]] = bytes(bits)
        loss["sha256"] = hashlib.sha256(bits).hexdigest()
    if bad_sha:
        case["inputs"]["x"]["sha256"] = "0" * 64
    files["manifest.json"] = json.dumps({"cases": [case]}).encode()
    return files


async def serve_planted(page: Any, files: dict[str, bytes]) -> None:
    async def handler(route: Any) -> None:
        relative = urlsplit(route.request.url).path.removeprefix("/planted/")
        body = files.get(relative)
        if body is None:
            await route.fulfill(status=404, body="not planted")
            return
        kind = "application/json" if relative.endswith(".json") else "application/octet-stream"
        await route.fulfill(status=200, body=body, content_type=kind)

    await page.route(lambda url: urlsplit(url).path.startswith("/planted/"), handler)


async def test_train_check_reports_a_planted_wrong_loss(tmp_path: Path) -> None:
    async with chromium() as (base, browser):
        page = await browser.new_page(viewport={"width": 390, "height": 844})
        watch = Watch()
        watch.attach(page)
        await serve_planted(page, planted_files(flip_loss_step=3))
        await page.goto(base + "/train-check?backend=cpu&vectors=/planted/manifest.json")
        assert await finished(page) == "done"
        result = await result_json(page)
        await check_layout(page, tmp_path / "train-check-mismatch-390.png")
        status = await page.text_content("#status")
        hint = page.locator("#hint")
        cells = await page.locator("#steps tbody tr td:nth-child(4)").all_text_contents()
        outcome = await page.get_attribute("body", "data-outcome")
        hint_text = await hint.text_content()
        assert await hint.is_visible()
        assert_clean(watch, "/train-check with a planted loss")
    assert result["all_match"] is False
    assert [s["loss_ok"] for s in result["steps"]] == [True, True, False, True]
    assert all(s["hash_ok"] for s in result["steps"])  # the weights are right; the loss bits not
    assert outcome == "mismatch"
    assert status == "✗ MISMATCH with the Python reference from step 3 on js-cpu", status
    assert cells == ["yes", "yes", "NO: loss", "yes"]
    assert hint_text is not None and "must not train" in hint_text


async def test_train_check_refuses_a_blob_that_fails_its_sha256(tmp_path: Path) -> None:
    async with chromium() as (base, browser):
        page = await browser.new_page(viewport={"width": 390, "height": 844})
        watch = Watch()
        watch.attach(page)
        await serve_planted(page, planted_files(bad_sha=True))
        await page.goto(base + "/train-check?backend=cpu&vectors=/planted/manifest.json")
        assert await finished(page) == "error"
        await check_layout(page, tmp_path / "train-check-bad-sha-390.png")
        status = await page.text_content("#status")
        hint_text = await page.locator("#hint").text_content()
        steps = await page.locator("#steps tbody tr").count()
    assert status == "✗ train check failed: x: SHA-256 differs", status
    assert hint_text is not None and "arrived damaged" in hint_text
    assert steps == 0
    # The page reports the refusal loudly, and nothing else went wrong.
    assert len(watch.console) == 1 and "SHA-256 differs" in watch.console[0], watch.console
    assert not watch.bad_responses and not watch.failed
