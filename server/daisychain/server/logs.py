"""Structured logging: one line per record, ``key=value`` (default) or JSON.

Modules log with the standard ``logging`` API; structured fields travel in
``extra={"fields": {...}}`` and come out as extra keys, so a log pipeline can filter on
``peer=...`` or ``state=...`` without parsing prose.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

LogFormat = Literal["kv", "json"]

_BASE = ("ts", "level", "logger", "msg")


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    extra = getattr(record, "fields", None)
    if isinstance(extra, dict):
        for key, value in extra.items():
            fields.setdefault(str(key), value)
    if record.exc_info:
        fields["exc"] = logging.Formatter().formatException(record.exc_info)
    return fields


def _kv_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n\t'):
        return json.dumps(text)
    return text


class KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_kv_value(v)}" for k, v in _record_fields(record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_record_fields(record), default=str)


class Throttle:
    """Log lines one source (a connection) may write: ``burst`` at once, then one per
    ``every_s``; what it holds back is counted and reported with the next line it lets through.

    A client that sends nothing but bad input must not be able to fill the disk or stall the
    event loop on logging: it gets a few lines, then a count.
    """

    def __init__(
        self, burst: int = 5, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        assert burst >= 1 and every_s > 0, f"bad throttle burst={burst} every_s={every_s}"
        self.burst = burst
        self.every_s = every_s
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self.suppressed = 0  # held back since the last line let through

    def allow(self) -> int | None:
        """None: drop this line (counted). Else the number dropped since the last one allowed."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) / self.every_s)
        self._last = now
        if self._tokens < 1.0:
            self.suppressed += 1
            return None
        self._tokens -= 1.0
        dropped, self.suppressed = self.suppressed, 0
        return dropped

    def log(self, logger: logging.Logger, level: int, msg: str, *args: object) -> None:
        """``logger.log(level, msg, *args)`` unless throttled; notes how many lines were held."""
        dropped = self.allow()
        if dropped is None:
            return
        if dropped:
            msg += " (%d similar lines suppressed)"
            args = (*args, dropped)
        logger.log(level, msg, *args)


def configure(level: str = "info", fmt: LogFormat = "kv") -> None:
    """Send every logger's records to stderr in the chosen format (replaces other handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
