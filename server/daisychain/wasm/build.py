"""Which WebAssembly sources make which committed binaries, and the step that makes them.

Each ``Build`` pairs a hand-written text source under kernels/ with the binary the page loads
under static/ (the server serves static/ at /, so ``wasm/gemm_i8.wasm`` is fetched from
``/wasm/gemm_i8.wasm``). The binary is committed so that neither the page nor CI needs an
assembler at run time; ``stale()`` is what the test uses to prove the committed bytes are
exactly what the source assembles to.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from daisychain.assets import asset_dir
from daisychain.wasm import WatError, assemble
from daisychain.wasm.binary import encode
from daisychain.wasm.module import Memory
from daisychain.wasm.sexpr import read
from daisychain.wasm.text import parse_module

BUILD_COMMAND = "daisychain wasm build"


# The shared variant's memory: imported as env.memory, shared between threads, at most this many
# 64 KiB pages (1 GiB; a shared memory must declare its maximum, and the page creates it with
# the same one: static/js/numerics/wasmpool.js SHARED_MAX_PAGES).
SHARED_MAX_PAGES = 16384
SHARED_IMPORT = ("env", "memory")


@dataclass(frozen=True)
class Build:
    source: str  # under kernels/
    target: str  # under static/
    # The same source with its memory imported and shared between threads instead of defined
    # (a pool of workers runs one kernel on one memory: docs/KERNELS.md, "A pool of workers").
    shared_memory: bool = False

    def source_path(self) -> Path:
        return asset_dir("kernels") / self.source

    def target_path(self) -> Path:
        return asset_dir("static") / self.target

    def assemble(self) -> bytes:
        path = self.source_path()
        where = f"kernels/{self.source}"
        text = path.read_text(encoding="utf-8")
        if not self.shared_memory:
            return assemble(text, where)
        module = parse_module(read(text, where))
        if module.memory is None or module.memory.imported is not None:
            raise WatError(f"{where}: a shared variant needs a memory the module defines")
        memory = Memory(module.memory.min_pages, SHARED_MAX_PAGES, SHARED_IMPORT, shared=True)
        return encode(dataclasses.replace(module, memory=memory))


BUILDS: tuple[Build, ...] = (
    Build("gemm_i8.wat", "wasm/gemm_i8.wasm"),
    Build("gemm_i8.wat", "wasm/gemm_i8_shared.wasm", shared_memory=True),
    Build("elementwise_f32.wat", "wasm/elementwise_f32.wasm"),
)


@dataclass(frozen=True)
class Outcome:
    build: Build
    size: int
    sha256: str
    changed: bool  # the committed file differed (or was missing)


def _outcome(build: Build, data: bytes) -> Outcome:
    target = build.target_path()
    current = target.read_bytes() if target.is_file() else None
    return Outcome(build, len(data), hashlib.sha256(data).hexdigest(), current != data)


def check(builds: tuple[Build, ...] = BUILDS) -> list[Outcome]:
    """Assembles every source; ``changed`` says which committed binaries are stale."""
    return [_outcome(b, b.assemble()) for b in builds]


def write(builds: tuple[Build, ...] = BUILDS) -> list[Outcome]:
    """Assembles every source and writes the binaries that differ (atomically)."""
    outcomes = []
    for b in builds:
        data = b.assemble()
        outcome = _outcome(b, data)
        if outcome.changed:
            target = b.target_path()
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the file from a static server
            os.replace(tmp, target)
        outcomes.append(outcome)
    return outcomes
