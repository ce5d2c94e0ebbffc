"""The chains on the page's WebGPU tier (``static/js/gpu/forward_chain.js``, ``step_chain.js``,
``replay.js``, ``chain_gate.js``; docs/KERNELS.md "On the page").

Chromium compiles the WGSL epilogues with its own compiler (Tint) for SwiftShader: the Python
tests prove the same files on lavapipe through naga. Here a real ``tiny`` training step runs in
one submit and one readback (its forward, cross-entropy, backward and the kernel probe's product)
and must give the CPU mirror's loss and every gradient bit for bit, with no product of its own;
the page's gates must pass honest chains and refuse planted bugs; and a bug the gates cannot see
(it fires only at ``tiny``'s token count) must stop the training step where the host's operand
differs from the GPU's, not give wrong bits. Skipped only when Chromium or Playwright is missing
(selftest_helpers).
"""

from __future__ import annotations

from typing import Any

from daisychain.gpu.kernels import kernel_source
from daisychain.gpu.probe import reference_step_probe
from selftest_helpers import browser_tab

HARNESS = "/step-chain-harness.html"  # served by the test: a blank page of the app's origin

_PAGE = """
async ([forwardSources, stepSources]) => {
  const M = await import('/js/model/index.js');
  const { forwardBackwardAsync, Workspace } = await import('/js/model/gpt.js');
  const { acquireGpu } = await import('/js/gpu/device.js');
  const { GpuGemm, productOps } = await import('/js/gpu/gemm.js');
  const { ForwardChain } = await import('/js/gpu/forward_chain.js');
  const { StepChain } = await import('/js/gpu/step_chain.js');
  const { stepProbeHash } = await import('/js/gpu/probe.js');
  const { CPU_OPS } = await import('/js/model/ops.js');
  const gates = await import('/js/gpu/chain_gate.js');
  const gpu = await acquireGpu();
  const gemm = await GpuGemm.create(gpu, 'dp4a');
  const chain = await ForwardChain.create(gemm, { sources: forwardSources });
  const step = await StepChain.create(chain, { sources: stepSources });
  const forwardGate = await gates.runForwardChainGate(chain);
  const stepGate = await gates.runStepChainGate(step);
  const cfg = M.preset('tiny');
  const count = (r) => r && { answered: r.answered, expected: r.expected.length,
    dropped: r.dropped };
  const train = async (ops) => {
    const state = M.init(cfg, {}, 1);
    const tokens = new Int32Array(50000);
    for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 7919 + 13) % cfg.vocabSize;
    const { x, y } = M.nextBatch(state, tokens);
    const products = gemm.products;
    const runs = [chain.runs, step.runs];
    const r = await forwardBackwardAsync(state.params, cfg, x, y,
      { workspace: new Workspace(), ops });
    const readbacks = gemm.products - products + chain.runs - runs[0] + step.runs - runs[1];
    const replays = [count(ops.replay), count(ops.backReplay)];
    // the step probe: with the chains, its product and its probe step come from the step's own
    // submit (no readback of its own); without them, the GEMM and the CPU mirror compute it
    let probe;
    try {
      probe = await stepProbeHash(gemm, { ops: ops.stepChain ? ops : CPU_OPS });
    } catch (exc) {
      probe = `${exc.name}: ${exc.message}`;
    }
    const probeReadbacks = gemm.products - products + chain.runs - runs[0] + step.runs -
      runs[1] - readbacks;
    const bits = [...r.grads.values()].map((g) => [...new Uint32Array(g.buffer, g.byteOffset,
      g.length)]);
    // products: the step's own and the probe's
    return { loss: r.loss, bits, products: gemm.products - products, stepRuns: step.runs - runs[1],
      readbacks, probe, probeReadbacks, replays,
      probeReplays: [count(ops.replay), count(ops.backReplay)] };
  };
  const cpu = await train(CPU_OPS);
  const plain = await train(productOps(gemm));
  let chained = null;
  let error = null;
  const ops = productOps(gemm, { chain, stepChain: step });
  try {
    chained = await train(ops);
  } catch (exc) {
    error = `${exc.name}: ${exc.message}`;
  }
  const same = (a, b) => a !== null && a.loss === b.loss &&
    JSON.stringify(a.bits) === JSON.stringify(b.bits);
  return {
    adapter: gpu.adapterName, cases: gates.GATE_CASES.length, forwardGate, stepGate,
    plain: { products: plain.products, readbacks: plain.readbacks, same: same(plain, cpu),
      probe: plain.probe, probeReadbacks: plain.probeReadbacks },
    chained: chained && { products: chained.products, readbacks: chained.readbacks,
      stepRuns: chained.stepRuns, same: same(chained, cpu), probe: chained.probe,
      probeReadbacks: chained.probeReadbacks },
    forward: chained?.replays[0], backward: chained?.replays[1], error,
    probeReplays: chained?.probeReplays,
    chainAfter: ops.stepChain === null ? null : ops.stepChain.name, layers: cfg.layers,
  };
}
"""


async def evaluate(script: str, args: Any = None) -> dict[str, Any]:
    """``script`` in a fresh WebGPU tab on a blank page of the app's origin; no console error,
    no request leaving loopback."""
    async with browser_tab(webgpu=True) as tab:

        async def blank(route: Any) -> None:
            await route.fulfill(
                status=200, body="<!doctype html><title>chain</title>", content_type="text/html"
            )

        await tab.page.route("**" + HARNESS, blank)
        await tab.page.goto(tab.base + HARNESS)
        result: dict[str, Any] = await tab.page.evaluate(script, args)
        assert tab.errors == [], tab.errors
        assert tab.foreign == [], tab.foreign
    return result


async def run_page(
    forward: dict[str, str] | None = None, step: dict[str, str] | None = None
) -> dict[str, Any]:
    return await evaluate(_PAGE, [forward or {}, step or {}])


def planted(kernel: str, old: str, new: str) -> str:
    """An epilogue's whole module (soft-float library, epilogue.wgsl, the file) with one planted
    change."""
    library = kernel_source("softfloat").partition("// --- the gate's entry point")[0]
    own = kernel_source(kernel)
    assert own.count(old) == 1, old
    return library + kernel_source("epilogue") + own.replace(old, new)


_SCALE = "    return ep_scaled(acc[s * mg.out_stride + i * mg.hd + d], p_e + v_e);\n"
_RESIDUAL = "            v = sf_add(dh[row + c], dx);\n"
_ROW_SUM = "        let v = sf_mul(p[row + j], sf_sub(dp[row + j], total));\n"


async def test_a_tiny_step_in_one_readback_gives_the_mirrors_bits_and_probe() -> None:
    result = await run_page()
    assert "swiftshader" in result["adapter"].lower(), result["adapter"]
    cases = result["cases"]
    assert result["forwardGate"] == {"passed": cases, "failure": None}
    assert result["stepGate"] == {"passed": cases, "failure": None}
    assert result["error"] is None, result["error"]
    forward = 6 * result["layers"] + 1  # per block qkv, scores, P v, output, the MLP's two; logits
    chained, plain = result["chained"], result["plain"]
    assert plain["same"] and chained["same"]
    # every product of the step answered from the one run: the forward's, and two per pair
    assert result["forward"] == {"answered": forward, "expected": forward, "dropped": None}
    assert result["backward"] == {"answered": 2 * forward, "expected": 2 * forward,
                                  "dropped": None}  # fmt: skip
    assert chained["stepRuns"] == 1 and chained["readbacks"] == 1
    assert plain["readbacks"] == 3 * forward
    # the published step probe: the reference's, its product and its probe step (every
    # epilogue on the probe model's inputs) from the step's own submit, where the plain step's
    # probe makes a product of its own
    assert chained["probe"] == plain["probe"] == reference_step_probe()
    assert chained["products"] == 0 and chained["probeReadbacks"] == 0
    assert plain["products"] == 3 * forward + 1 and plain["probeReadbacks"] == 1
    probe_forward = 6 * 2 + 1  # the probe model's two blocks: every product replayed
    assert result["probeReplays"] == [
        {"answered": probe_forward, "expected": probe_forward, "dropped": None},
        {"answered": 2 * probe_forward, "expected": 2 * probe_forward, "dropped": None},
    ]


async def test_the_pages_gates_refuse_a_planted_merge_and_a_planted_softmax_backward() -> None:
    merge = planted("merge_epilogue", _SCALE, _SCALE.replace("p_e + v_e", "p_e + v_e + 1"))
    softmax = planted(
        "grad_softmax_epilogue",
        _ROW_SUM,
        _ROW_SUM.replace("sf_sub(dp[row + j], total)", "dp[row + j]"),
    )
    result = await run_page({"merge": merge}, {"grad_softmax": softmax})
    failure = result["forwardGate"]["failure"]
    assert result["forwardGate"]["passed"] == 0 and failure is not None, result["forwardGate"]
    assert "ChainMismatch" in failure["reason"] and "block 0 output" in failure["reason"], failure
    # the step gate meets the merge first
    assert result["stepGate"]["passed"] == 0 and result["stepGate"]["failure"] is not None
    result = await run_page({}, {"grad_softmax": softmax})
    assert result["forwardGate"]["failure"] is None
    failure = result["stepGate"]["failure"]
    assert result["stepGate"]["passed"] == 0 and failure is not None, result["stepGate"]
    # dS feeds the (q, k) pair: its limbs are the first the host finds different
    assert "ChainMismatch" in failure["reason"] and "block 1 qk" in failure["reason"], failure


async def test_a_bug_only_at_the_training_shape_stops_the_step_and_drops_the_chains() -> None:
    # tiny's N = 4 x 64 = 256 tokens; no gate case has as many, so the gates pass it
    norm = planted(
        "grad_norm_epilogue", _RESIDUAL,
        _RESIDUAL.replace("sf_add(dh[row + c], dx)", "select(sf_add(dh[row + c], dx), dx, "
                          "gn.m == 256u)"),
    )  # fmt: skip
    result = await run_page({}, {"grad_norm": norm})
    cases = result["cases"]
    assert result["stepGate"] == {"passed": cases, "failure": None}
    assert result["chained"] is None
    # block 1's MLP norm is the first to add the residual; the wo pair reads its output
    assert result["error"].startswith("ChainMismatch: step chain: block 1 wo's gradient limb 0")
    assert result["chainAfter"] is None  # the chains are not used again


async def test_a_bug_only_at_the_probe_models_shape_stops_the_probe_not_the_step() -> None:
    # the probe model's N = 2 x 6 = 12 tokens: neither the gates' nor tiny's
    merge = planted("merge_epilogue", _SCALE, _SCALE.replace("p_e + v_e", "p_e + v_e + "
                                                              "i32(mg.m == 12u)"))  # fmt: skip
    result = await run_page({"merge": merge}, {})
    cases = result["cases"]
    assert result["forwardGate"] == result["stepGate"] == {"passed": cases, "failure": None}
    chained = result["chained"]
    assert chained is not None and chained["same"], result["error"]
    # the training step's bits are right; the probe step, recorded in its submit, is refused
    assert chained["probe"].startswith("ChainMismatch: forward chain: block 0 output"), chained
    assert result["chainAfter"] is None


_PAGE_SMALL = """
async () => {
  const M = await import('/js/model/index.js');
  const { forwardBackwardAsync, Workspace } = await import('/js/model/gpt.js');
  const { acquireGpu } = await import('/js/gpu/device.js');
  const { GpuGemm, productOps } = await import('/js/gpu/gemm.js');
  const { ForwardChain } = await import('/js/gpu/forward_chain.js');
  const { StepChain } = await import('/js/gpu/step_chain.js');
  const { CPU_OPS } = await import('/js/model/ops.js');
  const gpu = await acquireGpu();
  const gemm = await GpuGemm.create(gpu, 'dp4a');
  const chain = await ForwardChain.create(gemm);
  const step = await StepChain.create(chain);
  const cfg = M.preset('small');
  const state = M.init(cfg, {}, 1);
  const tokens = new Int32Array(50000);
  for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 7919 + 13) % cfg.vocabSize;
  const { x, y } = M.nextBatch(state, tokens);
  const grads = async (ops) => {
    const r = await forwardBackwardAsync(state.params, cfg, x, y,
      { workspace: new Workspace(), ops });
    return { loss: r.loss, bits: [...r.grads.values()].map((g) =>
      [...new Uint32Array(g.buffer, g.byteOffset, g.length)].join(',')) };
  };
  const want = await grads(CPU_OPS);
  const ops = productOps(gemm, { chain, stepChain: step });
  const got = await grads(ops);
  return { same: got.loss === want.loss && got.bits.every((b, i) => b === want.bits[i]),
    products: gemm.products, runs: step.runs, answered: [ops.replay.answered,
      ops.backReplay.answered], limit: gpu.limits.maxBufferSize, faults: gpu.faults };
}
"""


async def test_a_small_step_in_one_readback_past_webgpus_default_buffer_limit() -> None:
    """``small``'s step reads back ~271 MB in one buffer, past WebGPU's default 256 MiB: the
    device asks for the adapter's own limit (device.js), and the step is one readback with the
    CPU mirror's bits (a device with less would compute it without the chain:
    tests/js/chain_fallback.test.mjs)."""
    result = await evaluate(_PAGE_SMALL)
    assert result["faults"] == [] and result["limit"] > 2**28, result
    assert result["same"] and result["runs"] == 1 and result["products"] == 0, result
    assert result["answered"] == [6 * 4 + 1, 2 * (6 * 4 + 1)]  # small's four blocks
