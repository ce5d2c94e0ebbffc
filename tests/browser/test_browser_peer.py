"""The browser peer (static/js/p2p/peer.js on the page `/`): Chromium tabs train with headless
Python peers, bit-identical.

Every test runs inside the test run's network namespace (conftest.py), like the other mesh
tests: tabs and Python peers (``daisychain.p2p.node.Node`` over aiortc, in this process) meet on
the real server's ``/ws`` and connect over the namespace's veth address; nothing leaves the
machine. The tabs load the real page ``/`` (static/js/app.js), which fetches the tokenizer and
``/api/corpus/builtin``, chooses its backend by the training worker's rule, joins the group and
follows or leads a run through the protocol machine. A CPU-tier tab runs in a Chromium without
WebGPU; a WebGPU tab runs in one with ``--enable-unsafe-webgpu`` (SwiftShader) and is forced
onto ``webgpu-dp4a`` (``?backend=webgpu-dp4a``) so the WGSL products really run. What the tests
prove (issue 10, "Must show" 2-4):

- mixed mesh: a WebGPU tab, a CPU tab and a Python peer train 20 ``tiny`` steps; every peer
  publishes the same hash at every step, equal to the hashes Python computes outside the mesh
  for the same config and the shares the run committed (tests/shares_replay.py: with protocol
  v2's capacity-weighted rosters the shares follow measured speeds, so a second run of the same
  config would commit others);
- a browser leader with Python followers, and a Python leader with browser followers;
- a tab joining at step 10 matches from its first step (it restores the leader's checkpoint
  through static/js/p2p/checkpoint.js); the leader's tab closing mid-run hands the lead over
  with no fork; a tab whose GPU kernel has a bug its gates and start-up probe cannot see (the
  planted-bug hook: a Playwright route serving ``/kernels/gemm_dp4a.wgsl`` with a bug from
  tests/gpu_plant.py; the product itself has no test hook) is named by the probe guard, and the
  run stops with its id and backend.

Any console error on a page fails its test. The tab, the page's peer state and the waits are
tests/tab_helpers.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from daisychain.gpu.probe import PROBE_SHAPE, probe_operands
from gpu_plant import OneCellPlant, planted_step_probe
from mesh_helpers import (
    TEST_BATCH,
    TEST_SEQ,
    Peer,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)
from shares_replay import replayed_hashes, shares_of
from tab_helpers import LEAD, chromium, finished, open_tab, wait_tabs

pytestmark = [needs_namespace, pytest.mark.timeout(600)]


async def replayed(peer: Peer) -> dict[int, str]:
    """The hashes Python computes for ``peer``'s run from its config and committed shares."""
    config = peer.node.config
    assert config is not None
    return await replayed_hashes(config, shares_of(peer.records))


def check_same(reference: dict[int, str], *runs: dict[int, str]) -> None:
    for run in runs:
        for step, digest in run.items():
            assert reference[step] == digest, (
                f"step {step}: {digest[:12]} != {reference[step][:12]}"
            )


async def test_python_leader_and_cpu_tab_train_identically() -> None:
    """The first thing the shell must do: a tab on the CPU tier follows a Python leader, and
    the two replicas publish the same hash after every step."""
    steps = 6
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=cpu-tab")
        lead: Peer = await start_peer(url, "py-lead", lead=lead_config(steps, min_peers=2))
        outcomes = await finish([lead], 180)
        assert outcomes[0].reason == "done", outcomes
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        assert state["outcome"]["reason"] == "done", state
        assert state["backend"] == "js-cpu"
        got = tab.hashes(state)
        assert sorted(got) == list(range(1, steps + 1))
        assert got == lead.hashes
        assert {r["backend"] for r in state["records"]} == {"js-cpu"}
        assert all(len(r["roster"]) == 2 for r in state["records"])
        tab.check_clean()


async def test_mixed_mesh_webgpu_tab_cpu_tab_and_python_peer_match_an_all_python_run() -> None:
    """Must-show 2: a WebGPU tab (the WGSL path, forced), a CPU-tier tab and a Python peer train
    20 tiny steps; every peer publishes the same hash at every step, and those hashes are the
    hashes Python computes for the same config and the shares the run committed. Step 1 is
    shared equally (nobody measured yet), so every device computes a share of it; later steps
    follow the measured speeds (a device too slow for one sequence follows without computing)."""
    steps = 20
    async with (
        signaling_server() as url,
        chromium(webgpu=True) as gpu_browser,
        chromium(webgpu=False) as cpu_browser,
    ):
        gpu = await open_tab(gpu_browser, url, "name=gpu-tab&backend=webgpu-dp4a")
        cpu = await open_tab(cpu_browser, url, "name=cpu-tab")
        lead = await start_peer(
            url, "py-lead", lead=lead_config(steps, min_peers=3, shares_by="speed")
        )
        outcomes = await finish([lead], 400)
        assert outcomes[0].reason == "done", outcomes
        reference = await replayed(lead)
        states = await wait_tabs([gpu, cpu], finished, 60, "the tabs' outcomes")
        for tab, state, backend in (
            (gpu, states[0], "webgpu-dp4a"),
            (cpu, states[1], "js-cpu"),
        ):
            assert state["outcome"]["reason"] == "done", state
            assert state["backend"] == backend
            assert {r["backend"] for r in state["records"]} == {backend}
            assert all(len(r["roster"]) == 3 for r in state["records"])
            got = tab.hashes(state)
            assert sorted(got) == list(range(1, steps + 1))
            assert got == reference
            tab.check_clean()
        assert lead.hashes == reference
        # What the others published: the leader's sync guard (which keeps the last 8 steps)
        # heard 3 equal hashes; a differing one at any step would have ended the run in a
        # fork, not `done`.
        for step in range(steps - 7, steps + 1):
            assert lead.node.agreement(step) == (3, 3), step
        # Step 1's shares are equal: nobody had measured a speed yet.
        assert lead.records[0].shares == (TEST_BATCH,) * 3, lead.records[0]
        for state in states:
            assert shares_of(state["records"]) == shares_of(lead.records)
            assert state["records"][0]["share"] == TEST_BATCH
        # The WGSL path really ran: every gradient of the WebGPU tab (every step it had a
        # share of) used GPU products.
        computed = [r for r in states[0]["records"] if r["share"] > 0]
        assert computed and all(
            r["computedOn"] == "webgpu-dp4a" and r["gpuProducts"] > 0 for r in computed
        ), states[0]["records"]
        assert all(r["gpuProducts"] == 0 for r in states[1]["records"])


async def test_browser_leader_with_python_followers() -> None:
    """Must-show 3a: a tab leads (the page's own `lead`, with the test's batch and sequence
    length) and two Python peers follow; the config is the one a Python leader builds for the
    same choices (global batch included), and the hashes are those Python computes for it with
    the shares the tab committed."""
    steps = 5
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=tab-lead")
        followers = [await start_peer(url, f"py-{i}") for i in range(2)]
        choices = {"preset": "tiny", "steps": steps, "batch": TEST_BATCH, "seqLen": TEST_SEQ,
                   "lr": 3e-3, "warmup": 0, "seed": 7, "minPeers": 3}  # fmt: skip
        await tab.page.evaluate(LEAD, choices)
        outcomes = await finish(followers, 300)
        assert [o.reason for o in outcomes] == ["done", "done"], outcomes
        [state] = await wait_tabs([tab], finished, 60, "the leader tab's outcome")
        assert state["outcome"]["reason"] == "done", state
        assert all(r["leader"] == state["id"] for r in state["records"])
        config = followers[0].node.config
        assert config is not None
        assert (config.preset, config.steps, config.seed, config.global_batch) == (
            "tiny", steps, 7, TEST_BATCH * 3)  # fmt: skip
        assert (config.model.batch, config.model.seq_len) == (TEST_BATCH, TEST_SEQ)
        reference = await replayed_hashes(config, shares_of(state["records"]))
        assert tab.hashes(state) == reference
        for p in followers:
            assert p.hashes == reference
            assert {r.leader for r in p.records} == {state["id"]}
        tab.check_clean()


async def test_python_leader_with_browser_followers() -> None:
    """Must-show 3b: a Python leader and two tabs (one browser, two pages) as followers."""
    steps = 5
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tabs = [await open_tab(browser, url, f"name=tab-{i}") for i in range(2)]
        lead = await start_peer(url, "py-lead", lead=lead_config(steps, min_peers=3))
        outcomes = await finish([lead], 300)
        assert outcomes[0].reason == "done", outcomes
        reference = await replayed(lead)
        states = await wait_tabs(tabs, finished, 60, "the tabs' outcomes")
        assert lead.hashes == reference
        for tab, state in zip(tabs, states, strict=True):
            assert state["outcome"]["reason"] == "done", state
            assert tab.hashes(state) == reference
            assert {r["leader"] for r in state["records"]} == {lead.node.id}
            tab.check_clean()


async def test_tab_joining_at_step_10_matches_from_its_first_step() -> None:
    """Must-show 4a: two Python peers train; once the leader applied step 10 a tab opens, asks
    for the state, restores the leader's checkpoint (Python's bytes, checked by
    static/js/p2p/checkpoint.js: versions, shapes, tokenizer, weight hash) and enters the next
    roster; its first hash equals the Python peers' hash of that step, and so does every later
    one. The leader then ends the run at a boundary."""
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        lead = await start_peer(url, "py-lead", lead=lead_config(2000, min_peers=2))
        follower = await start_peer(url, "py-1")
        await wait_for(lambda: len(lead.records) >= 10, 120, "the leader's step 10")
        tab = await open_tab(browser, url, "name=joiner")
        await wait_tabs([tab], lambda s: len(s[0]["records"]) >= 3, 120, "the joiner's steps")
        lead.node.end_run()
        outcomes = await finish([lead, follower], 120)
        assert [o.reason for o in outcomes] == ["leader-request"] * 2, outcomes
        [state] = await wait_tabs([tab], finished, 60, "the joiner's outcome")
        assert state["outcome"]["reason"] == "leader-request", state
        got = tab.hashes(state)
        first = min(got)
        assert first > 10, got
        assert sorted(got) == list(range(first, max(got) + 1)), "no step skipped after joining"
        for step, digest in got.items():
            assert lead.hashes[step] == digest, step
            assert follower.hashes[step] == digest, step
        assert len(state["records"][0]["roster"]) == 3
        assert state["id"] in lead.records[-1].roster
        tab.check_clean()


async def test_leader_tab_closing_hands_the_lead_over_without_a_fork() -> None:
    """Must-show 4b: a tab leads two Python peers; after a few steps its page closes. The
    Python peers fail over to the first remaining peer of the last roster and keep training
    with identical hashes (no fork); their hashes before the close are the tab's."""
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=tab-lead")
        followers = [await start_peer(url, f"py-{i}") for i in range(2)]
        choices = {"preset": "tiny", "steps": 2000, "batch": TEST_BATCH, "seqLen": TEST_SEQ,
                   "seed": 7, "minPeers": 3}  # fmt: skip
        await tab.page.evaluate(LEAD, choices)
        [state] = await wait_tabs([tab], lambda s: len(s[0]["records"]) >= 5, 120, "5 steps")
        tab.check_clean()
        await tab.page.close()
        closed_at = max(len(p.records) for p in followers)
        await wait_for(
            lambda: (
                any(p.node.is_leader for p in followers)
                and min(len(p.records) for p in followers) >= closed_at + 4
            ),
            120,
            "a Python peer leading 4 more steps",
        )
        [new_leader] = [p for p in followers if p.node.is_leader]
        assert new_leader.node.id == min(p.node.id for p in followers), "first of the roster"
        new_leader.node.end_run()
        outcomes = await finish(followers, 120)
        assert [o.reason for o in outcomes] == ["leader-request"] * 2, outcomes
        # No fork: every step both applied has one hash, and both ended on the same state. (A
        # peer that missed the step the leader died in re-enters through the new leader's
        # checkpoint, so its records may lack that one step.)
        a, b = (p.hashes for p in followers)
        common = a.keys() & b.keys()
        assert len(common) >= closed_at + 3, (sorted(a), sorted(b))
        assert {s: a[s] for s in common} == {s: b[s] for s in common}, "the replicas forked"
        assert (outcomes[0].step, outcomes[0].hash) == (outcomes[1].step, outcomes[1].hash)
        for step, digest in tab.hashes(state).items():
            assert a[step] == digest, step
        after = [r for r in new_leader.records if r.step > closed_at + 1]
        assert after and {r.leader for r in after} == {new_leader.node.id}
        assert all(state["id"] not in r.roster for r in after)


@dataclass(frozen=True)
class StaleReadPlant(OneCellPlant):
    """One unit off in one cell of the probe's product, but only when that cell's output
    buffer still holds the right answer from an earlier run of the same product: a kernel that
    reads stale memory. The start-up checks run it on poisoned or fresh buffers (the gates under
    ``pool.poisoned``, the first probe on a buffer just poisoned), so it passes every gate and
    the start-up probe, and is chosen; the probe of each training step reuses the buffer the
    previous probe left, and drifts. Only the per-step probe guard can name such a device."""

    expected: int = 0

    def condition(self) -> str:
        return f"{super().condition()} && out[i * params.n + j] == {self.expected}i"


def stale_read_plant() -> StaleReadPlant:
    row, col = 40, 50
    a, b = probe_operands()
    right = int((a.astype(np.int64) @ b.astype(np.int64))[row, col])
    return StaleReadPlant(row, col, 1, *PROBE_SHAPE, expected=right)


async def test_planted_kernel_bug_in_a_tab_is_named_by_the_probe_guard() -> None:
    """Must-show 4c: a WebGPU tab whose DP4A kernel (served through a Playwright route) has a
    planted bug that the gates and the start-up probe cannot see (``StaleReadPlant``) trains
    with a Python leader. Its kernel probe after a training step is not the reference's: the
    probe guard names the tab's id and backend, and the run stops (fork) at every peer."""
    plant = stale_read_plant()
    kernels = {"/kernels/gemm_dp4a.wgsl": plant.wgsl("dp4a")}
    async with signaling_server() as url, chromium(webgpu=True) as browser:
        tab = await open_tab(browser, url, "name=gpu-tab&backend=webgpu-dp4a", routes=kernels)
        lead = await start_peer(url, "py-lead", lead=lead_config(2000, min_peers=2))
        [outcome] = await finish([lead], 240)
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        tab_id = state["id"]
        assert state["backend"] == "webgpu-dp4a", "the planted kernel passed its start-up checks"
        assert outcome.reason == "fork", outcome
        assert f"{tab_id} (backend webgpu-dp4a)" in outcome.message, outcome.message
        assert outcome.hashes == {tab_id: planted_step_probe(plant)}  # its product, our quantizer
        assert state["outcome"]["reason"] == "fork", state["outcome"]
        assert f"{tab_id} (backend webgpu-dp4a)" in state["outcome"]["message"]
        assert any("stopped" in e["message"] for e in state["errors"]), "the page says why"
        tab.check_clean()


# The page's layout and accessibility at a phone's size.
LAYOUT = """
() => {
  const root = document.documentElement;
  const status = document.getElementById('status');
  const unlabeled = [...document.querySelectorAll('#lead input, #lead select')]
    .filter((el) => el.labels.length === 0).map((el) => el.name);
  return { overflow: root.scrollWidth - root.clientWidth, live: status.getAttribute('aria-live'),
    role: status.getAttribute('role'), unlabeled,
    errorsLive: document.querySelector('#problems ul').getAttribute('aria-live') };
}
"""


LEAD_BUTTON = "#lead button[type=submit]"


async def submit_lead(page: Any, fields: dict[str, str]) -> None:
    await page.click("#lead details summary")
    for name, value in fields.items():
        await page.fill(f"#lead [name={name}]", value)
    await page.click(LEAD_BUTTON)


async def test_page_controls_at_phone_size_refuse_a_bad_run_and_lead_a_good_one() -> None:
    """The minimal controls on `/` at 390x844: no horizontal overflow, labelled fields, a live
    status line. "Lead a run" with a batch above this device's cap (64) is refused on the page
    with the rule's hint and nothing starts; the same form with good values leads a Python
    follower to the end; the lead panel says so and the readiness panel names the backend."""
    phone = {"width": 390, "height": 844}
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=phone", viewport=phone)
        page = tab.page
        layout = await page.evaluate(LAYOUT)
        assert layout == {"overflow": 0, "live": "polite", "role": "status", "unlabeled": [],
                          "errorsLive": "assertive"}  # fmt: skip
        await page.wait_for_selector(f"{LEAD_BUTTON}:not([disabled])")
        await submit_lead(page, {"steps": "3", "min_peers": "2", "batch": "65", "seq_len": "32"})
        await page.wait_for_selector("#lead [role=alert]:not([hidden])")
        refusal = await page.inner_text("#lead [role=alert]")
        assert "Cannot lead this run: batch 65 above this peer's cap of 64" in refusal, refusal
        assert (await tab.state())["phase"] == "lobby"
        await page.wait_for_selector(f"{LEAD_BUTTON}:not([disabled])")
        follower = await start_peer(url, "py-1")
        await page.fill("#lead [name=batch]", str(TEST_BATCH))
        await page.fill("#lead [name=seed]", "7")
        await page.click(LEAD_BUTTON)
        [outcome] = await finish([follower], 180)
        assert outcome.reason == "done", outcome
        [state] = await wait_tabs([tab], finished, 60, "the page's outcome")
        last = state["records"][-1]
        assert last["step"] == 3 and last["hash"] == follower.hashes[3]
        assert "js-cpu" in await page.inner_text("#readiness .backend")
        # The step, loss and hash are the live panel's (tests/page/test_page_live.py).
        ended = "The last run ended at step 3: it finished. This device is back in the group"
        await page.wait_for_selector(f"#lead .standing:has-text('{ended}')")
        assert (await page.evaluate(LAYOUT))["overflow"] == 0, "no horizontal scroll after a run"
        tab.check_clean()


END_RUN = """
async () => {
  const { app } = await import('/js/app.js');
  app.peer.endRun();
}
"""


async def test_python_peer_joining_a_tab_led_run_restores_the_tabs_checkpoint() -> None:
    """The other direction of a join: a tab leads one Python follower; a second Python peer
    arrives mid-run, asks the tab for the state and restores the checkpoint the tab encoded
    (static/js/p2p/checkpoint.js from the worker's export) with Python's full validation; its
    hashes then match the tab's at every step. The tab's user ends the run at a boundary."""
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=tab-lead")
        follower = await start_peer(url, "py-1")
        choices = {"preset": "tiny", "steps": 2000, "batch": TEST_BATCH, "seqLen": TEST_SEQ,
                   "seed": 7, "minPeers": 2}  # fmt: skip
        await tab.page.evaluate(LEAD, choices)
        await wait_for(lambda: len(follower.records) >= 5, 120, "5 steps")
        joiner = await start_peer(url, "py-joiner")
        await wait_for(lambda: len(joiner.records) >= 3, 120, "the joiner's steps")
        await tab.page.evaluate(END_RUN)
        outcomes = await finish([follower, joiner], 120)
        assert [o.reason for o in outcomes] == ["leader-request"] * 2, outcomes
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        assert state["outcome"]["reason"] == "leader-request", state["outcome"]
        led = tab.hashes(state)
        first = min(joiner.hashes)
        assert first > 5 and len(joiner.records[0].roster) == 3
        for step, digest in joiner.hashes.items():
            assert led[step] == digest == follower.hashes[step], step
        tab.check_clean()
