"""The WebAssembly GEMM's pool of workers in headless Chromium, on a cross-origin isolated page.

The harness page is served with the app's own COOP/COEP and Content-Security-Policy (copied from
a real page), so it is cross-origin isolated as the app's pages are. It starts the real training
worker (``TrainWorker``: static/js/train/), which gates the WebAssembly GEMM with a pool of
helper workers (static/js/numerics/wasmpool.js, wasmhelper.js, fetched from the real server) and
trains the golden ``train_run.tiny`` case on the CPU tier: every step's loss bits and state hash
must be the Python reference's with the products split across the pool. The same page without
isolation (no COOP/COEP) gets one thread and says why. Any console error fails a test.
"""

from __future__ import annotations

from typing import Any

import pytest

from daisychain.gpu.probe import reference_step_probe
from selftest_helpers import browser_tab, golden_run

HARNESS = "/pool-harness.html"  # a blank page of the app's origin, served by the test
STEPS = 4

_PAGE_TRAIN = """
async ([steps]) => {
  const { TrainWorker } = await import('/js/train/client.js');
  const M = await import('/js/model/index.js');
  const manifest = await (await fetch('/vectors/manifest.json')).json();
  const c = manifest.cases.find((k) => k.name === 'train_run.tiny');
  const blob = async (f) => new Int32Array(await (await fetch('/vectors/' + f.blob)).arrayBuffer());
  const xs = await blob(c.inputs.x);
  const ys = await blob(c.inputs.y);
  const cfg = M.modelConfig(c.params.model);
  const bt = cfg.batch * cfg.seqLen;
  const bitsOf = (v) => '0x' + new Uint32Array(Float32Array.of(v).buffer)[0].toString(16)
    .padStart(8, '0');
  const w = new TrainWorker();
  const out = { isolated: globalThis.crossOriginIsolated, cores: navigator.hardwareConcurrency };
  try {
    out.selection = await w.init({ model: c.params.model, optim: c.params.optim,
      seed: c.params.seed, backend: 'js-cpu', measure: false });
    out.steps = [];
    for (let s = 0; s < steps; s++) {
      const r = await w.step(xs.slice(s * bt, (s + 1) * bt), ys.slice(s * bt, (s + 1) * bt));
      out.steps.push({ ...r, loss_bits: bitsOf(r.loss) });
    }
    out.events = w.events;
  } finally {
    w.terminate();
  }
  return out;
}
"""


async def _train(isolated: bool) -> dict[str, Any]:
    async with browser_tab(webgpu=False) as tab:
        real = await tab.page.request.get(tab.base + "/train-check.html")
        headers = {"content-security-policy": real.headers["content-security-policy"]}
        if isolated:
            for name in ("cross-origin-opener-policy", "cross-origin-embedder-policy"):
                headers[name] = real.headers[name]

        async def blank(route: Any) -> None:
            await route.fulfill(
                status=200,
                body="<!doctype html><title>pool</title>",
                content_type="text/html",
                headers=headers,
            )

        await tab.page.route("**" + HARNESS, blank)
        await tab.page.goto(tab.base + HARNESS)
        result: dict[str, Any] = await tab.page.evaluate(_PAGE_TRAIN, [STEPS])
        assert not tab.errors, f"console errors: {tab.errors}"
        assert not tab.foreign, tab.foreign
    assert not [e for e in result["events"] if e["kind"] == "error"], result["events"]
    return result


def _check_golden(steps: list[dict[str, Any]]) -> None:
    hashes, losses = golden_run()
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    assert [s["hash"] for s in steps] == hashes[:STEPS]
    assert [s["loss_bits"] for s in steps] == losses[:STEPS]
    assert {s["probe"] for s in steps} == {reference_step_probe()}


async def test_a_cross_origin_isolated_page_trains_the_golden_run_on_a_pool() -> None:
    result = await _train(isolated=True)
    assert result["isolated"] is True
    cores = result["cores"]
    if cores < 2:
        pytest.skip(f"Chromium reports {cores} logical core here: no pool to start")
    wasm = result["selection"]["wasm"]
    threads = min(cores, 8)
    assert wasm["enabled"] is True and wasm["threads"] == threads, wasm
    assert wasm["name"] == f"wasm-simd x{threads}"
    assert "every product split across the pool" in wasm["reason"], wasm["reason"]
    cpu = next(r for r in result["selection"]["rows"] if r["name"] == "js-cpu")
    assert cpu["adapter"].endswith(f"WebAssembly SIMD, {threads} threads)"), cpu
    _check_golden(result["steps"])


async def test_a_page_that_is_not_isolated_gets_one_thread_and_says_why() -> None:
    result = await _train(isolated=False)
    assert result["isolated"] is False
    wasm = result["selection"]["wasm"]
    assert wasm["enabled"] is True and wasm["threads"] == 1 and wasm["name"] == "wasm-simd", wasm
    assert wasm["reason"].endswith("(one thread: the page is not cross-origin isolated)"), wasm
    _check_golden(result["steps"])
