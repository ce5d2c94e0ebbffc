"""The figures of a scale run, one shape for a real run (``bench scale``) and a simulated one
(``bench sim``), so the two can be compared key by key (docs/BENCHMARKS.md, "Scale and the
simulator").

Per peer and step: when the step was applied, the compute seconds, the exchange seconds (from
its gradient's end to the apply), the share, the hash, what it sent that belongs to the step
(``p2p.traffic``) and its open channels. A step's time at a peer is the time since it applied
the step before; coordination is what is left of it after compute and exchange (waiting for the
roster, for a slower peer). Steps are measured after ``warmup`` (the first steps settle shares).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepFigures:
    at: float  # seconds (the run's clock) when this peer applied the step
    compute_s: float
    exchange_s: float
    share: int
    hash: str
    messages: int
    frames: int
    text_bytes: int
    piece_bytes: int
    wire_bytes: int
    connections: int


@dataclass
class PeerFigures:
    name: str
    joined_at: float  # when the peer said hello to the signaling server (the run's clock)
    steps: dict[int, StepFigures] = field(default_factory=dict)
    peak_memory_bytes: int | None = None  # None: not measured (the simulator models none)
    final_hash: str = ""
    leader: bool = False


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"mean": round(statistics.mean(values), 6), "max": round(max(values), 6),
            "min": round(min(values), 6)}  # fmt: skip


def summarize(peers: list[PeerFigures], first: int, last: int) -> dict[str, Any]:
    """Steps ``first + 1 .. last`` (a step's time needs the one before it) of every peer."""
    measured = range(first + 1, last + 1)
    missing = [p.name for p in peers if not all(s in p.steps for s in range(first, last + 1))]
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        return {"error": f"steps {first}..{last} missing at {len(missing)} peers: {shown}"}
    lead = next((p for p in peers if p.leader), peers[0])

    def per_step(p: PeerFigures, key: str) -> list[float]:
        return [float(getattr(p.steps[s], key)) for s in measured]

    def period(p: PeerFigures) -> list[float]:
        return [p.steps[s].at - p.steps[s - 1].at for s in measured]

    def mean_over_peers(key: str) -> dict[str, float]:
        return _stats([statistics.mean(per_step(p, key)) for p in peers])

    coordination = [
        statistics.mean(period(p)) - statistics.mean(per_step(p, "compute_s"))
        - statistics.mean(per_step(p, "exchange_s"))
        for p in peers
    ]  # fmt: skip
    first_contribution = []
    for p in peers:
        done = [f.at for s, f in sorted(p.steps.items()) if f.share > 0]
        if done:
            first_contribution.append(done[0] - p.joined_at)
    identical = all(len({p.steps[s].hash for p in peers}) == 1 for s in measured)
    finals = {p.final_hash for p in peers}
    memory = [float(p.peak_memory_bytes) for p in peers if p.peak_memory_bytes is not None]
    return {
        "peers": len(peers),
        "steps_measured": len(measured),
        "step_s": round(statistics.mean(period(lead)), 6),
        "compute_s": mean_over_peers("compute_s"),
        "exchange_s": mean_over_peers("exchange_s"),
        "coordination_s": _stats(coordination),
        "messages_per_peer_per_step": mean_over_peers("messages"),
        "frames_per_peer_per_step": mean_over_peers("frames"),
        "piece_bytes_per_peer_per_step": mean_over_peers("piece_bytes"),
        "text_bytes_per_peer_per_step": mean_over_peers("text_bytes"),
        "wire_bytes_per_peer_per_step": mean_over_peers("wire_bytes"),
        "leader": {
            "messages_per_step": statistics.mean(per_step(lead, "messages")),
            "piece_bytes_per_step": statistics.mean(per_step(lead, "piece_bytes")),
            "wire_bytes_per_step": statistics.mean(per_step(lead, "wire_bytes")),
        },
        "connections_per_peer": mean_over_peers("connections"),
        "peak_memory_bytes_per_peer": _stats(memory) if memory else None,
        "hello_to_first_contribution_s": _stats(first_contribution),
        "replicas_identical": identical and len(finals) == 1,
    }


def step_traffic(peers: list[PeerFigures], first: int, last: int) -> dict[str, Any]:
    """What a real run and its simulation must agree on exactly: each peer's (messages, piece
    bytes) at every measured step; the leader's apart, the others sorted (peer ids, and so
    roster ranks and chunk sizes, differ between the runs; the multiset does not)."""

    def seq(p: PeerFigures) -> list[list[int]]:
        return [[p.steps[s].messages, p.steps[s].piece_bytes] for s in range(first + 1, last + 1)]

    lead = next((p for p in peers if p.leader), peers[0])
    return {"leader": seq(lead), "others": sorted(seq(p) for p in peers if p is not lead)}
