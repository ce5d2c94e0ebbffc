"""The WebAssembly kernels' build: kernels/*.wat -> the committed static/wasm/*.wasm.

The text is assembled by wasmtime's ``wat2wasm`` (the ``wasmtime`` package, a test dependency:
``pip install -e '.[test]'``), validated by wasmtime with SIMD and threads on, and stripped of its
custom sections (below). The binaries are committed, so neither the page nor the installed
package needs an assembler: this module is for whoever edits a kernel, and for
tests/wasm/test_wasm_build.py, which rebuilds every binary and compares the bytes.

``python tests/wasm_build.py`` rewrites the binaries that differ from what their sources assemble
to; ``--check`` writes nothing and exits 1, naming the command, when one is stale. A source the
assembler or the validator refuses exits 2 with its message (line and column for a parse error).
docs/KERNELS.md, "Building the WebAssembly kernels".
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import wasmtime

ROOT = Path(__file__).resolve().parents[1]
BUILD_COMMAND = "python tests/wasm_build.py"

# The shared variant's memory: imported as env.memory, shared between threads, at most this many
# 64 KiB pages (1 GiB; a shared memory must declare its maximum, and the page creates it with
# the same one: static/js/numerics/wasmpool.js SHARED_MAX_PAGES).
SHARED_MAX_PAGES = 16384
# The one memory field a kernel defines and exports, `(memory (export "memory") MIN)`.
MEMORY_FIELD = re.compile(r'\(memory \(export "memory"\) (\d+)\)')


class BuildError(Exception):
    """A source that does not assemble or validate; the message says where."""


@dataclass(frozen=True)
class Build:
    source: str  # under kernels/
    target: str  # under static/ (served at /: static/wasm/gemm_i8.wasm is /wasm/gemm_i8.wasm)
    # The same source with its memory imported and shared between threads instead of defined
    # (a pool of workers runs one kernel on one memory: docs/KERNELS.md, "A pool of workers").
    shared_memory: bool = False

    def text(self, root: Path = ROOT) -> str:
        text = (root / "kernels" / self.source).read_text(encoding="utf-8")
        return shared_variant(text, self.source) if self.shared_memory else text

    def assemble(self, root: Path = ROOT) -> bytes:
        return assemble(self.text(root), f"kernels/{self.source}")


BUILDS: tuple[Build, ...] = (
    Build("gemm_i8.wat", "wasm/gemm_i8.wasm"),
    Build("gemm_i8.wat", "wasm/gemm_i8_shared.wasm", shared_memory=True),
    Build("elementwise_f32.wat", "wasm/elementwise_f32.wasm"),
)


def shared_variant(text: str, where: str = "<wat>") -> str:
    """``text`` with its defined memory replaced by an imported, shared one (still exported)."""
    found = MEMORY_FIELD.findall(text)
    if len(found) != 1:
        raise BuildError(
            f'{where}: a shared variant needs exactly one `(memory (export "memory") MIN)`, '
            f"found {len(found)}"
        )
    shared = rf'(memory (export "memory") (import "env" "memory") \1 {SHARED_MAX_PAGES} shared)'
    return MEMORY_FIELD.sub(shared, text)


def _spans(wasm: bytes) -> list[tuple[int, int, int, int]]:
    """Each section as (id, where it starts, where its contents start, where it ends)."""
    out, at = [], 8  # after the magic number and the version
    while at < len(wasm):
        start, sid, at = at, wasm[at], at + 1
        size = shift = 0
        while True:  # unsigned LEB128
            byte, at = wasm[at], at + 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        out.append((sid, start, at, at + size))
        at += size
    return out


def sections(wasm: bytes) -> list[tuple[int, bytes]]:
    """A module's sections in order, as (id, contents)."""
    return [(sid, wasm[body:end]) for sid, _, body, end in _spans(wasm)]


def _engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    config.wasm_simd = True
    config.wasm_threads = True  # the shared variant's memory
    return wasmtime.Engine(config)


def assemble(text: str, where: str = "<wat>") -> bytes:
    """The committed form of the module ``text`` describes: wat2wasm's bytes, validated, with no
    custom section. wat2wasm adds a `name` section (the `$names` of functions and locals): 448 of
    the GEMM's 1,558 bytes, 847 of the elementwise kernel's 3,388. Every browser would fetch it for
    nothing (the gates report a trap by message, not by a function's name), and without it the
    last byte of a binary is the last `end` of its code, which the JS tests damage to see the
    binary refused (a damaged name section would be ignored)."""
    try:
        wasm = bytes(wasmtime.wat2wasm(text))
        wasmtime.Module.validate(_engine(), wasm)
    except wasmtime.WasmtimeError as exc:
        raise BuildError(f"{where}: {str(exc).replace('<anon>', where)}") from exc
    # every section as wat2wasm wrote it but the custom ones (id 0)
    return wasm[:8] + b"".join(wasm[start:end] for sid, start, _, end in _spans(wasm) if sid)


@dataclass(frozen=True)
class Outcome:
    build: Build
    size: int
    sha256: str
    changed: bool  # the committed file differed (or was missing)


def _outcome(build: Build, data: bytes, root: Path) -> Outcome:
    target = root / "static" / build.target
    current = target.read_bytes() if target.is_file() else None
    return Outcome(build, len(data), hashlib.sha256(data).hexdigest(), current != data)


def check(root: Path = ROOT) -> list[Outcome]:
    """Assembles every source; ``changed`` says which committed binaries are stale."""
    return [_outcome(b, b.assemble(root), root) for b in BUILDS]


def write(root: Path = ROOT) -> list[Outcome]:
    """Assembles every source and writes the binaries that differ (atomically)."""
    outcomes = []
    for b in BUILDS:
        data = b.assemble(root)
        outcome = _outcome(b, data, root)
        if outcome.changed:
            target = root / "static" / b.target
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the file from a static server
            os.replace(tmp, target)
        outcomes.append(outcome)
    return outcomes


def main(argv: Sequence[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(
        prog=BUILD_COMMAND, description="assemble kernels/*.wat into the committed static/wasm/"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a committed .wasm is stale"
    )
    args = parser.parse_args(argv)
    try:
        outcomes = check(root) if args.check else write(root)
    except BuildError as exc:
        print(f"wasm build: {exc}")
        return 2
    stale = False
    for o in outcomes:
        state = ("stale" if args.check else "written") if o.changed else "up to date"
        print(
            f"static/{o.build.target}: {o.size} bytes, sha256 {o.sha256[:16]}..., {state} "
            f"(from kernels/{o.build.source})"
        )
        stale |= o.changed
    if args.check and stale:
        print(f"wasm build: a committed binary differs from its source: run `{BUILD_COMMAND}`")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
