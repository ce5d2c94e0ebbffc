"""Rounds of ``bench cpu-tier``: each side measured once per round, the sides alternating, so
that the load of a shared machine, which drifts over minutes, falls on both sides alike.

A round's figure for a side is the median of its timed steps; the side's figure is the median of
its rounds; ``ratio`` is the median of the per-round ratios (our tokens/s over TF.js's in the
same round), ``ratios_by_round`` lists them. What does not change between rounds (gates, SIMD
and thread flags, parameter count, losses, the state hash) comes from the first round; a state
hash that differs between rounds is reported as no hash (the rounds train the same batches).
"""

from __future__ import annotations

import statistics
from typing import Any

# Per-round fields: summarized, not copied from the first round.
_PER_ROUND = ("warmup_ms", "step_ms", "median_ms", "tokens_per_s")


def summarize(runs: list[dict[str, Any]], tokens_per_step: int) -> dict[str, Any]:
    """One side's rounds (each a measureOurs / measureTfjs result) as one figure."""
    first = runs[0]
    if "median_ms" not in first:  # a refused kernel: nothing was timed
        return first
    medians = [float(r["median_ms"]) for r in runs]
    median_ms = statistics.median(medians)
    out = {k: v for k, v in first.items() if k not in _PER_ROUND}
    out.update(
        median_ms=round(median_ms, 1),
        tokens_per_s=round(tokens_per_step / (median_ms / 1e3)),
        rounds=[{"median_ms": r["median_ms"], "step_ms": r["step_ms"]} for r in runs],
    )
    if "hash" in first:
        hashes = {r.get("hash") for r in runs}
        out["hash"] = first["hash"] if len(hashes) == 1 else None
        if len(hashes) != 1:
            out["hash_by_round"] = [r.get("hash") for r in runs]
    return out


def paired_ratios(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[float]:
    """Per round: our tokens/s over theirs (> 1: ours is faster)."""
    return [
        round(float(o["tokens_per_s"]) / float(t["tokens_per_s"]), 3)
        for o, t in zip(ours, theirs, strict=True)
        if "tokens_per_s" in o and "tokens_per_s" in t
    ]
