"""The training worker (static/js/train/) in headless Chromium against the real server.

The page starts ``TrainWorker`` (a dedicated module Worker running ``worker.js``) and trains the
golden ``train_run.tiny`` case through it: every step's loss bits and state hash must be the
Python reference's, on the CPU tier (no WebGPU) and on WebGPU inside the worker (SwiftShader).
While steps run the page counts its own ``setTimeout`` ticks: each worker step must see several,
and a control step computed on the main thread sees at most one (the counter can fail). The
backend choice is checked by its rule, not by which backend wins: among the rows that passed
their gates, the chosen one has the smallest measured step time; a kernel that fails its gates
(or only its probe) is never measured and never chosen, even when a timer says it is fastest.
A device destroyed mid-step is rebuilt and gated again, or, when the rebuilt kernel fails its
gates, replaced by the CPU tier with a ``fallback`` event; the hashes stay the golden ones either
way. The loss comes from the test-only worker ``tests/pages/fault_worker.js`` (the product's
request loop around a Trainer with an ``inject-fault`` request; the product's worker refuses that
request), loaded through the test route of tests/repo_route.py; the tests without a fault run the
product's own worker. Any console error fails a test.

The app, Chromium flags, vector routing and console collection are tests/selftest_helpers.py's.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import repo_route
from daisychain.gpu.gates import gemm_cases
from daisychain.gpu.kernels import kernel_source
from daisychain.gpu.probe import PROBE_SHAPE, reference_probe_hash, reference_step_probe
from gpu_plant import OneCellPlant, planted_probe_hash
from selftest_helpers import browser_tab, golden_run

HARNESS = "/worker-harness.html"  # a blank page of the app's origin, served by the test
FAULT_WORKER = "/repo/tests/pages/fault_worker.js"  # through repo_route, never the server
STEPS = 10

# Trains `steps` golden steps through a TrainWorker; `faults[s]` ({after, sources}) is armed
# before step s (0-based). Counts the page's setTimeout ticks during every step, then during one
# control step computed on the main thread.
_PAGE_TRAIN = """
async ([opts]) => {
  const { TrainWorker, WorkerError } = await import('/js/train/client.js');
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
  let ticks = 0;
  let ticking = true;
  const tick = () => { ticks += 1; if (ticking) setTimeout(tick, 0); };
  tick();
  const w = new TrainWorker(opts.worker === null ? {} : { url: opts.worker });
  const out = { errors: [] };
  // Headless Chromium keeps every page visible (minimizing its window through CDP does not
  // change visibilityState), so the state is set on the document and the event dispatched.
  const setVisibility = (state) => {
    Object.defineProperty(document, 'visibilityState', { value: state, configurable: true });
    document.dispatchEvent(new Event('visibilitychange'));
  };
  try {
    // An impossible model: refused with the config's message, and the worker accepts a new init.
    try { await w.init({ model: { ...c.params.model, heads: 3 }, seed: 1 }); }
    catch (exc) { out.badInit = { name: exc.remoteName, message: exc.message, hint: exc.hint }; }
    out.selection = await w.init({ model: c.params.model, optim: c.params.optim,
      seed: c.params.seed, backend: opts.backend, measure: opts.measure,
      ...(opts.chains ? { chains: opts.chains } : {}) });
    // A malformed request through the real worker: refused with a hint, nothing changes.
    try { await w.request('step', { x: [1, 2], y: [1, 2] }); out.refusal = null; }
    catch (exc) { out.refusal = { name: exc.remoteName, message: exc.message, hint: exc.hint,
      isWorkerError: exc instanceof WorkerError }; }
    out.steps = [];
    for (let s = 0; s < opts.steps; s++) {
      const fault = opts.faults[String(s)];
      if (fault) {
        const fields = { afterProducts: fault.after,
          ...(fault.sources ? { rebuildSources: fault.sources } : {}) };
        try { out.steps.push({ armed: await w.request('inject-fault', fields) }); }
        catch (exc) { out.faultRefused = { message: exc.message, hint: exc.hint }; }
      }
      const before = ticks;
      const pending = w.step(xs.slice(s * bt, (s + 1) * bt), ys.slice(s * bt, (s + 1) * bt));
      if (s === opts.hideAt) setVisibility('hidden'); // the tab goes hidden mid-step
      const r = await pending;
      if (s === opts.hideAt) setVisibility('visible');
      out.steps.push({ ...r, loss_bits: bitsOf(r.loss), ticks: ticks - before });
    }
    // Control: one step on the main thread (the CPU mirror is synchronous): the page's
    // counter cannot advance while it runs.
    const state = M.init(cfg, c.params.optim, c.params.seed);
    const before = ticks;
    M.computeGrads(state, xs.slice(0, bt), ys.slice(0, bt));
    await new Promise((resolve) => setTimeout(resolve, 0));
    out.controlTicks = ticks - before;
    out.events = w.events;
  } finally {
    ticking = false;
    w.terminate();
  }
  return out;
}
"""

# The rule inside the page with a timer that says the planted kernel is the fastest: it must
# never be asked (it failed its gates) and never chosen.
_PAGE_SELECT = """
async ([sources]) => {
  const { selectBackend } = await import('/js/gpu/backend.js');
  const timed = [];
  const fake = { 'webgpu-dp4a': 1, 'webgpu-lut': 500, 'js-cpu': 1000 };
  const sel = await selectBackend({ sources, timeStep: async (c) => {
    timed.push(c.name);
    return { ms: fake[c.name], complete: true };
  } });
  return { selected: sel.selected, choice: sel.choice, rows: sel.rows, timed };
}
"""


async def _blank(route: Any) -> None:
    await route.fulfill(
        status=200, body="<!doctype html><title>worker</title>", content_type="text/html"
    )


async def train(
    *,
    webgpu: bool,
    backend: str,
    measure: bool = True,
    faults: dict[str, Any] | None = None,
    chains: str | None = None,
) -> dict[str, Any]:
    """``STEPS`` golden steps in a TrainWorker; with ``faults``, in the test worker that can
    lose its device (the product's worker has no such request)."""
    async with browser_tab(webgpu=webgpu) as tab:
        await tab.page.route("**" + HARNESS, _blank)
        if faults:
            await repo_route.install(tab.page.context, tab.base)
        await tab.page.goto(tab.base + HARNESS)
        opts = {
            "backend": backend,
            "measure": measure,
            "steps": STEPS,
            "faults": faults or {},
            "hideAt": 3,
            "chains": chains,
            "worker": FAULT_WORKER if faults else None,
        }
        result: dict[str, Any] = await tab.page.evaluate(_PAGE_TRAIN, [opts])
        assert not tab.errors, f"console errors: {tab.errors}"
        assert not tab.foreign, tab.foreign
    assert not [e for e in result["events"] if e["kind"] == "error"], result["events"]
    return result


def check_golden(steps: list[dict[str, Any]]) -> None:
    hashes, losses = golden_run()
    done = [s for s in steps if "hash" in s]
    assert [s["step"] for s in done] == list(range(1, STEPS + 1))
    assert [s["hash"] for s in done] == hashes
    assert [s["loss_bits"] for s in done] == losses
    assert {s["probe"] for s in done} == {reference_step_probe()}


def check_responsive(result: dict[str, Any]) -> None:
    ticks = [s["ticks"] for s in result["steps"] if "hash" in s]
    # Off the main thread the page's timer keeps firing during every step; on it, it cannot.
    assert min(ticks) >= 2, ticks
    assert result["controlTicks"] <= 1, result["controlTicks"]


def check_rule(selection: dict[str, Any]) -> None:
    """The chosen backend passed its gates and has the smallest measured step time."""
    rows = selection["rows"]
    usable = [r for r in rows if r["gates_passed"]]
    assert usable and all(isinstance(r["step_ms"], float | int) for r in usable), rows
    complete = [r for r in usable if r["step_complete"]]
    fastest = min(complete, key=lambda r: r["step_ms"])
    assert selection["backend"] == fastest["name"], selection["choice"]
    # A stopped measurement ran longer than the winner before it was stopped.
    assert all(r["step_ms"] >= fastest["step_ms"] for r in usable), rows
    assert all(r["step_ms"] is None for r in rows if not r["gates_passed"]), rows
    choice = selection["choice"]
    assert choice["rule"] == "measured" and choice["selected"] == fastest["name"]
    assert choice["reason"].startswith(f"{fastest['name']}: "), choice["reason"]
    assert {m["name"] for m in choice["measurements"]} == {r["name"] for r in usable}


async def test_worker_cpu_tier_golden_hashes_with_a_responsive_page() -> None:
    result = await train(webgpu=False, backend="auto", faults={"0": {"after": 1}})
    selection = result["selection"]
    assert selection["backend"] == "js-cpu" and selection["onGpu"] is False
    rows = {r["name"]: r for r in selection["rows"]}
    for name in ("webgpu-dp4a", "webgpu-lut"):
        assert "requestAdapter() returned null" in rows[name]["failure"], rows[name]
    check_rule(selection)
    check_golden(result["steps"])
    assert {s["backend"] for s in result["steps"] if "hash" in s} == {"js-cpu"}
    check_responsive(result)
    refusal = result["refusal"]
    assert refusal["isWorkerError"] and refusal["name"] == "MessageError", refusal
    assert "step: x must be a non-empty Int32Array" in refusal["message"] and refusal["hint"]
    # The device-loss hook is refused on the CPU tier, with a hint.
    assert "no GPU device to lose" in result["faultRefused"]["message"], result
    # The tab went hidden during step 4: the page heard it while the step was running, and the
    # worker finished that step (its hash is checked above) and every later one.
    seen = [(e["hidden"], e["busy"]) for e in result["events"] if e["kind"] == "visibility"]
    assert seen == [(True, True), (False, False)], seen
    states = [f"{e['from']}->{e['to']}" for e in result["events"] if e["kind"] == "state"]
    assert states == ["new->selecting", "selecting->new", "new->selecting", "selecting->ready"]
    bad = result["badInit"]
    assert bad["name"] == "ConfigError" and "not divisible by heads 3" in bad["message"], bad
    assert "send init again" in bad["hint"], bad


async def test_worker_webgpu_golden_hashes_through_device_loss_rebuild_and_fallback() -> None:
    """DP4A in the worker; the device destroyed mid-step 3 (rebuilt, gated, same kernel) and
    mid-step 6 with a rebuilt kernel that fails gate '1x1x1' (CPU tier from then on)."""
    broken = kernel_source("gemm_dp4a")
    assert broken.count("k < params.k4") == 1
    broken = broken.replace("k < params.k4", "k + 1u < params.k4")
    faults = {"2": {"after": 7}, "5": {"after": 20, "sources": {"dp4a": broken}}}
    result = await train(webgpu=True, backend="webgpu-dp4a", faults=faults)
    selection = result["selection"]
    assert selection["backend"] == "webgpu-dp4a" and selection["onGpu"] is True
    assert "swiftshader" in selection["adapter"].lower()
    assert selection["choice"]["rule"] == "preference"  # forced: gated, not measured
    check_golden(result["steps"])
    check_responsive(result)
    done = [s for s in result["steps"] if "hash" in s]
    assert [s["backend"] for s in done] == ["webgpu-dp4a"] * 5 + ["js-cpu"] * 5
    assert all(s["products"] >= 39 for s in done[:5]), [s["products"] for s in done]
    assert done[2]["products"] == 7 + 39  # 7 before the loss, then the whole step again
    ignore = ("progress", "state", "visibility")
    kinds = [e["kind"] for e in result["events"] if e["kind"] not in ignore]
    assert kinds == ["selection", "device-lost", "device-rebuilt", "device-lost", "fallback"]
    lost1, rebuilt, lost2, fallback = (e for e in result["events"] if e["kind"] in kinds[1:])
    assert lost1["step"] == 3 and lost2["step"] == 6
    assert "destroyed" in lost1["reason"], lost1
    assert rebuilt["cases_passed"] == 52 and rebuilt["probe_hash"] == reference_probe_hash()
    assert fallback["from"] == "webgpu-dp4a" and fallback["to"] == "js-cpu"
    reason = fallback["reason"]
    assert "the rebuilt device failed its gates: webgpu-dp4a failed gate '1x1x1'" in reason


async def test_worker_webgpu_step_chain_golden_hashes_through_device_loss() -> None:
    """DP4A in the worker with the chains turned on (SwiftShader is emulated, where 'auto'
    leaves them off): every step in one submit, the golden hashes and step probes, and the
    device destroyed mid-step 3 (rebuilt, gated, the chains gated again and used on)."""
    result = await train(
        webgpu=True, backend="webgpu-dp4a", chains="on", faults={"2": {"after": 20}}
    )
    chain = result["selection"]["chain"]
    assert chain["used"] is True and chain["name"] == "step", chain
    assert "gate cases passed" in chain["reason"], chain
    check_golden(result["steps"])
    done = [s for s in result["steps"] if "hash" in s]
    assert {s["backend"] for s in done} == {"webgpu-dp4a"}
    kinds = [e["kind"] for e in result["events"] if e["kind"] in ("device-lost", "device-rebuilt")]
    assert kinds == ["device-lost", "device-rebuilt"], kinds
    shown = [e["message"] for e in result["events"] if e["kind"] == "progress"]
    assert shown.count("gating the step chain") == 2  # at start and after the rebuild


async def test_worker_auto_leaves_the_chains_off_on_an_emulated_adapter() -> None:
    result = await train(webgpu=True, backend="webgpu-dp4a", measure=False)
    chain = result["selection"]["chain"]
    assert chain["used"] is False and "is emulated" in chain["reason"], chain
    check_golden(result["steps"])


async def test_worker_measure_keeps_the_chains_only_where_a_step_is_faster() -> None:
    """'measure' (what 'auto' does on a real GPU) times a step with and without the chains and
    keeps the faster: on SwiftShader, without (BENCHMARKS.md, "The page's chains"); the bits
    are the golden ones either way."""
    result = await train(webgpu=True, backend="webgpu-dp4a", measure=False, chains="measure")
    chain = result["selection"]["chain"]
    assert chain["used"] is False and chain["reason"].startswith("measured slower: "), chain
    assert re.search(r"[\d.]+ ms per step with them, [\d.]+ ms without", chain["reason"]), chain
    shown = [e["message"] for e in result["events"] if e["kind"] == "progress"]
    assert "timing a step with and without the chains" in shown
    check_golden(result["steps"])


async def test_worker_choice_is_the_fastest_correct_backend() -> None:
    """auto on SwiftShader: every backend gated, the usable ones timed on a tiny step, the
    fastest chosen, the numbers and the reason recorded."""
    async with browser_tab(webgpu=True) as tab:
        await tab.page.route("**" + HARNESS, _blank)
        await tab.page.goto(tab.base + HARNESS)
        init = """
        async () => {
          const { TrainWorker } = await import('/js/train/client.js');
          const w = new TrainWorker();
          try { return await w.init({ model: { preset: 'tiny' }, seed: 5 }); }
          finally { w.terminate(); }
        }
        """
        selection = await tab.page.evaluate(init)
        # Planted: DP4A fails a gate, LUT passes every gate but not the probe. A timer that
        # calls DP4A the fastest is never asked about it; the fastest correct one is chosen.
        m, k, n = next((a.shape[0], a.shape[1], b.shape[1]) for c, a, b in gemm_cases()
                       if c == "random 3")  # fmt: skip
        gate = OneCellPlant(m // 2, n // 2, -1, m, k, n).wgsl("dp4a")
        probe_plant = OneCellPlant(40, 50, 1, *PROBE_SHAPE)
        planted = await tab.page.evaluate(_PAGE_SELECT, [{"dp4a": gate}])
        both = await tab.page.evaluate(
            _PAGE_SELECT, [{"dp4a": gate, "lut": probe_plant.wgsl("lut")}]
        )
        assert not tab.errors, tab.errors
        # /selftest shows the same rule on a tiny step, with the numbers and the reason.
        page = await tab.run("/selftest.html")
        shown = await tab.page.text_content("#choice")
    check_rule({"rows": page["backends"], "backend": page["selected"], "choice": page["choice"]})
    assert shown == f"Why: {page['choice']['reason']}.", shown
    rows = {r["name"]: r for r in selection["rows"]}
    assert all(rows[name]["gates_passed"] for name in ("webgpu-dp4a", "webgpu-lut", "js-cpu")), rows
    check_rule(selection)
    for row in selection["rows"]:
        shown = f"{_js_fixed_ms(row['step_ms'])} ms"
        assert shown in selection["choice"]["reason"], (row, selection["choice"])

    assert planted["timed"] == ["webgpu-lut", "js-cpu"] * 3, planted["timed"]
    assert planted["selected"] == "webgpu-lut", planted["choice"]
    dp4a = next(r for r in planted["rows"] if r["name"] == "webgpu-dp4a")
    assert not dp4a["gates_passed"] and dp4a["step_ms"] is None, dp4a
    assert "failed their gates: webgpu-dp4a" in planted["choice"]["reason"]

    assert both["timed"] == ["js-cpu"] * 3 and both["selected"] == "js-cpu", both
    lut = next(r for r in both["rows"] if r["name"] == "webgpu-lut")
    assert lut["cases_passed"] == 52 and lut["probe_hash"] == planted_probe_hash(probe_plant)


def _js_fixed_ms(ms: float) -> str:
    """The page's ``ms.toFixed(ms < 100 ? 1 : 0)``: JS rounds the exact binary value half up
    (1048.5 -> "1049"), where Python's format rounds half to even ("1048")."""
    step = Decimal("0.1") if ms < 100 else Decimal("1")
    return str(Decimal(ms).quantize(step, rounding=ROUND_HALF_UP))
