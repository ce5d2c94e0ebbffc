"""Helpers for the mesh tests: a real signaling server on loopback, in-process peers (real
aiortc channels inside the test run's network namespace, see conftest.py) and subprocess peers
(``python -m daisychain.peer``) for the tests that kill one. Waits are bounded polls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from daisychain.p2p.machine.effects import SendPayload
from daisychain.p2p.mesh import Mesh
from daisychain.p2p.node import Compute, LeadConfig, Node, Outcome, StepRecord, Timers
from daisychain.p2p.runconfig import Limits
from daisychain.peer.recheck import Recheck
from daisychain.server.app import serve_local
from daisychain.wire import frames
from daisychain.wire.frames import FrameKind
from server_fixtures import ByteTokenizer, config

needs_namespace = pytest.mark.skipif(
    "DAISYCHAIN_MESH_SKIP" in os.environ,
    reason=os.environ.get("DAISYCHAIN_MESH_SKIP", "") or "no network namespace",
)

REPO = Path(__file__).resolve().parents[1]
# Small enough for 2 cores running three replicas: tiny width and depth, 1 x 32 tokens a step.
TEST_BATCH = 1
TEST_SEQ = 32
# Shortened timers (the tests run every side). Repair and failover react after 1.5 s; a step
# is re-decided only after 90 s: no test relies on that timeout firing, and a loaded runner must
# never drop a slow but healthy peer (a subprocess peer's first step once took over 30 s under
# load), so no test sees a re-commit it did not cause.
FAST = Timers(step_timeout_s=90.0, repair_after_s=1.5, hello_timeout_s=20.0)


@cache
def corpus() -> tuple[npt.NDArray[np.integer], str, int]:
    """Training tokens of the built-in corpus (what `python -m daisychain.peer` uses)."""
    from daisychain.corpus.load import load_corpus
    from daisychain.tokenizer import load_default

    tok = load_default()
    return load_corpus(None, tok).train, tok.sha256, tok.vocab_size


@asynccontextmanager
async def signaling_server(**changes: Any) -> AsyncIterator[str]:
    """The real DaisyChain app on 127.0.0.1 (offline data); yields its http URL."""
    async with serve_local(config(**changes), tokenizer=ByteTokenizer) as url:
        yield url


def lead_config(steps: int = 30, **changes: Any) -> LeadConfig:
    """The tests' run. Equal shares unless a test asks for ``shares_by="speed"``: by speed, a
    peer measured slower on a busy 2-core machine can get a share of 0 and then sends nothing,
    so a fault planted in its contribution, or its data reads, would never happen."""
    base: dict[str, Any] = {
        "preset": "tiny", "steps": steps, "lr": 3e-3, "seed": 7, "batch": TEST_BATCH,
        "seq_len": TEST_SEQ, "min_peers": 3, "shares_by": "equal",
    }  # fmt: skip
    base.update(changes)
    return LeadConfig(**base)


@dataclass
class Faults:
    """Make a peer misbehave on purpose: test-only, applied by ``FaultyNode`` to what its
    machine sends (the product never damages anything)."""

    # Flip one byte of the next contribution sent at this step, after the CRC: a frame damaged
    # in transit (the receiver must detect it and repair).
    damage_contribution_at: int | None = None
    # Send one peer a reduced chunk with one value changed (valid CRC) at this step: a silent
    # fork that only the sync guard can catch.
    fork_reduced_at: int | None = None


class FaultyNode(Node):
    """A node whose outgoing payloads ``faults`` damages (the shell's ``send_payload`` hook)."""

    def __init__(self, *args: Any, faults: Faults, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.faults = faults

    def send_payload(self, effect: SendPayload) -> int:
        f = self.faults
        if effect.kind is FrameKind.REDUCED and f.fork_reduced_at == effect.step:
            f.fork_reduced_at = None
            bad = bytearray(effect.payload)
            bad[len(bad) // 257 + 7] ^= 0x01  # one value off by one quantization step
            return super().send_payload(dataclasses.replace(effect, payload=bytes(bad)))
        if effect.kind is FrameKind.CONTRIBUTION and f.damage_contribution_at == effect.step:
            f.damage_contribution_at = None
            parts = list(frames.fragment(
                effect.kind, effect.payload, transfer=effect.transfer, step=effect.step,
                round=effect.round, chunk=effect.chunk, deflate=effect.deflate,
            ))  # fmt: skip
            parts[0] = parts[0][:-1] + bytes([parts[0][-1] ^ 0x5A])
            self.mesh.send_frames(effect.peer, parts)
            return sum(len(p) for p in parts)
        return super().send_payload(effect)


@dataclass
class Peer:
    node: Node
    task: asyncio.Task[Outcome]
    records: list[StepRecord] = field(default_factory=list)
    # time.monotonic() when each record arrived (step times, for the lifecycle tests).
    applied_at: list[float] = field(default_factory=list)

    @property
    def hashes(self) -> dict[int, str]:
        return {r.step: r.hash for r in self.records}


async def start_peer(
    url: str,
    name: str,
    *,
    lead: LeadConfig | None = None,
    timers: Timers = FAST,
    faults: Faults | None = None,
    checkpoint_path: str | None = None,
    mesh_cls: type[Mesh] = Mesh,
    compute: Compute | None = None,
    save_every: int = 0,
    limits: Limits | None = None,
    fingerprint: bytes | None = None,
    early_chunks: bool = True,
    recheck: Recheck | None = None,
) -> Peer:
    """An in-process peer on ``url`` (``fingerprint``: the https server's pinned certificate)."""
    tokens, sha, vocab = corpus()
    mesh = mesh_cls(url, name=name, fingerprint=fingerprint)
    await mesh.connect()
    records: list[StepRecord] = []
    applied_at: list[float] = []

    def on_step(record: StepRecord) -> None:
        records.append(record)
        applied_at.append(time.monotonic())

    options: dict[str, Any] = {
        "lead": lead, "timers": timers, "checkpoint_path": checkpoint_path,
        "save_every": save_every, "on_step": on_step, "compute": compute,
        "limits": limits, "early_chunks": early_chunks, "recheck": recheck,
    }  # fmt: skip
    node = (
        Node(mesh, tokens, sha, vocab, **options)
        if faults is None
        else FaultyNode(mesh, tokens, sha, vocab, faults=faults, **options)
    )

    async def main() -> Outcome:
        try:
            return await node.run()
        finally:
            await mesh.close()

    return Peer(node, asyncio.create_task(main()), records, applied_at)


async def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms until true; fail with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


async def finish(peers: list[Peer], timeout: float) -> list[Outcome]:
    done = await asyncio.wait_for(asyncio.gather(*(p.task for p in peers)), timeout)
    return list(done)


def assert_identical(peers: list[Peer], steps: range) -> None:
    """Every peer that applied a step reports the same hash for it."""
    for step in steps:
        seen = {p.node.name: p.hashes[step] for p in peers if step in p.hashes}
        assert len(set(seen.values())) == 1, f"step {step}: hashes differ: {seen}"


class PeerProcess:
    """``python -m daisychain.peer --json`` as a child process; stdout is one JSON per line."""

    def __init__(self, url: str, name: str, *args: str) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO / "server"))
        cmd = [
            sys.executable, "-m", "daisychain.peer", "--server", url, "--name", name, "--json",
            "--step-timeout", str(FAST.step_timeout_s), "--repair-after",
            str(FAST.repair_after_s), "--backend", "numpy", *args,
        ]  # fmt: skip
        self.name = name
        # stderr goes to a file: a pipe nobody drains could block the child.
        self._err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._err, text=True, env=env
        )
        self.lines: list[dict[str, Any]] = []
        # A thread of its own: the loop's default executor has min(32, CPUs + 4) threads, each
        # reader holds one for the child's whole life, so past 6 children on 2 cores the
        # others' lines were never read (their peers had joined; the test saw nothing).
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"peer-{name}")
        self._reader = asyncio.get_running_loop().run_in_executor(self._pool, self._read)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                if line.startswith("{"):
                    self.lines.append(json.loads(line))

    @property
    def hashes(self) -> dict[tuple[int, int], str]:
        """(step, round) -> hash of every step this peer applied."""
        return {(d["step"], d["round"]): d["hash"] for d in self.lines if d.get("event") == "step"}

    @property
    def joined(self) -> bool:
        return any(d.get("event") == "joined" for d in self.lines)

    @property
    def steps(self) -> list[int]:
        return sorted({step for step, _ in self.hashes})

    def stderr(self) -> str:
        self._err.seek(0)
        return self._err.read()

    async def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"{self.name} did not exit within {timeout} s")
            await asyncio.sleep(0.05)
        await self._reader
        return self.proc.returncode

    def kill(self) -> None:
        """Kill if still running and release the pipes (safe to call twice)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        self._err.close()
        self._pool.shutdown(wait=False)
