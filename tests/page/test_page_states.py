"""The page ``/`` in each of its states, on a phone and on a desktop (issue 11, Must-show 1 and
6): alone, in a group, waiting to enter a room, approving a request, the lead form with its
settings open, training (leader and follower), stopped. In every state at 390x844 and
1280x800: no sideways overflow (``scrollWidth <= innerWidth``), every control in the
accessibility tree has a name, and no console error and no failed request. Each state is
photographed into the test's tmp dir, and into docs/guide/ (the user guide's pictures,
docs/GUIDE.md) with DAISYCHAIN_WRITE_GUIDE=1.

On the way it checks what the panels say: the readiness panel's backend, probe and measured
speed; the device name typed in the page, remembered over a reload and shown to the group with
the measured speed; the run started from the leader's form, followed automatically by the other
tab ("Following ...'s run"), stopped with the leader's Stop button; after the run both pages are
back in the group for the next one without a reload. The checks themselves are shown to fire on
a planted unnamed button and a planted too-wide element.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench.rig.chromium import CHROMIUM
from mesh_helpers import needs_namespace, signaling_server
from page_helpers import (
    DESKTOP,
    PHONE,
    Tab,
    check_page,
    chromium,
    joined,
    new_tab,
    open_page,
    overflow,
    screenshot,
    shows,
    unnamed_controls,
    until,
)

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip("/usr/bin/chromium is missing", allow_module_level=True)
pytest.importorskip("playwright.async_api", reason="the playwright package is missing")
pytestmark = [needs_namespace, pytest.mark.timeout(600)]

# The protocol's repair timer short, as the browser peer tests have it.
TIMERS = "repair_after=1.5&step_timeout=90"


async def each_viewport(
    tab: Tab, state: str, tmp: Path, focus: str | None = None, wide: bool = True
) -> None:
    """Check the page and photograph it at the phone's and the desktop's size, showing the
    panel ``focus`` (on the desktop too when ``wide``, else its top: the run's panels)."""
    for size, label in ((PHONE, "390"), (DESKTOP, "1280")):
        shown = focus if size == PHONE or wide else None
        await tab.page.set_viewport_size(size)
        await tab.page.wait_for_timeout(300)  # one layout after the resize
        await check_page(tab, f"{state} at {label} px")
        await screenshot(tab, f"{state}-{label}", tmp, shown)
    await tab.page.set_viewport_size(PHONE)


async def set_name(tab: Tab, name: str) -> None:
    box = tab.page.get_by_label("Device name")
    await box.fill(name)
    await box.press("Enter")
    await box.blur()
    await shows(tab, "#readiness .note[role=status]", r"Remembered on this device")


async def test_the_page_in_every_state_on_a_phone_and_a_desktop(tmp_path: Path) -> None:
    async with signaling_server() as url, chromium() as browser:
        # Alone. The name typed in the page is remembered over a reload and sent to the group.
        ada = await open_page(browser, f"{url}/?{TIMERS}")
        await joined(ada)
        await set_name(ada, "Ada's laptop")
        await ada.page.reload()
        await joined(ada)
        assert await ada.page.get_by_label("Device name").input_value() == "Ada's laptop"
        await shows(ada, "#readiness", r"✓ matches the reference")
        await shows(ada, "#readiness", r"\d tokens/s \(one tiny step in \d+ ms\)")
        await shows(ada, "#readiness", r"js-cpu: passed its exact gates \(chosen\)")
        await shows(ada, "#readiness", r"webgpu-dp4a, webgpu-lut: not available, no WebGPU")
        await shows(ada, "#group .members", r"No other device yet")
        await shows(ada, "#status", r"In the group")
        await each_viewport(ada, "alone", tmp_path)

        # In a group: a second device; each lists the other, its speed and an open channel.
        bo = await open_page(browser, f"{url}/?{TIMERS}&name=Kitchen%20tablet")
        await joined(bo)
        facts = r"\s*js-cpu · [\d,]+ tokens/s · connected"
        await shows(bo, "#group .members", "Ada's laptop" + facts)
        await shows(ada, "#group .members", "Kitchen tablet" + facts)
        await each_viewport(ada, "group", tmp_path, "#group")

        # A room: its host approving a request, the requester waiting.
        host = await open_page(browser, f"{url}/?{TIMERS}&backend=js-cpu&name=Room%20host")
        await joined(host)
        await host.page.get_by_role("button", name="Private room").click()
        await host.page.wait_for_url("**room=*")
        await shows(host, "#group .connection", r"which you host")
        link = await host.page.get_by_label("Link to this private room").input_value()
        guest = await open_page(browser, f"{link}&{TIMERS}&backend=js-cpu&name=Guest%20phone")
        await shows(guest, "#group .connection", r"Waited [2-9] s so far")
        await shows(host, "#group .requests", r"(?s)Guest phone.*closes in", timeout=30)
        await each_viewport(guest, "waiting", tmp_path, "#group")
        await each_viewport(host, "approving", tmp_path, "#group")
        await host.page.get_by_role("button", name="Deny Guest phone").click()
        await shows(guest, "#group .connection", r"Not admitted")
        await shows(guest, "#status", r"Not connected to the group")
        for tab in (host, guest):
            await check_page(tab, "after the denial")
            await tab.page.context.close()

        # Training: Ada leads from the form, the tablet follows on its own.
        page = ada.page
        lead = page.locator("#lead")
        await lead.get_by_label("Steps").fill("200")
        await lead.get_by_label("Devices needed to start").fill("2")
        await lead.get_by_text("More settings").click()
        await lead.get_by_label("Sequences per device per step").fill("1")
        await lead.get_by_label("Sequence length").fill("32")
        # The form with its settings open: how the work is shared (by speed unless asked).
        share = lead.get_by_label("Share the work")
        assert await share.input_value() == "speed"
        assert await share.locator("option").all_inner_texts() == [
            "by each device’s speed", "equally (reproducible hashes)"]  # fmt: skip
        await each_viewport(ada, "lead-form", tmp_path, "#lead")
        await page.get_by_role("button", name="Start the run").click()
        await shows(ada, "#lead .standing", r"You lead this run: tiny, 200 steps")
        await shows(bo, "#lead .standing", r"Following Ada's laptop’s run: joined automatically")
        await shows(ada, "#status", r"Training")
        await shows(bo, "#group .members", r"Ada's laptop\s*leader")
        # The form's defaults reach the run: warm-up 20 (as `daisychain train`), lr 0.003.
        optim = await page.evaluate(
            "async () => (await import('/js/app.js')).app.peer.machine.config.optim"
        )
        assert optim["warmup_steps"] == 20 and optim["lr"] == 0.003, optim

        async def some_steps() -> bool:
            got: int = await page.evaluate(
                "async () => (await import('/js/app.js')).app.peer.records.length"
            )
            return got >= 6

        await until(some_steps, 120, "six steps, for a chart with a line")
        await each_viewport(ada, "training", tmp_path, "#lead", wide=False)
        await each_viewport(bo, "following", tmp_path, "#lead", wide=False)

        # Stopped: the leader's Stop; both pages are back in the group, no reload.
        await page.get_by_role("button", name="Stop the run").click()
        for tab in (ada, bo):
            ended = r"The last run ended at step \d+: its leader stopped it\. This device is back"
            await shows(tab, "#lead .standing", ended)
            assert await tab.page.get_by_role("button", name="Start the run").is_enabled()
        outcome = await page.evaluate(
            "async () => (await import('/js/app.js')).app.peer.outcome.reason"
        )
        assert outcome == "leader-request"
        await each_viewport(ada, "stopped", tmp_path, "#lead", wide=False)
        bo.check_clean()


async def test_the_checks_catch_an_unnamed_control_and_a_too_wide_page() -> None:
    async with signaling_server() as url, chromium() as browser:
        tab = await open_page(browser, f"{url}/?{TIMERS}&backend=js-cpu")
        await joined(tab)
        assert await unnamed_controls(tab) == []
        sw, iw = await overflow(tab)
        assert sw <= iw
        await tab.page.evaluate(
            "document.getElementById('lead').append(Object.assign(document.createElement('button'),"
            " {id: 'planted'}))"
        )
        unnamed = await unnamed_controls(tab)
        assert len(unnamed) == 1 and 'id="planted"' in unnamed[0], unnamed
        await tab.page.evaluate(
            "document.getElementById('planted').replaceWith(Object.assign("
            "document.createElement('div'), {style: 'width: 900px; height: 1px'}))"
        )
        sw, iw = await overflow(tab)
        assert sw > iw, (sw, iw)
        with pytest.raises(AssertionError, match="px wide"):
            await check_page(tab, "planted")


async def test_the_lead_form_offers_fineweb_when_the_server_reads_it() -> None:
    """Training text: FineWeb-Edu is offered only when /api/status names a pinned revision, and
    leading with it configures a fineweb@REV run (the run waits for a second device here)."""
    revision = "ab" * 20
    status = f'{{"data": {{"state": "online", "revision": "{revision}"}}}}'
    async with signaling_server() as url, chromium() as browser:
        plain = await open_page(browser, f"{url}/?{TIMERS}&backend=js-cpu")
        await joined(plain)
        options = plain.page.locator("#lead select[name=data] option")
        assert await options.all_inner_texts() == ["Built-in text"]

        tab = await new_tab(browser)

        async def online(route: Any) -> None:
            await route.fulfill(status=200, content_type="application/json", body=status)

        await tab.page.route(f"{url}/api/status", online)
        await tab.page.goto(f"{url}/?{TIMERS}&backend=js-cpu")
        await joined(tab)
        lead = tab.page.locator("#lead")
        fineweb = "FineWeb-Edu (from the server)"
        await lead.get_by_label("Training text").select_option(label=fineweb)
        await lead.get_by_label("Devices needed to start").fill("3")
        await lead.get_by_role("button", name="Start the run").click()
        await shows(tab, "#lead .standing", r"You lead this run")
        data = await tab.page.evaluate(
            "async () => (await import('/js/app.js')).app.peer.machine.config.data"
        )
        assert data == f"fineweb@{revision}"
        for t in (plain, tab):
            t.check_clean()
