"""The lead form's model size (issue 22, "Model size"): a custom width, layers and heads chosen
in the page's form, with the size and its memory estimate said before Start; an oversized one
refused with that same estimate; a custom one trained by the tab with a headless Python peer,
bit-identical. Screenshots of the form with a custom size at 390x844 and 1280x800 (looked at by
the developer; docs/guide/lead-form-model-size-*.png with DAISYCHAIN_WRITE_GUIDE=1)."""

from __future__ import annotations

import re
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
STEPS = 3


async def test_a_custom_size_from_the_form_trains_with_a_python_peer(tmp_path: Path) -> None:
    async with signaling_server() as url, page_helpers.chromium() as browser:
        tab = await page_helpers.open_page(browser, f"{url}/?name=desk&{TIMERS}",
                                           page_helpers.DESKTOP)  # fmt: skip
        await page_helpers.joined(tab)
        py = await start_peer(url, "py-1")
        form = await page_helpers.lead_form(tab, STEPS, 2, TEST_BATCH, TEST_SEQ)
        size = "#lead .size"

        # Oversized: the estimate is said before Start, and Start is refused with that figure.
        await form.get_by_label("Width", exact=True).fill("1024")
        await form.get_by_label("Layers", exact=True).fill("16")
        await form.get_by_label("Heads", exact=True).fill("16")
        said = await page_helpers.shows(tab, size, r"^Custom: width 1024, 16 layers, 16 heads")
        mib = re.search(r"about ([\d,]+) MiB per device", said)
        assert mib is not None, said
        start = form.get_by_role("button", name="Start the run")
        await page_helpers.until(start.is_enabled, 60, "the Start button")
        await start.click()
        alert = "#lead .note.bad[role=alert]"
        refusal = await page_helpers.shows(tab, alert, "Cannot lead")
        assert f"about {mib.group(1)} MiB on this peer" in refusal, (refusal, said)
        assert "above its cap of 4096 MiB" in refusal, refusal

        # A size the contract cannot build is said as such before Start.
        await form.get_by_label("Width", exact=True).fill("48")
        await form.get_by_label("Layers", exact=True).fill("1")
        await form.get_by_label("Heads", exact=True).fill("4")
        await page_helpers.shows(tab, size, r"cannot be trained: head dim width/heads = 12")
        assert not await tab.page.locator(alert).is_visible(), "the refusal was of other choices"

        # A custom size that fits: trained by the tab and the Python peer, identical hashes.
        await form.get_by_label("Width", exact=True).fill("32")
        await form.get_by_label("Heads", exact=True).fill("2")
        fits = r"^Custom: width 32, 1 layer, 2 heads, [\d,]+ parameters, about \d+ MiB per device"
        await page_helpers.shows(tab, size, fits + r" to train\.$")
        for name, viewport in (("desktop", page_helpers.DESKTOP), ("phone", page_helpers.PHONE)):
            await tab.page.set_viewport_size(viewport)
            await page_helpers.check_page(tab, f"the form with a custom size ({name})")
            focus = "#lead" if name == "desktop" else "#lead .size"  # a phone: the note in view
            await page_helpers.screenshot(tab, f"lead-form-model-size-{name}", tmp_path, focus)
        await tab.page.set_viewport_size(page_helpers.DESKTOP)
        await page_helpers.until(start.is_enabled, 60, "the Start button again")
        await start.click()
        outcomes = await finish([py], timeout=300)
        assert outcomes[0].reason == "done", outcomes
        config = py.node.config
        assert config is not None and config.preset is None
        assert (config.model.width, config.model.layers, config.model.heads) == (32, 1, 2)

        tab_hashes = await page_helpers.hashes_after(tab, STEPS)
        assert {s: py.hashes[s] for s in range(1, STEPS + 1)} == {
            s: tab_hashes[s] for s in range(1, STEPS + 1)
        }
        tab.check_clean()
