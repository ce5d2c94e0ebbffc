"""The test pages of the checkout, served to a browser by one Playwright route (issue 41).

The server serves ``static/`` only, and nothing there is test-only (tests/server/
test_server_test_only.py keeps it so). Test pages and modules live under ``tests/``
(``tests/pages/``, ``tests/js/traces/``) and import the product's modules by relative paths
that hold in the repository (``../../static/js/p2p/mesh.js``), so Node runs them from the
checkout as they are. In a browser, ``install(context, base)`` answers every request to
``<base>/repo/<path>`` from the checkout's file ``<path>``, only under ``tests/`` and
``static/``: a test opens ``/repo/tests/pages/mesh-check.html``, whose ``./check.js`` imports
``/repo/static/js/p2p/mesh.js``, so each module of the page under test comes from one URL space
and is instantiated once. Absolute URLs the product uses at run time (``/ws``, ``/data``,
``/css/...``, ``/kernels/...``) still reach the real server. Playwright routes on a browser
context also see a dedicated worker's requests, so a test worker
(``/repo/tests/pages/fault_worker.js``) loads the same way.

Answers carry the content type of the server's own table and the security headers it would send
(``daisychain.server.static``), so a test page runs under the product's Content-Security-Policy
and, on a loopback address, is cross-origin isolated as the real pages are. A fulfilled answer
has no server address, so the origin is granted Chromium's ``local-network-access`` permission
(below), without which a test page could not reach the test server's ``/ws``. Anything else (a
path outside the two folders, ``..`` or a hidden segment, a symlink that leaves its folder, a
folder, an absent file, a method other than GET or HEAD) is a 404 that names the rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from daisychain.server.static import (
    CONTENT_TYPES,
    DEFAULT_CONTENT_TYPE,
    safe_path,
    security_headers,
)

REPO = Path(__file__).resolve().parents[1]
PREFIX = "/repo/"
ROOTS = ("tests", "static")
_LOOPBACK = ("localhost", "::1")


def repo_file(url_path: str, repo: Path = REPO) -> Path | None:
    """The file of ``repo`` that the URL path ``/repo/<root>/<rest>`` names, or None when it
    is not one to serve (outside ``tests/`` and ``static/``, absent, a folder, a ``..`` or
    hidden segment, or a symlink out of its folder: the server's own ``safe_path`` rule)."""
    if not url_path.startswith(PREFIX):
        return None
    root, _, rest = unquote(url_path[len(PREFIX) :]).partition("/")
    if root not in ROOTS or not rest:
        return None
    return safe_path(repo / root, rest)


def headers_for(path: Path, netloc: str) -> dict[str, str]:
    """What the server would send with ``path`` to a page at ``netloc`` (host[:port])."""
    host = urlsplit(f"//{netloc}").hostname or ""
    isolate = host in _LOOPBACK or host.startswith("127.")  # as static.trustworthy_origin
    return {
        **security_headers(netloc, isolate=isolate),
        "Content-Type": CONTENT_TYPES.get(path.suffix.lower(), DEFAULT_CONTENT_TYPE),
        "Cache-Control": "no-cache",
    }


async def install(context: Any, base: str, repo: Path = REPO) -> None:
    """Route ``<base>/repo/**`` of ``context`` (a Playwright BrowserContext; a Page's own routes
    miss its workers' requests) to the files of ``repo``."""
    origin = urlsplit(base)
    # A response the route fulfills has no server address, so Chromium's Local Network Access
    # counts a test page (or worker) as public and refuses its connections to the test server's
    # loopback or namespace address (net::ERR_BLOCKED_BY_LOCAL_NETWORK_ACCESS_CHECKS on /ws).
    # The real pages come from that address and need no such grant; only this origin gets it.
    await context.grant_permissions(
        ["local-network-access"], origin=f"{origin.scheme}://{origin.netloc}"
    )

    def matches(url: str) -> bool:
        parts = urlsplit(url)
        return parts.netloc == origin.netloc and parts.path.startswith(PREFIX)

    async def handle(route: Any) -> None:
        request = route.request
        parts = urlsplit(request.url)
        path = repo_file(parts.path, repo) if request.method in ("GET", "HEAD") else None
        if path is None:
            await route.fulfill(
                status=404,
                content_type="text/plain; charset=utf-8",
                body=f"{parts.path}: not a file under tests/ or static/ of the checkout "
                "(tests/repo_route.py serves only those, to GET and HEAD)\n",
            )
            return
        await route.fulfill(
            status=200, headers=headers_for(path, parts.netloc), body=path.read_bytes()
        )

    await context.route(matches, handle)
