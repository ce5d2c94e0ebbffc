"""``daisychain bench step``'s report at a tiny size (never a timing): every side that can run
here reports, the CPU int8 sides are there exactly when onnxruntime is installed, cpu-madd
when numba is, every side's bits agree, and with
``--wgpu`` the wgpu sides (batched and per slice) with their round trips, or why not."""

from __future__ import annotations

import argparse
import importlib.util
from typing import Any

import pytest

from daisychain.bench import step
from daisychain.bench.rig import cpufeatures
from daisychain.gpu.backend import probe_step_dispatches


def test_the_report_has_every_side_that_runs_here() -> None:
    args = argparse.Namespace(preset="tiny", steps=1, rounds=1, vocab=0, wgpu=True)
    doc = step.measure(args)
    assert doc["benchmark"] == "step" and doc["tokens_per_step"] > 0
    assert doc["contract"]["tokens_per_s"] > 0
    assert doc["machine"]["arch"] and "contract" in doc["product_paths"]
    if importlib.util.find_spec("numba") is not None:  # cpu-madd runs on any CPU
        assert doc["cpu-madd"]["tokens_per_s"] > 0 and doc["cpu_madd_vs_numpy_ratio"] > 0
    assert doc["hashes_identical"] is True  # every contract side, every round: one hash
    _check_wgpu_sides(doc)
    if importlib.util.find_spec("onnxruntime") is None:
        assert "cpu-int8" not in doc
        return
    if isinstance(doc["cpu-int8"], str):  # this CPU's gates refused it: say why, time nothing
        assert doc["cpu-int8"].startswith("refused by its gates here:")
        assert "cpu-int8-unaudited" not in doc
        return
    for side in ("cpu-int8", "cpu-int8-unaudited"):
        assert doc[side]["tokens_per_s"] > 0
        assert doc[side.replace("-", "_") + "_vs_numpy_ratio"] > 0


def _check_wgpu_sides(doc: dict[str, Any]) -> None:
    if isinstance(doc["wgpu"], str):  # no adapter, or no kernel passed its gates: say why
        assert doc["wgpu"].startswith("refused by its gates here:")
        assert "wgpu-per-slice" not in doc
        return
    batched, per_slice = doc["wgpu"], doc["wgpu-per-slice"]
    assert batched["tokens_per_s"] > 0 and per_slice["tokens_per_s"] > 0
    # Counts, not times: one readback per product against one per slice.
    assert 0 < batched["readbacks_per_step"] < per_slice["readbacks_per_step"]
    assert batched["submits_per_step"] == batched["readbacks_per_step"]
    # the same dispatches either way (one per slice), plus the epilogues of the chains that
    # passed their gates: none, up to all of them (the tiny preset: 88, docs/BENCHMARKS.md), and
    # with the step chain the probe step it records beside the step (its products too)
    most = 88 + probe_step_dispatches()
    assert 0 <= batched["dispatches_per_step"] - per_slice["dispatches_per_step"] <= most
    assert per_slice["dispatches_per_step"] == per_slice["readbacks_per_step"]
    assert doc["wgpu_batched_vs_per_slice_ratio"] > 0
    assert doc["wgpu_vs_numpy_ratio"] > 0 and doc["wgpu_per_slice_vs_numpy_ratio"] > 0


def test_a_refused_wgpu_is_reported_with_its_reason_and_not_timed() -> None:
    args = argparse.Namespace(preset="tiny", steps=1, rounds=1)
    why = {"refused": "wgpu-dp4a: no wgpu adapter found"}
    runs = {"contract": [_round(0.1)], "wgpu": [why], "wgpu-per-slice": [why]}
    doc = step.report(args, 256, runs)
    assert doc["wgpu"] == "refused by its gates here: wgpu-dp4a: no wgpu adapter found"
    assert "wgpu-per-slice" not in doc and "wgpu_batched_vs_per_slice_ratio" not in doc


def _round(step_s: float) -> dict[str, float]:
    return {"step_s": step_s, "peak_rss_kb": 2048, "base_rss_kb": 1024}


def test_a_bimodal_torch_is_reported_against_its_median_and_its_fastest_round() -> None:
    """Torch's step is bimodal on the 2-core machine: the report must not hide the fast mode
    behind a median (nor a slow side behind a lucky round)."""
    args = argparse.Namespace(preset="small", steps=4, rounds=3)
    runs = {
        "contract": [_round(0.40), _round(0.30), _round(0.35)],
        "torch": [_round(0.30), _round(0.15), _round(0.30)],
    }
    doc = step.report(args, 1024, runs)
    assert doc["contract"]["step_ms"] == 350.0 and doc["contract"]["min_step_ms"] == 300.0
    assert doc["torch"]["round_ms"] == [300.0, 150.0, 300.0]
    assert doc["tokens_per_s_ratio"] == round(0.30 / 0.35, 3)  # medians
    assert doc["tokens_per_s_ratio_vs_torch_min"] == round(0.15 / 0.35, 3)  # torch's fast mode
    assert doc["tokens_per_s_ratio_vs_torch_min"] < doc["tokens_per_s_ratio"]


def test_rounds_rotate_the_order_of_the_sides() -> None:
    sides = ["contract", "cpu-int8", "torch"]
    orders = [step.rotated(sides, r) for r in range(3)]
    assert orders[0] == sides
    assert {o[0] for o in orders} == set(sides)  # every side goes first once
    assert all(sorted(o) == sorted(sides) for o in orders)


def test_a_side_left_out_is_not_timed_and_a_typo_is_refused() -> None:
    sides = ["contract", "cpu-madd", "cpu-int8", "cpu-int8-unaudited", "torch"]
    assert step.without(sides, ["cpu-int8"]) == ["contract", "cpu-madd", "torch"]
    assert step.without(sides, []) == sides
    with pytest.raises(ValueError, match="--without 'cpu_int8': not a side"):
        step.without(sides, ["cpu_int8"])
    with pytest.raises(ValueError, match="not a side that can be left out"):
        step.without(sides, ["contract"])  # the reference every ratio is taken against


def test_the_report_names_the_machine_each_product_path_and_whether_the_bits_agree() -> None:
    args = argparse.Namespace(preset="tiny", steps=1, rounds=2, without=["cpu-int8"], isa="avx2")
    same = {**_round(0.1), "state_hash": "ab" * 32}
    runs = {"contract": [same, same], "cpu-madd": [same, same]}
    doc = step.report(args, 256, runs)
    assert doc["hashes_identical"] is True and doc["state_hash"] == "ab" * 32
    assert set(doc["product_paths"]) == {"contract", "cpu-madd"}
    assert "16-bit multiply-adds" in doc["product_paths"]["cpu-madd"]
    assert doc["left_out"] == ["cpu-int8"] and doc["isa_env"]["NUMBA_CPU_NAME"] == "haswell"
    assert doc["machine"]["arch"] and isinstance(doc["machine"]["flags"], list)
    forked = {**_round(0.1), "state_hash": "cd" * 32}
    doc = step.report(args, 256, {"contract": [same, same], "cpu-madd": [same, forked]})
    assert doc["hashes_identical"] is False and len(doc["state_hash"]) == 2
    refused = {"refused": "cpu-madd failed gate '1x1x1': expected 7, got 8"}
    doc = step.report(args, 256, {"contract": [same], "cpu-madd": [refused]})
    assert doc["cpu-madd"] == "refused by its gates here: " + refused["refused"]
    assert "cpu_madd_vs_numpy_ratio" not in doc


X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD Ryzen 5 3600
flags\t\t: fpu sse sse2 ssse3 sse4_1 avx avx2 fma f16c
processor\t: 1
model name\t: other
flags\t\t: avx512_vnni
"""
ARM = """processor\t: 0
Features\t: fp asimd evtstrm aes crc32 asimddp
CPU part\t: 0xd0c
"""


def test_the_cpu_features_are_read_from_the_first_cpu() -> None:
    x86 = cpufeatures.parse(X86)
    assert x86["model"] == "AMD Ryzen 5 3600" and x86["int8_dot_units"] is False
    assert x86["flags"] == ["sse2", "ssse3", "sse4_1", "avx", "avx2", "fma", "f16c"]
    arm = cpufeatures.parse(ARM)
    assert arm["flags"] == ["asimd", "asimddp"] and arm["int8_dot_units"] is True
    assert cpufeatures.parse("") == {"model": "", "flags": [], "int8_dot_units": False}
