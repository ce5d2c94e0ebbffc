"""Several peers in this process, one group on one server: the demo's and the mesh bench's run.

Connects ``peers`` meshes to ``url``, makes the first one lead with ``lead``, runs every node to
the end and closes the meshes whatever happens. Traffic stays on this machine as long as the
caller keeps ICE on a local address (``demo.only_candidate``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from daisychain.p2p.mesh import Mesh
from daisychain.p2p.node import LeadConfig, Node, Outcome, StepRecord

OnStep = Callable[[int, StepRecord], None]  # (peer index, record)


async def run_group(
    url: str,
    lead: LeadConfig,
    peers: int,
    tokens: npt.NDArray[np.integer],
    tokenizer_sha256: str,
    vocab_size: int,
    *,
    name: str,
    timeout_s: float,
    on_step: OnStep | None = None,
) -> list[Outcome]:
    """Train one run with ``peers`` in-process peers; returns each peer's outcome.

    Raises ``MeshError`` when a peer cannot join and ``TimeoutError`` after ``timeout_s``.
    """
    meshes: list[Mesh] = []
    try:
        nodes = []
        for i in range(peers):
            mesh = Mesh(url, name=f"{name}-{i}")
            await mesh.connect()
            meshes.append(mesh)
            callback = None if on_step is None else _bind(on_step, i)
            nodes.append(
                Node(
                    mesh,
                    tokens,
                    tokenizer_sha256,
                    vocab_size,
                    lead=lead if i == 0 else None,
                    on_step=callback,
                )
            )
        return list(await asyncio.wait_for(asyncio.gather(*(n.run() for n in nodes)), timeout_s))
    finally:
        for mesh in meshes:
            await mesh.close()


def _bind(on_step: OnStep, index: int) -> Callable[[StepRecord], None]:
    return lambda record: on_step(index, record)
