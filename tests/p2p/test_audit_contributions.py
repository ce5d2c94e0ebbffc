"""Contributions recomputed bit for bit (docs/TRUST.md, "What an auditor recomputes, and its
cost"): tests/vectors/audit/contributions.json against ``p2p.contribution`` (the headless peer's
compute) on the numpy reference and on every gated CPU backend here (cpu-int8 and cpu-madd, each
with the fused passes and with numpy's), and planted bugs seen to fail.

A case is every rank of a roster: its chunk digests (SHA-256 of each ``codec.encode`` payload)
and its data digest. The state is the vectors' seed after its local steps, rebuilt by each
backend (its hash is checked first, so a wrong state is told apart from a wrong contribution).
The JavaScript twin is checked on the same file by tests/js/audit_contributions.test.mjs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

import audit_vectors
from daisychain import batches, training
from daisychain.cpu import fused as cpufused
from daisychain.gpu.backend import Backend, Demotion
from daisychain.gpu.live import training_ops
from daisychain.model.ops import NUMPY_OPS, GemmOps
from daisychain.p2p import contribution
from daisychain.p2p import statements as st
from daisychain.peer.backend import gated_cpu_int8, gated_cpu_madd
from source_mutant import mutant

VECTORS: dict[str, Any] = json.loads(
    (audit_vectors.FOLDER / "contributions.json").read_text(encoding="utf-8")
)


def mismatches(ops: GemmOps = NUMPY_OPS, **modules: Any) -> list[str]:
    return audit_vectors.contribution_mismatches(VECTORS, ops, **modules)


def test_the_vectors_cover_what_issue_42_needs() -> None:
    """Pieces spanning lanes, shares of 1 and 0, both states, three-piece shares: the file holds
    the cases the checks below rely on (a regenerated file that lost them fails here)."""
    cases = VECTORS["cases"]
    assert {c["state"] for c in cases} == {0, 1}
    assert [s["steps"] for s in VECTORS["states"]] == [0, 2]
    shares = [c["shares"][c["rank"]] for c in cases]
    assert 0 in shares and 1 in shares and max(shares) > VECTORS["model"]["batch"]
    assert any(len({lane for lane, _, _ in c["pieces"]}) >= 3 for c in cases)
    assert any(c["pieces"] and c["pieces"][0][1] > 0 for c in cases), "a piece mid-lane"
    zero = [c for c in cases if c["shares"][c["rank"]] == 0]
    assert all(c["data"] == "0" * 64 and set(c["chunks"]) == {"0" * 64} for c in zero)
    # Other text gives another data digest, and other positions or another roster other
    # chunks: nothing is a constant.
    text = {(c["state"], *c["positions"]): c["data"] for c in cases if c["data"] != "0" * 64}
    assert len(set(text.values())) == len(text)
    where: dict[str, set[tuple[int, ...]]] = {}
    for c in cases:
        for d in [*c["chunks"], c["mean"]]:
            if d not in ("", "0" * 64):
                where.setdefault(d, set()).add((c["state"], *c["positions"]))
    assert all(len(at) == 1 for at in where.values()), "one digest at two positions"
    assert len({c["mean"] for c in cases if c["mean"]}) == len(text)


def test_numpy_reference_gives_the_vectors() -> None:
    assert mismatches() == []


def _cpu(
    gated: Callable[[], tuple[list[Backend], list[Demotion]]], name: str, module: str
) -> Backend:
    pytest.importorskip(module, reason=f"{name} needs {module} (test extras)")
    usable, refused = gated()
    if not usable:
        pytest.skip(f"{name} is not usable here: {[d.reason for d in refused]}")
    assert usable[0].name == name, usable[0].name
    return usable[0]


@pytest.mark.parametrize("passes", ["fused", "numpy"])
@pytest.mark.parametrize(
    ("name", "gated", "module"),
    [("cpu-int8", gated_cpu_int8, "onnxruntime"), ("cpu-madd", gated_cpu_madd, "numba")],
)
def test_every_gated_cpu_backend_gives_the_vectors(
    name: str,
    gated: Callable[[], tuple[list[Backend], list[Demotion]]],
    module: str,
    passes: str,
) -> None:
    backend = _cpu(gated, name, module)
    if passes == "fused":
        fused, why = cpufused.proven()
        if fused is None:
            pytest.skip(f"the fused passes are not usable here: {why}")
        ops = training_ops(backend, passes=fused)
    else:
        ops = training_ops(backend, passes=None)
    assert ops.name == name and ops is not NUMPY_OPS
    assert mismatches(ops) == []


def test_a_share_of_0_has_no_token_rows() -> None:
    with pytest.raises(AssertionError, match="a share of 0 reads no text"):
        contribution.token_rows([])


# -- planted bugs: each must fail the vectors, in the part it breaks


def _plant(kind: str) -> dict[str, Any]:
    """The modules for one planted bug (the others real)."""
    if kind == "mean order":
        trainer = mutant(
            training,
            "for i, (x, y) in enumerate(rows):",
            "for i, (x, y) in enumerate(rows[::-1]):",
        )
        c = mutant(contribution, "from daisychain import training\n", "")
        c.training = trainer  # type: ignore[attr-defined]
        return {"c": c}
    if kind == "positions one row late":
        first = "first = shares.offsets(roster_shares)[rank]"
        return {"c": mutant(contribution, first, first + " + 1")}
    if kind == "windows one token late":
        return {"batch_source": mutant(batches, "window = tokens[idx]", "window = tokens[idx + 1]")}
    if kind == "a lane's offsets wrong":
        key = "prng.below(prng.key(seed, BATCH_STREAM, step, rank)"
        return {"batch_source": mutant(batches, key, key.replace("rank)", "rank and rank + 1)"))}
    if kind == "data digest over int64 ids":
        return {"statements": mutant(st, '.astype("<i4")', '.astype("<i8")')}
    assert kind == "the last piece's rows dropped", kind
    return {"c": mutant(contribution, "for x, y in rows])", "for x, y in rows[:-1]])")}


@pytest.mark.parametrize(
    ("kind", "where"),
    [
        ("mean order", ": mean"),  # a piece mean summed in another order
        ("positions one row late", ": pieces"),  # a row off by one position
        ("windows one token late", ": data"),  # each row's text one token off
        ("a lane's offsets wrong", "offsets of lane 1"),
        ("data digest over int64 ids", ": data"),
        ("the last piece's rows dropped", ": data"),  # the last share's rows left out
    ],
)
def test_a_planted_bug_fails_the_vectors(kind: str, where: str) -> None:
    bad = mismatches(**_plant(kind))
    assert any(where in m for m in bad), bad


def test_the_order_plant_changes_only_the_means_of_several_pieces() -> None:
    """The piece order is invisible in the text (the data digests agree) and rarely reaches the
    int8 chunks; the float32 mean of every share of three pieces differs, and nothing else
    (two pieces add in either order to the same float32, and one piece is its own mean)."""
    bad = mismatches(**_plant("mean order"))
    three = {
        f"state {c['state']}, shares {c['shares']}, rank {c['rank']}: mean"
        for c in VECTORS["cases"]
        if len(c["pieces"]) >= 3
    }
    assert three and three <= set(bad), bad
    assert all(": mean" in m or ": chunk " in m for m in bad), bad
