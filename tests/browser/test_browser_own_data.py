"""A Chromium tab trains with a Python leader on the server's own text files (``serve --text``,
``config.data = "local:LABEL@DIGEST"``): the page reads the data name from ``/api/status``,
offers it in the lead form's Data choice, accepts the leader's run (datanames.js, the data
rule), fetches its own windows (answers of source ``dataset``) and publishes the leader's hashes
at every step.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from daisychain.server import localtext
from daisychain.server.config import DataConfig
from fineweb_helpers import fineweb_server, start
from mesh_helpers import lead_config, needs_namespace
from tab_helpers import chromium, finished, open_tab, wait_tabs

pytestmark = [needs_namespace, pytest.mark.timeout(600)]

STEPS = 3
WORDS = "the river carries water from the hills to the sea and every town along it drinks "
FEED = (
    "async () => { const { app } = await import('/js/app.js'); const d = app.peer.data;"
    " const options = [...document.querySelectorAll('select option')].map((o) => o.textContent);"
    " return { name: d.dataName, source: d.source, stats: d.stats, options }; }"
)


async def test_a_tab_and_a_python_leader_train_on_a_folder_of_text(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        (folder / f"{i}.txt").write_text(f"file {i}. " + WORDS * 60, encoding="utf-8")
    prepared = localtext.prepare(folder, tmp_path / "state")
    cfg = localtext.config_for(prepared, DataConfig())
    server = fineweb_server(tmp_path, replace(cfg))
    async with server as (url, _stub), chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=cpu-tab")
        config = lead_config(STEPS, min_peers=2, data=cfg.name, shares_by="equal")
        lead = await start(url, "py-lead", url, config, data_name=cfg.name)
        outcome = await lead.task
        assert outcome.reason == "done", outcome
        [state] = await wait_tabs([tab], finished, 60, "the tab's outcome")
        assert state["outcome"]["reason"] == "done", state
        assert tab.hashes(state) == lead.hashes and len(lead.hashes) == STEPS
        feed = await tab.page.evaluate(FEED)
        assert (feed["name"], feed["source"]) == (cfg.name, "dataset"), feed
        assert feed["stats"]["fetched"] >= 1, feed  # its own windows, from /data
        assert any("text files 'notes'" in o for o in feed["options"]), feed["options"]
        tab.check_clean()
