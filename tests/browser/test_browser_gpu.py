"""Browser tier: the /selftest and /train-check pages in headless Chromium against the real server.

With ``--enable-unsafe-webgpu`` Chromium offers its SwiftShader WebGPU adapter: the DP4A and LUT
kernels must pass the same exact gates as the Python peer (same inputs, proven by a digest) and
reproduce the reference probe hash, and the 10-step ``train_run.tiny`` golden run must give the
Python reference's loss bits and state hashes with every int8 product on the GPU. Without the flag
``requestAdapter()`` returns null: the page must fall back to the JS CPU mirror, say why, and give
the same hashes. A kernel served with a planted bug must be caught by a gate and demoted; a
kernel wrong by one unit in one cell (tests/gpu_plant.py) must be caught by the gates at a gate
case, by the probe at the probe's shape, and by the live audit at every product shape of a real
``tiny`` step in the page.

The app is the real ``daisychain.server.app`` on a loopback port; golden vectors are served to the
page by this test (a Playwright route under ``/vectors/``, ahead of the server's own). Chromium
runs with the flags that keep it off the network. Any console error on a page fails its test.
Skipped only when /usr/bin/chromium or the ``playwright`` package is missing. The server, the tab
and the golden run are tests/selftest_helpers.py's.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from daisychain.gpu.audit import sample_cells
from daisychain.gpu.gates import gemm_cases, qmatmul_cases
from daisychain.gpu.probe import PROBE_SHAPE, reference_probe_hash
from gpu_plant import OneCellPlant, planted_probe_hash, quiet_cell
from selftest_helpers import PAGE_TIMEOUT_MS, browser_tab, golden_run


def python_gate_digest() -> str:
    """The digest static/js/gpu/gates.js computes over its case inputs, from the Python gates."""
    h = hashlib.sha256()
    for name, a, b in gemm_cases():
        h.update(name.encode())
        h.update(a.tobytes())
        h.update(b.tobytes())
    for name, a_q, a_e, b_q, b_e in qmatmul_cases():
        h.update(name.encode())
        for arr, dtype in ((a_q, "i1"), (a_e, "<i4"), (b_q, "i1"), (b_e, "<i4")):
            h.update(np.ascontiguousarray(arr).astype(dtype).tobytes())
    return h.hexdigest()


def rows_by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in result["backends"]}


async def test_selftest_webgpu_kernels_pass_python_gates() -> None:
    async with browser_tab(webgpu=True) as tab:
        result = await tab.run("/selftest.html?gops=0")
        await tab.page.wait_for_selector("#backends tbody tr[data-backend='webgpu-dp4a']")
    assert result["gate_cases_digest"] == python_gate_digest()
    assert result["reference_probe_hash"] == reference_probe_hash()
    rows = rows_by_name(result)
    for name in ("webgpu-dp4a", "webgpu-lut", "js-cpu"):
        row = rows[name]
        assert row["gates_passed"], f"{name}: {row['failure']}"
        assert row["cases_passed"] == 52, row
        assert row["probe_hash"] == reference_probe_hash(), row
    assert "swiftshader" in rows["webgpu-dp4a"]["adapter"].lower()
    assert result["device"]["dp4a"] is True
    assert result["selected"] == "webgpu-dp4a"
    assert result["demotions"] == []


async def test_selftest_without_webgpu_falls_back_to_cpu_with_reason() -> None:
    async with browser_tab(webgpu=False) as tab:
        result = await tab.run("/selftest.html?gops=0")
        shown = await tab.page.text_content("#demotions")
    rows = rows_by_name(result)
    assert result["selected"] == "js-cpu"
    assert rows["js-cpu"]["gates_passed"]
    assert rows["js-cpu"]["probe_hash"] == reference_probe_hash()
    for name in ("webgpu-dp4a", "webgpu-lut"):
        assert not rows[name]["gates_passed"]
        assert "requestAdapter() returned null" in rows[name]["failure"]
    assert [d["name"] for d in result["demotions"]] == ["webgpu-dp4a", "webgpu-lut"]
    assert shown is not None and "requestAdapter() returned null" in shown


async def test_planted_kernel_bug_is_caught_and_demoted() -> None:
    """gemm_dp4a.wgsl served with its K loop one short: its gate fails, LUT is selected."""

    async with browser_tab(webgpu=True) as tab:

        async def plant(route: Any) -> None:
            original = await route.fetch()
            source = await original.text()
            assert source.count("k < params.k4") == 1
            await route.fulfill(
                response=original, body=source.replace("k < params.k4", "k + 1u < params.k4")
            )

        await tab.page.route("**/kernels/gemm_dp4a.wgsl", plant)
        result = await tab.run("/selftest.html?gops=0")
        shown = await tab.page.text_content("#demotions")
    rows = rows_by_name(result)
    dp4a = rows["webgpu-dp4a"]
    assert not dp4a["gates_passed"]
    assert dp4a["failure"].startswith("webgpu-dp4a failed gate '1x1x1' shape (1, 1, 1)"), dp4a
    assert result["selected"] == "webgpu-lut"
    assert result["demotions"] == [{"name": "webgpu-dp4a", "reason": dp4a["failure"]}]
    assert shown is not None and "webgpu-dp4a failed gate '1x1x1'" in shown


def check_golden(result: dict[str, Any]) -> None:
    hashes, losses = golden_run()
    assert len(hashes) == 10
    assert result["hashes"] == hashes
    assert [s["loss_bits"] for s in result["steps"]] == losses
    assert {s["probe_hash"] for s in result["steps"]} == {reference_probe_hash()}
    assert result["all_match"] is True


async def test_train_check_tiny_on_webgpu_matches_python_hashes() -> None:
    async with browser_tab(webgpu=True) as tab:
        result = await tab.run("/train-check.html?vectors=/vectors/manifest.json")
    assert result["backend"] == "webgpu-dp4a", result["demotions"]
    assert result["on_gpu"] is True
    # 13 forward and 26 backward products per step, every one on the GPU and audited.
    assert result["gpu_products"] == 10 * 39, result["gpu_products"]
    assert result["audit"]["products"] == result["gpu_products"], result["audit"]
    check_golden(result)


async def test_train_check_tiny_cpu_tier_matches_python_hashes() -> None:
    async with browser_tab(webgpu=False) as tab:
        result = await tab.run("/train-check.html?vectors=/vectors/manifest.json")
        shown = await tab.page.text_content("#demotions")
    assert result["backend"] == "js-cpu"
    assert result["on_gpu"] is False
    assert shown is not None and "requestAdapter() returned null" in shown
    check_golden(result)


# --- one unit in one cell --------------------------------------------------------------------


def serve_planted(kernels: dict[str, str]) -> Any:
    """A Playwright route handler serving ``kernels[name]`` for /kernels/<name>.wgsl."""

    async def handler(route: Any) -> None:
        name = urlsplit(route.request.url).path.rsplit("/", 1)[-1].removesuffix(".wgsl")
        if name not in kernels:
            await route.continue_()
            return
        await route.fulfill(status=200, body=kernels[name], content_type="text/plain")

    return handler


async def test_one_unit_plants_fail_the_gates_and_the_probe() -> None:
    """DP4A one unit off in gate case 'random 3'; LUT one unit off in the probe's product only."""
    shapes = {name: (a.shape[0], a.shape[1], b.shape[1]) for name, a, b in gemm_cases()}
    m, k, n = shapes["random 3"]
    gate = OneCellPlant(m // 2, n // 2, -1, m, k, n)
    first = next(name for name, shape in shapes.items() if gate.fires(*shape))
    probe = OneCellPlant(40, 50, 1, *PROBE_SHAPE)
    planted = planted_probe_hash(probe)
    async with browser_tab(webgpu=True) as tab:
        kernels = {"gemm_dp4a": gate.wgsl("dp4a"), "gemm_lut": probe.wgsl("lut")}
        await tab.page.route("**/kernels/*.wgsl", serve_planted(kernels))
        result = await tab.run("/selftest.html?gops=0")
        shown = await tab.page.text_content("#demotions")
    rows = rows_by_name(result)
    dp4a, lut = rows["webgpu-dp4a"], rows["webgpu-lut"]
    assert not dp4a["gates_passed"]
    found = re.fullmatch(
        rf"webgpu-dp4a failed gate '{re.escape(first)}' shape \({m}, {k}, {n}\): first mismatch "
        rf"at \({gate.row}, {gate.col}\): expected (-?\d+), got (-?\d+)",
        dp4a["failure"],
    )
    assert found is not None, dp4a["failure"]
    assert int(found[2]) - int(found[1]) == -1
    # The LUT kernel passes all 52 gates (no gate has the probe's shape); its own probe does not.
    assert not lut["gates_passed"] and lut["cases_passed"] == 52, lut
    assert lut["probe_hash"] == planted != reference_probe_hash()
    assert lut["failure"] == (
        f"webgpu-lut: kernel probe hash {planted[:16]}... != reference "
        f"{reference_probe_hash()[:16]}..."
    )
    assert result["selected"] == "js-cpu"
    assert result["demotions"] == [
        {"name": "webgpu-dp4a", "reason": dp4a["failure"]},
        {"name": "webgpu-lut", "reason": lut["failure"]},
    ]
    assert shown is not None and "kernel probe hash" in shown and f"'{first}'" in shown


HARNESS = "/plant-harness.html"  # served by the test: a blank page of the app's origin

# Phase 1: one real tiny step with every product on the (honest) DP4A kernel and audited; the
# first product of every distinct shape is kept in the page for phase 2.
_PAGE_RECORD = """
async ([presetName]) => {
  const M = await import('/js/model/index.js');
  const { forwardBackwardAsync } = await import('/js/model/gpt.js');
  const { acquireGpu } = await import('/js/gpu/device.js');
  const { GpuGemm, productOps } = await import('/js/gpu/gemm.js');
  const { Auditor, sampleCells } = await import('/js/gpu/audit.js');
  const gpu = await acquireGpu();
  const gemm = await GpuGemm.create(gpu, 'dp4a');
  const auditor = new Auditor();
  const seen = new Map();
  const ops = productOps(gemm, { audit: (p, acc) => {
    const live = { M: p.M, K: p.K, N: p.N, transA: !!p.transA, transB: !!p.transB,
                   batch: p.batch ?? 1 };
    const key = JSON.stringify(live);
    if (!seen.has(key)) seen.set(key, { ...live, a: p.a.slice(), b: p.b.slice() });
    auditor.check(p, acc);
  } });
  const cfg = M.preset(presetName);
  const state = M.init(cfg, {}, 1);
  const tokens = new Int32Array(50000);
  for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 7919 + 13) % cfg.vocabSize;
  const { x, y } = M.nextBatch(state, tokens);
  await forwardBackwardAsync(state.params, cfg, x, y, { workspace: state.workspace, ops });
  globalThis.livePlants = [...seen.values()];
  return {
    shapes: globalThis.livePlants.map(({ a, b, ...shape }) => shape),
    audited: auditor.products,
    products: gemm.products,
    vocab: cfg.vocabSize,
    schedule: sampleCells(70, 40, [32, 32], 16, 3, 2).cells,
  };
}
"""

# Phase 2: per recorded shape, a DP4A kernel one unit off at a quiet cell of that shape, run on
# the recorded operands: the cells alone must pass its first matrix, the full audit must throw
# on that first matrix.
_PAGE_PLANTED = """
async ([plants]) => {
  const { acquireGpu } = await import('/js/gpu/device.js');
  const { GpuGemm } = await import('/js/gpu/gemm.js');
  const { Auditor } = await import('/js/gpu/audit.js');
  const gpu = await acquireGpu();
  const out = [];
  for (const { index, source, row, col } of plants) {
    const p = globalThis.livePlants[index];
    const gemm = await GpuGemm.create(gpu, 'dp4a', { source });
    const acc = await gemm.matmulInt(p.a, p.b, p.M, p.K, p.N, p);
    let cellsOnly = 'passed';
    // the first matrix of a batch: later ones are later rotations of the schedule
    try {
      new Auditor({ checksum: false }).check({ ...p, batch: 1 }, acc);
    } catch (exc) { cellsOnly = exc.message; }
    let audit = 'passed';
    try { new Auditor().check(p, acc); } catch (exc) { audit = exc.message; }
    out.push({ index, row, col, cellsOnly, audit });
  }
  return out;
}
"""


async def test_live_audit_catches_one_unit_at_every_browser_shape() -> None:
    async with browser_tab(webgpu=True) as tab:

        async def blank(route: Any) -> None:
            await route.fulfill(
                status=200, body="<!doctype html><title>plants</title>", content_type="text/html"
            )

        await tab.page.route("**" + HARNESS, blank)
        await tab.page.goto(tab.base + HARNESS)
        recorded = await tab.page.evaluate(_PAGE_RECORD, ["tiny"])
        plants = []
        for index, shape in enumerate(recorded["shapes"]):
            m, k, n = shape["M"], shape["K"], shape["N"]
            row, col = quiet_cell(m, n)
            plant = OneCellPlant(row, col, 1, m, k, n)
            plants.append({"index": index, "source": plant.wgsl("dp4a"), "row": row, "col": col})
        results = await tab.page.evaluate(_PAGE_PLANTED, [plants])
        assert not tab.errors, tab.errors
    # Every product of the step went through the audit, honest kernel: no false alarm.
    assert recorded["audited"] == recorded["products"] == 39
    # The page's schedule is the Python schedule (same PRNG stream, same permutation).
    assert [tuple(c) for c in recorded["schedule"]] == sample_cells(70, 40, (32, 32), 16, 3, 2)[0]
    kinds = {(s["M"], s["K"], s["N"]) for s in recorded["shapes"]}
    # logits forward, then the logits gradient's stacked [hi; mid; lo] and [hi | mid | lo]
    # (three limbs, contract v2) and another layer's two-limb [hi; lo]
    v = recorded["vocab"]
    assert {(256, 64, v), (768, v, 64), (64, 256, 3 * v), (512, 256, 64)} <= kinds, kinds
    assert len(results) == len(recorded["shapes"]) == 21
    for r, shape in zip(results, recorded["shapes"], strict=True):
        label = f"{shape}"
        assert r["cellsOnly"] == "passed", f"{label}: cell ({r['row']}, {r['col']}) is not quiet"
        found = re.search(
            rf"batch 0\): live audit failed: .* first at \[{r['row']}, {r['col']}\]: "
            rf"expected (-?\d+), got (-?\d+)",
            r["audit"],
        )
        assert found is not None, f"{label}: {r['audit']}"
        assert int(found[2]) - int(found[1]) == 1


async def test_train_check_stops_on_a_one_unit_plant() -> None:
    """The page's own run: DP4A one unit off at (300, 40) of every product with M = 768 (the
    stacked [hi; mid; lo] logits gradient, 768 x 2048 x 64; no gate case or probe has M = 768)."""
    plant = OneCellPlant(300, 40, 1, m=768)
    async with browser_tab(webgpu=True) as tab:
        await tab.page.route("**/kernels/*.wgsl", serve_planted({"gemm_dp4a": plant.wgsl("dp4a")}))
        await tab.page.goto(tab.base + "/train-check.html?vectors=/vectors/manifest.json")
        await tab.page.wait_for_selector(
            "body:not([data-state='running'])", state="attached", timeout=PAGE_TIMEOUT_MS
        )
        state = await tab.page.get_attribute("body", "data-state")
        text = await tab.page.text_content("#result")
        status = await tab.page.text_content("#status")
        steps = await tab.page.locator("#steps tbody tr").count()
    assert state == "error", text
    assert text is not None and status is not None
    error = json.loads(text)["error"]
    assert re.search(
        r"\(768 x 2048 x 64, batch 0\): live audit failed: .* first at \[300, 40\]: "
        r"expected (-?\d+), got (-?\d+)",
        error,
    ), error
    assert "train check failed" in status
    assert steps == 0  # the first step never completed: no weights were updated
    assert any("live audit failed" in e for e in tab.errors)  # the page reports it loudly
