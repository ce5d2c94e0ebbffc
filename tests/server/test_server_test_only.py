"""The server serves no test-only file (issue 41): every file it serves from ``static/`` is reached
by a product page's references (tests/static_reach.py has the rule), so a production page cannot
be made to load a test page or hook. Test pages and modules live under ``tests/`` and reach a
browser only through the tests' own route (tests/repo_route.py), whose refusals are checked here
too.

The served folder is the one the real app serves (found in its router), walked as the server
walks it; the rule is shown firing on a copy of it with a test-only file planted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from daisychain.server.app import create_app
from daisychain.server.static import StaticFiles
from repo_route import headers_for, repo_file
from server_fixtures import ByteTokenizer, config, make_tree
from static_reach import (
    NOT_REFERENCED,
    BrokenReference,
    reachable,
    served_files,
    unreferenced,
)

REPO = Path(__file__).resolve().parents[2]


def app_static_root(static_dir: Path | None = None) -> Path:
    """The folder the real app serves at ``/`` (its catch-all route's StaticFiles)."""
    app = create_app(config(static_dir=static_dir), tokenizer=ByteTokenizer)
    roots = {
        owner.root
        for route in app.router.routes()  # GET and HEAD: one StaticFiles
        if isinstance(owner := getattr(route.handler, "__self__", None), StaticFiles)
        and owner.prefix == "/"
    }
    assert len(roots) == 1, roots
    return roots.pop()


def test_every_served_static_file_is_reached_by_a_product_page() -> None:
    root = app_static_root()
    assert root.resolve() == (REPO / "static").resolve()
    extra = unreferenced(root)
    assert not extra, (
        f"the server serves files no product page reaches: {sorted(extra)}; a test page or "
        "module belongs under tests/ (loaded through tests/repo_route.py), anything else "
        "needs a reference from a page or a reason in static_reach.NOT_REFERENCED"
    )
    for name in ("index.html", "js/app.js", "js/train/worker.js", "js/train/serve.js",
                 "js/kit/runtime.js", "wasm/gemm_i8.wasm", "css/check.css"):  # fmt: skip
        assert name in reachable(root), name


def test_the_reasons_to_serve_an_unreached_file_stay_true() -> None:
    """Each file kept by a reason is served and reached by nothing (else the reason is stale)."""
    root = app_static_root()
    served, reached = served_files(root), reachable(root)
    for name in NOT_REFERENCED:
        assert name in served and name not in reached, name


def test_no_test_page_or_hook_is_served() -> None:
    served = served_files(app_static_root())
    for name in ("mesh-check.html", "js/p2p/check.js", "js/p2p/traces/replay.js"):
        assert name not in served, name
    test_workers = {"fault_worker.js", "fault_trainer.js"}
    assert not [name for name in served if name.rsplit("/", 1)[-1] in test_workers]
    for path in (REPO / "static" / "js" / "train").glob("*.js"):
        assert "inject-fault" not in path.read_text(encoding="utf-8"), path.name


@pytest.mark.parametrize(
    ("planted", "source"),
    [
        ("js/p2p/debug-check.js", None),  # a module nothing imports
        ("js/p2p/check.js", "tests/pages/check.js"),  # the old test page's module, copied back
        ("mesh-check.html", "tests/pages/mesh-check.html"),
        ("js/p2p/traces/playback.js", "tests/js/traces/playback.js"),
    ],
)
def test_a_planted_test_only_file_is_found(
    tmp_path: Path, planted: str, source: str | None
) -> None:
    copy = tmp_path / "static"
    shutil.copytree(REPO / "static", copy)
    root = app_static_root(copy)
    assert root == copy and unreferenced(root) == set()
    target = copy / planted
    target.parent.mkdir(parents=True, exist_ok=True)
    if source is None:
        target.write_text("export const debug = true;\n", encoding="utf-8")
    else:
        shutil.copyfile(REPO / source, target)
    assert unreferenced(root) == {planted}
    # A hidden file is never served, so it is not counted either.
    (copy / "js" / ".scratch.js").write_text("x\n", encoding="utf-8")
    assert unreferenced(root) == {planted}


def test_each_kind_of_reference_is_followed(tmp_path: Path) -> None:
    root = make_tree(
        tmp_path / "static",
        {
            "index.html": b'<link rel="stylesheet" href="/css/a.css"><a href="/selftest">x</a>'
            b'<a href="#top">t</a><a href="https://example.org/">e</a>'
            b'<script type="module" src="/js/app.js"></script>',
            "selftest.html": b'<a href="/">home</a>',
            "train-check.html": b'<script type="module" src="./js/check.js?v=1"></script>',
            "css/a.css": b"@import 'b.css'; body { background: url(../img/p.svg); }",
            "css/b.css": b"p { background: url('data:image/png;base64,AA==') }",
            "img/p.svg": b"<svg/>",
            "js/app.js": b"import { a } from './a.js';\nexport * from './b.js';\n"
            b"const w = new URL('./w.js', import.meta.url);\n"
            b"const z = import('node:zlib');\nconst c = import('./c.js');\n"
            b"// import('./commented.js')\n/** @type {import('./typeonly.js').T} */\n"
            b"fetch('/api/status'); fetch('/kernels/gemm.wgsl');\n",
            "js/a.js": b"import './side.js';\nimport {\n  x,\n  y,\n} from './multi.js';\n",
            "js/b.js": b"", "js/c.js": b"", "js/w.js": b"", "js/side.js": b"", "js/multi.js": b"",
            "js/check.js": b"",
            "js/commented.js": b"", "js/typeonly.js": b"", "js/unused.js": b"",
        },
    )  # fmt: skip
    assert unreferenced(root) == {"js/commented.js", "js/typeonly.js", "js/unused.js"}


@pytest.mark.parametrize(
    ("source", "match"),
    [
        (b"import { x } from './missing.js';\n", "names js/missing.js, which the server"),
        (b"import { x } from '../../kernels/x.js';\n", "leaves the static folder"),
        (b"const u = new URL('./gone.wasm', import.meta.url);\n", "names js/gone.wasm"),
        (b"import 'lodash';\n", "names js/lodash"),  # a browser cannot import a bare name
    ],
)
def test_a_reference_to_an_unserved_file_is_refused(
    tmp_path: Path, source: bytes, match: str
) -> None:
    pages = {p: b'<script type="module" src="/js/app.js"></script>' for p in
             ("index.html", "selftest.html", "train-check.html")}  # fmt: skip
    root = make_tree(tmp_path / "static", {**pages, "js/app.js": source})
    with pytest.raises(BrokenReference, match=match):
        unreferenced(root)


def test_an_entry_page_that_is_not_served_is_refused(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "static", {"index.html": b"", "selftest.html": b""})
    with pytest.raises(BrokenReference, match=r"entry pages \['train-check.html'\]"):
        unreferenced(root)


# The test route (tests/repo_route.py): only tests/ and static/ of the checkout, as the server's
# own path rule allows.


def test_the_repo_route_serves_test_pages_and_product_modules() -> None:
    page = repo_file("/repo/tests/pages/mesh-check.html")
    assert page == REPO / "tests" / "pages" / "mesh-check.html"
    assert repo_file("/repo/static/js/p2p/mesh.js") == REPO / "static" / "js" / "p2p" / "mesh.js"
    assert repo_file("/repo/tests/pages/fault%5Fworker.js") == page.parent / "fault_worker.js"
    loopback = headers_for(page, "127.0.0.1:8000")
    assert loopback["Content-Type"] == "text/html; charset=utf-8"
    assert loopback["Cross-Origin-Embedder-Policy"] == "require-corp"
    assert "script-src 'self'" in loopback["Content-Security-Policy"]
    lan = headers_for(REPO / "static" / "wasm" / "gemm_i8.wasm", "10.231.0.1:8000")
    assert lan["Content-Type"] == "application/wasm" and "Cross-Origin-Opener-Policy" not in lan


@pytest.mark.parametrize(
    "path",
    [
        "/repo/pyproject.toml",  # outside tests/ and static/
        "/repo/server/daisychain/__init__.py",
        "/repo/tests/../server/daisychain/__init__.py",
        "/repo/tests/%2e%2e/server/daisychain/__init__.py",
        "/repo/tests/..%2Fserver%2Fdaisychain%2F__init__.py",
        "/repo/static/../../etc/passwd",
        "/repo/.git/HEAD",
        "/repo/tests/pages/absent.js",
        "/repo/tests/pages",  # a folder
        "/repo/tests/pages/",
        "/repo/",
        "/repo/tests",
        "/js/app.js",  # not under /repo/
        "/repo/tests/pages/check.js%00.html",
    ],
)
def test_the_repo_route_refuses_anything_else(path: str) -> None:
    assert repo_file(path) is None, path


def test_the_repo_route_refuses_a_symlink_out_of_its_folder(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_tree(repo / "tests", {"ok.js": b""})
    make_tree(repo / "server", {"secret.py": b""})
    (repo / "tests" / "leak.py").symlink_to(repo / "server" / "secret.py")
    assert repo_file("/repo/tests/ok.js", repo) == (repo / "tests" / "ok.js").resolve()
    assert repo_file("/repo/tests/leak.py", repo) is None
