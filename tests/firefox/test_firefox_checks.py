"""The check pages in Firefox (docs/BROWSERS.md): ``/selftest`` (every backend's exact gates and
the kernel probe) and ``/train-check`` (ten ``tiny`` training steps against the Python
reference the server computes) on the real server at 127.0.0.1, a secure context.

Firefox on Linux has no WebGPU: both WebGPU rows are unusable with the reason a secure page
without ``navigator.gpu`` gets (``gpu/device.js`` ``noWebGpuReason``: this browser, not https),
the CPU tier passes every gate, gives the reference probe hash, and trains the golden run's bits
(tests/vectors/manifest.json, read here as the oracle). No console error on either page.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from daisychain.server.app import serve_local
from firefox_helpers import FirefoxTab, firefox, open_tab
from server_fixtures import ByteTokenizer, config

MANIFEST = Path(__file__).resolve().parents[1] / "vectors" / "manifest.json"
NO_WEBGPU = "navigator.gpu is missing: this browser has no WebGPU, or has it switched off"


async def finished(tab: FirefoxTab, timeout: float = 240) -> dict[str, Any]:
    """The check page's ``#result`` once its body leaves the running state (it must be done)."""
    deadline = time.monotonic() + timeout
    while (state := await tab.evaluate("() => document.body.dataset.state")) == "running":
        assert time.monotonic() < deadline, "the check page never finished in Firefox"
        await asyncio.sleep(0.5)
    result: dict[str, Any] = json.loads(
        await tab.evaluate("() => document.querySelector('#result').textContent")
    )
    assert state == "done", f"the check page ended in state {state}: {result}"
    return result


async def test_selftest_and_train_check_pass_on_firefox_cpu_tier() -> None:
    async with serve_local(config(), tokenizer=ByteTokenizer) as url, firefox() as ff:
        tab = await open_tab(ff, f"{url}/selftest?gops=0", ("127.0.0.1",))
        result = await finished(tab)
        rows = {row["name"]: row for row in result["backends"]}
        assert result["selected"] == "js-cpu", result["demotions"]
        assert rows["js-cpu"]["gates_passed"], rows["js-cpu"]
        assert rows["js-cpu"]["probe_hash"] == result["reference_probe_hash"], rows["js-cpu"]
        for name in ("webgpu-dp4a", "webgpu-lut"):
            assert not rows[name]["gates_passed"]
            assert NO_WEBGPU in rows[name]["failure"], rows[name]["failure"]
        await tab.check_clean()

        tab = await open_tab(ff, f"{url}/train-check", ("127.0.0.1",))
        result = await finished(tab)
        assert result["backend"] == "js-cpu" and result["on_gpu"] is False, result["backend"]
        golden = next(
            c for c in json.loads(MANIFEST.read_text(encoding="utf-8"))["cases"]
            if c["name"] == "train_run.tiny"
        )  # fmt: skip
        assert result["hashes"] == golden["outputs"]["hashes"]["value"]
        assert result["all_match"] is True
        await tab.check_clean()
