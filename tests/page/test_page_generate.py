"""The page's "Use the model" panel (static/js/page/use.js) in Debian's Chromium: issue 11's
Must-show 5 and generation from a page's own run.

1. One checkpoint, three generators, one text. Python trains a ``tiny`` checkpoint for a few
   steps in the test; the page ``/`` loads it through the panel's file input and generates (the
   Generate button, in the panel's generation worker); the inference kit downloaded from the
   same panel, opened from ``file://`` with every request refused, generates; and
   ``daisychain generate CHECKPOINT --prompt ... --seed ...`` generates. For the same prompt,
   settings and seed the three texts (and ids) are equal. Planted failures: another seed gives
   another text (the comparison can fail, and the CLI agrees on that one too); a checkpoint with
   one flipped byte and a file that is no checkpoint are refused with the reason and a hint; a
   negative and a non-numeric temperature are refused under the field with the rule's hint and
   nothing is generated. At 390x844 and 1280x800 the page has no horizontal overflow and every
   control of the panel has a name (screenshots of the panel are saved as artifacts:
   $DAISYCHAIN_ARTIFACTS, else the test's folder).
2. Live weights. The page leads a short ``tiny`` run with a Python follower, or follows a
   Python leader. During the run, Generate copies the weights between steps (the run goes on)
   and the page's own export
   (``replica.checkpoint()`` in page JS, taken in the same turn) is that very state: its
   weight hash is the run's hash at that step, and ``daisychain generate`` on it gives the
   page's text. After the run ended, the panel still generates from the run's last weights:
   their hash is the final step's, and ``daisychain generate`` on the Python peer's final
   checkpoint gives the same text.

No console error on any page; no request leaves the test server (the kit makes none at all).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from daisychain import checkpoint, training
from daisychain.corpus import load_builtin_text
from daisychain.model.config import preset
from daisychain.optim import AdamWConfig
from daisychain.tokenizer import load_default
from mesh_helpers import (
    TEST_BATCH,
    TEST_SEQ,
    finish,
    lead_config,
    needs_namespace,
    signaling_server,
    start_peer,
    wait_for,
)
from tab_helpers import LEAD, Tab, chromium, finished, open_tab, wait_tabs

pytestmark = [needs_namespace, pytest.mark.timeout(900)]

PAGE_TIMEOUT_MS = 120_000
PROMPT = "The king said"
SETTINGS = {"temperature": "0.8", "top-k": "40", "seed": "3", "max-tokens": "24"}

# Every control of the panel has a name; the page does not scroll sideways.
LAYOUT = """
() => {
  const root = document.getElementById('use');
  const unnamed = [...root.querySelectorAll('input, textarea, button, select')]
    .filter((el) => !(el.labels?.length || el.textContent.trim() || el.getAttribute('aria-label')))
    .map((el) => el.id || el.outerHTML.slice(0, 60));
  return { scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
    unnamed, live: document.getElementById('use-output').getAttribute('aria-live'),
    status: document.getElementById('use-status').getAttribute('role') };
}
"""

PANEL = """
async () => {
  const { panels } = await import('/js/page/use.js');
  window.__use = panels[0];
  window.__usePrev = panels[0].last;
  return panels.length;
}
"""

# The last result, once the panel is idle again with a new one.
DONE = """
() => window.__use.last !== window.__usePrev
  && document.getElementById('use').dataset.state === 'idle'
"""

# During a run: press Generate and take the page's own checkpoint in the same turn (both are
# one message in the training worker's queue, so they read the same step); then wait for the text.
LIVE = """
async () => {
  const { app } = await import('/js/app.js');
  const { panels } = await import('/js/page/use.js');
  const panel = panels[0];
  const prev = panel.last;
  const before = app.peer.records.length;
  document.getElementById('use-generate').click();
  const bytes = await app.replica.checkpoint();
  while (panel.last === prev || document.getElementById('use').dataset.state !== 'idle') {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return { last: panel.last, checkpoint: btoa(text), before, after: app.peer.records.length };
}
"""


def make_checkpoint(path: Path, steps: int = 6, seed: int = 11) -> str:
    """A tiny model trained ``steps`` AdamW steps on the built-in corpus, saved at ``path``."""
    tok = load_default()
    cfg = preset("tiny")
    state = training.init(cfg, AdamWConfig(lr=0.01, warmup_steps=2), seed)
    tokens = np.array(tok.encode(load_builtin_text()[:40_000]), np.int64)
    for _ in range(steps):
        x, y = training.next_batch(state, tokens)
        training.train_step(state, x, y)
    return checkpoint.save(path, state, tok.sha256)


async def cli_generate(path: Path, prompt: str, settings: dict[str, str]) -> dict[str, Any]:
    """``daisychain generate PATH --json`` with the panel's settings."""
    argv = [sys.executable, "-m", "daisychain", "generate", str(path), "--json", "--prompt", prompt]
    for name, value in settings.items():
        argv += [f"--{name}", value]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()
    record: dict[str, Any] = json.loads(out)
    return record


async def fill(page: Any, prompt: str, settings: dict[str, str]) -> None:
    await page.fill("#use-prompt", prompt)
    for name, value in settings.items():
        await page.fill(f"#use-{name}", value)


async def generate(page: Any) -> dict[str, Any]:
    """Press Generate and return the panel's result (ids, text, step, hash of the weights)."""
    await page.evaluate(PANEL)
    await page.click("#use-generate")
    await page.wait_for_function(DONE, timeout=PAGE_TIMEOUT_MS)
    result: dict[str, Any] = await page.evaluate("() => window.__use.last")
    result["shown"] = await page.text_content("#use-output")
    result["status"] = await page.text_content("#use-status")
    return result


async def kit_generate(browser: Any, kit: Path, prompt: str, settings: dict[str, str]) -> Any:
    """Open the kit from disk in a context that refuses every request; generate once."""
    context = await browser.new_context()
    requests: list[str] = []
    errors: list[str] = []

    async def refuse(route: Any) -> None:
        if route.request.url == kit.as_uri():
            await route.continue_()
            return
        requests.append(route.request.url)
        await route.abort()

    await context.route("**/*", refuse)
    page = await context.new_page()
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    await page.goto(kit.as_uri())
    ready = "body[data-state='ready']"
    await page.wait_for_selector(ready, state="attached", timeout=PAGE_TIMEOUT_MS)
    await page.fill("#prompt", prompt)
    for name, value in settings.items():
        await page.fill(f"#{name}", value)
    await page.click("#generate")
    await page.wait_for_selector("#ids:not(:empty)", state="attached", timeout=PAGE_TIMEOUT_MS)
    await page.wait_for_selector("body[data-state='ready']", state="attached")
    result: dict[str, Any] = json.loads(await page.text_content("#ids") or "{}")
    result["output"] = await page.text_content("#output")
    await context.close()
    assert not errors, f"console errors in the kit: {errors}"
    assert not requests, f"the kit made requests: {requests}"
    return result


def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("DAISYCHAIN_ARTIFACTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def check_layout(tab: Tab, size: dict[str, int], shot: Path) -> None:
    await tab.page.set_viewport_size(size)
    layout = await tab.page.evaluate(LAYOUT)
    assert layout["scrollWidth"] <= layout["innerWidth"], (size, layout)
    assert layout["unnamed"] == [], layout
    assert (layout["live"], layout["status"]) == ("polite", "status"), layout
    await tab.page.locator("#use").screenshot(path=str(shot))


async def test_page_kit_and_cli_generate_the_same_text_from_one_checkpoint(tmp_path: Path) -> None:
    """Must-show 5, with the planted failures (seed, corrupted file, bad temperature)."""
    ck_path = tmp_path / "tiny-6.safetensors"
    weight_hash = make_checkpoint(ck_path)
    shots = artifacts(tmp_path)
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, "name=user", viewport={"width": 390, "height": 844})
        page = tab.page
        # the file input: a valid checkpoint is accepted and named with its step and hash
        await page.set_input_files("#use-file", str(ck_path))
        await page.wait_for_function(
            "() => document.getElementById('use-file-info').textContent.includes('step 6')"
        )
        assert weight_hash[:12] in (await page.text_content("#use-file-info") or "")
        assert await page.is_checked("#use-source-file")
        await fill(page, PROMPT, SETTINGS)
        await page.evaluate(PANEL)
        await page.press("#use-prompt", "Control+Enter")  # the keyboard way to Generate
        await page.wait_for_function(DONE, timeout=PAGE_TIMEOUT_MS)
        by_key = await page.evaluate("() => window.__use.last")
        got = await generate(page)
        assert by_key["ids"] == got["ids"]  # and the same seed gives the same text again
        cli = await cli_generate(ck_path, PROMPT, SETTINGS)
        assert cli["checkpoint"]["weight_hash"] == got["hash"] == weight_hash
        assert got["origin"] == "file" and got["step"] == 6
        assert got["promptIds"] == cli["prompt_ids"]
        assert (got["ids"], got["text"]) == (cli["ids"], cli["text"])
        assert got["shown"] == PROMPT + cli["text"]
        assert len(cli["ids"]) == 24 and cli["text"], cli
        print(f"\npage and CLI, seed 3: {cli['text']!r}\n{got['status']}")
        await check_layout(tab, {"width": 390, "height": 844}, shots / "use-390x844.png")
        await check_layout(tab, {"width": 1280, "height": 800}, shots / "use-1280x800.png")

        # the inference kit, downloaded from the panel, generates the same text offline
        async with page.expect_download() as waiting:
            await page.click("#use-kit")
        download = await waiting.value
        kit = tmp_path / download.suggested_filename
        await download.save_as(kit)
        assert download.suggested_filename == f"daisychain-kit-step6-{weight_hash[:8]}.html"
        await page.wait_for_function(
            "() => document.getElementById('use-status').textContent"
            ".startsWith('Saved daisychain-kit')"
        )
        from_kit = await kit_generate(browser, kit, PROMPT, SETTINGS)
        assert from_kit["ids"] == cli["ids"] and from_kit["output"] == PROMPT + cli["text"]

        # planted: another seed gives another text, and the three still agree on it
        other = {**SETTINGS, "seed": "4"}
        await fill(page, PROMPT, other)
        got4 = await generate(page)
        cli4 = await cli_generate(ck_path, PROMPT, other)
        assert got4["text"] != got["text"] and got4["ids"] != got["ids"]
        assert (got4["ids"], got4["text"]) == (cli4["ids"], cli4["text"])
        assert (await kit_generate(browser, kit, PROMPT, other))["ids"] == cli4["ids"]

        # Stop: the text ends early, and what came is the start of the full continuation
        long = {**SETTINGS, "max-tokens": "1024"}
        await fill(page, PROMPT, long)
        await page.evaluate(PANEL)
        await page.click("#use-generate")
        await page.wait_for_function(
            "() => /Generating: [0-9]+ of 1024/"
            ".test(document.getElementById('use-status').textContent)"
        )
        await page.click("#use-stop")
        await page.wait_for_function(DONE, timeout=PAGE_TIMEOUT_MS)
        stopped = await page.evaluate("() => window.__use.last")
        assert stopped["stop"] == "aborted" and 0 < len(stopped["ids"]) < 1024, stopped
        assert "stopped" in (await page.text_content("#use-status") or "")
        cli_long = await cli_generate(ck_path, PROMPT, long)
        assert cli_long["ids"][: len(stopped["ids"])] == stopped["ids"]
        await fill(page, PROMPT, SETTINGS)

        # planted: an invalid temperature is refused under its field, nothing is generated
        for value, words in (("-1", "is negative; use 0 for greedy decoding"),
                             ("warm", "must be a finite number")):  # fmt: skip
            await page.fill("#use-temperature", value)
            await page.evaluate(PANEL)
            await page.click("#use-generate")
            await page.wait_for_function(
                "(w) => document.getElementById('use-temperature-error').textContent.includes(w)",
                arg=words,
            )
            assert await page.get_attribute("#use-temperature", "aria-invalid") == "true"
            assert "settings were refused" in (await page.text_content("#use-status") or "")
            assert await page.evaluate("() => window.__use.last === window.__usePrev")
        await page.fill("#use-temperature", "0.8")  # typing clears the message
        assert await page.text_content("#use-temperature-error") == ""

        # planted: a corrupted checkpoint and a file that is no checkpoint are refused with hints
        data = bytearray(ck_path.read_bytes())
        data[-5] ^= 0x01  # one bit of the last tensor
        bad = tmp_path / "flipped.safetensors"
        bad.write_bytes(bytes(data))
        junk = tmp_path / "notes.safetensors"
        junk.write_text("these are my notes, not a model\n", encoding="utf-8")
        for path, words in ((bad, "does not match the recorded"), (junk, "notes.safetensors")):
            await page.set_input_files("#use-file", str(path))
            await page.wait_for_selector("#use-file-error:not([hidden])")
            shown = await page.text_content("#use-file-error") or ""
            assert words in shown, shown
            assert "pick a .safetensors checkpoint saved by DaisyChain" in shown, shown
            assert "was refused" in (await page.text_content("#use-status") or "")
        assert "none picked" in (await page.text_content("#use-file-info") or "")
        await page.click("#use-generate")
        await page.wait_for_selector("#use-error:not([hidden])")
        assert "no checkpoint file is picked" in (await page.text_content("#use-error") or "")
        tab.check_clean()


@pytest.mark.parametrize("role", ["leader", "follower"])
async def test_page_generates_from_the_live_weights_of_its_run(tmp_path: Path, role: str) -> None:
    """During a run and after it: the panel's text is `daisychain generate`'s on the same state.
    The page leads a Python follower, or follows a Python leader (a follower's run ends in the
    same turn as its last step, so its last weights must have been kept by then)."""
    steps = 30
    settings = {"temperature": "0.9", "top-k": "50", "seed": "5", "max-tokens": "12"}
    final = tmp_path / "python-peer.safetensors"
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        tab = await open_tab(browser, url, f"name=tab-{role}")
        page = tab.page
        await page.wait_for_function(
            "() => document.getElementById('use-run-info').textContent.includes('no weights yet')"
        )
        await page.click("#use-generate")  # no run yet: nothing to generate from, and why
        await page.wait_for_selector("#use-error:not([hidden])")
        assert "this page has no weights yet" in (await page.text_content("#use-error") or "")
        assert "lead or join a run first" in (await page.text_content("#use-error") or "")
        if role == "leader":
            python = await start_peer(url, "py-1", checkpoint_path=str(final))
            choices = {"preset": "tiny", "steps": steps, "batch": TEST_BATCH, "seqLen": TEST_SEQ,
                       "seed": 7, "minPeers": 2}  # fmt: skip
            await page.evaluate(LEAD, choices)
        else:
            lead = lead_config(steps, min_peers=2)
            python = await start_peer(url, "py-lead", lead=lead, checkpoint_path=str(final))
        await wait_for(lambda: len(python.records) >= 2, 180, "two steps")
        await fill(page, PROMPT, settings)
        live = await page.evaluate(LIVE)
        last = live["last"]
        exported = tmp_path / "page-export.safetensors"
        exported.write_bytes(base64.b64decode(live["checkpoint"]))
        assert last["origin"] == "run" and 0 < last["step"] < steps, last
        assert live["after"] >= live["before"]
        ck = checkpoint.load(exported)
        assert ck.step == last["step"] and ck.weight_hash == last["hash"]
        await wait_for(lambda: last["step"] in python.hashes, 120, "the Python peer's step")
        assert python.hashes[last["step"]] == last["hash"], "the copy is not the run's state"
        cli = await cli_generate(exported, PROMPT, settings)
        assert (last["ids"], last["text"]) == (cli["ids"], cli["text"])
        print(f"\nlive, step {last['step']}: {cli['text']!r}")

        # after the run: the last weights stay usable
        [outcome] = await finish([python], 300)
        assert outcome.reason == "done", outcome
        await wait_tabs([tab], finished, 60, "the tab's outcome")
        await page.wait_for_function(
            "() => document.getElementById('use-run-info').textContent.includes('the run ended')"
        )
        after = await generate(page)
        assert (after["origin"], after["step"]) == ("run", steps)
        assert after["hash"] == python.hashes[steps]
        cli_final = await cli_generate(final, PROMPT, settings)
        assert cli_final["checkpoint"]["weight_hash"] == after["hash"]
        assert (after["ids"], after["text"]) == (cli_final["ids"], cli_final["text"])
        # the kit of the run's last weights generates the same text offline
        async with page.expect_download() as waiting:
            await page.click("#use-kit")
        download = await waiting.value
        assert download.suggested_filename == f"daisychain-kit-step{steps}-{after['hash'][:8]}.html"
        kit = tmp_path / download.suggested_filename
        await download.save_as(kit)
        assert (await kit_generate(browser, kit, PROMPT, settings))["ids"] == cli_final["ids"]
        tab.check_clean()


# The generation worker's own checks, talked to directly from a page of the server.
WORKER = """
async (base64) => {
  const { decodeCheckpoint } = await import('/js/p2p/checkpoint.js');
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const tokBytes = new Uint8Array(await (await fetch('/luts/tokenizer.json')).arrayBuffer());
  const ck = await decodeCheckpoint(bytes, 'test', {});
  const w = new Worker('/js/model/genworker.js', { type: 'module' });
  const got = [];
  w.onmessage = (e) => got.push(e.data);
  const until = async (f) => { while (!got.some(f)) await new Promise((r) => setTimeout(r, 20)); };
  const settings = { temperature: 0.8, topK: 40, seed: 1, maxTokens: 1024 };
  const job = (id) => ({ type: 'generate', id, prompt: 'The', model: { ...ck.model },
    params: ck.state.params, settings });
  w.postMessage({ type: 'bogus' });
  w.postMessage({ ...job(1), params: { names: ['wte'], arrays: [[1, 2]] } });
  w.postMessage(job(2)); // before the tokenizer
  await until((m) => m.id === 2);
  w.postMessage({ type: 'tokenizer', bytes: tokBytes });
  w.postMessage(job(3));
  await until((m) => m.type === 'token' && m.id === 3);
  w.postMessage(job(4)); // while 3 runs
  await until((m) => m.id === 4);
  w.postMessage({ type: 'stop', id: 3 });
  await until((m) => m.type === 'done' && m.id === 3);
  w.postMessage({ ...job(5), settings: { ...settings, temperature: -1 } });
  await until((m) => m.id === 5);
  w.terminate();
  const broken = new Worker('/js/model/genworker.js', { type: 'module' });
  broken.onmessage = (e) => got.push(e.data);
  const junk = new TextEncoder().encode('{"not": "a tokenizer"}');
  broken.postMessage({ type: 'tokenizer', bytes: junk });
  broken.postMessage(job(6));
  await until((m) => m.id === 6);
  broken.terminate();
  return got.filter((m) => m.type !== 'token');
}
"""


async def test_generation_worker_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    """model/genworker.js: a malformed message is refused (not dropped), a request before the
    tokenizer or during another generation fails with the reason, Stop ends a generation early,
    a refused setting comes back with the rule's words marked as a settings refusal, and bytes
    that are no tokenizer are refused (and so is every request after them)."""
    ck_path = tmp_path / "tiny-2.safetensors"
    make_checkpoint(ck_path, steps=2)
    async with signaling_server() as url, chromium(webgpu=False) as browser:
        page = await browser.new_page()
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        await page.goto(url + "/healthz")
        got = await page.evaluate(WORKER, base64.b64encode(ck_path.read_bytes()).decode())
        kinds = [(m["type"], m.get("id")) for m in got]
        assert kinds == [
            ("refused", None),
            ("refused", None),
            ("failed", 2),
            ("ready", None),
            ("failed", 4),
            ("done", 3),
            ("failed", 5),
            ("refused", None),
            ("failed", 6),
        ], got
        assert "unknown message type bogus" in got[0]["message"]
        assert "params must be {names, arrays} of Float32Array" in got[1]["message"]
        assert "tokenizer is not loaded" in got[2]["message"] and not got[2]["settings"]
        assert "still running" in got[4]["message"]
        assert got[5]["stop"] == "aborted" and 0 < len(got[5]["ids"]) < 1024
        assert "is negative; use 0 for greedy decoding" in got[6]["message"] and got[6]["settings"]
        assert "the tokenizer cannot be built" in got[7]["message"]
        assert got[8]["message"] and not got[8]["settings"]  # the same reason, not a setting
        assert not errors, errors
