"""The lead form's outer rounds (issue 21, "the page's lead form and live view"): the Exchange
choice (every step | outer rounds) and, for outer rounds only, the inner steps per round, the
outer learning rate and momentum; wrong values refused on Start with the run rules' own
messages and hints (p2p/runconfig.js, the same as Python's); a valid outer run led from the form
and followed by a headless Python peer with identical outer hashes; the live view saying the
round, the inner steps per round and the bytes sent per token. Screenshots of the form and of
the live view at 390x844 and 1280x800 (looked at by the developer; docs/guide/ with
DAISYCHAIN_WRITE_GUIDE=1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import page_helpers
from daisychain.bench.rig.chromium import CHROMIUM
from mesh_helpers import (
    FAST,
    TEST_BATCH,
    TEST_SEQ,
    finish,
    needs_namespace,
    signaling_server,
    start_peer,
)

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip(
        "/usr/bin/chromium is missing: apt-get install -y chromium to run the browser tests",
        allow_module_level=True,
    )
pytest.importorskip(
    "playwright.async_api", reason="the playwright package is missing: pip install -e '.[test]'"
)
pytestmark = [needs_namespace, pytest.mark.timeout(600)]

TIMERS = f"repair_after={FAST.repair_after_s}&step_timeout={FAST.step_timeout_s}"
ROUNDS = 3
H = 2


async def test_outer_rounds_from_the_form_train_with_a_python_peer(tmp_path: Path) -> None:
    async with signaling_server() as url, page_helpers.chromium() as browser:
        tab = await page_helpers.open_page(browser, f"{url}/?name=desk&{TIMERS}",
                                           page_helpers.DESKTOP)  # fmt: skip
        await page_helpers.joined(tab)
        py = await start_peer(url, "py-1")
        form = await page_helpers.lead_form(tab, ROUNDS, 2, TEST_BATCH, TEST_SEQ)
        await form.get_by_label("Share the work").select_option("equal")
        inner = form.get_by_label("Inner updates per round")
        # Per-step exchange: no outer fields.
        assert not await inner.is_visible(), "the outer fields show for a per-step run"
        await form.get_by_label("Exchange").select_option("outer")
        await page_helpers.until(inner.is_visible, 30, "the outer fields")

        start = form.get_by_role("button", name="Start the run")
        alert = "#lead .note.bad[role=alert]"
        wrong = (
            ("Inner updates per round", "0",
             r"outer\.steps \(inner steps per round\) 0 outside \[1, .*--outer-steps"),
            ("Outer learning rate", "20",
             r"outer learning rate 20(\.0)? outside \(0, 10\].*--outer-lr in \(0, 10\]"),
            ("Outer momentum", "1",
             r"outer momentum 1(\.0)? outside \[0, 1\).*--outer-momentum in \[0, 1\)"),
        )  # fmt: skip
        right = {"Inner updates per round": str(H), "Outer learning rate": "0.7",
                 "Outer momentum": "0.9"}  # fmt: skip
        for label, value, said in wrong:
            for other, good in right.items():
                await form.get_by_label(other).fill(value if other == label else good)
            await page_helpers.until(start.is_enabled, 60, "the Start button")
            await start.click()
            await page_helpers.shows(tab, alert, "Cannot lead this run: " + said)
        for other, good in right.items():
            await form.get_by_label(other).fill(good)
        for name, viewport in (("desktop", page_helpers.DESKTOP), ("phone", page_helpers.PHONE)):
            await tab.page.set_viewport_size(viewport)
            await page_helpers.check_page(tab, f"the form with outer rounds ({name})")
            await page_helpers.screenshot(tab, f"lead-form-outer-{name}", tmp_path, "#lead .outer")
        await tab.page.set_viewport_size(page_helpers.DESKTOP)
        await page_helpers.until(start.is_enabled, 60, "the Start button again")
        # Leave the last field first: Chromium scrolls the page back towards the still-focused
        # field when the pointer goes down on the button (measured: 147 px at this viewport
        # after the phone-sized screenshots), so the button moves out from under a click.
        await form.get_by_label("Outer momentum").blur()
        await start.click()
        outcomes = await finish([py], timeout=300)
        assert outcomes[0].reason == "done", outcomes
        config = py.node.config
        assert config is not None and config.sync == "outer" and config.outer is not None
        assert (config.outer.steps, config.outer.lr, config.outer.momentum) == (H, 0.7, 0.9)

        tab_hashes = await page_helpers.hashes_after(tab, ROUNDS)
        assert {s: tab_hashes[s] for s in range(1, ROUNDS + 1)} == {
            s: py.hashes[s] for s in range(1, ROUNDS + 1)
        }
        await page_helpers.shows(tab, "#live .live-progress", rf"round {ROUNDS} of {ROUNDS}")
        await page_helpers.shows(
            tab, "#live .live-sync",
            rf"^round {ROUNDS} of {ROUNDS}: {H} inner steps per device per round "
            rf"\({ROUNDS * H} of {ROUNDS * H} inner steps done\)$",
        )  # fmt: skip
        await page_helpers.shows(tab, "#live .live-bytes", r"^[\d,.]+ bytes per token sent")
        for name, viewport in (("desktop", page_helpers.DESKTOP), ("phone", page_helpers.PHONE)):
            await tab.page.set_viewport_size(viewport)
            await page_helpers.check_page(tab, f"the live view of an outer run ({name})")
            await page_helpers.screenshot(
                tab, f"live-outer-{name}", tmp_path, "#live .live-figures"
            )
