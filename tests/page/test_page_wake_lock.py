"""Awake while training (issue 46, static/js/page/awake.js): the page at ``/`` holds a Screen Wake
Lock while this device computes in a run and releases it at the run's end.

One Chromium tab (phone size) follows a run a Python leader (``daisychain.p2p.node.Node`` over
aiortc, in this process) leads with equal shares, so the tab computes a share of every step. The
test reads the page's own state (awake.js ``wake``: its state, the line shown, the latest
``WakeLockSentinel`` the browser gave) and the browser's ``sentinel.released``. The tab's
browser context has no permission override, as a person's browser: page_helpers.new_tab grants
the clipboard with Playwright's ``grant_permissions``, which denies every other permission, the
screen lock included.

- before the run: "off", nothing asked, the line says the screen will be kept on;
- while the tab computes: "held", a real ``WakeLockSentinel`` (headless Chromium grants the
  screen lock to a page on 127.0.0.1, a secure context: no mock, no permission override) with
  ``released === false``, and the line "The screen is kept on while this device trains.";
- taken again: headless Chromium never hides a tab (``document.visibilityState`` stays
  "visible" whatever tab is in front), so the test does what the browser does when a tab is
  hidden, from outside the module: it releases the held sentinel (the page says "wanted"), then
  fires ``visibilitychange``; the page asks again and holds a new sentinel. The hidden tab itself
  is covered by tests/js/awake.test.mjs (a fake document and wake lock);
- "Keep the screen on while training" unticked: released at once, the line says so; ticked
  again: held again;
- refused: the screen lock's permission denied (CDP ``Browser.setPermission``, as a browser's
  site settings or policy would), ticked again: "refused", the line says what to do; granted
  again, the tab visible again (``visibilitychange``): held;
- the leader ends the run: "off" and ``sentinel.released === true``;
- the unticked choice is remembered over a reload.

The live panel with the line is photographed at 390x844 and 1280x800 during the run; no console
error and no failed request anywhere.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from daisychain.bench.rig.chromium import CHROMIUM
from mesh_helpers import FAST, finish, lead_config, needs_namespace, signaling_server, start_peer
from page_helpers import (
    DESKTOP,
    PHONE,
    Tab,
    check_page,
    chromium,
    joined,
    screenshot,
    shows,
    until,
    watch,
)

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip("/usr/bin/chromium is missing", allow_module_level=True)
pytest.importorskip("playwright.async_api", reason="the playwright package is missing")
pytestmark = [needs_namespace, pytest.mark.timeout(600)]

TIMERS = f"repair_after={FAST.repair_after_s}&step_timeout={FAST.step_timeout_s}"
LINE = "#live .awake-state"

# The page's own state: awake.js `wake`, the line, the checkbox, and the peer's run.
WAKE = """
async () => {
  const { wake } = await import('/js/page/awake.js');
  const { app } = await import('/js/app.js');
  const s = wake.sentinel;
  const line = document.querySelector('#live .awake-state');
  return {
    state: wake.state, text: wake.text,
    shown: line?.textContent ?? '', shownState: line?.dataset.state ?? '',
    checked: document.getElementById('awake-on')?.checked ?? null,
    sentinel: s === null ? null : {
      real: typeof WakeLockSentinel === 'function' && s instanceof WakeLockSentinel,
      released: s.released, type: s.type, same: s === window.__marked,
    },
    inRun: app.peer?.inRun ?? false,
    computed: (app.peer?.records ?? []).filter((r) => r.share > 0).length,
  };
}
"""


async def wake(tab: Tab) -> dict[str, Any]:
    result: dict[str, Any] = await tab.page.evaluate(WAKE)
    return result


async def wake_is(tab: Tab, state: str, what: str, timeout: float = 60) -> dict[str, Any]:
    """Wait until the page's wake state is ``state``; return the whole read-out."""
    got: dict[str, Any] = {}

    async def reached() -> bool:
        nonlocal got
        got = await wake(tab)
        return bool(got["state"] == state)

    try:
        await until(reached, timeout, what)
    except AssertionError:
        raise AssertionError(f"{what}: the page's wake state stayed {got}") from None
    return got


async def set_permission(cdp: Any, origin: str, setting: str) -> None:
    """The screen lock's permission for ``origin`` in the browser context of ``cdp``'s page
    (Chromium drops the override when that DevTools session detaches: keep it open)."""
    info = await cdp.send("Target.getTargetInfo")
    await cdp.send(
        "Browser.setPermission",
        {
            "permission": {"name": "screen-wake-lock"},
            "setting": setting,
            "origin": origin,
            "browserContextId": info["targetInfo"]["browserContextId"],
        },
    )


async def mark(tab: Tab) -> None:
    """Keep the page's latest sentinel as ``window.__marked`` (the read-out's ``same``)."""
    await tab.page.evaluate(
        "async () => { window.__marked = (await import('/js/page/awake.js')).wake.sentinel; }"
    )


async def during_the_run(tab: Tab, url: str, tmp_path: Path) -> None:
    """The checks while the tab computes in the run; it ends held, its sentinel marked."""

    async def computing() -> bool:
        w = await wake(tab)
        return bool(w["inRun"] and w["computed"] >= 2)

    # Computing in the run: held, a real sentinel the browser has not released.
    await until(computing, 300, "the page to compute two steps of the run")
    w = await wake_is(tab, "held", "the lock while computing")
    assert w["sentinel"] == {"real": True, "released": False, "type": "screen", "same": False}
    assert w["shown"] == "The screen is kept on while this device trains.", w
    assert w["shownState"] == "held"
    for size, label in ((PHONE, "390"), (DESKTOP, "1280")):
        await tab.page.set_viewport_size(size)
        await tab.page.wait_for_timeout(300)  # one layout after the resize
        await check_page(tab, f"the wake lock line at {label} px")
        await screenshot(tab, f"wake-lock-training-{label}", tmp_path, "#live")
    await tab.page.set_viewport_size(PHONE)

    # The browser releases the lock of a hidden tab; the page asks again once it is visible.
    await mark(tab)
    await tab.page.evaluate("window.__marked.release()")
    w = await wake_is(tab, "wanted", "the state after the browser let the lock go")
    assert w["sentinel"]["same"] and w["sentinel"]["released"], w
    assert "asked again when you come back to this tab" in w["shown"], w
    await tab.page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    w = await wake_is(tab, "held", "the lock taken again on visibilitychange")
    assert w["sentinel"] == {"real": True, "released": False, "type": "screen", "same": False}
    assert await tab.page.evaluate("window.__marked.released") is True

    # The person turns it off: released at once, and the page says so; on again: held.
    await mark(tab)
    box = tab.page.get_by_label("Keep the screen on while training")
    await box.uncheck()
    w = await wake_is(tab, "off", "the lock after the person turned it off")
    assert w["sentinel"]["same"] and w["sentinel"]["released"] is True, w
    await shows(tab, LINE, r"^The screen is not kept on \(you turned it off\): keep this tab")
    assert await tab.page.evaluate("localStorage.getItem('daisychain.awake')") == "0"
    await box.check()
    w = await wake_is(tab, "held", "the lock after the person turned it on again")
    assert w["sentinel"]["released"] is False and not w["sentinel"]["same"], w

    # Refused (the permission denied): the page says what to do, and asks again when the tab
    # comes back into view.
    await box.uncheck()
    await wake_is(tab, "off", "the lock turned off before the refusal")
    cdp = await tab.page.context.new_cdp_session(tab.page)
    await set_permission(cdp, url, "denied")
    await box.check()
    await wake_is(tab, "refused", "the state when the browser refuses")
    await shows(
        tab,
        LINE,
        r"^The browser refused to keep the screen on \(NotAllowedError\): keep this tab in "
        r"front and the screen on, and plug the device in",
    )
    await screenshot(tab, "wake-lock-refused-390", tmp_path, "#live")
    await set_permission(cdp, url, "granted")
    await tab.page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
    w = await wake_is(tab, "held", "the lock once granted again")
    assert w["sentinel"]["released"] is False, w
    await mark(tab)


async def test_the_wake_lock_is_held_while_computing_and_released_at_the_run_end(
    tmp_path: Path,
) -> None:
    async with signaling_server() as url, chromium() as browser:
        context = await browser.new_context(viewport=PHONE)  # no permission override
        tab = watch(Tab(await context.new_page()))
        response = await tab.page.goto(f"{url}/?{TIMERS}&backend=js-cpu&name=awake-phone")
        assert response is not None and response.ok, response
        await joined(tab)

        # Before any run: nothing asked, the checkbox on, the line says what will happen.
        w = await wake(tab)
        assert w["state"] == "off" and w["sentinel"] is None and w["checked"] is True, w
        assert w["shown"] == "The screen will be kept on while this device trains.", w
        box = tab.page.get_by_label("Keep the screen on while training")
        assert await box.is_checked()

        py = await start_peer(url, "py-lead", lead=lead_config(steps=1000, min_peers=2))
        try:
            await during_the_run(tab, url, tmp_path)
            # The run ends: released.
            py.node.end_run("the test has seen enough")
            [outcome] = await finish([py], timeout=300)
        finally:
            if not py.task.done():  # a failed check: the leader must not outlive the test
                py.task.cancel()
                await asyncio.gather(py.task, return_exceptions=True)
        assert outcome.reason == "leader-request", outcome
        w = await wake_is(tab, "off", "the lock at the run's end")
        assert w["sentinel"] == {"real": True, "released": True, "type": "screen", "same": True}
        assert not w["inRun"], w
        await shows(tab, LINE, r"^The screen will be kept on while this device trains\.$")
        await shows(tab, "#live .live-state", r"The leader stopped the run at step \d+\.")
        await check_page(tab, "after the run")

        # The choice is remembered over a reload.
        await box.uncheck()
        await tab.page.reload()
        await joined(tab)
        w = await wake(tab)
        assert w["checked"] is False and w["state"] == "off", w
        await shows(tab, LINE, r"^The screen is not kept on \(you turned it off\)")
        tab.check_clean()
