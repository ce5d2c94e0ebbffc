"""Golden data-name vectors (tests/vectors/datanames.json): what ``config.data`` strings mean.

A run names its training text (``daisychain.datanames``; docs/PROTOCOL.md, "Training data"), and
every peer must read the same name the same way: accept the same names, take the same revision,
dataset, split and column from them, refuse the same others with the same message, describe them
to people in the same words. The cases here are the ones that could drift: every kind, each
part at its bounds, a name at and one past ``MAX_LENGTH``, non-ASCII letters (which Python's
``\\w`` would take without ``re.ASCII``), ``..`` in a split, upper-case hex.
``tests/data/test_datanames.py`` checks the Python side and proves the check fires;
``tests/js/datanames.test.mjs`` replays every case through ``static/js/datanames.js``.

    python tests/vectorgen --write datanames   # regenerate tests/vectors/datanames.json
    python tests/vectorgen --check datanames   # recompute, compare (exit 1 if different)
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from daisychain import datanames
from vectorgen.files import check_texts, write_texts

FILE = "datanames.json"
FORMAT = "daisychain-datanames-vectors"
FORMAT_VERSION = 1

REV = "0123456789abcdef0123456789abcdef01234567"
REV2 = "fedcba9876543210fedcba9876543210fedcba98"
_LONG_REPO = "o" * 60 + "/" + "n" * 60


def _long_name(length: int) -> str:
    """A hub name of exactly ``length`` characters (the column fills the rest)."""
    head = f"hf:{_LONG_REPO}@{REV}:train:"
    return head + "c" * (length - len(head))


NAMES: tuple[tuple[str, str], ...] = (
    ("builtin", "builtin"),
    ("fineweb", f"fineweb@{REV}"),
    ("fineweb.upper-hex", f"fineweb@{REV.upper()}"),
    ("fineweb.short", f"fineweb@{REV[:39]}"),
    ("fineweb.trailing-newline", f"fineweb@{REV}\n"),
    ("hub", f"hf:stanfordnlp/imdb@{REV}:train:text"),
    ("hub.path-split", f"hf:HuggingFaceFW/fineweb-edu@{REV2}:sample/10BT:text"),
    ("hub.dots-dashes", f"hf:my-org/my.data_set@{REV}:valid-2:body.text"),
    ("hub.column-underscore", f"hf:a/b@{REV}:train:_text"),
    ("hub.column-digit", f"hf:a/b@{REV}:train:1text"),
    ("hub.split-dotdot", f"hf:a/b@{REV}:../train:text"),
    ("hub.split-inner-dotdot", f"hf:a/b@{REV}:x..y:text"),
    ("hub.split-empty-segment", f"hf:a/b@{REV}:train//x:text"),
    ("hub.no-owner", f"hf:imdb@{REV}:train:text"),
    ("hub.unicode-repo", f"hf:caf\u00e9/notes@{REV}:train:text"),
    ("hub.unicode-column", f"hf:a/b@{REV}:train:t\u00e9xt"),
    ("hub.branch-not-commit", "hf:a/b@main:train:text"),
    ("hub.missing-column", f"hf:a/b@{REV}:train"),
    ("hub.at-max-length", _long_name(datanames.MAX_LENGTH)),
    ("hub.past-max-length", _long_name(datanames.MAX_LENGTH + 1)),
    ("local", f"local:my-notes@{REV2}"),
    ("local.label-48", f"local:{'l' * 48}@{REV2}"),
    ("local.label-49", f"local:{'l' * 49}@{REV2}"),
    ("local.no-digest", "local:notes"),
    ("empty", ""),
    ("other-scheme", f"s3://bucket/x@{REV}"),
    ("astral", "fineweb@\U0001f600" + REV[:39]),
)


def _case(name: str, data: str) -> dict[str, Any]:
    try:
        parsed = datanames.parse(data)
    except ValueError as exc:
        return {"name": name, "data": data, "error": str(exc)}
    parts = None if parsed is None else asdict(parsed) | {"source": parsed.source}
    return {"name": name, "data": data, "parsed": parts, "describe": datanames.describe(data)}


def build() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "generated_by": "python tests/vectorgen --write datanames (daisychain.datanames)",
        "max_length": datanames.MAX_LENGTH,
        "fields": {
            "parsed": "null for builtin, else the parts of the name (kind fineweb|hub|local, "
            "revision, repo, split, column, label: empty where the kind has none; source: "
            "the `source` of the server's answers)",
            "describe": "the words people read for the name",
            "error": "the name is refused with exactly this message",
        },
        "cases": [_case(name, data) for name, data in NAMES],
    }


def render() -> str:
    return json.dumps(build(), indent=1, ensure_ascii=False) + "\n"


def write(directory: Path) -> str:
    return write_texts(directory, {FILE: render()})


def check(directory: Path) -> str:
    return check_texts(
        directory, {FILE: render()}, "run `python tests/vectorgen --write datanames`"
    )
