"""Field validation shared by every JSON message parser (signaling and data channels).

``wire.signaling`` (docs/PROTOCOL.md "Signaling") and ``wire.messages`` (data
channels, "Control messages") each declare their own records and error type; what they share is
how a field of an untrusted JSON object is checked. ``Fields`` does the checking and leaves the
error to its subclass (``bad``), so each protocol keeps its own error codes, texts and hints.
"""

from __future__ import annotations

import math
import re
from typing import Any

PEER_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")  # server-assigned peer ids


class Fields:
    """Typed access to the fields of one JSON object; every failure names the field."""

    def __init__(self, obj: dict[str, Any], kind: str) -> None:
        self.obj_ = obj
        self.kind = kind

    def bad(self, name: str, expected: str) -> Exception:
        """The error raised for field ``name`` not being ``expected`` (per protocol)."""
        raise NotImplementedError

    def integer(self, name: str, lo: int | None = None, hi: int | None = None) -> int:
        value = self.obj_.get(name)
        # bool is an int subclass in Python; true is not a number of anything.
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.bad(name, _integer_expected(lo, hi))
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise self.bad(name, _integer_expected(lo, hi))
        return value

    def number(self, name: str, lo: float, hi: float) -> float:
        value = self.obj_.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.bad(name, "a number")
        try:
            value = float(value)
        except OverflowError:  # an integer literal beyond float range (1 followed by 400 zeros)
            raise self.bad(name, "a finite number") from None
        if not (math.isfinite(value) and lo <= value <= hi):
            bounded = math.isfinite(lo) or math.isfinite(hi)
            raise self.bad(
                name, f"a finite number in [{lo}, {hi}]" if bounded else "a finite number"
            )
        return value

    def text(self, name: str, max_chars: int) -> str:
        value = self.obj_.get(name)
        if not isinstance(value, str) or len(value) > max_chars:
            raise self.bad(name, f"a string of at most {max_chars} characters")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.obj_.get(name)
        if value is not None and not isinstance(value, str):
            raise self.bad(name, "a string or absent")
        return value

    def optional_flag(self, name: str) -> bool:
        """A JSON boolean, or absent (false). Only ``true``/``false``: 1 or "yes" is refused."""
        value = self.obj_.get(name, False)
        if not isinstance(value, bool):
            raise self.bad(name, "true, false or absent")
        return value

    def choice(self, name: str, options: tuple[str, ...]) -> str:
        value = self.obj_.get(name)
        if value not in options:
            raise self.bad(name, f"one of {', '.join(options)}")
        assert isinstance(value, str)
        return value

    def obj(self, name: str) -> dict[str, Any]:
        value = self.obj_.get(name)
        if not isinstance(value, dict):
            raise self.bad(name, "a JSON object")
        return value

    def matching(self, name: str, pattern: re.Pattern[str], expected: str) -> str:
        value = self.obj_.get(name)
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise self.bad(name, expected)
        return value

    def ids(self, name: str, max_count: int) -> list[str]:
        value = self.obj_.get(name)
        if (
            not isinstance(value, list)
            or len(value) > max_count
            or not all(isinstance(v, str) and PEER_ID_RE.fullmatch(v) for v in value)
            or len(set(value)) != len(value)
        ):
            raise self.bad(name, f"a list of at most {max_count} distinct peer ids")
        return list(value)


def _integer_expected(lo: int | None, hi: int | None) -> str:
    return "an integer" if lo is None or hi is None else f"an integer in [{lo}, {hi}]"
