"""Structured logging: one line per record, ``key=value`` (default) or JSON, each bounded.

Modules log with the standard ``logging`` API; structured fields travel in
``extra={"fields": {...}}`` and come out as extra keys, so a log pipeline can filter on
``peer=...`` or ``state=...`` without parsing prose.

Every line is bounded whatever a client sends: the message is cut at ``MAX_MESSAGE_CHARS``,
each field at ``MAX_FIELD_CHARS`` and a traceback at ``MAX_TRACEBACK_CHARS``, each cut value
saying how long it was (``...(+3987 chars)``), so a 4,000-digit value echoed in a refusal costs
the disk a few hundred bytes. How many lines one client may cause is bounded by ``Throttle`` and
``KeyedThrottle``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Literal

LogFormat = Literal["kv", "json"]

_BASE = ("ts", "level", "logger", "msg")
MAX_MESSAGE_CHARS = 400
MAX_FIELD_CHARS = 200
MAX_FIELDS = 16
MAX_TRACEBACK_CHARS = 4000


def cut(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its start and how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...(+{len(text) - limit} chars)"


def _bounded(value: Any) -> Any:
    """A field value as a line may hold it: numbers and booleans as they are, anything else as
    text cut at ``MAX_FIELD_CHARS``."""
    if value is None or (isinstance(value, bool | int | float) and len(repr(value)) <= 32):
        return value
    return cut(str(value), MAX_FIELD_CHARS)


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": cut(record.getMessage(), MAX_MESSAGE_CHARS),
    }
    extra = getattr(record, "fields", None)
    if isinstance(extra, dict):
        for i, (key, value) in enumerate(extra.items()):
            if i == MAX_FIELDS:
                fields["fields_left_out"] = len(extra) - MAX_FIELDS
                break
            fields.setdefault(cut(str(key), 40), _bounded(value))
    if record.exc_info:
        trace = logging.Formatter().formatException(record.exc_info)
        fields["exc"] = cut(trace, MAX_TRACEBACK_CHARS)
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

    def idle(self) -> bool:
        """Nothing held back and the burst refilled: a fresh throttle would behave the same."""
        now = self._clock()
        refilled = self._tokens + (now - self._last) / self.every_s
        return self.suppressed == 0 and refilled >= self.burst

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

    def log(
        self,
        logger: logging.Logger,
        level: int,
        msg: str,
        *args: object,
        fields: dict[str, Any] | None = None,
    ) -> None:
        """``logger.log(level, msg, *args)`` unless throttled; notes how many lines were held."""
        dropped = self.allow()
        if dropped is None:
            return
        if dropped:
            msg += " (%d similar lines suppressed)"
            args = (*args, dropped)
        logger.log(level, msg, *args, extra={"fields": fields} if fields else None)


class KeyedThrottle:
    """One ``Throttle`` per key (a client network, a kind of line), for at most ``max_keys``
    keys: the least recently used is forgotten first, so a client that keeps changing keys
    costs a bounded table, and a forgotten key only starts again with a fresh burst."""

    def __init__(
        self,
        burst: int = 5,
        every_s: float = 60.0,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        *,
        what: str = "",
    ) -> None:
        assert max_keys >= 1, f"bad max_keys={max_keys}"
        self.burst, self.every_s, self.max_keys = burst, every_s, max_keys
        self._clock = clock
        self._throttles: OrderedDict[str, Throttle] = OrderedDict()
        # What its lines are about, for report_held ("" reports nothing: unit tests).
        self.what = what
        self.forgotten = 0  # held back by throttles since forgotten (report_held counts them)
        if what:
            _REPORTED.add(self)

    def __len__(self) -> int:
        return len(self._throttles)

    def get(self, key: str) -> Throttle:
        throttle = self._throttles.get(key)
        for _ in range(2):  # forget idle keys (a client's network need not be kept), O(1)
            oldest = next(iter(self._throttles.values()), None)
            if oldest is None or oldest is throttle or not oldest.idle():
                break
            self._throttles.popitem(last=False)
        if throttle is None:
            throttle = Throttle(self.burst, self.every_s, self._clock)
            self._throttles[key] = throttle
            while len(self._throttles) > self.max_keys:
                self.forgotten += self._throttles.popitem(last=False)[1].suppressed
        else:
            self._throttles.move_to_end(key)
        return throttle

    def log(
        self,
        key: str,
        logger: logging.Logger,
        level: int,
        msg: str,
        *args: object,
        fields: dict[str, Any] | None = None,
    ) -> None:
        self.get(key).log(logger, level, msg, *args, fields=fields)

    def take_held(self) -> tuple[int, int]:
        """(lines held back, keys that held them) since the last call; the counts start again
        from zero, so no line reports them twice."""
        held, keys = self.forgotten, 0
        self.forgotten = 0
        for throttle in self._throttles.values():
            if throttle.suppressed:
                held, keys = held + throttle.suppressed, keys + 1
                throttle.suppressed = 0
        return held, keys


# Every KeyedThrottle with a ``what``, while it exists (an app's go with the app).
_REPORTED: weakref.WeakSet[KeyedThrottle] = weakref.WeakSet()


def report_held(logger: logging.Logger) -> int:
    """One line per kind of throttled line that held some back since the last report: how many,
    from how many client networks (never which: the keys are addresses). Returns the lines
    written."""
    written = 0
    for throttle in sorted(_REPORTED, key=lambda t: t.what):
        held, keys = throttle.take_held()
        if held:
            logger.info(
                "%d log lines held back (%s) from %d client networks",
                held, throttle.what, keys,
                extra={"fields": {"held": held, "networks": keys, "about": throttle.what}},
            )  # fmt: skip
            written += 1
    return written


async def held_lines_reporter(logger: logging.Logger, period_s: float = 60.0) -> None:
    """``report_held`` every ``period_s`` until cancelled (the app's cleanup cancels it)."""
    while True:
        await asyncio.sleep(period_s)
        report_held(logger)


def configure(level: str = "info", fmt: LogFormat = "kv") -> None:
    """Send every logger's records to stderr in the chosen format (replaces other handlers)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else KeyValueFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
