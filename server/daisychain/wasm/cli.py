"""``daisychain wasm build [--check]``: assemble kernels/*.wat into the committed static/ binaries.

Without ``--check`` every binary that differs from what its source assembles to is rewritten;
with it nothing is written and the exit status is 1 when any is stale (what CI and the tests
check). A source the assembler refuses prints its position and a hint and exits 2.
"""

from __future__ import annotations

import argparse

from daisychain.wasm.build import BUILD_COMMAND, BUILDS, check, write
from daisychain.wasm.errors import WatError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["build"], help="assemble the .wat sources")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a committed .wasm is stale"
    )


def run(args: argparse.Namespace) -> int:
    try:
        outcomes = check(BUILDS) if args.check else write(BUILDS)
    except WatError as exc:
        print(f"daisychain wasm: {exc}")
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
        print(f"daisychain wasm: a committed binary differs from its source: run `{BUILD_COMMAND}`")
        return 1
    return 0
