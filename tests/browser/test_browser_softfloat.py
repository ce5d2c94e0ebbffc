"""Float32 in integers on the browser's WebGPU (``tests/pages/softfloat_gate.js``,
``kernels/softfloat.wgsl``; docs/KERNELS.md "Float32 in integers").

The Python tests prove the library on lavapipe, whose WGSL goes through naga to SPIR-V. Chromium
compiles the same file with its own compiler (Tint) for SwiftShader: a different path to the same
bits, or a bug the other path hides. The page runs the gate's cases (the Python generator's, whose
digest ``tests/gpu/test_gpu_softfloat.py`` pins) through every operation and compares with its
own float32 arithmetic and ``fmath.js``; that reference must itself equal numpy's bit for bit,
and a planted rounding bug must fail the page's gate. Skipped only when Chromium or Playwright is
missing (selftest_helpers).
"""

from __future__ import annotations

import hashlib
from typing import Any

import repo_route
from daisychain.gpu.kernels import kernel_source
from daisychain.gpu.softfloat import OPS, UNARY
from selftest_helpers import browser_tab
from softfloat_gate import reference, softfloat_cases

HARNESS = "/softfloat-harness.html"  # served by the test: a blank page of the app's origin

_PAGE_GATE = """
async ([cases, source]) => {
  const { acquireGpu } = await import('/repo/static/js/gpu/device.js');
  const sfmod = await import('/repo/tests/pages/softfloat_gate.js');
  const gpu = await acquireGpu();
  const sf = await sfmod.GpuSoftFloat.create(gpu, source ? { source } : {});
  const typed = cases.map(({ name, a, b }) => ({
    name, a: Uint32Array.from(a), b: Uint32Array.from(b),
  }));
  const gate = await sfmod.runSoftFloatGate(sf, typed);
  const digests = {};
  for (const { name, a, b } of typed) {
    for (const op of Object.keys(sfmod.SOFTFLOAT_OPS)) {
      const ref = sfmod.softFloatReference(op, a, sfmod.UNARY_OPS.has(op) ? a : b);
      const d = new Uint8Array(await crypto.subtle.digest('SHA-256', ref.buffer));
      digests[`${name} (${op})`] = [...d].map((v) => v.toString(16).padStart(2, '0')).join('');
    }
  }
  return { adapter: gpu.adapterName, gate, digests };
}
"""


async def run_page(source: str | None) -> dict[str, Any]:
    cases = [{"name": n, "a": a.tolist(), "b": b.tolist()} for n, a, b in softfloat_cases()]
    async with browser_tab(webgpu=True) as tab:

        async def blank(route: Any) -> None:
            await route.fulfill(
                status=200, body="<!doctype html><title>softfloat</title>", content_type="text/html"
            )

        await repo_route.install(tab.page.context, tab.base)
        await tab.page.route("**" + HARNESS, blank)
        await tab.page.goto(tab.base + HARNESS)
        result: dict[str, Any] = await tab.page.evaluate(_PAGE_GATE, [cases, source])
        assert tab.errors == [], tab.errors
        assert tab.foreign == [], tab.foreign
    return result


async def test_swiftshader_gives_numpys_bits_and_the_page_reference_is_numpys() -> None:
    result = await run_page(None)
    assert "swiftshader" in result["adapter"].lower(), result["adapter"]
    gate = result["gate"]
    assert gate["failure"] is None, gate["failure"]
    assert gate["passed"] == len(softfloat_cases()) * len(OPS)
    for name, a, b in softfloat_cases():
        for op in OPS:
            want = reference(op, a, a if op in UNARY else b)
            digest = hashlib.sha256(want.astype("<u4").tobytes()).hexdigest()
            assert result["digests"][f"{name} ({op})"] == digest, f"{name} ({op})"


async def test_the_pages_gate_refuses_a_planted_rounding_bug() -> None:
    source = kernel_source("softfloat")
    old = "        sig = sig & ~1u;  // exactly halfway: to even\n"
    assert source.count(old) == 1
    result = await run_page(source.replace(old, ""))
    failure = result["gate"]["failure"]
    assert failure is not None, "the page's gate passed ties rounded away from zero"
    assert failure["index"] is not None  # a wrong value, not an error
