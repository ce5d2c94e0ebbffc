"""The JS protocol machine (static/js/p2p/machine/) replays every conformance trace in Chromium.

Headless Debian Chromium (Playwright, ``executable_path=/usr/bin/chromium``, the offline flags)
opens a blank page at the real DaisyChain server's origin; the page imports the trace replay
(``tests/js/traces/playback.js``) and what it imports: the machine, frames.js with Chromium's own
``DecompressionStream``, crypto.subtle for SHA-256, and fetches each trace of
``tests/vectors/protocol/`` itself, as a second implementation would. The blank page is this
test's; the replay, the product modules it imports and the traces come from the checkout
through the test route of tests/repo_route.py (under ``/repo/``), never from the product
server, which serves no test module. Every trace must
replay to exactly the Python effects, and so must the scenarios and perturbed event sequences that
``tests/protocol_variants.py`` has the Python machine play at test time; a trace with one payload
hash changed must be refused with the exact step and field named. The config-equality cases
(``tests/vectors/config_equality.json``: a second config differing in any one field is
``wrong-run``) replay the same way. No WebRTC: no namespace.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web

import repo_route
from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS
from daisychain.server.app import create_app
from protocol_variants import extra_scenarios, perturbed
from server_fixtures import ByteTokenizer, config

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "vectors" / "protocol"
CONFIG_CASES = REPO / "tests" / "vectors" / "config_equality.json"
PAGE = "/protocol-replay.html"  # answered by this test, not by the server
BLANK = "<!doctype html><meta charset='utf-8'><title>protocol replay</title><body></body>"

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
async_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)

# Replays the named traces in the page (fetched by the page), then the traces handed over
# (`more`: played by the Python machine at test time), then the perturbed one.
REPLAY = """
async ([names, more, perturbed]) => {
  const R = await import('/repo/tests/js/traces/playback.js');
  const D = await import('/repo/static/js/p2p/deflate.js');
  const results = [];
  const t0 = performance.now();
  for (const name of names) {
    const response = await fetch(`/repo/tests/vectors/protocol/${name}`);
    if (!response.ok) throw new Error(`GET ${name}: ${response.status}`);
    const trace = await response.json();
    try {
      results.push({ name, events: await R.replay(trace), error: null });
    } catch (exc) {
      results.push({ name, events: 0, error: `${exc.name}: ${exc.message}` });
    }
  }
  const ms = performance.now() - t0;
  const beyond = [];
  for (const trace of more) {
    try {
      beyond.push({ name: trace.name, events: await R.replay(trace), error: null });
    } catch (exc) {
      beyond.push({ name: trace.name, events: 0, error: `${exc.name}: ${exc.message}` });
    }
  }
  let mismatch = null;
  try {
    await R.replay(perturbed);
  } catch (exc) {
    mismatch = `${exc.name}: ${exc.message}`;
  }
  return { results, ms, beyond, mismatch, rawDeflate: D.usesRawFormat() };
}
"""


# Each config-equality case: the stored start with the case's step appended, replayed; then
# sameConfig itself on the base and the case's config.
CONFIG_REPLAY = """
async (vectors) => {
  const R = await import('/repo/tests/js/traces/playback.js');
  const { sameConfig } = await import('/repo/static/js/p2p/machine/machine.js');
  const { parse } = await import('/repo/static/js/p2p/messages.js');
  const base = parse(vectors.base);
  const out = [];
  for (const c of vectors.cases) {
    const trace = { ...vectors.trace, name: c.name, steps: [...vectors.trace.steps, c.step] };
    let error = null;
    try {
      await R.replay(trace);
    } catch (exc) {
      error = `${exc.name}: ${exc.message}`;
    }
    out.push({ name: c.name, error, same: sameConfig(base, parse(c.step.event.text)) });
  }
  return out;
}
"""


@asynccontextmanager
async def product_server() -> AsyncIterator[str]:
    """The real DaisyChain app on 127.0.0.1 (free port, offline data); yields its base URL."""
    runner = web.AppRunner(create_app(config(), tokenizer=ByteTokenizer))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def _blank(route: Any) -> None:
    await route.fulfill(status=200, body=BLANK, content_type="text/html; charset=utf-8")


@asynccontextmanager
async def blank_page() -> AsyncIterator[tuple[Any, list[str], list[str]]]:
    """Chromium on the blank page at the product server's origin; yields the page, the console
    errors and the requests that left 127.0.0.1 (both lists fill in while it is open)."""
    errors: list[str] = []
    foreign: list[str] = []
    async with product_server() as base, async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=OFFLINE_FLAGS)
        try:
            page = await browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))

            def on_request(request: Any) -> None:
                parts = urlsplit(request.url)
                if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname != "127.0.0.1":
                    foreign.append(request.url)

            page.on("request", on_request)
            await page.route(base + PAGE, _blank)
            await repo_route.install(page.context, base)
            response = await page.goto(base + PAGE)
            assert response is not None and response.ok
            yield page, errors, foreign
        finally:
            await browser.close()


def perturbed_trace() -> tuple[dict[str, Any], str]:
    """leader-3-peers with its first payload's SHA-256 changed, and the refusal it must get."""
    trace = json.loads((TRACES / "leader-3-peers.json").read_text(encoding="utf-8"))
    bad = copy.deepcopy(trace)
    i, step = next(
        (i, s) for i, s in enumerate(bad["steps"])
        if any(f["effect"] == "send-payload" for f in s["effects"])
    )  # fmt: skip
    k, effect = next((k, f) for k, f in enumerate(step["effects"]) if f["effect"] == "send-payload")
    real = effect["sha256"]
    effect["sha256"] = "0" * 64
    at = step["event"]["at"]
    at_text = str(int(at)) if float(at).is_integer() else str(at)  # as JavaScript prints it
    expected = (
        f"TraceMismatch: leader-3-peers: step {i} ({step['event']['event']} at {at_text}): "
        f'effects[{k}].sha256: expected "{"0" * 64}", got "{real}"'
    )
    return bad, expected


async def test_every_protocol_trace_replays_in_chromium() -> None:
    names = sorted(p.name for p in TRACES.glob("*.json"))
    assert len(names) >= 23
    changed, refusal = perturbed_trace()
    variants, crashes = perturbed(TRACES, seed=20261202, variants=3)
    assert not crashes, crashes
    more = extra_scenarios() + variants
    async with blank_page() as (page, errors, foreign):
        result = await page.evaluate(REPLAY, [names, more, changed])
    failed = [r for r in result["results"] if r["error"] is not None]
    assert not failed, failed
    steps = {
        p.name: len(json.loads(p.read_text(encoding="utf-8"))["steps"])
        for p in TRACES.glob("*.json")
    }
    assert {r["name"]: r["events"] for r in result["results"]} == steps
    assert result["rawDeflate"], "Chromium inflated without its own DecompressionStream"
    assert [r for r in result["beyond"] if r["error"] is not None] == []
    assert [r["events"] for r in result["beyond"]] == [len(t["steps"]) for t in more]
    assert result["mismatch"] == refusal
    assert not errors, f"console errors: {errors}"
    assert not foreign, f"the page reached outside the test server: {foreign}"
    print(f"chromium: {len(names)} traces, {sum(steps.values())} events replayed in "
          f"{result['ms']:.0f} ms; {len(more)} more played by Python at test time")  # fmt: skip


async def test_every_config_equality_case_replays_in_chromium() -> None:
    """A second config differing in any one field (outer.overlap and outer.cut included) is
    wrong-run in Chromium too, with exactly the Python machine's effects."""
    vectors = json.loads(CONFIG_CASES.read_text(encoding="utf-8"))
    async with blank_page() as (page, errors, foreign):
        result = await page.evaluate(CONFIG_REPLAY, vectors)
    assert [r["name"] for r in result] == [c["name"] for c in vectors["cases"]]
    assert [r for r in result if r["error"] is not None] == []
    assert [r["same"] for r in result] == [c["expect"] == "accepted" for c in vectors["cases"]]
    refused = {c["field"] for c in vectors["cases"] if c["expect"] == "wrong-run"}
    assert {"outer.overlap", "outer.cut"} <= refused and set(vectors["fields"]) <= refused
    assert not errors, f"console errors: {errors}"
    assert not foreign, f"the page reached outside the test server: {foreign}"
