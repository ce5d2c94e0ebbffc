"""The ``daisychain`` command line: one subcommand per module, found by name.

Each subcommand module exposes ``add_arguments(parser)`` and ``run(args) -> int``. Modules are
imported only when their subcommand runs, so ``daisychain --help`` stays fast and a missing
optional dependency only affects the subcommand that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

DESCRIPTION = "DaisyChain: train one small language model together on the devices you own."

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "daisychain.localtrain",
        "train a model in this process (built-in corpus or a text file)",
    ),
    "bench": ("daisychain.bench", "run a benchmark and print JSON (gemm, step, converge, ...)"),
    "serve": ("daisychain.server.main", "run the DaisyChain server"),
    "luts": ("daisychain.luts", "regenerate or verify the unit tables in luts/"),
    "tokenizer": ("daisychain.tokenizer.train", "train the byte-level BPE tokenizer"),
    "demo": ("daisychain.demo", "start a local server and three peers, train a few steps"),
    "selftest": ("daisychain.selftest", "check the compute backends here (gates, probe)"),
    "generate": ("daisychain.generate", "continue a prompt from a checkpoint (seeded, exact)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="daisychain", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        parser = build_parser()
        if args and not args[0].startswith("-"):
            parser.error(f"unknown command {args[0]!r}; choose one of: {', '.join(COMMANDS)}")
        parser.parse_args(args)
        parser.print_help()
        return 0 if args else 2
    name, rest = args[0], args[1:]
    module = importlib.import_module(COMMANDS[name][0])
    # Every option's default is shown by --help (docs/USAGE.md lists them too).
    sub = argparse.ArgumentParser(
        prog=f"daisychain {name}",
        description=COMMANDS[name][1],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    module.add_arguments(sub)
    if name == "bench":
        # The benchmark declares its own options: pass everything after NAME through (its own
        # --help included, once a NAME is given).
        if rest and not rest[0].startswith("-"):
            parsed, extra = sub.parse_known_args(rest[:1])
            parsed.json = "--json" in rest[1:]
            extra = [a for a in rest[1:] if a != "--json"]
        else:
            parsed, extra = sub.parse_known_args(rest)
        parsed.extra = extra + (["--json"] if parsed.json else [])
        code: int = module.run(parsed)
        return code
    code = module.run(sub.parse_args(rest))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
