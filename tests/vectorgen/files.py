"""What every golden-vector set shares: where the files live, the error a check raises, and
write/check for the sets whose files are text rebuilt whole by their generator."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# The committed vectors, in the source tree (tests/vectors/); ``--dir`` points elsewhere.
SOURCE_DIR = Path(__file__).resolve().parents[1] / "vectors"


class Stale(Exception):
    """A committed vector file differs from what its generator makes now. The message names the
    file (or case) and says what to do."""


def write_texts(directory: Path, files: Mapping[str, str]) -> str:
    """Write each ``relative path -> text``; returns a one-line summary."""
    for name, text in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return f"wrote {', '.join(files)}"


def check_texts(directory: Path, files: Mapping[str, str], why: str) -> str:
    """Raise Stale naming the first file that is missing or differs from ``files``; ``why``
    says what a difference means (what changed, what else to update)."""
    for name, text in files.items():
        path = directory / name
        if not path.is_file():
            raise Stale(f"{path} is missing; {why}")
        if path.read_text(encoding="utf-8") != text:
            raise Stale(f"{path} differs from what the generator makes now; {why}")
    return f"{', '.join(files)} up to date"
