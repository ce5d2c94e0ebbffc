"""The Firefox tests' own checks, each shown firing on a wrong input: the driver
(tests/firefox/driver.mjs) refuses malformed requests with an error and a hint; a tab's
``check_clean`` sees a console error (the page's and a Worker's), a page error, a failed
response and a request to another host in a real Firefox; a missing browser or npm package
skips a test with what to install, and fails it under CI (tests/firefox_helpers.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web

import firefox_helpers
from firefox_helpers import (
    DRIVER_DIR,
    FIREFOX,
    Driver,
    DriverError,
    firefox,
    missing,
    on_ci,
    open_tab,
    require,
)


@pytest.mark.parametrize(
    ("line", "error", "hint"),
    [
        ("nonsense", "not JSON", "one JSON object per line"),
        ("[1, 2]", "a request is an object, not array", '{"id": 1'),
        ('{"op": "quit"}', "the request has no integer id", "number each request"),
        ('{"id": 1.5, "op": "quit"}', "the request has no integer id", "number each request"),
        ('{"id": 3, "op": "fly"}', 'unknown op "fly"', "one of launch, open, evaluate"),
        ('{"id": 3, "op": "toString"}', 'unknown op "toString"', "one of launch"),
        ('{"id": 3, "op": "open", "url": "http://x/"}', "open needs hosts", "a array"),
        ('{"id": 3, "op": "report", "tab": "1"}', "report: tab is string, not number", "number"),
        ('{"id": 3, "op": "quit", "now": true}', "quit: unknown field now", "its fields: none"),
        ('{"id": 3, "op": "report", "tab": 1}', "no tab 1", "use the tab an open reply gave"),
        ('{"id": 3, "op": "open", "url": "about:blank", "hosts": []}', "no browser yet",
         "send launch first"),
    ],
)  # fmt: skip
async def test_the_driver_refuses_a_malformed_request(line: str, error: str, hint: str) -> None:
    require(None if shutil.which("node") else "node is missing: apt-get install -y nodejs", on_ci())
    driver = await Driver.start()
    try:
        reply = await driver.send_line(line)
        raw = json.loads(line) if line.startswith("{") else None
        expected_id = raw["id"] if raw and isinstance(raw.get("id"), int) else None
        assert reply["id"] == expected_id and reply["ok"] is False, reply
        assert error in reply["error"], reply
        assert hint in reply["hint"], reply
        # The driver answers the next request after a refusal: one bad line stops nothing.
        assert await driver.call("quit") == {}
    finally:
        await driver.close()


# A page that does every unclean thing once.
UNCLEAN = """<!doctype html><title>unclean</title><link rel="icon" href="data:,">
<script>
console.error('planted console error');
new Worker('/worker.js'); // the training runs in a Worker: its errors count too
fetch('/missing');
// Another loopback address, where nothing listens (a browser refuses port 9 before asking).
new Image().src = `http://127.0.0.2:${location.port}/elsewhere.png`;
setTimeout(() => { throw new Error('planted page error'); }, 0);
</script>"""


UNCLEAN_WORKER = "console.error('planted worker error');"


@asynccontextmanager
async def unclean_server() -> AsyncIterator[str]:
    async def page(_request: web.Request) -> web.Response:
        return web.Response(text=UNCLEAN, content_type="text/html")

    async def worker(_request: web.Request) -> web.Response:
        return web.Response(text=UNCLEAN_WORKER, content_type="text/javascript")

    app = web.Application()
    app.router.add_get("/", page)
    app.router.add_get("/worker.js", worker)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_check_clean_sees_what_a_firefox_page_did_wrong() -> None:
    async with unclean_server() as url, firefox() as ff:
        tab = await open_tab(ff, f"{url}/", ("127.0.0.1",))

        async def reported() -> dict[str, list[str]]:
            report: dict[str, list[str]] = await ff.call("report", tab=tab.tab)
            return report

        deadline = time.monotonic() + 60
        while True:  # the page's fetch, image and timer finish after its load
            report = await reported()
            if len(report["errors"]) >= 3 and report["failed"] and report["foreign"]:
                break
            assert time.monotonic() < deadline, f"the planted faults never all showed: {report}"
            await asyncio.sleep(0.25)
        assert "planted console error" in report["errors"]
        assert "planted worker error" in report["errors"]
        assert any("planted page error" in e for e in report["errors"]), report
        assert report["failed"] == [f"404 {url}/missing"], report
        port = url.rsplit(":", 1)[1]
        assert report["foreign"] == [f"http://127.0.0.2:{port}/elsewhere.png"], report
        with pytest.raises(AssertionError, match="planted console error"):
            await tab.check_clean()
        # A function that throws in the page comes back as the driver's error, not a value.
        with pytest.raises(DriverError, match="thrown in the page"):
            await tab.evaluate("() => { throw new Error('thrown in the page'); }")


def group_members(pgid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


async def test_a_hung_driver_is_killed_with_its_firefox(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that stops answering (SIGSTOP) is killed at the end of the test, and the Firefox
    it started with it: nothing of the test outlives it."""
    monkeypatch.setattr(firefox_helpers, "QUIT_TIMEOUT_S", 1.0)
    async with firefox() as ff:
        assert ff.browser_pid is not None
        groups = (ff.proc.pid, ff.browser_pid)
        assert all(group_members(g) for g in groups), [group_members(g) for g in groups]
        os.kill(ff.proc.pid, signal.SIGSTOP)
    assert ff.proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while left := [pid for g in groups for pid in group_members(g)]:
        assert time.monotonic() < deadline, f"left running: {left}"
        await asyncio.sleep(0.1)  # the kernel ends the killed processes


def test_a_missing_browser_or_package_says_what_to_install(tmp_path: Path) -> None:
    absent = missing(firefox=tmp_path / "firefox-esr")
    assert absent == f"{tmp_path}/firefox-esr is missing: apt-get install -y firefox-esr"
    if FIREFOX.exists():
        no_package = missing(driver_dir=DRIVER_DIR.parent / "no-such-driver")
        assert no_package is not None and "npm ci --no-audit --no-fund" in no_package


def test_a_missing_browser_skips_but_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pytest.skip.Exception, match="apt-get install"):
        require("/usr/bin/firefox-esr is missing: apt-get install -y firefox-esr", ci=False)
    with pytest.raises(pytest.fail.Exception, match="CI=true and the Firefox tests cannot run"):
        require("/usr/bin/firefox-esr is missing: apt-get install -y firefox-esr", ci=True)
    require(None, ci=True)  # nothing missing: nothing happens
    monkeypatch.setenv("CI", "true")
    assert on_ci()
    monkeypatch.setenv("CI", "")
    assert not on_ci()
