"""The page ``/`` in Firefox (issue 46): Debian's firefox-esr, driven over WebDriver BiDi by
tests/firefox/driver.mjs (tests/firefox_helpers.py), at the namespace's network address
(10.231.0.1, conftest.py) as a second device on the LAN meets it, over https and plain http.

- readiness: over https the page is a secure context (Web Crypto, OPFS, cross-origin isolation,
  the Screen Wake Lock) but Firefox offers no WebGPU on Linux, so the page says "no WebGPU on
  this browser" and computes on the CPU tier, its WebAssembly GEMM on a pool of threads; over
  plain http it says what the browser withholds and links the https address. Both pass the
  kernel probe ("Ready to train.");
- a Firefox tab follows a run a Python peer leads: the same hash at every step; it holds the
  Screen Wake Lock while it trains and saves the final state in the browser (OPFS);
- a Firefox tab leads a run that a Chromium tab and a Python peer follow, one browser on https
  and the other on plain http (both ways): their data channel between Firefox and Chromium opens
  on the network address (each side's selected candidate pair, from getStats), and the three
  hashes are identical at every step and equal to those Python computes outside the mesh for the
  run's config and committed shares.

Every Firefox and Chromium tab ends with no console error, no failed request and no request to
another host. The Chromium tab trusts exactly the server's certificate (by its key); Firefox is
told to accept it (``acceptInsecureCerts``), as a person accepts it once.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import page_helpers
from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBRTC_FLAGS, chromium_missing
from daisychain.server import tls
from daisychain.server.app import Listener, serve_listeners
from firefox_helpers import LEAD, FirefoxTab, firefox, joined, on_ci, open_tab, require
from mesh_helpers import (
    FAST,
    TEST_BATCH,
    TEST_SEQ,
    finish,
    lead_config,
    needs_namespace,
    start_peer,
)
from page_helpers import Tab, until
from server_fixtures import ByteTokenizer, config
from shares_replay import replayed_hashes, shares_of

pytestmark = [needs_namespace, pytest.mark.timeout(600)]

NET = "10.231.0.1"  # the namespace's veth address (conftest.py): another device's view
TIMERS = f"repair_after={FAST.repair_after_s}&step_timeout={FAST.step_timeout_s}"
STEPS = 4

# Installed in a page once it joined: every data channel open then or later records the remote
# peer and the candidate pair in use (getStats; Firefox marks it `selected`, Chromium's transport
# names it): each end's address, port and type. LINKS reads them back, each link still open
# read again now: at the channel's open the controlled end may still use a pair the controlling
# end did not nominate (one CI run saw both ends on different pairs then), so the test waits for
# the pairs to settle (links_agree).
WATCH_LINKS = """
async () => {
  const { app } = await import('/js/app.js');
  const mesh = app.mesh;
  globalThis.testLinks = new Map();
  globalThis.testPair = async (peer) => {
    const link = mesh.links.get(peer);
    if (!link) return null;
    const stats = [...(await link.pc.getStats()).values()];
    const chosen = stats.find((s) => s.type === 'transport')?.selectedCandidatePairId;
    const pair = stats.find((s) => s.type === 'candidate-pair' && (s.selected || s.id === chosen));
    const at = (id) => {
      const c = stats.find((s) => s.id === id);
      return c ? { address: c.address ?? null, port: c.port, type: c.candidateType } : null;
    };
    return { peer, state: pair?.state ?? null,
      local: pair ? at(pair.localCandidateId) : null,
      remote: pair ? at(pair.remoteCandidateId) : null };
  };
  const record = async (peer) => {
    const pair = await globalThis.testPair(peer);
    if (pair) globalThis.testLinks.set(peer, pair);
  };
  mesh.addEventListener('channel-open', (e) => record(e.detail.peer));
  await Promise.all(mesh.openPeers().map(record));
}
"""
LINKS = """
async () => Promise.all([...globalThis.testLinks.values()].map(
  async (seen) => (await globalThis.testPair(seen.peer)) ?? seen))
"""

# Every state the page's wake-lock line goes through (awake.js sets its data-state), from now on.
WATCH_AWAKE = """
() => {
  const line = document.querySelector('.awake-state');
  globalThis.testAwake = [line.dataset.state ?? ''];
  new MutationObserver(() => globalThis.testAwake.push(line.dataset.state ?? ''))
    .observe(line, { attributes: true, attributeFilter: ['data-state'] });
}
"""

# The Chromium tab's view of the page: its id, records and outcome.
CHROMIUM_STATE = """
async () => {
  const { app } = await import('/js/app.js');
  const p = app.peer;
  return { id: p?.id ?? '', records: p?.records ?? [], ended: p?.ended ?? false,
    outcome: p?.outcome ? { reason: p.outcome.reason, message: p.outcome.message } : null };
}
"""


def pin(certificate: tls.Certificate) -> bytes:
    return bytes.fromhex(certificate.fingerprint.removeprefix("SHA256:").replace(":", ""))


@asynccontextmanager
async def lan_server(tmp_path: Path) -> AsyncIterator[tuple[tls.Certificate, str, str]]:
    """The real server at the network address, https (a made certificate) and plain http on a
    second port: yields the certificate and both URLs, https first."""
    certificate = tls.ensure_certificate(
        tmp_path / "state", tls.local_names(), [ipaddress.ip_address(NET)]
    )
    listeners = [Listener(NET, 0, certificate), Listener(NET, 0)]
    async with serve_listeners(config(), listeners, tokenizer=ByteTokenizer) as [https, http]:
        yield certificate, https, http


@asynccontextmanager
async def chromium(certificate: tls.Certificate) -> AsyncIterator[Any]:
    """Chromium (CPU tier) that trusts exactly ``certificate``, by its key (skips, or fails
    under CI, without Chromium or Playwright)."""
    require(chromium_missing(), on_ci())
    from playwright.async_api import async_playwright

    flags = [
        *OFFLINE_FLAGS, *WEBRTC_FLAGS,
        f"--ignore-certificate-errors-spki-list={certificate.spki_sha256}",
    ]  # fmt: skip
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        try:
            yield browser
        finally:
            await browser.close()


def assert_link_on_network(link: dict[str, Any], other: dict[str, Any]) -> None:
    """``link`` (one browser's pair to the other) joins the network address to the port the
    other browser uses. A remote end learned from a connectivity check before its candidate
    was signaled is peer-reflexive, and a browser may leave such an address out of its stats
    (the page was never told it); its port still names the other end. (One run failed on
    Chromium's end when the address alone was compared.)"""
    local, remote = link["local"], link["remote"]
    assert local is not None and remote is not None, link
    assert local["address"] == NET and local["type"] == "host", link
    assert remote["address"] == NET or (remote["type"] == "prflx" and not remote["address"]), link
    assert remote["port"] == other["local"]["port"], (link, other)


async def test_readiness_in_firefox_over_https_and_plain_http(tmp_path: Path) -> None:
    """Must-show 1, readiness: what Firefox gives the page at the network address."""
    async with lan_server(tmp_path) as (_, https, http), firefox(True) as ff:
        tab = await open_tab(ff, f"{https}/?{TIMERS}&name=ff-https", (NET,))
        s = await joined(tab)
        assert s["secure"] and s["subtle"] and s["opfs"] and s["isolated"] and s["wakeLock"], s
        assert not s["gpu"], "Firefox on Linux offered WebGPU: the notes in docs/BROWSERS.md"
        assert s["backend"] == "js-cpu" and s["readiness"] == "Ready to train.", s
        checks = await readiness_checks(tab)
        assert "webgpu-dp4a, webgpu-lut: not available, no WebGPU on this browser" in checks
        # Cross-origin isolated: the WebAssembly GEMM shares its products with helper threads,
        # one per logical core up to 8 (numerics/wasmpool.js).
        cores = await tab.evaluate("() => navigator.hardwareConcurrency")
        threads = f" on {min(cores, 8)} threads" if cores > 1 else ","
        assert f"integer products in WebAssembly SIMD{threads}" in checks, checks
        await tab.check_clean()

        tab = await open_tab(ff, f"{http}/?{TIMERS}&name=ff-http", (NET,))
        s = await joined(tab)
        assert not (s["secure"] or s["subtle"] or s["opfs"] or s["isolated"]), s
        assert not s["wakeLock"], s
        assert s["backend"] == "js-cpu" and s["readiness"] == "Ready to train.", s
        notice = await tab.evaluate("() => document.querySelector('.insecure').innerText")
        assert notice.startswith("Plain http: this page trains, but without WebGPU"), notice
        link = await tab.evaluate("() => document.querySelector('.insecure a').href")
        assert link == f"{https}/?{TIMERS}&name=ff-http", link
        checks = await readiness_checks(tab)
        assert "browsers offer WebGPU only over https" in checks, checks
        # Not isolated over plain http: one thread (no SharedArrayBuffer to share).
        assert "integer products in WebAssembly SIMD, quantization" in checks, checks
        await tab.check_clean()


async def readiness_checks(tab: FirefoxTab) -> str:
    text: str = await tab.evaluate("() => document.querySelector('#readiness .checks').innerText")
    return text


async def firefox_done(tab: FirefoxTab) -> dict[str, Any]:
    """The tab's state once its run ended (outcome set and its end done)."""
    last: dict[str, Any] = {}

    async def ended() -> bool:
        nonlocal last
        last = await tab.state()
        return last["outcome"] is not None and last["ended"]

    await until(ended, 120, "the Firefox tab's outcome")
    return last


async def test_firefox_follows_a_python_leader(tmp_path: Path) -> None:
    """Must-show 1, follower: a Python peer (pinning the certificate) leads over https. Firefox
    holds the Screen Wake Lock during the run and lets it go at its end, and the page saves the
    final state in Firefox's private file storage (OPFS, createWritable)."""
    async with lan_server(tmp_path) as (certificate, https, _), firefox(True) as ff:
        tab = await open_tab(ff, f"{https}/?{TIMERS}&name=ff-follow", (NET,))
        await joined(tab)
        await tab.evaluate(WATCH_AWAKE)
        lead = await start_peer(https, "py-lead", lead=lead_config(STEPS, min_peers=2),
                                fingerprint=pin(certificate))  # fmt: skip
        [outcome] = await finish([lead], 400)
        assert outcome.reason == "done", outcome
        s = await firefox_done(tab)
        assert s["outcome"]["reason"] == "done", s
        got = tab.hashes(s)
        assert sorted(got) == list(range(1, STEPS + 1)), s["records"]
        assert got == lead.hashes
        assert {r["leader"] for r in s["records"]} == {lead.node.id}
        awake = await tab.evaluate("() => globalThis.testAwake")
        assert "held" in awake and awake[-1] == "off", awake
        keep = '() => document.querySelector("#keep").innerText'

        async def saved() -> bool:
            return f"Resume from the saved state at step {STEPS}" in await tab.evaluate(keep)

        await until(saved, 30, "the final state saved in Firefox's private storage")
        await tab.check_clean()


@pytest.mark.parametrize("firefox_scheme", ["https", "http"])
async def test_firefox_leads_chromium_and_a_python_peer(
    tmp_path: Path, firefox_scheme: str
) -> None:
    """Must-show 1, mixed: Firefox on one scheme, Chromium on the other, a Python peer on https;
    the Firefox tab leads (the page's own lead), all three compute step 1 (equal shares)."""
    async with (
        lan_server(tmp_path) as (certificate, https, http),
        firefox(True) as ff,
        chromium(certificate) as browser,
    ):
        ff_url, cr_url = (https, http) if firefox_scheme == "https" else (http, https)
        fox = await open_tab(ff, f"{ff_url}/?{TIMERS}&name=firefox", (NET,))
        fox_id = (await joined(fox))["id"]
        await fox.evaluate(WATCH_LINKS)
        context = await browser.new_context()
        cr = page_helpers.watch(Tab(await context.new_page()), hosts=(NET,))
        response = await cr.page.goto(f"{cr_url}/?{TIMERS}&name=chromium")
        assert response is not None and response.ok, response
        cr_id = await page_helpers.joined(cr)
        await cr.page.evaluate(WATCH_LINKS)
        follower = await start_peer(https, "py-follow", fingerprint=pin(certificate))
        choices = {"preset": "tiny", "steps": STEPS, "batch": TEST_BATCH, "seqLen": TEST_SEQ,
                   "lr": 3e-3, "warmup": 0, "seed": 7, "minPeers": 3}  # fmt: skip
        await fox.evaluate(LEAD, choices)
        [outcome] = await finish([follower], 400)
        assert outcome.reason == "done", outcome
        s = await firefox_done(fox)
        assert s["outcome"]["reason"] == "done", s

        async def chromium_ended() -> bool:
            state = await cr.page.evaluate(CHROMIUM_STATE)
            return state["outcome"] is not None and state["ended"]

        await until(chromium_ended, 120, "the Chromium tab's outcome")
        c = await cr.page.evaluate(CHROMIUM_STATE)
        assert c["outcome"]["reason"] == "done", c
        fox_hashes = FirefoxTab.hashes(s)
        assert sorted(fox_hashes) == list(range(1, STEPS + 1)), s["records"]
        assert {r["step"]: r["hash"] for r in c["records"]} == fox_hashes
        assert follower.hashes == fox_hashes
        assert all(r["leader"] == fox_id for r in s["records"])
        assert all(share > 0 for share in s["records"][0]["shares"]), s["records"][0]
        run = follower.node.config
        assert run is not None
        assert await replayed_hashes(run, shares_of(s["records"])) == fox_hashes
        # WebRTC between the two browsers, on the network address at both ends.
        fox_links: dict[str, Any] = {}
        cr_links: dict[str, Any] = {}

        async def links_agree() -> bool:
            fox_links.update((link["peer"], link) for link in await fox.evaluate(LINKS))
            cr_links.update((link["peer"], link) for link in await cr.page.evaluate(LINKS))
            mine, theirs = fox_links.get(cr_id), cr_links.get(fox_id)
            return bool(mine and theirs and mine["local"] and theirs["local"]
                        and mine["remote"] and theirs["remote"]
                        and mine["remote"]["port"] == theirs["local"]["port"]
                        and theirs["remote"]["port"] == mine["local"]["port"])  # fmt: skip

        with contextlib.suppress(AssertionError):  # the assertions below say which end differs
            await until(links_agree, 20, "both browsers on one candidate pair")
        assert_link_on_network(fox_links[cr_id], cr_links[fox_id])
        assert_link_on_network(cr_links[fox_id], fox_links[cr_id])
        await fox.check_clean()
        cr.check_clean()
