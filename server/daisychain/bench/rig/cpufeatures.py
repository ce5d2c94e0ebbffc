"""The CPU's features that decide which integer product is fast, for a benchmark's report.

A figure of ``bench step`` means little without its machine: ``cpu-int8`` is exact and fast only
with int8 dot-product units (x86 ``avx512_vnni``/``avx_vnni``, ARM ``asimddp``/``i8mm``), and
``cpu-madd``'s 16-bit multiply-adds are 128, 256 or 512 bits wide with ``sse2``, ``avx2`` or
``avx512bw``. Read from /proc/cpuinfo (Linux: x86 ``flags``, ARM ``Features``); elsewhere only
the architecture is known and ``flags`` is empty, which the report says rather than guesses.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

# The flags that matter to the products, in the spelling of the Linux kernel.
RELEVANT = (
    "sse2", "ssse3", "sse4_1", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw",
    "avx512_vnni", "avx_vnni", "amx_int8",
    "neon", "asimd", "asimddp", "i8mm", "sve",
)  # fmt: skip
VNNI = ("avx512_vnni", "avx_vnni", "asimddp", "i8mm")  # int8 dot-product units of some kind


def parse(text: str) -> dict[str, object]:
    """``{"model", "flags", "int8_dot_units"}`` from the text of /proc/cpuinfo (its first CPU:
    every core of one machine reports the same)."""
    model, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    found = [f for f in RELEVANT if f in flags]
    return {"model": model, "flags": found, "int8_dot_units": any(f in flags for f in VNNI)}


def describe(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, object]:
    """This machine: architecture, core count (as Python sees it), model and relevant flags."""
    try:
        found = parse(cpuinfo.read_text(errors="replace"))
    except OSError:  # not Linux: say so rather than guess
        found = {"model": platform.processor(), "flags": [], "int8_dot_units": None}
    return {"arch": platform.machine(), "cores": os.cpu_count(), **found}
