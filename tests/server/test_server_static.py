"""Static files: content types, caching headers, security headers, and traversal refused."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
from aiohttp.test_utils import TestClient

from server_fixtures import config, make_tree, serve

SECRET = b"outside the asset folders"
FAVICON = b'<svg xmlns="http://www.w3.org/2000/svg"><circle r="1"/></svg>'
REPO = Path(__file__).resolve().parents[2]


def asset_config(tmp_path: Path) -> Any:
    (tmp_path / "secret.txt").write_bytes(SECRET)
    static = make_tree(
        tmp_path / "static",
        {
            "index.html": b"<!doctype html><script type=module>console.log(1)</script>",
            "app.js": b"export const x = 1;\n",
            "style.css": b"body{}",
            ".env": b"TOKEN=1",
            "data.unknownext": b"?",
            "favicon.svg": FAVICON,
        },
    )
    (static / "escape.txt").symlink_to(tmp_path / "secret.txt")
    kernels = make_tree(tmp_path / "kernels", {"gemm.wgsl": b"@compute fn main() {}\n"})
    luts = make_tree(tmp_path / "luts", {"manifest.json": b"{}", "mul.bin": b"\x00\x01"})
    return config(static_dir=static, kernels_dir=kernels, luts_dir=luts)


async def raw_get(client: TestClient[Any, Any], target: str) -> tuple[int, bytes]:
    """Send the request line exactly as written (no client-side URL normalisation)."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout=5)
    writer.close()
    await writer.wait_closed()
    return int(data.split(b" ", 2)[1]), data


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/", "text/html; charset=utf-8"),
        ("/index.html", "text/html; charset=utf-8"),
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/style.css", "text/css; charset=utf-8"),
        ("/kernels/gemm.wgsl", "text/plain; charset=utf-8"),
        ("/luts/manifest.json", "application/json"),
        ("/luts/mul.bin", "application/octet-stream"),
        ("/data.unknownext", "application/octet-stream"),
        ("/favicon.svg", "image/svg+xml"),
        ("/favicon.ico", "image/svg+xml"),
    ],
)
async def test_content_types(tmp_path: Path, path: str, content_type: str) -> None:
    async with serve(asset_config(tmp_path)) as client:
        response = await client.get(path)
        assert response.status == 200
        assert response.headers["Content-Type"] == content_type


async def test_security_headers_on_files_and_errors(tmp_path: Path) -> None:
    async with serve(asset_config(tmp_path)) as client:
        for path in ("/app.js", "/missing.js", "/api/status"):
            headers = (await client.get(path)).headers
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert headers["Referrer-Policy"] == "no-referrer"
            assert headers["Cross-Origin-Opener-Policy"] == "same-origin"
            csp = headers["Content-Security-Policy"]
            assert "default-src 'self'" in csp and "'wasm-unsafe-eval'" in csp
            assert "'unsafe-inline'" not in csp.split("script-src", 1)[1].split(";")[0]


async def test_inline_scripts_of_pages_are_allowed_by_hash(tmp_path: Path) -> None:
    async with serve(asset_config(tmp_path)) as client:
        csp = (await client.get("/")).headers["Content-Security-Policy"]
        digest = base64.b64encode(hashlib.sha256(b"console.log(1)").digest()).decode()
        assert f"'sha256-{digest}'" in csp


async def test_etag_revalidation_answers_304(tmp_path: Path) -> None:
    async with serve(asset_config(tmp_path)) as client:
        first = await client.get("/app.js")
        etag = first.headers["ETag"]
        assert first.headers["Cache-Control"] == "no-cache"
        again = await client.get("/app.js", headers={"If-None-Match": etag})
        assert again.status == 304


async def test_page_urls_without_extension_serve_the_html(tmp_path: Path) -> None:
    async with serve(asset_config(tmp_path)) as client:
        response = await client.get("/index")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/html")
        assert "Content-Security-Policy" in response.headers
        assert (await client.get("/app")).status == 404  # only .html is implied
        assert (await client.get("/../secret")).status == 404


async def test_missing_file_is_a_clear_404(tmp_path: Path) -> None:
    async with serve(asset_config(tmp_path)) as client:
        response = await client.get("/nope.js")
        assert response.status == 404
        assert "404 not found: /nope.js" in await response.text()


@pytest.mark.parametrize(
    "target",
    [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/kernels/../../secret.txt",
        "/kernels/%2e%2e/%2e%2e/secret.txt",
        "/luts/..%2f..%2fsecret.txt",
        "/static/..%5c..%5csecret.txt",
        "//etc/passwd",
        "/%2fetc%2fpasswd",
        "/escape.txt",
        "/.env",
        "/kernels/%00gemm.wgsl",
    ],
)
async def test_traversal_is_refused(tmp_path: Path, target: str) -> None:
    async with serve(asset_config(tmp_path)) as client:
        status, data = await raw_get(client, target)
        assert status in (400, 404), data[:200]
        assert SECRET not in data and b"root:" not in data


async def test_directories_are_not_listed(tmp_path: Path) -> None:
    async with serve(asset_config(tmp_path)) as client:
        assert (await client.get("/kernels/")).status == 404


@pytest.mark.parametrize(
    "target",
    [
        "/" + "a" * 300,
        "/" + "a" * 300 + ".js",
        "/kernels/" + "b" * 300 + "/gemm.wgsl",
        "/luts/" + "%C3%A9" * 200,  # 200 characters, 400 bytes
        "/loop",
        "/loop/inside.js",
        "/kernels/loop",
    ],
)
async def test_unresolvable_paths_are_a_plain_404(
    tmp_path: Path, target: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = asset_config(tmp_path)
    for folder in (cfg.static_dir, cfg.kernels_dir):
        (folder / "loop").symlink_to(folder / "loop2")
        (folder / "loop2").symlink_to(folder / "loop")
    async with serve(cfg) as client:
        status, data = await raw_get(client, target)
        assert status == 404, data[:300]
        assert b"X-Content-Type-Options: nosniff" in data
    assert not [record for record in caplog.records if record.exc_info], caplog.text


async def test_favicon_ico_is_the_svg(tmp_path: Path) -> None:
    async with serve(asset_config(tmp_path)) as client:
        for path in ("/favicon.ico", "/favicon.svg"):
            response = await client.get(path)
            assert response.status == 200, path
            assert await response.read() == FAVICON
            assert response.headers["X-Content-Type-Options"] == "nosniff"


async def test_favicon_ico_is_a_404_without_the_svg(tmp_path: Path) -> None:
    """The alias serves the file, not a fixed body: a static folder without it has no icon."""
    cfg = asset_config(tmp_path)
    (cfg.static_dir / "favicon.svg").unlink()
    async with serve(cfg) as client:
        assert (await client.get("/favicon.ico")).status == 404


def test_the_shipped_favicon_is_an_svg_every_page_links() -> None:
    static = REPO / "static"
    svg = ElementTree.parse(static / "favicon.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert svg.get("viewBox") == "0 0 32 32"
    pages = [static / "selftest.html", static / "train-check.html",
             REPO / "tests" / "pages" / "mesh-check.html"]  # fmt: skip
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert '<link rel="icon" href="/favicon.svg" type="image/svg+xml">' in html, page


async def test_a_browser_gets_a_404_page_with_the_path_escaped(tmp_path: Path) -> None:
    async with serve(asset_config(tmp_path)) as client:
        response = await client.get(
            "/<script>alert(1)</script>", headers={"Accept": "text/html,*/*;q=0.8"}
        )
        assert response.status == 404
        assert response.headers["Content-Type"] == "text/html; charset=utf-8"
        body = await response.text()
        assert "<script>" not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
        assert '<a href="/selftest">' in body and 'href="/favicon.svg"' in body
        # fetch() and curl ask for anything: they keep the text answer.
        plain = await client.get("/nope.js", headers={"Accept": "*/*"})
        assert plain.headers["Content-Type"].startswith("text/plain")
        assert "/vectors/" in await plain.text()
