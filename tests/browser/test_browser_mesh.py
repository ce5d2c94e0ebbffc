"""The browser mesh (static/js/p2p/): Chromium tabs on the mesh check page (tests/pages/, served
on the real server's origin by the test route of tests/repo_route.py; the server itself does not
serve it).

Every test runs inside the test run's network namespace (conftest.py), like the other mesh
tests: the tabs and the Python peer gather host candidates on the namespace's veth address and
nothing leaves the machine. Chromium gets the project's offline flags plus ``WEBRTC_FLAGS``
(host candidates as addresses, not mDNS names). What the tests prove:

- two tabs connect through ``/ws`` (who offers by id), exchange control messages
  (messages.js, parsed on arrival) and a fragmented, compressed payload both ways, each end
  reassembling it with frames.js (CRC-32 checked) to the exact bytes;
- a tab and a headless Python peer (``daisychain.p2p.mesh.Mesh``, aiortc) do the same: the
  Python side parses the tab's frames and messages with ``wire.frames``/``wire.messages`` and
  the tab parses Python's with frames.js/messages.js;
- when the server goes away, the page says so and reconnects with growing, jittered delays,
  and is admitted again (a new id) when the server is back;
- the wire vectors (tests/vectors/p2p_wire/) replay in Chromium as under Node: Chromium's
  DecompressionStream refuses trailing bytes itself and words its errors its own way, and the
  answers must still be Python's.

A console error on a page fails its test (the only ones expected are Chromium's own reports of
the refused WebSocket connects while the server is down, in the reconnect test). The tab and the
page-side scripts it shares with tests/p2p/test_ice.py are tests/mesh_check_helpers.py's.
"""

from __future__ import annotations

import asyncio
import json
import re

from daisychain.p2p import DATA_PROTOCOL_VERSION
from daisychain.p2p.mesh import ChannelMessage, Mesh
from daisychain.wire import frames, messages
from daisychain.wire.frames import FrameKind
from mesh_check_helpers import (
    RECEIVE,
    SEND,
    TRICKLES,
    WAIT_MS,
    WAIT_OPEN,
    check_received,
    chromium,
    open_tab,
    pattern,
)
from mesh_helpers import needs_namespace
from server_fixtures import AppServer
from vectorgen import wire
from vectorgen.files import SOURCE_DIR

pytestmark = needs_namespace


# Every wire vector through frames.js/messages.js in the page; returns the mismatches.
REPLAY = """
async ([fv, mv]) => {
  const F = await import('/repo/static/js/p2p/frames.js');
  const M = await import('/repo/static/js/p2p/messages.js');
  const bytes = (b64) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const blob = (name) => bytes(fv.blobs[name]);
  const zlibWords = 'payload is not valid deflate-raw data (';
  const same = (exc, want) => exc.name === want.error && (exc.message === want.message ||
    (want.message.startsWith(zlibWords) && exc.message.startsWith(zlibWords)));
  const bad = [];
  let checked = 0;
  for (const c of fv.reassembly) {
    const r = new F.Reassembler((kind) => c.limits[String(kind)]);
    for (let i = 0; i < c.frames.length; i++) {
      const want = c.results[i];
      checked++;
      try {
        const got = await r.feed(blob(c.frames[i]));
        if (want.error) bad.push(`${c.name}/${i}: accepted, Python: ${want.message}`);
        else if (want.incomplete ? got !== null :
          got === null || bytes(fv.blobs[want.payload.data]).join() !== got.data.join()) {
          bad.push(`${c.name}/${i}: wrong payload`);
        }
      } catch (exc) {
        if (!want.error || !same(exc, want)) bad.push(`${c.name}/${i}: ${exc.message}`);
      }
    }
  }
  for (const c of fv.inflate) {
    checked++;
    try {
      const out = await F.inflate(bytes(c.data), c.limit);
      if (c.error || bytes(c.output).join() !== out.join()) bad.push(`inflate ${c.name}: accepted`);
    } catch (exc) {
      if (!c.error || !same(exc, c)) bad.push(`inflate ${c.name}: ${exc.name}: ${exc.message}`);
    }
  }
  for (const c of mv.cases) {
    checked++;
    try {
      const got = M.encode(M.parse(c.raw));
      if (got !== c.encoded) bad.push(`${c.name}: ${got}`);
    } catch (exc) {
      const e = c.error;
      if (!e || exc.code !== e.code || exc.message !== e.message || exc.hint !== e.hint) {
        bad.push(`${c.name}: ${exc.code}: ${exc.message}`);
      }
    }
  }
  return { checked, bad };
}
"""

# A 6 MiB payload through a real RTCDataChannel, recording bufferedAmount after every send.
SEND_WATCHED = """
async ([peer, n]) => {
  const { mesh } = await import('/repo/tests/pages/check.js');
  const channel = mesh.links.get(peer).channel;
  const send = channel.send.bind(channel);
  const seen = { peak: 0, sends: 0 };
  channel.send = (data) => {
    send(data);
    seen.sends++;
    seen.peak = Math.max(seen.peak, channel.bufferedAmount);
  };
  const payload = new Uint8Array(n);
  for (let i = 0; i < n; i++) payload[i] = (i * 7) & 0xff;
  mesh.sendPayload(peer, { kind: 3, step: 1, transfer: 77, payload });
  while (mesh.buffered(peer) > 0) await new Promise((r) => setTimeout(r, 20));
  channel.send = send;
  return seen;
}
"""

RECEIVE_BIG = """
async ([peer, n, waitMs]) => {
  const { inbox } = await import('/repo/tests/pages/check.js');
  const F = await import('/repo/static/js/p2p/frames.js');
  const r = new F.Reassembler(() => n);
  const deadline = Date.now() + waitMs;
  for (let seen = 0; ;) {
    if (seen === inbox.length) {
      if (Date.now() > deadline) throw new Error(`timed out after ${seen} messages`);
      await new Promise((res) => setTimeout(res, 10));
      continue;
    }
    const item = inbox[seen++];
    if (item.peer !== peer || item.type !== 'frame') continue;
    const done = await r.feed(item.data);
    if (done === null || done.kind !== 3) continue; // the earlier exchange's payload is kind 2
    return done.data.every((v, i) => v === ((i * 7) & 0xff)) ? done.data.length : -1;
  }
}
"""

EVENTS = """
async () => {
  const { events } = await import('/repo/tests/pages/check.js');
  return events.map(({ type, detail }) => ({ type, detail }));
}
"""


async def test_two_tabs_exchange_messages_and_compressed_fragmented_frames() -> None:
    server = AppServer()
    await server.start()
    try:
        async with chromium() as browser:
            a = await open_tab(browser, server.url)
            b = await open_tab(browser, server.url)
            ia, ib = await asyncio.gather(
                a.page.evaluate(WAIT_OPEN, [1, WAIT_MS]), b.page.evaluate(WAIT_OPEN, [1, WAIT_MS])
            )
            assert ia["peers"] == [ib["id"]] and ib["peers"] == [ia["id"]]
            # a -> b: 300 000 compressible bytes deflated (still more than one frame);
            # b -> a: 120 000 bytes uncompressed (three frames).
            sent = await asyncio.gather(
                a.page.evaluate(SEND, [ib["id"], 300_000, 1, True, 11]),
                b.page.evaluate(SEND, [ia["id"], 120_000, 2, False, 12]),
            )
            assert list(sent) == [[True, True, True], [True, True, True]]
            got_b, got_a = await asyncio.gather(
                b.page.evaluate(RECEIVE, [ia["id"], 1 << 20, WAIT_MS]),
                a.page.evaluate(RECEIVE, [ib["id"], 1 << 20, WAIT_MS]),
            )
            check_received(got_b, 300_000, 1, True, ia["id"])
            check_received(got_a, 120_000, 2, False, ib["id"])
            # Flow control on a real channel: 6 MiB leave a -> b with never more than
            # HIGH_WATER (1 MiB) plus one frame in the channel's buffer.
            n = 6 * 1024 * 1024
            got_big = asyncio.ensure_future(b.page.evaluate(RECEIVE_BIG, [ia["id"], n, WAIT_MS]))
            seen = await a.page.evaluate(SEND_WATCHED, [ib["id"], n])
            assert await got_big == n
            assert seen["sends"] == -(-n // frames.MAX_FRAGMENT_BYTES)
            assert 0 < seen["peak"] <= 1024 * 1024 + frames.MAX_FRAME_BYTES, seen
            events = await a.page.evaluate(EVENTS)
            assert [e["type"] for e in events if e["type"] == "error"] == []
            trickled = await a.page.evaluate(TRICKLES)
            assert trickled is True, "two browsers trickle ICE to each other"
            a.check_clean()
            b.check_clean()
    finally:
        await server.stop()


async def python_receive(
    mesh: Mesh, peer: str, limit: int, timeout: float
) -> tuple[list[messages.Message], frames.Payload, int]:
    """Read mesh events until ``peer`` sent two messages and one whole payload."""
    r = frames.Reassembler(lambda kind: limit)
    got: list[messages.Message] = []
    payload: frames.Payload | None = None
    count = 0
    async with asyncio.timeout(timeout):
        while payload is None or len(got) < 2:
            event = await mesh.events.get()
            if not isinstance(event, ChannelMessage) or event.peer != peer:
                continue
            if isinstance(event.data, str):
                got.append(messages.parse(event.data))
                continue
            count += 1
            assert len(event.data) <= frames.MAX_FRAME_BYTES
            head, _ = frames.parse_header(event.data)
            assert head.flags == frames.FLAG_DEFLATE
            payload = r.feed(event.data) or payload
    assert payload is not None
    return got, payload, count


async def test_tab_and_python_peer_exchange_frames_both_ways() -> None:
    server = AppServer()
    await server.start()
    py = Mesh(server.url, name="python")
    try:
        await py.connect()
        async with chromium() as browser:
            tab = await open_tab(browser, server.url)
            info = await tab.page.evaluate(WAIT_OPEN, [1, WAIT_MS])
            assert info["peers"] == [py.id]
            async with asyncio.timeout(WAIT_MS / 1000):
                while py.open_peers() != {info["id"]}:
                    await asyncio.sleep(0.05)
            # Python -> tab: Python's hello, a deflated 200 000-byte payload, a leave.
            tab_id = info["id"]
            hello = messages.Hello(version=DATA_PROTOCOL_VERSION, name=f"tab {py.id}")
            assert py.send(tab_id, messages.encode(hello))
            body = pattern(200_000, 3)
            parts = frames.fragment(FrameKind.REDUCED, body, transfer=21, step=3, round=1,
                                    chunk=2, deflate=True)  # fmt: skip
            assert py.send_frames(tab_id, parts)
            assert py.send(tab_id, messages.encode(messages.Leave(reason="done")))
            # Tab -> Python: the same shape, compressed by the browser's CompressionStream.
            sent = await tab.page.evaluate(SEND, [py.id, 250_000, 4, True, 22])
            assert sent == [True, True, True]
            got_tab = await tab.page.evaluate(RECEIVE, [py.id, 1 << 20, WAIT_MS])
            check_received(got_tab, 200_000, 3, True, py.id)
            got, payload, count = await python_receive(py, tab_id, 1 << 20, WAIT_MS / 1000)
            assert count >= 2
            assert (payload.kind, payload.step, payload.round, payload.chunk) == (
                FrameKind.REDUCED, 3, 1, 2,
            )  # fmt: skip
            assert payload.data == pattern(250_000, 4)
            assert isinstance(got[0], messages.Hello) and got[0].name == f"tab {tab_id}"
            assert isinstance(got[1], messages.Leave)
            trickled = await tab.page.evaluate(TRICKLES)
            assert trickled is False, "the Python peer never trickles: it gets full descriptions"
            tab.check_clean()
    finally:
        await py.close()
        await server.stop()


async def test_page_reconnects_with_backoff_when_the_server_goes_away() -> None:
    server = AppServer()
    await server.start()
    try:
        async with chromium() as browser:
            tab = await open_tab(browser, server.url, "?seed=7")
            # Chromium reports each refused connect on the console itself: expected here.
            refused = r"WebSocket connection to 'ws://127\.0\.0\.1:\d+/ws' failed"
            tab.allowed.append(re.compile(refused))
            first = await tab.page.text_content("#me")
            await server.stop()  # the server closes every socket (1001) and stops listening
            # The state and the line it shows, read in one look from inside the page: the first
            # wait is 125-250 ms, shorter than two round trips to a loaded browser (CI once read
            # the line after the page had moved on to "connecting").
            await tab.page.wait_for_function(
                """() => document.body.dataset.signaling === 'reconnecting'
                    && (document.querySelector('#signaling')?.textContent ?? '')
                        .startsWith('reconnecting in ')""",
                timeout=WAIT_MS,
            )
            # Let a few connects fail so the delays grow, then bring the server back.
            async with asyncio.timeout(WAIT_MS / 1000):
                while True:
                    events = await tab.page.evaluate(EVENTS)
                    waits = [e["detail"] for e in events if e["type"] == "signaling"
                             and e["detail"]["state"] == "reconnecting"]  # fmt: skip
                    if len(waits) >= 3:
                        break
                    await asyncio.sleep(0.1)
            await server.start()
            await tab.page.wait_for_selector(
                "body[data-signaling='joined']", state="attached", timeout=WAIT_MS
            )
            events = await tab.page.evaluate(EVENTS)
            second = await tab.page.text_content("#me")
            errors = await tab.page.locator("#errors li").all_text_contents()
            tab.check_clean()
    finally:
        await server.stop()
    waits = [e["detail"] for e in events
             if e["type"] == "signaling" and e["detail"]["state"] == "reconnecting"]  # fmt: skip
    assert len(waits) >= 3
    for n, wait in enumerate(waits[:3]):
        cap = min(4000, 250 * 2**n)  # the page's backoff: 250 ms doubling, capped at 4 s
        assert wait["attempt"] == n + 1
        assert cap / 2 <= wait["delayMs"] <= cap, (n, wait)
    assert "1001" in waits[0]["reason"], waits[0]
    welcomes = [e["detail"]["id"] for e in events if e["type"] == "welcome"]
    assert len(welcomes) == 2 and welcomes[0] != welcomes[1], "a reconnect is a new identity"
    assert first and second and first != second
    assert any("signaling lost" in e for e in errors), errors


async def test_wire_vectors_replay_in_chromium() -> None:
    fv, mv = (
        json.loads((SOURCE_DIR / wire.SUBDIR / n).read_text())
        for n in ("frames.json", "messages.json")
    )
    server = AppServer()
    await server.start()
    try:
        async with chromium() as browser:
            tab = await open_tab(browser, server.url)
            result = await tab.page.evaluate(REPLAY, [fv, mv])
            tab.check_clean()
    finally:
        await server.stop()
    total = sum(len(c["frames"]) for c in fv["reassembly"]) + len(fv["inflate"]) + len(mv["cases"])
    assert result["checked"] == total
    assert result["bad"] == [], result["bad"]
