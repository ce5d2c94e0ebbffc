"""``daisychain.bench.BENCHMARKS``: the table the CLI runs benchmarks from is exactly the
benchmark modules in ``server/daisychain/bench/`` (the private helper ``_torch_model`` is none,
nor is ``rig``, the stage they run on)."""

from __future__ import annotations

import importlib
import pkgutil

import daisychain.bench
from daisychain.bench import BENCHMARKS, available


def test_the_table_is_the_public_modules_of_bench() -> None:
    on_disk = {
        m.name
        for m in pkgutil.iter_modules(daisychain.bench.__path__)
        if not m.name.startswith("_") and m.name != "rig"
    }
    # A hyphen in a benchmark's name is left out of its module's (cpu-tier: cputier).
    assert {name.replace("-", "") for name in BENCHMARKS} == on_disk
    assert sorted(name.replace("-", "") for name in available()) == sorted(on_disk)
    assert {"gemm", "step", "converge", "kernels", "signaling", "data", "mesh"} <= on_disk


def test_every_entry_names_its_module_and_one_line() -> None:
    for name, (module_name, line) in BENCHMARKS.items():
        assert module_name == f"daisychain.bench.{name.replace('-', '')}"
        assert line and "\n" not in line and len(line) <= 60, name
        module = importlib.import_module(module_name)
        assert callable(module.measure), name
