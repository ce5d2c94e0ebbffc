"""The 404 answer: plain text for programs, a small page for a person who mistyped a URL.

A browser navigating to a missing page sends ``Accept: text/html``; it gets the same words as
the text answer plus links to the pages that exist, styled to read on a phone, with the favicon
(so the miss costs one 404, never a second one for ``/favicon.ico``). Everything else (``fetch``,
curl, the tests) gets the text. The requested path is echoed escaped and cut to 200 characters.
"""

from __future__ import annotations

import html

from aiohttp import web

SERVES = "/, /kernels/, /luts/, /vectors/, /ws, /data, /healthz, /api/status"
# (path, what a person finds there): the pages a lost visitor most likely wanted.
PAGES = (
    ("/", "the training page"),
    ("/selftest", "the self-test of this device's backends"),
    ("/train-check", "a ten-step training check against the Python reference"),
)

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Not found · DaisyChain</title>
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<style>
  body {{ font: 16px/1.5 system-ui, sans-serif; margin: 0; color: #1d1d1f; background: #fafafa; }}
  main {{ max-width: 36rem; margin: 0 auto; padding: 2rem 1rem; }}
  h1 {{ font-size: 1.4rem; margin: 0 0 .5rem; }}
  code {{ font: 14px/1.4 ui-monospace, monospace; overflow-wrap: anywhere; }}
  a {{ color: #0b57d0; }}
  li {{ margin: .35rem 0; }}
</style>
</head>
<body>
<main>
<h1>Page not found</h1>
<p>Nothing is served at <code>{path}</code>.</p>
<p>Perhaps you wanted one of these:</p>
<ul>
{links}
</ul>
</main>
</body>
</html>
"""


def not_found(request: web.Request, folder: str) -> web.HTTPNotFound:
    """The 404 for ``request`` (a missing file under ``folder``/), as text or as a page."""
    path = request.path[:200]
    if "text/html" in request.headers.get("Accept", ""):
        links = "\n".join(
            f'<li><a href="{href}">{html.escape(href)}</a>: {html.escape(what)}</li>'
            for href, what in PAGES
        )
        body = _PAGE.format(path=html.escape(path), links=links)
        return web.HTTPNotFound(text=body, content_type="text/html")
    return web.HTTPNotFound(
        text=f"404 not found: {path}\nno such file under {folder}/; the server serves {SERVES}\n"
    )
