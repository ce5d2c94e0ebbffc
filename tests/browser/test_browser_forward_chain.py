"""The forward chain on the page's WebGPU tier (``static/js/gpu/forward_chain.js``, ``replay.js``,
``chain_gate.js``; docs/KERNELS.md "On the page").

Chromium compiles the WGSL epilogues with its own compiler (Tint) for SwiftShader: the Python
tests prove the same files on lavapipe through naga. Here a real ``tiny`` training step runs with
its whole forward in one submit and one readback, and must give the CPU mirror's loss and every
gradient bit for bit; the page's gate must pass on an honest chain and refuse a planted bug; and a
bug the gate cannot see (it fires only at ``tiny``'s token count) must stop the training step at
the product whose operand the GPU made wrong, not give wrong bits. Skipped only when Chromium or
Playwright is missing (selftest_helpers).
"""

from __future__ import annotations

from typing import Any

from daisychain.gpu.kernels import kernel_source
from selftest_helpers import browser_tab

HARNESS = "/forward-chain-harness.html"  # served by the test: a blank page of the app's origin

_PAGE = """
async ([merge]) => {
  const M = await import('/js/model/index.js');
  const { forwardBackwardAsync, Workspace } = await import('/js/model/gpt.js');
  const { acquireGpu } = await import('/js/gpu/device.js');
  const { GpuGemm, productOps } = await import('/js/gpu/gemm.js');
  const { ForwardChain } = await import('/js/gpu/forward_chain.js');
  const { runForwardChainGate, GATE_CASES } = await import('/js/gpu/chain_gate.js');
  const gpu = await acquireGpu();
  const gemm = await GpuGemm.create(gpu, 'dp4a');
  const chain = await ForwardChain.create(gemm, merge ? { sources: { merge } } : {});
  const gate = await runForwardChainGate(chain);
  const cfg = M.preset('tiny');
  const step = async (ops) => {
    const state = M.init(cfg, {}, 1);
    const tokens = new Int32Array(50000);
    for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 7919 + 13) % cfg.vocabSize;
    const { x, y } = M.nextBatch(state, tokens);
    const products = gemm.products;
    const runs = chain.runs;
    const r = await forwardBackwardAsync(state.params, cfg, x, y,
      { workspace: new Workspace(), ops });
    const bits = [...r.grads.values()].map((g) => [...new Uint32Array(g.buffer, g.byteOffset,
      g.length)]);
    return { loss: r.loss, bits, products: gemm.products - products, runs: chain.runs - runs };
  };
  const cpu = await step(M.CPU_OPS ?? (await import('/js/model/ops.js')).CPU_OPS);
  const plain = await step(productOps(gemm));
  let chained = null;
  let error = null;
  const ops = productOps(gemm, { chain });
  try {
    chained = await step(ops);
  } catch (exc) {
    error = `${exc.name}: ${exc.message}`;
  }
  const same = (a, b) => a !== null && a.loss === b.loss &&
    JSON.stringify(a.bits) === JSON.stringify(b.bits);
  return {
    adapter: gpu.adapterName, cases: GATE_CASES.length, gate,
    plain: { products: plain.products, same: same(plain, cpu) },
    chained: chained && { products: chained.products, runs: chained.runs, same: same(chained, cpu),
      answered: ops.replay.answered, expected: ops.replay.expected.length },
    error, chainAfter: ops.chain === null ? null : ops.chain.name, layers: cfg.layers,
  };
}
"""


async def run_page(merge: str | None) -> dict[str, Any]:
    async with browser_tab(webgpu=True) as tab:

        async def blank(route: Any) -> None:
            await route.fulfill(
                status=200, body="<!doctype html><title>chain</title>", content_type="text/html"
            )

        await tab.page.route("**" + HARNESS, blank)
        await tab.page.goto(tab.base + HARNESS)
        result: dict[str, Any] = await tab.page.evaluate(_PAGE, [merge])
        assert tab.errors == [], tab.errors
        assert tab.foreign == [], tab.foreign
    return result


def merge_module(old: str, new: str) -> str:
    """The merge epilogue's whole module (soft-float library, epilogue.wgsl, the file) with one
    planted change."""
    library = kernel_source("softfloat").partition("// --- the gate's entry point")[0]
    own = kernel_source("merge_epilogue")
    assert own.count(old) == 1, old
    return library + kernel_source("epilogue") + own.replace(old, new)


_SCALE = "    return ep_scaled(acc[s * mg.out_stride + i * mg.hd + d], p_e + v_e);\n"


async def test_a_tiny_step_with_its_forward_in_one_readback_gives_the_mirrors_bits() -> None:
    result = await run_page(None)
    assert "swiftshader" in result["adapter"].lower(), result["adapter"]
    assert result["gate"] == {"passed": result["cases"], "failure": None}
    assert result["error"] is None, result["error"]
    layers = result["layers"]
    forward = 6 * layers + 1  # per block qkv, scores, P v, output, the MLP's two; the logits
    chained, plain = result["chained"], result["plain"]
    assert plain["same"] and chained["same"]
    # every forward product answered from the one chain run; the backward's go one by one
    assert chained["runs"] == 1
    assert chained["answered"] == chained["expected"] == forward
    assert plain["products"] - chained["products"] == forward


async def test_the_pages_gate_refuses_a_planted_merge() -> None:
    result = await run_page(merge_module(_SCALE, _SCALE.replace("p_e + v_e", "p_e + v_e + 1")))
    failure = result["gate"]["failure"]
    assert result["gate"]["passed"] == 0 and failure is not None, result["gate"]
    assert "ChainMismatch" in failure["reason"] and "block 0 output" in failure["reason"], failure


async def test_a_bug_only_at_the_training_shape_stops_the_step_and_drops_the_chain() -> None:
    # tiny's N = 4 x 64 = 256 tokens; no gate case has as many, so the gate passes it
    planted = merge_module(_SCALE, _SCALE.replace("p_e + v_e", "p_e + v_e + i32(mg.m == 256u)"))
    result = await run_page(planted)
    assert result["gate"] == {"passed": result["cases"], "failure": None}
    assert result["chained"] is None
    assert result["error"].startswith("ChainMismatch: forward chain: block 0 output's A operand")
    assert result["chainAfter"] is None  # the chain is not used again
