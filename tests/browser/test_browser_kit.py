"""The inference kit (static/js/kit/) end to end in Debian's Chromium.

A page of the real server decodes and validates the golden checkpoint (static/js/p2p/
checkpoint.js), builds the kit from its weights (kit/build.js) and downloads it through the same
Blob link the page's button uses; the test saves the download to disk and opens it from file://
in a fresh browser context whose every network request is aborted. There a person's actions
(type a prompt, set temperature / top-k / seed / max tokens, press Generate) must give the ids
``daisychain generate`` gives for the same checkpoint and settings, for greedy, sampled,
whole-vocabulary and empty-prompt cases. A setting the rule refuses is refused on the page with
the same text; a kit whose weights were altered refuses to start; at 390 px the kit has no
horizontal overflow and every control a name; no console error and no request leaves the file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS
from selftest_helpers import async_api, product_server
from vectorgen.generation import VECTORS, golden_checkpoint

CASES = ("greedy", "t08-k40-s1", "t1-vocab-s7", "t2-k100-s12", "empty-prompt-sampled")
KIT_MAX_BYTES = 2_000_000  # tiny: 935 KB of float32 weights in base64 + tokenizer + code
PAGE_TIMEOUT_MS = 120_000

_PAGE_BUILD = """
async () => {
  const { decodeCheckpoint } = await import('/js/p2p/checkpoint.js');
  const { buildKit, downloadKit, kitFileName } = await import('/js/kit/build.js');
  const { sha256Hex } = await import('/js/numerics/hash.js');
  const tokBytes = new Uint8Array(await (await fetch('/luts/tokenizer.json')).arrayBuffer());
  const ckResponse = await fetch('/test-data/golden.safetensors');
  const ckBytes = new Uint8Array(await ckResponse.arrayBuffer());
  const ck = await decodeCheckpoint(ckBytes, 'golden.safetensors',
    { tokenizerSha256: await sha256Hex(tokBytes), vocabSize: 2048 });
  const info = { step: ck.state.step, weight_hash: ck.weightHash };
  const html = await buildKit({ model: ck.model, params: ck.state.params, tokenizerBytes: tokBytes,
    info });
  downloadKit(html, kitFileName(info));
  return { length: new TextEncoder().encode(html).length, name: kitFileName(info) };
}
"""


_LAYOUT = """
() => {
  const unnamed = [...document.querySelectorAll('input, textarea, button')]
    .filter((el) => !(el.labels?.length || el.textContent.trim() || el.getAttribute('aria-label')))
    .map((el) => el.id);
  return { scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
    unnamed };
}
"""


def _cli_ids(checkpoint: Path, case: dict[str, Any]) -> dict[str, Any]:
    s = case["settings"]
    argv = [sys.executable, "-m", "daisychain", "generate", str(checkpoint), "--json"]
    argv += ["--prompt", case["prompt"], "--seed", str(s["seed"])]
    argv += ["--max-tokens", str(s["max_tokens"]), "--temperature", str(s["temperature"])]
    if s["top_k"] is not None:
        argv += ["--top-k", str(s["top_k"])]
    else:
        argv += ["--top-k", "2048"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    record: dict[str, Any] = json.loads(out.stdout)
    return record


async def _generate(page: Any, case: dict[str, Any]) -> dict[str, Any]:
    s = case["settings"]
    await page.fill("#prompt", case["prompt"])
    await page.fill("#temperature", str(s["temperature"]))
    await page.fill("#top-k", "" if s["top_k"] is None else str(s["top_k"]))
    await page.fill("#seed", str(s["seed"]))
    await page.fill("#max-tokens", str(s["max_tokens"]))
    await page.evaluate("() => { document.getElementById('ids').textContent = ''; }")
    await page.click("#generate")
    await page.wait_for_selector("#ids:not(:empty)", state="attached", timeout=PAGE_TIMEOUT_MS)
    await page.wait_for_selector("body[data-state='ready']", state="attached")
    result: dict[str, Any] = json.loads(await page.text_content("#ids") or "{}")
    result["status"] = await page.text_content("#status")
    result["output"] = await page.text_content("#output")
    return result


@pytest.mark.timeout(900)
async def test_kit_from_file_url_generates_the_python_ids(tmp_path: Path) -> None:
    golden = golden_checkpoint()
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    cases = {c["name"]: c for c in doc["cases"]}
    errors: list[str] = []
    requests: list[str] = []
    async with product_server() as base, async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=OFFLINE_FLAGS)
        try:
            # 1. build and download the kit in a page of the real server
            context = await browser.new_context(accept_downloads=True)
            page = await context.new_page()
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))

            async def serve_checkpoint(route: Any) -> None:
                await route.fulfill(status=200, body=golden.read_bytes())

            await page.route("**/test-data/golden.safetensors", serve_checkpoint)
            await page.goto(base + "/healthz")
            async with page.expect_download() as waiting:
                built = await page.evaluate(_PAGE_BUILD)
            download = await waiting.value
            kit = tmp_path / built["name"]
            await download.save_as(kit)
            size = kit.stat().st_size
            assert size == built["length"] and 1_000_000 < size < KIT_MAX_BYTES, size
            assert download.suggested_filename == built["name"]
            print(f"\ninference kit (tiny): {size} bytes")
            await context.close()

            # 2. open it from disk with the network cut
            offline = await browser.new_context()

            allowed: set[str] = set()  # the kit file itself; everything else is aborted

            async def refuse(route: Any) -> None:
                if route.request.url in allowed:
                    await route.continue_()
                    return
                requests.append(route.request.url)
                await route.abort()

            await offline.route("**/*", refuse)
            kit_page = await offline.new_page()
            kit_page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            kit_page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            kit_page.on(
                "request",
                lambda r: urlsplit(r.url).scheme != "file" and requests.append(r.url),
            )
            allowed.add(kit.as_uri())
            await kit_page.goto(kit.as_uri())
            await kit_page.wait_for_selector(
                "body[data-state='ready']", state="attached", timeout=PAGE_TIMEOUT_MS
            )
            about = await kit_page.text_content("#about")
            assert about and "trained 24 steps" in about
            assert doc["checkpoint"]["weight_hash"][:12] in about
            # a phone-sized screen: no horizontal overflow, every control named
            await kit_page.set_viewport_size({"width": 390, "height": 844})
            layout = await kit_page.evaluate(_LAYOUT)
            assert layout["scrollWidth"] <= layout["innerWidth"], layout
            assert not layout["unnamed"], layout
            # the check can fail: a too-wide element and an unnamed button are reported
            await kit_page.evaluate(
                "() => { const d = document.createElement('div'); d.id = 'wide';"
                " d.style.width = '2000px'; d.append(document.createElement('button'));"
                " document.body.append(d); }"
            )
            planted = await kit_page.evaluate(_LAYOUT)
            assert planted["scrollWidth"] > planted["innerWidth"] and planted["unnamed"] == [""]
            await kit_page.evaluate("() => document.getElementById('wide').remove()")
            for name in CASES:
                case = cases[name]
                got = await _generate(kit_page, case)
                cli = _cli_ids(golden, case)
                assert got["ids"] == cli["ids"] == case["ids"], name
                assert got["prompt_ids"] == cli["prompt_ids"] == case["prompt_ids"], name
                assert got["stop"] == cli["stop"], name
                assert got["output"] == case["prompt"] + cli["text"], name
                print(f"kit {name}: {got['status']}")

            # 3. a refused setting: the rule's own text, nothing generated
            before = await kit_page.text_content("#ids")
            await kit_page.fill("#temperature", "-1")
            await kit_page.click("#generate")
            await kit_page.wait_for_function(
                "() => document.getElementById('status').textContent.includes('negative')"
            )
            assert await kit_page.text_content("#ids") == before
            for field, value, text in (
                ("#temperature", "0.8", None),
                ("#top-k", "0", "top_k must be a positive integer"),
                ("#top-k", "4096", "exceeds the vocabulary"),
            ):
                await kit_page.fill(field, value)
                if text is None:
                    continue
                await kit_page.click("#generate")
                await kit_page.wait_for_function(
                    f"() => document.getElementById('status').textContent.includes({text!r})"
                )
            await offline.close()

            # 4. altered weights: the kit refuses to start and says why
            html = kit.read_text(encoding="utf-8")
            marker = '<script type="application/octet-stream" id="kit-weights">'
            at = html.index(marker) + len(marker) + 1000
            flipped = "A" if html[at] != "A" else "B"
            bad = tmp_path / "altered.html"
            bad.write_text(html[:at] + flipped + html[at + 1 :], encoding="utf-8")
            damaged = await browser.new_context()
            await damaged.route("**/*", refuse)
            allowed.add(bad.as_uri())
            bad_page = await damaged.new_page()
            await bad_page.goto(bad.as_uri())
            await bad_page.wait_for_selector(
                "body[data-state='error']", state="attached", timeout=PAGE_TIMEOUT_MS
            )
            assert "weights in this file are damaged" in (
                await bad_page.text_content("#status") or ""
            )
            await damaged.close()
        finally:
            await browser.close()
    assert not errors, f"console errors: {errors}"
    assert not requests, f"the kit made requests: {requests}"
