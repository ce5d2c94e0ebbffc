"""Keeping the model on the page `/` (issue 11, Must-show 4): static/js/page/keep.js, opfs.js and
the browser peer's checkpoints and sessions (static/js/p2p/peer.js, mesh.js).

Chromium tabs (CPU tier, ``backend=js-cpu``) and headless Python peers meet on the real server
in the test run's network namespace (conftest.py), like tests/browser/test_browser_peer.py. The tabs
are driven through the panel's controls (its buttons, its labelled file and number inputs), and read
through its text; the hashes a run published are read from the page's peer (``app.peer``).

- Download: a tab following a Python leader downloads its state mid-run ("Download checkpoint");
  ``daisychain.checkpoint.load`` reads the file and its state hash is the leader's hash of that
  step. The panel saves every 2 steps into OPFS; after a reload mid-run it offers "Resume from
  the saved state at step S (saved HH:MM)", whose download Python loads with the hash of step S;
  Delete removes it.
- Upload: a checkpoint Python wrote at step 4 of a 2-peer run, uploaded in one tab, is led to
  step 8 with a second tab following; both publish the hashes of the uninterrupted Python run
  at steps 5..8. Then the second tab leads another run on the same pages without a reload (a
  finished run keeps the signaling connection; the pages meet again in their next session).
- Planted failures: a checkpoint with one byte of its weights flipped is refused with the
  damage named and a hint; one written for another tokenizer is refused with the tokenizer hint;
  neither offers "Lead the resumed run".

Screenshots of the panel at 390x844 and 1280x800 are saved in the test's tmp directory.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from daisychain import checkpoint, training
from daisychain.bench.rig.chromium import CHROMIUM
from daisychain.wire import messages
from mesh_helpers import (
    FAST,
    TEST_BATCH,
    TEST_SEQ,
    corpus,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)
from page_helpers import DESKTOP, PHONE, Tab, chromium, joined, new_tab, open_page, shows, until
from shares_replay import replayed_hashes, shares_of

if not CHROMIUM.exists() or shutil.which(str(CHROMIUM)) is None:
    pytest.skip("/usr/bin/chromium is missing", allow_module_level=True)
pytest.importorskip("playwright.async_api", reason="the playwright package is missing")
pytestmark = [needs_namespace, pytest.mark.timeout(600)]

QUERY = f"backend=js-cpu&repair_after={FAST.repair_after_s}&step_timeout={FAST.step_timeout_s}"
KEEP = "#keep"
EVERY = "Auto-save every"
UPLOAD = "Checkpoint to continue (.safetensors)"
OFFER = r"Resume from the saved state at step \d+ \(saved \d\d:\d\d\)"

# The page's run as JSON (the peer of the latest run; app.js keeps it until the next run).
RUN = """
async () => {
  const { app } = await import('/js/app.js');
  const p = app.peer;
  return { id: p?.id ?? '', phase: p?.phase ?? 'loading', records: p?.records ?? [],
           outcome: p?.outcome ? { reason: p.outcome.reason, step: p.outcome.step } : null,
           run: p?.machine?.config?.run ?? null, config: p?.config ?? null };
}
"""
LEAD = """
async (choices) => {
  const { app } = await import('/js/app.js');
  return (await app.page.peer.lead(choices)).run;
}
"""


async def run_of(tab: Tab) -> dict[str, Any]:
    result: dict[str, Any] = await tab.page.evaluate(RUN)
    return result


def hashes(state: dict[str, Any]) -> dict[int, str]:
    return {r["step"]: r["hash"] for r in state["records"]}


async def open_tab(browser: Any, url: str, name: str, viewport: dict[str, int] = PHONE) -> Tab:
    tab = await open_page(browser, f"{url}/?{QUERY}&name={name}", viewport)
    await joined(tab)
    return tab


async def set_every(tab: Tab, steps: int) -> None:
    field = tab.page.locator(KEEP).get_by_label(EVERY)
    await field.fill(str(steps))
    await field.dispatch_event("change")


def of_saved(tab: Tab, verb: str, step: int) -> Any:
    """A saved state's button (its accessible name says the verb and the step)."""
    name = re.compile(rf"^{verb} the saved state at step {step}\b")
    return tab.page.get_by_role("button", name=name)


async def download(tab: Tab, button: Any, tmp: Path) -> Path:
    async with tab.page.expect_download() as info:
        await button.click()
    dl = await info.value
    path: Path = tmp / str(dl.suggested_filename)
    await dl.save_as(str(path))
    return path


def python_hash(path: Path) -> tuple[int, str]:
    """(step, state hash) of a checkpoint file as the Python side reads it."""
    _, sha, vocab = corpus()
    ck = checkpoint.load(path, tokenizer_sha256=sha, vocab_size=vocab)
    return ck.step, training.state_hash(ck.state)


async def panel_shots(tab: Tab, name: str, tmp: Path) -> None:
    for label, size in (("phone", PHONE), ("desktop", DESKTOP)):
        await tab.page.set_viewport_size(size)
        await tab.page.locator(KEEP).scroll_into_view_if_needed()
        sw, iw = await tab.page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert sw <= iw, f"{name} at {label}: {sw} px wide in {iw} px"
        await tab.page.locator(KEEP).screenshot(path=str(tmp / f"keep-{name}-{label}.png"))
    await tab.page.set_viewport_size(PHONE)


async def test_download_mid_run_loads_in_python_and_a_reload_offers_the_saved_state(
    tmp_path: Path,
) -> None:
    steps = 14
    async with signaling_server() as url, chromium() as browser:
        tab = await open_tab(browser, url, "tab")
        await set_every(tab, 2)
        leader = await start_peer(url, "py-lead", lead=lead_config(steps, min_peers=2))
        save = tab.page.get_by_role("button", name="Download checkpoint")
        assert await save.is_disabled(), "no state before the run"

        async def past_step_4() -> bool:
            return len((await run_of(tab))["records"]) >= 4

        await until(past_step_4, 240, "the tab to apply 4 steps")
        path = await download(tab, save, tmp_path)
        match = re.fullmatch(r"daisychain-([0-9a-f]{16})-step(\d+)\.safetensors", path.name)
        assert match, path.name
        assert match[1] == (await run_of(tab))["run"]
        step, digest = python_hash(path)
        assert step == int(match[2]) >= 4
        await wait_for(lambda: step in leader.hashes, 60, "the leader's hash of that step")
        assert digest == leader.hashes[step], "Python reads the page's checkpoint as the same state"

        # Saved in this browser every 2 steps; a reload mid-run offers the newest.
        await shows(tab, KEEP, OFFER)
        await panel_shots(tab, "training", tmp_path)
        await tab.page.reload()
        await joined(tab)
        text = await shows(tab, KEEP, OFFER)
        saved = max(int(s) for s in re.findall(r"Resume from the saved state at step (\d+)", text))
        assert saved % 2 == 0 and saved >= 4, text
        items = tab.page.locator(f"{KEEP} .keep-saves li")
        assert 1 <= await items.count() <= 2, "the newest two are kept"
        await panel_shots(tab, "after-reload", tmp_path)
        got = await download(tab, of_saved(tab, "Download", saved), tmp_path)
        assert python_hash(got) == (saved, leader.hashes[saved])
        # Resume from it: the panel checks it and offers the resumed run's form.
        await of_saved(tab, "Resume from", saved).click()
        await shows(
            tab, KEEP, rf"step {saved}, model width \d+.*checked: this page can continue it"
        )
        assert await tab.page.locator(KEEP).get_by_label("Train to step").input_value() == str(
            saved + 100
        )
        # The tab is back in the run and saving every 2 steps, which would refill the list:
        # stop that first. At most one save still in flight, and it prunes only the oldest, not
        # `saved` (the newest): only Delete can take `saved` out of the list.
        await set_every(tab, 0)
        await of_saved(tab, "Delete", saved).click()

        async def deleted() -> bool:
            return bool(await of_saved(tab, "Delete", saved).count() == 0)

        await until(deleted, 30, "the deleted state to leave the list")
        await finish([leader], 240)
        tab.check_clean()


def _flip_weight_byte(src: Path, dst: Path) -> None:
    data = bytearray(src.read_bytes())
    header = int.from_bytes(data[:8], "little")
    data[8 + header + 100] ^= 0x01  # a weight, not the header: only the recorded hash can tell
    dst.write_bytes(bytes(data))


async def test_python_checkpoint_resumed_in_the_page_continues_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    total, at = 8, 4
    good = tmp_path / f"python-step{at}.safetensors"
    _, sha, _ = corpus()
    async with signaling_server() as url:
        ref_lead = await start_peer(url, "ref-lead", lead=lead_config(total, min_peers=2))
        ref_other = await start_peer(url, "ref-other")

        def save_at(record: Any) -> None:
            ref_lead.records.append(record)
            state = ref_lead.node.state
            if state is not None and state.step == at:
                checkpoint.save(good, state, sha)

        ref_lead.node.on_step = save_at
        outcomes = await finish([ref_lead, ref_other], 240)
        assert [o.reason for o in outcomes] == ["done", "done"], outcomes
        reference = ref_lead.hashes
        assert checkpoint.load(good).step == at

        damaged = tmp_path / "damaged.safetensors"
        _flip_weight_byte(good, damaged)
        other_tok = tmp_path / "other-tokenizer.safetensors"
        checkpoint.save(other_tok, checkpoint.load(good).state, "0f" * 32)

        async with chromium() as browser:
            lead_tab = await open_tab(browser, url, "tab-lead")
            follow_tab = await open_tab(browser, url, "tab-follow")
            page = lead_tab.page
            upload = page.locator(KEEP).get_by_label(UPLOAD)
            form = page.locator(f"{KEEP} .keep-resume")
            alert = page.locator(f"{KEEP} .keep-error")

            # Planted failures: refused, with the reason and a hint; nothing to lead.
            await upload.set_input_files(str(damaged))
            text = await shows(lead_tab, f"{KEEP} .keep-error", r"does not match the recorded")
            assert "corrupted" in text and "damaged: download or save it again" in text, text
            assert text.count("damaged.safetensors") == 1, f"the file is named once: {text}"
            assert await form.is_hidden()
            await panel_shots(lead_tab, "refused", tmp_path)
            await upload.set_input_files(str(other_tok))
            text = await shows(lead_tab, f"{KEEP} .keep-error", r"with tokenizer 0f0f0f0f0f0f")
            assert "choose a checkpoint trained with this server's tokenizer" in text, text
            assert await form.is_hidden()
            lead_tab.errors.clear()  # the refusals were shown as problems, on purpose

            # The good file: checked, then led from step 4 to 8 with the other tab following.
            await upload.set_input_files(str(good))
            await shows(
                lead_tab, KEEP, rf"step {at}, model width \d+.*checked: this page can continue it"
            )
            assert await alert.is_hidden()
            assert await page.locator(KEEP).get_by_label("Train to step").input_value() == str(
                at + 100
            )
            await page.locator(KEEP).get_by_label("Train to step").fill(str(total))
            await page.locator(KEEP).get_by_label("Devices needed to start").fill("2")
            await panel_shots(lead_tab, "resume-form", tmp_path)
            await page.get_by_role("button", name="Lead the resumed run").click()

            async def both_done() -> bool:
                states = [await run_of(t) for t in (lead_tab, follow_tab)]
                return all(s["outcome"] is not None for s in states)

            await until(both_done, 300, "the resumed run to end on both tabs")
            # Protocol v2: the resumed run's shares follow the tabs' measured speeds, so its
            # hashes are those Python computes from the checkpoint's state with the shares the
            # run committed (tests/shares_replay.py); with the uninterrupted run's shares they
            # are its hashes.
            led = await run_of(lead_tab)
            config = messages.parse(json.dumps(led["config"]))
            split = shares_of(led["records"])
            resumed = await replayed_hashes(config, split, state=checkpoint.load(good).state)
            if all(tuple(r.shares) == split[r.step] for r in ref_lead.records if r.step in split):
                assert resumed == {s: reference[s] for s in resumed}, "same shares, same hashes"
            for t in (lead_tab, follow_tab):
                state = await run_of(t)
                assert state["outcome"]["reason"] == "done", state
                assert shares_of(state["records"]) == split
                got = hashes(state)
                assert sorted(got) == list(range(at + 1, total + 1)), sorted(got)
                for step, digest in got.items():
                    assert digest == resumed[step], f"step {step}: {digest[:12]}"

            # The run ended; the same pages lead and follow the next one without a reload.
            async def both_lobby() -> bool:
                for t in (lead_tab, follow_tab):
                    p = await t.page.evaluate(
                        "async () => (await import('/js/app.js')).app.page.peer?.phase ?? ''"
                    )
                    if p != "lobby":
                        return False
                return True

            await until(both_lobby, 60, "both pages back in the lobby")
            first_run = (await run_of(follow_tab))["run"]
            choices = {"preset": "tiny", "steps": 2, "batch": TEST_BATCH, "seqLen": TEST_SEQ,
                       "seed": 3, "minPeers": 2}  # fmt: skip
            second_run = await follow_tab.page.evaluate(LEAD, choices)
            assert second_run != first_run

            async def second_done() -> bool:
                states = [await run_of(t) for t in (lead_tab, follow_tab)]
                return all(s["run"] == second_run and s["outcome"] is not None for s in states)

            await until(second_done, 240, "the second run to end on both tabs")
            for t in (lead_tab, follow_tab):
                state = await run_of(t)
                assert state["outcome"]["reason"] == "done", state
                assert sorted(hashes(state)) == [1, 2]
            assert hashes(await run_of(lead_tab)) == hashes(await run_of(follow_tab))
            for t in (lead_tab, follow_tab):
                t.check_clean()


async def test_without_opfs_the_panel_says_automatic_saves_are_off() -> None:
    """A browser with no OPFS (removed here before the page loads): the panel says so, calmly
    (no problem listed, no console error), and Download and upload stay available."""
    async with signaling_server() as url, chromium() as browser:
        tab = await new_tab(browser)
        await tab.page.add_init_script("delete StorageManager.prototype.getDirectory")
        await tab.page.goto(f"{url}/?{QUERY}&name=no-opfs")
        await joined(tab)
        await shows(tab, KEEP, r"Automatic saves are off: this browser has no private file storage")
        assert await tab.page.locator(KEEP).get_by_label(EVERY).is_disabled()
        assert await tab.page.locator(KEEP).get_by_label(UPLOAD).is_enabled()
        assert await tab.page.locator("#problems").is_hidden(), "not an error"
        tab.check_clean()
