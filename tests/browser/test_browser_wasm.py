"""The WebAssembly SIMD GEMM in headless Chromium, on a page of the real app's origin.

The page fetches /wasm/gemm_i8.wasm from the server, gates it (static/js/numerics/wasmgate.js)
under the app's own Content-Security-Policy (copied from a real page: script-src 'self' with
'wasm-unsafe-eval') and installs it as the CPU tier's integer kernel; the golden run
``train_run.tiny`` then gives every loss bit and state hash of the Python reference with its
products on the kernel. A binary served with a planted bug (tests/wasm_plant.py: one unit in one
cell of the probe's product only) passes every gate case, is refused by the probe with the reason,
and the JS GEMM stays. The same for the elementwise kernel (/wasm/elementwise_f32.wasm,
static/js/numerics/wasmeltgate.js): with it installed beside the GEMM the golden run keeps every
bit, and a binary with a planted bug (ties rounded up) is refused with the failing case. The
server, the tab and the golden run are tests/selftest_helpers.py's.
"""

from __future__ import annotations

from typing import Any

from selftest_helpers import browser_tab, golden_run
from wasm_build import assemble
from wasm_plant import mutant

HARNESS = "/wasm-harness.html"  # served by the test: a blank page of the app's origin

# Enables the kernel (and, with `elementwise`, the elementwise kernel too), then trains the golden
# case with it; returns what the test checks.
_PAGE_GOLDEN = """
async (elementwise) => {
  const N = await import('/js/numerics/index.js');
  const M = await import('/js/model/index.js');
  const { enableWasmGemm } = await import('/js/numerics/wasmgate.js');
  const { enableWasmElementwise } = await import('/js/numerics/wasmeltgate.js');
  const status = await enableWasmGemm();
  const kernel = N.activeIntKernel();
  if (!status.enabled) return { status };
  const eltStatus = elementwise ? await enableWasmElementwise() : null;
  if (elementwise && !eltStatus.enabled) return { status: eltStatus };
  const elt = N.activeQuantKernel();
  const eltBefore = elt ? elt.calls : 0;
  const manifest = await (await fetch('/vectors/manifest.json')).json();
  const c = manifest.cases.find((x) => x.name === 'train_run.tiny');
  const blob = async (f, T) => new T(await (await fetch('/vectors/' + f.blob)).arrayBuffer());
  const x = await blob(c.inputs.x, Int32Array);
  const y = await blob(c.inputs.y, Int32Array);
  const cfg = M.modelConfig(c.params.model);
  const state = M.init(cfg, c.params.optim, c.params.seed);
  const bt = cfg.batch * cfg.seqLen;
  const hashes = [];
  const losses = [];
  const before = kernel.products;
  for (let s = 0; s < c.params.steps; s++) {
    const r = await M.trainStep(state, x.subarray(s * bt, (s + 1) * bt),
      y.subarray(s * bt, (s + 1) * bt));
    hashes.push(r.hash);
    losses.push('0x' + (new Uint32Array(new Float32Array([r.loss]).buffer)[0] >>> 0)
      .toString(16).padStart(8, '0'));
  }
  return { status, eltStatus, hashes, losses, products: kernel.products - before,
    quantizations: elt ? elt.calls - eltBefore : 0 };
}
"""

_PAGE_ENABLE_ELEMENTWISE = """
async () => {
  const N = await import('/js/numerics/index.js');
  const { enableWasmElementwise } = await import('/js/numerics/wasmeltgate.js');
  const status = await enableWasmElementwise();
  return { status, installed: N.activeQuantKernel() !== null };
}
"""

_PAGE_ENABLE = """
async () => {
  const N = await import('/js/numerics/index.js');
  const { enableWasmGemm } = await import('/js/numerics/wasmgate.js');
  const status = await enableWasmGemm();
  return { status, installed: N.activeIntKernel() !== null };
}
"""


async def _open_harness(tab: Any) -> None:
    real = await tab.page.request.get(tab.base + "/train-check.html")
    csp = real.headers["content-security-policy"]
    assert "'wasm-unsafe-eval'" in csp, csp

    async def blank(route: Any) -> None:
        await route.fulfill(
            status=200,
            body="<!doctype html><title>wasm</title>",
            content_type="text/html",
            headers={"content-security-policy": csp},
        )

    await tab.page.route("**" + HARNESS, blank)
    await tab.page.goto(tab.base + HARNESS)


async def test_the_kernel_passes_its_gate_and_trains_the_golden_run_in_chromium() -> None:
    hashes, losses = golden_run()
    async with browser_tab(webgpu=False) as tab:
        await _open_harness(tab)
        result = await tab.page.evaluate(_PAGE_GOLDEN, False)
        assert not tab.errors, tab.errors
        assert not tab.foreign, tab.foreign
    status = result["status"]
    assert status["enabled"] is True, status["reason"]
    assert status["probe_hash"].startswith("fd4bd827")
    assert result["losses"] == losses
    assert result["hashes"] == hashes
    assert result["products"] > 0
    assert result["quantizations"] == 0


async def test_with_the_elementwise_kernel_too_the_golden_run_keeps_every_bit_in_chromium() -> None:
    hashes, losses = golden_run()
    async with browser_tab(webgpu=False) as tab:
        await _open_harness(tab)
        result = await tab.page.evaluate(_PAGE_GOLDEN, True)
        assert not tab.errors, tab.errors
        assert not tab.foreign, tab.foreign
    elt = result["eltStatus"]
    assert elt is not None and elt["enabled"] is True, result["status"]["reason"]
    assert elt["cases"] >= 90, elt
    assert result["losses"] == losses
    assert result["hashes"] == hashes
    assert result["products"] > 0 and result["quantizations"] > 0


async def _enable_planted(name: str, planted: bytes, script: str) -> Any:
    """The harness page with ``static/wasm/NAME`` answered by ``planted``; ``script``'s result."""

    async def serve(route: Any) -> None:
        await route.fulfill(status=200, body=planted, content_type="application/wasm")

    async with browser_tab(webgpu=False) as tab:
        await tab.page.route(f"**/wasm/{name}", serve)
        await _open_harness(tab)
        result = await tab.page.evaluate(script)
        assert not tab.errors, tab.errors
    return result


async def test_a_planted_elementwise_binary_is_refused_in_chromium() -> None:
    planted = assemble(mutant("hi-ties-up", "elementwise"), "elementwise_f32.wat+hi-ties-up")
    result = await _enable_planted("elementwise_f32.wasm", planted, _PAGE_ENABLE_ELEMENTWISE)
    status = result["status"]
    assert status["enabled"] is False and result["installed"] is False
    assert "failed case 'quantize" in status["reason"], status
    assert "the JS quantizers stay" in status["reason"]


async def test_a_planted_binary_is_refused_in_chromium_and_the_js_gemm_stays() -> None:
    planted = assemble(mutant("probe-cell"), "gemm_i8.wat+probe-cell")
    result = await _enable_planted("gemm_i8.wasm", planted, _PAGE_ENABLE)
    status = result["status"]
    assert status["enabled"] is False and result["installed"] is False
    assert status["cases"] >= 52, status
    assert "kernel probe hash" in status["reason"] and "the JS GEMM stays" in status["reason"]
