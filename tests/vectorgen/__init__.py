"""The golden vectors: every file in tests/vectors/ and the one command that writes and checks
them, ``python tests/vectorgen --write|--check [SET ...]``.

A vector set is a module of this package with ``write(directory) -> str`` (regenerate its files
from the Python reference; returns a summary line) and ``check(directory) -> str`` (recompute in
memory and compare; raises ``files.Stale`` naming the first file or case that differs). The
JavaScript mirror, the WGSL gates and the browser load the same files (tests/vectors/README.md
says who checks each one). ``SETS`` below is the whole list; a new set is one module and one
row.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from vectorgen.files import SOURCE_DIR, Stale


@dataclass(frozen=True)
class VectorSet:
    name: str
    module: str  # imported when the set runs: some generators train a model first
    files: str  # where under tests/vectors/
    what: str

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


SETS: dict[str, VectorSet] = {
    s.name: s
    for s in (
        VectorSet(
            "contract",
            "vectorgen.contract",
            "manifest.json, blobs/",
            "the numerical contract: quantize, GEMMs, exp/log, model steps, train_run",
        ),
        VectorSet(
            "tokenizer",
            "vectorgen.tokenizer",
            "tokenizer.json",
            "text -> ids of the shipped tokenizer, one case per rule of the pre-splitter and BPE",
        ),
        VectorSet(
            "wire",
            "vectorgen.wire",
            "p2p_wire/",
            "data-channel frames and control messages: built, accepted and refused",
        ),
        VectorSet(
            "fineweb",
            "vectorgen.fineweb",
            "fineweb/",
            "FineWeb-Edu addressing: a run's address -> window of text -> token ids",
        ),
        VectorSet(
            "datanames",
            "vectorgen.datanames",
            "datanames.json",
            "data names (config.data): parsed parts, descriptions and refusals",
        ),
        VectorSet(
            "protocol",
            "vectorgen.protocol",
            "protocol/",
            "conformance traces: events into the protocol machine, effects out",
        ),
        VectorSet(
            "sha256",
            "vectorgen.sha256",
            "sha256.json",
            "SHA-256 known answers for the page's own SHA-256 (hashlib's digests)",
        ),
        VectorSet(
            "generation",
            "vectorgen.generation",
            "generate/",
            "sampling: prompt and settings -> ids, from a checkpoint rebuilt by its recipe",
        ),
        VectorSet(
            "outer",
            "vectorgen.outer",
            "outer/",
            "the outer loop: token-weighted mean, Nesterov outer step, outer_hash",
        ),
        VectorSet(
            "gates",
            "vectorgen.gates",
            "gates.json",
            "the GEMM gate inputs: names, shapes, operand digests, casesDigest()",
        ),
    )
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the vector files")
    mode.add_argument("--check", action="store_true", help="recompute and compare bit for bit")
    mode.add_argument("--list", action="store_true", help="name every set and its files")
    parser.add_argument(
        "sets", nargs="*", metavar="SET", help=f"sets to run (default: all): {', '.join(SETS)}"
    )
    parser.add_argument(
        "--dir", type=Path, default=SOURCE_DIR, help="the vector folder (default: the source tree)"
    )


def run(args: argparse.Namespace) -> int:
    unknown = [name for name in args.sets if name not in SETS]
    if unknown:
        print(
            f"vectors: no set named {', '.join(map(repr, unknown))}; the sets are: "
            f"{', '.join(SETS)} (python tests/vectorgen --list)",
            file=sys.stderr,
        )
        return 2
    chosen = [SETS[name] for name in (args.sets or SETS)]
    if args.list:
        for s in chosen:
            print(f"{s.name:<11} tests/vectors/{s.files:<22} {s.what}")
        return 0
    logging.basicConfig(level=logging.CRITICAL)  # the protocol traces provoke errors on purpose
    stale = 0
    for s in chosen:
        module = s.load()
        if args.write:
            print(f"{s.name}: {module.write(args.dir)}")
            continue
        try:
            print(f"{s.name}: {module.check(args.dir)}")
        except Stale as exc:
            stale += 1
            print(f"{s.name}: STALE: {exc}", file=sys.stderr)
    return 1 if stale else 0


def main(argv: list[str] | None = None) -> int:
    """``python tests/vectorgen`` as a function (what the tests call)."""
    parser = argparse.ArgumentParser(prog="python tests/vectorgen")
    add_arguments(parser)
    return run(parser.parse_args(argv))
