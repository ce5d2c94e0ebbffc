"""Outer runs on the page (docs/PROTOCOL.md, "Outer runs"): Chromium tabs and headless Python
peers train one DiLoCo-style run, with identical outer hashes after every round.

The tab is the real page ``/`` on the CPU tier (static/js/p2p/modelreplica.js ``setOuter`` and the
training worker's train/outer.js); the Python peers are ``daisychain.p2p.node.Node`` over aiortc
in this process (tests/mesh_helpers.py), inside the test run's network namespace like every
mesh test. What the tests prove (issue 21, "Both protocol machines ... the page"):

- a Python leader and a tab follow an outer run of ``H = 2`` inner steps per round: every round
  the tab publishes the leader's outer hash (the sync guard compares them; the run ends
  ``done``, not ``fork``), and those hashes are the ones two Python peers publish for the same
  run (the reference: the same config, equal shares of one sequence each; with two peers the
  roster order cannot change a sum, so which peer is which does not matter);
- a tab leads an outer run (its lead choices: sync outer, H, outer lr and momentum) and a
  Python peer follows it with the same hashes, again the reference's;
- joins by state sync at a round boundary, both ways: a tab joining a Python-led outer run
  restores the leader's checkpoint (Python's ``encode_outer`` bytes: W, M, no inner state) and
  publishes the group's hash from its first round; a Python peer joining a tab-led one restores
  the checkpoint the tab encoded (static/js/p2p/checkpoint.js ``encodeOuterCheckpoint``) with
  Python's full validation;
- planted bugs, each a tab served a wrong train/outer.js through a Playwright route. An outer
  step made with the per-step rule (an AdamW step on the mean) changes the tab's own W: it
  publishes another hash than the leader's and the sync guard stops the run as a fork. A round
  that skips one of its inner steps, or one that does not keep its inner AdamW state between rounds,
  changes only the tab's CONTRIBUTION: every peer applies the same (wrong) reduced mean, so the
  replicas stay identical and the guard cannot see it, exactly as a wrong per-step gradient
  (the step probe guards the kernels that compute it). Those runs end ``done`` with hashes
  that differ from the all-Python reference's, which is what the test checks.

Any console error on a page fails its test (except the planted tabs' own refusal lines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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
from tab_helpers import LEAD, chromium, finished, open_tab, wait_tabs

pytestmark = [needs_namespace, pytest.mark.timeout(600)]

H = 2
OUTER: dict[str, Any] = {"sync": "outer", "outer_steps": H, "outer_lr": 0.7, "outer_momentum": 0.9}
END_RUN = "async () => (await import('/js/app.js')).app.peer.endRun()"
OUTER_JS = Path(__file__).resolve().parents[2] / "static" / "js" / "train" / "outer.js"

# Each plant: (what it breaks, the text of train/outer.js it replaces, its replacement).
PLANTS = {
    "inner-step-skipped": (
        "      if (j === steps.length) break;\n",
        "      if (j === steps.length) break;\n      if (j === 0) continue;\n",
    ),
    "inner-state-not-kept": (
        "      this.run.optState = inner.optState;\n",
        "      void inner.optState;\n",
    ),
    "per-step-apply": (
        "    applyOuter(this.state, this.cfg, mean);\n",
        "    M.applyGrads(this.run, perStepGrads(mean, this.run.params));\n"
        "    this.state.step += 1;\n",
    ),
}
PER_STEP_GRADS = """
function perStepGrads(flat, params) {
  const grads = new Map();
  let pos = 0;
  for (const [name, w] of params) {
    grads.set(name, flat.slice(pos, pos + w.length));
    pos += w.length;
  }
  return grads;
}
"""


def planted_outer_js(plant: str) -> str:
    old, new = PLANTS[plant]
    text = OUTER_JS.read_text()
    assert text.count(old) == 1, f"plant {plant}: {old!r} is not in train/outer.js once"
    text = text.replace(old, new)
    return text + PER_STEP_GRADS


_REFERENCE: dict[tuple[int, float], dict[int, str]] = {}


async def reference(rounds: int, overlap: float = 0.0) -> dict[int, str]:
    """The outer hashes two Python peers publish for the tests' run of ``rounds`` rounds."""
    if (rounds, overlap) not in _REFERENCE:
        async with signaling_server() as url:
            cfg = lead_config(rounds, min_peers=2, **OUTER, outer_overlap=overlap)
            lead = await start_peer(url, "ref-lead", lead=cfg)
            follower = await start_peer(url, "ref-follow")
            outcomes = await finish([lead, follower], 300)
        assert [o.reason for o in outcomes] == ["done", "done"], outcomes
        assert lead.hashes == follower.hashes
        _REFERENCE[rounds, overlap] = lead.hashes
    return _REFERENCE[rounds, overlap]


# Counts the chunks the page hands its machine early (peer.js earlyChunks), in window.earlyChunks.
COUNT_EARLY = """
async () => {
  const { app } = await import('/js/app.js');
  const peer = app.peer;
  const made = peer.earlyChunks.bind(peer);
  window.earlyChunks = 0;
  peer.earlyChunks = (c) => {
    const hand = made(c);
    return (k, payload) => {
      window.earlyChunks += 1;
      hand(k, payload);
    };
  };
}
"""


async def test_an_overlapped_outer_run_with_a_tab_sends_its_chunks_early_and_stays_identical() -> (
    None
):
    """overlap 0.5 (H = 2 inner steps of the share: measured after 1): the tab's chunks leave
    at the sync step (counted on the page), and its hashes are two Python peers' at every
    round, carries included; without overlap nothing leaves early."""
    rounds = 3
    want = await reference(rounds, 0.5)
    assert want != await reference(rounds), "overlap 0.5 must be another run"
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=overlap-tab")
        await tab.page.evaluate(COUNT_EARLY)
        cfg = lead_config(rounds, min_peers=2, **OUTER, outer_overlap=0.5)
        lead: Peer = await start_peer(url, "py-lead", lead=cfg)
        [outcome] = await finish([lead], 300)
        assert outcome.reason == "done", outcome
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        assert state["outcome"]["reason"] == "done", state
        assert tab.hashes(state) == lead.hashes == want
        # Two peers, each owning a chunk: one contribution to the leader per round.
        assert await tab.page.evaluate("() => window.earlyChunks") == 2 * rounds
        tab.check_clean()


async def test_python_leader_and_cpu_tab_train_an_outer_run_identically() -> None:
    rounds = 3
    want = await reference(rounds)
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=outer-tab")
        await tab.page.evaluate(COUNT_EARLY)
        lead: Peer = await start_peer(
            url, "py-lead", lead=lead_config(rounds, min_peers=2, **OUTER)
        )
        [outcome] = await finish([lead], 300)
        assert outcome.reason == "done", outcome
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        assert state["outcome"]["reason"] == "done", state
        got = tab.hashes(state)
        assert sorted(got) == list(range(1, rounds + 1))
        assert got == lead.hashes == want
        # Every round the tab computed a share (equal shares) and the leader's guard heard
        # both hashes agree.
        assert all(r["share"] > 0 for r in state["records"]), state["records"]
        assert all(lead.node.agreement(s) == (2, 2) for s in range(2, rounds + 1))
        # The leader's records count the round's tokens: H inner steps of the global batch.
        assert all(r.inner_steps == H for r in lead.records)
        # Without overlap a round is measured after its last step: nothing leaves early.
        assert await tab.page.evaluate("() => window.earlyChunks") == 0
        tab.check_clean()


async def test_tab_leads_an_outer_run_and_a_python_peer_follows_identically() -> None:
    rounds = 3
    want = await reference(rounds)
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=outer-lead")
        follower = await start_peer(url, "py-follow")
        choices = {
            "preset": "tiny", "steps": rounds, "seed": 7, "batch": TEST_BATCH, "seqLen": TEST_SEQ,
            "minPeers": 2, "sharesBy": "equal",
            "outer": {"innerSteps": H, "lr": 0.7, "momentum": 0.9},
        }  # fmt: skip
        await tab.page.evaluate(LEAD, choices)
        [outcome] = await finish([follower], 300)
        assert outcome.reason == "done", outcome
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        assert state["outcome"]["reason"] == "done", state
        config = follower.node.config
        assert config is not None and config.sync == "outer" and config.outer is not None
        assert config.outer.steps == H
        got = tab.hashes(state)
        assert sorted(got) == list(range(1, rounds + 1))
        assert got == follower.hashes == want
        tab.check_clean()


async def test_a_page_applying_the_per_step_rule_forks_and_the_guard_stops_the_run() -> None:
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        routes = {"/js/train/outer.js": planted_outer_js("per-step-apply")}
        tab = await open_tab(browser, url, "name=planted-tab", routes=routes)
        lead = await start_peer(url, "py-lead", lead=lead_config(6, min_peers=2, **OUTER))
        [outcome] = await finish([lead], 300)
        assert outcome.reason == "fork", outcome
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        assert state["outcome"]["reason"] == "fork", state["outcome"]
        # Round 1's hash differs already; hashes are compared one step late.
        assert outcome.step <= 2, outcome


async def test_tab_joining_a_python_outer_run_restores_its_checkpoint() -> None:
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        lead = await start_peer(url, "py-lead", lead=lead_config(2000, min_peers=2, **OUTER))
        follower = await start_peer(url, "py-1")
        await wait_for(lambda: len(lead.records) >= 3, 120, "the leader's round 3")
        tab = await open_tab(browser, url, "name=joiner")
        await wait_tabs([tab], lambda s: len(s[0]["records"]) >= 3, 120, "the joiner's rounds")
        lead.node.end_run()
        outcomes = await finish([lead, follower], 120)
        assert [o.reason for o in outcomes] == ["leader-request"] * 2, outcomes
        [state] = await wait_tabs([tab], finished, 60, "the joiner's outcome")
        got = tab.hashes(state)
        first = min(got)
        assert first > 3, got
        assert sorted(got) == list(range(first, max(got) + 1)), "no round skipped after joining"
        for step, digest in got.items():
            assert lead.hashes[step] == digest == follower.hashes[step], step
        assert state["id"] in lead.records[-1].roster
        tab.check_clean()


async def test_python_peer_joining_a_tab_led_outer_run_restores_the_tabs_checkpoint() -> None:
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=tab-lead")
        follower = await start_peer(url, "py-1")
        choices = {
            "preset": "tiny", "steps": 2000, "seed": 7, "batch": TEST_BATCH, "seqLen": TEST_SEQ,
            "minPeers": 2, "outer": {"innerSteps": H, "lr": 0.7, "momentum": 0.9},
        }  # fmt: skip
        await tab.page.evaluate(LEAD, choices)
        await wait_for(lambda: len(follower.records) >= 3, 120, "3 rounds")
        joiner = await start_peer(url, "py-joiner")
        await wait_for(lambda: len(joiner.records) >= 3, 120, "the joiner's rounds")
        await tab.page.evaluate(END_RUN)
        outcomes = await finish([follower, joiner], 120)
        assert [o.reason for o in outcomes] == ["leader-request"] * 2, outcomes
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        led = tab.hashes(state)
        first = min(joiner.hashes)
        assert first > 3 and len(joiner.records[0].roster) == 3
        for step, digest in joiner.hashes.items():
            assert led[step] == digest == follower.hashes[step], step
        tab.check_clean()


@pytest.mark.parametrize("plant", ["inner-step-skipped", "inner-state-not-kept"])
async def test_a_wrong_page_round_changes_the_run_away_from_the_reference(plant: str) -> None:
    rounds = 3
    want = await reference(rounds)
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        routes = {"/js/train/outer.js": planted_outer_js(plant)}
        tab = await open_tab(browser, url, "name=planted-tab", routes=routes)
        lead = await start_peer(url, "py-lead", lead=lead_config(rounds, min_peers=2, **OUTER))
        [outcome] = await finish([lead], 300)
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
    # The replicas agree with each other (the guard sees nothing: module docstring) ...
    assert outcome.reason == "done", (plant, outcome)
    assert tab.hashes(state) == lead.hashes
    # ... but not with the reference: from round 1 (a step skipped), or from round 2 on (the inner
    # state of round 1 thrown away: round 1 starts from a fresh one either way).
    first = 2 if plant == "inner-state-not-kept" else 1
    assert all(lead.hashes[s] == want[s] for s in range(1, first)), plant
    assert all(lead.hashes[s] != want[s] for s in range(first, rounds + 1)), plant
