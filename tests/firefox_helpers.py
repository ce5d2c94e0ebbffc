"""Firefox for the tests (tests/firefox/): Debian's ``firefox-esr`` driven over WebDriver BiDi by
``tests/firefox/driver.mjs`` (puppeteer-core), a Node child process this module talks to in JSON
lines. The Python test owns the servers, peers and namespace, as in the Chromium tests; the
driver only moves the browser's tabs (docs/TESTING.md "Firefox").

``firefox()`` starts the driver and the browser, or skips the test with the reason when
firefox-esr, node or the driver's npm package is missing; under CI (``CI=true``) it fails instead,
since the README's test command installs all three. ``FirefoxTab`` mirrors the Chromium tabs of
``page_helpers``: evaluate in the page, read its console errors, failed responses and requests
to other hosts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
FIREFOX = Path("/usr/bin/firefox-esr")
DRIVER_DIR = REPO / "tests" / "firefox"
DRIVER = DRIVER_DIR / "driver.mjs"
# Host candidates as plain addresses, not obfuscated `.local` names that aioice would stall
# resolving: the pref that matches Chromium's WebRtcHideLocalIpsWithMdns switch (chromium.py).
PREFS: dict[str, Any] = {"media.peerconnection.ice.obfuscate_host_addresses": False}
CALL_TIMEOUT_S = 120.0  # one request: a launch, a page load or an evaluate on a loaded machine
QUIT_TIMEOUT_S = 30.0  # each of: the quit's reply, then the driver's exit

# What the page has and what it did, as JSON (the fields of test_page_lan.py's STATE and the
# readiness panel's verdict).
STATE = """
async () => {
  const { app } = await import('/js/app.js');
  const p = app.peer;
  const o = p?.outcome ?? null;
  return {
    id: p?.id ?? '', phase: p?.phase ?? 'loading', records: p?.records ?? [],
    backend: app.selection?.backend ?? null, ended: p?.ended ?? false,
    outcome: o === null ? null : { reason: o.reason, message: o.message },
    errors: app.errors, status: document.getElementById('status').textContent,
    readiness: document.querySelector('#readiness .progress')?.textContent ?? '',
    secure: isSecureContext, subtle: !!globalThis.crypto?.subtle, gpu: 'gpu' in navigator,
    opfs: !!navigator.storage?.getDirectory, isolated: crossOriginIsolated,
    wakeLock: 'wakeLock' in navigator,
  };
}
"""

LEAD = """
async (choices) => {
  const { app } = await import('/js/app.js');
  const config = await app.peer.lead(choices);
  return config.run;
}
"""


def on_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def missing(firefox: Path = FIREFOX, driver_dir: Path = DRIVER_DIR) -> str | None:
    """Why the Firefox tests cannot run here (with what to install), or None."""
    if not firefox.exists():
        return f"{firefox} is missing: apt-get install -y firefox-esr"
    if shutil.which("node") is None:
        return "node is missing: apt-get install -y nodejs"
    if not (driver_dir / "node_modules" / "puppeteer-core" / "package.json").is_file():
        return (
            f"the driver's npm package is missing in {driver_dir.relative_to(REPO)}: "
            f"(cd {driver_dir.relative_to(REPO)} && npm ci --no-audit --no-fund)"
        )
    return None


def require(reason: str | None, ci: bool) -> None:
    """Skip with ``reason``; under CI fail with it (CI installs everything the tests need)."""
    if reason is None:
        return
    if ci:
        pytest.fail(f"CI=true and the Firefox tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


class DriverError(AssertionError):
    """The driver refused or failed a request; its words and hint."""

    def __init__(self, op: str, error: str, hint: str) -> None:
        super().__init__(f"firefox driver, {op}: {error} ({hint})")
        self.error = error
        self.hint = hint


class Driver:
    """tests/firefox/driver.mjs as a child process: one JSON request per line, one reply each."""

    def __init__(self, proc: asyncio.subprocess.Process, stderr: Any) -> None:
        self.proc = proc
        self._stderr = stderr
        self._next = 1
        self.browser_pid: int | None = None  # Firefox's, once launched: it leads its own group

    @classmethod
    async def start(cls, driver: Path = DRIVER) -> Driver:
        # stderr goes to a file: a pipe nobody drains could block the child.
        err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        proc = await asyncio.create_subprocess_exec(
            "node", str(driver), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=err, cwd=driver.parent,
            # Its own process group: a driver that hangs is killed with the Firefox it started.
            start_new_session=True,
        )  # fmt: skip
        return cls(proc, err)

    async def send_line(self, line: str) -> dict[str, Any]:
        """Send one raw line; the driver's reply as it came (tests feed it malformed lines)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        raw = await asyncio.wait_for(self.proc.stdout.readline(), CALL_TIMEOUT_S)
        if not raw:
            raise AssertionError(f"the firefox driver exited; its stderr: {self.stderr()}")
        reply: dict[str, Any] = json.loads(raw)
        return reply

    async def call(self, op: str, **fields: Any) -> Any:
        ident = self._next
        self._next += 1
        reply = await self.send_line(json.dumps({"id": ident, "op": op, **fields}))
        assert reply.get("id") == ident, f"reply to request {ident} of {op}: {reply}"
        if not reply["ok"]:
            raise DriverError(op, reply["error"], reply["hint"])
        return reply["result"]

    def stderr(self) -> str:
        self._stderr.seek(0)
        text: str = self._stderr.read()
        return text[-4000:]

    async def close(self) -> None:
        """Quit the browser and wait for the driver; kill it when it does not exit in time."""
        try:
            if self.proc.returncode is None:
                # A driver that already failed cannot answer: it is killed below if it does
                # not exit.
                with contextlib.suppress(AssertionError, TimeoutError, ConnectionError):
                    await asyncio.wait_for(self.call("quit"), QUIT_TIMEOUT_S)
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
                try:
                    await asyncio.wait_for(self.proc.wait(), QUIT_TIMEOUT_S)
                except TimeoutError:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    await self.proc.wait()
        finally:
            # Whatever the driver leaves behind goes too: its own group, and Firefox's (a driver
            # that hung could not close it). After a clean quit both are gone already.
            for group in (self.proc.pid, self.browser_pid):
                if group is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(group, signal.SIGKILL)
            self._stderr.close()


@dataclass
class FirefoxTab:
    driver: Driver
    tab: int

    async def evaluate(self, fn: str, arg: Any = None) -> Any:
        """Call the function whose source is ``fn`` in the page with ``arg``; its value (JSON)."""
        return (await self.driver.call("evaluate", tab=self.tab, fn=fn, arg=arg))["value"]

    async def state(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.evaluate(STATE)
        return result

    @staticmethod
    def hashes(state: dict[str, Any]) -> dict[int, str]:
        return {r["step"]: r["hash"] for r in state["records"]}

    async def check_clean(self) -> None:
        """No console error, page error, response >= 400 or request to another host."""
        report = await self.driver.call("report", tab=self.tab)
        assert not report["errors"], f"Firefox console errors: {report['errors']}"
        assert not report["failed"], f"Firefox failed requests: {report['failed']}"
        assert not report["foreign"], f"Firefox reached outside the test: {report['foreign']}"


@asynccontextmanager
async def firefox(accept_insecure_certs: bool = False) -> AsyncIterator[Driver]:
    """A headless firefox-esr behind the driver (skips, or fails under CI, when missing).
    ``accept_insecure_certs`` stands in for a person accepting the server's own certificate."""
    require(missing(), on_ci())
    driver = await Driver.start()
    try:
        launched = await driver.call(
            "launch", executable=str(FIREFOX), prefs=PREFS,
            acceptInsecureCerts=accept_insecure_certs,
        )  # fmt: skip
        driver.browser_pid = launched["pid"]
        yield driver
    finally:
        await driver.close()


async def open_tab(driver: Driver, url: str, hosts: tuple[str, ...]) -> FirefoxTab:
    """A new tab on ``url``; requests to hosts other than ``hosts`` count as foreign."""
    opened = await driver.call("open", url=url, hosts=list(hosts))
    assert opened["status"] == 200, f"GET {url} in Firefox: {opened}"
    return FirefoxTab(driver, opened["tab"])


async def joined(tab: FirefoxTab, timeout: float = 120) -> dict[str, Any]:
    """Wait until the page's peer has its id (admitted to the group); its state then."""
    deadline = time.monotonic() + timeout
    while True:
        state = await tab.state()
        if state["id"]:
            return state
        assert not state["errors"], f"the page could not start in Firefox: {state['errors']}"
        assert time.monotonic() < deadline, f"Firefox's page never joined: {state['status']}"
        await asyncio.sleep(0.25)
