"""Audits' building blocks in Chromium (docs/TRUST.md): statements, keys and signatures, and the
draw give the golden bits of tests/vectors/audit/ on both paths a page can take.

- **Secure context** (the page at 127.0.0.1): ``crypto.subtle`` with Ed25519, so
  ``p2p/auditkey.js`` signs and verifies with Chromium's own Ed25519 (BoringSSL) and hashes
  chunks with its own SHA-256.
- **Not a secure context** (the same server at the namespace's address 10.231.0.1 over plain
  http, as a phone on the LAN meets it): no ``crypto.subtle`` at all, so every signature goes
  through ``numerics/ed25519.js`` and every digest through ``numerics/sha256.js``.

The page runs tests/js/audit_checks.mjs, the checks Node runs, and also times the fallback's
signature and verification (printed; docs/TRUST.md "Signing speed"). Skipped when Chromium,
Playwright or the network namespace is missing.

Contributions (``contributions.json``): on both paths the page's CPU tier recomputes every case
through tests/js/contribution_checks.mjs (the check Node runs): a ``WorkerReplica`` on a real
module Worker (``train/worker.js``, backend ``js-cpu``, the WebAssembly SIMD kernels where its
gates pass in this Chromium), its state from the vectors' seed and local steps, every chunk
digest, the float32 mean's digest and the data digest. This file has no WebGPU page, so the
WGSL tier's contributions are not checked here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from mesh_helpers import needs_namespace
from selftest_helpers import CHROMIUM, OFFLINE_FLAGS, async_api

REPO = Path(__file__).resolve().parents[2]
NET = "10.231.0.1"  # the namespace's veth address (tests/conftest.py): another device's view
pytestmark = [needs_namespace, pytest.mark.timeout(300)]

# Runs every check in the page; returns what it found and which implementations it used.
CHECKS = """
async () => {
  const checks = await import('/audit_checks.mjs');
  const st = await import('/js/p2p/statements.js');
  const ak = await import('/js/p2p/auditkey.js');
  const dr = await import('/js/p2p/draw.js');
  const ed = await import('/js/numerics/ed25519.js');
  const sha = await import('/js/numerics/sha512.js');
  const { hashImplementation } = await import('/js/numerics/hash.js');
  const load = async (name) => (await fetch(`/vectors/audit/${name}`)).json();
  const [statements, keys, draw] = await Promise.all(
    ['statements.json', 'keys.json', 'draw.json'].map(load));
  // the fallback's speed: a contribution commit of a 3-peer roster, signed and verified
  const seed = checks.fromHex(keys.random[0].seed);
  const msg = new Uint8Array(62 + 97 + 3 * 32);
  const pub = ed.publicKey(seed);
  let sig = ed.sign(seed, msg);
  let t0 = performance.now();
  for (let i = 0; i < 20; i++) sig = ed.sign(seed, msg);
  const signMs = (performance.now() - t0) / 20;
  t0 = performance.now();
  for (let i = 0; i < 20; i++) if (!ed.verify(pub, msg, sig)) throw new Error('verify');
  const verifyMs = (performance.now() - t0) / 20;
  return {
    secure: isSecureContext,
    subtle: !!globalThis.crypto?.subtle,
    ed25519: await ak.ed25519Implementation(),
    sha256: hashImplementation(),
    statements: await checks.statementMismatches(st, statements),
    keys: await checks.keyMismatches(ak, keys),
    plain: checks.ed25519Mismatches(ed, sha, keys),
    draw: checks.drawMismatches(dr, draw),
    signMs, verifyMs,
  };
}
"""


# Recomputes every contribution of contributions.json on the page's CPU tier, in a real worker.
CONTRIBUTIONS = """
async () => {
  const checks = await import('/contribution_checks.mjs');
  const mr = await import('/js/p2p/modelreplica.js');
  const { modelConfig } = await import('/js/model/config.js');
  const { adamwConfig } = await import('/js/model/optim.js');
  const { sampleBatch, sampleOffsets } = await import('/js/model/batches.js');
  const { chunkDigest, dataDigest } = await import('/js/p2p/statements.js');
  const { TrainWorker } = await import('/js/train/client.js');
  const { hashImplementation } = await import('/js/numerics/hash.js');
  const vectors = await (await fetch('/vectors/audit/contributions.json')).json();
  const modules = { WorkerReplica: mr.WorkerReplica, tokenRows: mr.tokenRows, modelConfig,
    adamwConfig, sampleBatch, sampleOffsets, chunkDigest, dataDigest };
  const selections = [];
  const makeWorker = () => {
    const w = new TrainWorker();
    w.addEventListener('selection', (e) => selections.push(e.detail));
    return w;
  };
  const bad = await checks.contributionMismatches(vectors, modules, { makeWorker });
  return { bad, cases: vectors.cases.length, sha256: hashImplementation(),
    backends: [...new Set(selections.map((s) => s.backend))],
    wasm: selections.map((s) => s.wasm.enabled),
    elementwise: selections.map((s) => s.elementwise.enabled) };
}
"""


async def _page(request: web.Request) -> web.Response:
    return web.Response(text="<!doctype html><title>audit checks</title>", content_type="text/html")


async def _checks(request: web.Request) -> web.FileResponse:
    response = web.FileResponse(REPO / "tests" / "js" / "audit_checks.mjs")
    response.content_type = "text/javascript"
    return response


async def _contribution_checks(request: web.Request) -> web.FileResponse:
    response = web.FileResponse(REPO / "tests" / "js" / "contribution_checks.mjs")
    response.content_type = "text/javascript"
    return response


@asynccontextmanager
async def server() -> AsyncIterator[int]:
    """The page's modules and WebAssembly kernels, the checks and the vectors, on one port at
    127.0.0.1 and at NET."""
    app = web.Application()
    app.router.add_get("/", _page)
    app.router.add_get("/audit_checks.mjs", _checks)
    app.router.add_get("/contribution_checks.mjs", _contribution_checks)
    app.router.add_static("/js/", REPO / "static" / "js")
    app.router.add_static("/wasm/", REPO / "static" / "wasm")  # the CPU tier's SIMD kernels
    app.router.add_static("/vectors/audit/", REPO / "tests" / "vectors" / "audit")
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        loopback = web.TCPSite(runner, "127.0.0.1", 0)
        await loopback.start()
        port = runner.addresses[0][1]
        await web.TCPSite(runner, NET, port).start()
        yield port
    finally:
        await runner.cleanup()


async def run_checks(browser: Any, url: str, script: str = CHECKS) -> dict[str, Any]:
    page = await browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        await page.goto(url)
        result: dict[str, Any] = await page.evaluate(script)
    finally:
        await page.close()
    assert errors == [], errors
    return result


async def test_both_paths_give_the_golden_bits() -> None:
    async with server() as port, async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=OFFLINE_FLAGS)
        try:
            secure = await run_checks(browser, f"http://127.0.0.1:{port}/")
            lan = await run_checks(browser, f"http://{NET}:{port}/")
        finally:
            await browser.close()
    assert (secure["secure"], secure["subtle"], secure["ed25519"], secure["sha256"]) == (
        True,
        True,
        "web-crypto",
        "web-crypto",
    ), secure
    assert (lan["secure"], lan["subtle"], lan["ed25519"], lan["sha256"]) == (
        False,
        False,
        "javascript",
        "javascript",
    ), lan
    for where, result in (("127.0.0.1", secure), (NET, lan)):
        for part in ("statements", "keys", "plain", "draw"):
            assert result[part] == [], f"{where}: {part} differs: {result[part]}"
    print(
        f"ed25519.js in Chromium (plain http): sign {lan['signMs']:.2f} ms, "
        f"verify {lan['verifyMs']:.2f} ms; (secure page, same module) sign "
        f"{secure['signMs']:.2f} ms, verify {secure['verifyMs']:.2f} ms"
    )


async def test_the_cpu_tier_recomputes_every_contribution_on_both_paths() -> None:
    async with server() as port, async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=OFFLINE_FLAGS)
        try:
            secure = await run_checks(browser, f"http://127.0.0.1:{port}/", CONTRIBUTIONS)
            lan = await run_checks(browser, f"http://{NET}:{port}/", CONTRIBUTIONS)
        finally:
            await browser.close()
    assert (secure["sha256"], lan["sha256"]) == ("web-crypto", "javascript")
    for where, result in (("127.0.0.1", secure), (NET, lan)):
        assert result["cases"] > 0 and result["bad"] == [], f"{where}: {result['bad']}"
        # one worker per state, each on the CPU tier the replica asked for
        assert result["backends"] == ["js-cpu"], f"{where}: {result['backends']}"
        print(
            f"{where}: {result['cases']} contributions recomputed on js-cpu (WebAssembly GEMM "
            f"{result['wasm']}, elementwise {result['elementwise']})"
        )
