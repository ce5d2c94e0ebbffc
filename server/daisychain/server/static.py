"""Static files and the security headers every response carries.

``static/`` is served at ``/``, ``kernels/`` at ``/kernels/`` and ``luts/`` at ``/luts/``.

Paths are checked segment by segment (no ``..``, no hidden files, no backslashes or NULs, no
segment longer than a file name can be) and then resolved, so a symlink that points outside its
folder is refused too; a path the filesystem cannot resolve (a symlink loop, a name too long) is
a 404 like any other missing file, never a 500. Content types come from one
table rather than the platform's ``mimetypes`` database, which differs between machines (a
browser refuses an ES module served as ``text/plain``). ``web.FileResponse`` supplies ETag,
Last-Modified, conditional requests and ranges.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from daisychain.server.notfound import not_found

CONTENT_TYPES: dict[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".webmanifest": "application/manifest+json",
    # WGSL has no registered type; text/plain lets a browser show it and fetch().text() read it.
    ".wgsl": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".bin": "application/octet-stream",
    ".safetensors": "application/octet-stream",
    ".wasm": "application/wasm",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
}
DEFAULT_CONTENT_TYPE = "application/octet-stream"  # with nosniff, never executed
# NAME_MAX on Linux and macOS: no file has a longer name, so a longer segment is a 404 before
# the filesystem is asked (it would raise ENAMETOOLONG).
MAX_SEGMENT_BYTES = 255

_HOST_RE = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
_INLINE_SCRIPT_RE = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.S | re.I)


def content_security_policy(host: str | None, script_hashes: tuple[str, ...] = ()) -> str:
    """CSP for every response: same-origin everything, plus what WebGPU/WASM pages need."""
    connect = "'self'"
    if host and _HOST_RE.fullmatch(host):
        # 'self' covers same-origin ws:/wss: only in CSP3 browsers; name them for older Safari.
        connect += f" ws://{host} wss://{host}"
    scripts = " ".join(["'self'", "'wasm-unsafe-eval'", *(f"'{h}'" for h in script_hashes)])
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src {scripts}",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data: blob:",
            f"connect-src {connect}",
            "worker-src 'self' blob:",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'self'",
        ]
    )


def security_headers(host: str | None, *, isolate: bool = True) -> dict[str, str]:
    """The headers every response carries (a page's own CSP adds its inline-script hashes).
    ``isolate``: ask for cross-origin isolation (only where a browser can grant it)."""
    headers = {
        "X-Content-Type-Options": "nosniff",
        # Room codes travel in the page URL (?room=CODE): never leak them in a Referer.
        "Referrer-Policy": "no-referrer",
        "Content-Security-Policy": content_security_policy(host),
        "Cross-Origin-Resource-Policy": "same-origin",
    }
    if isolate:
        # Cross-origin isolation gives the page SharedArrayBuffer and precise timers for
        # WASM/WebGPU work. No X-Frame-Options: a Hugging Face Space shows the app in an iframe.
        headers["Cross-Origin-Opener-Policy"] = "same-origin"
        headers["Cross-Origin-Embedder-Policy"] = "require-corp"
    return headers


def set_security_headers(
    response: web.StreamResponse, host: str | None, *, isolate: bool = True
) -> None:
    for name, value in security_headers(host, isolate=isolate).items():
        response.headers.setdefault(name, value)


_LOOPBACK_HOST_RE = re.compile(
    r"(localhost|127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}|\[::1\])(:[0-9]{1,5})?", re.I
)


def trustworthy_origin(request: web.BaseRequest, *, trust_proxy: bool) -> bool:
    """Whether the browser treats the page's origin as potentially trustworthy (a secure
    context): https, or a loopback host. Behind our own proxy (a Space) the proxy serves https.

    Over plain http at a LAN address a browser ignores cross-origin isolation and says so as a
    console error on every page, so it is not asked for there (the page works without it)."""
    if trust_proxy or request.secure:
        return True
    return bool(_LOOPBACK_HOST_RE.fullmatch(request_host(request) or ""))


def security_header_hook(
    *, trust_proxy: bool
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """The ``on_response_prepare`` hook: runs for every response the app's router handled,
    errors included. The parser's own 400s never reach the router: ``httpconn`` adds them."""

    async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
        isolate = trustworthy_origin(request, trust_proxy=trust_proxy)
        set_security_headers(response, request_host(request), isolate=isolate)

    return add_security_headers


def request_host(request: web.BaseRequest) -> str | None:
    """The Host header as sent. Not ``request.host``: without the header that falls back to
    ``socket.getfqdn()``, a blocking DNS lookup on the event loop that any client could trigger."""
    return request.headers.get("Host")


def safe_path(root: Path, relative: str) -> Path | None:
    """The file ``relative`` names inside ``root``, or None if it is outside, hidden or absent."""
    if "\x00" in relative or "\\" in relative or relative.startswith("/"):
        return None
    parts = relative.split("/")
    if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return None
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES for part in parts):
        return None
    try:
        root = root.resolve()
        candidate = root.joinpath(*parts).resolve()  # follows symlinks: the target must be inside
        if not candidate.is_relative_to(root) or not candidate.is_file():
            return None
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11/3.12 resolve())
        return None
    return candidate


class StaticFiles:
    """Serve one asset folder under a URL prefix."""

    def __init__(self, root: Path, prefix: str, index: str | None = None) -> None:
        self.root = root
        self.prefix = prefix
        self.index = index
        self._script_hashes: dict[tuple[Path, int, int], tuple[str, ...]] = {}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        return self._serve(request, request.match_info.get("path", ""))

    def alias(self, relative: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """A handler that serves the file ``relative`` under another URL (``/favicon.ico`` is
        ``favicon.svg``: every browser asks for it, and a 404 there is a console error on every
        page). Its type is the file's own: Chromium and Firefox draw an SVG favicon."""

        async def handle(request: web.Request) -> web.StreamResponse:
            return self._serve(request, relative)

        return handle

    def _serve(self, request: web.Request, relative: str) -> web.StreamResponse:
        if relative == "" and self.index is not None:
            relative = self.index
        path = safe_path(self.root, relative)
        if path is None and relative and "." not in relative.rsplit("/", 1)[-1]:
            # Page URLs without the extension: /selftest serves selftest.html.
            path = safe_path(self.root, relative + ".html")
        if path is None:
            raise self._not_found(request)
        headers = {
            "Content-Type": CONTENT_TYPES.get(path.suffix.lower(), DEFAULT_CONTENT_TYPE),
            # Revalidate every time (cheap with the ETag): a deploy must never mix old modules
            # with new ones in one page.
            "Cache-Control": "no-cache",
        }
        if path.suffix.lower() == ".html":
            try:
                hashes = self._inline_script_hashes(path)
            except OSError:  # removed or unreadable since safe_path() looked
                raise self._not_found(request) from None
            headers["Content-Security-Policy"] = content_security_policy(
                request_host(request), hashes
            )
        return web.FileResponse(path, headers=headers)

    def _not_found(self, request: web.Request) -> web.HTTPNotFound:
        return not_found(request, self.root.name)

    def _inline_script_hashes(self, path: Path) -> tuple[str, ...]:
        """CSP hashes of a page's inline scripts, so they run without 'unsafe-inline'."""
        stat = path.stat()
        key = (path, stat.st_mtime_ns, stat.st_size)
        if key not in self._script_hashes:
            html = path.read_text(encoding="utf-8", errors="replace")
            self._script_hashes[key] = tuple(
                "sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()
                for body in _INLINE_SCRIPT_RE.findall(html)
            )
        return self._script_hashes[key]
