"""The page as a second device on the LAN meets it (issue 17): opened at the namespace's network
address (10.231.0.1, conftest.py), never 127.0.0.1, which browsers always treat as secure.

- https with the certificate the server made (``tls.ensure_certificate``): Chromium trusts
  exactly that certificate (``--ignore-certificate-errors-spki-list``, standing in for a person
  accepting it once); the page is a secure context with Web Crypto, WebGPU, OPFS and
  cross-origin isolation, and trains on WebGPU (the WGSL products forced) in one run with a
  Python peer that pins the same certificate: identical hashes at every step.
- plain http at the same address (the same server also listening on https): the browser
  withholds all of that even with WebGPU enabled; the page says so, links the https address,
  and trains on the CPU tier, hashing in JavaScript, with identical hashes and no console error.
- plain http from a server without https: the notice says, word for word, how to get https.
- a page on the server's machine (127.0.0.1) hands out the LAN address: "Add a device" shows
  the https address and its QR code, and a private room's link.

Screenshots at 390x844 and 1280x800 of each page are written to the test's tmp folder.
"""

from __future__ import annotations

import ipaddress
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import page_helpers
from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBGPU_FLAG, WEBRTC_FLAGS
from daisychain.server import tls
from daisychain.server.app import Listener, serve_listeners
from mesh_helpers import FAST, finish, lead_config, needs_namespace, start_peer
from page_helpers import DESKTOP, PHONE, Tab, screenshot, shows, until
from server_fixtures import ByteTokenizer, config

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
async_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)
pytestmark = [needs_namespace, pytest.mark.timeout(600)]

NET = "10.231.0.1"  # the namespace's veth address (conftest.py): another device's view
TIMERS = f"repair_after={FAST.repair_after_s}&step_timeout={FAST.step_timeout_s}"

# What the page has and what it did, as JSON.
STATE = """
async () => {
  const { app } = await import('/js/app.js');
  const p = app.peer;
  return {
    id: p?.id ?? '', records: p?.records ?? [], backend: app.selection?.backend ?? null,
    outcome: p?.outcome ? { reason: p.outcome.reason, message: p.outcome.message } : null,
    errors: app.errors, status: document.getElementById('status').textContent,
    secure: isSecureContext, subtle: !!globalThis.crypto?.subtle, gpu: 'gpu' in navigator,
    opfs: !!navigator.storage?.getDirectory, isolated: crossOriginIsolated,
  };
}
"""


def pin(certificate: tls.Certificate) -> bytes:
    return bytes.fromhex(certificate.fingerprint.removeprefix("SHA256:").replace(":", ""))


@asynccontextmanager
async def chromium(certificate: tls.Certificate, webgpu: bool = True) -> AsyncIterator[Any]:
    """Chromium that trusts exactly ``certificate`` (by its key), WebGPU enabled by default."""
    flags = [
        *OFFLINE_FLAGS, *WEBRTC_FLAGS, *([WEBGPU_FLAG] if webgpu else []),
        f"--ignore-certificate-errors-spki-list={certificate.spki_sha256}",
    ]  # fmt: skip
    async with async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def lan_server(
    tmp_path: Path, *, plain_too: bool = False, https: bool = True
) -> AsyncIterator[tuple[tls.Certificate, list[str]]]:
    """The real server at the network address: https with a made certificate (and plain http
    on a second port), or plain http only (``https=False``: the certificate is made all the
    same, for the browser's flags); yields the certificate and the URLs, https first."""
    certificate = tls.ensure_certificate(
        tmp_path / "state", tls.local_names(), [ipaddress.ip_address(NET)]
    )
    listeners = [Listener(NET, 0, certificate)] if https else []
    if plain_too or not https:
        listeners.append(Listener(NET, 0))
    async with serve_listeners(config(), listeners, tokenizer=ByteTokenizer) as urls:
        yield certificate, urls


async def open_tab(browser: Any, url: str, viewport: dict[str, int] = PHONE) -> Tab:
    context = await browser.new_context(viewport=viewport)
    page = await context.new_page()
    tab = page_helpers.watch(Tab(page), hosts=(NET,))
    response = await page.goto(url)
    assert response is not None and response.ok, f"GET {url}: {response}"
    return tab


async def state(tab: Tab) -> dict[str, Any]:
    result: dict[str, Any] = await tab.page.evaluate(STATE)
    return result


async def train_with_a_python_peer(
    tab: Tab, url: str, certificate: tls.Certificate, **run: Any
) -> Any:
    """The tab joins; a Python peer pinning ``certificate`` leads a short run (4 steps, or
    rounds, with ``run``'s config fields); returns the peer once both are done (the tab's
    records are read by the caller)."""
    await page_helpers.joined(tab)
    lead = await start_peer(url, "py-lead", lead=lead_config(4, min_peers=2, **run),
                            fingerprint=pin(certificate))  # fmt: skip
    [outcome] = await finish([lead], 400)
    assert outcome.reason == "done", outcome

    async def tab_done() -> bool:
        return (await state(tab))["outcome"] is not None

    await until(tab_done, 60, "the tab's outcome")
    return lead


async def test_https_at_the_network_address_trains_on_webgpu_with_a_python_peer(
    tmp_path: Path,
) -> None:
    """Must-show 1."""
    async with (
        lan_server(tmp_path) as (certificate, [url]),
        chromium(certificate) as browser,
    ):
        tab = await open_tab(browser, f"{url}/?{TIMERS}&name=lan-https&backend=webgpu-dp4a")
        s = await state(tab)
        assert s["secure"] and s["subtle"] and s["gpu"] and s["opfs"] and s["isolated"], s
        lead = await train_with_a_python_peer(tab, url, certificate)
        s = await state(tab)
        assert s["outcome"]["reason"] == "done", s
        assert s["backend"] == "webgpu-dp4a"
        got = {r["step"]: r["hash"] for r in s["records"]}
        assert sorted(got) == [1, 2, 3, 4]
        assert got == lead.hashes
        # Every gradient the tab computed ran on the GPU (protocol v2: step 1 is shared equally,
        # later steps by measured speed, so a slow tab may follow some without computing).
        computed = [r for r in s["records"] if r["share"] > 0]
        assert computed and computed[0]["step"] == 1, s["records"]
        assert all(r["computedOn"] == "webgpu-dp4a" and r["gpuProducts"] > 0
                   for r in computed), s["records"]  # fmt: skip
        assert not await tab.page.locator(".insecure").count()
        # Add a device: this page's own address, and its QR code.
        assert await tab.page.get_by_label("Address of this group").input_value() == f"{url}/"
        await until(tab.page.locator(".qr").is_visible, 30, "the QR code")
        assert await tab.page.locator(".qr").get_attribute("alt") == f"QR code of {url}/"
        await page_helpers.check_page(tab, "https at the network address")
        await screenshot(tab, "lan-https-phone", tmp_path)
        await tab.page.set_viewport_size(DESKTOP)
        await page_helpers.check_page(tab, "https at the network address, desktop")
        await screenshot(tab, "lan-https-desktop", tmp_path)


async def test_plain_http_at_the_network_address_trains_on_the_cpu_and_points_to_https(
    tmp_path: Path,
) -> None:
    """Must-show 2: WebGPU is enabled in this browser, yet over plain http it is withheld."""
    async with (
        lan_server(tmp_path, plain_too=True) as (certificate, [https_url, http_url]),
        chromium(certificate) as browser,
    ):
        tab = await open_tab(browser, f"{http_url}/?{TIMERS}&name=lan-http")
        s = await state(tab)
        assert not (s["secure"] or s["subtle"] or s["gpu"] or s["opfs"] or s["isolated"]), s
        https_port = https_url.rsplit(":", 1)[1]
        notice = await shows(tab, ".insecure", r"Plain http")
        assert "WebGPU" in notice and "saves in the browser" in notice, notice
        assert certificate.fingerprint in notice, notice
        link = await tab.page.locator(".insecure a").get_attribute("href")
        assert link == f"https://{NET}:{https_port}/?{TIMERS}&name=lan-http", link
        # The Python peer reaches the same server over https (pinned): one group.
        lead = await train_with_a_python_peer(tab, https_url, certificate)
        s = await state(tab)
        assert s["outcome"]["reason"] == "done", s
        assert s["backend"] == "js-cpu"
        got = {r["step"]: r["hash"] for r in s["records"]}
        assert sorted(got) == [1, 2, 3, 4]
        assert got == lead.hashes
        readiness = await tab.page.locator("#readiness").inner_text()
        assert "browsers offer WebGPU only over https" in readiness, readiness
        keep = await tab.page.locator("#keep").inner_text()
        assert "only over https" in keep, keep
        assert await tab.page.get_by_label("Address of this group").input_value() == (
            f"{http_url}/"
        )
        await page_helpers.check_page(tab, "plain http at the network address")
        await screenshot(tab, "lan-http-phone", tmp_path)
        await tab.page.set_viewport_size(DESKTOP)
        await page_helpers.check_page(tab, "plain http at the network address, desktop")
        await screenshot(tab, "lan-http-desktop", tmp_path)


# The Readiness panel's "Plain http" box from a server without https, word for word: what the
# browser withholds, then how to get https (no link: there is no https address to give).
PLAIN_ONLY_NOTICE = [
    "Plain http: this page trains, but without WebGPU (it trains on its CPU), saves in the "
    "browser, Web Crypto (it hashes in JavaScript).",
    "This server serves plain http only: whoever runs it can restart it with --https, then open "
    "the https:// address it prints (docs/USAGE.md, On your LAN).",
]

# dom.js in the page: `h` and `fill` skip null, undefined and false children (the DOM's own
# append and replaceChildren write null as the text "null").
DOM_CHILDREN = """
async () => {
  const { fill, h } = await import('/js/page/dom.js');
  const box = document.createElement('div');
  box.append('stale');
  return {
    h: h('p', {}, 'a', null, undefined, false, ['b', null, h('i', {}, null, 'c')]).textContent,
    fill: fill(box, 'a', null, undefined, false, ['b', null]).textContent,
    emptied: fill(box, ...[]).childNodes.length,
  };
}
"""


async def test_plain_http_only_at_the_network_address_says_exactly_how_to_get_https(
    tmp_path: Path,
) -> None:
    """Issue 41: a server without https once left the word "null" at the end of the box."""
    async with (
        lan_server(tmp_path, https=False) as (certificate, [http_url]),
        chromium(certificate, webgpu=False) as browser,
    ):
        assert http_url.startswith(f"http://{NET}:"), http_url
        tab = await open_tab(browser, f"{http_url}/?{TIMERS}&name=lan-plain")
        assert not (await state(tab))["secure"]
        await shows(tab, ".insecure", r"Plain http")
        box = tab.page.locator("#readiness .insecure")
        assert await box.locator(":scope > *").all_text_contents() == PLAIN_ONLY_NOTICE
        # Nothing beside the paragraphs (a stray text node was the "null").
        assert await box.text_content() == "".join(PLAIN_ONLY_NOTICE)
        assert not await box.locator("a").count()
        assert await tab.page.evaluate(DOM_CHILDREN) == {"h": "abc", "fill": "ab", "emptied": 0}
        await page_helpers.check_page(tab, "plain http only at the network address")
        await screenshot(tab, "lan-plain-only-phone", tmp_path)
        await tab.page.set_viewport_size(DESKTOP)
        await page_helpers.check_page(tab, "plain http only at the network address, desktop")
        await screenshot(tab, "lan-plain-only-desktop", tmp_path)


async def test_plain_http_at_the_network_address_follows_an_outer_run(tmp_path: Path) -> None:
    """An outer run (issue 21) as a second device meets it: no Web Crypto, so the outer hash is
    computed in JavaScript, and the tab's hash after every round is the Python leader's."""
    async with (
        lan_server(tmp_path, plain_too=True) as (certificate, [https_url, http_url]),
        chromium(certificate) as browser,
    ):
        tab = await open_tab(browser, f"{http_url}/?{TIMERS}&name=lan-outer")
        assert not (await state(tab))["subtle"]
        outer = {"sync": "outer", "outer_steps": 2, "outer_lr": 0.7, "outer_momentum": 0.9}
        lead = await train_with_a_python_peer(tab, https_url, certificate, **outer)
        s = await state(tab)
        assert s["outcome"]["reason"] == "done", s
        got = {r["step"]: r["hash"] for r in s["records"]}
        assert sorted(got) == [1, 2, 3, 4] and got == lead.hashes
        await shows(tab, "#live .live-sync", r"round 4 of 4: 2 inner steps per device per round")
        await page_helpers.check_page(tab, "an outer run over plain http")
        await screenshot(tab, "lan-outer-phone", tmp_path)


async def test_a_page_on_the_server_machine_hands_out_the_lan_address(tmp_path: Path) -> None:
    """At 127.0.0.1 the page's own address is useless to a phone: Add a device shows the
    server's https LAN address (and its QR code), and a private room's link there."""
    certificate = tls.ensure_certificate(
        tmp_path / "state", ["localhost"], [ipaddress.ip_address(a) for a in ("127.0.0.1", NET)]
    )
    listeners = [Listener("0.0.0.0", 0, certificate)]
    async with (
        serve_listeners(config(), listeners, tokenizer=ByteTokenizer) as [url],
        chromium(certificate, webgpu=False) as browser,
    ):
        port = url.rsplit(":", 1)[1]
        lan = f"https://{NET}:{port}/"
        context = await browser.new_context(viewport=PHONE)
        page = await context.new_page()
        tab = page_helpers.watch(Tab(page))
        await page.goto(f"https://127.0.0.1:{port}/?name=host")
        address = page.get_by_label("Address of this group")

        async def lan_shown() -> bool:
            return await address.input_value() == lan

        await until(lan_shown, 60, "the LAN address")
        await until(page.locator(".qr").is_visible, 30, "the QR code")
        assert await page.locator(".qr").get_attribute("alt") == f"QR code of {lan}"
        note = await page.locator(".invite-note").inner_text()
        assert certificate.fingerprint in note, note
        await screenshot(tab, "lan-host-phone", tmp_path, focus="#group")
        await page.get_by_role("button", name="Private room").click()
        link = page.get_by_label("Link to this private room")

        async def room_link() -> bool:
            return (await link.count()) > 0 and (await link.input_value()).startswith(
                f"{lan}?room="
            )

        await until(room_link, 60, "the room's LAN link")
        code = (await link.input_value()).split("?room=", 1)[1]
        assert code and code in page.url
        tab.check_clean()
