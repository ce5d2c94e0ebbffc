"""The live panel of the page at ``/`` (static/js/page/live.js, chart.js): issue 11 Must-show 3.

Two Chromium tabs (a desktop 1280x800 and a phone 390x844 viewport) and a headless Python peer
(``daisychain.p2p.node.Node`` over aiortc, in this process) meet on the real server inside the
test run's network namespace (conftest.py), as in tests/browser/test_browser_peer.py. The desktop
tab leads through the leader's form (its labelled fields and "Start the run"); the phone tab and the
Python peer follow. While the run trains:

- each tab's chart has exactly one training point per applied step (``live.chart.points`` equals
  the peer's step records, steps 1..S);
- the hash line says "3 replicas identical at step N, hash XXXXXXXX…" with the Python peer's own
  hash of step N, and the units line counts the backends the group's hashes named;
- validation points appear at the panel's schedule (every 10 steps of a 200-step run, which
  Stop ends early), and each equals ``daisychain.training.eval_loss`` (Python) on the Python
  peer's state of that step, whose hash is the tab's;
- the group panel names each device's share of the step (protocol v2: "computes N of G
  sequences", or "follows without computing"), G being the form's default global batch (the batch
  per device x the three devices ready when Start was pressed), and the group's speed next to
  the fastest device's alone ("group N tok/s; fastest device alone ≈ M tok/s"), and the live
  panel's devices table has each one's share ("N of G", "follows");
- "Stop the run" ends the run for every peer at a step boundary, and the chart stops there;
- the keep panel's "Download checkpoint" then saves that step's state, which
  ``daisychain.checkpoint.load`` reads with the hash every replica published for it.

Neither viewport overflows sideways, every control of the panel has an accessible name, and no
page logs a console error or gets a 4xx/5xx. Screenshots of the panel at both sizes are written
to pytest's tmp folder (and to $DAISYCHAIN_SCREENSHOTS when set).

A second test plants a silent fork (the Python leader sends the tab one reduced chunk with one
value changed, valid CRC: tests/mesh_helpers.py ``Faults``): the run stops in a fork, the problems
list carries the panel's fork report with both devices' hashes, the hash line says the replicas
differ (never "identical") and the devices table marks the Python peer.

The keep panel's own tests are tests/page/test_page_checkpoint.py. The planted failures of
this panel's checks are node tests (tests/js/live.test.mjs): a tally that counts a differing hash
as agreement, and a validation loss on wrong batches, are both caught there.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import page_helpers
from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBRTC_FLAGS
from daisychain.p2p.node import StepRecord
from mesh_helpers import (
    FAST,
    TEST_BATCH,
    TEST_SEQ,
    Faults,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
)

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
async_api = pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)
pytestmark = [needs_namespace, pytest.mark.timeout(900)]

TIMERS = f"repair_after={FAST.repair_after_s}&step_timeout={FAST.step_timeout_s}"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
# Long enough that Stop, pressed after the validation points and the screenshots, always comes
# before the last step (the CPU tier got faster: a 40-step run could end first); validation is
# still every 10 steps (livefigures.js evalEvery: max(10, steps / 20)).
STEPS = 200
SEED = 7

# What the live panel and the page's peer show, as JSON.
LIVE = """
async () => {
  const { live } = await import('/js/page/live.js');
  const { app } = await import('/js/app.js');
  const p = app.peer;
  const o = p?.outcome ?? null;
  const agree = document.querySelector('#live .live-agree');
  return {
    id: p?.id ?? '', phase: p?.phase ?? 'loading',
    points: live.chart?.points ?? [], valPoints: live.chart?.valPoints ?? [],
    validations: live.validations, view: live.view,
    records: (p?.records ?? []).map((r) => ({ step: r.step, loss: r.loss, hash: r.hash })),
    outcome: o === null ? null : { reason: o.reason, step: o.step },
    // The peer sets its outcome, drains its channels, then says 'finished'; the live panel
    // reports the end (a fork's hashes) on that event, so tests wait for this, not the outcome.
    finished: live.finished !== null,
    agree: agree?.textContent ?? '', agreeState: agree?.dataset.state ?? '',
    units: document.querySelector('#live .live-units')?.textContent ?? '',
    label: document.querySelector('#live canvas')?.getAttribute('aria-label') ?? '',
    role: document.querySelector('#live canvas')?.getAttribute('role') ?? '',
    errors: app.errors,
  };
}
"""


class Tab(page_helpers.Tab):
    async def live(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.page.evaluate(LIVE)
        return result


async def open_tab(browser: Any, url: str, viewport: dict[str, int]) -> Tab:
    context = await browser.new_context(viewport=viewport)
    page = await context.new_page()
    tab = Tab(page)
    page_helpers.watch(tab)
    response = await page.goto(url)
    assert response is not None and response.ok, f"GET {url}: {response}"
    return tab


async def until(check: Any, timeout: float, what: str) -> Any:
    """Poll the async ``check()`` until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await asyncio.sleep(0.25)


async def overflow(tab: Tab) -> tuple[int, int]:
    sw, iw = await tab.page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
    return int(sw), int(iw)


async def unnamed_controls(tab: Tab, within: str) -> list[str]:
    """The panel's interactive elements without an accessible name (their HTML)."""
    html: list[str] = await tab.page.evaluate(
        """(sel) => [...document.querySelectorAll(`${sel} :is(button, input, select, textarea,
             summary, a[href], [tabindex])`)].filter((e) => {
          const name = (e.getAttribute('aria-label') || e.labels?.[0]?.textContent ||
            e.textContent || '').trim();
          return !name;
        }).map((e) => e.outerHTML.slice(0, 160))""",
        within,
    )
    return html


# The group panel's members (their facts line, with the share) and its speed line.
GROUP = """
async () => {
  const { app } = await import('/js/app.js');
  const items = [...document.querySelectorAll('#group .members li[data-peer]')];
  const speed = document.querySelector('#group .group-speed');
  return {
    members: Object.fromEntries(items.map((li) => [li.dataset.peer, li.textContent])),
    speed: speed && !speed.hidden ? speed.textContent : '',
    open: app.mesh?.openPeers().length ?? 0,
    config: app.peer?.config ? { global_batch: app.peer.config.global_batch } : null,
    last: app.peer?.records.at(-1) ?? null,
    work: [...document.querySelectorAll('#live .live-devices tbody tr')]
      .map((tr) => tr.children[1]?.textContent ?? ''),
  };
}
"""


async def shares_shown(tab: Tab) -> Any:
    """The group panel once it shows the latest step's shares for every roster device."""
    g: dict[str, Any] = await tab.page.evaluate(GROUP)
    last = g["last"]
    if last is None or not g["speed"].startswith("Speed: group "):
        return None
    total = sum(last["shares"])
    for peer, share in zip(last["roster"], last["shares"], strict=True):
        want = f"computes {share} of {total} sequence" if share else "follows without computing"
        if want not in g["members"].get(peer, ""):
            return None
    return g


async def shoot_group(tab: Tab, name: str, tmp: Path) -> Path:
    await tab.page.locator("#group").scroll_into_view_if_needed()
    path = tmp / f"{name}.png"
    await tab.page.locator("#group").screenshot(path=str(path))
    extra = os.environ.get("DAISYCHAIN_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(extra) / path.name)
    return path


async def shoot(tab: Tab, name: str, tmp: Path) -> Path:
    """The live panel, and the whole page, as ``name``.png and ``name``-page.png in ``tmp``."""
    await tab.page.locator("#live").scroll_into_view_if_needed()
    path = tmp / f"{name}.png"
    await tab.page.locator("#live").screenshot(path=str(path))
    whole = tmp / f"{name}-page.png"
    await tab.page.screenshot(path=str(whole), full_page=True)
    extra = os.environ.get("DAISYCHAIN_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        for p in (path, whole):
            shutil.copy(p, Path(extra) / p.name)
    return path


async def test_two_tabs_and_a_python_peer_on_the_live_panel(tmp_path: Path) -> None:
    from daisychain import checkpoint, training
    from daisychain.corpus.load import load_corpus
    from daisychain.tokenizer import load_default

    val_tokens = load_corpus(None, load_default()).val
    flags = [*OFFLINE_FLAGS, *WEBRTC_FLAGS]
    async with signaling_server() as url, async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        try:
            desk = await open_tab(browser, f"{url}/?name=desk&{TIMERS}", DESKTOP)
            phone = await open_tab(browser, f"{url}/?name=phone&{TIMERS}", PHONE)
            tabs = [desk, phone]
            for tab in tabs:
                await until(lambda t=tab: _joined(t), 120, "the tabs to join their group")

            # The Python peer: its validation loss of each state the panel measures, computed
            # the moment the step is applied (the state moves on after).
            py = await start_peer(url, "py-1")
            reference: dict[int, tuple[str, float]] = {}
            recorded = py.node.on_step

            def on_step(r: StepRecord) -> None:
                if recorded is not None:
                    recorded(r)
                if r.step % 10 == 0:
                    state = py.node.state
                    assert state is not None
                    reference[r.step] = (
                        training.state_hash(state),
                        training.eval_loss(state, val_tokens),
                    )

            py.node.on_step = on_step

            await shoot(phone, "live-phone-idle", tmp_path)
            # Lead from the form, as a person would.
            form = desk.page.get_by_role("form", name="Lead a run")
            await form.get_by_label("Steps").fill(str(STEPS))
            await form.get_by_label("Devices needed to start").fill("3")
            await form.get_by_text("More settings").click()
            await form.get_by_label("Sequences per device per step").fill(str(TEST_BATCH))
            await form.get_by_label("Sequence length").fill(str(TEST_SEQ))
            await form.get_by_label("Seed").fill(str(SEED))
            start = form.get_by_role("button", name="Start the run")
            await until(start.is_enabled, 60, "the Start button")

            async def both_linked() -> bool:
                return bool((await desk.page.evaluate(GROUP))["open"] == 2)

            await until(both_linked, 60, "the desktop tab's channels to the others")
            await start.click()

            # The hash line: all three identical, with the Python peer's own hash of that step.
            async def agreed(tab: Tab) -> Any:
                s = await tab.live()
                m = re.fullmatch(
                    r"3 replicas identical at step (\d+), hash ([0-9a-f]{8})…", s["agree"]
                )
                return (m, s) if m and s["agreeState"] == "agree" else None

            for tab in tabs:
                m, s = await until(lambda t=tab: agreed(t), 300, "3 identical replicas")
                step = int(m.group(1))
                assert py.hashes[step].startswith(m.group(2)), (step, m.group(2))
                assert s["units"] == "2 × js-cpu, 1 × numpy", s["units"]

            # Validation points at steps 10 and 20 on both tabs.
            async def validated(tab: Tab) -> Any:
                s = await tab.live()
                return s if {10, 20} <= {p["step"] for p in s["valPoints"]} else None

            for tab in tabs:
                await until(lambda t=tab: validated(t), 300, "the validation points")
            # Shares: the form's default global batch is the batch per device x the 3 devices
            # ready at Start; each device's share of the step is on the group panel and in the
            # live panel's devices table ("N of 3"); the speed line names the group's rate and
            # the fastest device's estimate.
            for tab in tabs:
                g = await until(lambda t=tab: shares_shown(t), 120, "the shares on the group panel")
                assert g["config"] == {"global_batch": 3 * TEST_BATCH}, g["config"]
                assert re.fullmatch(
                    r"Speed: group [\d,]+ tok/s; fastest device alone ≈ [\d,]+ tok/s "
                    r"\(its gradient time only\)\.",
                    g["speed"],
                ), g["speed"]
                assert all(re.fullmatch(r"\d+ of 3|follows", w) for w in g["work"]), g["work"]
            await shoot_group(desk, "group-desktop-training", tmp_path)
            await shoot_group(phone, "group-phone-training", tmp_path)
            await shoot(desk, "live-desktop-training", tmp_path)
            await shoot(phone, "live-phone-training", tmp_path)
            for tab in tabs:
                sw, iw = await overflow(tab)
                assert sw <= iw, f"the page is {sw} px wide in a {iw} px viewport"

            # Stop ends the run for everyone at a step boundary.
            await desk.page.get_by_role("button", name="Stop the run").click()
            [outcome] = await finish([py], 120)
            assert outcome.reason == "leader-request", outcome

            async def ended(tab: Tab) -> Any:
                s = await tab.live()
                return s if s["outcome"] is not None and s["finished"] else None

            states = [await until(lambda t=tab: ended(t), 60, "the tabs' outcomes") for tab in tabs]
            for tab, s in zip(tabs, states, strict=True):
                assert s["outcome"]["reason"] == "leader-request", s["outcome"]
                last = s["outcome"]["step"]
                assert last == outcome.step < STEPS
                # One chart point per applied step, with that step's loss.
                assert [p["step"] for p in s["points"]] == list(range(1, last + 1))
                assert [(p["step"], p["loss"]) for p in s["points"]] == [
                    (r["step"], r["loss"]) for r in s["records"]
                ]
                assert {r["step"]: r["hash"] for r in s["records"]} == py.hashes
                # Validation: the Python reference's value on the same state, bit for bit.
                measured = [v for v in s["validations"] if "loss" in v]
                assert {v["step"] for v in measured} == {p["step"] for p in s["valPoints"]}
                assert {v["step"] for v in measured} == {k for k in range(10, last + 1, 10)}
                for v in measured:
                    digest, loss = reference[v["step"]]
                    assert v["hash"] == digest, v["step"]
                    assert v["loss"] == loss, (v["step"], v["loss"], loss)
                assert s["role"] == "img"
                assert f"at step {last} of {STEPS}" in s["label"], s["label"]
                assert "validation loss" in s["label"]
                assert s["view"]["step"] == last
                rows = await tab.page.locator("#live .chart-text tbody tr").count()
                assert rows == 8, "the text fallback lists the recent steps"
                assert not await unnamed_controls(tab, "#live")
                tab.check_clean()
            await shoot(desk, "live-desktop-stopped", tmp_path)
            await shoot(phone, "live-phone-stopped", tmp_path)

            # Save: the keep panel downloads the stopped run's state, which Python loads with
            # the hash every replica published for that step.
            save = desk.page.locator("#keep").get_by_role("button", name="Download checkpoint")
            await until(save.is_enabled, 60, "the Download checkpoint button")
            async with desk.page.expect_download() as info:
                await save.click()
            download = await info.value
            saved = tmp_path / str(download.suggested_filename)
            await download.save_as(str(saved))
            tok = load_default()
            ck = checkpoint.load(saved, tokenizer_sha256=tok.sha256, vocab_size=tok.vocab_size)
            assert ck.step == outcome.step
            assert training.state_hash(ck.state) == py.hashes[outcome.step]
            desk.check_clean()
        finally:
            await browser.close()


async def test_a_fork_is_reported_with_each_devices_hash(tmp_path: Path) -> None:
    flags = [*OFFLINE_FLAGS, *WEBRTC_FLAGS]
    async with signaling_server() as url, async_api.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        try:
            tab = await open_tab(browser, f"{url}/?name=phone&{TIMERS}", PHONE)
            await until(lambda: _joined(tab), 120, "the tab to join its group")
            lead = await start_peer(
                url, "py-lead", lead=lead_config(20, min_peers=2), faults=Faults(fork_reduced_at=3)
            )
            [outcome] = await finish([lead], 180)
            assert outcome.reason == "fork", outcome

            async def ended() -> Any:
                s = await tab.live()
                return s if s["outcome"] is not None and s["finished"] else None

            s = await until(ended, 60, "the tab's outcome")
            assert s["outcome"]["reason"] == "fork", s["outcome"]
            step = s["outcome"]["step"]
            mine = {r["step"]: r["hash"] for r in s["records"]}[3]
            theirs = lead.hashes[3]
            assert mine != theirs
            reports = [e for e in s["errors"] if e["source"] == "live"]
            assert len(reports) == 1, s["errors"]
            assert reports[0]["message"].startswith(f"the replicas forked at step {step} ("), (
                reports
            )
            assert f"py-lead: {theirs[:8]}…" in reports[0]["message"], reports
            assert reports[0]["hint"], "a hint"
            assert s["agreeState"] == "differ", s["agree"]
            assert s["agree"].startswith("1 of 2 replicas differ from this one at step 3"), s
            assert "identical" not in s["agree"]
            row = tab.page.locator("#live .live-devices tbody tr", has_text="py-lead")
            assert "✗ differs" in await row.inner_text()
            problems = await tab.page.locator("#problems").inner_text()
            assert "the replicas forked" in problems
            await shoot(tab, "live-phone-fork", tmp_path)
            sw, iw = await overflow(tab)
            assert sw <= iw, f"the page is {sw} px wide in a {iw} px viewport"
            tab.check_clean()
        finally:
            await browser.close()


async def _joined(tab: Tab) -> bool:
    s = await tab.live()
    return bool(s["id"])
