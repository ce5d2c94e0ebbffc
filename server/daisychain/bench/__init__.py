"""``daisychain bench NAME``: benchmarks that print one JSON document.

Each benchmark lives in ``daisychain/bench/<name>.py`` and exposes
``add_arguments(parser)`` (optional) and ``measure(args) -> dict``. Every comparison against a
baseline measured in the same run is reported under a key containing ``ratio``: the machines are
shared and noisy, so absolute times are leads, ratios are the result.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
from types import ModuleType


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def _load(name: str) -> ModuleType:
    if name not in available():
        raise SystemExit(
            f"daisychain bench: unknown benchmark {name!r}; choose one of: {', '.join(available())}"
        )
    return importlib.import_module(f"{__name__}.{name}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help=f"benchmark to run ({', '.join(available())})")
    parser.add_argument("--json", action="store_true", help="print only the JSON document")


def run(args: argparse.Namespace) -> int:
    # Parse in two stages so each benchmark can declare its own options.
    module = _load(args.name)
    parser = argparse.ArgumentParser(prog=f"daisychain bench {args.name}")
    parser.add_argument("--json", action="store_true", help="print only the JSON document")
    if hasattr(module, "add_arguments"):
        module.add_arguments(parser)
    bench_args = parser.parse_args(getattr(args, "extra", None) or [])
    result = module.measure(bench_args)
    print(json.dumps(result, indent=None if bench_args.json else 2, sort_keys=True))
    return 0
