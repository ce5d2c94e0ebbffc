"""``daisychain bench mesh --tabs webgpu,cpu``: the mesh with Chromium tabs in it.

One run, two groups on the same local server, played one after the other:

1. **mixed**: a Python leader (+ ``--py-followers`` Python followers, in this process over
   aiortc) and one Chromium tab per ``--tabs`` entry on the real page ``/`` (static/js/app.js):
   ``webgpu`` is a Chromium with ``--enable-unsafe-webgpu`` forced onto ``webgpu-dp4a`` (the
   WGSL products run; SwiftShader without a GPU), ``cpu`` a Chromium without WebGPU (the JS CPU
   tier);
2. **python_only**: the same number of peers, all Python, same config.

Per peer (medians over steps after the first, which includes warm-up): bytes sent and received
per step, step time (between consecutive applied steps), compute time, exchange time (from the
peer's gradient being ready to applying the step: it includes waiting for the slowest peer) and
the exchange's share of compute + exchange. Ratios compare the mixed group with the Python-only
one.

Chromium offers no loopback ICE candidate, so this part needs a network namespace with a veth
address (as the browser tests, tests/conftest.py): as root the bench re-runs itself under
``unshare -n`` and sets the namespace up there; without root it reports why it skipped. The
page and the peers reach only the local server and each other inside that namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daisychain.bench.rig import netns
from daisychain.bench.rig.chromium import CHROMIUM, OFFLINE_FLAGS, WEBGPU_FLAG, WEBRTC_FLAGS

# The tab kinds: (Chromium with WebGPU?, the page's ?backend=).
TAB_KINDS = {"webgpu": (True, "webgpu-dp4a"), "cpu": (False, "js-cpu")}
_INNER = "DAISYCHAIN_BENCH_NETNS"  # set for the re-run inside the namespace

# The page's peer records and outcome, as JSON.
_STATE = """
async () => {
  const { app } = await import('/js/app.js');
  const p = app.peer;
  return { id: p?.id ?? '', records: p?.records ?? [], outcome: p?.outcome ?? null,
           backend: app.selection?.backend ?? null, errors: app.errors };
}
"""


def parse_tabs(text: str) -> list[str]:
    """``webgpu,cpu`` -> the tab kinds, refusing unknown ones with the list of known ones."""
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in TAB_KINDS]
    if not kinds or unknown:
        raise SystemExit(
            f"daisychain bench mesh: --tabs {text!r}: unknown tab kind(s) {unknown}; "
            f"give a comma-separated list of {', '.join(TAB_KINDS)} (e.g. --tabs webgpu,cpu)"
        )
    return kinds


def why_not_here() -> str | None:
    """None when Chromium can join a mesh from this process, else the reason it cannot."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: pip install -e '.[test]'"
    if os.environ.get(netns.INSIDE) == "1":
        return None
    if not sys.platform.startswith("linux"):
        return "browser peers need a Linux network namespace (Chromium has no loopback candidate)"
    if os.geteuid() != 0:
        return "browser peers need root to create a network namespace (run as root)"
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "browser peers need `unshare` (util-linux) and `ip` (iproute2)"
    return None


def in_namespace(argv: list[str], bench: str = "mesh") -> dict[str, Any]:
    """Re-run ``daisychain bench BENCH argv`` under ``unshare -n``; returns its JSON."""
    env = dict(os.environ, **{_INNER: "1"})
    command = ["unshare", "-n", sys.executable, "-m", "daisychain", "bench", bench, "--json"]
    proc = subprocess.run([*command, *argv], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        tail = proc.stderr[-3000:]
        raise SystemExit(f"daisychain bench {bench} in its namespace failed:\n{tail}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def set_up_namespace() -> None:
    """Inside the fresh namespace (the re-run): loopback and a veth address for ICE."""
    failed = netns.set_up()
    if failed is not None:
        raise SystemExit(failed)
    os.environ[netns.INSIDE] = "1"


def needs_reexec() -> bool:
    return os.environ.get(netns.INSIDE) != "1" and os.environ.get(_INNER) != "1"


@dataclass
class Series:
    """One peer's per-step samples, aligned by applied step."""

    peer: str
    backend: str
    # What the peer's own counter of bytes sent counts: a Python node counts the frames it
    # queued (headers, deflate); the page counts the payloads it handed to its mesh (before
    # framing and deflate). Both count received frames as they arrive.
    sent_counts: str
    applied_at: list[float] = field(default_factory=list)  # seconds, this peer's clock
    compute_s: list[float] = field(default_factory=list)
    exchange_s: list[float] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)  # cumulative bytes
    received: list[int] = field(default_factory=list)  # cumulative bytes
    hashes: dict[int, str] = field(default_factory=dict)  # step -> replica hash
    shares: dict[int, tuple[int, ...]] = field(default_factory=dict)  # step -> the roster's

    def summary(self) -> dict[str, Any]:
        # Step 1 includes warm-up (first products, channel slow start): medians over the rest.
        def per_step(cum: list[int]) -> int:
            return int(np.median(np.diff(cum))) if len(cum) > 1 else 0

        step = float(np.median(np.diff(self.applied_at))) if len(self.applied_at) > 1 else 0.0
        compute = float(np.median(self.compute_s[1:] or self.compute_s))
        exchange = float(np.median(self.exchange_s[1:] or self.exchange_s))
        return {
            "peer": self.peer,
            "backend": self.backend,
            "steps": len(self.applied_at),
            "bytes_sent_per_step": per_step(self.sent),
            "bytes_sent_counts": self.sent_counts,
            "bytes_received_per_step": per_step(self.received),
            "step_s": round(step, 4),
            "compute_s": round(compute, 4),
            "exchange_s": round(exchange, 4),
            "exchange_share_of_step": round(exchange / (compute + exchange), 3)
            if compute + exchange > 0
            else None,
        }


class CountingQueue(asyncio.Queue[Any]):
    """The mesh's event queue, counting the bytes of every frame received."""

    def __init__(self) -> None:
        super().__init__()
        self.received = 0

    def put_nowait(self, item: Any) -> None:
        data = getattr(item, "data", None)
        if isinstance(data, bytes):
            self.received += len(data)
        super().put_nowait(item)


async def python_group(
    url: str, lead: Any, peers: int, name: str
) -> tuple[list[Series], list[Any]]:
    """``peers`` in-process Python peers (the first leads); returns their series and nodes."""
    from daisychain.corpus.load import load_corpus
    from daisychain.p2p.mesh import Mesh
    from daisychain.p2p.node import Node, StepRecord
    from daisychain.tokenizer import load_default

    tok = load_default()
    tokens = load_corpus(None, tok).train
    meshes: list[Mesh] = []
    series: list[Series] = []
    nodes: list[Node] = []
    try:
        for i in range(peers):
            mesh = Mesh(url, name=f"{name}-{i}")
            queue = CountingQueue()
            mesh.events = queue
            await mesh.connect()
            meshes.append(mesh)
            s = Series(f"python-{i}{' (leader)' if i == 0 else ''}", "numpy", "frames")
            series.append(s)

            def on_step(r: StepRecord, s: Series = s, q: CountingQueue = queue) -> None:
                s.applied_at.append(time.perf_counter())
                s.compute_s.append(r.compute_s)
                s.exchange_s.append(r.exchange_s)
                s.sent.append(r.bytes_sent + (s.sent[-1] if s.sent else 0))
                s.received.append(q.received)
                s.hashes[r.step] = r.hash
                s.shares[r.step] = r.shares
                s.backend = r.backend

            node = Node(
                mesh, tokens, tok.sha256, tok.vocab_size,
                lead=lead if i == 0 else None, on_step=on_step,
            )  # fmt: skip
            nodes.append(node)
        return series, nodes
    except BaseException:
        for mesh in meshes:
            await mesh.close()
        raise


async def open_tab(browser: Any, url: str, kind: str) -> Any:
    page = await browser.new_page()
    backend = TAB_KINDS[kind][1]
    await page.goto(f"{url}/?name=tab-{kind}&backend={backend}")
    deadline = time.monotonic() + 180
    while True:
        state = await page.evaluate(_STATE)
        if state["id"]:
            return page
        if state["errors"]:
            raise SystemExit(f"the {kind} tab could not start: {state['errors']}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the {kind} tab never joined the group")
        await asyncio.sleep(0.2)


def tab_series(kind: str, state: dict[str, Any]) -> Series:
    s = Series(f"tab-{kind}", state["backend"] or "?", "payloads")
    for r in state["records"]:
        s.applied_at.append(r["appliedAtMs"] / 1000)
        s.compute_s.append(r.get("computeMs", 0.0) / 1000)
        s.exchange_s.append((r["appliedAtMs"] - r.get("computedAtMs", r["appliedAtMs"])) / 1000)
        s.sent.append(r["bytesSent"])
        s.received.append(r["bytesReceived"])
        s.hashes[r["step"]] = r["hash"]
        s.shares[r["step"]] = tuple(r["shares"])
    return s


def group_summary(series: list[Series]) -> dict[str, Any]:
    peers = [s.summary() for s in series]
    return {
        "peers": peers,
        # Every peer published the same hash at every step it applied.
        "replicas_identical": all(s.hashes == series[0].hashes for s in series),
        "step_s_median": round(float(np.median([p["step_s"] for p in peers])), 4),
        "exchange_share_median": round(
            float(np.median([p["exchange_share_of_step"] or 0 for p in peers])), 3
        ),
        # Received bytes are frames for every kind of peer: the comparable measure.
        "bytes_received_per_step_median": int(
            np.median([p["bytes_received_per_step"] for p in peers])
        ),
    }


async def run(args: argparse.Namespace, kinds: list[str]) -> dict[str, Any]:
    from playwright.async_api import async_playwright

    from daisychain.p2p.node import LeadConfig
    from daisychain.server.app import serve_local
    from daisychain.server.config import DataConfig, ServerConfig

    n = 1 + args.py_followers + len(kinds)
    lead = LeadConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, min_peers=n)
    timeout = 120 + 60 * args.steps
    async with serve_local(ServerConfig(data=DataConfig(offline=True))) as url:
        flags = [*OFFLINE_FLAGS, *WEBRTC_FLAGS]
        async with async_playwright() as pw:
            browsers = []
            try:
                pages = []
                for kind in kinds:
                    gpu = TAB_KINDS[kind][0]
                    browser = await pw.chromium.launch(
                        executable_path=str(CHROMIUM),
                        args=[*flags, *([WEBGPU_FLAG] if gpu else [])],
                    )
                    browsers.append(browser)
                    pages.append(await open_tab(browser, url, kind))
                series, nodes = await python_group(url, lead, 1 + args.py_followers, "mixed")
                try:
                    outcomes = await asyncio.wait_for(
                        asyncio.gather(*(node.run() for node in nodes)), timeout
                    )
                finally:
                    for node in nodes:
                        await node.mesh.close()
                deadline = time.monotonic() + 120
                while True:
                    states = [await p.evaluate(_STATE) for p in pages]
                    if all(s["outcome"] is not None for s in states):
                        break
                    if time.monotonic() > deadline:
                        raise SystemExit("the tabs never reported the run's outcome")
                    await asyncio.sleep(0.25)
            finally:
                for browser in browsers:
                    await browser.close()
        reasons = [o.reason for o in outcomes] + [s["outcome"]["reason"] for s in states]
        if reasons != ["done"] * n:
            raise SystemExit(f"the mixed run did not finish: {reasons}")
        all_series = series + [tab_series(k, s) for k, s in zip(kinds, states, strict=True)]
        mixed = group_summary(all_series)
        py_series, py_nodes = await python_group(url, lead, n, "python")
        try:
            py_outcomes = await asyncio.wait_for(
                asyncio.gather(*(node.run() for node in py_nodes)), timeout
            )
        finally:
            for node in py_nodes:
                await node.mesh.close()
        if [o.reason for o in py_outcomes] != ["done"] * n:
            raise SystemExit(f"the Python-only run did not finish: {py_outcomes}")
        python_only = group_summary(py_series)
    # The same config and the same shares give the same replicas whoever computes (roster
    # order is rank order). Shares follow measured speeds (protocol v2), so the two groups
    # commit the same shares only when their timings agree; otherwise there is nothing to
    # compare (None), and identity across implementations rests on the traces and the
    # browser tests' replays of the shares a run committed.
    same_shares = py_series[0].shares == all_series[0].shares
    python_only["same_shares_as_mixed"] = same_shares
    python_only["same_hashes_as_mixed"] = (
        py_series[0].hashes == all_series[0].hashes if same_shares else None
    )
    by_backend: dict[str, dict[str, Any]] = {}
    for p in mixed["peers"]:
        by_backend.setdefault(p["backend"], p)

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    return {
        "config": {
            "preset": "tiny",
            "steps": args.steps,
            "batch": args.batch,
            "seq_len": args.seq_len,
            "peers": n,
            "tabs": kinds,
        },
        "mixed": mixed,
        "python_only": python_only,
        "step_s_ratio_mixed_vs_python_only": ratio(
            mixed["step_s_median"], python_only["step_s_median"]
        ),
        "exchange_share_ratio_mixed_vs_python_only": ratio(
            mixed["exchange_share_median"], python_only["exchange_share_median"]
        ),
        "bytes_received_ratio_mixed_vs_python_only": ratio(
            mixed["bytes_received_per_step_median"], python_only["bytes_received_per_step_median"]
        ),
        "per_backend_step_s_ratio_vs_python_only": {
            b: ratio(p["step_s"], python_only["step_s_median"]) for b, p in by_backend.items()
        },
        "notes": (
            "bytes sent are what each peer's own code counts (bytes_sent_counts): a Python "
            "peer counts frames (28-byte headers, deflate), a tab the payloads before framing "
            "and deflate; bytes received are frames for both. exchange_s includes waiting for "
            "the slowest peer's compute; every "
            "Python peer shares this process (one GIL: the all-Python group's steps are slower "
            "for it), the tabs run in their own Chromium processes, "
            "all on this machine's cores: absolute times are leads, the ratios the result"
        ),
    }
