"""The two Chromium sides of ``bench cpu-tier``: ours in a page of the real app, TF.js in a page of
the bench's own loopback server.

- Ours: ``cputier_ours.mjs`` in a tab of the real app (``wasm.evaluate_in_app_page``: its CSP and
  its cross-origin isolation, as the page's training worker gets them).
- TF.js: a small aiohttp server on 127.0.0.1 that serves one page, TF.js's browser bundles and
  the wasm backend's binaries from the install folder
  (``bench.rig.tfjs_cache.BROWSER_FILES``; nothing from
  static/ or a CDN) and ``tfjs_gpt.mjs``, every response with COOP/COEP so the page is
  cross-origin isolated and TF.js may start its threaded SIMD build (``threads``: its
  ``setThreadsCount``, 0 = one per core as ``navigator.hardwareConcurrency`` says).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from daisychain.bench.rig.chromium import OFFLINE_FLAGS, served_page
from daisychain.bench.rig.tfjs_cache import BROWSER_FILES
from daisychain.bench.wasm import evaluate_in_app_page

OURS = Path(__file__).with_name("cputier_ours.mjs")
OURS_PATH = "/bench/cputier_ours.mjs"
TFJS_GPT = Path(__file__).with_name("tfjs_gpt.mjs")

# Cross-origin isolation (SharedArrayBuffer, so TF.js's threaded build), the headers the app
# itself sends (server/static.py security_headers).
ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
}

_TFJS_HTML = """<!doctype html>
<meta charset="utf-8"><title>bench cpu-tier: TF.js</title>
<script src="/tfjs/tf.min.js"></script>
<script src="/tfjs/tf-backend-wasm.min.js"></script>
"""

_OURS_PAGE = """
async (jobs) => {
  const { measureOurs } = await import('OURS_PATH');
  const modules = {
    M: await import('/js/model/index.js'),
    enableWasmGemm: (await import('/js/numerics/wasmgate.js')).enableWasmGemm,
    // Absent from builds without the elementwise kernel (null: the JS quantizers).
    enableWasmElementwise: await import('/js/numerics/wasmeltgate.js')
      .then((m) => m.enableWasmElementwise, () => null),
  };
  const results = [];
  for (const job of jobs) results.push(await measureOurs(modules, job));
  return { user_agent: navigator.userAgent, results };
}
""".replace("OURS_PATH", OURS_PATH)

_TFJS_PAGE = """
async ([jobs, threads]) => {
  const { measureTfjs } = await import('/bench/tfjs_gpt.mjs');
  tf.wasm.setWasmPaths('/tfjs/');
  tf.wasm.setThreadsCount(threads > 0 ? threads : navigator.hardwareConcurrency);
  if (!(await tf.setBackend('wasm'))) throw new Error('TF.js could not start its wasm backend');
  await tf.ready();
  const results = [];
  for (const job of jobs) results.push(await measureTfjs(tf, job));
  return { user_agent: navigator.userAgent, tfjs: tf.version.tfjs,
           threads: tf.wasm.getThreadsCount(), cross_origin_isolated: crossOriginIsolated,
           results };
}
"""


def ours(jobs: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    """Our side of every job in one tab of the real app: {user_agent, results}."""
    coro = evaluate_in_app_page({OURS_PATH: OURS}, _OURS_PAGE, jobs, timeout_s)
    result: dict[str, Any] = asyncio.run(coro)
    return result


def tfjs_routes(tfjs_dir: Path) -> Any:
    """The aiohttp application of the TF.js page (files from ``tfjs_dir``)."""
    from aiohttp import web

    Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

    @web.middleware
    async def isolate(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        response.headers.update(ISOLATION_HEADERS)
        return response

    async def page(_request: web.Request) -> web.StreamResponse:
        return web.Response(text=_TFJS_HTML, content_type="text/html")

    async def tfjs_file(request: web.Request) -> web.StreamResponse:
        rel = BROWSER_FILES.get(request.match_info["name"])
        if rel is None:  # only the files the page needs, never a path into the folder
            raise web.HTTPNotFound()
        kind = "application/wasm" if rel.endswith(".wasm") else "text/javascript"
        return web.Response(body=(tfjs_dir / rel).read_bytes(), content_type=kind)

    async def gpt(_request: web.Request) -> web.StreamResponse:
        return web.Response(body=TFJS_GPT.read_bytes(), content_type="text/javascript")

    app = web.Application(middlewares=[isolate])
    app.router.add_get("/", page)
    app.router.add_get("/tfjs/{name}", tfjs_file)
    app.router.add_get("/bench/tfjs_gpt.mjs", gpt)
    return app


@asynccontextmanager
async def _tfjs_page(tfjs_dir: Path) -> AsyncIterator[Any]:
    """The TF.js page on a loopback port in one headless Chromium; both stop on exit."""
    from aiohttp import web

    async with served_page(web.AppRunner(tfjs_routes(tfjs_dir)), OFFLINE_FLAGS) as (base, page):
        await page.goto(base + "/")
        yield page


def tfjs(
    tfjs_dir: Path, jobs: list[dict[str, Any]], threads: int, timeout_s: float
) -> dict[str, Any]:
    """The TF.js side of every job in one Chromium tab:
    {user_agent, tfjs, threads, cross_origin_isolated, results}."""

    async def run() -> dict[str, Any]:
        async with _tfjs_page(tfjs_dir) as page:
            page.set_default_timeout(timeout_s * 1e3)
            result: dict[str, Any] = await page.evaluate(_TFJS_PAGE, [jobs, threads])
            return result

    return asyncio.run(run())
