"""Private data from the page (issue 22, Must-show 2; docs/PROTOCOL.md "Private data"): a page
chooses a text file of its own, says what it holds, and trains on its own batches from it with a
headless Python leader: the hashes are identical, the leader records that the page had private
data (and the page's Group panel shows it), and no byte of the file leaves the page. The
traffic is captured whole: every HTTP request of the browser context (URL and body), every
WebSocket frame both ways, every data-channel message the page sends (RTCDataChannel.send,
wrapped before the page's scripts run) and every one the Python peer receives; a marker planted
throughout the file is searched in all of it as UTF-8 and UTF-16 text and as its token ids in
16- and 32-bit little-endian arrays. The companion test sends the marker on purpose through each
of those paths and shows that the same scan finds it there. Screenshots of the chosen file at
390x844 and 1280x800 and of the Group panel during the run (docs/guide/private-text-*.png with
DAISYCHAIN_WRITE_GUIDE=1)."""

from __future__ import annotations

import asyncio
import base64
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import page_helpers
from daisychain.bench.rig.chromium import CHROMIUM
from daisychain.p2p.mesh import ChannelMessage, Mesh, MeshEvent
from daisychain.tokenizer import load_default
from mesh_helpers import FAST, finish, lead_config, needs_namespace, signaling_server, start_peer

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)
pytestmark = [needs_namespace, pytest.mark.timeout(600)]

MARKER = "DAISYCHAIN-PRIVATE-MARKER-7f3a"
TIMERS = f"repair_after={FAST.repair_after_s}&step_timeout={FAST.step_timeout_s}"
APP = "(await import('/js/app.js')).app"
RECORDS = f"async () => {APP}.peer?.records.map((r) => [r.step, r.hash, r.privateData]) ?? []"

# Installed before the page's own scripts: a copy of every message the page hands to a data
# channel, as base64 (a Blob, which the page never sends, would be recorded as such).
CAPTURE_SEND = """
(() => {
  const sent = [];
  window.__dcSent = sent;
  const b64 = (u8) => {
    let s = '';
    for (let i = 0; i < u8.length; i += 0x8000) {
      s += String.fromCharCode(...u8.subarray(i, i + 0x8000));
    }
    return btoa(s);
  };
  const send = RTCDataChannel.prototype.send;
  RTCDataChannel.prototype.send = function (data) {
    if (typeof data === 'string') sent.push(['text', b64(new TextEncoder().encode(data))]);
    else if (data instanceof ArrayBuffer) sent.push(['bytes', b64(new Uint8Array(data))]);
    else if (ArrayBuffer.isView(data)) {
      sent.push(['bytes', b64(new Uint8Array(data.buffer, data.byteOffset, data.byteLength))]);
    } else sent.push(['other', b64(new TextEncoder().encode(String(data)))]);
    return send.call(this, data);
  };
})();
"""


def private_text() -> str:
    """Ordinary prose with the marker planted on every line (about 40 KB)."""
    lines = []
    for i in range(400):
        lines.append(
            f"Entry {i}: the tide was low at dawn and the boats stayed in; {MARKER} was written "
            f"in the margin of page {i % 37}, next to the weather, the wind and {i * 7} gulls."
        )
    return "\n".join(lines) + "\n"


def marker_ids() -> list[int]:
    """The marker's token ids as the page's tokenizer gives them wherever it stands in the file:
    the ids it has both alone and after a space (the first piece depends on what precedes)."""
    tok = load_default()
    alone, spaced = tok.encode(MARKER), tok.encode(" " + MARKER)
    common = 0
    while common < min(len(alone), len(spaced)) and alone[-1 - common] == spaced[-1 - common]:
        common += 1
    assert common >= 6, (alone, spaced)  # 12+ bytes: no gradient byte run matches by chance
    return alone[-common:]


def needles() -> dict[str, bytes]:
    ids = marker_ids()
    return {
        "UTF-8 text": MARKER.encode("utf-8"),
        "UTF-16 text": MARKER.encode("utf-16-le"),
        "uint16 ids": np.asarray(ids, dtype="<u2").tobytes(),
        "int32 ids": np.asarray(ids, dtype="<i4").tobytes(),
    }


def findings(traffic: Iterable[tuple[str, bytes]]) -> list[str]:
    """Every (needle, where) the marker was found in: the scan both tests run."""
    found = []
    for where, blob in traffic:
        for what, needle in needles().items():
            if needle in blob:
                found.append(f"{what} in {where}")
    return found


class Traffic:
    """Everything the page's browser context sends or receives outside the page's memory,
    except the data-channel messages (the init script and the Python side record those)."""

    def __init__(self) -> None:
        self.items: list[tuple[str, bytes]] = []

    def watch(self, tab: page_helpers.Tab) -> None:
        def on_request(request: Any) -> None:
            self.items.append((f"request URL {request.url[:80]}", request.url.encode("utf-8")))
            body = request.post_data_buffer
            if body:
                self.items.append((f"request body {request.url[:80]}", bytes(body)))

        def frame(where: str) -> Any:
            def record(payload: str | bytes) -> None:
                data = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
                self.items.append((where, data))

            return record

        def on_websocket(ws: Any) -> None:
            self.items.append((f"websocket URL {ws.url}", ws.url.encode("utf-8")))
            ws.on("framesent", frame(f"websocket frame sent on {ws.url}"))
            ws.on("framereceived", frame(f"websocket frame received on {ws.url}"))

        tab.page.context.on("request", on_request)  # workers' requests too
        tab.page.on("websocket", on_websocket)

    async def data_channel(self, tab: page_helpers.Tab) -> list[tuple[str, bytes]]:
        sent = await tab.page.evaluate("window.__dcSent")
        return [(f"data-channel {kind} #{i} sent by the page", base64.b64decode(data))
                for i, (kind, data) in enumerate(sent)]  # fmt: skip


class RecordingMesh(Mesh):
    """The Python peer's mesh, keeping a copy of every data-channel message it receives."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.received: list[tuple[str, bytes]] = []
        mesh = self

        class Recording(asyncio.Queue[MeshEvent]):
            def put_nowait(self, item: MeshEvent) -> None:
                if isinstance(item, ChannelMessage):
                    data = item.data.encode("utf-8") if isinstance(item.data, str) else item.data
                    n = len(mesh.received)
                    mesh.received.append((f"data-channel #{n} received from {item.peer}", data))
                super().put_nowait(item)

        self.events = Recording()


async def open_capturing(browser: Any, url: str, traffic: Traffic) -> page_helpers.Tab:
    tab = await page_helpers.new_tab(browser, page_helpers.DESKTOP)
    traffic.watch(tab)
    await tab.page.add_init_script(CAPTURE_SEND)
    response = await tab.page.goto(f"{url}/?name=notebook&{TIMERS}")
    assert response is not None and response.ok
    await page_helpers.joined(tab)
    return tab


async def test_private_text_trains_with_a_python_peer_and_never_leaves_the_page(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "field-notes.txt"
    notes.write_text(private_text(), encoding="utf-8")
    traffic = Traffic()
    async with signaling_server() as url, page_helpers.chromium() as browser:
        tab = await open_capturing(browser, url, traffic)
        tab_id = await tab.peer_id()
        picker = tab.page.get_by_label("Private text (stays on this device)")
        await page_helpers.until(picker.is_enabled, 120, "the file picker (the page loaded)")
        await picker.set_input_files(str(notes))
        said = await page_helpers.shows(
            tab, "#private .said", r"^Private text: field-notes\.txt, [\d,]+ tokens — trains "
            r"here; only gradients leave this device$",
        )  # fmt: skip
        count = int(said.split(", ")[1].split(" ")[0].replace(",", ""))
        ids = await tab.page.evaluate(f"async () => Array.from({APP}.page.privateText.ids)")
        assert count == len(ids) == len(load_default().encode(private_text())), said
        planted = marker_ids()
        assert any(ids[i : i + len(planted)] == planted for i in range(len(ids))), (
            "the scan looks for ids the page's private tokens hold"
        )
        for name, viewport in (("desktop", page_helpers.DESKTOP), ("phone", page_helpers.PHONE)):
            await tab.page.set_viewport_size(viewport)
            await page_helpers.check_page(tab, f"a private text chosen ({name})")
            await page_helpers.screenshot(tab, f"private-text-{name}", tmp_path, "#private")
        await tab.page.set_viewport_size(page_helpers.DESKTOP)

        # A Python leader; the page follows. Long enough to look at the page during the run,
        # then the leader ends it at a step boundary (no timing decides anything).
        py = await start_peer(url, "py-lead", lead=lead_config(steps=1000, min_peers=2),
                              mesh_cls=RecordingMesh)  # fmt: skip

        async def two_steps() -> bool:
            return len(await tab.page.evaluate(RECORDS)) >= 2

        await page_helpers.until(two_steps, 300, "the page's first two steps")
        badge = tab.page.locator(f'#group li[data-peer="{tab_id}"] .badge.private-data')
        await page_helpers.until(badge.is_visible, 60, "the private data tag in Group")
        assert await badge.inner_text() == "private data"
        await page_helpers.shows(
            tab, "#private .this-run", r"^In this run, this device trains on field-notes\.txt\.$"
        )
        await page_helpers.screenshot(tab, "private-text-group-1280", tmp_path, "#group h2")
        py.node.end_run("the test has seen enough")
        outcomes = await finish([py], timeout=300)
        assert outcomes[0].reason == "leader-request", outcomes
        last = py.records[-1].step

        async def all_steps() -> bool:
            return any(s == last for s, _, _ in await tab.page.evaluate(RECORDS))

        await page_helpers.until(all_steps, 120, "the page's last step")
        records = await tab.page.evaluate(RECORDS)
        tab_hashes = {s: h for s, h, _ in records}
        assert {s: tab_hashes[s] for s in range(1, last + 1)} == py.hashes, "replicas differ"
        # The run's record of who had private data: the leader's, and the page's own.
        assert py.node.private_data_peers == {tab_id}
        assert all(r.private_data == (tab_id,) for r in py.records), py.records
        assert all(p == [tab_id] for _, _, p in records), records

        # Not one byte of the file in anything that left the page (or came back to it).
        page_sent = await traffic.data_channel(tab)
        assert isinstance(py.node.mesh, RecordingMesh)
        received = py.node.mesh.received
        everything = [*traffic.items, *page_sent, *received]
        assert findings(everything) == []
        # ... and the capture saw the run: requests, signaling and the gradients both ways.
        assert any("request URL" in w for w, _ in traffic.items)
        assert any("websocket frame sent" in w for w, _ in traffic.items)
        binary = sum(len(b) for w, b in page_sent if "bytes" in w)
        assert binary > 10_000 * last, f"only {binary} bytes of frames sent by the page"
        assert sum(len(b) for _, b in received) > 10_000 * last
        tab.check_clean()


async def test_the_scan_finds_the_marker_wherever_the_page_sends_it(tmp_path: Path) -> None:
    """The same capture and scan, with the marker sent on purpose: in a request's URL and
    body, on a WebSocket, and to the Python peer on the data channel as text and as ids."""
    traffic = Traffic()
    async with signaling_server() as url, page_helpers.chromium() as browser:
        tab = await open_capturing(browser, url, traffic)
        py = await start_peer(url, "py-follow", mesh_cls=RecordingMesh)
        mesh = py.node.mesh
        assert isinstance(mesh, RecordingMesh)

        async def linked() -> bool:
            return bool(await tab.page.evaluate(f"async () => {APP}.mesh.openPeers().length"))

        await page_helpers.until(linked, 60, "the page's data channel to the Python peer")
        assert findings(traffic.items + await traffic.data_channel(tab)) == [], "clean so far"
        ids = marker_ids()
        await tab.page.evaluate(
            """async ([marker, ids, peer]) => {
              const { app } = await import('/js/app.js');
              await fetch(`/api/status?note=${marker}`);
              await fetch('/api/status', { method: 'POST', body: `x ${marker} x` });
              const ws = new WebSocket(`${location.origin.replace('http', 'ws')}/ws`);
              await new Promise((resolve) => { ws.onopen = resolve; });
              ws.send(JSON.stringify({ type: 'hello', note: marker }));
              ws.close();
              app.mesh.sendFrames(peer, [`{"note": "${marker}"}`, new Uint16Array(ids),
                new Int32Array(ids)]);
            }""",
            [MARKER, ids, py.node.id],
        )

        async def got_all() -> bool:
            return len(findings(mesh.received)) >= 3

        await page_helpers.until(got_all, 60, "the Python peer to receive the three")
        found = findings(traffic.items + await traffic.data_channel(tab) + mesh.received)
        expected = [
            "UTF-8 text in request URL",
            "UTF-8 text in request body",
            "UTF-8 text in websocket frame sent",
            "UTF-8 text in data-channel text",
            "uint16 ids in data-channel bytes",
            "int32 ids in data-channel bytes",
        ]
        for what in expected:
            assert any(f.startswith(what) for f in found), (what, found)
        assert sum("received from" in f for f in found) >= 3, found
        py.node.shutdown("the test is over")
        await finish([py], timeout=60)
