"""The mesh check page (tests/pages/mesh-check.html, a test page the server does not serve) in a
Chromium tab on the real server's origin, through tests/repo_route.py, as the browser mesh
tests drive it: ``chromium()`` (the project's offline flags plus ``WEBRTC_FLAGS``), ``open_tab()``
(returns once the page joined ``/ws``), a ``Tab`` whose console errors and requests to any other
host are collected, and the page-side scripts run with ``page.evaluate``: ``WAIT_OPEN`` (wait
for open channels), ``SEND`` (two messages around a payload of ``pattern`` bytes), ``RECEIVE``
(parse what a peer sent with frames.js/messages.js) and ``TRICKLES``; ``check_received()``
checks a ``RECEIVE`` answer against Python's ``wire.frames``/``wire.messages``.

Used by tests/browser/test_browser_mesh.py and tests/p2p/test_ice.py (which imports it inside
its test, so only that test skips). Importing it skips the importing module when
/usr/bin/chromium or the ``playwright`` package is missing, with the reason.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

import page_helpers
import repo_route
from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBRTC_FLAGS
from daisychain.wire import frames, messages

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
async_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)

WAIT_MS = 30_000
# The page and its modules come through the test route (repo_route), all from /repo/: the
# page's check.js imports /repo/static/js/p2p/mesh.js, and the scripts below import the same
# URLs, so they reach the page's own module instances.
PAGE = "/repo/tests/pages/mesh-check.html"
CHECK = "/repo/tests/pages/check.js"
JS = "/repo/static/js"


def pattern(n: int, salt: int) -> bytes:
    """Test bytes that deflate about halves (random values 0..15, xorshift32); same in page JS."""
    out = bytearray(n)
    s = salt or 1
    for i in range(n):
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        out[i] = s & 15
    return bytes(out)


# Page-side helpers (run with page.evaluate; the page's CSP allows its own modules).
PATTERN_JS = """
const pattern = (n, salt) => {
  const out = new Uint8Array(n);
  let s = salt || 1;
  for (let i = 0; i < n; i++) {
    s = (s ^ (s << 13)) >>> 0;
    s = (s ^ (s >>> 17)) >>> 0;
    s = (s ^ (s << 5)) >>> 0;
    out[i] = s & 15;
  }
  return out;
};
"""

WAIT_OPEN = """
async ([count, waitMs]) => {
  const { mesh } = await import('/repo/tests/pages/check.js');
  const deadline = Date.now() + waitMs;
  while (mesh.openPeers().length < count) {
    if (Date.now() > deadline) throw new Error(`${mesh.openPeers().length}/${count} channels open`);
    await new Promise((r) => setTimeout(r, 50));
  }
  return { id: mesh.id, peers: mesh.openPeers() };
}
"""

SEND = (
    """
async ([peer, n, salt, deflate, transfer]) => {
  const { mesh } = await import('/repo/tests/pages/check.js');
  const M = await import('/repo/static/js/p2p/messages.js');
"""
    + PATTERN_JS
    + """
  const hello = M.message('hello', { version: M.DATA_PROTOCOL_VERSION, name: `tab ${mesh.id}`,
    contract: M.CONTRACT_VERSION });
  const leave = M.message('leave', { reason: 'end of the exchange test' });
  const ok = [
    mesh.sendMessage(peer, hello),
    mesh.sendPayload(peer, { kind: 2, step: 3, round: 1, chunk: 2, transfer, deflate,
      payload: pattern(n, salt) }),
    mesh.sendMessage(peer, leave),
  ];
  return ok;
}
"""
)

# Waits until `peer` sent two messages and a whole payload; parses both with the JS mirror.
RECEIVE = """
async ([peer, limit, waitMs]) => {
  const { inbox } = await import('/repo/tests/pages/check.js');
  const F = await import('/repo/static/js/p2p/frames.js');
  const M = await import('/repo/static/js/p2p/messages.js');
  const r = new F.Reassembler(() => limit);
  const deadline = Date.now() + waitMs;
  const out = { messages: [], frames: 0, maxFrame: 0, flags: [], payload: null, order: [] };
  let seen = 0;
  while (out.payload === null || out.messages.length < 2) {
    if (seen === inbox.length) {
      if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify(out)}`);
      await new Promise((res) => setTimeout(res, 20));
      continue;
    }
    const item = inbox[seen++];
    if (item.peer !== peer) continue;
    if (item.type === 'message') {
      out.messages.push(M.encode(M.parse(item.data)));
      out.order.push('message');
      continue;
    }
    out.frames++;
    out.maxFrame = Math.max(out.maxFrame, item.data.length);
    out.flags.push(F.parseHeader(item.data).head.flags);
    const done = await r.feed(item.data);
    if (done !== null) {
      out.order.push('payload');
      const digest = await crypto.subtle.digest('SHA-256', done.data);
      out.payload = { kind: done.kind, step: done.step, round: done.round, chunk: done.chunk,
        bytes: done.data.length,
        sha256: [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('') };
    }
  }
  return out;
}
"""

TRICKLES = """
async () => (await import('/repo/tests/pages/check.js')).mesh.links.values().next().value.trickle
"""


@dataclass
class Tab:
    page: Any  # playwright.async_api.Page
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def check_clean(self) -> None:
        unexpected = [e for e in self.errors if not any(p.search(e) for p in self.allowed)]
        assert not unexpected, f"console errors: {unexpected}"
        assert not self.foreign, f"the page reached outside the test server: {self.foreign}"


@asynccontextmanager
async def chromium() -> AsyncIterator[Any]:
    async with async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=str(CHROMIUM), args=[*OFFLINE_FLAGS, *WEBRTC_FLAGS]
        )
        try:
            yield browser
        finally:
            await browser.close()


async def open_tab(browser: Any, base: str, query: str = "") -> Tab:
    page = await browser.new_page()
    await repo_route.install(page.context, base)
    tab = Tab(page)
    page_helpers.listen(page, tab.errors, tab.foreign)
    response = await page.goto(base + PAGE + query)
    assert response is not None and response.ok, f"GET {PAGE}: {response}"
    await page.wait_for_selector("body[data-signaling='joined']", state="attached", timeout=WAIT_MS)
    return tab


def expected_payload(n: int, salt: int) -> dict[str, Any]:
    data = pattern(n, salt)
    return {"kind": 2, "step": 3, "round": 1, "chunk": 2, "bytes": n,
            "sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip


def check_received(got: dict[str, Any], n: int, salt: int, deflate: bool, sender: str) -> None:
    assert got["payload"] == expected_payload(n, salt)
    assert got["frames"] >= 2, "the payload must have been fragmented"
    assert got["maxFrame"] <= frames.MAX_FRAME_BYTES
    assert set(got["flags"]) == {frames.FLAG_DEFLATE if deflate else 0}
    assert got["order"] == ["message", "payload", "message"], "queue order not kept"
    hello, leave = (messages.parse(text) for text in got["messages"])
    assert isinstance(hello, messages.Hello) and hello.name == f"tab {sender}"
    assert isinstance(leave, messages.Leave)
