"""``daisychain bench audit`` at a tiny shape: a ratio for every GEMM (no timing is checked)."""

from __future__ import annotations

import argparse

import pytest


def test_audit_bench_reports_ratios_for_every_gemm(monkeypatch: pytest.MonkeyPatch) -> None:
    from daisychain.bench import audit as audit_bench

    monkeypatch.setattr(audit_bench, "SHAPES", [("small", 40, 30, 48)])
    doc = audit_bench.measure(argparse.Namespace(repeats=1))
    rows = doc["shapes"]["small 40x30x48"]
    assert "numpy" in rows
    for row in rows.values():
        assert row["audit_ratio_to_product"] > 0 and row["checksums_ratio_to_product"] > 0
    assert doc["tiny_step"]["numpy"]["audited_step_ratio"] > 0
