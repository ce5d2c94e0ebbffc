"""Which files of the served static folder the product reaches, and so which are test-only.

The rule (issue 41): a file the server serves from ``static/`` belongs to the product when a
product page reaches it by references, starting from the pages a person opens (``ENTRY_PAGES``).
The references followed are the ones a browser follows:

- in HTML, ``src=`` and ``href=`` (``/`` is ``index.html``; ``/selftest`` is ``selftest.html``,
  as the server answers page URLs without the extension);
- in JavaScript, ``import ... from 'x'``, ``export ... from 'x'``, ``import 'x'`` at the start of a
  line, ``import('x')`` with a literal, and ``new URL('x', import.meta.url)`` (the workers, the
  WebAssembly files, the inference kit's runtime); lines that start a comment are skipped, so
  a JSDoc type import is not a load;
- in CSS, ``url(...)`` and ``@import``.

A reference to another of the app's routes (``/kernels/``, ``/api/`` ...) or to another origin
is not a static file and is not followed. A reference that names no served file is a
``BrokenReference``: the page would fail on it. A served file that nothing reaches is test-only
(or dead): it must live under ``tests/``, loaded by the tests through tests/repo_route.py, unless
``NOT_REFERENCED`` names it with the reason it is served anyway.

``served_files`` walks the folder as the server does (``daisychain.server.static.safe_path``:
hidden files and symlinks out of the folder are never served, so they are not counted).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from urllib.parse import urlsplit

from daisychain.server.static import safe_path

ENTRY_PAGES = ("index.html", "selftest.html", "train-check.html")

AUDITS_AHEAD = (
    'audits\' building blocks (docs/TRUST.md, "Built so far"), built and tested ahead of the '
    "audit machine that will import them; until then only the tests load them"
)
# Served, reached by no page, and still not test-only.
NOT_REFERENCED = {
    "package.json": "declares static/js/*.js ES modules for Node, which runs the same modules "
    "(the CLI's node steps and the node tests); no browser asks for it",
    "js/p2p/statements.js": AUDITS_AHEAD,
    "js/p2p/auditkey.js": AUDITS_AHEAD,
    "js/p2p/draw.js": AUDITS_AHEAD,
    "js/p2p/machine/audit.js": AUDITS_AHEAD,
    "js/numerics/ed25519.js": AUDITS_AHEAD,
    "js/numerics/sha512.js": AUDITS_AHEAD,
}

# The app's routes other than the static files (daisychain/server/app.py): never static files.
OTHER_ROUTES = ("/kernels/", "/luts/", "/vectors/", "/api/", "/ws", "/data", "/healthz",
                "/favicon.ico")  # fmt: skip
TEXT_SUFFIXES = (".html", ".js", ".mjs", ".css")

_HTML_REF = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.I)
_JS_STATIC = re.compile(
    r"""^(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]|^import\s*['"]([^'"]+)['"]""", re.M
)
_JS_DYNAMIC = re.compile(r"""\bimport\(\s*['"]([^'"]+)['"]\s*\)""")
_JS_NEW_URL = re.compile(r"""\bnew\s+URL\(\s*['"]([^'"]+)['"]\s*,\s*import\.meta\.url\s*\)""")
_CSS_REF = re.compile(r"""url\(\s*['"]?([^'")\s]+)['"]?\s*\)|@import\s+['"]([^'"]+)['"]""")
_COMMENT_LINE = re.compile(r"^\s*(//|/\*|\*)")


class BrokenReference(ValueError):
    """A product file references a static file that is not served."""


def served_files(root: Path) -> set[str]:
    """Every file the server serves from ``root``, as a path relative to it (``js/app.js``)."""
    out = set()
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and safe_path(root, rel) is not None:
            out.add(rel)
    return out


def references(rel: str, text: str) -> list[str]:
    """The references a browser follows in the file ``rel`` with contents ``text``."""
    if rel.endswith(".html"):
        return _HTML_REF.findall(text)
    if rel.endswith(".css"):
        return [a or b for a, b in _CSS_REF.findall(text)]
    code = "\n".join(line for line in text.splitlines() if not _COMMENT_LINE.match(line))
    found = [a or b for a, b in _JS_STATIC.findall(code)]
    return found + _JS_DYNAMIC.findall(code) + _JS_NEW_URL.findall(code)


def resolve(rel: str, ref: str, served: set[str]) -> str | None:
    """The served file that ``ref`` in ``rel`` names; None for what is not a static file (another
    origin, a ``data:`` URL or Node's ``node:zlib``, a folder, another route of the app)."""
    parts = urlsplit(ref)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    path = parts.path
    if path.endswith("/"):
        return None  # a folder (the kit's base URL for the modules it reads)
    if path.startswith("/"):
        if path == "/":
            return "index.html"
        if path.startswith(OTHER_ROUTES):
            return None
        target = path[1:]
    else:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), path))
        if target == ".." or target.startswith("../"):
            raise BrokenReference(
                f"{rel}: {ref!r} leaves the static folder; the server serves nothing there "
                "(move the file under static/ or fix the path)"
            )
    if target in served:
        return target
    if "." not in target.rsplit("/", 1)[-1] and target + ".html" in served:
        return target + ".html"  # /selftest: the server adds .html
    raise BrokenReference(
        f"{rel}: {ref!r} names {target}, which the server does not serve "
        "(a typo, or a file that moved: fix the reference)"
    )


def reachable(root: Path, entries: tuple[str, ...] = ENTRY_PAGES) -> set[str]:
    """Every served file of ``root`` that the ``entries`` reach by references."""
    served = served_files(root)
    missing = [e for e in entries if e not in served]
    if missing:
        raise BrokenReference(f"entry pages {missing} are not served from {root}")
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen.add(rel)
        if rel.endswith(TEXT_SUFFIXES):
            text = (root / rel).read_text(encoding="utf-8")
            for ref in references(rel, text):
                target = resolve(rel, ref, served)
                if target is not None:
                    todo.append(target)
    return seen


def unreferenced(root: Path) -> set[str]:
    """The served files of ``root`` that no product page reaches and no reason keeps."""
    return served_files(root) - reachable(root) - set(NOT_REFERENCED)
