"""``python -m daisychain.p2p.traces --write|--check [--dir DIR]``: regenerate the protocol
conformance traces (tests/vectors/protocol/*.json) or replay the stored ones on this machine."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from daisychain.p2p.traces.replay import TraceMismatch, load, replay
from daisychain.p2p.traces.scenarios import SCENARIOS


def default_dir() -> Path:
    return Path(__file__).resolve().parents[4] / "tests" / "vectors" / "protocol"


def write(directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    names = set()
    for name, scenario in SCENARIOS.items():
        text = json.dumps(scenario().trace(), indent=1, sort_keys=False) + "\n"
        (directory / f"{name}.json").write_text(text, encoding="utf-8")
        names.add(f"{name}.json")
    for stale in directory.glob("*.json"):
        if stale.name not in names:
            stale.unlink()
    print(f"wrote {len(names)} traces to {directory}")
    return 0


def check(directory: Path) -> int:
    paths = sorted(directory.glob("*.json"))
    if {p.stem for p in paths} != set(SCENARIOS):
        print(f"{directory}: traces {sorted(p.stem for p in paths)} do not match the scenarios "
              f"{sorted(SCENARIOS)}; run --write", file=sys.stderr)  # fmt: skip
        return 1
    for path in paths:
        try:
            replay(load(path))
        except TraceMismatch as exc:
            print(f"{path.name}: {exc}", file=sys.stderr)
            return 1
    print(f"{len(paths)} traces replayed, every effect matched")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daisychain.p2p.traces", description=__doc__)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate every trace")
    mode.add_argument("--check", action="store_true", help="replay every stored trace")
    parser.add_argument("--dir", type=Path, default=default_dir())
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.CRITICAL)  # the traces provoke errors on purpose
    return write(args.dir) if args.write else check(args.dir)


if __name__ == "__main__":
    sys.exit(main())
