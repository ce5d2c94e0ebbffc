"""``daisychain bench identity``: every compute path trains the same run to the same bits.

``tiny`` (the shipped tokenizer's vocabulary, seed 1, AdamW lr 3e-3, warm-up 20) on the built-in
corpus's training part for ``--steps`` steps (default 1000) on each path of ``--paths``:

- ``numpy``: the Python reference;
- ``wgpu``: the integer products on the gated wgpu kernel (``daisychain.gpu``; lavapipe on a
  machine without a GPU);
- ``cpu-int8`` / ``cpu-madd``: the integer products on a gated CPU GEMM (``daisychain.cpu``:
  onnxruntime on int8 dot-product units; numba on 16-bit multiply-adds), audited as a peer trains;
- ``node``: the JavaScript CPU mirror under Node (``node_identity.mjs``);
- ``chromium-webgpu``: the page's training worker on WebGPU (DP4A kernel; SwiftShader here);
- ``chromium-webgpu-chain``: the same with the chains turned on (``chains: 'on'``; 'auto' leaves
  them off on an emulated adapter): every step and its probe step in one submit
  (docs/KERNELS.md "On the page");
- ``chromium-cpu``: the training worker's CPU tier, in a Chromium started without WebGPU.

Every path publishes the state hash after every step (docs/NUMERICS.md section 8); the report
gives, per path, the steps it ran, its seconds and the first step whose hash differs from numpy's
(``first_mismatch``: null when every step matched), and ``identical`` overall. A path that cannot
run here (no Node, no Chromium, no gated kernel) is reported with its reason and makes
``identical`` false. A benchmark, not a test: the default 1000 steps on every path take tens of
minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

PATHS = (
    "numpy",
    "wgpu",
    "cpu-int8",
    "cpu-madd",
    "node",
    "chromium-webgpu",
    "chromium-webgpu-chain",
    "chromium-cpu",
)
TOKENS_URL = "/bench-identity/tokens.bin"

# In the page: a TrainWorker on `backend` trains `steps` steps of the run; returns the hashes.
_PAGE_TRAIN = """
async ([run, backend, steps, tokensUrl, chains]) => {
  const { TrainWorker } = await import('/js/train/client.js');
  const M = await import('/js/model/index.js');
  const tokens = new Int32Array(await (await fetch(tokensUrl)).arrayBuffer());
  const cfg = M.modelConfig(run.model);
  const w = new TrainWorker();
  try {
    const sel = await w.init({ model: run.model, optim: run.optim, seed: run.seed, backend,
      chains });
    if (chains === 'on' && !sel.chain.used) throw new Error(`chains not used: ${sel.chain.reason}`);
    const hashes = [];
    for (let s = 0; s < steps; s++) {
      const { x, y } = M.sampleBatch(tokens, cfg.batch, cfg.seqLen, run.seed, s);
      hashes.push((await w.step(x, y)).hash);
    }
    return { backend: sel.backend, adapter: sel.adapter ?? null, hashes };
  } finally {
    w.terminate();
  }
}
"""


def first_mismatch(got: list[str], ref: list[str]) -> int | None:
    """The first 1-based step whose hash differs from ``ref``'s (a missing step counts), or None."""
    for i in range(max(len(got), len(ref))):
        if i >= len(got) or i >= len(ref) or got[i] != ref[i]:
            return i + 1
    return None


def _paths(text: str) -> list[str]:
    paths = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS]
    if not paths or bad:
        raise argparse.ArgumentTypeError(f"--paths: choose from {', '.join(PATHS)} (got {text!r})")
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=1000, help="training steps on every path")
    parser.add_argument(
        "--paths", type=_paths, default=list(PATHS), help="comma-separated compute paths"
    )


def _run_config(vocab: int) -> dict[str, Any]:
    from daisychain.model.config import preset
    from daisychain.optim import AdamWConfig

    cfg = preset("tiny", vocab_size=vocab)
    model = dataclasses.asdict(cfg)
    model["norm_eps_bits"] = int(np.array([cfg.norm_eps], dtype=np.float32).view(np.uint32)[0])
    del model["norm_eps"]
    optim = dataclasses.asdict(AdamWConfig(lr=3e-3, warmup_steps=20))
    return {"model": model, "optim": optim, "seed": 1}


def _python(tokens: np.ndarray, vocab: int, steps: int, ops: Any | None) -> list[str]:
    from daisychain import training
    from daisychain.model.config import preset
    from daisychain.optim import AdamWConfig

    state = training.init(
        preset("tiny", vocab_size=vocab), AdamWConfig(lr=3e-3, warmup_steps=20), 1
    )
    if ops is not None:
        state.ops = ops
    hashes = []
    for _ in range(steps):
        x, y = training.next_batch(state, tokens)
        hashes.append(training.train_step(state, x, y).hash)
    return hashes


def _gated_ops(choice: str) -> Any:
    """The ops of ``--backend choice`` (a gated GPU or CPU GEMM), as a peer would train."""
    from daisychain.peer.backend import BackendUnavailable, choose

    try:
        return choose(choice).compute.ops
    except BackendUnavailable as exc:
        raise RuntimeError(f"{exc.message} ({exc.hint})") from None


def _node(run_file: Path, tokens_file: Path, steps: int) -> list[str]:
    from daisychain.assets import asset_dir

    node = shutil.which("node")
    if node is None:
        raise RuntimeError("node is not installed")
    script = Path(__file__).with_name("node_identity.mjs")
    proc = subprocess.run(
        [node, str(script), str(asset_dir("static")), str(run_file), str(tokens_file), str(steps)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"node exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return [json.loads(line)["hash"] for line in proc.stdout.splitlines()]


async def _chromium(
    run: dict[str, Any], tokens_file: Path, steps: int, webgpu: bool, chains: str = "auto"
) -> list[str]:
    from aiohttp import web
    from playwright.async_api import Route, async_playwright

    from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBGPU_FLAG, chromium_missing
    from daisychain.server.app import create_app, make_runner
    from daisychain.server.config import DataConfig, ServerConfig

    missing = chromium_missing()
    if missing is not None:
        raise RuntimeError(missing)
    body = tokens_file.read_bytes()
    runner = make_runner(create_app(ServerConfig(data=DataConfig(offline=True))))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        flags = [*OFFLINE_FLAGS, *([WEBGPU_FLAG] if webgpu else [])]
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=flags)
            try:
                page = await browser.new_page()

                async def serve_tokens(route: Route) -> None:
                    await route.fulfill(
                        status=200, body=body, content_type="application/octet-stream"
                    )

                await page.route("**" + TOKENS_URL, serve_tokens)
                await page.goto(f"{base}/train-check.html?vectors=/none")
                backend = "webgpu-dp4a" if webgpu else "js-cpu"
                result: dict[str, Any] = await page.evaluate(
                    _PAGE_TRAIN, [run, backend, steps, TOKENS_URL, chains]
                )
                if result["backend"] != backend:
                    raise RuntimeError(f"the worker chose {result['backend']}, not {backend}")
                hashes: list[str] = result["hashes"]
                return hashes
            finally:
                await browser.close()
    finally:
        await runner.cleanup()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from daisychain.corpus import load_builtin_text, split_train_val
    from daisychain.tokenizer import load_default
    from daisychain.tokenizer.cache import encode_corpus_cached

    tok = load_default()
    train_text, _ = split_train_val(load_builtin_text())
    tokens = np.asarray(encode_corpus_cached(train_text, tok), dtype=np.int32)
    run = _run_config(tok.vocab_size)
    out: dict[str, Any] = {
        "benchmark": "identity",
        "preset": "tiny",
        "steps": args.steps,
        "paths": {},
    }
    hashes: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="daisychain-identity-") as tmp:
        run_file, tokens_file = Path(tmp) / "run.json", Path(tmp) / "tokens.bin"
        run_file.write_text(json.dumps(run))
        tokens_file.write_bytes(tokens.astype("<i4").tobytes())
        for path in ["numpy", *[p for p in args.paths if p != "numpy"]]:
            t0 = time.perf_counter()
            try:
                if path == "numpy":
                    got = _python(tokens, tok.vocab_size, args.steps, None)
                elif path in ("wgpu", "cpu-int8", "cpu-madd"):
                    got = _python(tokens, tok.vocab_size, args.steps, _gated_ops(path))
                elif path == "node":
                    got = _node(run_file, tokens_file, args.steps)
                else:
                    webgpu = path.startswith("chromium-webgpu")
                    chains = "on" if path == "chromium-webgpu-chain" else "auto"
                    got = asyncio.run(_chromium(run, tokens_file, args.steps, webgpu, chains))
            except RuntimeError as exc:
                out["paths"][path] = {"ran": False, "reason": str(exc)}
                continue
            hashes[path] = got
            mismatch = first_mismatch(got, hashes["numpy"])
            out["paths"][path] = {
                "ran": True,
                "steps": len(got),
                "seconds": round(time.perf_counter() - t0, 1),
                "first_mismatch": mismatch,
                "final_hash": got[-1] if got else None,
            }
    out["identical"] = all(
        p.get("ran") and p["steps"] == args.steps and p["first_mismatch"] is None
        for p in out["paths"].values()
    ) and set(out["paths"]) == set(args.paths) | {"numpy"}
    return out
